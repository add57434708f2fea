// SPDX-License-Identifier: BSD-3-Clause
/* Redistribution of a DTensor between two specs on one mesh.
 *
 * Steps: a mesh dim is "dirty" if its placement changes, or if it shards a
 * tensor dim that an earlier dirty mesh dim shards before or after (it
 * must then be unsharded and resharded around that change, since a shard
 * on mesh dim m is a chunk of what mesh dims < m left). Phase 1 walks the
 * dirty dims from the last to the first and takes each to Replicate
 * (allgather / allreduce), or straight to its target Shard when that is
 * safe (alltoall / reduce_scatter). Phase 2 walks them from the first to
 * the last and takes Replicate to the target (local slice / local
 * Partial). Every step runs on one mesh dim's communicator.
 *
 * Uneven shards and shard dims with non-trivial outer extent are packed
 * into contiguous buffers of equal blocks, one per rank (each block
 * row-major, the shard dim padded to the chunk size, padding zeroed), around
 * the collective; even shards on a leading dim of a contiguous tensor go to
 * the collective directly. All byte movement outside the communicator
 * goes through core/mem.h (host or device memory).
 */
#include <string.h>

#include "comm/services.h"
#include "core/mem.h"
#include "tp/tp_internal.h"

typedef enum {
  STEP_ALLGATHER,      /* S(d) -> R */
  STEP_ALLREDUCE,      /* P -> R */
  STEP_REDUCE_SCATTER, /* P -> S(j) */
  STEP_ALLTOALL,       /* S(i) -> S(j) */
  STEP_SLICE,          /* R -> S(j) */
  STEP_PARTIALIZE      /* R -> P */
} step_kind;

typedef struct {
  step_kind kind;
  int m;
  tpdp_placement before[TPDP_MAX_DIMS]; /* placements before the step */
  tpdp_placement after[TPDP_MAX_DIMS];
} step;

#define MAX_STEPS (2 * TPDP_MAX_DIMS)

static int is_shard(tpdp_placement p, int d) {
  return p.kind == TPDP_PLACEMENT_SHARD && p.dim == d;
}

/* 1 if a mesh dim after m shards tensor dim d. */
static int sharded_after(const tpdp_placement *pl, int n, int m, int d) {
  for (int mm = m + 1; mm < n; mm++)
    if (is_shard(pl[mm], d)) return 1;
  return 0;
}

/* A step that unshards or slices tensor dim d on mesh dim m must work on
 * d's innermost shard (a shard on a later mesh dim is a chunk of m's); the
 * order of the steps guarantees it, so a failure is a bug here. */
static tpdp_status check_innermost(const tpdp_placement *pl, int n, int m,
                                   int d) {
  if (!sharded_after(pl, n, m, d)) return TPDP_SUCCESS;
  return TPDP_ERR(TPDP_ERR_INTERNAL,
                  "redistribute steps: mesh dim %d is not the innermost shard "
                  "of tensor dim %d",
                  m, d);
}

