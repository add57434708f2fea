// SPDX-License-Identifier: BSD-3-Clause
/* The MPI backend: tpdp_comm over host memory with Open MPI.
 *
 * Asynchronous calls use MPI's non-blocking collectives; calls the front end
 * marks blocking use the blocking ones, which Open MPI tunes better. f16 and
 * bf16 travel as 16-bit integers and are reduced by user-defined ops that
 * compute in f32 and round once per combine, as NCCL does. AVG is SUM
 * followed by a division when the work completes, except for blocking AVG
 * of large f32/f64 messages, which run as a ring over MPI_Sendrecv that
 * divides inside its last add (ring_allreduce_avg below). */
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/backend.h"
#include "comm/watchdog.h"
#include "core/half.h"

typedef struct {
  MPI_Comm comm;
  void *scratch; /* ring allreduce: one received chunk */
  size_t scratch_bytes;
  comm_watch watch; /* TPDP_TIMEOUT_S (comm/watchdog.h) */
} mpi_comm_impl;

typedef struct pieces_sum pieces_sum;

typedef struct {
  MPI_Request request;
  /* The requests waited for: &request, or one per peer and direction
   * (collectives over pieces). */
  MPI_Request *reqs;
  int nreqs, cap_reqs;
  pieces_sum *sum; /* reduce-scatter over pieces: the sum at completion */
  int done;
  /* post-processing once the data is in place */
  int divide;           /* AVG: divide recv by the comm size */
  tpdp_tensor avg_view; /* what to divide */
  void *move_dst;       /* in-place reduce_scatter: move result here */
  const void *move_src;
  size_t move_bytes;
  void *scratch; /* temporary buffer to free */
  /* The watch record of a non-blocking call: its sequence number and what
   * it is, for the wait. */
  comm_watch *watch;
  int64_t seq;
  int dtype;
  int64_t count;
} mpi_work_impl;

/* A work handle and its MPI state in one allocation; `work` comes first so
 * that free(work) releases the block. */
typedef struct {
  tpdp_work work;
  mpi_work_impl impl;
} mpi_work_block;

/* user-defined ops for 16-bit floats: [dtype f16=0 bf16=1][op sum max min] */
static MPI_Op half_ops[2][3];
/* The thread support MPI was initialised with (MPI_Query_thread). */
static int thread_level = MPI_THREAD_SINGLE;
static int half_ops_ready;

/* Ring AVG (see ring_allreduce_avg): the smallest message in bytes that
 * takes it (smaller ones: MPI_Allreduce SUM, then a division), and the
 * bytes per MPI_Sendrecv of its reduce-scatter. Read once at init from
 * TPDP_MPI_RING_AVG_MIN_BYTES (< 0 disables the ring) and
 * TPDP_MPI_RING_CHUNK_BYTES; every rank must see the same values, since
 * they decide which algorithm a collective runs. Measured on 2 ranks of
 * the 2-core development VM: the ring beats MPI_Allreduce + division from
 * 64 KiB up (45 vs 58 us at 256 KiB), but it takes 2 (size-1) latency
 * steps where MPI uses log2(size) for small messages, so the threshold
 * stays at 256 KiB. Chunks: over the bench's 17-27 MB buckets, 256-512 KiB
 * ran 1-3% under MPI_Allreduce SUM, 1 MiB 2-3% over, unchunked 7-12%
 * over. */
#define RING_AVG_MIN_BYTES_DEFAULT (256L * 1024)
#define RING_CHUNK_BYTES_DEFAULT (512L * 1024)
static long ring_min_bytes = RING_AVG_MIN_BYTES_DEFAULT;
static long ring_chunk_bytes = RING_CHUNK_BYTES_DEFAULT;

/* MPI's text for an error code (its number if MPI has none). */
static void mpi_error_text(int code, char *msg) {
  int len = 0;
  if (MPI_Error_string(code, msg, &len) != MPI_SUCCESS)
    snprintf(msg, MPI_MAX_ERROR_STRING, "MPI error %d", code);
}

/* TPDP_ERR_MPI naming the call, the communicator and MPI's text;
 * TPDP_SUCCESS for MPI_SUCCESS. */
static tpdp_status mpi_status(int code, const char *call, const tpdp_comm *c) {
  if (code == MPI_SUCCESS) return TPDP_SUCCESS;
  char msg[MPI_MAX_ERROR_STRING];
  mpi_error_text(code, msg);
  return TPDP_ERR(TPDP_ERR_MPI, "%s failed on %s (rank %d): %s", call,
                  c ? c->name : "MPI_COMM_WORLD", c ? c->rank : -1, msg);
}

/* Call MPI function `fn` with the remaining arguments; on failure return
 * TPDP_ERR_MPI naming it (and communicator `comm`, NULL: the world). */
#define MPI_CHECK(comm, fn, ...) CHECK(mpi_status(fn(__VA_ARGS__), #fn, (comm)))

/* ---------------------------------------------------------- half ops */

#define HALF_OP(name, to_f, from_f, expr)                               \
  static void name(void *in, void *inout, int *len, MPI_Datatype *dt) { \
    (void)dt;                                                           \
    const uint16_t *a = (const uint16_t *)in;                           \
    uint16_t *b = (uint16_t *)inout;                                    \
    for (int i = 0; i < *len; i++) {                                    \
      float x = to_f(a[i]), y = to_f(b[i]);                             \
      b[i] = from_f(expr);                                              \
    }                                                                   \
  }
HALF_OP(f16_sum, tpdp_f16_to_f32, tpdp_f32_to_f16, x + y)
HALF_OP(f16_max, tpdp_f16_to_f32, tpdp_f32_to_f16, x > y ? x : y)
HALF_OP(f16_min, tpdp_f16_to_f32, tpdp_f32_to_f16, x < y ? x : y)
HALF_OP(bf16_sum, core_bf16_to_f32, core_f32_to_bf16, x + y)
HALF_OP(bf16_max, core_bf16_to_f32, core_f32_to_bf16, x > y ? x : y)
HALF_OP(bf16_min, core_bf16_to_f32, core_f32_to_bf16, x < y ? x : y)

static tpdp_status create_half_ops(void) {
  MPI_User_function *fns[2][3] = {{f16_sum, f16_max, f16_min},
                                  {bf16_sum, bf16_max, bf16_min}};
  for (int d = 0; d < 2; d++)
    for (int o = 0; o < 3; o++)
      MPI_CHECK(NULL, MPI_Op_create, fns[d][o], 1, &half_ops[d][o]);
  half_ops_ready = 1;
  return TPDP_SUCCESS;
}

/* MPI's type for each dtype; halves travel as 16-bit words (their
 * reductions are the ops of create_half_ops). */
static MPI_Datatype mpi_dtype(tpdp_dtype dtype) {
  static const MPI_Datatype types[TPDP_DTYPE_COUNT] = {
      [TPDP_F32] = MPI_FLOAT,    [TPDP_F64] = MPI_DOUBLE,
      [TPDP_F16] = MPI_UINT16_T, [TPDP_BF16] = MPI_UINT16_T,
      [TPDP_I32] = MPI_INT32_T,  [TPDP_I64] = MPI_INT64_T,
      [TPDP_U8] = MPI_UINT8_T};
  return (int)dtype >= 0 && dtype < TPDP_DTYPE_COUNT ? types[dtype]
                                                     : MPI_DATATYPE_NULL;
}

