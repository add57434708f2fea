// SPDX-License-Identifier: BSD-3-Clause
/*
 * Internal to comm/: bounded waits (TPDP_TIMEOUT_S) for the MPI backend,
 * and the waits tpdp performs itself. Not installed.
 *
 * Blocking MPI calls stay blocking (Open MPI's blocking algorithms are the
 * fast ones). Instead, every blocking call the backend makes is bracketed
 * by comm_watch_begin / comm_watch_end: a few stores and one clock read
 * into the communicator's watch record, no lock, no allocation. A watchdog
 * thread (comm/watchdog.c, started by tpdp_init when TPDP_TIMEOUT_S > 0)
 * looks at the records of every live communicator a few times per second;
 * a call blocked longer than the timeout gets one message on stderr naming
 * the public operation, the communicator, the sequence number and the
 * ranks that have not arrived, and the job is aborted (a thread stuck
 * inside MPI cannot be brought back).
 *
 * To name the ranks that have not arrived without calling MPI (the main
 * thread is stuck inside it), every rank publishes its records in a
 * progress board: shared memory among the ranks of a host (an MPI-3
 * shared window, comm/mpi_watchdog.c), one region per rank, one slot
 * per communicator. A slot holds the sequence number of the latest
 * collective the rank entered on that communicator (1, 2, ...: every rank
 * of a communicator numbers its collectives alike), the latest it
 * finished, and what it is. A communicator's slot is found in a peer's
 * region by a key every member derives alike from the communicator's
 * creation (no communication). Each watchdog also stamps a heartbeat in
 * its region: a rank stopped by SIGSTOP, or hung outside tpdp, stops
 * stamping and shows as "not responding".
 *
 * Across hosts the board is not shared memory: each round, every rank's
 * watchdog sends a copy of its region to the ranks on other hosts and
 * keeps the latest copy it received from each (the backend's `exchange`,
 * non-blocking MPI on a communicator of its own). A remote rank's copy
 * says what it was doing when it last sent; one that stops sending
 * (stopped, hung, dead, or its host unreachable) shows as "not responding"
 * once its last copy is older than a few rounds. What the watchdog cannot
 * know about such a rank is why it went silent, nor anything it did after
 * its last copy.
 *
 * Nothing here calls MPI: the MPI backend makes the board
 * (comm/mpi_watchdog.c) and hands its regions, the exchange and an abort
 * function to comm_watchdog_start, so comm/watchdog.c builds without MPI
 * too (scripts/gpu-check).
 */
#ifndef TPDP_COMM_WATCHDOG_H
#define TPDP_COMM_WATCHDOG_H

#include <stdatomic.h>
#include <stdint.h>

#include "comm/backend.h"

/* Watched operations: the collectives (tpdp_coll_kind), then the backend's
 * other collective calls. */
enum { COMM_OP_SPLIT = TPDP_COLL_BARRIER + 1 };

#define WATCH_SLOTS 64
#define WATCH_NAME_MAX 48

/* One communicator in one rank's region (shared memory). Written by the
 * thread running the communicator's calls, read by every watchdog on the
 * host. */
typedef struct {
  _Atomic uint64_t key;     /* the communicator's key; 0: a free slot */
  _Atomic int64_t started;  /* sequence number of the latest op entered */
  _Atomic int64_t finished; /* of the latest op completed */
  _Atomic double entered_s; /* when `started` was entered (CLOCK_MONOTONIC) */
  _Atomic int32_t op;       /* what `started` is: tpdp_coll_kind / COMM_OP */
  _Atomic int32_t dtype;
  _Atomic int64_t count;
  /* The communicator's name, refreshed by the owner's watchdog (a mesh
   * renames its dims' communicators after creating them). A reader may
   * see a name being rewritten: it is only printed. */
  char name[WATCH_NAME_MAX];
} watch_slot;

/* One rank's part of the board. */
typedef struct {
  _Atomic int32_t world_rank;
  _Atomic int32_t pid;
  _Atomic int32_t finalizing; /* in tpdp_finalize */
  _Atomic double heartbeat_s; /* the watchdog's last round */
  char host[WATCH_NAME_MAX];  /* the rank's host name */
  watch_slot slots[WATCH_SLOTS];
} watch_region;

/* A communicator's watch record (process memory, inside the backend's
 * communicator state). `slot` is its slot in this rank's board region, or
 * `own` when there is no board or no free slot. */
typedef struct comm_watch {
  watch_slot *slot;
  watch_slot own;
  uint64_t key;
  uint64_t splits; /* splits of this communicator so far (child keys) */
  /* The call a thread is blocked in: its sequence number (0: none), since
   * when, and what it is. */
  _Atomic int64_t blocked_seq;
  _Atomic double blocked_s;
  _Atomic int32_t blocked_op;
  _Atomic int32_t blocked_dtype;
  _Atomic int64_t blocked_count;
  const char *_Atomic blocked_func;  /* the public function running */
  const char *_Atomic blocked_label; /* comm_watch_label of the thread */
  const tpdp_comm *comm;
  int *world_ranks; /* world rank of each rank of comm */
  struct comm_watch *next;
} comm_watch;

