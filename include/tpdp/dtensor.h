// SPDX-License-Identifier: BSD-3-Clause
/*
 * tpdp dtensor (tp/): the DTensor contract: placements, the sharding spec
 * (local shapes and offsets, JSON), DTensor flatten / unflatten and
 * redistribution. What tp/ builds on it (the TP+DP transform, parallel
 * styles, transformer layouts) is tpdp/tp.h.
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
/* Where parameter p's current view lies in its global tensor: the view's
 * shape and its offset in every dim (ndim entries each), and the global
 * shape. A DTensor parameter's local tensor sits at its spec's offset for
 * this rank; a view holding only some rows of that local tensor (dp/'s
 * fully sharded units, tpdp_param_set_row_shard) adds its first row to the
 * dim-0 offset - so on a (dp, tp) mesh where TP also shards dim 0, each
 * rank's dp rows are found inside its tp chunk (what PyTorch expresses
 * with _StridedShard). A plain parameter is its own global tensor (offset
 * 0, row shard added). Any pointer but p may be NULL. Errors: NULL p. */
struct tpdp_param;
TPDP_API tpdp_status tpdp_param_global_box(const struct tpdp_param *p,
                                           int *ndim, int64_t *shape,
                                           int64_t *offset,
                                           int64_t *global_shape);

/* The mesh rank whose local shape tpdp_dtensor_unflatten checks: this
 * process's mesh rank, or 0 for a layout-only mesh (no communicator). */
TPDP_API int tpdp_spec_self_rank(const tpdp_spec *spec);

/* torch.chunk of n items over k parts, the rule of the local shapes above:
 * part i covers [*start, *start + *len) with chunk = ceil(n / k); an empty
 * part has *start = n, *len = 0. k < 1 or i outside [0, k) gives an empty
 * part. */
TPDP_API void tpdp_chunk_range(int64_t n, int64_t k, int64_t i, int64_t *start,
                               int64_t *len);

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
 * of a redistribution in several steps are allocated and freed inside the
 * call.
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

#ifdef __cplusplus
}
#endif
#endif /* TPDP_DTENSOR_H */
