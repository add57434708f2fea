/*
 * tpdp dtensor (tp/): placements, the sharding spec, DTensor flatten /
 * unflatten, redistribution, and the TP+DP forward hooks.
 *
 * A spec describes how a global tensor is laid out over a device mesh: one
 * placement per mesh dim. Local shapes and global offsets follow
 * torch.chunk: along a sharded dim of extent n over k ranks, chunk =
 * ceil(n/k) and shard i covers [i*chunk, min((i+1)*chunk, n)), possibly
 * empty. Several mesh dims sharding one tensor dim apply in mesh-dim order,
 * each chunking the previous local extent; offsets add up. A rank whose
 * shard on a dim is empty (at any level) has offset n, the global size of
 * that dim, on it.
 *
 * Partial(op) means the global value is op over the mesh dim's ranks of the
 * local values. Ops: sum and max/min for every dtype; avg for floating
 * dtypes only (avg of integers would truncate): Partial(avg) on an integer
 * dtype is TPDP_ERR_OP_DTYPE.
 *
 * Thread-safety: specs are immutable after creation and may be read from
 * any thread. Redistribution uses the mesh's communicators and follows
 * their rule (one thread at a time per mesh).
 */
#ifndef TPDP_DTENSOR_H
#define TPDP_DTENSOR_H

#include "tpdp/comm.h"
#include "tpdp/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  TPDP_PLACEMENT_REPLICATE = 0,
  TPDP_PLACEMENT_SHARD = 1,
  TPDP_PLACEMENT_PARTIAL = 2
} tpdp_placement_kind;

/* One mesh dim's placement: Shard(dim), Replicate, or Partial(op). */
typedef struct {
  tpdp_placement_kind kind;
  int dim;           /* tensor dim, for SHARD (0 otherwise) */
  tpdp_reduce_op op; /* for PARTIAL (TPDP_OP_SUM otherwise) */
} tpdp_placement;

TPDP_API tpdp_placement tpdp_shard(int dim);
TPDP_API tpdp_placement tpdp_replicate(void);
TPDP_API tpdp_placement tpdp_partial(tpdp_reduce_op op);

/* 1 if both placements are the same (kind, and dim or op where relevant). */
TPDP_API int tpdp_placement_equal(tpdp_placement a, tpdp_placement b);

/* Text form: "S<dim>", "R", "P:<op>" ("P:sum", "P:avg", "P:max", "P:min").
 * format writes into buf (always NUL-terminated; 16 bytes suffice).
 * parse also takes "P" (= "P:sum"); errors: TPDP_ERR_PARSE naming the text. */
TPDP_API void tpdp_placement_format(tpdp_placement p, char *buf, size_t len);
TPDP_API tpdp_status tpdp_placement_parse(const char *text,
                                          tpdp_placement *out);
/* Parse a comma-separated list ("S0,R,P:avg") into out[0..*n). Errors:
 * TPDP_ERR_PARSE (naming the bad item), TPDP_ERR_TOO_MANY_DIMS (> max). */
TPDP_API tpdp_status tpdp_placements_parse(const char *text,
                                           tpdp_placement *out, int max,
                                           int *n);

/* ------------------------------------------------------------------ spec */

/* Opaque sharding metadata: mesh (borrowed; must outlive the spec),
 * placements, global shape and (contiguous, row-major) strides, dtype,
 * device. Immutable after creation. */
typedef struct tpdp_spec tpdp_spec;

/* Create a spec. mesh is borrowed and held: tpdp_mesh_destroy refuses
 * (TPDP_ERR_STATE) while the spec lives, so destroy specs first; placements:
 * one per mesh dim (copied); global_shape: ndim sizes >= 0 (copied);
 * device: where local tensors live (metadata; its index is not compared
 * across ranks). This process's local shape (for a mesh with a
 * communicator) is computed and cached here. Free with tpdp_spec_destroy.
 * Errors (*out = NULL on failure):
 *   TPDP_ERR_NULL_POINTER      mesh, out, placements (nplacements > 0) or
 *                              global_shape (ndim > 0) NULL
 *   TPDP_ERR_MESH_SIZE         a mesh of size 0
 *   TPDP_ERR_INVALID_ARGUMENT  nplacements != mesh ndim; a Shard dim < 0 or
 *                              >= ndim (naming mesh dim and tensor ndim);
 *                              a bad placement kind or op; a global
 *                              shape that overflows (non-zero sizes times
 *                              the element size above INT64_MAX)
 *   TPDP_ERR_TOO_MANY_DIMS     ndim < 0 or > TPDP_MAX_DIMS
 *   TPDP_ERR_BAD_DIM_SIZE      a negative global size
 *   TPDP_ERR_DTYPE_MISMATCH    an invalid dtype
 *   TPDP_ERR_OP_DTYPE          Partial(avg) with an integer dtype
 *   TPDP_ERR_OUT_OF_MEMORY */
