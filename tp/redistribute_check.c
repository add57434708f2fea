// SPDX-License-Identifier: BSD-3-Clause
/* tpdp_redistribute's checks that go beyond one rank's arguments.
 *
 * Agreement: every rank of the mesh must pass the same global shape, dtype,
 * device kind, mesh and source / destination placements; when they do not,
 * the ranks choose different steps (one waits in an allgather while another
 * runs an alltoall, or the counts differ) and get MPI errors on some ranks,
 * scrambled or uninitialised data on others, or hang. The ranks therefore
 * allgather a fixed-size record of those arguments on the mesh's
 * communicator and compare, failing alike with a message naming each
 * rank's arguments. To keep that cheap in a training loop, a source spec
 * remembers the last few (source, destination) pairs it agreed on and skips
 * the exchange for them: every rank has made the same calls before, so
 * every rank skips alike. What that cannot catch (ranks diverging later,
 * on a pair they once agreed on) TPDP_DEBUG_COLLECTIVES catches: with it
 * the exchange runs on every call, before any collective.
 *
 * Overlap: the source is read while the destination is written, so their
 * memory must not overlap; refused rather than returning wrong data. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "comm/services.h"
#include "tp/tp_internal.h"

/* One rank's redistribute arguments, as ranks compare them. Fixed size
 * and zero-filled: compared byte for byte after `status`. */
typedef struct {
  int32_t status; /* this rank's local checks */
  int32_t ndim;
  int32_t dtype;
  int32_t device_type;
  int32_t mesh_ndim;
  int32_t unused;
  int64_t shape[TPDP_MAX_DIMS];
  int64_t mesh_sizes[TPDP_MAX_DIMS];
  tpdp_placement src[TPDP_MAX_DIMS];
  tpdp_placement dst[TPDP_MAX_DIMS];
} rd_args;

static void put_placement(tpdp_placement *out, tpdp_placement p) {
  /* Only the fields the kind uses, so that equal placements compare
   * equal byte for byte. */
  memset(out, 0, sizeof *out);
  out->kind = p.kind;
  if (p.kind == TPDP_PLACEMENT_SHARD) out->dim = p.dim;
  if (p.kind == TPDP_PLACEMENT_PARTIAL) out->op = p.op;
}

static void fill(rd_args *a, const tpdp_spec *src, const tpdp_spec *dst,
                 tpdp_status local) {
  memset(a, 0, sizeof *a);
  a->status = (int32_t)local;
  a->ndim = src->ndim;
  a->dtype = (int32_t)src->dtype;
  a->device_type = (int32_t)src->device.type;
  a->mesh_ndim = src->mesh_ndim;
  for (int d = 0; d < src->ndim; d++) a->shape[d] = src->global_shape[d];
  for (int m = 0; m < src->mesh_ndim; m++) {
    a->mesh_sizes[m] = src->mesh_sizes[m];
    put_placement(&a->src[m], src->placements[m]);
  }
  for (int m = 0; m < dst->mesh_ndim && m < TPDP_MAX_DIMS; m++)
    put_placement(&a->dst[m], dst->placements[m]);
}

static int same_args(const void *x, const void *y) {
  return memcmp((const char *)x + offsetof(rd_args, ndim),
                (const char *)y + offsetof(rd_args, ndim),
                sizeof(rd_args) - offsetof(rd_args, ndim)) == 0;
}

/* FNV-1a over the compared part of the record. */
static uint64_t hash_args(const rd_args *a) {
  const unsigned char *p = (const unsigned char *)a + offsetof(rd_args, ndim);
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < sizeof *a - offsetof(rd_args, ndim); i++)
    h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

static void append_placements(core_strbuf *b, const tpdp_placement *pl, int n) {
  core_sb_puts(b, "[");
  for (int m = 0; m < n; m++) {
    char buf[32];
    tpdp_placement_format(pl[m], buf, sizeof buf);
    core_sb_printf(b, "%s%s", m ? ", " : "", buf);
  }
  core_sb_puts(b, "]");
}

static void describe(core_strbuf *b, const void *rec) {
  const rd_args *a = (const rd_args *)rec;
  char shape[TPDP_MAX_DIMS * 24];
  int nd = a->ndim < 0 || a->ndim > TPDP_MAX_DIMS ? 0 : a->ndim;
  int nm = a->mesh_ndim < 0 || a->mesh_ndim > TPDP_MAX_DIMS ? 0 : a->mesh_ndim;
  tpdp_shape_format(nd, a->shape, shape, sizeof shape);
  core_sb_printf(b, "%s %s ", tpdp_dtype_name((tpdp_dtype)a->dtype), shape);
  append_placements(b, a->src, nm);
  core_sb_puts(b, " -> ");
  append_placements(b, a->dst, nm);
  if (a->device_type != TPDP_DEVICE_CPU) core_sb_puts(b, " on cuda");
}