static MPI_Op mpi_op(tpdp_reduce_op op, tpdp_dtype dtype) {
  int idx = op == TPDP_OP_MAX ? 1 : op == TPDP_OP_MIN ? 2 : 0;
  if (dtype == TPDP_F16) return half_ops[0][idx];
  if (dtype == TPDP_BF16) return half_ops[1][idx];
  return idx == 1 ? MPI_MAX : idx == 2 ? MPI_MIN : MPI_SUM;
}

/* ---------------------------------------------------------- watchdog
 *
 * The progress board of comm/watchdog.h: an MPI-3 shared window over the
 * ranks of this host, one region per rank, so that a rank's watchdog can
 * read what its peers are doing while its own main thread is stuck inside
 * MPI. Made at tpdp_init when TPDP_TIMEOUT_S > 0, freed at tpdp_finalize. */

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
static tpdp_status make_mirror(const int *world, int n, int world_size) {
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
 * MPI, the last step issue 13 allows for a rank stuck inside MPI, which no
 * status can reach. The watchdog thread calls it while another thread may
 * be inside MPI: tpdp_init asks for MPI_THREAD_MULTIPLE. */
static void abort_job(void) { MPI_Abort(MPI_COMM_WORLD, TPDP_ERR_TIMEOUT); }

static tpdp_status free_board(void) {
  core_first_error f;
  core_first_error_init(&f);
  free_mirror();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && board_win != MPI_WIN_NULL)
    core_first_error_add(
        &f, mpi_status(MPI_Win_free(&board_win), "MPI_Win_free", NULL));
  if (!finalized && board_comm != MPI_COMM_NULL)
    core_first_error_add(
        &f, mpi_status(MPI_Comm_free(&board_comm), "MPI_Comm_free", NULL));
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

static tpdp_status start_watchdog(void) {
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
    st = make_mirror(world, n, cfg.world_size);
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

/* ---------------------------------------------------------- life cycle */

static const tpdp_comm_ops mpi_ops;

tpdp_status comm_mpi_backend_init(int *argc, char ***argv,
                                  int *we_initialized) {
  int flag = 0, finalized = 0;
  *we_initialized = 0;
  MPI_CHECK(NULL, MPI_Finalized, &finalized);
  if (finalized)
    return TPDP_ERR(TPDP_ERR_STATE,
                    "MPI has already been finalized; MPI (and so tpdp) "
                    "cannot be initialised again in this process");
  MPI_CHECK(NULL, MPI_Initialized, &flag);
  if (!flag) {
    int provided = 0;
    /* MULTIPLE lets the reducer's communication thread run a bucket's
     * allreduce while the caller's thread runs TP collectives. */
    MPI_CHECK(NULL, MPI_Init_thread, argc, argv, MPI_THREAD_MULTIPLE,
              &provided);
    *we_initialized = 1;
  }
  MPI_CHECK(NULL, MPI_Query_thread, &thread_level);
  /* Errors come back as codes so tpdp can report them, never abort. */
  MPI_CHECK(NULL, MPI_Comm_set_errhandler, MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  if (!half_ops_ready) CHECK(create_half_ops());
  ring_min_bytes =
      core_env_long("TPDP_MPI_RING_AVG_MIN_BYTES", RING_AVG_MIN_BYTES_DEFAULT);
  ring_chunk_bytes =
      core_env_long("TPDP_MPI_RING_CHUNK_BYTES", RING_CHUNK_BYTES_DEFAULT);
  if (ring_chunk_bytes < 64) ring_chunk_bytes = 64;
  return start_watchdog();
}

tpdp_status comm_mpi_backend_finalize(int we_initialized) {
  core_first_error f;
  core_first_error_init(&f);
  core_first_error_add(&f, comm_watchdog_stop());
  core_first_error_add(&f, free_board());
  if (half_ops_ready) {
    for (int d = 0; d < 2; d++)
      for (int o = 0; o < 3; o++)
        core_first_error_add(
            &f, mpi_status(MPI_Op_free(&half_ops[d][o]), "MPI_Op_free", NULL));
    half_ops_ready = 0;
  }
  int finalized = 0;
  tpdp_status st = mpi_status(MPI_Finalized(&finalized), "MPI_Finalized", NULL);
  core_first_error_add(&f, st);
  if (st == TPDP_SUCCESS && we_initialized && !finalized)
    core_first_error_add(&f, mpi_status(MPI_Finalize(), "MPI_Finalize", NULL));
  return f.status;
}

/* The world rank of each rank of mc (size entries) into *out. */
static tpdp_status world_ranks_of(MPI_Comm mc, int size, int **out) {
  int *ranks = NULL;
  CHECK(TPDP_CALLOC(ranks, 2 * (size_t)size));
  for (int q = 0; q < size; q++) ranks[q] = q;
  MPI_Group g = MPI_GROUP_NULL, wg = MPI_GROUP_NULL;
  int rc = MPI_Comm_group(mc, &g);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_group(MPI_COMM_WORLD, &wg);
  if (rc == MPI_SUCCESS)
    rc = MPI_Group_translate_ranks(g, size, ranks, wg, ranks + size);
  if (g != MPI_GROUP_NULL) MPI_Group_free(&g);
  if (wg != MPI_GROUP_NULL) MPI_Group_free(&wg);
  if (rc != MPI_SUCCESS) {
    free(ranks);
    return mpi_status(rc, "MPI_Group_translate_ranks", NULL);
  }
  memmove(ranks, ranks + size, (size_t)size * sizeof *ranks);
  *out = ranks;
  return TPDP_SUCCESS;
}

/* A tpdp_comm over mc, watched under `key` (comm/watchdog.h). */
static tpdp_status wrap_comm(MPI_Comm mc, const char *name, uint64_t key,
                             tpdp_comm **out) {
  int rank = 0, size = 0;
  MPI_CHECK(NULL, MPI_Comm_set_errhandler, mc, MPI_ERRORS_RETURN);
  MPI_CHECK(NULL, MPI_Comm_rank, mc, &rank);
  MPI_CHECK(NULL, MPI_Comm_size, mc, &size);
  mpi_comm_impl *impl = NULL;
  tpdp_comm *c = NULL;
  int *world = NULL;
  tpdp_status st = TPDP_SUCCESS;
  CHECK(TPDP_CALLOC(impl, 1));
  impl->comm = mc;
  CHECK_GOTO(comm_alloc(&mpi_ops, rank, size, name, &c), st, fail);
  c->impl = impl;
  c->concurrent_threads = thread_level == MPI_THREAD_MULTIPLE;
  CHECK_GOTO(world_ranks_of(mc, size, &world), st, fail);
  CHECK_GOTO(comm_traffic_attach(c, world), st, fail);
  CHECK_GOTO(comm_watch_register(&impl->watch, c, key, world), st, fail);
  free(world);
  *out = c;
  return TPDP_SUCCESS;
fail:
  free(world);
  if (c != NULL) comm_traffic_detach(c);
  free(c);
  free(impl);
  return st;
}

/* wrap_comm, freeing `mc` when it fails (its failure reported first). */
static tpdp_status wrap_or_free(MPI_Comm mc, const char *name, uint64_t key,
                                tpdp_comm **out) {
  tpdp_status st = wrap_comm(mc, name, key, out);
  if (st == TPDP_SUCCESS) return st;
  core_first_error f;
  core_first_error_init(&f);
  core_first_error_add(&f, st);
  core_first_error_add(&f,
                       mpi_status(MPI_Comm_free(&mc), "MPI_Comm_free", NULL));
  return f.status;
}

tpdp_status comm_mpi_world(tpdp_comm **out) {
  MPI_Comm dup;
  MPI_CHECK(NULL, MPI_Comm_dup, MPI_COMM_WORLD, &dup);
  return wrap_or_free(dup, "world", 1, out);
}

tpdp_status comm_mpi_world_hosts(uint64_t **hosts, int *n) {
  int size = 0;
  MPI_CHECK(NULL, MPI_Comm_size, MPI_COMM_WORLD, &size);
  uint64_t mine = comm_host_hash(), *all = NULL;
  CHECK(TPDP_CALLOC(all, (size_t)size));
  int rc = MPI_Allgather(&mine, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T,
                         MPI_COMM_WORLD);
  if (rc != MPI_SUCCESS) {
    free(all);
    return mpi_status(rc, "MPI_Allgather", NULL);
  }
  *hosts = all;
  *n = size;
  return TPDP_SUCCESS;
}

static tpdp_status mpi_destroy(tpdp_comm *comm) {
  mpi_comm_impl *impl = (mpi_comm_impl *)comm->impl;
  comm_watch_unregister(&impl->watch);
  comm_traffic_detach(comm);
  int finalized = 0;
  tpdp_status st = mpi_status(MPI_Finalized(&finalized), "MPI_Finalized", comm);
  /* After MPI_Finalize the communicator is gone with MPI. */
  if (st == TPDP_SUCCESS && !finalized)
    st = mpi_status(MPI_Comm_free(&impl->comm), "MPI_Comm_free", comm);
  free(impl->scratch);
  free(impl);
  comm->impl = NULL;
  return st;
}

static tpdp_status mpi_split(tpdp_comm *comm, int color, int key,
                             tpdp_comm **out) {
  mpi_comm_impl *impl = (mpi_comm_impl *)comm->impl;
  MPI_Comm nc;
  uint64_t child = comm_watch_child_key(&impl->watch, color);
  int64_t seq = comm_watch_begin(&impl->watch, COMM_OP_SPLIT, 0, 0);
  int rc =
      MPI_Comm_split(impl->comm, color < 0 ? MPI_UNDEFINED : color, key, &nc);
  comm_watch_end(&impl->watch, seq);
  CHECK(mpi_status(rc, "MPI_Comm_split", comm));
  if (nc == MPI_COMM_NULL) {
    *out = NULL;
    return TPDP_SUCCESS;
  }
  char name[96];
  snprintf(name, sizeof name, "%.60s/split(%d)", comm->name, color);
  return wrap_or_free(nc, name, child, out);
}

/* ---------------------------------------------------------- work */

static void divide_by(tpdp_tensor *t, int size) {
  int64_t n = tpdp_tensor_numel(t);
  switch (t->dtype) {
    case TPDP_F32: {
      float *p = t->data;
      for (int64_t i = 0; i < n; i++) p[i] /= (float)size;
      break;
    }
    case TPDP_F64: {
      double *p = t->data;
      for (int64_t i = 0; i < n; i++) p[i] /= size;
      break;
    }
    case TPDP_F16: {
      uint16_t *p = t->data;
      for (int64_t i = 0; i < n; i++)
        p[i] = tpdp_f32_to_f16(tpdp_f16_to_f32(p[i]) / (float)size);
      break;
    }
    case TPDP_BF16: {
      uint16_t *p = t->data;
      for (int64_t i = 0; i < n; i++)
        p[i] = tpdp_f32_to_bf16(tpdp_bf16_to_f32(p[i]) / (float)size);
      break;
    }
    case TPDP_I32: {
      int32_t *p = t->data;
      for (int64_t i = 0; i < n; i++) p[i] /= size;
      break;
    }
    case TPDP_I64: {
      int64_t *p = t->data;
      for (int64_t i = 0; i < n; i++) p[i] /= size;
      break;
    }
    case TPDP_U8: {
      uint8_t *p = t->data;
      for (int64_t i = 0; i < n; i++) p[i] = (uint8_t)(p[i] / size);
      break;
    }
    default:
      break;
  }
}

/* ---------------------------------------------------------- pieces
 *
 * Allgather and reduce-scatter over pieces of memory (comm/services.h):
 * every pair of ranks exchanges its blocks directly, each side describing
 * its memory with a derived datatype (MPI_Type_create_hindexed), so the
 * data goes from the sender's parameters or gradients to the receiver's
 * without a packed copy on either side. On one host Open MPI's shared
 * memory transport moves such a message as fast as a contiguous one
 * (measured on the 2-core VM, 118 MB between 2 ranks: 33 ms either way),
 * and the reduce-scatter, a message each way and one add, took 48 ms
 * where MPI_Reduce_scatter_block took 215 ms. */

#define PIECES_TAG 7412
/* Ranks a reduce-scatter over pieces takes (its sum keeps one pointer per
 * rank on the stack). */
#define TPDP_MAX_PIECES_RANKS 1024

/* A run of elements in memory. */
typedef struct {
  char *ptr;
  int64_t n;
} seg;

/* The memory of flat range [lo, hi) of `p` (NULL: contiguous at base),
 * holes left out: *out (malloc'd, *nout runs; NULL when none). */
static tpdp_status segments(const comm_pieces *p, char *base, size_t es,
                            int64_t lo, int64_t hi, seg **out, int *nout) {
  *out = NULL;
  *nout = 0;
  comm_piece whole = {0, hi};
  comm_pieces one = {&whole, 1};
  if (p == NULL) p = &one;
  int n = 0;
  for (int pass = 0; pass < 2; pass++) {
    int64_t f = 0;
    n = 0;
    for (int i = 0; i < p->n; i++) {
      const comm_piece *c = &p->piece[i];
      int64_t a = lo > f ? lo : f, b = hi < f + c->count ? hi : f + c->count;
      if (b > a && c->offset >= 0) {
        if (pass == 1)
          (*out)[n] = (seg){base + (size_t)(c->offset + (a - f)) * es, b - a};
        n++;
      }
      f += c->count;
    }
    if (pass == 0) {
      if (n == 0) return TPDP_SUCCESS;
      CHECK(TPDP_CALLOC(*out, (size_t)n));
    }
  }
  *nout = n;
  return TPDP_SUCCESS;
}

static int64_t segs_elems(const seg *s, int n) {
  int64_t t = 0;
  for (int i = 0; i < n; i++) t += s[i].n;
  return t;
}

/* The derived datatype of `n` runs relative to `base` (MPI_BYTE with
 * *count 0 when there are none). */
static tpdp_status segs_type(const tpdp_comm *comm, const seg *s, int n,
                             const char *base, MPI_Datatype el,
                             MPI_Datatype *type, int *count) {
  *type = MPI_BYTE;
  *count = 0;
  if (n == 0) return TPDP_SUCCESS;
  int *len = NULL;
  MPI_Aint *disp = NULL;
  tpdp_status st = TPDP_SUCCESS;
  if (TPDP_CALLOC(len, (size_t)n) != TPDP_SUCCESS ||
      TPDP_CALLOC(disp, (size_t)n) != TPDP_SUCCESS) {
    st = TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "%d runs of a datatype on %s", n,
                  comm->name);
    goto done;
  }
  for (int i = 0; i < n; i++) {
    if (s[i].n > INT_MAX) {
      st = TPDP_ERR(TPDP_ERR_UNSUPPORTED,
                    "a piece of %lld elements on %s exceeds the MPI "
                    "backend's limit of %d",
                    (long long)s[i].n, comm->name, INT_MAX);
      goto done;
    }
    len[i] = (int)s[i].n;
    disp[i] = (MPI_Aint)(s[i].ptr - base);
  }
  st = mpi_status(MPI_Type_create_hindexed(n, len, disp, el, type),
                  "MPI_Type_create_hindexed", comm);
  if (st == TPDP_SUCCESS) {
    st = mpi_status(MPI_Type_commit(type), "MPI_Type_commit", comm);
    if (st != TPDP_SUCCESS) MPI_Type_free(type);
  }
  if (st == TPDP_SUCCESS) *count = 1;
done:
  free(len);
  free(disp);
  return st;
}

/* A call over pieces posts a request per message (grow_reqs), in place of
 * the work's single one. */
static void start_reqs(mpi_work_impl *w) {
  w->reqs = NULL;
  w->nreqs = 0;
  w->cap_reqs = 0;
}

/* Room for one more request. */
static tpdp_status grow_reqs(mpi_work_impl *w) {
  if (w->nreqs < w->cap_reqs) return TPDP_SUCCESS;
  int cap = w->cap_reqs ? 2 * w->cap_reqs : 8;
  MPI_Request *r = realloc(w->reqs, (size_t)cap * sizeof *r);
  if (r == NULL)
    return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "%d MPI requests", cap);
  for (int i = w->cap_reqs; i < cap; i++) r[i] = MPI_REQUEST_NULL;
  w->reqs = r;
  w->cap_reqs = cap;
  return TPDP_SUCCESS;
}

/* Elements per message of a collective over pieces (see post): at most
 * TPDP_PIECES_MSG_BYTES (default 1 MiB; every rank must see the same
 * value, since both sides cut the stream alike). One message per peer
 * ran at the raw rate in a loop of its own, but inside GPT-2's dp=2 step
 * the transfers took 1-3.5 times as long from step to step (2-core VM:
 * --zero 1 at 1390-1810 ms/step); cut into 0.5-1 MiB messages they kept
 * the raw rate (1370-1450 ms/step; 2 MiB and up drifted again at
 * --zero 3). */
static int64_t pieces_msg_elems(size_t es) {
  int64_t n = comm_pieces_message_bytes() / (int64_t)es;
  return n > 0 ? n : 1;
}

/* Post the runs `s` as receives (send: 0) from (sends to) `peer`, one
 * message per pieces_msg_elems elements: both sides cut the same element
 * stream at the same places. MPI may free a datatype once the operation is
 * posted. */
static tpdp_status post(const tpdp_comm *comm, mpi_work_impl *w, int send,
                        const seg *s, int n, char *base, MPI_Datatype el,
                        size_t es, int peer) {
  const int64_t m = pieces_msg_elems(es);
  MPI_Comm mc = ((mpi_comm_impl *)comm->impl)->comm;
  if (send) comm_traffic_add(comm, peer, (uint64_t)segs_elems(s, n) * es);
  seg *part = NULL;
  CHECK(TPDP_CALLOC(part, (size_t)(n > 0 ? n : 1)));
  tpdp_status st = TPDP_SUCCESS;
  int i = 0;
  int64_t di = 0;
  do {
    int np = 0;
    int64_t left = m;
    while (i < n && left > 0) {
      int64_t take = s[i].n - di < left ? s[i].n - di : left;
      part[np++] = (seg){s[i].ptr + di * es, take};
      left -= take;
      if ((di += take) == s[i].n) i++, di = 0;
    }
    MPI_Datatype type;
    int count;
    st = segs_type(comm, part, np, base, el, &type, &count);
    if (st != TPDP_SUCCESS) break;
    st = grow_reqs(w);
    if (st != TPDP_SUCCESS) {
      if (type != MPI_BYTE) MPI_Type_free(&type);
      break;
    }
    MPI_Request *r = &w->reqs[w->nreqs];
    int rc = send ? MPI_Isend(base, count, type, peer, PIECES_TAG, mc, r)
                  : MPI_Irecv(base, count, type, peer, PIECES_TAG, mc, r);
    if (type != MPI_BYTE) MPI_Type_free(&type);
    if (rc != MPI_SUCCESS) {
      st = mpi_status(rc, send ? "MPI_Isend" : "MPI_Irecv", comm);
      break;
    }
    w->nreqs++;
  } while (i < n);
  free(part);
  return st;
}

/* After a failure while posting: cancel what was posted. */
static void unpost(mpi_work_impl *w) {
  for (int i = 0; i < w->nreqs; i++)
    if (w->reqs[i] != MPI_REQUEST_NULL) {
      MPI_Cancel(&w->reqs[i]);
      MPI_Request_free(&w->reqs[i]);
    }
  free(w->reqs);
  w->reqs = &w->request;
  w->nreqs = 1;
}

static tpdp_status holes_differ(const tpdp_comm *comm, const char *what,
                                int64_t a, int64_t b) {
  return TPDP_ERR(TPDP_ERR_SHAPE_MISMATCH,
                  "%s over pieces on %s (rank %d): this rank's block has %lld "
                  "elements outside holes in one buffer and %lld in the "
                  "other; holes must lie at the same flat positions",
                  what, comm->name, comm->rank, (long long)a, (long long)b);
}

/* Copy the elements of runs `src` into runs `dst` (as many in all). */
static void copy_segs(const seg *dst, int nd, const seg *src, int ns,
                      size_t es) {
  int64_t di = 0, si = 0;
  for (int i = 0, j = 0; i < nd && j < ns;) {
    int64_t n = dst[i].n - di < src[j].n - si ? dst[i].n - di : src[j].n - si;
    memcpy(dst[i].ptr + di * es, src[j].ptr + si * es, (size_t)n * es);
    if ((di += n) == dst[i].n) i++, di = 0;
    if ((si += n) == src[j].n) j++, si = 0;
  }
}

static tpdp_status allgather_pieces(tpdp_comm *comm, const tpdp_coll_args *a,
                                    mpi_work_impl *w) {
  const int p = comm->size, me = comm->rank;
  const size_t es = tpdp_dtype_size(a->recv->dtype);
  const MPI_Datatype el = mpi_dtype(a->recv->dtype);
  const int64_t S = tpdp_tensor_numel(a->send);
  char *sbase = (char *)a->send->data, *rbase = (char *)a->recv->data;
  seg *ss = NULL, *rs = NULL;
  int nss = 0, nrs = 0;
  tpdp_status st = segments(a->send_pieces, sbase, es, 0, S, &ss, &nss);
  start_reqs(w);
  for (int pass = 0; pass < 2 && st == TPDP_SUCCESS; pass++) /* recvs first */
    for (int q = 0; q < p && st == TPDP_SUCCESS; q++) {
      if (q == me) continue;
      if (pass == 0) {
        st = segments(a->recv_pieces, rbase, es, q * S, (q + 1) * S, &rs, &nrs);
        if (st == TPDP_SUCCESS)
          st = post(comm, w, 0, rs, nrs, rbase, el, es, q);
        free(rs);
        rs = NULL;
      } else {
        st = post(comm, w, 1, ss, nss, sbase, el, es, q);
      }
    }
  /* This rank's own block: copied unless it is the same memory. */
  if (st == TPDP_SUCCESS)
    st = segments(a->recv_pieces, rbase, es, me * S, (me + 1) * S, &rs, &nrs);
  if (st == TPDP_SUCCESS && segs_elems(ss, nss) != segs_elems(rs, nrs))
    st = holes_differ(comm, "allgather", segs_elems(ss, nss),
                      segs_elems(rs, nrs));
  if (st == TPDP_SUCCESS) {
    int same = nss == nrs;
    for (int i = 0; same && i < nss; i++)
      same = ss[i].ptr == rs[i].ptr && ss[i].n == rs[i].n;
    if (!same) copy_segs(rs, nrs, ss, nss, es);
  }
  free(ss);
  free(rs);
  if (st != TPDP_SUCCESS && w->reqs != &w->request) unpost(w);
  return st;
}

/* A reduce-scatter's sum, run when its messages are in: each element of
 * this rank's block is the sum over ranks, in rank order, of their
 * contributions: its own (in the send buffer), the first peer's (received
 * straight into the result when that does not overlap the send buffer)
 * and the others' (in scratch). */
struct pieces_sum {
  tpdp_dtype dtype;
  int avg, size, me;
  seg *own, *out;
  int nown, nout;
  int out_peer; /* whose contribution arrived in `out`; -1: none */
  char **slot;  /* [size]: the others' contributions, contiguous */
};

#define SUM_CHUNK 1024

/* Elements of type T summed in ACC (loaded and stored through LOAD and
 * STORE) in rank order, divided for AVG. bf16 and f16 sum in f32 and
 * round once at the end - not at every addition as MPI's user-defined ops
 * round. */
#define PIECES_SUM(name, T, ACC, LOAD, STORE)                             \
  static void name(const pieces_sum *s) {                                 \
    ACC acc[SUM_CHUNK];                                                   \
    const T *src[TPDP_MAX_PIECES_RANKS];                                  \
    int64_t k = 0, oi = 0, di = 0;                                        \
    for (int i = 0, j = 0; i < s->nown && j < s->nout;) {                 \
      int64_t n = s->own[i].n - oi < s->out[j].n - di ? s->own[i].n - oi  \
                                                      : s->out[j].n - di; \
      if (n > SUM_CHUNK) n = SUM_CHUNK;                                   \
      T *d = (T *)s->out[j].ptr + di;                                     \
      for (int q = 0; q < s->size; q++)                                   \
        src[q] = q == s->me         ? (const T *)s->own[i].ptr + oi       \
                 : q == s->out_peer ? d                                   \
                                    : (const T *)s->slot[q] + k;          \
      for (int64_t e = 0; e < n; e++) acc[e] = LOAD(src[0][e]);           \
      for (int q = 1; q < s->size; q++)                                   \
        for (int64_t e = 0; e < n; e++) acc[e] += LOAD(src[q][e]);        \
      if (s->avg && s->size > 1)                                          \
        for (int64_t e = 0; e < n; e++) acc[e] /= (ACC)s->size;           \
      for (int64_t e = 0; e < n; e++) d[e] = STORE(acc[e]);               \
      k += n;                                                             \
      if ((oi += n) == s->own[i].n) i++, oi = 0;                          \
      if ((di += n) == s->out[j].n) j++, di = 0;                          \
    }                                                                     \
  }
#define AS_IS(x) (x)
PIECES_SUM(pieces_sum_f32, float, float, AS_IS, AS_IS)
PIECES_SUM(pieces_sum_f64, double, double, AS_IS, AS_IS)
PIECES_SUM(pieces_sum_bf16, uint16_t, float, core_bf16_to_f32, core_f32_to_bf16)
PIECES_SUM(pieces_sum_f16, uint16_t, float, tpdp_f16_to_f32, tpdp_f32_to_f16)

static void pieces_sum_run(const pieces_sum *s) {
  switch (s->dtype) {
    case TPDP_F32:
      pieces_sum_f32(s);
      break;
    case TPDP_F64:
      pieces_sum_f64(s);
      break;
    case TPDP_BF16:
      pieces_sum_bf16(s);
      break;
    default:
      pieces_sum_f16(s);
      break;
  }
}

static void pieces_sum_free(pieces_sum *s) {
  if (s == NULL) return;
  free(s->own);
  free(s->out);
  free(s->slot);
  free(s);
}

static tpdp_status reduce_scatter_pieces(tpdp_comm *comm,
                                         const tpdp_coll_args *a,
                                         mpi_work_impl *w) {
  const int p = comm->size, me = comm->rank;
  const size_t es = tpdp_dtype_size(a->recv->dtype);
  const MPI_Datatype el = mpi_dtype(a->recv->dtype);
  const int64_t n = tpdp_tensor_numel(a->recv);
  char *sbase = (char *)a->send->data, *rbase = (char *)a->recv->data;
  if (p > TPDP_MAX_PIECES_RANKS)
    return TPDP_ERR(TPDP_ERR_UNSUPPORTED,
                    "reduce-scatter over pieces on %s: %d ranks, at most %d",
                    comm->name, p, TPDP_MAX_PIECES_RANKS);
  pieces_sum *s = NULL;
  seg *all = NULL, *peer = NULL;
  int nall = 0, npeer = 0;
  tpdp_status st = TPDP_CALLOC(s, 1);
  if (st != TPDP_SUCCESS) return st;
  s->dtype = a->recv->dtype;
  s->avg = a->op == TPDP_OP_AVG;
  s->size = p;
  s->me = me;
  s->out_peer = -1;
  st = segments(a->send_pieces, sbase, es, me * n, (me + 1) * n, &s->own,
                &s->nown);
  if (st == TPDP_SUCCESS)
    st = segments(a->recv_pieces, rbase, es, 0, n, &s->out, &s->nout);
  const int64_t c = segs_elems(s->out, s->nout);
  if (st == TPDP_SUCCESS && segs_elems(s->own, s->nown) != c)
    st = holes_differ(comm, "reduce-scatter", segs_elems(s->own, s->nown), c);
  /* The first peer's contribution goes straight into the result when the
   * result lies outside the send buffer. */
  if (st == TPDP_SUCCESS)
    st = segments(a->send_pieces, sbase, es, 0, p * n, &all, &nall);
  if (st == TPDP_SUCCESS && p > 1 && nall > 0 && s->nout > 0) {
    char *lo = all[0].ptr, *hi = all[0].ptr;
    for (int i = 0; i < nall; i++) {
      if (all[i].ptr < lo) lo = all[i].ptr;
      if (all[i].ptr + all[i].n * es > hi) hi = all[i].ptr + all[i].n * es;
    }
    int overlap = 0;
    for (int i = 0; i < s->nout; i++)
      overlap |= s->out[i].ptr < hi && s->out[i].ptr + s->out[i].n * es > lo;
    if (!overlap) s->out_peer = me == 0 ? 1 : 0;
  }
  if (st == TPDP_SUCCESS) st = TPDP_CALLOC(s->slot, (size_t)p);
  const int64_t need =
      comm_reduce_scatter_pieces_scratch(comm, c, s->out_peer < 0);
  if (st == TPDP_SUCCESS &&
      (a->scratch_elems < need || (need > 0 && a->scratch == NULL)))
    st = TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                  "reduce-scatter over pieces on %s (rank %d): scratch of "
                  "%lld elements, it needs %lld",
                  comm->name, me, (long long)a->scratch_elems, (long long)need);
  for (int q = 0, k = 0; st == TPDP_SUCCESS && q < p; q++)
    if (q != me && q != s->out_peer)
      s->slot[q] = (char *)a->scratch + (size_t)(k++) * (size_t)c * es;
  start_reqs(w);
  for (int q = 0; st == TPDP_SUCCESS && q < p; q++) {
    if (q == me) continue;
    if (q == s->out_peer) {
      st = post(comm, w, 0, s->out, s->nout, rbase, el, es, q);
    } else {
      seg one = {s->slot[q], c};
      st = post(comm, w, 0, &one, c > 0, s->slot[q], el, es, q);
    }
  }
  for (int q = 0; st == TPDP_SUCCESS && q < p; q++) {
    if (q == me) continue;
    st = segments(a->send_pieces, sbase, es, q * n, (q + 1) * n, &peer, &npeer);
    if (st == TPDP_SUCCESS)
      st = post(comm, w, 1, peer, npeer, sbase, el, es, q);
    free(peer);
    peer = NULL;
  }
  free(all);
  if (st != TPDP_SUCCESS) {
    if (w->reqs != &w->request) unpost(w);
    pieces_sum_free(s);
    return st;
  }
  w->sum = s;
  return TPDP_SUCCESS;
}

