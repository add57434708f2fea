// SPDX-License-Identifier: BSD-3-Clause
/* Small helpers of ckpt/: safetensors dtype names, element conversion
 * between floating dtypes, overflow-checked shape arithmetic, sorted name
 * lookup, and JSON integers. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt_internal.h"

static const char *const st_names[TPDP_DTYPE_COUNT] = {
    [TPDP_F32] = "F32",   [TPDP_F64] = "F64", [TPDP_F16] = "F16",
    [TPDP_BF16] = "BF16", [TPDP_I32] = "I32", [TPDP_I64] = "I64",
    [TPDP_U8] = "U8"};

/* Valid safetensors dtypes that tpdp has no dtype for, and their element
 * sizes in bytes (0: sub-byte, packed). */
static const char *const st_unsupported[] = {
    "BOOL",    "I8",      "I16", "U16",     "U32",     "U64", "F8_E4M3",
    "F8_E5M2", "F8_E8M0", "F4",  "F6_E2M3", "F6_E3M2", "C64"};
static const int st_unsupported_size[] = {1, 1, 2, 2, 4, 8, 1,
                                          1, 1, 0, 0, 0, 8};

const char *ckpt_st_dtype_name(tpdp_dtype dt) {
  return core_name_at(st_names, TPDP_DTYPE_COUNT, (int)dt);
}

int ckpt_st_dtype_parse(const char *name, tpdp_dtype *out) {
  int d = core_name_find(st_names, TPDP_DTYPE_COUNT, name);
  if (d >= 0) {
    *out = (tpdp_dtype)d;
    return 0;
  }
  int nu = (int)(sizeof st_unsupported / sizeof *st_unsupported);
  return core_name_find(st_unsupported, nu, name) >= 0 ? -1 : -2;
}

int ckpt_st_opaque_size(const char *name, const char **canonical) {
  int nu = (int)(sizeof st_unsupported / sizeof *st_unsupported);
  int k = core_name_find(st_unsupported, nu, name);
  if (k < 0 || st_unsupported_size[k] == 0) return 0;
  *canonical = st_unsupported[k];
  return st_unsupported_size[k];
}

int ckpt_dtype_convertible(tpdp_dtype from, tpdp_dtype to) {
  return from == to || (tpdp_dtype_is_float(from) && tpdp_dtype_is_float(to));
}

tpdp_status ckpt_check_read(const char *file, const char *name, tpdp_dtype dt,
                            int ndim, const int64_t *shape,
                            const tpdp_tensor *dst) {
  char a[160], b[160];
  if (core_shapes_differ(ndim, shape, dst->ndim, dst->shape, a, b, sizeof a))
    return TPDP_ERR(TPDP_ERR_SHAPE_MISMATCH,
                    "%s%s%stensor '%s' has %sshape %s but the destination %s",
                    file ? "file '" : "", file ? file : "", file ? "': " : "",
                    name, file ? "" : "global ", a, b);
  return ckpt_check_convert(file, name, dt, dst);
}

tpdp_status ckpt_check_convert(const char *file, const char *name,
                               tpdp_dtype dt, const tpdp_tensor *dst) {
  if (ckpt_dtype_convertible(dt, dst->dtype)) return TPDP_SUCCESS;
  return TPDP_ERR(TPDP_ERR_DTYPE_MISMATCH,
                  "%s%s%stensor '%s' is %s and cannot convert to the "
                  "destination's %s",
                  file ? "file '" : "", file ? file : "", file ? "': " : "",
                  name, ckpt_st_dtype_name(dt), tpdp_dtype_name(dst->dtype));
}

tpdp_status ckpt_check_at(const char *what, int i, int n, const char *of,
                          const char *name) {
  if (i < 0 || i >= n)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "%s %d outside [0, %d) of %s'%s'", what, i, n, of, name);
  return TPDP_SUCCESS;
}

