// SPDX-License-Identifier: BSD-3-Clause
/*
 * Internals of examples/train_mlp shared by train_mlp.c (options, module
 * tree, the training loop and --check, and the CPU backend) and
 * train_cuda.c (the --device cuda backend, built with --config=cuda only).
 *
 * The loop is written once against a train_backend: the few things that
 * differ with the device (where parameters, gradients and optimizer state
 * live, which model step runs, how TP collectives and the loss sum move
 * data, how --check reads the trained parameters back) are its functions.
 */
#ifndef TPDP_EXAMPLES_TRAIN_H
#define TPDP_EXAMPLES_TRAIN_H

#include <stdio.h>

#include "examples/common/trainer_util.h"
#include "examples/train_mlp/mlp.h"
#include "tpdp/tpdp.h"

typedef struct {
  int dp, tp, layers, hidden, width, inputs, classes, batch, steps;
  double lr;
  unsigned long long seed;
  const char *device;
  double bucket_mib;
  int check;
  int quiet;
  const char *save_dir; /* --save: checkpoint when the run ends */
  int save_every;       /* --save-every: also every N steps (0: never) */
  const char *load_dir; /* --load: resume from this checkpoint */
  unsigned given;       /* OPT_* bits of the model flags given */
  int zero;             /* --zero: 0 = the DDP reducer, 1-3 = ZeRO level */
  int accum;            /* --accum: micro-batches per optimizer step */
  /* --param-dtype / --reduce-dtype: the units' mixed precision (text as
   * given, and parsed) */
  const char *param_dtype_name, *reduce_dtype_name;
  tpdp_dtype param_dtype, reduce_dtype;
} options;

/* Model flags a checkpoint carries: given with --load, they must agree. */
enum {
  OPT_LAYERS = 1,
  OPT_HIDDEN = 2,
  OPT_WIDTH = 4,
  OPT_INPUTS = 8,
  OPT_CLASSES = 16,
  OPT_BATCH = 32,
  OPT_LR = 64,
  OPT_SEED = 128
};

typedef struct {
  mlp_shape shape;
  tpdp_module *root;
  int nparams;
  tpdp_param **params; /* in mlp index order */
  char (*names)[64];
  float **full; /* caller-side full tensors (replicated params keep them) */
  float **full_grad;
} model_tree;

/* Host seconds per part of the steps, for the summary's time line. */
typedef struct {
  double hooks;    /* tpdp forward_begin / forward_end */
  double model;    /* the backend's forward and backward calls */
  double finalize; /* reducer finalize, and the model waiting for it */
  double optim;    /* the optimizer step */
  double data;     /* drawing the synthetic batch and its teacher labels
                      on the host (not the trainer's work; excluded from
                      the step time) */
} train_times;

/* The context of train_grad_ready, which the backends hand their model's
 * backward: the reducer starts reducing a bucket as soon as its last
 * gradient is marked, while backward goes on. */
typedef struct {
  tpdp_reducer *reducer;
  tpdp_status status;
  double seconds;
} dp_ctx;
int train_grad_ready(int i, void *ctx);

/* --zero: the block's module hooks around its forward and backward (the
 * models' block_fn, ctx the trainer); 0, or 1 after printing what failed. */
int train_block_event(int event, int layer, void *trainer);

typedef struct train_backend train_backend;

/* One training run: what the loop and every backend share. */
typedef struct {
  options o;
  const train_backend *b;
  int rank; /* in the world; -1 until known */
  mlp_shape s;
  model_tree tree;
  tpdp_mesh *mesh;
  tpdp_comm *own_comm; /* the backend's communicator under the mesh
                            (cuda: NCCL), destroyed after the mesh */
  tpdp_comm *dp_comm;
  int dp_rank;
  int f_local;     /* this TP rank's rows of F (the fc1 width) */
  int batch_local; /* this DP rank's rows of the global batch */
  int accumulate;  /* this backward adds into the gradients (--accum) */
  /* The model's parameters as the reducer sees them, and the pointers the
   * model reads: the backend fills them in setup; the loop re-points
   * grad[i] at the reducer's buckets every step. */
  tpdp_reducer_param *rparams;
  float **param, **grad;
  void *grad_stream; /* the stream producing gradients (cuda) or NULL */
  dp_ctx dp;
  tpdp_fsdp_unit *fsdp;  /* --zero >= 1: the root unit (tpdp/fsdp.h) */
  ex_param_views *views; /* --zero >= 1: param[] and grad[] kept current */
  /* place_tree's specs (one per parameter, NULL where replicated),
   * destroyed after the tree that points at them */
  tpdp_spec **tree_specs;
  char model_note[96]; /* appended to the "model (mesh ...)" header */
  void *dev;           /* the backend's own state */
} trainer;