static tpdp_status choose_steps(const tpdp_spec *src, const tpdp_spec *dst,
                                step *steps, int *nsteps) {
  int n = src->mesh_ndim;
  const tpdp_placement *sp = src->placements, *dp = dst->placements;
  int dirty[TPDP_MAX_DIMS] = {0};
  for (int m = 0; m < n; m++) dirty[m] = !tpdp_placement_equal(sp[m], dp[m]);
  for (int m = 0; m < n; m++) {
    if (dirty[m] || sp[m].kind != TPDP_PLACEMENT_SHARD) continue;
    for (int mm = 0; mm < m; mm++)
      if (dirty[mm] &&
          (is_shard(sp[mm], sp[m].dim) || is_shard(dp[mm], sp[m].dim)))
        dirty[m] = 1;
  }
  tpdp_placement cur[TPDP_MAX_DIMS];
  memcpy(cur, sp, sizeof(tpdp_placement) * (size_t)n);
  int ns = 0;
#define PUSH(kind_, m_, to_)                                     \
  do {                                                           \
    step *s_ = &steps[ns++];                                     \
    s_->kind = (kind_);                                          \
    s_->m = (m_);                                                \
    memcpy(s_->before, cur, sizeof(tpdp_placement) * (size_t)n); \
    cur[(m_)] = (to_);                                           \
    memcpy(s_->after, cur, sizeof(tpdp_placement) * (size_t)n);  \
  } while (0)

  /* Phase 1: last to first, towards Replicate (or directly to Shard). */
  for (int m = n - 1; m >= 0; m--) {
    if (!dirty[m] || cur[m].kind == TPDP_PLACEMENT_REPLICATE) continue;
    int fast = 0;
    if (dp[m].kind == TPDP_PLACEMENT_SHARD) {
      int j = dp[m].dim;
      fast = !sharded_after(cur, n, m, j);
      for (int mm = 0; fast && mm < m; mm++)
        if (dirty[mm] && (is_shard(sp[mm], j) || is_shard(dp[mm], j))) fast = 0;
    }
    if (cur[m].kind == TPDP_PLACEMENT_SHARD) {
      CHECK(check_innermost(cur, n, m, cur[m].dim));
      if (fast)
        PUSH(STEP_ALLTOALL, m, dp[m]);
      else
        PUSH(STEP_ALLGATHER, m, tpdp_replicate());
    } else { /* PARTIAL */
      if (fast)
        PUSH(STEP_REDUCE_SCATTER, m, dp[m]);
      else
        PUSH(STEP_ALLREDUCE, m, tpdp_replicate());
    }
  }
  /* Phase 2: first to last, from Replicate to the target. */
  for (int m = 0; m < n; m++) {
    if (tpdp_placement_equal(cur[m], dp[m])) continue;
    if (cur[m].kind != TPDP_PLACEMENT_REPLICATE)
      return TPDP_ERR(TPDP_ERR_INTERNAL,
                      "redistribute steps: mesh dim %d not replicated in "
                      "phase 2",
                      m);
    if (dp[m].kind == TPDP_PLACEMENT_SHARD) {
      CHECK(check_innermost(cur, n, m, dp[m].dim));
      PUSH(STEP_SLICE, m, dp[m]);
    } else {
      PUSH(STEP_PARTIALIZE, m, dp[m]);
    }
  }
#undef PUSH
  *nsteps = ns;
  return TPDP_SUCCESS;
}

/* ------------------------------------------------------------ views */

static int64_t numel_of(int ndim, const int64_t *shape) {
  int64_t n = 1;
  for (int d = 0; d < ndim; d++) n *= shape[d];
  return n;
}

static int64_t outer_of(int ndim, const int64_t *shape, int d) {
  (void)ndim;
  int64_t n = 1;
  for (int e = 0; e < d; e++) n *= shape[e];
  return n;
}

/* A contiguous row-major view of `data` with `shape` (from a valid spec,
 * so tpdp_tensor_init cannot fail here). */
static tpdp_tensor contig_view(void *data, tpdp_dtype dtype, tpdp_device device,
                               int ndim, const int64_t *shape) {
  tpdp_tensor t;
  memset(&t, 0, sizeof t);
  (void)tpdp_tensor_init(&t, data, dtype, device, ndim, shape);
  return t;
}

static void *byte_at(void *base, int64_t elems, size_t es) {
  return (char *)base + (size_t)elems * es;
}

static tpdp_status narrow2(const tpdp_tensor *t, int d1, int64_t s1, int64_t l1,
                           int d2, int64_t s2, int64_t l2, tpdp_tensor *out) {
  tpdp_tensor tmp;
  CHECK(tpdp_tensor_narrow(t, d1, s1, l1, &tmp));
  return tpdp_tensor_narrow(&tmp, d2, s2, l2, out);
}

/* ------------------------------------------------------------ steps */

