// SPDX-License-Identifier: BSD-3-Clause
/* Placements, the sharding spec (local shapes and offsets by the
 * torch.chunk rule), DTensor flatten/unflatten. The spec's JSON form is in
 * tp/spec_json.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/services.h"
#include "core/mem.h"
#include "tp/tp_internal.h"

/* ------------------------------------------------------------ placements */

tpdp_placement tpdp_shard(int dim) {
  tpdp_placement p = {TPDP_PLACEMENT_SHARD, dim, TPDP_OP_SUM};
  return p;
}
tpdp_placement tpdp_replicate(void) {
  tpdp_placement p = {TPDP_PLACEMENT_REPLICATE, 0, TPDP_OP_SUM};
  return p;
}
tpdp_placement tpdp_partial(tpdp_reduce_op op) {
  tpdp_placement p = {TPDP_PLACEMENT_PARTIAL, 0, op};
  return p;
}

int tpdp_placement_equal(tpdp_placement a, tpdp_placement b) {
  if (a.kind != b.kind) return 0;
  if (a.kind == TPDP_PLACEMENT_SHARD) return a.dim == b.dim;
  if (a.kind == TPDP_PLACEMENT_PARTIAL) return a.op == b.op;
  return 1;
}

void tpdp_placement_format(tpdp_placement p, char *buf, size_t len) {
  if (buf == NULL || len == 0) return;
  switch (p.kind) {
    case TPDP_PLACEMENT_SHARD:
      snprintf(buf, len, "S%d", p.dim);
      break;
    case TPDP_PLACEMENT_REPLICATE:
      snprintf(buf, len, "R");
      break;
    case TPDP_PLACEMENT_PARTIAL:
      snprintf(buf, len, "P:%s", tpdp_reduce_op_name(p.op));
      break;
    default:
      snprintf(buf, len, "?");
      break;
  }
}

tpdp_status tpdp_placement_parse(const char *text, tpdp_placement *out) {
  TPDP_API_ENTRY;
  CHECK_PTR(text);
  CHECK_PTR(out);
  if (strcmp(text, "R") == 0) {
    *out = tpdp_replicate();
    return TPDP_SUCCESS;
  }
  if (strcmp(text, "P") == 0) {
    *out = tpdp_partial(TPDP_OP_SUM);
    return TPDP_SUCCESS;
  }
  if (strncmp(text, "P:", 2) == 0) {
    for (int op = 0; op < TPDP_OP_COUNT; op++)
      if (strcmp(text + 2, tpdp_reduce_op_name((tpdp_reduce_op)op)) == 0) {
        *out = tpdp_partial((tpdp_reduce_op)op);
        return TPDP_SUCCESS;
      }
    return TPDP_ERR(TPDP_ERR_PARSE,
                    "placement '%s': unknown reduce op '%s' (sum, avg, max, "
                    "min)",
                    text, text + 2);
  }
  if (text[0] == 'S' && text[1] >= '0' && text[1] <= '9') {
    char *end = NULL;
    long d = strtol(text + 1, &end, 10);
    if (*end == '\0' && d < TPDP_MAX_DIMS) {
      *out = tpdp_shard((int)d);
      return TPDP_SUCCESS;
    }
  }
  return TPDP_ERR(TPDP_ERR_PARSE,
                  "placement '%s' is not S<dim> (dim < %d), R, P or P:<op>",
                  text, TPDP_MAX_DIMS);
}

tpdp_status tpdp_placements_parse(const char *text, tpdp_placement *out,
                                  int max, int *n) {
  TPDP_API_ENTRY;
  CHECK_PTR(text);
  CHECK_PTR(out);
  CHECK_PTR(n);
  int count = 0;
  const char *p = text;
  for (;;) {
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    char item[32];
    if (len == 0 || len >= sizeof item)
      return TPDP_ERR(TPDP_ERR_PARSE,
                      "placement list '%s': item %d is empty or too long", text,
                      count);
    if (count >= max)
      return TPDP_ERR(TPDP_ERR_TOO_MANY_DIMS,
                      "placement list '%s' has more than %d items", text, max);
    memcpy(item, p, len);
    item[len] = '\0';
    CHECK(tpdp_placement_parse(item, &out[count]));
    count++;
    if (!comma) break;
    p = comma + 1;
  }
  *n = count;
  return TPDP_SUCCESS;
}

/* ------------------------------------------------------------ layout */

