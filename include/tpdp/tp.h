// SPDX-License-Identifier: BSD-3-Clause
/*
 * tpdp tp (tp/): tensor parallelism on the module tree, built on the DTensor
 * contract of tpdp/dtensor.h (which this header includes): the TP+DP transform
 * (tpdp_pre_dp_transform), the parallel styles and the TP plan that assigns
 * them (tpdp_parallelize), the functional collectives that move activations in
 * and out of the styles' regions (sequence parallelism included), and the
 * transformer layouts (Conv1D/Linear weights, attention sharded by heads,
 * vocabulary-parallel embedding and cross-entropy).
 *
 * Thread-safety: as the module tree (one thread at a time per tree); the
 * collectives follow the mesh's communicators (one thread at a time per
 * mesh).
 */
#ifndef TPDP_TP_H
#define TPDP_TP_H

#include "tpdp/comm.h"
#include "tpdp/core.h"
#include "tpdp/dtensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------- TP+DP transform (tp/dp_transform.c)
 *
 * PyTorch's TP-inside-DDP composition (DTensor parameters localized before
 * DDP wraps the model): DP sees plain local tensors, forward sees DTensors.
 * The module tree is core's (tpdp/module.h); a parameter with a spec is a
 * DTensor parameter.
 *
 * tpdp_pre_dp_transform(root): resolves once the DTensor parameters of
 * root's whole subtree (nested modules included; a parameter registered
 * several times once, under its first pre-order FQN) into a flat array with
 * their specs and FQNs; checks each (as tpdp_dtensor_unflatten: local shape,
 * dtype, device for this rank); localizes them (form LOCALIZED, the local
 * view kept, gradients untouched); and registers on root a forward pre-hook
 * that reconstructs them (validated unflatten -> form DTENSOR) and a
 * forward hook that localizes them again (form LOCALIZED: the parameter
 * stores its local view in both forms, so flattening changes only the
 * form). Specs are captured here: do not change a parameter's spec while
 * the transform is applied (undo first). Messages name parameters by their
 * FQN from the tree's root, modules as "fqn[Class]".
 *
 * Training states (PyTorch FSDP's TrainingState), kept live by the hooks:
 *   - pre-forward: root's training state must be IDLE or FORWARD_BACKWARD
 *     (else TPDP_ERR_STATE from tpdp_module_check_state, naming expected
 *     and actual, e.g. SUMMON_FULL_PARAMS) and becomes FORWARD_BACKWARD;
 *     each DTensor parameter's handle state must be IDLE or BACKWARD_PRE
 *     (else TPDP_ERR_STATE naming its FQN, expected and actual) and becomes
 *     FORWARD.
 *   - post-forward: each handle state must be FORWARD (a forward_end
 *     without its forward_begin is TPDP_ERR_STATE) and becomes
 *     BACKWARD_PRE.
 *   - The DP side (the reducer) sets root back to IDLE when it finalizes
 *     the gradients. Until then further forwards are allowed: evaluation
 *     forwards without backward, and activation checkpointing (a forward
 *     recomputed during backward) both find FORWARD_BACKWARD / BACKWARD_PRE.
 * Each hook checks every parameter before it changes any, so a failing
 * hook leaves forms and states as they were. The hooks touch each DTensor
 * parameter twice per call, allocate nothing and do no string work.
 *
 * Tied parameters. A DTensor parameter registered both inside root's
 * subtree and outside it is refused (TPDP_ERR_STATE naming both FQNs and
 * the closest module whose subtree holds every registration): no form
 * would be right for it. DP over the subtree needs it local between
 * forwards, while the modules outside use it in their own forward as a
 * DTensor (PyTorch's transform silently unties it: its setattr replaces the
 * parameter inside the subtree only, so the two copies drift apart). A
 * framework expects a tied weight to stay one parameter, so the transform
 * refuses rather than pick a form for the outside users; apply it to the
 * module named in the message. Parameters tied within the subtree are
 * handled once. Transforms may not nest either (TPDP_ERR_ALREADY when root,
 * an ancestor or a descendant already has one): the inner hooks would find
 * the outer forward's handle states.
 *
 * The tree after the transform. A DTensor parameter that joins root's
 * subtree later (tpdp_module_add_param / _add_child / tpdp_param_set_spec),
 * a registration of one of its parameters added outside the subtree, or a
 * parameter whose spec changed, is refused at the next forward:
 * tpdp_module_forward_begin returns TPDP_ERR_STATE naming the parameter's
 * FQN, and keeps refusing until the transform is undone and applied again
 * (the DP reducer, built over the localized parameters, does not know the
 * new one either: rebuild it too). The pre-hook notices such changes by
 * comparing tpdp_module_tree_generation() and then resolves the subtree
 * once more (allocating, once per change; never in the steady state).
 *
 * Errors of tpdp_pre_dp_transform (nothing changed on failure): NULL root;
 * TPDP_ERR_ALREADY (transform on root, an ancestor or a descendant);
 * TPDP_ERR_STATE (a DTensor parameter tied outside the subtree); a
 * parameter whose local tensor does not match its spec: the unflatten
 * status, naming the parameter FQN; out of memory. A reconstruct failure
 * inside the pre-hook (the framework changed a local tensor's shape)
 * returns the unflatten status from tpdp_module_forward_begin, naming the
 * parameter FQN, with no parameter changed.
 *
 * tpdp_pre_dp_transform_undo(root): removes both hooks and returns every
 * parameter of the transform to DTENSOR form and handle state IDLE
 * (validated first; on failure nothing changes). Errors: TPDP_ERR_NOT_FOUND
 * if root has no transform; TPDP_ERR_STATE while root is in forward
 * (tpdp_module_in_forward). Destroying root also releases the transform's
 * state.
 *
 * tpdp_pre_dp_transform_count(root): the number of DTensor parameters the
 * transform handles, -1 if root has none.
 *
 * Thread-safety: as the module tree (one thread at a time per tree). */
struct tpdp_module;
TPDP_API tpdp_status tpdp_pre_dp_transform(struct tpdp_module *root);
TPDP_API tpdp_status tpdp_pre_dp_transform_undo(struct tpdp_module *root);
TPDP_API int tpdp_pre_dp_transform_count(const struct tpdp_module *root);

/* Free the local shards and gradient buffers that TP parallelization made
 * (tpdp_parallelize and the layouts below) and that no parameter of root's
 * subtree views any more: after DP moved the views for good (the reducer's
 * gradient buckets, fully sharded units' shards, tpdp/fsdp.h), these are
 * dead copies - a whole model's worth per rank. A parameter must not be
 * pointed back at them afterwards. *nfreed (may be NULL): blocks freed.
 * Errors: NULL root. */
TPDP_API tpdp_status tpdp_tp_release_unused_storage(struct tpdp_module *root,
                                                    int64_t *nfreed);

/* ------------------------------------------------------ parallel styles
 *
 * Tensor-parallel styles, the TP plan that maps module FQN patterns to them,
 * tpdp_parallelize, and the functional collectives that move activations in
 * and out of the styles' regions (forward and backward). Host memory. */

typedef enum {
  /* Linear weight [out, in] Shard(0), bias Shard(0): output sharded on its
   * last dim; input replicated (its gradient is allreduced in backward). */
  TPDP_STYLE_COLWISE = 0,
  /* weight Shard(1), bias Replicate: input sharded on its last dim; output
   * Partial, reduced to Replicate (allreduce) or to a sequence shard
   * (reduce_scatter). */
  TPDP_STYLE_ROWWISE = 1,
  /* Replicated parameters (norm layers) run on activations sharded on the
   * sequence dim: their gradients are partial and get allreduced over TP. */
  TPDP_STYLE_SEQUENCE_PARALLEL = 2,
  /* Replicated parameters on replicated activations. */
  TPDP_STYLE_REPLICATE = 3,
  TPDP_STYLE_COUNT
} tpdp_tp_style;

/* "colwise", "rowwise", "sequence_parallel", "replicate". */
TPDP_API const char *tpdp_tp_style_name(tpdp_tp_style style);
TPDP_API tpdp_status tpdp_tp_style_parse(const char *text, tpdp_tp_style *out);

/* One entry of a TP plan: modules whose FQN (from the root passed to
 * tpdp_parallelize) matches `pattern` get `style`. `*` matches exactly one
 * path component ("layers.*.fc1"). */
typedef struct {
  const char *pattern;
  tpdp_tp_style style;
} tpdp_tp_plan_entry;

/* 1 if the dotted FQN matches the pattern. */
TPDP_API int tpdp_fqn_match(const char *pattern, const char *fqn);

/* The placement on the TP mesh dim of parameter `name` of a module under
 * `style` (the rule tpdp_parallelize applies, for planning tools): colwise
 * weight Shard(0) and bias Shard(0); rowwise weight Shard(1) and bias
 * Replicate; other styles Replicate. "weight" must be 2-D; any other
 * parameter of a colwise/rowwise module is a bias: 1-D of size `out_size`
 * (the weight's shape[0]; -1 = unknown). `ndim` and `size0` describe the
 * parameter. Errors: TPDP_ERR_SHAPE_MISMATCH naming `fqn`. */
TPDP_API tpdp_status tpdp_tp_style_placement(tpdp_tp_style style,
                                             const char *fqn, const char *name,
                                             int ndim, int64_t size0,
                                             int64_t out_size,
                                             tpdp_placement *out);

/* Turn the parameters of every module matching an entry of the TP plan
 * plan[0..nplan) (first match wins) into DTensors over mesh dim `tp_dim`
 * (Replicate on every other mesh dim). Each parameter's current tensor must be
 * the full tensor, identical on every rank (e.g. initialised from a shared
 * seed); its local shard is copied into storage tpdp allocates
 * (zero-initialised gradient storage of the local shape too) and the parameter
 * is re-pointed at it: tensor, grad and spec, in DTensor form. The caller's
 * full tensors are not touched and may be freed afterwards. Each matched module
 * becomes a managed unit of kind "TP" with suffix " TP <STYLE>". Storage and
 * specs live until the module is destroyed. Host memory (MPI meshes) only in
 * this build. Nothing is changed when an error is returned.
 * Errors: TPDP_ERR_NOT_FOUND naming a pattern that matches no module, or a
 * mesh dim name that does not exist; TPDP_ERR_SHAPE_MISMATCH naming the
 * parameter FQN when a colwise/rowwise weight is not 2-D (or a bias not 1-D
 * of the weight's out size); TPDP_ERR_ALREADY for a module already
 * parallelized or already a managed unit; TPDP_ERR_DUPLICATE naming both
 * FQNs when one parameter object is registered in two matched modules;
 * TPDP_ERR_STATE for a layout-only mesh. */
TPDP_API tpdp_status tpdp_parallelize(struct tpdp_module *root,
                                      const tpdp_mesh *mesh, const char *tp_dim,
                                      const tpdp_tp_plan_entry *plan,
                                      int nplan);

/* The style of a parallelized module (TPDP_ERR_NOT_FOUND if it is none). */
TPDP_API tpdp_status tpdp_tp_module_style(const struct tpdp_module *m,
                                          tpdp_tp_style *out);

/* The TP communicator of a parallelized module (owned by the mesh). */
TPDP_API tpdp_status tpdp_tp_module_comm(const struct tpdp_module *m,
                                         tpdp_comm **out);

/* ---- functional collectives of the styles (activations, host memory) ----
 * Each takes the parallelized module whose input/output it transforms. */

/* colwise input, backward: allreduce (sum) the input gradient in place.
 * (Its forward is the identity.) */
TPDP_API tpdp_status tpdp_tp_colwise_input_backward(const struct tpdp_module *m,
                                                    tpdp_tensor *grad_input);
/* rowwise output, forward: allreduce (sum) the partial output in place.
 * (Its backward is the identity.) */
TPDP_API tpdp_status tpdp_tp_rowwise_output_forward(
    const struct tpdp_module *m, tpdp_tensor *partial_output);
/* rowwise output to a sequence shard, forward: reduce_scatter the partial
 * output (full sequence) along `seq_dim` into this rank's torch.chunk shard.
 * Its backward is tpdp_tp_sequence_gather of the gradient. */
TPDP_API tpdp_status tpdp_tp_rowwise_output_reduce_scatter(
    const struct tpdp_module *m, const tpdp_tensor *partial, int seq_dim,
    tpdp_tensor *shard);
/* Sequence-parallel region exit, forward: allgather the sequence shards
 * along `seq_dim` into the full tensor (uneven shards allowed). Its
 * backward is tpdp_tp_sequence_scatter_grad. */
TPDP_API tpdp_status tpdp_tp_sequence_gather(const struct tpdp_module *m,
                                             const tpdp_tensor *shard,
                                             int seq_dim, tpdp_tensor *full);
/* Backward of tpdp_tp_sequence_gather: reduce_scatter (sum) the full
 * gradient along seq_dim into this rank's shard. */
TPDP_API tpdp_status tpdp_tp_sequence_scatter_grad(const struct tpdp_module *m,
                                                   const tpdp_tensor *full_grad,
                                                   int seq_dim,
                                                   tpdp_tensor *shard_grad);

/* Allreduce (sum) over TP the gradients of every sequence-parallel module's
 * parameters under root (replicated parameters used on different sequence
 * shards). Call after backward, before the DP reduction finishes. */
TPDP_API tpdp_status tpdp_tp_reduce_replicated_grads(struct tpdp_module *root);

/* ------------------------------------------------- transformer layouts
 * (tp/layout.c, tp/head_shard.c, tp/vocab_parallel.c)
 *
 * Layouts the Linear styles above cannot express, for transformers:
 * weights in either orientation (torch.nn.Linear [out, in], or Hugging
 * Face's Conv1D [in, out] that GPT-2 checkpoints use), a fused q|k|v
 * projection sharded by whole attention heads, and a vocabulary-parallel
 * embedding (Megatron) whose weight may be tied to the LM head.
 *
 * Each parameter becomes a DTensor over the TP mesh dim (Replicate on the
 * other dims) whose global shape is a row-major *view* of the parameter's
 * full tensor: the same elements in the same order, so gathering it gives
 * the full tensor's bytes. A Conv1D q|k|v weight [C, 3C] with H heads is
 * the DTensor [C, 3, H, C/H] with Shard(2): each rank holds whole heads of
 * q, k and v, never a mix. Uneven sizes follow torch.chunk, so a rank may
 * hold no head or no vocabulary row; it still takes part in every
 * collective.
 *
 * Local shards come from one of two sources:
 *  - fill == NULL: the parameter's current tensor is the full tensor,
 *    identical on every rank (as tpdp_parallelize); it is not modified and
 *    may be freed afterwards;
 *  - fill != NULL: fill(fill_ctx, fqn, spec, offset, local) writes this
 *    rank's shard: `local` is a contiguous tensor of the spec's local shape
 *    (zeroed, allocated by tpdp), `offset` its position in the global view
 *    (spec's ndim entries). The parameter's current tensor is metadata only
 *    (its shape and dtype; data may be NULL), so a loader reads just the
 *    bytes of its shard and never materialises the full tensor. A status
 *    other than TPDP_SUCCESS aborts the call with that status.
 * Storage for the local shards and their gradients (zeroed) is allocated by
 * tpdp and lives until the module is destroyed. Parameters are re-pointed
 * at it (tensor, grad and spec; DTensor form) only once every parameter of
 * the call is prepared: on error nothing changes. Each module becomes a
 * managed unit of kind "TP". Host memory (MPI meshes). Calls are not
 * collective (no communication) but every rank of the mesh must make them.
 *
 * Common errors (naming the module or parameter FQN): TPDP_ERR_NULL_POINTER;
 * TPDP_ERR_NOT_FOUND (no mesh dim `tp_dim`; a required parameter missing);
 * TPDP_ERR_INVALID_ARGUMENT (a parameter the layout does not cover, a bad
 * style or layout); TPDP_ERR_SHAPE_MISMATCH (shapes that do not fit the
 * layout, the message giving the expected and actual shapes);
 * TPDP_ERR_ALREADY (a parameter that is a DTensor already, a module that is
 * a managed unit already); TPDP_ERR_STATE (layout-only mesh);
 * TPDP_ERR_UNSUPPORTED (device memory); the fill callback's status. */

typedef enum {
  TPDP_LINEAR_OUT_IN = 0, /* torch.nn.Linear: weight [out, in] */
  TPDP_LINEAR_IN_OUT = 1  /* Hugging Face Conv1D: weight [in, out] */
} tpdp_linear_layout;

typedef tpdp_status (*tpdp_tp_fill_fn)(void *ctx, const char *fqn,
                                       const tpdp_spec *spec,
                                       const int64_t *offset,
                                       tpdp_tensor *local);

/* A linear module (parameters "weight", 2-D, and optionally "bias", 1-D of
 * the out size) as TPDP_STYLE_COLWISE or TPDP_STYLE_ROWWISE in either
 * layout. Colwise shards the out dim of the weight (Shard(0) for OUT_IN,
 * Shard(1) for IN_OUT) and the bias (Shard(0)); rowwise shards the in dim
 * (Shard(1) for OUT_IN, Shard(0) for IN_OUT) and replicates the bias. The
 * activations move as the styles' do (colwise input gradient allreduced,
 * rowwise output allreduced or reduce-scattered: see tpdp_tp_layout_comm).
 * Unit suffix " TP COLWISE" / " TP ROWWISE". */
TPDP_API tpdp_status tpdp_tp_parallelize_linear(
    struct tpdp_module *m, tpdp_tp_style style, tpdp_linear_layout layout,
    const tpdp_mesh *mesh, const char *tp_dim, tpdp_tp_fill_fn fill,
    void *fill_ctx);

/* Multi-head attention sharded by whole heads. `qkv` holds the fused
 * projection to q|k|v ("weight" [in, 3E] for IN_OUT or [3E, in] for OUT_IN,
 * optional "bias" [3E]; q, k and v each E = n_head * head_dim wide, head h
 * at columns [h*head_dim, (h+1)*head_dim) of each), `out` the output
 * projection ("weight" [E, out] or [out, E], optional "bias" [out]).
 * Rank r of the TP dim holds heads [first, first + count) of
 * tpdp_chunk_range(n_head, tp size, r):
 *   qkv.weight  view [in, 3, H, hd] Shard(2)   (OUT_IN: [3, H, hd, in] Shard(1))
 *   qkv.bias    view [3, H, hd] Shard(1)
 *   out.weight  view [H, hd, out] Shard(0)     (OUT_IN: [out, H, hd] Shard(1))
 *   out.bias    Replicate
 * so a rank's local qkv output is [q | k | v] of its heads (each count *
 * hd wide) and its out projection gives a partial sum to allreduce (or
 * reduce-scatter). n_head need not divide by the TP size. Unit suffixes
 * " TP HEADS QKV" / " TP HEADS OUT". Errors also: TPDP_ERR_INVALID_ARGUMENT
 * for n_head < 1 or qkv == out; TPDP_ERR_SHAPE_MISMATCH when the widths
 * do not split into 3 x n_head heads or `out` does not take E inputs. */
TPDP_API tpdp_status tpdp_tp_parallelize_attention(
    struct tpdp_module *qkv, struct tpdp_module *out, int64_t n_head,
    tpdp_linear_layout layout, const tpdp_mesh *mesh, const char *tp_dim,
    tpdp_tp_fill_fn fill, void *fill_ctx);

/* This rank's heads of a module made by tpdp_tp_parallelize_attention
 * (either of the two modules). Errors: TPDP_ERR_NOT_FOUND naming a module
 * that is not such a module. */
TPDP_API tpdp_status tpdp_tp_attention_heads(const struct tpdp_module *m,
                                             int64_t *first, int64_t *count);

/* Vocabulary-parallel embedding: `emb`'s "weight" [V, D] becomes Shard(0)
 * on the TP dim (torch.chunk of V; a rank may hold no row). A module that
 * registers the same parameter (a tied LM head) shares the shard. Unit
 * suffix " TP VOCAB". */
TPDP_API tpdp_status tpdp_tp_parallelize_vocab(struct tpdp_module *emb,
                                               const tpdp_mesh *mesh,
                                               const char *tp_dim,
                                               tpdp_tp_fill_fn fill,
                                               void *fill_ctx);

/* This rank's vocabulary rows [*start, *start + *len) and the vocabulary
 * size V. Errors: TPDP_ERR_NOT_FOUND for a module not made by
 * tpdp_tp_parallelize_vocab. */
TPDP_API tpdp_status tpdp_tp_vocab_range(const struct tpdp_module *emb,
                                         int64_t *start, int64_t *len,
                                         int64_t *vocab);

/* Embedding lookup on vocab shards, forward: out[i] = weight[ids[i]] for
 * i in [0, n), the rows this rank holds looked up locally, the others
 * zero, then an allreduce (sum) over TP gives every rank the full rows.
 * `out`: contiguous f32 [n, D] (any shape of n * D elements); the local
 * weight f32, or bf16/f16 (a fully sharded unit's param_dtype: its rows
 * widened to f32, exactly). Collective
 * over the TP dim; every TP rank passes the same ids. Its backward is
 * tpdp_tp_vocab_embedding_backward. Errors: TPDP_ERR_INVALID_ARGUMENT
 * naming the first id outside [0, V) and its position (checked before
 * communicating); TPDP_ERR_SHAPE_MISMATCH for a wrong out size;
 * communicator errors. */
TPDP_API tpdp_status tpdp_tp_vocab_embedding_forward(
    const struct tpdp_module *emb, const int32_t *ids, int64_t n,
    tpdp_tensor *out);

/* Backward of the lookup: weight_grad[ids[i] - start] += grad_out[i] for
 * the ids this rank holds. grad_out is the gradient of the full rows
 * (replicated over TP), so no communication is needed. weight_grad:
 * contiguous f32 of the local weight's shape; it is added into (a tied
 * head's gradient may be there already). Errors as the forward's. */
TPDP_API tpdp_status tpdp_tp_vocab_embedding_backward(
    const struct tpdp_module *emb, const int32_t *ids, int64_t n,
    const tpdp_tensor *grad_out, tpdp_tensor *weight_grad);

/* Cross-entropy on vocab-sharded logits, never gathering them. logits:
 * contiguous f32 [n, len] (this rank's columns [start, start + len) of the
 * [n, V] logits). Per row: the max over TP (allreduce max), then the sum of
 * exp(logit - max) and the target's logit (one allreduce sum of 2n
 * doubles); loss_i = log(sum) + max - logit[target_i]. On return logits
 * holds grad_scale * d(loss_i)/d(logits) = grad_scale * (softmax - onehot)
 * for this rank's columns, and *loss_sum (every TP rank) the sum of the n
 * losses. Collective over the TP dim; every TP rank passes the same
 * targets. Errors: TPDP_ERR_INVALID_ARGUMENT naming the first target
 * outside [0, V); TPDP_ERR_SHAPE_MISMATCH; communicator errors. */
TPDP_API tpdp_status tpdp_tp_vocab_cross_entropy(const struct tpdp_module *emb,
                                                 tpdp_tensor *logits,
                                                 const int32_t *targets,
                                                 int64_t n, float grad_scale,
                                                 double *loss_sum);

/* The TP communicator of a module parallelized by one of the functions of
 * this section (owned by the mesh), for the activations' collectives.
 * Errors: TPDP_ERR_NOT_FOUND. */
TPDP_API tpdp_status tpdp_tp_layout_comm(const struct tpdp_module *m,
                                         tpdp_comm **out);

#ifdef __cplusplus
}
#endif
#endif /* TPDP_TP_H */