typedef struct {
  const tpdp_spec *spec;
  tpdp_comm *comm;
  int64_t k, c; /* comm size, this rank's coordinate on the mesh dim */
  size_t es;
  int ndim;
  int64_t lin[TPDP_MAX_DIMS], lout[TPDP_MAX_DIMS];
  int64_t parent[TPDP_MAX_DIMS]; /* extents before sharding on this dim */
  core_scratch *scratch;         /* the mesh's packing space */
} ctx;

/* The collective can run on the tensors as they are: dim d's extent E
 * splits into k equal blocks that are contiguous in `in`. */
static int as_is(const ctx *x, int d, int64_t E, const tpdp_tensor *in) {
  return E % x->k == 0 && outer_of(x->ndim, x->lin, d) == 1 &&
         tpdp_tensor_is_contiguous(in);
}

/* The shape B of one block of a padded exchange: the local input shape with
 * dim d at ch (a chunk); returns its element count. */
static int64_t block_shape(const ctx *x, int d, int64_t ch, int64_t *B) {
  memcpy(B, x->lin, sizeof(int64_t) * TPDP_MAX_DIMS);
  B[d] = ch;
  return numel_of(x->ndim, B);
}

/* Block r of `buf`, a run of blocks of shape B (bn elements each). */
static tpdp_tensor block_at(const ctx *x, void *buf, int64_t r, int64_t bn,
                            const int64_t *B) {
  return contig_view(byte_at(buf, r * bn, x->es), x->spec->dtype,
                     x->spec->device, x->ndim, B);
}

/* Copies between tensor t's k chunks on dim d (chunk rule over extent E)
 * and the k blocks of shape B in buf: chunk r <-> the first entries of
 * block r on dim d. On the block side dim e (e >= 0, the alltoall's other
 * dim) is narrowed to its first e_len entries as well. Empty chunks are
 * skipped (their blocks keep what they hold: padding the caller zeroed). */
static tpdp_status copy_chunks(const ctx *x, void *buf, int64_t bn,
                               const int64_t *B, const tpdp_tensor *t, int d,
                               int64_t E, int e, int64_t e_len, int to_blocks) {
  for (int64_t r = 0; r < x->k; r++) {
    int64_t size, start;
    tp_chunk(E, x->k, r, &size, &start);
    if (size == 0) continue;
    tpdp_tensor blk = block_at(x, buf, r, bn, B), in_blk, in_t;
    if (e >= 0)
      CHECK(narrow2(&blk, d, 0, size, e, 0, e_len, &in_blk));
    else
      CHECK(tpdp_tensor_narrow(&blk, d, 0, size, &in_blk));
    CHECK(tpdp_tensor_narrow(t, d, start, size, &in_t));
    CHECK(to_blocks ? core_mem_copy(&in_blk, &in_t)
                    : core_mem_copy(&in_t, &in_blk));
  }
  return TPDP_SUCCESS;
}

/* Zero the first n elements of buf. */
static tpdp_status zero_elems(const ctx *x, void *buf, int64_t n) {
  tpdp_tensor z = contig_view(buf, x->spec->dtype, x->spec->device, 1, &n);
  return core_mem_zero(&z);
}

