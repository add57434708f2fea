// SPDX-License-Identifier: BSD-3-Clause
/*
 * Internal to the MPI backend (comm/mpi_*.c): the state its files share and
 * the algorithms mpi_backend.c dispatches to. Not for comm/'s other files:
 * it includes <mpi.h>, and they build without MPI (scripts/gpu-check swaps
 * every comm/mpi_*.c for comm/mpi_stub.c there).
 *
 *   mpi_backend.c   init and finalize, the world, split, work handles, and
 *                   the dispatch of each collective to one of the below or
 *                   to MPI's own call
 *   mpi_watchdog.c  the watchdog's progress board over MPI (an MPI-3
 *                   shared window per host, copies across hosts) for the
 *                   MPI-free watchdog of comm/watchdog.c
 *   mpi_pieces.c    allgather and reduce-scatter over pieces of memory
 *                   (comm/services.h), point to point with derived types
 *   mpi_ring_avg.c  the ring allreduce AVG of large f32/f64 messages, which
 *                   divides inside its last add
 */
#ifndef TPDP_COMM_MPI_INTERNAL_H
#define TPDP_COMM_MPI_INTERNAL_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "comm/backend.h"
#include "comm/watchdog.h"

/* A communicator's MPI state (tpdp_comm.impl). */
typedef struct {
  MPI_Comm comm;
  void *scratch; /* ring allreduce: one received chunk */
  size_t scratch_bytes;
  comm_watch watch; /* TPDP_TIMEOUT_S (comm/watchdog.h) */
} mpi_comm_impl;

/* The sum a reduce-scatter over pieces runs once its messages are in
 * (mpi_pieces.c). */
typedef struct mpi_pieces_sum mpi_pieces_sum;

/* A work handle's MPI state (tpdp_work.impl). */
typedef struct {
  MPI_Request request;
  /* The requests waited for: &request, or one per peer and direction
   * (collectives over pieces). */
  MPI_Request *reqs;
  int nreqs, cap_reqs;
  mpi_pieces_sum *sum; /* reduce-scatter over pieces: the sum at completion */
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

/* ---------------------------------------------------------- mpi_backend.c */

/* MPI's text for an error code (its number if MPI has none) into msg
 * (MPI_MAX_ERROR_STRING bytes). */
void comm_mpi_error_text(int code, char *msg);

/* TPDP_ERR_MPI naming the call, the communicator (NULL: MPI_COMM_WORLD)
 * and MPI's text; TPDP_SUCCESS for MPI_SUCCESS. */
tpdp_status comm_mpi_status(int code, const char *call, const tpdp_comm *c);

/* Call MPI function `fn` with the remaining arguments; on failure return
 * TPDP_ERR_MPI naming it (and communicator `comm`, NULL: the world). */
#define MPI_CHECK(comm, fn, ...) \
  CHECK(comm_mpi_status(fn(__VA_ARGS__), #fn, (comm)))

/* MPI's type for each dtype (MPI_DATATYPE_NULL outside the enum); halves
 * travel as 16-bit words, reduced by the backend's own ops. */
MPI_Datatype comm_mpi_dtype(tpdp_dtype dtype);

/* --------------------------------------------------------- mpi_watchdog.c */

/* Start the watchdog (comm/watchdog.h) when TPDP_TIMEOUT_S > 0, with the
 * progress board of this host's ranks, and copies of it across hosts when
 * `thread_level` is MPI_THREAD_MULTIPLE. Collective over MPI_COMM_WORLD
 * (tpdp_init). On failure nothing is left behind. */
tpdp_status comm_mpi_watchdog_start(int thread_level);
/* Stop the watchdog thread, then free the board (tpdp_finalize). */
tpdp_status comm_mpi_watchdog_stop(void);

/* ----------------------------------------------------------- mpi_pieces.c */

/* Post the messages of an allgather / reduce-scatter over pieces (a->
 * send_pieces or a->recv_pieces set) as w's requests; the reduce-scatter
 * leaves its sum in w->sum for the completion. On failure nothing is in
 * flight. */
tpdp_status comm_mpi_allgather_pieces(tpdp_comm *comm, const tpdp_coll_args *a,
                                      mpi_work_impl *w);
tpdp_status comm_mpi_reduce_scatter_pieces(tpdp_comm *comm,
                                           const tpdp_coll_args *a,
                                           mpi_work_impl *w);
/* Once the requests completed: the reduce-scatter's sum into its result. */
void comm_mpi_pieces_sum_run(const mpi_pieces_sum *s);
/* NULL is a no-op. */
void comm_mpi_pieces_sum_free(mpi_pieces_sum *s);

/* --------------------------------------------------------- mpi_ring_avg.c */

/* Read the ring's threshold and chunk size from the environment (tpdp_init;
 * see mpi_ring_avg.c). */
void comm_mpi_ring_avg_configure(void);
/* 1 if allreduce `a` of rn elements runs as the ring: blocking AVG,
 * f32/f64, two or more ranks, at least the threshold's bytes. Depends only
 * on what every rank passes alike, so all ranks choose the same path. */
int comm_mpi_use_ring_avg(const tpdp_comm *comm, const tpdp_coll_args *a,
                          int64_t rn);
/* The blocking allreduce AVG of send into recv (the same memory in
 * place) as the ring. */
tpdp_status comm_mpi_ring_allreduce_avg(tpdp_comm *comm, mpi_comm_impl *impl,
                                        const tpdp_tensor *send,
                                        tpdp_tensor *recv);

#endif /* TPDP_COMM_MPI_INTERNAL_H */
