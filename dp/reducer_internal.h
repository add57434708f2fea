// SPDX-License-Identifier: BSD-3-Clause
/*
 * Internal to dp/: the reducer's state, shared by its files. Not installed.
 *
 *   reducer.c         create, destroy, options, accessors, stats
 *   reducer_checks.c  create-time checks and the cross-rank agreement
 *   reducer_thread.c  the communication thread (host buckets)
 *   reducer_step.c    the per-iteration path: prepare (and the one-time
 *                     rebuild), mark, launch, progress, finalize
 *
 * Bucket memory: all buckets live in one arena (one allocation on the
 * parameters' device), each starting on a DP_ALIGN boundary; the 16-bit
 * copies of the compression hooks in a second one. The arenas are sized
 * for any bucket layout of the parameters (DP_ALIGN bytes of slack per
 * parameter), so the one-time rebuild re-slices them: in copy mode in
 * place; in view mode into a spare arena allocated and touched at create,
 * because the gradients move. Nothing in the training loop allocates.
 *
 * Per-iteration state is indexed by iteration number rather than cleared:
 * a parameter's marks count only when mark_iter[p] is the current
 * iteration, and it holds local gradient data ("touched") when mark_iter[p]
 * is later than the last reduced iteration. prepare and finalize therefore
 * cost O(buckets), and a mark O(1) (plus its bucket's launch); in view mode
 * with options.module, finalize also compares one gradient pointer per
 * module parameter that is a reducer parameter (dp_module_param).
 */
#ifndef TPDP_DP_REDUCER_INTERNAL_H
#define TPDP_DP_REDUCER_INTERNAL_H

#include <pthread.h>

#include "comm/services.h"
#include "core/check.h"
#include "tpdp/module.h"
#include "tpdp/reducer.h"

/* Bucket starts are aligned to this many bytes (every dtype's alignment,
 * and a cache line). */
#define DP_ALIGN ((size_t)64)

typedef struct {
  int64_t n;       /* parameters in the bucket */
  int64_t *params; /* their indices, in bucket order */
  size_t *offsets; /* byte offset of each in buf */
  size_t bytes, limit;
  tpdp_dtype dtype;
  void *buf;       /* the bucket's gradients: a slice of the arena */
  void *half;      /* its 16-bit copy (compression hooks), else NULL */
  int64_t expect;  /* parameters it waits for in an iteration */
  int64_t pending; /* of those, not yet ready this iteration */
  int launched;
  int done; /* reduction complete (tested) */
  tpdp_work *work;
  tpdp_tensor comm_view; /* what the communication thread reduces */
  int thread_prepares;   /* the thread divides (and casts) before reducing */
  int fused_avg;         /* reduce with TPDP_OP_AVG: no divide pass */
} dp_bucket;

/* The communication thread of a host (MPI) reducer. Open MPI's
 * non-blocking collectives progress only inside MPI calls and run slower
 * algorithms than the blocking ones, so a launched bucket is handed to this
 * thread, which runs the blocking allreduce while the caller goes on with
 * backward. Buckets launch in order, so the queue is two counters. */
typedef struct {
  int active;
  int waiting; /* the thread sleeps on `more`: a hand-off must signal */
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t more; /* launched grew, or stop */
  pthread_cond_t done; /* finished grew */
  int64_t launched;    /* buckets [0, launched) handed over this iteration */
  int64_t finished;    /* buckets [0, finished) reduced (or failed) */
  int stop;
  tpdp_status status; /* first failure of this iteration */
  int64_t failed;     /* its bucket */
  char message[1024]; /* its tpdp_last_error(), from the thread */
} dp_comm_thread;

typedef struct {
  const void *ptr;
  int64_t index;
} dp_ptr_entry;

typedef struct {
  int64_t key, index;
} dp_key_entry;

/* View mode with options.module: a parameter of the module tree whose
 * tensor is reducer parameter `index` (matched by data pointer at create;
 * one reference held). Its gradient must stay the reducer's view. */
