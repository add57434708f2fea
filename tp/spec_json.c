// SPDX-License-Identifier: BSD-3-Clause
/* The spec's JSON form (the text checkpoints carry): writing it with
 * core/util.h's string builder and JSON escaping, parsing it with cJSON. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "tp/tp_internal.h"

/* ------------------------------------------------------------ writing */

static void sb_i64_array(core_strbuf *b, int n, const int64_t *v) {
  core_sb_append(b, "[", 1);
  for (int i = 0; i < n; i++)
    core_sb_printf(b, "%s%lld", i ? "," : "", (long long)v[i]);
  core_sb_append(b, "]", 1);
}

/* The JSON of spec into *b (b->failed set when memory is short). */
static void spec_json(const tpdp_spec *spec, core_strbuf *b) {
  core_sb_puts(b, "{\"mesh\":{\"shape\":");
  sb_i64_array(b, spec->mesh_ndim, spec->mesh_sizes);
  core_sb_puts(b, ",\"names\":[");
  for (int m = 0; m < spec->mesh_ndim; m++) {
    if (m) core_sb_append(b, ",", 1);
    core_sb_json_string(b, tpdp_mesh_dim_name(spec->mesh, m));
  }
  core_sb_puts(b, "]},\"placements\":[");
  for (int m = 0; m < spec->mesh_ndim; m++) {
    char p[16];
    tpdp_placement_format(spec->placements[m], p, sizeof p);
    if (m) core_sb_append(b, ",", 1);
    core_sb_json_string(b, p);
  }
  core_sb_puts(b, "],\"shape\":");
  sb_i64_array(b, spec->ndim, spec->global_shape);
  core_sb_puts(b, ",\"stride\":");
  sb_i64_array(b, spec->ndim, spec->global_strides);
  core_sb_puts(b, ",\"dtype\":");
  core_sb_json_string(b, tpdp_dtype_name(spec->dtype));
  char dev[32];
  tpdp_device_format(spec->device, dev, sizeof dev);
  core_sb_puts(b, ",\"device\":");
  core_sb_json_string(b, dev);
  core_sb_append(b, "}", 1);
}

static tpdp_status build_json(const tpdp_spec *spec, core_strbuf *b) {
  spec_json(spec, b);
  if (b->failed) {
    core_sb_free(b);
    return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY,
                    "out of memory writing the spec's JSON");
  }
  return TPDP_SUCCESS;
}

tpdp_status tpdp_spec_to_json(const tpdp_spec *spec, char *buf, size_t len,
                              size_t *needed) {
  TPDP_API_ENTRY;
  CHECK_PTR(spec);
  if (buf == NULL && len != 0)
    return TPDP_ERR(TPDP_ERR_NULL_POINTER,
                    "buf is NULL but len is %zu (use len 0 to query)", len);
  core_strbuf b = {0};
  CHECK(build_json(spec, &b));
  if (needed) *needed = b.len + 1;
  tpdp_status st = TPDP_SUCCESS;
  if (buf != NULL && b.len + 1 > len) {
    if (len > 0) buf[0] = '\0';
    st = TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                  "buffer of %zu bytes too small for the spec's JSON (needs "
                  "%zu)",
                  len, b.len + 1);
  } else if (buf != NULL) {
    memcpy(buf, b.s, b.len + 1);
  }
  core_sb_free(&b);
  return st;
}

tpdp_status tpdp_spec_to_json_alloc(const tpdp_spec *spec, char **out) {
  TPDP_API_ENTRY;
  CHECK_PTR(out);
  *out = NULL;
  CHECK_PTR(spec);
  core_strbuf b = {0};
  CHECK(build_json(spec, &b));
  *out = b.s; /* malloc'd by core_sb_append: the caller frees it */
  return TPDP_SUCCESS;
}

/* ------------------------------------------------------------ parsing */

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
    /* Range first: converting a double outside int64's range is undefined
     * behaviour (found by tests/fuzz/spec_json_fuzz). */
    if (!cJSON_IsNumber(item) || !(v >= 0 && v <= 9007199254740992.0) ||
        v != (double)(int64_t)v)
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
  /* Its strides are written back as JSON numbers, exact only up to 2^53
   * (found by tests/fuzz/spec_json_fuzz: a spec that could not be read
   * back). A shape beyond int64 gets tpdp_spec_create's message. */
  int64_t span = 1; /* the largest stride is below the non-zero product */
  int wraps = 0;
  for (int d = 0; d < ndim; d++)
    if (shape[d] > 0 && __builtin_mul_overflow(span, shape[d], &span))
      wraps = 1;
  if (!wraps && span > 9007199254740992LL)
    return TPDP_ERR(TPDP_ERR_PARSE,
                    "spec JSON: 'shape' spans more than 2^53 elements, "
                    "beyond the integers JSON numbers carry exactly");
  const cJSON *jstride = cJSON_GetObjectItemCaseSensitive(root, "stride");
  if (jstride != NULL) {
    int ns = 0;
    int64_t strides[TPDP_MAX_DIMS];
    CHECK(json_i64_array(jstride, "stride", TPDP_MAX_DIMS, &ns, strides));
    int64_t expect = 1;
    int ok = ns == ndim;
    for (int d = ndim - 1; ok && d >= 0; d--) {
      ok = strides[d] == expect || shape[d] <= 1;
      /* On overflow tpdp_spec_create refuses the shape, naming it. */
      if (shape[d] > 1 && __builtin_mul_overflow(expect, shape[d], &expect))
        break;
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
