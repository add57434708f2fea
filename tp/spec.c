/* Placements, the sharding spec (local shapes and offsets by the
 * torch.chunk rule), DTensor flatten/unflatten, and the spec's JSON form. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
  int64_t chunk = k > 0 ? (n + k - 1) / k : n;
  int64_t lo = i * chunk;
  if (lo >= n) {
    *size = 0;
    *start = n;
    return;
  }
  int64_t hi = lo + chunk < n ? lo + chunk : n;
  *size = hi - lo;
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
  if (tpdp_mesh_size(mesh) <= 0 || tpdp_mesh_ndim(mesh) <= 0)
    return TPDP_ERR(TPDP_ERR_MESH_SIZE, "mesh has size %lld (%d dims)",
                    (long long)tpdp_mesh_size(mesh), tpdp_mesh_ndim(mesh));
  if (ndim < 0 || ndim > TPDP_MAX_DIMS)
    return TPDP_ERR(TPDP_ERR_TOO_MANY_DIMS, "tensor ndim %d outside [0, %d]",
                    ndim, TPDP_MAX_DIMS);
  if (ndim > 0) CHECK_PTR(global_shape);
  for (int d = 0; d < ndim; d++)
    if (global_shape[d] < 0)
      return TPDP_ERR(TPDP_ERR_BAD_DIM_SIZE, "global shape dim %d is %lld", d,
                      (long long)global_shape[d]);
  if (tpdp_dtype_size(dtype) == 0)
    return TPDP_ERR(TPDP_ERR_DTYPE_MISMATCH, "invalid dtype %d", (int)dtype);
  CHECK(check_placements(mesh, placements, nplacements, ndim, dtype));

  tpdp_spec *s = NULL;
  CHECK(TPDP_CALLOC(s, 1));
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
  *out = s;
  return TPDP_SUCCESS;
}

tpdp_status tpdp_spec_with_placements(const tpdp_spec *spec,
                                      const tpdp_placement *placements,
                                      int nplacements, tpdp_spec **out) {
  TPDP_API_ENTRY;
  CHECK_PTR(spec);
  return tpdp_spec_create(spec->mesh, placements, nplacements, spec->ndim,
                          spec->global_shape, spec->dtype, spec->device, out);
}

void tpdp_spec_destroy(tpdp_spec *spec) { free(spec); }

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
  CHECK_PTR(spec);
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
  CHECK_PTR(spec);
  CHECK_PTR(out);
  int same = local->ndim == spec->ndim;
  for (int d = 0; same && d < spec->ndim; d++)
    same = local->shape[d] == spec->self_shape[d];
  if (!same) {
    char want[128], got[128];
    tpdp_shape_format(spec->ndim, spec->self_shape, want, sizeof want);
    tpdp_shape_format(local->ndim, local->shape, got, sizeof got);
    return TPDP_ERR(TPDP_ERR_SHAPE_MISMATCH,
                    "local tensor has shape %s but the spec gives mesh rank "
                    "%d the local shape %s",
                    got, spec->self_rank, want);
  }
  if (local->dtype != spec->dtype)
    return TPDP_ERR(TPDP_ERR_DTYPE_MISMATCH,
                    "local tensor has dtype %s but the spec says %s",
                    tpdp_dtype_name(local->dtype),
                    tpdp_dtype_name(spec->dtype));
  if (local->device.type != spec->device.type) {
    char want[32], got[32];
    tpdp_device_format(spec->device, want, sizeof want);
    tpdp_device_format(local->device, got, sizeof got);
    return TPDP_ERR(TPDP_ERR_DEVICE_MISMATCH,
                    "local tensor is on %s but the spec says %s", got, want);
  }
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

/* ------------------------------------------------------------ JSON */

typedef struct {
  char *buf;
  size_t len;
  size_t pos; /* bytes that would be written so far (excluding NUL) */
} jw;