static void finish(tpdp_work *work) {
  mpi_work_impl *w = (mpi_work_impl *)work->impl;
  if (w->done) return;
  w->done = 1;
  if (w->move_dst != NULL && w->move_bytes > 0)
    memmove(w->move_dst, w->move_src, w->move_bytes);
  if (w->divide) divide_by(&w->avg_view, work->comm->size);
  if (w->sum != NULL) pieces_sum_run(w->sum);
}

static tpdp_status mpi_work_wait(tpdp_work *work) {
  mpi_work_impl *w = (mpi_work_impl *)work->impl;
  if (!w->done) {
    comm_watch_block(w->watch, w->seq, work->kind, w->dtype, w->count,
                     core_now_s());
    int rc = MPI_Waitall(w->nreqs, w->reqs, MPI_STATUSES_IGNORE);
    comm_watch_end(w->watch, w->seq);
    if (rc != MPI_SUCCESS) {
      w->done = 1; /* the request is over, failed: never wait on it again */
      return mpi_status(rc, "MPI_Wait", work->comm);
    }
    finish(work);
  }
  return TPDP_SUCCESS;
}

static tpdp_status mpi_work_test(tpdp_work *work, int *done) {
  mpi_work_impl *w = (mpi_work_impl *)work->impl;
  if (!w->done) {
    int flag = 0;
    int rc = MPI_Testall(w->nreqs, w->reqs, &flag, MPI_STATUSES_IGNORE);
    if (flag || rc != MPI_SUCCESS) comm_watch_finish(w->watch, w->seq);
    if (rc != MPI_SUCCESS) {
      w->done = 1;
      return mpi_status(rc, "MPI_Test", work->comm);
    }
    if (flag) finish(work);
  }
  *done = w->done;
  return TPDP_SUCCESS;
}