static tpdp_status run_allgather(const ctx *x, int d, const tpdp_tensor *in,
                                 tpdp_tensor *out) {
  int64_t E = x->lout[d], k = x->k;
  int64_t ch = tp_ceil_div(E, k);
  if (as_is(x, d, E, in)) return tpdp_allgather(x->comm, in, out);
  int64_t B[TPDP_MAX_DIMS];
  int64_t bn = block_shape(x, d, ch, B);
  tpdp_device dev = x->spec->device;
  int64_t sc = x->lin[d];
  /* This rank's block is the local tensor as it is when it has the block's
   * shape; else it is packed (padding zeroed) after the k received blocks. */
  int pack = !(sc == ch && tpdp_tensor_is_contiguous(in));
  void *rbuf;
  CHECK(core_scratch_get(x->scratch, dev, (size_t)(bn * (k + pack)) * x->es,
                         &rbuf));
  void *sbuf = in->data;
  if (pack) {
    sbuf = byte_at(rbuf, bn * k, x->es);
    tpdp_tensor send = contig_view(sbuf, x->spec->dtype, dev, x->ndim, B);
    tpdp_tensor part;
    CHECK(tpdp_tensor_narrow(&send, d, 0, sc, &part));
    CHECK(core_mem_copy(&part, in));
    CHECK(tpdp_tensor_narrow(&send, d, sc, ch - sc, &part));
    CHECK(core_mem_zero(&part));
  }
  tpdp_tensor flat_s = contig_view(sbuf, x->spec->dtype, dev, 1, &bn);
  int64_t rn = bn * k;
  tpdp_tensor flat_r = contig_view(rbuf, x->spec->dtype, dev, 1, &rn);
  CHECK(tpdp_allgather(x->comm, &flat_s, &flat_r));
  return copy_chunks(x, rbuf, bn, B, out, d, E, -1, 0, 0);
}

static tpdp_status run_allreduce(const ctx *x, tpdp_reduce_op op,
                                 const tpdp_tensor *in, tpdp_tensor *out) {
  if (tpdp_tensor_is_contiguous(in))
    return tpdp_allreduce(x->comm, in, out, op);
  CHECK(core_mem_copy(out, in));
  return tpdp_allreduce(x->comm, out, out, op);
}

static tpdp_status run_reduce_scatter(const ctx *x, int j, tpdp_reduce_op op,
                                      const tpdp_tensor *in, tpdp_tensor *out) {
  int64_t E = x->lin[j], k = x->k;
  int64_t ch = tp_ceil_div(E, k);
  if (as_is(x, j, E, in)) return tpdp_reduce_scatter(x->comm, in, out, op);
  int64_t B[TPDP_MAX_DIMS];
  int64_t bn = block_shape(x, j, ch, B);
  tpdp_device dev = x->spec->device;
  void *buf;
  CHECK(
      core_scratch_get(x->scratch, dev, (size_t)(bn * (k + 1)) * x->es, &buf));
  if (E % k != 0) CHECK(zero_elems(x, buf, bn * k)); /* the padding */
  CHECK(copy_chunks(x, buf, bn, B, in, j, E, -1, 0, 1));
  void *rbuf = byte_at(buf, bn * k, x->es);
  int64_t sn = bn * k;
  /* This rank's block lands in `out` directly when it has the block's
   * shape (its chunk is full) and `out` is contiguous. */
  int direct = x->lout[j] == ch && tpdp_tensor_is_contiguous(out);
  tpdp_tensor flat_s = contig_view(buf, x->spec->dtype, dev, 1, &sn);
  tpdp_tensor flat_r =
      contig_view(direct ? out->data : rbuf, x->spec->dtype, dev, 1, &bn);
  CHECK(tpdp_reduce_scatter(x->comm, &flat_s, &flat_r, op));
  if (direct) return TPDP_SUCCESS;
  tpdp_tensor blk = contig_view(rbuf, x->spec->dtype, dev, x->ndim, B);
  tpdp_tensor part;
  CHECK(tpdp_tensor_narrow(&blk, j, 0, x->lout[j], &part));
  CHECK(core_mem_copy(out, &part));
  return TPDP_SUCCESS;
}

