// SPDX-License-Identifier: BSD-3-Clause
/*
 * Internals of examples/train_gpt2, shared by its files:
 *
 *   options.c      flags, their checks, Hugging Face's config.json
 *   model_setup.c  the module tree with Hugging Face's names, the safetensors
 *                  file's checks, TP layouts with each rank reading only its
 *                  slices
 *   checkpoint.c   --save / --load (sharded checkpoints, any mesh)
 *   cpu_backend.c  the model and AdamW on the host (gpt2.c, OpenBLAS)
 *   cuda_backend.c the same on a GPU (gpt2_cuda.cu; --config=cuda only)
 *   setup.c        everything up to the first step, and the teardown
 *   train_gpt2.c   the training loop, the summary, --check, main
 *
 * The loop is written once against an ex_backend (examples/common/
 * trainer.h, the table train_mlp's backends fill too): what differs with
 * --device (where parameters, gradients, moments and activations live,
 * which model runs, how TP collectives move data) is its functions. The
 * module tree, the checkpoints and the cross-rank agreement on errors stay
 * on the host over the MPI world in both.
 */
#ifndef TPDP_EXAMPLES_TRAIN_GPT2_TRAIN_H
#define TPDP_EXAMPLES_TRAIN_GPT2_TRAIN_H

#include <stdint.h>
#include <stdio.h>

#include "examples/common/nn_cpu.h"
#include "examples/common/tokens.h"
#include "examples/common/trainer.h"
#include "examples/common/trainer_util.h"
#include "examples/common/util.h"
#include "examples/train_gpt2/gpt2.h"
#include "tpdp/tpdp.h"

/* ------------------------------------------------------------ options */

/* Flags given on the command line (--load takes the others from the
 * checkpoint). */
enum {
  G_BATCH = 1,
  G_SEQ = 2,
  G_LR = 4,
  G_BETA1 = 8,
  G_BETA2 = 16,
  G_EPS = 32,
  G_WD = 64,
  G_SEED = 128,
  G_SHAPE = 256 /* a random-init shape flag */
};

typedef struct {
  const char *model_dir, *data, *device;
  int dp, tp, batch, seq, steps, sp, check, quiet, tf32;
  gpt2_config shape; /* the random-init shape (without --model) */
  nn_adamw_opts adamw;
  double weight_decay, bucket_mib;
  unsigned long long seed;
  const char *save_dir, *load_dir;
  int save_every;
  unsigned given;   /* G_* of the flags given */
  int zero;         /* --zero: 0 = the DDP reducer, 1-3 = ZeRO level */
  double grad_clip; /* --grad-clip: max global gradient norm (0: off) */
  int accum;        /* --accum: micro-batches per optimizer step */
  int dp_replicate; /* --dp-replicate: replica groups of the dp ranks */
  /* --param-dtype / --reduce-dtype: the units' mixed precision (text as
   * given, and parsed by check_options) */
  const char *param_dtype_name, *reduce_dtype_name;
  tpdp_dtype param_dtype, reduce_dtype;
} options;

/* 0, 1 after --help, 2 on a usage error (printed). */
int parse_options(int argc, char **argv, options *o);
/* Input errors that need no file: the same on every rank. Parses the
 * dtype flags. */
int check_options(options *o, ex_error *e);
/* The shape: positive sizes, heads dividing the width (`src` names where
 * it came from). Fills n_inner's default. */
int check_shape(gpt2_config *c, const char *src, ex_error *e);
/* Hugging Face's GPT2Config from DIR/config.json, or from its text. */
int read_config(const char *dir, gpt2_config *c, ex_error *e);
int parse_config(const char *text, const char *path, gpt2_config *c,
                 ex_error *e);
/* config.json's text for c. */
void config_json(const gpt2_config *c, char *buf, size_t len);

/* ------------------------------------------------------------ trainer */

/* The model's batch: this rank's rows of tokens, each followed by its
 * target (the next token). */
struct ex_batch {
  const int32_t *tokens;
};

