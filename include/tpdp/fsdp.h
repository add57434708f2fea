// SPDX-License-Identifier: BSD-3-Clause
/*
 * tpdp fsdp: fully sharded units over a data-parallel communicator (ZeRO
 * levels 1-3 with PyTorch FSDP2's `fully_shard` semantics), on host (MPI)
 * or CUDA (NCCL) parameters. The unit shards the plain local tensors it finds in its
 * module's subtree - after tp/'s TP+DP transform these are the TP-local
 * shards - so dp/ still knows nothing of DTensors.
 *
 * Sharding: each parameter on dim 0 over the dp ranks by the chunk rule:
 * c = ceil(d0 / N) rows per rank, rank r holding rows
 * [r*c, min((r+1)*c, d0)) (possibly none). Each rank stores its rows padded
 * to c, all parameters of a unit back to back (the rank's flat shard of S
 * elements), so every rank sends the same bytes: one flat all-gather
 * (S per rank, rank by rank) and one flat reduce-scatter per unit and step.
 * What callers see (shard views, gradients) is unpadded. On the MPI
 * backend the flat buffers are never built: the all-gather writes every
 * rank's rows straight into the full tensors and the reduce-scatter reads
 * them straight out of the full gradients (point-to-point messages with
 * derived datatypes, padding left out), except where a cast to
 * param_dtype or reduce_dtype needs a buffer anyway. Host buffers of 1 MiB
 * and more are kept from step to step for the next request of their size
 * (their pages stay mapped, as PyTorch's caching allocator keeps device
 * memory) by the units under one root, and freed with the last of them.
 *
 * Life cycle of a unit u (hooks on u's module; the framework calls
 * tpdp_module_forward_begin/end and tpdp_module_backward_begin/end around
 * the module's forward and backward):
 *   forward_begin   all-gather (unless gathered or prefetched), point the
 *                   parameters at the full tensors           IDLE -> FORWARD
 *   forward_end     level 3 (non-root unit): free the full tensors, point
 *                   the parameters back at the shards
 *   backward_begin  all-gather again if resharded; prefetch the unit that
 *                   ran before u in forward; point each parameter's
 *                   gradient at a zeroed full gradient (the framework ADDS
 *                   into it, as autograd accumulates)  FORWARD -> BACKWARD_PRE
 *   backward_end    levels 2-3: reduce-scatter (AVG over dp) the full
 *                   gradients asynchronously into the gradient shard, free
 *                   them; level 3: reshard the parameters
 *                                                 BACKWARD_PRE -> BACKWARD_POST
 *   tpdp_fsdp_finalize (on the root unit, once per step): level 1 starts
 *                   its reduce-scatters here; waits for all; then every
 *                   parameter views its shard (tpdp_param_tensor) and its
 *                   gradient the mean over dp of its rows (tpdp_param_grad):
 *                   the optimizer updates the shards, its state sized as
 *                   the shards                      BACKWARD_POST -> IDLE
 * Levels: 1 = gradients reduce-scattered at the end of backward, the full
 * parameters and gradients stay allocated (llm.c's ZeRO-1: the optimizer
 * state is what shards); 2 = gradients reduce-scattered as each unit's
 * backward ends, full parameters kept from forward to the end of backward
 * (FSDP2's reshard_after_forward=False); 3 = parameters resharded after
 * forward as well (reshard_after_forward=True; the root unit, the one no
 * other unit contains, stays gathered after forward as in FSDP2). At every
 * level the next forward all-gathers the updated shards.
 *
 * Gradient accumulation: with tpdp_fsdp_set_requires_gradient_sync(root, 0)
 * (PyTorch's set_requires_gradient_sync(False)) backward_end does not
 * communicate and the full gradients keep accumulating over micro-batches;
 * the first backward with sync on reduces the sum, and finalize divides
 * by the dp size only (the caller scales the loss by 1/micro-batches).
 * finalize is called only after a synced backward.
 *
 * Refused with TPDP_ERR_STATE naming the unit, the expected and actual
 * state: backward before forward; a forward of a unit during its backward
 * (activation recomputation is not supported yet); finalize while a unit
 * that ran forward has not finished backward. Supported: evaluation
 * forwards without backward (the next forward starts a new step); a unit
 * unused in a step (its gradient is zero, still reduced in finalize so the
 * ranks' collectives match). Every dp rank must run the same units in the
 * same order (TPDP_DEBUG_COLLECTIVES=1 names a rank that does not).
 *
 * Numerics: with f32 param_dtype and reduce_dtype (the defaults) gather
 * and reduce-scatter move f32 exactly, and the gradient is
 * the sum over ranks in rank order, then divided by the dp size, equal
 * to the reducer's allreduce AVG up to summation order. bf16/f16 (mixed
 * precision, see the options) round as PyTorch's casts do; on MPI a
 * bf16/f16 reduce-scatter sums in rank order in f32 and rounds once (so
 * the result does not depend on a reduction tree). On a backend without
 * collectives over pieces the backend's reduce-scatter sums.
 */