static tpdp_status run_alltoall(const ctx *x, int i, int j,
                                const tpdp_tensor *in, tpdp_tensor *out) {
  int64_t k = x->k;
  int64_t Ei = x->lout[i], Ej = x->lin[j];
  int64_t chi = tp_ceil_div(Ei, k), chj = tp_ceil_div(Ej, k);
  int64_t B[TPDP_MAX_DIMS];
  block_shape(x, i, chi, B);
  B[j] = chj;
  int64_t bn = numel_of(x->ndim, B);
  tpdp_device dev = x->spec->device;
  tpdp_dtype dt = x->spec->dtype;
  void *buf;
  CHECK(core_scratch_get(x->scratch, dev, (size_t)(2 * bn * k) * x->es, &buf));
  void *rbuf = byte_at(buf, bn * k, x->es);
  int64_t all = bn * k;
  if (Ei % k != 0 || Ej % k != 0) CHECK(zero_elems(x, buf, all));
  /* Block r: this rank's rows of dim i, rank r's chunk of dim j. */
  CHECK(copy_chunks(x, buf, bn, B, in, j, Ej, i, x->lin[i], 1));
  tpdp_tensor fs = contig_view(buf, dt, dev, 1, &all);
  tpdp_tensor fr = contig_view(rbuf, dt, dev, 1, &all);
  CHECK(tpdp_alltoall(x->comm, &fs, &fr));
  /* Block r: rank r's chunk of dim i, this rank's chunk of dim j. */
  return copy_chunks(x, rbuf, bn, B, out, i, Ei, j, x->lout[j], 0);
}

static tpdp_status run_slice(const ctx *x, int j, const tpdp_tensor *in,
                             tpdp_tensor *out) {
  int64_t size, start;
  tp_chunk(x->lin[j], x->k, x->c, &size, &start);
  tpdp_tensor part;
  CHECK(tpdp_tensor_narrow(in, j, size ? start : 0, size, &part));
  return core_mem_copy(out, &part);
}

static tpdp_status run_partialize(const ctx *x, tpdp_reduce_op op,
                                  const tpdp_tensor *in, tpdp_tensor *out) {
  if (op == TPDP_OP_SUM && x->c != 0) return core_mem_zero(out);
  return core_mem_copy(out, in);
}

/* ------------------------------------------------------------ driver */

static tpdp_status check_local(const tpdp_spec *spec, const tpdp_tensor *t,
                               const char *role) {
  char want[128], got[128];
  if (core_shapes_differ(spec->ndim, spec->self_shape, t->ndim, t->shape, want,
                         got, sizeof want))
    return TPDP_ERR(TPDP_ERR_SHAPE_MISMATCH,
                    "%s local tensor has shape %s but mesh rank %d needs %s",
                    role, got, spec->self_rank, want);
  if (t->dtype != spec->dtype)
    return TPDP_ERR(TPDP_ERR_DTYPE_MISMATCH,
                    "%s local tensor has dtype %s but the spec says %s", role,
                    tpdp_dtype_name(t->dtype), tpdp_dtype_name(spec->dtype));
  if (core_device_types_differ(spec->device, t->device, want, got, sizeof want))
    return TPDP_ERR(TPDP_ERR_DEVICE_MISMATCH,
                    "%s local tensor is on %s but the spec says %s", role, got,
                    want);
  if (t->data == NULL && tpdp_tensor_numel(t) > 0)
    return TPDP_ERR(TPDP_ERR_NULL_POINTER,
                    "%s local tensor has NULL data and %lld elements", role,
                    (long long)tpdp_tensor_numel(t));
  return TPDP_SUCCESS;
}