typedef struct {
  tpdp_param *param;
  int64_t index;
} dp_module_param;

/* tpdp_reducer.magic of a live reducer; destroy clears it. */
#define DP_REDUCER_MAGIC 0x52445055u

struct tpdp_reducer {
  unsigned magic; /* DP_REDUCER_MAGIC while alive */
  tpdp_comm *comm;
  /* The mesh whose dim communicator `comm` is (NULL if none): held so that
   * it refuses to be destroyed before the reducer. */
  const tpdp_mesh *mesh;
  void *stream; /* the comm's CUDA stream (NCCL) for bucket ops; NULL on MPI */
  tpdp_device device; /* every parameter's */
  int solo;           /* a communicator of one rank: reductions are no-ops */
  tpdp_reducer_param *params; /* the reducer's copy of the caller's array */
  /* View mode: the caller's array, whose grads destroy points back at
   * params[i].grad (the caller's own buffers); NULL in copy mode. */
  tpdp_reducer_param *caller;
  int64_t n;
  tpdp_reducer_options opt;
  double divide;
  tpdp_dtype half_dtype; /* the compression hook's 16-bit dtype */
  char **fqns;
  tpdp_tensor *views; /* current grad views (slots in view mode) */
  int64_t *bucket_of;
  dp_ptr_entry *by_ptr; /* sorted by pointer: mark_ready_ptr */
  int64_t nptr;
  dp_module_param *mod_params; /* checked by finalize; NULL if none */
  int64_t nmod_params;

  dp_bucket *buckets;
  int64_t nbuckets;
  void *arena; /* every bucket's gradients */
  void *spare; /* view mode, rebuild ahead: the rebuilt buckets' arena */
  /* Host buckets reduced on the communication thread, with the ranks on
   * one host: arena and spare live in this segment, which every rank
   * maps, and the thread reduces them with comm_allreduce_shm. NULL: they
   * are the reducer's own memory. */
  comm_shm *shm;
  void *half_arena;
  size_t arena_bytes, half_bytes; /* capacities */
  int64_t next_launch;
  int64_t first_inflight;

  int64_t iter;         /* iterations started (prepare calls that passed) */
  int64_t *mark_iter;   /* iteration of each parameter's last mark */
  int *marks;           /* its marks in that iteration */
  int64_t nmarked;      /* parameters marked this iteration */
  int64_t reduced_iter; /* last iteration whose gradients were reduced */
  int *expected;        /* static graph: marks per iteration, learned */
  int64_t *last_seq;    /* sequence number of the last mark (first sync) */
  int64_t seq;

  int in_iter;
  int sync;
  int64_t synced_iters;
  int static_learned;
  int rebuilt;
  int rebuild_pending;
  int64_t *rebuild_order; /* allocated at create when a rebuild may come */
  dp_key_entry *sort_tmp;

  int64_t *unused;
  int64_t nunused;

  tpdp_reducer_stats stats;
  dp_comm_thread ct;
};

/* Run `call` (a tpdp_status expression) adding its time to stats.field;
 * the status lands in `st_out`. */
#define DP_TIMED(r, field, st_out, call)    \
  do {                                      \
    double t0_ = core_now_s();              \
    (st_out) = (call);                      \
    (r)->stats.field += core_now_s() - t0_; \
  } while (0)
/* The same, returning a failure as CHECK does. */
#define DP_CHECK_TIMED(r, field, call) \
  do {                                 \
    tpdp_status dt_;                   \
    DP_TIMED(r, field, dt_, call);     \
    CHECK(dt_);                        \
  } while (0)

/* ---- reducer.c */

/* The parameter whose data pointer is `data` (by_ptr), else -1. */
int64_t dp_find_ptr(const tpdp_reducer *r, const void *data);
/* "3 ('fc.weight')" or "3". */
void dp_param_desc(const tpdp_reducer *r, int64_t i, char *buf, size_t len);
/* A view of slot k of bucket b (its parameter's shape and dtype). */
tpdp_tensor dp_slot_view(const tpdp_reducer *r, const dp_bucket *b, int64_t k);
/* Buckets from an assignment, in its order, sliced from `arena` (and the
 * reducer's half arena): allocation of their index arrays only. Free with
 * dp_free_buckets. */
