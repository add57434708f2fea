/* Parallel styles (colwise, rowwise, sequence-parallel, replicate), the plan
 * that maps module FQN patterns to them, tpdp_parallelize, and the
 * functional collectives the styles need. (Moved into dtensor.h once the
 * DTensor section settles.) */
#ifndef TPDP_TP_STYLES_H
#define TPDP_TP_STYLES_H

#include "tpdp/dtensor.h"
#include "tpdp/module.h"

#ifdef __cplusplus
extern "C" {
#endif

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
const char *tpdp_tp_style_name(tpdp_tp_style style);
tpdp_status tpdp_tp_style_parse(const char *text, tpdp_tp_style *out);

/* One plan entry: modules whose FQN (from the root passed to
 * tpdp_parallelize) matches `pattern` get `style`. `*` matches exactly one
 * path component ("layers.*.fc1"). */
typedef struct {
  const char *pattern;
  tpdp_tp_style style;
} tpdp_tp_plan_entry;

/* 1 if the dotted FQN matches the pattern. */
int tpdp_fqn_match(const char *pattern, const char *fqn);

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
 * parallelized; TPDP_ERR_STATE for a layout-only mesh. */
tpdp_status tpdp_parallelize(tpdp_module *root, const tpdp_mesh *mesh,
                             const char *tp_dim,
                             const tpdp_tp_plan_entry *plan, int nplan);

/* The style of a parallelized module (TPDP_ERR_NOT_FOUND if it is none). */
tpdp_status tpdp_tp_module_style(const tpdp_module *m, tpdp_tp_style *out);

/* The TP communicator of a parallelized module (owned by the mesh). */
tpdp_status tpdp_tp_module_comm(const tpdp_module *m, tpdp_comm **out);

/* ---- functional collectives of the styles (activations, host memory) ----
 * Each takes the parallelized module whose input/output it transforms. */

/* colwise input, backward: allreduce (sum) the input gradient in place.
 * (Its forward is the identity.) */
tpdp_status tpdp_tp_colwise_input_backward(const tpdp_module *m,
                                           tpdp_tensor *grad_input);
/* rowwise output, forward: allreduce (sum) the partial output in place.
 * (Its backward is the identity.) */
tpdp_status tpdp_tp_rowwise_output_forward(const tpdp_module *m,
                                           tpdp_tensor *partial_output);
/* rowwise output to a sequence shard, forward: reduce_scatter the partial
 * output (full sequence) along `seq_dim` into this rank's torch.chunk shard.
 * Its backward is tpdp_tp_sequence_gather of the gradient. */
tpdp_status tpdp_tp_rowwise_output_reduce_scatter(const tpdp_module *m,
                                                  const tpdp_tensor *partial,
                                                  int seq_dim,
                                                  tpdp_tensor *shard);
/* Sequence-parallel region exit, forward: allgather the sequence shards
 * along `seq_dim` into the full tensor (uneven shards allowed). Its
 * backward is tpdp_tp_sequence_scatter_grad. */
tpdp_status tpdp_tp_sequence_gather(const tpdp_module *m,
                                    const tpdp_tensor *shard, int seq_dim,
                                    tpdp_tensor *full);
/* Backward of tpdp_tp_sequence_gather: reduce_scatter (sum) the full
 * gradient along seq_dim into this rank's shard. */
tpdp_status tpdp_tp_sequence_scatter_grad(const tpdp_module *m,
                                          const tpdp_tensor *full_grad,
                                          int seq_dim, tpdp_tensor *shard_grad);

/* Allreduce (sum) over TP the gradients of every sequence-parallel module's
 * parameters under root (replicated parameters used on different sequence
 * shards). Call after backward, before the DP reduction finishes. */
tpdp_status tpdp_tp_reduce_replicated_grads(tpdp_module *root);

#ifdef __cplusplus
}
#endif
#endif