/* Called after mpi_work_wait, which leaves no request in flight (done or
 * failed). */
static tpdp_status mpi_work_release(tpdp_work *work) {
  mpi_work_impl *w = (mpi_work_impl *)work->impl;
  free(w->scratch);
  w->scratch = NULL;
  if (w->reqs != &w->request) free(w->reqs);
  pieces_sum_free(w->sum);
  work->impl = NULL; /* w lives in the same allocation as work */
  return TPDP_SUCCESS;
}

static const tpdp_work_ops mpi_work_ops = {
    .wait = mpi_work_wait,
    .test = mpi_work_test,
    .wait_stream = NULL, /* host memory: tpdp_work_wait */
    .release = mpi_work_release,
};

/* ---------------------------------------------------------- ring AVG
 *
 * Open MPI's allreduce has no AVG, so AVG is SUM and then a pass dividing
 * the whole result. On host memory that pass is memory-bound and costs a
 * good fraction of the reduction itself (100 MB of gradients: 8-18 ms
 * against about 30 for the allreduce on the 2-core development VM). The
 * ring below folds it into the reduction: a reduce-scatter in size-1
 * rounds, where each rank adds the block it receives from its left
 * neighbour to its own and passes it on to the right, and in the last round
 * adds *and* divides by the size in the same loop; then an allgather ring
 * circulates the averaged blocks. Each rank moves 2 (size-1)/size of the
 * message, as MPI's own ring does. The reduce-scatter receives in chunks
 * of ring_chunk_bytes into a scratch buffer, so each chunk is added while
 * it is still in cache (the allgather, which only copies, moves whole
 * blocks).
 *
 * Blocks: the count is split into `size` blocks, the first count % size of
 * them one element longer (block k starts at k * base + min(k, rem)).
 * Every rank derives the same layout from (count, size), so the two sides
 * of each MPI_Sendrecv agree on its counts, and every rank makes the same
 * number of calls per round; MPI_Sendrecv pairs a send to the right with a
 * receive from the left, which cannot deadlock in a ring.
 * Blocking calls only: the async form keeps MPI_Iallreduce (+ division). */