TPDP_API tpdp_status tpdp_spec_create(const tpdp_mesh *mesh,
                                      const tpdp_placement *placements,
                                      int nplacements, int ndim,
                                      const int64_t *global_shape,
                                      tpdp_dtype dtype, tpdp_device device,
                                      tpdp_spec **out);
/* Same mesh, shape, dtype and device as `spec` with other placements. */
TPDP_API tpdp_status tpdp_spec_with_placements(const tpdp_spec *spec,
                                               const tpdp_placement *placements,
                                               int nplacements,
                                               tpdp_spec **out);
/* Free a spec made by tpdp_spec_create / _with_placements / _from_json
 * (releasing its hold on the mesh). NULL is a no-op returning
 * TPDP_SUCCESS. A spec already destroyed, passed to this or to the spec
 * calls that return a status, gives TPDP_ERR_INVALID_ARGUMENT ("has been
 * destroyed"), as far as that goes: the check reads a magic field cleared
 * by destroy in freed memory, which is undefined behaviour and may miss
 * (never rely on it). */
TPDP_API tpdp_status tpdp_spec_destroy(tpdp_spec *spec);

/* Accessors; the returned pointers live as long as the spec. NULL spec:
 * NULL / 0 / -1 / TPDP_F32 / cpu. */
TPDP_API const tpdp_mesh *tpdp_spec_mesh(const tpdp_spec *s);
TPDP_API int tpdp_spec_ndim(const tpdp_spec *s);
TPDP_API const int64_t *tpdp_spec_global_shape(const tpdp_spec *s);
TPDP_API const int64_t *tpdp_spec_global_strides(const tpdp_spec *s);
TPDP_API tpdp_dtype tpdp_spec_dtype(const tpdp_spec *s);
TPDP_API tpdp_device tpdp_spec_device(const tpdp_spec *s);
/* tpdp_mesh_ndim(mesh) entries. */
TPDP_API const tpdp_placement *tpdp_spec_placements(const tpdp_spec *s);
/* 1 if both specs have equal meshes (tpdp_mesh_equal), placements, shape,
 * dtype and device type. */
TPDP_API int tpdp_spec_equal(const tpdp_spec *a, const tpdp_spec *b);

/* Local shape and global offset (ndim entries each; global_offset may be
 * NULL) of mesh rank `rank` in [0, mesh size). Errors: NULL spec or
 * local_shape, TPDP_ERR_INVALID_ARGUMENT for a rank out of range. */
TPDP_API tpdp_status tpdp_spec_local_shape(const tpdp_spec *spec, int rank,
                                           int64_t *local_shape,
                                           int64_t *global_offset);
/* The mesh rank whose local shape tpdp_dtensor_unflatten checks: this
 * process's mesh rank, or 0 for a layout-only mesh (no communicator). */
TPDP_API int tpdp_spec_self_rank(const tpdp_spec *spec);

/* ------------------------------------------------------------------ JSON
 *
 * Compact JSON, the same text checkpoints carry, e.g.
 *   {"mesh":{"shape":[2,2],"names":["dp","tp"]},"placements":["S0","R"],
 *    "shape":[7,5],"stride":[5,1],"dtype":"f32","device":"cpu"}
 * (one line, no spaces). */

/* Write the JSON of `spec` into buf[len] (NUL-terminated). *needed (if not
 * NULL) receives the size needed including the NUL. buf == NULL with
 * len == 0 only queries *needed. Errors: TPDP_ERR_INVALID_ARGUMENT if buf
 * is too small (naming the size needed). */