#ifndef TPDP_FSDP_H
#define TPDP_FSDP_H

#include "tpdp/comm.h"
#include "tpdp/module.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpdp_fsdp_unit tpdp_fsdp_unit; /* opaque */

#define TPDP_FULLY_SHARD_OPTIONS_VERSION 3

typedef struct {
  size_t size;      /* sizeof(tpdp_fully_shard_options) */
  uint32_t version; /* TPDP_FULLY_SHARD_OPTIONS_VERSION */
  int zero_level;   /* 1, 2 or 3 (default 3) */
  /* -1 (default): by level (3: yes except for the root unit; 1, 2: no);
   * 0 or 1 forces it for this unit. */
  int reshard_after_forward;
  /* Mixed precision, as FSDP2's MixedPrecisionPolicy (f32, bf16 or f16;
   * default f32 both). param_dtype: the all-gather's and the gathered
   * parameters' dtype - the full tensors and their gradients, which the
   * framework computes in, are param_dtype tensors, while the f32 shards
   * stay the master copy (cast with round-to-nearest-even before the
   * all-gather). reduce_dtype: the reduce-scatter's dtype (the full
   * gradients cast to it, the averaged result cast back to the f32
   * gradient shard). */
  tpdp_dtype param_dtype;
  tpdp_dtype reduce_dtype;
  /* CUDA units: the stream the framework computes on (a cudaStream_t;
   * NULL: the legacy default stream). The units' buffers, copies and frees
   * are queued on it, their collectives on the NCCL communicator's stream
   * after it, and it waits for them (tpdp_work_wait_stream) before it uses
   * what they produced; the hooks and finalize do not block the host.
   * Ignored for host units. (version 2) */
  void *stream;
  /* (version 3) NULL: plain FSDP over dp. Otherwise dp is the dp_shard
   * communicator and replicate the dp_replicate one: hybrid sharding
   * (HSDP, FSDP2's fully_shard over a 2-D mesh). The parameters shard over
   * dp (S ranks) exactly as without it, the all-gathers run over dp only,
   * each unit's gradient shard is reduce-scattered over dp and then
   * all-reduced (AVG, in reduce_dtype; cast to the f32 shard after) over
   * replicate (R ranks), so every rank ends with the mean over all R*S
   * ranks: the values of plain FSDP over R*S ranks up to summation order
   * (and, in bf16/f16, the all-reduce's roundings). The replicas of a shard hold equal
   * gradient shards after finalize, so a norm over the shards sums over
   * dp only (not over replicate). R = 1 does no all-reduce. Each unit's
   * all-reduce starts as soon as the next unit's reduce-scatter starts
   * (overlapping the rest of backward) and finalize waits for them. Every
   * rank of dp passes replicate or every one passes NULL, each with the
   * same size; every replicate peer passes the same dp size. Host units
   * only (TPDP_ERR_UNSUPPORTED on a GPU). A caller built against version
   * 2 (its size and version) gets NULL. */
  tpdp_comm *replicate;
} tpdp_fully_shard_options;

TPDP_API tpdp_fully_shard_options tpdp_fully_shard_options_default(void);

/* Make `module` a fully sharded unit over `dp` (collective over dp: every
 * rank calls it with the same shapes). Apply it to inner modules first and
 * to the root last, as FSDP2: a unit manages the parameters of its subtree
 * outside nested units, and the last unit containing the others becomes
 * their root (tpdp_fsdp_finalize is called on it). The parameters' data is
 * copied into the unit's shard storage: afterwards each parameter views its
 * rows of the shard and the caller may free its original memory. The
 * module becomes a unit of kind "FSDP" labelled " FULLY SHARDED" in the
 * tree report (tpdp/module.h). The unit lives as long as its module and is
 * destroyed with it (its parameters' views then dangle: a parameter kept
 * beyond its module must not be read).
 * CUDA parameters: all of a unit's on one GPU, over an NCCL communicator,
 * f32 param_dtype and reduce_dtype only; see options.stream.
 * Errors (on every rank alike, nothing changed): NULL pointers, a bad
 * option, a parameter that is not a contiguous f32 tensor of at least one
 * dimension (TPDP_ERR_DTYPE_MISMATCH / TPDP_ERR_UNSUPPORTED naming its
 * FQN), parameters on different devices or on memory the communicator
 * does not move (TPDP_ERR_DEVICE_MISMATCH naming both), device memory in a
 * build without CUDA or bf16/f16 on a GPU (TPDP_ERR_UNSUPPORTED), a module
 * that is already a unit (TPDP_ERR_ALREADY), a unit with no parameter of
 * its own (TPDP_ERR_INVALID_ARGUMENT), ranks passing different shapes or
 * levels (TPDP_ERR_SHAPE_MISMATCH listing each rank's), ranks of dp
 * passing replicate communicators of different sizes, or some NULL
 * (TPDP_ERR_SHAPE_MISMATCH naming each rank's replicate size, "none" for
 * NULL; agreed over dp and then over replicate, so the replicate peers
 * fail too), a unit whose nested units were given another replicate
 * communicator (TPDP_ERR_INVALID_ARGUMENT: the units under one root share
 * one). A rank whose dp group all pass NULL cannot be reached by
 * peers that pass a replicate communicator containing it: they wait for
 * it (TPDP_TIMEOUT_S reports the wait). */