static void jw_put(jw *w, const char *s, size_t n) {
  if (w->buf && w->pos < w->len) {
    size_t room = w->len - w->pos;
    size_t k = n < room ? n : room;
    memcpy(w->buf + w->pos, s, k);
  }
  w->pos += n;
}
static void jw_str(jw *w, const char *s) { jw_put(w, s, strlen(s)); }
static void jw_i64(jw *w, int64_t v) {
  char tmp[32];
  int n = snprintf(tmp, sizeof tmp, "%lld", (long long)v);
  jw_put(w, tmp, (size_t)n);
}
static void jw_quoted(jw *w, const char *s) {
  jw_put(w, "\"", 1);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') {
      char e[2] = {'\\', (char)c};
      jw_put(w, e, 2);
    } else if (c < 0x20) {
      char e[8];
      snprintf(e, sizeof e, "\\u%04x", c);
      jw_put(w, e, 6);
    } else {
      jw_put(w, (const char *)&c, 1);
    }
  }
  jw_put(w, "\"", 1);
}
static void jw_i64_array(jw *w, int n, const int64_t *v) {
  jw_put(w, "[", 1);
  for (int i = 0; i < n; i++) {
    if (i) jw_put(w, ",", 1);
    jw_i64(w, v[i]);
  }
  jw_put(w, "]", 1);
}

tpdp_status tpdp_spec_to_json(const tpdp_spec *spec, char *buf, size_t len,
                              size_t *needed) {
  TPDP_API_ENTRY;
  CHECK_PTR(spec);
  if (buf == NULL && len != 0)
    return TPDP_ERR(TPDP_ERR_NULL_POINTER,
                    "buf is NULL but len is %zu (use len 0 to query)", len);
  jw w = {buf, len, 0};
  jw_str(&w, "{\"mesh\":{\"shape\":");
  jw_i64_array(&w, spec->mesh_ndim, spec->mesh_sizes);
  jw_str(&w, ",\"names\":[");
  for (int m = 0; m < spec->mesh_ndim; m++) {
    if (m) jw_put(&w, ",", 1);
    jw_quoted(&w, tpdp_mesh_dim_name(spec->mesh, m));
  }
  jw_str(&w, "]},\"placements\":[");
  for (int m = 0; m < spec->mesh_ndim; m++) {
    char p[16];
    tpdp_placement_format(spec->placements[m], p, sizeof p);
    if (m) jw_put(&w, ",", 1);
    jw_quoted(&w, p);
  }
  jw_str(&w, "],\"shape\":");
  jw_i64_array(&w, spec->ndim, spec->global_shape);
  jw_str(&w, ",\"stride\":");
  jw_i64_array(&w, spec->ndim, spec->global_strides);
  jw_str(&w, ",\"dtype\":");
  jw_quoted(&w, tpdp_dtype_name(spec->dtype));
  char dev[32];
  tpdp_device_format(spec->device, dev, sizeof dev);
  jw_str(&w, ",\"device\":");
  jw_quoted(&w, dev);
  jw_put(&w, "}", 1);
  if (needed) *needed = w.pos + 1;
  if (buf == NULL) return TPDP_SUCCESS;
  if (w.pos + 1 > len) {
    if (len > 0) buf[0] = '\0';
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "buffer of %zu bytes too small for the spec's JSON (needs "
                    "%zu)",
                    len, w.pos + 1);
  }
  buf[w.pos] = '\0';
  return TPDP_SUCCESS;
}

tpdp_status tpdp_spec_to_json_alloc(const tpdp_spec *spec, char **out) {
  TPDP_API_ENTRY;
  CHECK_PTR(out);
  *out = NULL;
  size_t need = 0;
  CHECK(tpdp_spec_to_json(spec, NULL, 0, &need));
  char *s = malloc(need);
  if (s == NULL)
    return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "cannot allocate %zu bytes", need);
  tpdp_status st = tpdp_spec_to_json(spec, s, need, NULL);
  if (st != TPDP_SUCCESS) {
    free(s);
    return st;
  }
  *out = s;
  return TPDP_SUCCESS;
}