/* The status of a disagreement: what differs first. */
static tpdp_status mismatch_status(const rd_args *a, const rd_args *b) {
  if (a->dtype != b->dtype) return TPDP_ERR_DTYPE_MISMATCH;
  if (a->ndim != b->ndim || memcmp(a->shape, b->shape, sizeof a->shape) != 0)
    return TPDP_ERR_SHAPE_MISMATCH;
  if (a->device_type != b->device_type) return TPDP_ERR_DEVICE_MISMATCH;
  if (a->mesh_ndim != b->mesh_ndim ||
      memcmp(a->mesh_sizes, b->mesh_sizes, sizeof a->mesh_sizes) != 0)
    return TPDP_ERR_MESH_MISMATCH;
  return TPDP_ERR_INVALID_ARGUMENT;
}

static tpdp_status mismatch(const tpdp_comm *comm, const void *a, const void *b,
                            const char *ranks) {
  return TPDP_ERR(mismatch_status(a, b),
                  "ranks of %s passed different arguments (this is rank "
                  "%d): %s; every rank must pass the same global shape, "
                  "dtype and placements",
                  tpdp_comm_name(comm), tpdp_comm_rank(comm), ranks);
}

static int agreed_before(const tpdp_spec *src, uint64_t h) {
  for (int i = 0; i < TP_AGREED_PAIRS; i++)
    if (src->agreed[i] == h && h != 0) return 1;
  return 0;
}

tpdp_status tp_redistribute_agree(const tpdp_spec *src, const tpdp_spec *dst,
                                  tpdp_status local) {
  static const comm_agree_kind kind = {sizeof(rd_args), same_args, describe,
                                       mismatch};
  tpdp_comm *comm = tpdp_mesh_comm(src->mesh);
  if (comm == NULL) return local; /* layout-only: refused by the caller */
  rd_args mine;
  fill(&mine, src, dst, local);
  uint64_t h = hash_args(&mine);
  if (!comm_debug_collectives(comm) && agreed_before(src, h)) return local;
  tpdp_status st = comm_agree(comm, &kind, &mine, local);
  if (st == TPDP_SUCCESS) {
    /* Every rank agreed and records the same pair in the same slot. */
    tpdp_spec *s = (tpdp_spec *)src; /* the cache is not the spec's value */
    s->agreed[s->agreed_next] = h;
    s->agreed_next = (s->agreed_next + 1) % TP_AGREED_PAIRS;
  }
  return st;
}

/* [*lo, *hi): the bytes t's elements occupy, relative to t->data; 0 if
 * the extent does not fit in int64 (no overlap is claimed then). */
static int byte_extent(const tpdp_tensor *t, int64_t *lo, int64_t *hi) {
  int64_t a = 0, b = 0;
  for (int d = 0; d < t->ndim; d++) {
    int64_t span;
    if (__builtin_mul_overflow(t->shape[d] - 1, t->strides[d], &span)) return 0;
    if (span < 0 ? __builtin_add_overflow(a, span, &a)
                 : __builtin_add_overflow(b, span, &b))
      return 0;
  }
  int64_t es = (int64_t)tpdp_dtype_size(t->dtype);
  if (__builtin_mul_overflow(a, es, lo) ||
      __builtin_mul_overflow(b + 1, es, hi))
    return 0;
  return 1;
}

tpdp_status tp_check_no_overlap(const tpdp_tensor *src,
                                const tpdp_tensor *dst) {
  if (tpdp_tensor_numel(src) <= 0 || tpdp_tensor_numel(dst) <= 0 ||
      src->data == NULL || dst->data == NULL ||
      !tpdp_device_equal(src->device, dst->device))
    return TPDP_SUCCESS;
  int64_t slo, shi, dlo, dhi;
  if (!byte_extent(src, &slo, &shi) || !byte_extent(dst, &dlo, &dhi))
    return TPDP_SUCCESS;
  uintptr_t s0 = (uintptr_t)src->data, d0 = (uintptr_t)dst->data;
  uintptr_t sa = s0 + (uintptr_t)slo, sb = s0 + (uintptr_t)shi;
  uintptr_t da = d0 + (uintptr_t)dlo, db = d0 + (uintptr_t)dhi;
  if (sa < db && da < sb)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "the destination local tensor (bytes %p to %p) overlaps "
                    "the source local tensor (bytes %p to %p); the source "
                    "is read while the destination is written: pass a "
                    "separate destination buffer",
                    (void *)da, (void *)db, (void *)sa, (void *)sb);
  return TPDP_SUCCESS;
}