#define RING_TAG 0x7470 /* point-to-point tag of the ring's messages */

static int64_t ring_block_off(int64_t n, int p, int k) {
  int64_t base = n / p, rem = n % p;
  return k * base + (k < rem ? k : rem);
}

static int64_t ring_block_len(int64_t n, int p, int k) {
  return n / p + (k < n % p ? 1 : 0);
}

/* A power of two divides exactly as a multiply by its reciprocal, which
 * vectorises better than a division (as dp_buf_divide does). */
static int is_pow2(int x) { return x > 0 && (x & (x - 1)) == 0; }

/* dst[i] = own[i] + in[i], or (own[i] + in[i]) / p when p > 0. own is the
 * rank's input: equal to dst in place, else a distinct buffer. */
#define RING_REDUCE(name, T)                                                   \
  static void name##_inplace(T *restrict dst, const T *restrict in, int64_t n, \
                             int p) {                                          \
    if (p == 0) {                                                              \
      for (int64_t i = 0; i < n; i++) dst[i] += in[i];                         \
    } else if (is_pow2(p)) {                                                   \
      const T inv = (T)1 / (T)p;                                               \
      for (int64_t i = 0; i < n; i++) dst[i] = (dst[i] + in[i]) * inv;         \
    } else {                                                                   \
      const T d = (T)p;                                                        \
      for (int64_t i = 0; i < n; i++) dst[i] = (dst[i] + in[i]) / d;           \
    }                                                                          \
  }                                                                            \
  static void name##_out(T *restrict dst, const T *restrict own,               \
                         const T *restrict in, int64_t n, int p) {             \
    if (p == 0) {                                                              \
      for (int64_t i = 0; i < n; i++) dst[i] = own[i] + in[i];                 \
    } else if (is_pow2(p)) {                                                   \
      const T inv = (T)1 / (T)p;                                               \
      for (int64_t i = 0; i < n; i++) dst[i] = (own[i] + in[i]) * inv;         \
    } else {                                                                   \
      const T d = (T)p;                                                        \
      for (int64_t i = 0; i < n; i++) dst[i] = (own[i] + in[i]) / d;           \
    }                                                                          \
  }