typedef struct ex_trainer trainer;
struct ex_trainer {
  options o;
  const ex_backend *b;
  tpdp_comm *comm; /* the host mesh's parent: world, or a 1-rank split */
  int rank;
  int print;      /* the tree report and step lines (rank 0, not --quiet) */
  int accumulate; /* this backward adds into the gradients (--accum) */
  int summary;    /* the throughput / time / memory lines (rank 0) */
  int err_agreed; /* err is the same on every rank (rank 0 prints it) */
  gpt2_config c;
  char model_path[4096];
  tpdp_safetensors *st; /* the file of --model */
  const char *prefix;   /* "transformer." or "" in the file */
  tok_file tok;
  /* The host mesh (dp x tp over comm): the module tree, checkpoints,
   * --check's gathers. Its dim communicators move host memory. */
  tpdp_mesh *mesh;
  tpdp_comm *dp_comm, *tp_comm;
  /* --zero: the units' dp_shard communicator (reduce_comm itself without
   * --dp-replicate) and dp_replicate one (NULL without); replica_comm
   * joins the dp_shard x tp ranks of this rank's replica group (the
   * mesh's communicator without --dp-replicate): --grad-clip's norm */
  tpdp_comm *shard_comm, *replicate_comm, *replica_comm;
  int dp_rank, tp_rank;
  /* Where the model trains: the reducer's communicator over dp (the host
   * mesh's, or the device mesh's under cuda), the memory kind, the stream
   * producing gradients (cuda) or NULL. */
  tpdp_comm *reduce_comm;
  tpdp_device device;
  void *grad_stream;
  tpdp_module *root, *wte, *sp_module;
  int np;
  gpt2_param_info *info;
  tpdp_param **params;
  float **storage; /* this program's storage of replicated parameters */
  float **grad_storage;
  tpdp_reducer_param *rparams; /* what the reducer and checkpoints see */
  tpdp_reducer *reducer;       /* --zero 0 */
  tpdp_fsdp_unit *fsdp;        /* --zero 1-3: the root unit (tpdp/fsdp.h) */
  ex_param_views *views;       /* --zero 1-3: P and G kept current */
  char (*fqn)[96];
  float **P, **G, **m1, **m2; /* the model's (host or device) */
  /* The specs checkpoints save the model's tensors under: the tree's
   * (NULL), or the backend's copies naming its device. */
  tpdp_spec **state_specs;
  gpt2_dims dims;
  int fill_failed;       /* fill_shard failed; err says why */
  int start;             /* the first step (the checkpoint's with --load) */
  int64_t resume_pos;    /* --load: the data position to go on from */
  char saved_data[4096]; /* --load without --data: the saved token file */
  ex_times tm;
  gpt2_timers model_tm;  /* inside the model (its compute, TP collectives) */
  gpt2_timers model_tm0; /* model_tm where the timed steps start */
  void *dev;             /* the backend's own state */
  char model_note[96];   /* appended to the tree report's heading */
  ex_error err;
};

/* The backends (examples/common/trainer.h's table): cpu_backend.c,
 * cuda_backend.c. */
extern const ex_backend gpt2_cpu_backend;
#ifdef TPDP_EXAMPLES_GPT2_CUDA
extern const ex_backend gpt2_cuda_backend;
#endif

/* A tpdp call that failed: its message into t->err; returns -1. */
#define tpdp_fail(t, what, st) ex_tpdp_fail(&(t)->err, (what), (st))

/* setup.c: everything up to the first step. 0, or -1 with t->err set
 * (identical on every rank: see agree). */
int trainer_setup(trainer *t);
/* Frees what setup made (safe after any failure). */
void trainer_free(trainer *t);

/* All ranks of t->comm fail together with the lowest failing rank's
 * message: 0 when none failed, else -1 (and t->err_agreed). */
int agree(trainer *t, int failed);

/* The models' grad_ready callback (ctx: the trainer): gradient i is final
 * (cpu) or queued on grad_stream (cuda); the reducer may start its bucket. */
int trainer_grad_ready(void *ctx, int i);

/* The tree's current views into t->P and t->G: under --zero, fully sharded
 * units re-point parameters and gradients as they gather and reshard. */
void trainer_refresh_views(trainer *t);

/* model_setup.c */
int check_file(trainer *t);
int build_tree(trainer *t);
int parallelize(trainer *t);

/* checkpoint.c */
int save_checkpoint(trainer *t, int step);
int read_checkpoint(trainer *t);
int load_checkpoint(trainer *t);

#endif