tpdp_status dp_build_buckets(tpdp_reducer *r, const tpdp_bucket_assignment *a,
                             void *arena, dp_bucket **out, int64_t *nout);
/* Wait for work still attached (first failure returned) and free. */
tpdp_status dp_free_buckets(dp_bucket *b, int64_t nb);
/* Give the spare arena's memory back (after the rebuild) and forget it. */
tpdp_status dp_release_spare(tpdp_reducer *r);
/* Parameters' tensors as an array for tpdp_bucket_assign (caller frees). */
tpdp_status dp_param_tensors(const tpdp_reducer *r, tpdp_tensor **out);

/* TPDP_ERR_NULL_POINTER for NULL, TPDP_ERR_INVALID_ARGUMENT for a reducer
 * that was destroyed (as far as its freed memory still shows the cleared
 * magic: reading it is undefined behaviour, a best-effort check). */
tpdp_status dp_check_handle(const tpdp_reducer *r);

/* ---- reducer_checks.c */

/* The caller's options (NULL: defaults) into *out, by their `size`:
 * fields wholly inside an older, smaller struct are taken, the rest keep
 * their defaults. TPDP_ERR_INVALID_ARGUMENT for a size of 0, one larger
 * than this library's struct or an unknown version. */
tpdp_status dp_options_resolve(const tpdp_reducer_options *in,
                               tpdp_reducer_options *out);
/* Checks of options and parameters that need no communication. */
tpdp_status dp_check_local(tpdp_comm *comm, const tpdp_reducer_param *params,
                           int64_t n, const tpdp_reducer_options *o);
/* Same options (those that change what is communicated or computed),
 * count, dtypes and shapes on every rank. Collective. */
tpdp_status dp_check_across(tpdp_comm *comm, const tpdp_reducer_param *params,
                            int64_t n, const tpdp_reducer_options *o);
/* Same parameter values on every rank (a checksum of each parameter's
 * bytes), else an error naming the first differing parameter, the ranks,
 * and the communicator to use. Device parameters are read after
 * `producer_stream`. Collective; nothing on a one-rank communicator. */
tpdp_status dp_check_values(tpdp_comm *comm, const tpdp_reducer_param *params,
                            int64_t n, void *producer_stream);

/* ---- reducer_thread.c */

/* Start the thread if this reducer uses one (host memory, a backend that
 * allows collectives from two threads, several ranks, no user hook). */
tpdp_status dp_thread_start(tpdp_reducer *r);
/* Stop and join it (no-op when not started). */
tpdp_status dp_thread_stop(tpdp_reducer *r);
/* A new iteration: nothing handed over yet. */
void dp_thread_reset(tpdp_reducer *r);
/* Hand bucket j (buckets go in order) to the thread. */
void dp_thread_hand(tpdp_reducer *r, int64_t j);
/* Wait until bucket j is reduced; its failure, or an earlier one of this
 * iteration, as an error naming the bucket. */
tpdp_status dp_thread_wait(tpdp_reducer *r, int64_t j);
/* Wait until every bucket handed over is done; the iteration's failure. */
tpdp_status dp_thread_drain(tpdp_reducer *r);

/* ---- reducer_step.c */

/* 1 if the buckets are rebuilt after the first synchronised iteration
 * (reads r->opt and r->solo). */
int dp_rebuild_ahead(const tpdp_reducer *r);
/* End the iteration after a failure: wait for whatever was handed over or
 * is in flight, and drop its gradients' "touched" state. Returns the first
 * failure of those waits (TPDP_SUCCESS if none). */
tpdp_status dp_abort_iteration(tpdp_reducer *r);

#endif /* TPDP_DP_REDUCER_INTERNAL_H */