void tp_chunk(int64_t n, int64_t k, int64_t i, int64_t *size, int64_t *start) {
  /* The chunk's start and end without i * chunk or lo + chunk wrapping
   * for n near INT64_MAX. */
  int64_t chunk = k > 0 ? tp_ceil_div(n, k) : n;
  int64_t lo;
  if (__builtin_mul_overflow(i, chunk, &lo) || lo >= n) {
    *size = 0;
    *start = n;
    return;
  }
  *size = chunk < n - lo ? chunk : n - lo;
  *start = lo;
}

void tp_local_shape(int mesh_ndim, const int64_t *mesh_sizes,
                    const int64_t *coords, const tpdp_placement *placements,
                    int ndim, const int64_t *global_shape, int64_t *shape,
                    int64_t *offset) {
  int empty[TPDP_MAX_DIMS] = {0};
  for (int d = 0; d < ndim; d++) {
    shape[d] = global_shape[d];
    offset[d] = 0;
  }
  for (int m = 0; m < mesh_ndim; m++) {
    if (placements[m].kind != TPDP_PLACEMENT_SHARD) continue;
    int d = placements[m].dim;
    int64_t size, start;
    tp_chunk(shape[d], mesh_sizes[m], coords[m], &size, &start);
    if (size == 0) empty[d] = 1;
    shape[d] = size;
    offset[d] += start;
  }
  /* The documented rule: an empty shard's offset is the dim's global size. */
  for (int d = 0; d < ndim; d++)
    if (empty[d] || shape[d] == 0) offset[d] = global_shape[d];
}

/* ------------------------------------------------------------ spec */

tpdp_status tp_spec_check(const tpdp_spec *spec, const char *arg) {
  return core_check_handle(spec, spec ? spec->magic : 0, TP_SPEC_MAGIC, arg,
                           "spec", "tpdp_spec_destroy");
}

static tpdp_status check_placements(const tpdp_mesh *mesh,
                                    const tpdp_placement *placements,
                                    int nplacements, int ndim,
                                    tpdp_dtype dtype) {
  int mesh_ndim = tpdp_mesh_ndim(mesh);
  if (nplacements != mesh_ndim)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "%d placements given for a %d-dim mesh (one per mesh dim "
                    "needed)",
                    nplacements, mesh_ndim);
  if (nplacements > 0) CHECK_PTR(placements);
  for (int m = 0; m < nplacements; m++) {
    tpdp_placement p = placements[m];
    switch (p.kind) {
      case TPDP_PLACEMENT_REPLICATE:
        break;
      case TPDP_PLACEMENT_SHARD:
        if (p.dim < 0 || p.dim >= ndim)
          return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                          "placement of mesh dim %d (%s) is Shard(%d) but the "
                          "tensor has %d dims: shard dim must be in [0, %d)",
                          m, tpdp_mesh_dim_name(mesh, m), p.dim, ndim, ndim);
        break;
      case TPDP_PLACEMENT_PARTIAL:
        if ((int)p.op < 0 || p.op >= TPDP_OP_COUNT)
          return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                          "placement of mesh dim %d (%s) is Partial with "
                          "invalid reduce op %d",
                          m, tpdp_mesh_dim_name(mesh, m), (int)p.op);
        if (p.op == TPDP_OP_AVG && !tpdp_dtype_is_float(dtype))
          return TPDP_ERR(TPDP_ERR_OP_DTYPE,
                          "placement of mesh dim %d (%s) is Partial(avg) but "
                          "dtype %s is an integer type (avg needs a floating "
                          "dtype; use sum, max or min)",
                          m, tpdp_mesh_dim_name(mesh, m),
                          tpdp_dtype_name(dtype));
        break;
      default:
        return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                        "placement of mesh dim %d has invalid kind %d", m,
                        (int)p.kind);
    }
  }
  return TPDP_SUCCESS;
}

