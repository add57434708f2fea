// SPDX-License-Identifier: BSD-3-Clause
/* Internal to tp/: the spec's layout and the torch.chunk rule. Memory
 * (host or device) goes through core/mem.h. Not installed. */
#ifndef TPDP_TP_INTERNAL_H
#define TPDP_TP_INTERNAL_H

#include "core/check.h"
#include "tpdp/module.h"
#include "tpdp/tp.h"

/* Spec pairs a source spec remembers as agreed (tpdp_spec.agreed). */
#define TP_AGREED_PAIRS 4
/* tpdp_spec.magic while the spec is alive; tpdp_spec_destroy clears it. */
#define TP_SPEC_MAGIC 0x53504543u

struct tpdp_spec {
  unsigned magic;
  const tpdp_mesh *mesh; /* held (comm/services.h) until destroy */
  int mesh_ndim;
  int64_t mesh_sizes[TPDP_MAX_DIMS];
  tpdp_placement placements[TPDP_MAX_DIMS];
  int ndim;
  int64_t global_shape[TPDP_MAX_DIMS];
  int64_t global_strides[TPDP_MAX_DIMS];
  tpdp_dtype dtype;
  tpdp_device device;
  int self_rank; /* mesh rank unflatten checks (0 for layout-only) */
  int64_t self_shape[TPDP_MAX_DIMS];
  int64_t self_offset[TPDP_MAX_DIMS];
  /* Hashes of the last (this spec as source, destination) pairs every rank
   * agreed on in tpdp_redistribute (redistribute_check.c), round robin. A
   * cache, not part of the spec's value: written through const pointers. */
  uint64_t agreed[TP_AGREED_PAIRS];
  int agreed_next;
};

/* TPDP_ERR_NULL_POINTER naming `arg` for NULL; TPDP_ERR_INVALID_ARGUMENT
 * for a spec that was destroyed, as far as its freed memory still shows
 * the cleared magic (reading it is undefined behaviour: a best-effort
 * check). */
tpdp_status tp_spec_check(const tpdp_spec *spec, const char *arg);

/* Local shape/offset for mesh coordinates `coords` under `placements`
 * (the torch.chunk rule, mesh dims applied in order). No checks. */
void tp_local_shape(int mesh_ndim, const int64_t *mesh_sizes,
                    const int64_t *coords, const tpdp_placement *placements,
                    int ndim, const int64_t *global_shape, int64_t *shape,
                    int64_t *offset);

/* torch.chunk of extent n over k: size and start of chunk i (start n for
 * an empty chunk). Exact for every n >= 0, k >= 1, i >= 0 (no wrap near
 * INT64_MAX). */
void tp_chunk(int64_t n, int64_t k, int64_t i, int64_t *size, int64_t *start);

/* tpdp_redistribute's agreement across the mesh on its arguments, given
 * this rank's checks of them (`local`): a failure on every rank, naming
 * each rank's arguments, when they differ; `local` when it failed (its
 * message kept) and the ranks agree. Skipped for a pair of specs agreed
 * on before, unless the mesh communicator has TPDP_DEBUG_COLLECTIVES. */
tpdp_status tp_redistribute_agree(const tpdp_spec *src, const tpdp_spec *dst,
                                  tpdp_status local);

/* TPDP_ERR_INVALID_ARGUMENT if the bytes of `dst` and `src` (first to last
 * element, any strides) overlap on the same device. */
tpdp_status tp_check_no_overlap(const tpdp_tensor *src, const tpdp_tensor *dst);

/* TPDP_ERR_NOT_FOUND for a module without the TP state a call needs:
 * "module 'fqn[Class]' was not parallelized by <by>" ("a TP plan"). */
tpdp_status tp_not_parallelized(const tpdp_module *m, const char *by);

/* tpdp_tp_release_unused_storage's work on one module: styles.c's and
 * layout.c's storage that no parameter views any more, freed; *freed
 * counts the blocks. */
void tp_styles_release_unused(tpdp_module *m, int64_t *freed);
void tp_layout_release_unused(tpdp_module *m, int64_t *freed);

/* ceil(n / k) for n >= 0, k >= 1, without the n + k - 1 that wraps. */
static inline int64_t tp_ceil_div(int64_t n, int64_t k) {
  return n / k + (n % k != 0);
}

#endif /* TPDP_TP_INTERNAL_H */