/* This rank's checks of its arguments (the specs are non-NULL). */
static tpdp_status check_args(const tpdp_dtensor *src,
                              const tpdp_spec *dst_spec,
                              const tpdp_tensor *dst_local) {
  const tpdp_spec *ss = src->spec;
  if (!tpdp_mesh_equal(ss->mesh, dst_spec->mesh))
    return TPDP_ERR(TPDP_ERR_MESH_MISMATCH,
                    "source spec and destination spec are on different "
                    "meshes (%d-dim, size %lld vs %d-dim, size %lld, or "
                    "different dim names / communicators)",
                    ss->mesh_ndim, (long long)tpdp_mesh_size(ss->mesh),
                    dst_spec->mesh_ndim,
                    (long long)tpdp_mesh_size(dst_spec->mesh));
  if (tpdp_mesh_rank(ss->mesh) < 0)
    return TPDP_ERR(TPDP_ERR_STATE,
                    "the spec's mesh is layout-only (no communicator); "
                    "redistribute needs a mesh created over a communicator");
  char a[128], b[128];
  if (core_shapes_differ(ss->ndim, ss->global_shape, dst_spec->ndim,
                         dst_spec->global_shape, a, b, sizeof a))
    return TPDP_ERR(TPDP_ERR_SHAPE_MISMATCH,
                    "source global shape %s != destination global shape %s", a,
                    b);
  if (ss->dtype != dst_spec->dtype)
    return TPDP_ERR(
        TPDP_ERR_DTYPE_MISMATCH, "source dtype %s != destination dtype %s",
        tpdp_dtype_name(ss->dtype), tpdp_dtype_name(dst_spec->dtype));
  if (core_device_types_differ(ss->device, dst_spec->device, a, b, sizeof a))
    return TPDP_ERR(TPDP_ERR_DEVICE_MISMATCH,
                    "source spec's device %s != destination spec's device %s",
                    a, b);
  CHECK(core_mem_supported(ss->device, "the source tensor"));
  CHECK(check_local(ss, &src->local, "source"));
  CHECK(check_local(dst_spec, dst_local, "destination"));
  if (!tpdp_tensor_is_contiguous(dst_local))
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "destination local tensor must be contiguous");
  return tp_check_no_overlap(&src->local, dst_local);
}

tpdp_status tpdp_redistribute(const tpdp_dtensor *src,
                              const tpdp_spec *dst_spec,
                              tpdp_tensor *dst_local) {
  TPDP_API_ENTRY;
  CHECK_PTR(src);
  CHECK_PTR(dst_spec);
  CHECK_PTR(dst_local);
  const tpdp_spec *ss = src->spec;
  if (ss == NULL)
    return TPDP_ERR(TPDP_ERR_NULL_POINTER, "source DTensor has a NULL spec");
  /* Agreed across the mesh even when this rank's checks failed, so that
   * its peers fail too rather than wait for it. */
  CHECK(tp_redistribute_agree(ss, dst_spec,
                              check_args(src, dst_spec, dst_local)));

  step steps[MAX_STEPS];
  int nsteps = 0;
  CHECK(choose_steps(ss, dst_spec, steps, &nsteps));
  if (nsteps == 0) return core_mem_copy(dst_local, &src->local);

  int64_t coords[TPDP_MAX_DIMS];
  CHECK(tpdp_mesh_coords(ss->mesh, tpdp_mesh_rank(ss->mesh), coords));
  tpdp_tensor cur = src->local;
  void *owned = NULL;
  tpdp_status st = TPDP_SUCCESS;
  for (int s = 0; s < nsteps; s++) {
    const step *p = &steps[s];
    ctx x;
    memset(&x, 0, sizeof x);
    x.spec = ss;
    x.ndim = ss->ndim;
    x.es = tpdp_dtype_size(ss->dtype);
    x.k = ss->mesh_sizes[p->m];
    x.c = coords[p->m];
    x.scratch = comm_mesh_scratch(ss->mesh);
    CHECK_GOTO(tpdp_mesh_dim_comm(ss->mesh, p->m, &x.comm), st, fail);
    int64_t off[TPDP_MAX_DIMS];
    tp_local_shape(ss->mesh_ndim, ss->mesh_sizes, coords, p->before, ss->ndim,
                   ss->global_shape, x.lin, off);
    tp_local_shape(ss->mesh_ndim, ss->mesh_sizes, coords, p->after, ss->ndim,
                   ss->global_shape, x.lout, off);
    tpdp_tensor out;
    void *buf = NULL;
    if (s == nsteps - 1) {
      out = *dst_local;
    } else {
      CHECK_GOTO(core_mem_alloc(ss->device,
                                (size_t)numel_of(x.ndim, x.lout) * x.es, &buf),
                 st, fail);
      out = contig_view(buf, ss->dtype, ss->device, x.ndim, x.lout);
    }
    tpdp_placement from = p->before[p->m], to = p->after[p->m];
    switch (p->kind) {
      case STEP_ALLGATHER:
        st = run_allgather(&x, from.dim, &cur, &out);
        break;
      case STEP_ALLREDUCE:
        st = run_allreduce(&x, from.op, &cur, &out);
        break;
      case STEP_REDUCE_SCATTER:
        st = run_reduce_scatter(&x, to.dim, from.op, &cur, &out);
        break;
      case STEP_ALLTOALL:
        st = run_alltoall(&x, from.dim, to.dim, &cur, &out);
        break;
      case STEP_SLICE:
        st = run_slice(&x, to.dim, &cur, &out);
        break;
      case STEP_PARTIALIZE:
        st = run_partialize(&x, to.op, &cur, &out);
        break;
    }
    st = core_mem_free_keep(ss->device, owned, st);
    owned = buf;
    cur = out;
    if (st != TPDP_SUCCESS) goto fail;
  }
fail:
  return core_mem_free_keep(ss->device, owned, st);
}