TPDP_API tpdp_status tpdp_spec_to_json(const tpdp_spec *spec, char *buf,
                                       size_t len, size_t *needed);
/* Same, into a malloc'd string the caller frees with free(). */
TPDP_API tpdp_status tpdp_spec_to_json_alloc(const tpdp_spec *spec, char **out);
/* Parse JSON made by tpdp_spec_to_json into a spec on `mesh` (borrowed).
 * Errors: TPDP_ERR_PARSE (malformed text or a missing/mistyped field,
 * named), TPDP_ERR_MESH_MISMATCH (the text's mesh shape or dim names differ
 * from `mesh`'s, both named), and those of tpdp_spec_create. */
TPDP_API tpdp_status tpdp_spec_from_json(const tpdp_mesh *mesh,
                                         const char *text, tpdp_spec **out);

/* --------------------------------------------------------------- DTensor */

/* A DTensor: this rank's local tensor plus the spec (borrowed). */
typedef struct {
  tpdp_tensor local;
  const tpdp_spec *spec;
} tpdp_dtensor;

/* Zero-copy split: *local = dt->local, *spec = dt->spec. O(1), allocates
 * nothing, never touches the data. Errors: NULL arguments. */
TPDP_API tpdp_status tpdp_dtensor_flatten(const tpdp_dtensor *dt,
                                          tpdp_tensor *local,
                                          const tpdp_spec **spec);
/* Validated join: out->local = *local, out->spec = spec, after checking that
 * the local tensor's shape, dtype and device type are what the spec gives
 * this process's mesh rank (for a layout-only mesh: mesh rank 0). O(ndim),
 * allocates nothing. The local data may be NULL only if it is empty.
 * Errors (message naming expected and actual): TPDP_ERR_SHAPE_MISMATCH,
 * TPDP_ERR_DTYPE_MISMATCH, TPDP_ERR_DEVICE_MISMATCH; NULL arguments.
 * *out is untouched on failure. */
TPDP_API tpdp_status tpdp_dtensor_unflatten(const tpdp_tensor *local,
                                            const tpdp_spec *spec,
                                            tpdp_dtensor *out);
/* Free the local data of a DTensor made by one of the *_alloc functions
 * below (host memory from malloc, or device memory from cudaMalloc for a
 * CUDA spec) and clear out->local.data. */
TPDP_API void tpdp_dtensor_free_local(tpdp_dtensor *dt);

/* --------------------------------------------------------- redistribute
 *
 * Redistribution moves a DTensor from its spec to another spec of the same
 * global tensor (same mesh, shape, dtype, device), any placements to any
 * placements, on N-D meshes, with uneven shards and any shard dims. Per mesh
 * dim it uses: Shard->Replicate allgather; Partial->Replicate allreduce;
 * Partial->Shard reduce_scatter; Replicate->Shard a local slice (no
 * communication); Shard(i)->Shard(j) alltoall; Replicate->Partial a local
 * step (sum: coordinate 0 of that mesh dim keeps the value, the others hold
 * zeros; avg/max/min: every rank keeps it). When mesh dims that must change
 * shard the same tensor dim as others, those are unsharded from the last
 * mesh dim back and resharded in mesh-dim order.
 *
 * Collective over the mesh's communicator: every rank calls with the same
 * specs. The first call with a pair of specs (source, destination values)
 * checks that: the ranks allgather a small record of the global shape,
 * dtype, mesh and placements on the mesh's communicator, and ranks that
 * passed different ones all fail, naming each rank's arguments (also when
 * one rank's own checks fail: every rank fails). The source spec remembers
 * the last 4 pairs agreed on, and later calls with them skip the exchange;
 * with TPDP_DEBUG_COLLECTIVES=1 (when the mesh's communicator was made)
 * every call checks. The source local tensor may be strided; it is never
 * written. The destination is a caller-owned contiguous tensor with the
 * shape tpdp_spec_local_shape(dst_spec, my rank) gives, the spec's dtype
 * and device; its memory must not overlap the source's (first to last
 * element; TPDP_ERR_INVALID_ARGUMENT). The packing space for uneven
 * shards and non-leading shard dims is kept on the mesh from call to call
 * (one buffer, the largest needed so far, on the last device used; freed
 * by tpdp_mesh_destroy): a repeated redistribution pays its allocation and
 * first-touch page faults once, not every call. Buffers between the steps
 * of a multi-step plan are allocated and freed inside the call.
 *
 * Memory: host (CPU) tensors over an MPI mesh, or device (CUDA) tensors
 * over an NCCL mesh in a --config=cuda build (elsewhere CUDA tensors are
 * TPDP_ERR_UNSUPPORTED). Device inputs must be complete when the call is
 * made (the collectives run on the communicator's stream, which is not
 * ordered after the caller's: synchronise the producing stream, or order
 * the communicator after it with tpdp_comm_order_after). The call returns
 * once the destination holds the result.
 *
 * Errors: NULL arguments; TPDP_ERR_STATE (layout-only mesh);
 * TPDP_ERR_MESH_MISMATCH (src and dst specs on different meshes);
 * TPDP_ERR_SHAPE_MISMATCH (global shapes differ, or the source / destination
 * local shape is not this rank's); TPDP_ERR_DTYPE_MISMATCH;
 * TPDP_ERR_DEVICE_MISMATCH; TPDP_ERR_INVALID_ARGUMENT (overlap; placements
 * that differ across ranks); the same codes for shapes and dtypes that
 * differ across ranks; TPDP_ERR_UNSUPPORTED; communicator errors. */