TPDP_API tpdp_status tpdp_fully_shard(tpdp_module *module, tpdp_comm *dp,
                                      const tpdp_fully_shard_options *options,
                                      tpdp_fsdp_unit **out);

/* The unit of `module`, NULL if it is none. */
TPDP_API tpdp_fsdp_unit *tpdp_fsdp_unit_of(const tpdp_module *module);
TPDP_API tpdp_module *tpdp_fsdp_unit_module(const tpdp_fsdp_unit *unit);
/* The state of the unit's parameters (tpdp/module.h's handle states). */
TPDP_API tpdp_handle_state tpdp_fsdp_unit_state(const tpdp_fsdp_unit *unit);
TPDP_API int tpdp_fsdp_num_params(const tpdp_fsdp_unit *unit);
/* i-th managed parameter and its FQN relative to the unit's module. */
TPDP_API tpdp_param *tpdp_fsdp_param(const tpdp_fsdp_unit *unit, int i,
                                     const char **fqn);
/* This rank's rows of parameter i: [*row0, *row0 + *rows) of its dim 0. */
TPDP_API tpdp_status tpdp_fsdp_param_rows(const tpdp_fsdp_unit *unit, int i,
                                          int64_t *row0, int64_t *rows);

/* Wait for the step's reduce-scatters of every unit under `root` (which
 * must be a root unit) and leave each parameter viewing its shard with the
 * averaged gradient shard. Resets the step (forward order, states). */
TPDP_API tpdp_status tpdp_fsdp_finalize(tpdp_fsdp_unit *root);

/* Free `unit` now instead of with its module: its hooks removed, the
 * module no longer a unit, the unit's shards, gradients and buffers given
 * back (a root's nested units stay, as roots of nothing). The module's
 * parameters keep pointing at the freed memory, as after the module's
 * destruction: the caller has copied out what it keeps and must not run
 * the module again. For closing a model unit by unit, so that the copies
 * never coexist with every unit's memory (tpdp.torch's close()). Local
 * (no collective); only between steps (state IDLE, else TPDP_ERR_STATE,
 * nothing changed); the handle is invalid afterwards. */
TPDP_API tpdp_status tpdp_fsdp_release(tpdp_fsdp_unit *unit);

/* Gradient synchronization for `root`'s units (default on); see above. */
TPDP_API tpdp_status tpdp_fsdp_set_requires_gradient_sync(tpdp_fsdp_unit *root,
                                                          int sync);

/* Gather every unit under `root` for evaluation or export: parameters view
 * full f32 tensors - the master values, whatever param_dtype, as PyTorch
 * FSDP's summon_full_params gives full precision - units in state
 * SUMMON_FULL_PARAMS. summon_end puts the shards back; with writeback != 0
 * each rank first copies its rows of the (possibly changed) full tensors
 * into its shard, unrounded. At levels 1-2 with f32 parameters a rank's
 * own rows are the full tensors' (no second copy), so changes to them stay
 * even without writeback. Collective over dp; only between steps (all
 * units IDLE). */
TPDP_API tpdp_status tpdp_fsdp_summon_full_params(tpdp_fsdp_unit *root);
TPDP_API tpdp_status tpdp_fsdp_summon_end(tpdp_fsdp_unit *root, int writeback);

/* Accounting, per rank, over every unit under `root` (bytes). */
typedef struct {
  /* ZeRO's persistent bytes: level 1 the full parameters and gradients,
   * level 2 the full parameters and the gradient shards, level 3 both
   * shards (f32; with another param_dtype the f32 shards come on top). */
  int64_t persistent_bytes;
  int64_t peak_transient_bytes;   /* largest sum of gathered parameters,
                                   full gradients and communication
                                   buffers alive at once beyond the above */
  int64_t allgathers;             /* this step's all-gathers */
  int64_t reduce_scatters;        /* this step's reduce-scatters */
  int64_t bytes_allgathered;      /* this step, received per rank */
  int64_t bytes_reduce_scattered; /* this step, sent per rank */
  /* HSDP (since 0.2): this step's all-reduces over dp_replicate (one per
   * unit, in reduce_dtype) and the bytes of the shards they reduce */
  int64_t allreduces;
  int64_t bytes_allreduced;
} tpdp_fsdp_stats;

TPDP_API tpdp_status tpdp_fsdp_get_stats(const tpdp_fsdp_unit *root,
                                         tpdp_fsdp_stats *out);

#ifdef __cplusplus
}
#endif
#endif /* TPDP_FSDP_H */