tpdp_status ckpt_check_found(int i, const char *of, const char *name,
                             const char *tensor, int *index) {
  if (i < 0)
    return TPDP_ERR(TPDP_ERR_NOT_FOUND, "%s'%s' has no tensor '%s'", of, name,
                    tensor);
  *index = i;
  return TPDP_SUCCESS;
}

/* Element i of a floating array as a double. */
static double load_f(const void *p, tpdp_dtype dt, int64_t i) {
  switch (dt) {
    case TPDP_F64:
      return ((const double *)p)[i];
    case TPDP_F16:
      return tpdp_f16_to_f32(((const uint16_t *)p)[i]);
    case TPDP_BF16:
      return tpdp_bf16_to_f32(((const uint16_t *)p)[i]);
    default:
      return ((const float *)p)[i];
  }
}

void ckpt_convert(void *dst, tpdp_dtype to, const void *src, tpdp_dtype from,
                  int64_t n) {
  if (to == from) {
    memcpy(dst, src, (size_t)n * tpdp_dtype_size(to));
    return;
  }
  /* Through double: f64 -> f32/f16/bf16 rounds once (f32 to nearest, then
   * f16/bf16 from that f32, as PyTorch's .to() does). One loop per
   * destination dtype: its branch is taken once per call, not once per
   * element of every converted load. */
  double *d64 = dst;
  float *d32 = dst;
  uint16_t *d16 = dst;
  if (to == TPDP_F64)
    for (int64_t i = 0; i < n; i++) d64[i] = load_f(src, from, i);
  else if (to == TPDP_F16)
    for (int64_t i = 0; i < n; i++)
      d16[i] = tpdp_f32_to_f16((float)load_f(src, from, i));
  else if (to == TPDP_BF16)
    for (int64_t i = 0; i < n; i++)
      d16[i] = tpdp_f32_to_bf16((float)load_f(src, from, i));
  else
    for (int64_t i = 0; i < n; i++) d32[i] = (float)load_f(src, from, i);
}

int ckpt_shape_numel(int ndim, const int64_t *shape, int64_t *numel) {
  return core_shape_size(ndim, shape, 1, numel) == 0 ? 0 : -1;
}

int ckpt_shape_nbytes(int ndim, const int64_t *shape, tpdp_dtype dt,
                      uint64_t *nbytes) {
  size_t es = tpdp_dtype_size(dt);
  int64_t n;
  if (es == 0 || core_shape_size(ndim, shape, es, &n) != 0) return -1;
  *nbytes = (uint64_t)n * es;
  return 0;
}

static int by_name(const void *a, const void *b) {
  return strcmp(((const ckpt_name_ix *)a)->name,
                ((const ckpt_name_ix *)b)->name);
}

int ckpt_names_sort(ckpt_name_ix *names, int n) {
  qsort(names, (size_t)n, sizeof *names, by_name);
  for (int i = 1; i < n; i++)
    if (strcmp(names[i].name, names[i - 1].name) == 0) return i;
  return -1;
}

int ckpt_names_find(const ckpt_name_ix *names, int n, const char *name) {
  int lo = 0, hi = n - 1;
  while (lo <= hi) {
    int mid = lo + (hi - lo) / 2;
    int c = strcmp(names[mid].name, name);
    if (c == 0) return names[mid].index;
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid - 1;
  }
  return -1;
}

int ckpt_json_uint(const cJSON *v, uint64_t *out) {
  if (!cJSON_IsNumber(v)) return -1;
  double d = v->valuedouble;
  if (!(d >= 0 && d <= CKPT_MAX_JSON_INT) || d != (double)(uint64_t)d)
    return -1;
  *out = (uint64_t)d;
  return 0;
}

int ckpt_json_dims(const cJSON *a, int n, int64_t *out) {
  for (int d = 0; d < n; d++) {
    uint64_t v;
    if (ckpt_json_uint(cJSON_GetArrayItem(a, d), &v) != 0) return d;
    out[d] = (int64_t)v;
  }
  return -1;
}
