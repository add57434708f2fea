// SPDX-License-Identifier: BSD-3-Clause
/* The watchdog's progress board over MPI (comm/watchdog.h): an MPI-3
 * shared window over the ranks of this host, one region per rank, so that
 * a rank's watchdog can read what its peers are doing while its own main
 * thread is stuck inside MPI; across hosts, copies of the regions sent
 * each round. Made at tpdp_init when TPDP_TIMEOUT_S > 0, freed at
 * tpdp_finalize. The watchdog itself (comm/watchdog.c) calls no MPI: it
 * gets the regions, the exchange and the abort from here. */
#include <stdlib.h>
#include <string.h>

#include "comm/mpi_internal.h"

static MPI_Comm board_comm = MPI_COMM_NULL;
static MPI_Win board_win = MPI_WIN_NULL;

/* Across hosts (comm/watchdog.h): each round the watchdog thread sends a
 * copy of its region to every rank on another host, on a communicator of
 * its own, without blocking: a round whose previous sends have not all
 * completed (a peer stopped, a slow network) sends nothing. */
#define MIRROR_TAG 7411
static MPI_Comm mirror_comm = MPI_COMM_NULL;
static int *mirror_peers; /* world ranks on other hosts */
static int mirror_n;
static MPI_Request *mirror_req;
static watch_region mirror_copy; /* what the pending sends send */

static void mirror_exchange(const watch_region *mine, watch_region *remote,
                            int *arrived) {
  int done = 1;
  if (mirror_n > 0 && MPI_Testall(mirror_n, mirror_req, &done,
                                  MPI_STATUSES_IGNORE) != MPI_SUCCESS)
    done = 0;
  if (done && mine != NULL) {
    memcpy(&mirror_copy, mine, sizeof mirror_copy);
    for (int i = 0; i < mirror_n; i++)
      if (MPI_Isend(&mirror_copy, (int)sizeof mirror_copy, MPI_BYTE,
                    mirror_peers[i], MIRROR_TAG, mirror_comm,
                    &mirror_req[i]) != MPI_SUCCESS)
        mirror_req[i] = MPI_REQUEST_NULL;
  }
  for (;;) { /* everything that has arrived; the latest copy wins */
    int flag = 0;
    MPI_Status status;
    if (MPI_Iprobe(MPI_ANY_SOURCE, MIRROR_TAG, mirror_comm, &flag, &status) !=
            MPI_SUCCESS ||
        !flag)
      break;
    int src = status.MPI_SOURCE;
    if (MPI_Recv(&remote[src], (int)sizeof *remote, MPI_BYTE, src, MIRROR_TAG,
                 mirror_comm, MPI_STATUS_IGNORE) != MPI_SUCCESS)
      break;
    arrived[src] = 1;
  }
}

static void free_mirror(void) {
  int finalized = 0;
  MPI_Finalized(&finalized);
  for (int i = 0; !finalized && i < mirror_n; i++)
    if (mirror_req[i] != MPI_REQUEST_NULL) MPI_Request_free(&mirror_req[i]);
  if (!finalized && mirror_comm != MPI_COMM_NULL) MPI_Comm_free(&mirror_comm);
  mirror_comm = MPI_COMM_NULL;
  free(mirror_peers);
  free(mirror_req);
  mirror_peers = NULL;
  mirror_req = NULL;
  mirror_n = 0;
}

/* The ranks on other hosts than this one's `n` board members `world`, and
 * the communicator the copies travel on; none with one host, or without
 * MPI_THREAD_MULTIPLE (the watchdog thread would call MPI beside the
 * caller's). */
static tpdp_status make_mirror(const int *world, int n, int world_size,
                               int thread_level) {
  if (n >= world_size || thread_level < MPI_THREAD_MULTIPLE)
    return TPDP_SUCCESS;
  CHECK(TPDP_CALLOC(mirror_peers, (size_t)(world_size - n)));
  CHECK(TPDP_CALLOC(mirror_req, (size_t)(world_size - n)));
  for (int q = 0; q < world_size; q++) {
    int local = 0;
    for (int i = 0; i < n; i++) local |= world[i] == q;
    if (!local) mirror_peers[mirror_n++] = q;
  }
  for (int i = 0; i < mirror_n; i++) mirror_req[i] = MPI_REQUEST_NULL;
  MPI_CHECK(NULL, MPI_Comm_dup, MPI_COMM_WORLD, &mirror_comm);
  MPI_CHECK(NULL, MPI_Comm_set_errhandler, mirror_comm, MPI_ERRORS_RETURN);
  return TPDP_SUCCESS;
}