tpdp_status tpdp_spec_create(const tpdp_mesh *mesh,
                             const tpdp_placement *placements, int nplacements,
                             int ndim, const int64_t *global_shape,
                             tpdp_dtype dtype, tpdp_device device,
                             tpdp_spec **out) {
  TPDP_API_ENTRY;
  CHECK_PTR(out);
  *out = NULL;
  CHECK_PTR(mesh);
  CHECK(comm_mesh_check(mesh, "the mesh"));
  if (tpdp_mesh_size(mesh) <= 0 || tpdp_mesh_ndim(mesh) <= 0)
    return TPDP_ERR(TPDP_ERR_MESH_SIZE, "mesh has size %lld (%d dims)",
                    (long long)tpdp_mesh_size(mesh), tpdp_mesh_ndim(mesh));
  if (ndim < 0 || ndim > TPDP_MAX_DIMS)
    return TPDP_ERR(TPDP_ERR_TOO_MANY_DIMS, "tensor ndim %d outside [0, %d]",
                    ndim, TPDP_MAX_DIMS);
  if (ndim > 0) CHECK_PTR(global_shape);
  for (int d = 0; d < ndim; d++)
    if (global_shape[d] < 0)
      return TPDP_ERR(TPDP_ERR_BAD_DIM_SIZE,
                      "global shape dim %d is %lld (sizes must be >= 0)", d,
                      (long long)global_shape[d]);
  if (tpdp_dtype_size(dtype) == 0)
    return TPDP_ERR(TPDP_ERR_DTYPE_MISMATCH, "invalid dtype %d", (int)dtype);
  /* The global strides, offsets and byte sizes below stay exact int64. */
  CHECK(core_check_shape_bytes(ndim, global_shape, dtype, "global shape"));
  CHECK(check_placements(mesh, placements, nplacements, ndim, dtype));

  tpdp_spec *s = NULL;
  CHECK(TPDP_CALLOC(s, 1));
  s->magic = TP_SPEC_MAGIC;
  s->mesh = mesh;
  s->mesh_ndim = nplacements;
  for (int m = 0; m < nplacements; m++) {
    s->mesh_sizes[m] = tpdp_mesh_dim_size(mesh, m);
    s->placements[m] = placements[m];
  }
  s->ndim = ndim;
  int64_t stride = 1;
  for (int d = ndim - 1; d >= 0; d--) {
    s->global_shape[d] = global_shape[d];
    s->global_strides[d] = stride;
    stride *= global_shape[d] > 0 ? global_shape[d] : 1;
  }
  s->dtype = dtype;
  s->device = device;
  s->self_rank = tpdp_mesh_rank(mesh) >= 0 ? tpdp_mesh_rank(mesh) : 0;
  tpdp_status st =
      tpdp_spec_local_shape(s, s->self_rank, s->self_shape, s->self_offset);
  if (st != TPDP_SUCCESS) {
    free(s);
    return st;
  }
  /* The mesh refuses to go while the spec lives (comm/services.h). */
  comm_mesh_hold(mesh, COMM_MESH_SPEC);
  *out = s;
  return TPDP_SUCCESS;
}

tpdp_status tpdp_spec_with_placements(const tpdp_spec *spec,
                                      const tpdp_placement *placements,
                                      int nplacements, tpdp_spec **out) {
  TPDP_API_ENTRY;
  CHECK(tp_spec_check(spec, "spec"));
  return tpdp_spec_create(spec->mesh, placements, nplacements, spec->ndim,
                          spec->global_shape, spec->dtype, spec->device, out);
}

tpdp_status tpdp_spec_destroy(tpdp_spec *spec) {
  TPDP_API_ENTRY;
  if (spec == NULL) return TPDP_SUCCESS;
  CHECK(tp_spec_check(spec, "spec"));
  comm_mesh_release(spec->mesh, COMM_MESH_SPEC);
  spec->magic = 0;
  free(spec);
  return TPDP_SUCCESS;
}

const tpdp_mesh *tpdp_spec_mesh(const tpdp_spec *s) {
  return s ? s->mesh : NULL;
}
int tpdp_spec_ndim(const tpdp_spec *s) { return s ? s->ndim : -1; }
const int64_t *tpdp_spec_global_shape(const tpdp_spec *s) {
  return s ? s->global_shape : NULL;
}
const int64_t *tpdp_spec_global_strides(const tpdp_spec *s) {
  return s ? s->global_strides : NULL;
}
tpdp_dtype tpdp_spec_dtype(const tpdp_spec *s) {
  return s ? s->dtype : TPDP_F32;
}
tpdp_device tpdp_spec_device(const tpdp_spec *s) {
  tpdp_device cpu = {TPDP_DEVICE_CPU, 0};
  return s ? s->device : cpu;
}
const tpdp_placement *tpdp_spec_placements(const tpdp_spec *s) {
  return s ? s->placements : NULL;
}
int tpdp_spec_self_rank(const tpdp_spec *s) { return s ? s->self_rank : -1; }

int tpdp_spec_equal(const tpdp_spec *a, const tpdp_spec *b) {
  if (a == b) return 1;
  if (a == NULL || b == NULL) return 0;
  if (!tpdp_mesh_equal(a->mesh, b->mesh) || a->mesh_ndim != b->mesh_ndim ||
      a->ndim != b->ndim || a->dtype != b->dtype ||
      a->device.type != b->device.type)
    return 0;
  for (int m = 0; m < a->mesh_ndim; m++)
    if (!tpdp_placement_equal(a->placements[m], b->placements[m])) return 0;
  for (int d = 0; d < a->ndim; d++)
    if (a->global_shape[d] != b->global_shape[d]) return 0;
  return 1;
}