RING_REDUCE(ring_reduce_f32, float)
RING_REDUCE(ring_reduce_f64, double)

static void ring_reduce(tpdp_dtype dt, void *dst, const void *own,
                        const void *in, int64_t n, int p) {
  if (dt == TPDP_F32) {
    if (dst == own)
      ring_reduce_f32_inplace(dst, in, n, p);
    else
      ring_reduce_f32_out(dst, own, in, n, p);
  } else {
    if (dst == own)
      ring_reduce_f64_inplace(dst, in, n, p);
    else
      ring_reduce_f64_out(dst, own, in, n, p);
  }
}

/* 1 if this allreduce runs as the ring: blocking AVG, f32/f64, two or
 * more ranks, at least ring_min_bytes. Depends only on what every rank
 * passes alike, so all ranks of a collective choose the same path. */
static int use_ring_avg(const tpdp_comm *comm, const tpdp_coll_args *a,
                        int64_t rn) {
  const tpdp_tensor *t = a->recv;
  if (!a->blocking || a->op != TPDP_OP_AVG || comm->size < 2 ||
      ring_min_bytes < 0)
    return 0;
  if (t->dtype != TPDP_F32 && t->dtype != TPDP_F64) return 0;
  return (double)rn * (double)tpdp_dtype_size(t->dtype) >=
         (double)ring_min_bytes;
}