static tpdp_status json_i64_array(const cJSON *arr, const char *field, int max,
                                  int *n, int64_t *out) {
  if (!cJSON_IsArray(arr))
    return TPDP_ERR(TPDP_ERR_PARSE, "spec JSON: '%s' missing or not an array",
                    field);
  int count = cJSON_GetArraySize(arr);
  if (count > max)
    return TPDP_ERR(TPDP_ERR_TOO_MANY_DIMS,
                    "spec JSON: '%s' has %d entries (at most %d)", field, count,
                    max);
  int i = 0;
  const cJSON *item;
  cJSON_ArrayForEach(item, arr) {
    double v = cJSON_IsNumber(item) ? item->valuedouble : -1.0;
    if (!cJSON_IsNumber(item) || v != (double)(int64_t)v || v < 0 ||
        v > 9007199254740992.0)
      return TPDP_ERR(TPDP_ERR_PARSE,
                      "spec JSON: '%s'[%d] is not a non-negative integer",
                      field, i);
    out[i++] = (int64_t)v;
  }
  *n = count;
  return TPDP_SUCCESS;
}

static tpdp_status json_string(const cJSON *obj, const char *field,
                               const char **out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, field);
  if (!cJSON_IsString(v) || v->valuestring == NULL)
    return TPDP_ERR(TPDP_ERR_PARSE, "spec JSON: '%s' missing or not a string",
                    field);
  *out = v->valuestring;
  return TPDP_SUCCESS;
}

static tpdp_status parse_device(const char *text, tpdp_device *out) {
  if (strcmp(text, "cpu") == 0) {
    out->type = TPDP_DEVICE_CPU;
    out->index = 0;
    return TPDP_SUCCESS;
  }
  if (strncmp(text, "cuda:", 5) == 0 && text[5] >= '0' && text[5] <= '9') {
    char *end = NULL;
    long idx = strtol(text + 5, &end, 10);
    if (*end == '\0' && idx < 1 << 20) {
      out->type = TPDP_DEVICE_CUDA;
      out->index = (int)idx;
      return TPDP_SUCCESS;
    }
  }
  return TPDP_ERR(TPDP_ERR_PARSE,
                  "spec JSON: device '%s' is not \"cpu\" or \"cuda:N\"", text);
}

