// SPDX-License-Identifier: BSD-3-Clause
/*
 * What the example trainers (examples/train_mlp, examples/train_gpt2)
 * share beyond the model math: numeric flags that reject what is not a
 * number, a failed tpdp call turned into one message, the checkpoint
 * entries of a model trained with AdamW (PyTorch's optimizer state names),
 * the fully sharded units' hooks and the model's f32 views of the units'
 * tensors (mixed precision), and the per-rank peak memory line.
 */
#ifndef TPDP_EXAMPLES_COMMON_TRAINER_UTIL_H
#define TPDP_EXAMPLES_COMMON_TRAINER_UTIL_H

#include <stdint.h>
#include <stdio.h>

#include "examples/common/util.h"
#include "tpdp/tpdp.h"

/* A program's flags as a table: --name VALUE (or --name for a switch),
 * parsed by ex_parse_flags. */
typedef enum {
  EX_FLAG_INT,    /* int *value */
  EX_FLAG_DOUBLE, /* double *value */
  EX_FLAG_U64,    /* unsigned long long *value */
  EX_FLAG_STRING, /* const char **value (argv's text) */
  EX_FLAG_SWITCH  /* int *value, set to 1; takes no value */
} ex_flag_kind;
typedef struct {
  const char *name; /* without the dashes: "steps" */
  ex_flag_kind kind;
  void *value;
  unsigned bit; /* or'ed into *given when the flag appears (0: none) */
} ex_flag;

/* Parses argv (getopt_long) against `flags` and --help. `prog` prefixes
 * the messages. Returns 0, 1 after --help (usage(stdout)), or 2 on a
 * usage error (the message, naming the flag and its text, and
 * usage(stderr) on stderr). *given (may be NULL) gathers the bits of the
 * flags that appeared. */
int ex_parse_flags(int argc, char **argv, const char *prog,
                   const ex_flag *flags, int n, unsigned *given,
                   void (*usage)(FILE *out));

/* The value of flag `flag` (e.g. "--steps") from its text: the whole text
 * must be a number of the type (an int within int's range, a finite
 * double, an unsigned 64-bit integer). 0, or -1 with e naming the flag
 * and the text. */
int ex_flag_int(const char *flag, const char *text, int *out, ex_error *e);
int ex_flag_double(const char *flag, const char *text, double *out,
                   ex_error *e);
int ex_flag_u64(const char *flag, const char *text, unsigned long long *out,
                ex_error *e);

/* A tpdp call that failed: "<what> failed: <STATUS>: <tpdp_last_error()>"
 * into e; returns -1. */
int ex_tpdp_fail(ex_error *e, const char *what, tpdp_status st);
/* Return -1 from the enclosing function when `call` fails, its message in
 * e (an ex_error *). */