TPDP_API tpdp_status tpdp_redistribute(const tpdp_dtensor *src,
                                       const tpdp_spec *dst_spec,
                                       tpdp_tensor *dst_local);
/* Same, allocating the destination (host memory, or device memory for a
 * CUDA spec; release with tpdp_dtensor_free_local). out->spec = dst_spec. */
TPDP_API tpdp_status tpdp_redistribute_alloc(const tpdp_dtensor *src,
                                             const tpdp_spec *dst_spec,
                                             tpdp_dtensor *out);
/* The whole global tensor on every rank (redistribute to all-Replicate).
 * out: contiguous, the global shape, spec dtype and device. Collective. */
TPDP_API tpdp_status tpdp_dtensor_full_tensor(const tpdp_dtensor *src,
                                              tpdp_tensor *out);
/* Same into memory it allocates: malloc'd host memory for a host spec (free
 * with free()), cudaMalloc'd for a CUDA spec (free with cudaFree); or
 * wrap it as {out, spec} and call tpdp_dtensor_free_local. */
TPDP_API tpdp_status tpdp_dtensor_full_tensor_alloc(const tpdp_dtensor *src,
                                                    tpdp_tensor *out);

/* ------------------------------------------ TP+DP hooks (tp/hooks.c)
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

/* ------------------------------------------------------ parallel styles
 *
 * Tensor-parallel styles, the plan that maps module FQN patterns to them,
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

/* One plan entry: modules whose FQN (from the root passed to
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

/* Turn the parameters of every module matching a plan entry (first match
 * wins) into DTensors over mesh dim `tp_dim` (Replicate on every other mesh
 * dim). Each parameter's current tensor must be the full tensor, identical
 * on every rank (e.g. initialised from a shared seed); its local shard is
 * copied into storage tpdp allocates (zero-initialised gradient storage of
 * the local shape too) and the parameter is re-pointed at it: tensor, grad
 * and spec, in DTensor form. The caller's full tensors are not touched and
 * may be freed afterwards. Each matched module becomes a managed unit of
 * kind "TP" with suffix " TP <STYLE>". Storage and specs live until the
 * module is destroyed. Host memory (MPI meshes) only in this build.
 * Nothing is changed when an error is returned.
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

/* torch.chunk of n items over k parts: part i covers [*start, *start +
 * *len) with chunk = ceil(n / k); an empty part has *start = n, *len = 0.
 * k < 1 or i outside [0, k) gives an empty part. */
TPDP_API void tpdp_chunk_range(int64_t n, int64_t k, int64_t i, int64_t *start,
                               int64_t *len);

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
 * `out`: contiguous f32 [n, D] (any shape of n * D elements). Collective
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
#endif /* TPDP_DTENSOR_H */
