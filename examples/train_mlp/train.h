// SPDX-License-Identifier: BSD-3-Clause
/*
 * Internals of examples/train_mlp, shared by its files:
 *
 *   options.c      flags and their checks
 *   model_tree.c   the module tree (the model's full tensors, its names)
 *   checkpoint.c   --save / --load (sharded checkpoints, any mesh)
 *   reference.c    --check's reference: the model in one process
 *   cpu_backend.c  the model (mlp.c) and AdamW on the host
 *   cuda_backend.c the same on a GPU (mlp_cuda.cu; --config=cuda only)
 *   train_mlp.c    setup, the training loop, the summary, --check, main
 *
 * The loop is written once against an ex_backend (examples/common/
 * trainer.h, the table train_gpt2's backends fill too): what differs with
 * the device (where parameters, gradients and optimizer state live, which
 * model step runs, how TP collectives and the loss sum move data, how
 * --check reads the trained parameters back) is its functions.
 */
#ifndef TPDP_EXAMPLES_TRAIN_MLP_TRAIN_H
#define TPDP_EXAMPLES_TRAIN_MLP_TRAIN_H

#include <stdio.h>

#include "examples/common/nn_cpu.h"
#include "examples/common/trainer.h"
#include "examples/common/trainer_util.h"
#include "examples/common/util.h"
#include "examples/train_mlp/mlp.h"
#include "tpdp/tpdp.h"

/* ------------------------------------------------------------ options */

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
  int dp_replicate; /* --dp-replicate: replica groups of the dp ranks */
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

/* 0, 1 after --help, 2 on a usage error (printed as "train_mlp: ..."). */
int parse_options(int argc, char **argv, options *o);

/* AdamW as the MLP trains with it: torch.optim.AdamW's defaults but the
 * learning rate (weight decay 0.01). */
#define MLP_WEIGHT_DECAY 0.01
nn_adamw_opts mlp_adamw_opts(const options *o);

/* ------------------------------------------------------------ model tree */

typedef struct {
  mlp_shape shape;
  tpdp_module *root;
  int nparams;
  tpdp_param **params; /* in mlp index order */
  char (*names)[64];
  float **full; /* caller-side full tensors (replicated params keep them) */
  float **full_grad;
} model_tree;

tpdp_status build_tree(const mlp_shape *s, uint64_t seed, model_tree *t);
void free_tree(model_tree *t);
/* Elements of parameter i's full (unsharded) tensor. */
int64_t full_numel(const mlp_shape *s, int i);

/* ------------------------------------------------------------ trainer */

/* The model's batch: this rank's rows of the synthetic data. */
struct ex_batch {
  const float *x;
  const int *labels;
};

/* One training run: what the loop and every backend share. */
typedef struct ex_trainer trainer;
struct ex_trainer {
  options o;
  const ex_backend *b;
  int rank;         /* in the world; -1 until known */
  tpdp_comm *world; /* NULL in a build without MPI */
  mlp_shape s;
  model_tree tree;
  tpdp_mesh *mesh;
  tpdp_comm *own_comm; /* the backend's communicator under the mesh
                            (cuda: NCCL; NULL: the world), destroyed after
                            the mesh */
  tpdp_comm *dp_comm;
  /* --zero: the units' dp_shard communicator (dp_comm itself without
   * --dp-replicate) and dp_replicate one (NULL without) */
  tpdp_comm *shard_comm, *replicate_comm;
  int dp_rank;
  int f_local;     /* this TP rank's rows of F (the fc1 width) */
  int batch_local; /* this DP rank's rows of the global batch */
  int accumulate;  /* this backward adds into the gradients (--accum) */
  /* The model's parameters as the reducer sees them, and the pointers the
   * model reads: the backend fills them in setup; the loop re-points
   * grad[i] at the reducer's buckets every step. */
  tpdp_reducer_param *rparams;
  float **param, **grad;
  void *grad_stream;     /* the stream producing gradients (cuda) or NULL */
  tpdp_reducer *reducer; /* --zero 0 */
  tpdp_fsdp_unit *fsdp;  /* --zero >= 1: the root unit (tpdp/fsdp.h) */
  ex_param_views *views; /* --zero >= 1: param[] and grad[] kept current */
  /* place_tree's specs (one per parameter, NULL where replicated),
   * destroyed after the tree that points at them */
  tpdp_spec **tree_specs;
  ex_times tm;
  char model_note[96]; /* appended to the "model (mesh ...)" header */
  void *dev;           /* the backend's own state */
  ex_error err;
  int err_agreed; /* err is the same on every rank (rank 0 prints it) */
};

extern const ex_backend mlp_cpu_backend;
#ifdef TPDP_EXAMPLES_MLP_CUDA
extern const ex_backend mlp_cuda_backend;
#endif

/* The models' grad_ready callback (ctx: the trainer): gradient i is final
 * (cpu) or queued on grad_stream (cuda); the reducer may start its bucket.
 * 0, or 1 with t->err set. */
int train_grad_ready(int i, void *trainer);

/* --zero: the block's module hooks around its forward and backward (the
 * models' block_fn, ctx the trainer); 0, or 1 with t->err set. */
int train_block_event(int event, int layer, void *trainer);

/* checkpoint.c: --load's configuration (the saved model flags replace the
 * options; *start: the saved step), exit code 0, 1 or 2 with t->err set;
 * then the weights and moments into this run's layout, and saving. 0, or
 * -1 with t->err set. */
int read_checkpoint_config(trainer *t, int *start);
int load_checkpoint(trainer *t, int start);
int save_checkpoint(trainer *t, int step);

/* reference.c: the same model trained in this one process. 0, or 1 when
 * out of memory. */
int train_reference(const options *o, const mlp_shape *s, double *ref_loss,
                    float **ref_params);

#endif