tpdp_status tpdp_spec_local_shape(const tpdp_spec *spec, int rank,
                                  int64_t *local_shape,
                                  int64_t *global_offset) {
  TPDP_API_ENTRY;
  CHECK(tp_spec_check(spec, "spec"));
  CHECK_PTR(local_shape);
  int64_t size = tpdp_mesh_size(spec->mesh);
  if (rank < 0 || rank >= size)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "rank %d outside [0, %lld) of the spec's mesh", rank,
                    (long long)size);
  int64_t coords[TPDP_MAX_DIMS];
  CHECK(tpdp_mesh_coords(spec->mesh, rank, coords));
  int64_t offset[TPDP_MAX_DIMS];
  tp_local_shape(spec->mesh_ndim, spec->mesh_sizes, coords, spec->placements,
                 spec->ndim, spec->global_shape, local_shape, offset);
  if (global_offset)
    for (int d = 0; d < spec->ndim; d++) global_offset[d] = offset[d];
  return TPDP_SUCCESS;
}

tpdp_status tpdp_param_global_box(const tpdp_param *p, int *ndim,
                                  int64_t *shape, int64_t *offset,
                                  int64_t *global_shape) {
  TPDP_API_ENTRY;
  CHECK_PTR(p);
  const tpdp_tensor *t = tpdp_param_tensor(p);
  const tpdp_spec *spec = (const tpdp_spec *)tpdp_param_spec(p);
  int64_t off[TPDP_MAX_DIMS] = {0}, whole[TPDP_MAX_DIMS];
  for (int d = 0; d < t->ndim; d++) whole[d] = t->shape[d];
  int64_t row0 = 0, total = 0;
  int sharded = tpdp_param_row_shard(p, &row0, &total);
  if (sharded) whole[0] = total;
  if (spec != NULL) {
    int64_t local[TPDP_MAX_DIMS];
    CHECK(tpdp_spec_local_shape(spec, tpdp_spec_self_rank(spec), local, off));
    for (int d = 0; d < spec->ndim; d++) whole[d] = spec->global_shape[d];
  }
  off[0] += sharded ? row0 : 0;
  if (ndim) *ndim = t->ndim;
  for (int d = 0; d < t->ndim; d++) {
    if (shape) shape[d] = t->shape[d];
    if (offset) offset[d] = off[d];
    if (global_shape) global_shape[d] = whole[d];
  }
  return TPDP_SUCCESS;
}

/* ------------------------------------------------------------ DTensor */

tpdp_status tpdp_dtensor_flatten(const tpdp_dtensor *dt, tpdp_tensor *local,
                                 const tpdp_spec **spec) {
  TPDP_API_ENTRY;
  CHECK_PTR(dt);
  CHECK_PTR(local);
  CHECK_PTR(spec);
  *local = dt->local;
  *spec = dt->spec;
  return TPDP_SUCCESS;
}

tpdp_status tpdp_dtensor_unflatten(const tpdp_tensor *local,
                                   const tpdp_spec *spec, tpdp_dtensor *out) {
  TPDP_API_ENTRY;
  CHECK_PTR(local);
  CHECK(tp_spec_check(spec, "spec"));
  CHECK_PTR(out);
  char want[128], got[128];
  if (core_shapes_differ(spec->ndim, spec->self_shape, local->ndim,
                         local->shape, want, got, sizeof want))
    return TPDP_ERR(TPDP_ERR_SHAPE_MISMATCH,
                    "local tensor has shape %s but the spec gives mesh rank "
                    "%d the local shape %s",
                    got, spec->self_rank, want);
  if (local->dtype != spec->dtype)
    return TPDP_ERR(TPDP_ERR_DTYPE_MISMATCH,
                    "local tensor has dtype %s but the spec says %s",
                    tpdp_dtype_name(local->dtype),
                    tpdp_dtype_name(spec->dtype));
  if (core_device_types_differ(spec->device, local->device, want, got,
                               sizeof want))
    return TPDP_ERR(TPDP_ERR_DEVICE_MISMATCH,
                    "local tensor is on %s but the spec says %s", got, want);
  out->local = *local;
  out->spec = spec;
  return TPDP_SUCCESS;
}

void tpdp_dtensor_free_local(tpdp_dtensor *dt) {
  if (dt == NULL) return;
  /* host memory from malloc, or device memory from cudaMalloc; a void
   * function: a failing cudaFree has no one to report to */
  (void)core_mem_free(dt->local.device, dt->local.data);
  dt->local.data = NULL;
}