static tpdp_status ring_error(int code, const tpdp_comm *c, const char *phase,
                              int step) {
  char msg[MPI_MAX_ERROR_STRING];
  mpi_error_text(code, msg);
  return TPDP_ERR(
      TPDP_ERR_MPI,
      "MPI_Sendrecv failed on %s (rank %d of %d) in the ring allreduce "
      "(avg), %s round %d: %s",
      c->name, c->rank, c->size, phase, step + 1, msg);
}

static tpdp_status ring_allreduce_avg(tpdp_comm *comm, mpi_comm_impl *impl,
                                      const tpdp_tensor *send,
                                      tpdp_tensor *recv) {
  const int p = comm->size, r = comm->rank;
  const int right = (r + 1) % p, left = (r + p - 1) % p;
  const tpdp_dtype dt = recv->dtype;
  const size_t es = tpdp_dtype_size(dt);
  const MPI_Datatype mdt = mpi_dtype(dt);
  const int64_t n = tpdp_tensor_numel(recv);
  int64_t chunk = ring_chunk_bytes / (long)es;
  if (chunk < 1) chunk = 1;
  if (chunk > n / p + 1) chunk = n / p + 1; /* no larger than a block */
  size_t need = (size_t)chunk * es;
  if (impl->scratch_bytes < need) {
    void *s = realloc(impl->scratch, need);
    if (s == NULL)
      return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY,
                      "ring allreduce (avg) on %s (rank %d): cannot allocate "
                      "%zu bytes of scratch",
                      comm->name, r, need);
    impl->scratch = s;
    impl->scratch_bytes = need;
  }
  char *scratch = impl->scratch;
  const char *own = (const char *)send->data; /* == dst in place */
  char *dst = (char *)recv->data;

  /* Every rank makes the same number of MPI_Sendrecv calls per round,
   * enough for the longest block (the others send or receive 0 elements
   * at the end): one message per call and direction must pair with one
   * call of the neighbour. */
  const int64_t longest = n / p + (n % p != 0);
  /* Reduce-scatter: in round s send block r-s (round 0 from the input,
   * later the partial sum made in round s-1) and receive block r-s-1, to
   * which this rank adds its own input. After round size-2 the rank holds
   * the average of block r+1. */
  for (int s = 0; s < p - 1; s++) {
    const int sb = ((r - s) % p + p) % p, rb = ((r - s - 1) % p + p) % p;
    const int divide = s == p - 2 ? p : 0;
    const char *sbase = (s == 0 ? own : dst) + ring_block_off(n, p, sb) * es;
    const int64_t roff = ring_block_off(n, p, rb);
    const int64_t slen = ring_block_len(n, p, sb);
    const int64_t rlen = ring_block_len(n, p, rb);
    for (int64_t c = 0; c < longest; c += chunk) {
      int64_t sc = slen - c, rc = rlen - c;
      sc = sc < 0 ? 0 : sc > chunk ? chunk : sc;
      rc = rc < 0 ? 0 : rc > chunk ? chunk : rc;
      int rcode = MPI_Sendrecv(sbase + c * es, (int)sc, mdt, right, RING_TAG,
                               scratch, (int)rc, mdt, left, RING_TAG,
                               impl->comm, MPI_STATUS_IGNORE);
      if (rcode != MPI_SUCCESS)
        return ring_error(rcode, comm, "reduce-scatter", s);
      if (rc > 0)
        ring_reduce(dt, dst + (roff + c) * es, own + (roff + c) * es, scratch,
                    rc, divide);
    }
  }
  /* Allgather: in round s pass on block r+1-s (averaged here or received
   * in round s-1) and receive block r-s straight into place. */
  for (int s = 0; s < p - 1; s++) {
    const int sb = ((r + 1 - s) % p + p) % p, rb = ((r - s) % p + p) % p;
    int rcode = MPI_Sendrecv(dst + ring_block_off(n, p, sb) * es,
                             (int)ring_block_len(n, p, sb), mdt, right,
                             RING_TAG, dst + ring_block_off(n, p, rb) * es,
                             (int)ring_block_len(n, p, rb), mdt, left, RING_TAG,
                             impl->comm, MPI_STATUS_IGNORE);
    if (rcode != MPI_SUCCESS) return ring_error(rcode, comm, "allgather", s);
  }
  return TPDP_SUCCESS;
}

/* ---------------------------------------------------------- collectives */