/* After a timeout (the watchdog has printed why): the job ends through
 * MPI. A rank stuck inside MPI returns no status that tpdp could report,
 * so ending the job is the one way out left (the library ends the job
 * nowhere else). The watchdog thread calls it while another thread may be
 * inside MPI: tpdp_init asks for MPI_THREAD_MULTIPLE. */
static void abort_job(void) { MPI_Abort(MPI_COMM_WORLD, TPDP_ERR_TIMEOUT); }

static tpdp_status free_board(void) {
  core_first_error f;
  core_first_error_init(&f);
  free_mirror();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && board_win != MPI_WIN_NULL)
    core_first_error_add(
        &f, comm_mpi_status(MPI_Win_free(&board_win), "MPI_Win_free", NULL));
  if (!finalized && board_comm != MPI_COMM_NULL)
    core_first_error_add(
        &f, comm_mpi_status(MPI_Comm_free(&board_comm), "MPI_Comm_free", NULL));
  board_win = MPI_WIN_NULL;
  board_comm = MPI_COMM_NULL;
  return f.status;
}

/* The board's regions and their world ranks into the caller's arrays of
 * the host's size (*n). */
static tpdp_status make_board(int world_rank, watch_region ***regions,
                              int **world, int *n) {
  int me = 0;
  void *base = NULL;
  MPI_CHECK(NULL, MPI_Comm_split_type, MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0,
            MPI_INFO_NULL, &board_comm);
  MPI_CHECK(NULL, MPI_Comm_set_errhandler, board_comm, MPI_ERRORS_RETURN);
  MPI_CHECK(NULL, MPI_Comm_rank, board_comm, &me);
  MPI_CHECK(NULL, MPI_Comm_size, board_comm, n);
  size_t bytes = comm_watch_region_bytes();
  MPI_CHECK(NULL, MPI_Win_allocate_shared, (MPI_Aint)bytes, 1, MPI_INFO_NULL,
            board_comm, &base, &board_win);
  MPI_CHECK(NULL, MPI_Win_set_errhandler, board_win, MPI_ERRORS_RETURN);
  memset(base, 0, bytes); /* before the allgather: no peer reads it yet */
  CHECK(TPDP_CALLOC(*regions, (size_t)*n));
  CHECK(TPDP_CALLOC(*world, (size_t)*n));
  MPI_CHECK(NULL, MPI_Allgather, &world_rank, 1, MPI_INT, *world, 1, MPI_INT,
            board_comm);
  for (int q = 0; q < *n; q++) {
    MPI_Aint size = 0;
    int unit = 0;
    MPI_CHECK(NULL, MPI_Win_shared_query, board_win, q, &size, &unit,
              &(*regions)[q]);
  }
  return TPDP_SUCCESS;
}

tpdp_status comm_mpi_watchdog_start(int thread_level) {
  comm_watchdog_config cfg = {0};
  cfg.timeout_s = comm_timeout_read();
  if (cfg.timeout_s <= 0) return TPDP_SUCCESS; /* no bound, no board */
  MPI_CHECK(NULL, MPI_Comm_rank, MPI_COMM_WORLD, &cfg.world_rank);
  watch_region **regions = NULL;
  int *world = NULL, n = 0;
  tpdp_status st = make_board(cfg.world_rank, &regions, &world, &n);
  if (st == TPDP_SUCCESS) {
    cfg.nregions = n;
    cfg.regions = regions;
    cfg.region_world = world;
    for (int q = 0; q < n; q++)
      if (world[q] == cfg.world_rank) cfg.my_region = q;
    cfg.abort_job = abort_job;
    MPI_Comm_size(MPI_COMM_WORLD, &cfg.world_size);
    st = make_mirror(world, n, cfg.world_size, thread_level);
    if (st == TPDP_SUCCESS && mirror_comm != MPI_COMM_NULL)
      cfg.exchange = mirror_exchange;
  }
  if (st == TPDP_SUCCESS) {
    st = comm_watchdog_start(&cfg); /* copies the arrays */
  }
  free(regions);
  free(world);
  if (st != TPDP_SUCCESS) {
    core_first_error f;
    core_first_error_init(&f);
    core_first_error_add(&f, st);
    core_first_error_add(&f, free_board());
    return f.status;
  }
  return TPDP_SUCCESS;
}

tpdp_status comm_mpi_watchdog_stop(void) {
  core_first_error f;
  core_first_error_init(&f);
  core_first_error_add(&f, comm_watchdog_stop());
  core_first_error_add(&f, free_board());
  return f.status;
}