#define EX_TRY(e, call)                                            \
  do {                                                             \
    tpdp_status st_ = (call);                                      \
    if (st_ != TPDP_SUCCESS) return ex_tpdp_fail((e), #call, st_); \
  } while (0)

/* One parameter of a model trained with AdamW, as checkpoints hold it. */
typedef struct {
  const char *fqn;
  const tpdp_spec *spec; /* NULL: a plain (replicated) tensor */
  tpdp_tensor param, exp_avg, exp_avg_sq;
  /* boxed: the three tensors are the box at `offset` of a tensor of
   * `global` (tpdp_state_dict_add_box; fully sharded units), spec unused */
  int boxed;
  int64_t offset[TPDP_MAX_DIMS], global[TPDP_MAX_DIMS];
} ex_adamw_entry;

/* The prefix of the optimizer state's names (a checkpoint's
 * "consolidate_exclude" leaves them out of a consolidated model). */
#define EX_OPTIM_PREFIX "optim."

/* Adds the n parameters under their FQNs, then their first moments as
 * "optim.exp_avg.<fqn>", then their second moments as
 * "optim.exp_avg_sq.<fqn>" (torch.optim.AdamW's state names), each sharded
 * as its parameter. 0, or -1 with the failing call in e. */
int ex_state_dict_add_adamw(tpdp_state_dict *sd, const ex_adamw_entry *entries,
                            int n, ex_error *e);

/* ---- fully sharded units (--zero) ---- */

/* The model's views of the tree's tensors: the models read parameter i
 * at P[i] and write its gradient at G[i] (f32), while fully sharded units
 * re-point the tree's parameters and gradients as they gather and
 * reshard. A unit with param_dtype bf16 or f16 gathers its parameters and
 * takes their gradients in that dtype, and the models compute in f32:
 * from a unit's forward or backward begin to its end, P[i] is then an f32
 * copy of the gathered values (exact) and, in backward, G[i] zeroed f32
 * scratch that is added into the unit's gradient (rounded to param_dtype)
 * before the unit's backward ends. So a model computes on the rounded
 * parameters with f32 accumulation and hands each rank's gradient over
 * rounded, as FSDP2 does with MixedPrecisionPolicy(param_dtype=bf16). The
 * copies live only while their unit runs. */
typedef struct ex_param_views ex_param_views;
/* For the n parameters `params` (the tree's order) and the model's arrays
 * P and G of n pointers each. 0, or -1 (out of memory) with e set. */
int ex_param_views_create(tpdp_param *const *params, int n, float **P,
                          float **G, ex_param_views **out, ex_error *e);
void ex_param_views_destroy(ex_param_views *v);
/* P[i] (and G[i] where the parameter has a gradient): the tensor's data
 * when f32, else its live f32 copy, else NULL (outside its unit's run). */
void ex_param_views_refresh(ex_param_views *v);

/* A module's hooks with the views kept current: EX_BLOCK_FORWARD_BEGIN/END
 * run tpdp_module_forward_begin/end of `module`, EX_BLOCK_BACKWARD_BEGIN/END
 * its backward ones; with views (NULL: none) the f32 copies of the unit of
 * `module` are made after a begin hook and given back before an end hook,
 * and P/G refreshed. 0, or -1 with the failing call in e. */
enum {
  EX_BLOCK_FORWARD_BEGIN = 0,
  EX_BLOCK_FORWARD_END = 1,
  EX_BLOCK_BACKWARD_BEGIN = 2,
  EX_BLOCK_BACKWARD_END = 3
};
int ex_module_hooks(tpdp_module *module, int event, ex_param_views *views,
                    ex_error *e);
/* The same for block `<prefix><layer>` under root, for the models' block
 * callbacks. */
int ex_block_hooks(tpdp_module *root, const char *prefix, int layer, int event,
                   ex_param_views *views, ex_error *e);

/* Each block `<prefix><l>` (l < nblocks) a fully sharded unit over dp with
 * options `fo` (level, mixed precision), then root (what no block holds):
 * *root_unit. 0, or -1 with the failing call in e. */
int ex_fully_shard_blocks(tpdp_module *root, const char *prefix, int nblocks,
                          tpdp_comm *dp, const tpdp_fully_shard_options *fo,
                          tpdp_fsdp_unit **root_unit, ex_error *e);

/* --dp-replicate R (hybrid sharding): the dp communicator's N ranks as R
 * groups of S = N / R consecutive dp ranks, each group sharding over its
 * *shard communicator (dp rank d in group d / S, at d % S), and S
 * *replicate communicators joining the ranks that hold the same rows (d %
 * S alike, ordered by d / S): with tp innermost, world rank ((r * S) + s)
 * * T + t, the mesh dp_replicate x dp_shard x tp. R == 1: *shard = dp
 * itself and *replicate NULL (plain FSDP). Collective over dp. Destroy
 * with ex_hsdp_comms_destroy. 0, or -1 with the failing call in e. */
int ex_hsdp_comms(tpdp_comm *dp, int replicate, tpdp_comm **shard,
                  tpdp_comm **replicate_comm, ex_error *e);
void ex_hsdp_comms_destroy(tpdp_comm *dp, tpdp_comm *shard,
                           tpdp_comm *replicate_comm);

/* --param-dtype / --reduce-dtype's value: f32, bf16 or f16. 0, or -1 with
 * e naming the flag and the text. */
int ex_flag_float_dtype(const char *flag, const char *text, tpdp_dtype *out,
                        ex_error *e);
/* x rounded to dt (f32: x itself), as the units' casts round. */
float ex_round_to(tpdp_dtype dt, float x);

/* This rank's line of the units' accounting (tpdp_fsdp_get_stats):
 * "[rank R] fsdp: zero N, dp_shard S, dp_replicate R, persistent X MiB,
 * peak transient Y MiB; per step A all-gathers (B MiB), C reduce-scatters
 * (D MiB)", with HSDP (R > 1) then ", E all-reduces over dp_replicate (F
 * MiB)"; under mixed precision "zero N, dp_shard S, dp_replicate R,
 * param_dtype bf16, reduce_dtype f32, persistent ...". */
void ex_fsdp_stats_line(const tpdp_fsdp_unit *root, int rank, int level,
                        int dp_shard, int dp_replicate, tpdp_dtype param_dtype,
                        tpdp_dtype reduce_dtype);

/* This rank's bytes sent by the units' collectives over the run, as the
 * comm layer counts them (tpdp_comm_traffic_get; nothing is printed where
 * a communicator does not count): "[rank R] fsdp traffic: dp_shard X
 * bytes (Y across hosts), dp_replicate Z bytes (W across hosts)" (the
 * replicate part 0 without one). */
void ex_fsdp_traffic_line(const tpdp_comm *shard, const tpdp_comm *replicate,
                          int rank);

/* Collective over comm: every rank's peak resident memory (getrusage) and
 * its proportional set size now (PSS: shared pages split among the
 * processes sharing them, so the ranks' PSS add up), printed by rank 0
 * when `print` as "peak memory: rank 0 X MiB (PSS now Y MiB), ...". */
void ex_peak_memory_line(tpdp_comm *comm, int print);

#endif