static tpdp_status mpi_collective(tpdp_comm *comm, const tpdp_coll_args *a,
                                  tpdp_work **out) {
  mpi_comm_impl *impl = (mpi_comm_impl *)comm->impl;
  MPI_Comm mc = impl->comm;
  /* One allocation per call for the handle and its MPI state (the front
   * end frees `work`; release frees only what hangs off it). */
  mpi_work_block *blk = NULL;
  tpdp_status st = TPDP_SUCCESS;
  CHECK(TPDP_CALLOC(blk, 1));
  tpdp_work *work = &blk->work;
  mpi_work_impl *w = &blk->impl;
  work->comm = comm;
  work->kind = a->kind;
  work->impl = w;
  work->ops = &mpi_work_ops;
  w->request = MPI_REQUEST_NULL;
  w->reqs = &w->request;
  w->nreqs = 1;

  const tpdp_tensor *send = a->send;
  tpdp_tensor *recv = a->recv;
  MPI_Datatype dt = recv ? mpi_dtype(recv->dtype) : MPI_BYTE;
  size_t es = recv ? tpdp_dtype_size(recv->dtype) : 1;
  int64_t rn = recv ? tpdp_tensor_numel(recv) : 0;
  int64_t sn = send ? tpdp_tensor_numel(send) : 0;
  if (rn > INT_MAX || sn > INT_MAX) {
    st = TPDP_ERR(TPDP_ERR_UNSUPPORTED,
                  "%s of %lld elements on %s exceeds the MPI backend's "
                  "limit of %d elements per call",
                  comm_coll_name(a->kind), (long long)(rn > sn ? rn : sn),
                  comm->name, INT_MAX);
    goto fail;
  }
  int b = a->blocking;
  int rc = MPI_SUCCESS;
  const char *call = "";
  /* The watchdog's record (comm/watchdog.h): a blocking call is watched
   * until it returns, a non-blocking one from its wait. */
  w->watch = &impl->watch;
  w->dtype = recv ? (int)recv->dtype : 0;
  w->count = a->kind == TPDP_COLL_ALLGATHER ? sn : rn;
  w->seq =
      b ? comm_watch_begin(w->watch, a->kind, w->dtype, w->count)
        : comm_watch_enter(w->watch, a->kind, w->dtype, w->count, core_now_s());
  if (a->send_pieces != NULL || a->recv_pieces != NULL) {
    st = a->kind == TPDP_COLL_ALLGATHER ? allgather_pieces(comm, a, w)
                                        : reduce_scatter_pieces(comm, a, w);
    if (st != TPDP_SUCCESS) goto fail;
    *out = work;
    return TPDP_SUCCESS;
  }
  switch (a->kind) {
    case TPDP_COLL_ALLREDUCE: {
      if (a->shm != NULL) {
        st = comm_shm_allreduce(a->shm, comm, recv, a->op);
        if (st != TPDP_SUCCESS) goto fail;
        break;
      }
      if (use_ring_avg(comm, a, rn)) {
        st = ring_allreduce_avg(comm, impl, send, recv);
        if (st != TPDP_SUCCESS) goto fail;
        break;
      }
      const void *sb = send->data == recv->data ? MPI_IN_PLACE : send->data;
      MPI_Op op = mpi_op(a->op, recv->dtype);
      call = b ? "MPI_Allreduce" : "MPI_Iallreduce";
      rc = b ? MPI_Allreduce(sb, recv->data, (int)rn, dt, op, mc)
             : MPI_Iallreduce(sb, recv->data, (int)rn, dt, op, mc, &w->request);
      if (a->op == TPDP_OP_AVG) {
        w->divide = 1;
        w->avg_view = *recv;
      }
      break;
    }
    case TPDP_COLL_ALLGATHER: {
      const void *sb = send->data;
      if (sn > 0 && (const char *)send->data ==
                        (const char *)recv->data + (size_t)comm->rank * sn * es)
        sb = MPI_IN_PLACE;
      call = b ? "MPI_Allgather" : "MPI_Iallgather";
      rc = b ? MPI_Allgather(sb, (int)sn, dt, recv->data, (int)sn, dt, mc)
             : MPI_Iallgather(sb, (int)sn, dt, recv->data, (int)sn, dt, mc,
                              &w->request);
      break;
    }
    case TPDP_COLL_REDUCE_SCATTER: {
      MPI_Op op = mpi_op(a->op, recv->dtype);
      const void *sb = send->data;
      void *rb = recv->data;
      if (rn > 0 &&
          (const char *)recv->data ==
              (const char *)send->data + (size_t)comm->rank * rn * es) {
        /* NCCL-style in place: MPI leaves the block at the start of the
         * buffer; move it to this rank's slot when done. */
        sb = MPI_IN_PLACE;
        rb = send->data;
        w->move_dst = recv->data;
        w->move_src = send->data;
        w->move_bytes = (size_t)rn * es;
      }
      call = b ? "MPI_Reduce_scatter_block" : "MPI_Ireduce_scatter_block";
      rc = b ? MPI_Reduce_scatter_block(sb, rb, (int)rn, dt, op, mc)
             : MPI_Ireduce_scatter_block(sb, rb, (int)rn, dt, op, mc,
                                         &w->request);
      if (a->op == TPDP_OP_AVG) {
        w->divide = 1;
        w->avg_view = *recv;
      }
      break;
    }
    case TPDP_COLL_BROADCAST: {
      if (comm->rank == a->root && send != NULL && send->data != recv->data &&
          rn > 0)
        memcpy(recv->data, send->data, (size_t)rn * es);
      call = b ? "MPI_Bcast" : "MPI_Ibcast";
      rc = b ? MPI_Bcast(recv->data, (int)rn, dt, a->root, mc)
             : MPI_Ibcast(recv->data, (int)rn, dt, a->root, mc, &w->request);
      break;
    }
    case TPDP_COLL_ALLTOALL: {
      const void *sb = send->data;
      int block = (int)(rn / comm->size);
      if (send->data == recv->data && rn > 0) {
        /* Copy the input aside rather than rely on MPI_IN_PLACE support
         * in every non-blocking alltoall implementation. */
        w->scratch = malloc((size_t)rn * es);
        if (w->scratch == NULL) {
          st = TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "alltoall scratch of %zu bytes",
                        (size_t)rn * es);
          goto fail;
        }
        memcpy(w->scratch, send->data, (size_t)rn * es);
        sb = w->scratch;
      }
      call = b ? "MPI_Alltoall" : "MPI_Ialltoall";
      rc = b ? MPI_Alltoall(sb, block, dt, recv->data, block, dt, mc)
             : MPI_Ialltoall(sb, block, dt, recv->data, block, dt, mc,
                             &w->request);
      break;
    }
    case TPDP_COLL_BARRIER:
      call = b ? "MPI_Barrier" : "MPI_Ibarrier";
      rc = b ? MPI_Barrier(mc) : MPI_Ibarrier(mc, &w->request);
      break;
  }
  if (b && rc == MPI_SUCCESS) comm_watch_end(w->watch, w->seq);
  if (rc != MPI_SUCCESS) {
    st = mpi_status(rc, call, comm);
    goto fail;
  }
  if (b) finish(work);
  *out = work;
  return TPDP_SUCCESS;
fail: /* nothing in flight */
  if (w->seq > 0) comm_watch_end(w->watch, w->seq);
  free(w->scratch);
  free(blk);
  return st;
}

static const tpdp_comm_ops mpi_ops = {
    .backend = "mpi",
    .device_type = TPDP_DEVICE_CPU,
    .collective = mpi_collective,
    .split = mpi_split,
    .destroy = mpi_destroy,
    .pieces = 1,
};