/* What differs with --device. Every function returns 0, or nonzero after
 * printing what failed. NULL where a device has nothing to do. */
struct train_backend {
  /* 1: a build without MPI (tpdp_init: TPDP_ERR_UNSUPPORTED) still runs a
   * single rank, on a communicator of the backend's own. */
  int runs_without_mpi;
  /* 1: the module tree's tensors are the ones the model trains, so its
   * gradients follow the reducer's buckets too (cpu; under cuda the tree
   * is host-side bookkeeping at --zero 0, and on the GPU under --zero). */
  int tree_holds_model;
  /* Its state in t->dev, and the communicator to build the mesh over
   * (world may be NULL under runs_without_mpi). */
  int (*open)(trainer *t, tpdp_comm *world, tpdp_comm **mesh_comm);
  /* After tpdp_parallelize, before tpdp_pre_dp_transform: under --zero the
   * units shard the tree's own tensors, so they must be where the model
   * trains: the local shards moved there (cuda), under specs that name
   * that device (made into t->tree_specs). NULL: the tree is there. */
  int (*place_tree)(trainer *t);
  /* After tpdp_pre_dp_transform: the TP collectives' context, t->rparams /
   * param / grad, optimizer state and the model, with the parameters ready
   * for the reducer's broadcast. */
  int (*setup)(trainer *t);
  /* The model's step on this rank's rows; *loss_sum: their summed loss. */
  int (*forward)(trainer *t, const float *x, const int *labels,
                 double *loss_sum);
  /* Backward, calling train_grad_ready(i, &t->dp) per final gradient. */
  int (*backward)(trainer *t);
  /* Order the model after what the reducer queued on the dp stream. */
  int (*wait_dp)(trainer *t);
  int (*optimizer_step)(trainer *t, int step); /* step counts from 1 */
  /* In-place sum of one double over the dp communicator. */
  int (*sum_over_dp)(trainer *t, double *v);
  /* The last step's work done (the summary times it). */
  int (*finish)(trainer *t);
  /* The summary's "time..." line. */
  void (*print_time)(const trainer *t, const train_times *tm,
                     const tpdp_reducer_stats *rs);
  /* Views of parameter i's AdamW moments (the local shape, where the
   * backend keeps them), for checkpoints. */
  int (*moment_views)(trainer *t, int i, tpdp_tensor *m1, tpdp_tensor *m2);
  /* Full value of parameter i (n floats) into host `out`; collective. */
  int (*gather_param)(trainer *t, int i, float *out, int64_t n);
  /* Frees the model, buffers and t->dev; safe after any failure. */
  void (*release)(trainer *t);
};

#ifdef TPDP_EXAMPLES_MLP_CUDA
extern const train_backend train_cuda_backend;
#endif

/* On failure of a tpdp call: report it with the rank and go to `fail`
 * (needs `t`, the trainer, in scope). */
#define TRY(call)                                                    \
  do {                                                               \
    tpdp_status st_ = (call);                                        \
    if (st_ != TPDP_SUCCESS) {                                       \
      ex_error e_;                                                   \
      ex_tpdp_fail(&e_, #call, st_);                                 \
      fprintf(stderr, "[rank %d] train_mlp: %s\n", t->rank, e_.msg); \
      goto fail;                                                     \
    }                                                                \
  } while (0)

#endif