static tpdp_status from_json(const tpdp_mesh *mesh, const cJSON *root,
                             tpdp_spec **out) {
  if (!cJSON_IsObject(root))
    return TPDP_ERR(TPDP_ERR_PARSE, "spec JSON is not an object");
  const cJSON *jmesh = cJSON_GetObjectItemCaseSensitive(root, "mesh");
  if (!cJSON_IsObject(jmesh))
    return TPDP_ERR(TPDP_ERR_PARSE,
                    "spec JSON: 'mesh' missing or not an "
                    "object");
  int mesh_ndim = 0;
  int64_t mesh_sizes[TPDP_MAX_DIMS];
  CHECK(json_i64_array(cJSON_GetObjectItemCaseSensitive(jmesh, "shape"),
                       "mesh.shape", TPDP_MAX_DIMS, &mesh_ndim, mesh_sizes));
  int same = mesh_ndim == tpdp_mesh_ndim(mesh);
  for (int m = 0; same && m < mesh_ndim; m++)
    same = mesh_sizes[m] == tpdp_mesh_dim_size(mesh, m);
  if (!same) {
    char want[128], got[128];
    int64_t ms[TPDP_MAX_DIMS];
    int mn = tpdp_mesh_ndim(mesh);
    for (int m = 0; m < mn && m < TPDP_MAX_DIMS; m++)
      ms[m] = tpdp_mesh_dim_size(mesh, m);
    tpdp_shape_format(mn, ms, want, sizeof want);
    tpdp_shape_format(mesh_ndim, mesh_sizes, got, sizeof got);
    return TPDP_ERR(TPDP_ERR_MESH_MISMATCH,
                    "spec JSON is for a mesh of shape %s but the given mesh "
                    "has shape %s",
                    got, want);
  }
  const cJSON *names = cJSON_GetObjectItemCaseSensitive(jmesh, "names");
  if (names != NULL) {
    if (!cJSON_IsArray(names) || cJSON_GetArraySize(names) != mesh_ndim)
      return TPDP_ERR(TPDP_ERR_PARSE,
                      "spec JSON: 'mesh.names' is not an array of %d strings",
                      mesh_ndim);
    for (int m = 0; m < mesh_ndim; m++) {
      const cJSON *nm = cJSON_GetArrayItem(names, m);
      if (!cJSON_IsString(nm))
        return TPDP_ERR(TPDP_ERR_PARSE,
                        "spec JSON: 'mesh.names'[%d] is not a string", m);
      if (strcmp(nm->valuestring, tpdp_mesh_dim_name(mesh, m)) != 0)
        return TPDP_ERR(TPDP_ERR_MESH_MISMATCH,
                        "spec JSON names mesh dim %d '%s' but the given mesh "
                        "calls it '%s'",
                        m, nm->valuestring, tpdp_mesh_dim_name(mesh, m));
    }
  }
  const cJSON *jpl = cJSON_GetObjectItemCaseSensitive(root, "placements");
  if (!cJSON_IsArray(jpl))
    return TPDP_ERR(TPDP_ERR_PARSE,
                    "spec JSON: 'placements' missing or not an array");
  int np = cJSON_GetArraySize(jpl);
  if (np > TPDP_MAX_DIMS)
    return TPDP_ERR(TPDP_ERR_TOO_MANY_DIMS,
                    "spec JSON: %d placements (at most %d)", np, TPDP_MAX_DIMS);
  tpdp_placement pl[TPDP_MAX_DIMS];
  for (int m = 0; m < np; m++) {
    const cJSON *p = cJSON_GetArrayItem(jpl, m);
    if (!cJSON_IsString(p))
      return TPDP_ERR(TPDP_ERR_PARSE,
                      "spec JSON: 'placements'[%d] is not a string", m);
    CHECK(tpdp_placement_parse(p->valuestring, &pl[m]));
  }
  int ndim = 0;
  int64_t shape[TPDP_MAX_DIMS];
  CHECK(json_i64_array(cJSON_GetObjectItemCaseSensitive(root, "shape"), "shape",
                       TPDP_MAX_DIMS, &ndim, shape));
  const cJSON *jstride = cJSON_GetObjectItemCaseSensitive(root, "stride");
  if (jstride != NULL) {
    int ns = 0;
    int64_t strides[TPDP_MAX_DIMS];
    CHECK(json_i64_array(jstride, "stride", TPDP_MAX_DIMS, &ns, strides));
    int64_t expect = 1;
    int ok = ns == ndim;
    for (int d = ndim - 1; ok && d >= 0; d--) {
      ok = strides[d] == expect || shape[d] <= 1;
      expect *= shape[d] > 0 ? shape[d] : 1;
    }
    if (!ok)
      return TPDP_ERR(TPDP_ERR_PARSE,
                      "spec JSON: 'stride' is not the contiguous row-major "
                      "stride of 'shape' (tpdp specs are contiguous)");
  }
  const char *dtype_name = NULL;
  CHECK(json_string(root, "dtype", &dtype_name));
  tpdp_dtype dtype;
  CHECK(tpdp_dtype_parse(dtype_name, &dtype));
  tpdp_device device = {TPDP_DEVICE_CPU, 0};
  if (cJSON_GetObjectItemCaseSensitive(root, "device") != NULL) {
    const char *dev = NULL;
    CHECK(json_string(root, "device", &dev));
    CHECK(parse_device(dev, &device));
  }
  return tpdp_spec_create(mesh, pl, np, ndim, shape, dtype, device, out);
}

tpdp_status tpdp_spec_from_json(const tpdp_mesh *mesh, const char *text,
                                tpdp_spec **out) {
  TPDP_API_ENTRY;
  CHECK_PTR(out);
  *out = NULL;
  CHECK_PTR(mesh);
  CHECK_PTR(text);
  cJSON *root = cJSON_Parse(text);
  if (root == NULL) {
    const char *at = cJSON_GetErrorPtr();
    return TPDP_ERR(TPDP_ERR_PARSE, "spec JSON does not parse near '%.20s'",
                    at ? at : "?");
  }
  tpdp_status st = from_json(mesh, root, out);
  cJSON_Delete(root);
  return st;
}