/* comm_watch_label (comm/services.h) names the thread in a timeout's
 * message. */

/* ---------------------------------------------------------- hot path */

/* Enter operation `op` on the communicator: publishes its sequence number
 * (returned) for the peers. For a non-blocking call this is all until its
 * completion (comm_watch_finish). */
static inline int64_t comm_watch_enter(comm_watch *w, int op, int dtype,
                                       int64_t count, double now) {
  watch_slot *s = w->slot;
  int64_t seq = atomic_load_explicit(&s->started, memory_order_relaxed) + 1;
  atomic_store_explicit(&s->op, op, memory_order_relaxed);
  atomic_store_explicit(&s->dtype, dtype, memory_order_relaxed);
  atomic_store_explicit(&s->count, count, memory_order_relaxed);
  atomic_store_explicit(&s->entered_s, now, memory_order_relaxed);
  atomic_store_explicit(&s->started, seq, memory_order_release);
  return seq;
}

/* This thread blocks in operation `seq` from now on (the watchdog's
 * clock starts). */
static inline void comm_watch_block(comm_watch *w, int64_t seq, int op,
                                    int dtype, int64_t count, double now) {
  atomic_store_explicit(&w->blocked_s, now, memory_order_relaxed);
  atomic_store_explicit(&w->blocked_op, op, memory_order_relaxed);
  atomic_store_explicit(&w->blocked_dtype, dtype, memory_order_relaxed);
  atomic_store_explicit(&w->blocked_count, count, memory_order_relaxed);
  atomic_store_explicit(&w->blocked_func,
                        core_api.depth > 0 ? core_api.func : NULL,
                        memory_order_relaxed);
  atomic_store_explicit(&w->blocked_label, comm_watch_label,
                        memory_order_relaxed);
  atomic_store_explicit(&w->blocked_seq, seq, memory_order_release);
}

static inline void comm_watch_unblock(comm_watch *w) {
  atomic_store_explicit(&w->blocked_seq, 0, memory_order_release);
}

/* Operation `seq` completed (operations complete in order per rank). */
static inline void comm_watch_finish(comm_watch *w, int64_t seq) {
  watch_slot *s = w->slot;
  if (atomic_load_explicit(&s->finished, memory_order_relaxed) < seq)
    atomic_store_explicit(&s->finished, seq, memory_order_release);
}

/* A blocking call: enter + block; returns the sequence number for
 * comm_watch_end. */
static inline int64_t comm_watch_begin(comm_watch *w, int op, int dtype,
                                       int64_t count) {
  double now = core_now_s();
  int64_t seq = comm_watch_enter(w, op, dtype, count, now);
  comm_watch_block(w, seq, op, dtype, count, now);
  return seq;
}

static inline void comm_watch_end(comm_watch *w, int64_t seq) {
  comm_watch_unblock(w);
  comm_watch_finish(w, seq);
}

/* ---------------------------------------------------------- set-up */

/* What the MPI backend hands the watchdog at tpdp_init
 * (comm/mpi_watchdog.c). */
typedef struct {
  double timeout_s; /* > 0 */
  int world_rank;
  int nregions;            /* ranks on this host (0: no board) */
  watch_region **regions;  /* [host rank]: each rank's region */
  const int *region_world; /* [host rank]: its world rank */
  int my_region;
  /* Ends the job after a timeout, with the message already printed (the
   * MPI backend: MPI_Abort). Does not return. */
  void (*abort_job)(void);
  /* With ranks on other hosts (NULL: none): called by the watchdog
   * thread each round; sends a copy of `mine` to every rank on another
   * host and stores each copy that has arrived since in remote[world
   * rank] (world_size entries), setting arrived[world rank] = 1. Never
   * blocks. */
  void (*exchange)(const watch_region *mine, watch_region *remote,
                   int *arrived);
  int world_size;
} comm_watchdog_config;

/* Read TPDP_TIMEOUT_S from the environment (and keep it for
 * comm_timeout_s, comm/services.h). tpdp_init calls it. */
double comm_timeout_read(void);

/* Bytes of one rank's board region. */
size_t comm_watch_region_bytes(void);

/* Start the watchdog thread (copies cfg and the arrays; a no-op returning
 * success when cfg->timeout_s <= 0). */
tpdp_status comm_watchdog_start(const comm_watchdog_config *cfg);
/* Mark this rank as finalizing (for its peers' messages), stop and join
 * the thread, forget the board (the backend frees it afterwards). */
tpdp_status comm_watchdog_stop(void);

/* Start watching a communicator: takes a board slot for `key` (derived
 * alike by every member: comm_watch_child_key), copies world_ranks (the
 * world rank of each of comm's ranks; NULL: unknown). */
tpdp_status comm_watch_register(comm_watch *w, const tpdp_comm *comm,
                                uint64_t key, const int *world_ranks);
/* Stop watching it (before the communicator is freed). */
void comm_watch_unregister(comm_watch *w);
/* The key of the communicator a split of w's communicator with `color`
 * creates (call once per split, on every rank of it: it counts them). */
uint64_t comm_watch_child_key(comm_watch *w, int color);

#endif /* TPDP_COMM_WATCHDOG_H */
