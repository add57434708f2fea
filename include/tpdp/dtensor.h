/*
 * tpdp dtensor (tp/): placements, the sharding spec, DTensor flatten /
 * unflatten, redistribution, and the TP+DP forward hooks.
 *
 * A spec describes how a global tensor is laid out over a device mesh: one
 * placement per mesh dim. Local shapes and global offsets follow
 * torch.chunk: along a sharded dim of extent n over k ranks, chunk =
 * ceil(n/k) and shard i covers [i*chunk, min((i+1)*chunk, n)), possibly
 * empty (an empty shard's offset on that dim is n). Several mesh dims
 * sharding one tensor dim apply in mesh-dim order, each chunking the
 * previous local extent; offsets add up.
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
  int dim;            /* tensor dim, for SHARD */
  tpdp_reduce_op op;  /* for PARTIAL */
} tpdp_placement;

tpdp_placement tpdp_shard(int dim);
tpdp_placement tpdp_replicate(void);
tpdp_placement tpdp_partial(tpdp_reduce_op op);

/* Opaque sharding metadata: mesh (borrowed; must outlive the spec),
 * placements, global shape and strides, dtype, device. */
typedef struct tpdp_spec tpdp_spec;

/* A DTensor: this rank's local tensor plus the spec (borrowed). */
typedef struct {
  tpdp_tensor local;
  const tpdp_spec *spec;
} tpdp_dtensor;

#ifdef __cplusplus
}
#endif
#endif /* TPDP_DTENSOR_H */
