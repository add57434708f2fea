// SPDX-License-Identifier: BSD-3-Clause
/*
 * The contract both example trainers (examples/train_mlp,
 * examples/train_gpt2) follow:
 *
 *  - a trainer is its program's `struct ex_trainer` (its train.h defines
 *    it; this folder only passes pointers to it), holding at least an
 *    `ex_error err`: where every failure's message goes;
 *  - what differs with --device is an ex_backend, one table of the same
 *    shape in both programs (NULL where a backend has nothing to do);
 *  - a failing call leaves its message in t->err and returns -1 (TRY); the
 *    program prints it once, where the run ends (ex_report_failure);
 *  - the run ends with one summary (ex_print_summary) and, with --check,
 *    one comparison against a one-process run (ex_check_compare).
 */
#ifndef TPDP_EXAMPLES_COMMON_TRAINER_H
#define TPDP_EXAMPLES_COMMON_TRAINER_H

#include <stdint.h>

#include "examples/common/trainer_util.h"
#include "examples/common/util.h"
#include "tpdp/tpdp.h"

/* Each program's trainer and the batch its model reads (train.h). */
typedef struct ex_trainer ex_trainer;
typedef struct ex_batch ex_batch;

/* Host seconds per part of the timed steps. */
typedef struct {
  double hooks;    /* tpdp's module hooks (forward / backward begin, end) */
  double model;    /* the backend's forward and backward calls */
  double finalize; /* the reducer's finalize, the model waiting for it */
  double optim;    /* the optimizer step */
  double mark;     /* inside the reducer's mark_ready (grad_ready) */
  double data;     /* reading or drawing batches (not training time) */
  double ckpt;     /* saving checkpoints (not training time) */
} ex_times;

/* What differs with --device. Every function returns 0, or -1 with the
 * failure in t->err. */
typedef struct {
  /* 1: the module tree's tensors are the ones the model trains, so the
   * tree's gradients follow the reducer's buckets (cpu). */
  int tree_holds_model;
  /* 1: a build without MPI (tpdp_init: TPDP_ERR_UNSUPPORTED) still runs a
   * single rank, on a communicator of the backend's own. */
  int runs_without_mpi;
  /* The device's state in t->dev and its communicators (collective).
   * NULL: none. */
  int (*open)(ex_trainer *t);
  /* Under --zero, after tpdp_parallelize: the tree's local shards moved
   * where the model trains (the units shard the tree's own tensors). NULL:
   * the tree is there already. */
  int (*place_tree)(ex_trainer *t);
  /* After tpdp_pre_dp_transform: the model, its parameters (initial values
   * from the tree), gradients, optimizer state, what the reducer sees. */
  int (*setup)(ex_trainer *t);
  /* Forward on this rank's rows of `batch`; the loss comes from `loss`. */
  int (*forward)(ex_trainer *t, const ex_batch *batch, float loss_scale);
  /* Backward, each final gradient marked ready (the reducer may start). */
  int (*backward)(ex_trainer *t);
  /* Order the model after what the reducer queued (cuda). NULL: the
   * collectives are synchronous. */
  int (*wait_dp)(ex_trainer *t);
  int (*optimizer_step)(ex_trainer *t, int step); /* step counts from 1 */
  /* The last forward's summed loss over this rank's rows. */
  int (*loss)(ex_trainer *t, double *loss_sum);
  /* In-place sum of one double over the dp ranks. NULL: over the host's dp
   * communicator. */
  int (*sum_over_dp)(ex_trainer *t, double *v);
  /* The work queued so far is done (timing, checkpoints). NULL: nothing
   * is queued. */
  int (*finish)(ex_trainer *t);
  /* The trained parameters into the host tree's tensors before --check
   * gathers them there. NULL: the tree holds them. */
  int (*params_to_host)(ex_trainer *t);
  /* Full value of parameter i (n floats) into host `out`, collective.
   * NULL: gathered from the host tree. */
  int (*gather_param)(ex_trainer *t, int i, float *out, int64_t n);
  /* Views of parameter i's AdamW moments (where the backend keeps them),
   * for checkpoints. NULL where the trainer keeps the moments itself
   * (train_gpt2's t->m1, t->m2). */
  int (*moment_views)(ex_trainer *t, int i, tpdp_tensor *m1, tpdp_tensor *m2);
  /* The summary's "time..." line: tm over the timed steps, the reducer's
   * collectives and passes over gradient data. */
  void (*print_time)(const ex_trainer *t, const ex_times *tm, double dp_comm,
                     double dp_data);
  /* Frees the model and t->dev; safe after any failure. */
  void (*release)(ex_trainer *t);
} ex_backend;

/* fn(t), or 0 where the backend has no such function (NULL). */
static inline int ex_call(int (*fn)(ex_trainer *), ex_trainer *t) {
  return fn != NULL ? fn(t) : 0;
}

/* Full value of a parameter of the host tree into `out` (NULL: this rank
 * only takes part), collective over its spec's mesh for a sharded one. 0,
 * or -1 with e set. */
int ex_gather_param(const tpdp_param *p, void *out, ex_error *e);

/* In a trainer's function with `t` in scope: when a tpdp call fails, its
 * message into t->err and return -1. */
#define TRY(call) EX_TRY(&t->err, call)

/* A run's failure, printed once: by rank 0 as "<prog>: <msg>" when every
 * rank agreed on it (the lowest failing rank's message), else by each
 * failing rank as "<prog>: [rank R] <msg>". */
void ex_report_failure(const char *prog, int rank, int agreed, const char *msg);

/* The summary of a run. */
typedef struct {
  const char *unit;     /* "tokens", "samples" */
  int64_t per_step;     /* units per optimizer step */
  int first, last;      /* the steps timed, first..last */
  double elapsed;       /* their seconds */
  const char *left_out; /* what elapsed leaves out ("the first step, ...") */
  double hooks;         /* tpdp's hooks over the timed steps */
  /* the reducer's seconds over the timed steps (zeros under --zero) */
  double reducer_total, reducer_comm, reducer_data;
  const tpdp_reducer *reducer; /* NULL: fully sharded units (zero) */
  int zero;
  /* the units' line (each rank): NULL without --zero */
  const tpdp_fsdp_unit *fsdp;
  tpdp_dtype param_dtype, reduce_dtype;
  int dp_shard, dp_replicate; /* --dp / --dp-replicate, --dp-replicate */
} ex_summary;

/* Rank 0 (print) prints the throughput, the backend's time line, tpdp's
 * overhead, the reducer (or units) line and the OpenBLAS line; then each
 * rank its units' line, then the peak memory line over comm (collective).
 * steps timed < 1: the throughput line says n/a, and only the memory
 * lines follow. */
void ex_print_summary(const ex_summary *s, const ex_backend *b,
                      const ex_trainer *t, const ex_times *tm, int rank,
                      int print, tpdp_comm *comm);

/* --check on rank 0: the largest relative loss difference over steps
 * [first, steps) and the largest absolute parameter difference (NaN
 * counts as a failure), printed as "check: max_rel_loss_diff X
 * max_abs_param_diff Y (NAME element K)", then "check: ok" or "check:
 * FAILED (tolerance 1e-4)". ref_failed: the reference run failed. Returns
 * the exit code, 0 or 1. */
int ex_check_compare(const double *loss, const double *ref_loss, int first,
                     int steps, float *const *params, float *const *ref_params,
                     const int64_t *numel, const char *const *names, int np,
                     int ref_failed);

#endif