tpdp_status tpdp_redistribute_alloc(const tpdp_dtensor *src,
                                    const tpdp_spec *dst_spec,
                                    tpdp_dtensor *out) {
  TPDP_API_ENTRY;
  CHECK_PTR(dst_spec); /* src: tpdp_redistribute checks it */
  CHECK_PTR(out);
  CHECK(core_mem_supported(dst_spec->device, "the destination tensor"));
  tpdp_tensor t;
  void *buf = NULL;
  size_t bytes = (size_t)numel_of(dst_spec->ndim, dst_spec->self_shape) *
                 tpdp_dtype_size(dst_spec->dtype);
  CHECK(core_mem_alloc(dst_spec->device, bytes, &buf));
  t = contig_view(buf, dst_spec->dtype, dst_spec->device, dst_spec->ndim,
                  dst_spec->self_shape);
  tpdp_status st = tpdp_redistribute(src, dst_spec, &t);
  if (st != TPDP_SUCCESS) {
    return core_mem_free_keep(dst_spec->device, buf, st);
  }
  out->local = t;
  out->spec = dst_spec;
  return TPDP_SUCCESS;
}

static tpdp_status replicated_spec(const tpdp_spec *s, tpdp_spec **out) {
  tpdp_placement pl[TPDP_MAX_DIMS];
  for (int m = 0; m < s->mesh_ndim; m++) pl[m] = tpdp_replicate();
  return tpdp_spec_with_placements(s, pl, s->mesh_ndim, out);
}

/* src redistributed to all-Replicate: into out's memory, or (alloc) into
 * a new buffer that out then views. */
static tpdp_status full_tensor(const tpdp_dtensor *src, int alloc,
                               tpdp_tensor *out) {
  CHECK_PTR(src);
  CHECK_PTR(out);
  if (src->spec == NULL)
    return TPDP_ERR(TPDP_ERR_NULL_POINTER, "source DTensor has a NULL spec");
  tpdp_spec *rep = NULL;
  CHECK(replicated_spec(src->spec, &rep));
  tpdp_dtensor d;
  tpdp_status st = alloc ? tpdp_redistribute_alloc(src, rep, &d)
                         : tpdp_redistribute(src, rep, out);
  tpdp_status st2 = tpdp_spec_destroy(rep);
  if (st == TPDP_SUCCESS && alloc) *out = d.local;
  return st != TPDP_SUCCESS ? st : st2;
}

tpdp_status tpdp_dtensor_full_tensor(const tpdp_dtensor *src,
                                     tpdp_tensor *out) {
  TPDP_API_ENTRY;
  return full_tensor(src, 0, out);
}

tpdp_status tpdp_dtensor_full_tensor_alloc(const tpdp_dtensor *src,
                                           tpdp_tensor *out) {
  TPDP_API_ENTRY;
  return full_tensor(src, 1, out);
}
