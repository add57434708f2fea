// SPDX-License-Identifier: BSD-3-Clause
/* Tensor views: shape helpers, narrow, copy, DLPack interop, f16/bf16. */
#include <stdio.h>
#include <string.h>

#include "core/check.h"
#include "core/half.h"
#ifdef TPDP_WITH_CUDA
#include "core/tensor_cuda.h"
#endif

static const size_t dtype_sizes[TPDP_DTYPE_COUNT] = {4, 8, 2, 2, 4, 8, 1};
static const char *const dtype_names[TPDP_DTYPE_COUNT] = {
    "f32", "f64", "f16", "bf16", "i32", "i64", "u8"};

size_t tpdp_dtype_size(tpdp_dtype dtype) {
  if ((int)dtype < 0 || dtype >= TPDP_DTYPE_COUNT) return 0;
  return dtype_sizes[dtype];
}

const char *tpdp_dtype_name(tpdp_dtype dtype) {
  return core_name_at(dtype_names, TPDP_DTYPE_COUNT, (int)dtype);
}

tpdp_status core_name_parse(const char *const *names, int n, const char *text,
                            const char *what, int *out) {
  int i = core_name_find(names, n, text);
  if (i >= 0) {
    *out = i;
    return TPDP_SUCCESS;
  }
  char list[256] = "";
  size_t used = 0;
  for (int k = 0; k < n && used < sizeof list; k++)
    used += (size_t)snprintf(list + used, sizeof list - used, "%s%s",
                             k == 0       ? ""
                             : k == n - 1 ? " or "
                                          : ", ",
                             names[k]);
  return TPDP_ERR(TPDP_ERR_PARSE, "unknown %s '%s' (expected %s)", what, text,
                  list);
}

tpdp_status tpdp_dtype_parse(const char *name, tpdp_dtype *out) {
  TPDP_API_ENTRY;
  CHECK_PTR(name);
  CHECK_PTR(out);
  int i = 0;
  CHECK(core_name_parse(dtype_names, TPDP_DTYPE_COUNT, name, "dtype", &i));
  *out = (tpdp_dtype)i;
  return TPDP_SUCCESS;
}

int tpdp_dtype_is_float(tpdp_dtype dtype) {
  return dtype == TPDP_F32 || dtype == TPDP_F64 || dtype == TPDP_F16 ||
         dtype == TPDP_BF16;
}

void tpdp_device_format(tpdp_device device, char *buf, size_t len) {
  if (len == 0) return;
  if (device.type == TPDP_DEVICE_CPU)
    snprintf(buf, len, "cpu");
  else
    snprintf(buf, len, "cuda:%d", device.index);
}

int tpdp_device_equal(tpdp_device a, tpdp_device b) {
  if (a.type != b.type) return 0;
  return a.type == TPDP_DEVICE_CPU || a.index == b.index;
}

tpdp_status tpdp_tensor_init(tpdp_tensor *out, void *data, tpdp_dtype dtype,
                             tpdp_device device, int ndim,
                             const int64_t *shape) {
  TPDP_API_ENTRY;
  CHECK_PTR(out);
  if (ndim < 0 || ndim > TPDP_MAX_DIMS)
    return TPDP_ERR(TPDP_ERR_TOO_MANY_DIMS, "ndim %d outside [0, %d]", ndim,
                    TPDP_MAX_DIMS);
  if (ndim > 0 && shape == NULL)
    return TPDP_ERR(TPDP_ERR_NULL_POINTER, "argument 'shape' is NULL");
  if (tpdp_dtype_size(dtype) == 0)
    return TPDP_ERR(TPDP_ERR_DTYPE_MISMATCH, "invalid dtype %d", (int)dtype);
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 0)
      return TPDP_ERR(TPDP_ERR_BAD_DIM_SIZE, "shape[%d] = %lld is negative", i,
                      (long long)shape[i]);
  }
  /* Refused here, so that numel, nbytes, strides and offsets of every view
   * made by init are exact int64 values. */
  CHECK(core_check_shape_bytes(ndim, shape, dtype, "shape"));
  tpdp_tensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.ndim = ndim;
  int64_t stride = 1;
  for (int i = ndim - 1; i >= 0; i--) {
    t.shape[i] = shape[i];
    t.strides[i] = stride;
    stride *= shape[i] > 0 ? shape[i] : 1;
  }
  *out = t;
  return TPDP_SUCCESS;
}

tpdp_tensor tpdp_tensor_1d(void *data, tpdp_dtype dtype, int64_t count) {
  tpdp_tensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = dtype;
  t.device.type = TPDP_DEVICE_CPU;
  t.ndim = 1;
  t.shape[0] = count;
  t.strides[0] = 1;
  return t;
}

int core_shape_size(int ndim, const int64_t *shape, size_t elem_size,
                    int64_t *numel) {
  for (int i = 0; i < ndim; i++)
    if (shape[i] < 0) return -1;
  int64_t count = 1, bytes;
  int zero = 0;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] == 0)
      zero = 1;
    else if (__builtin_mul_overflow(count, shape[i], &count))
      return -2;
  }
  if (elem_size > (size_t)INT64_MAX ||
      __builtin_mul_overflow(count, (int64_t)elem_size, &bytes))
    return -2;
  if (numel != NULL) *numel = zero ? 0 : count;
  return 0;
}

tpdp_status core_check_shape_bytes(int ndim, const int64_t *shape,
                                   tpdp_dtype dtype, const char *what) {
  if (core_shape_size(ndim, shape, tpdp_dtype_size(dtype), NULL) == 0)
    return TPDP_SUCCESS;
  char s[TPDP_MAX_DIMS * 24];
  tpdp_shape_format(ndim, shape, s, sizeof s);
  return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                  "%s %s of %s overflows: its size in bytes (the product of "
                  "its non-zero sizes times %zu) is above INT64_MAX",
                  what, s, tpdp_dtype_name(dtype), tpdp_dtype_size(dtype));
}

int core_shapes_differ(int ndim_a, const int64_t *a, int ndim_b,
                       const int64_t *b, char *a_s, char *b_s, size_t len) {
  int same = ndim_a == ndim_b;
  for (int d = 0; same && d < ndim_a; d++) same = a[d] == b[d];
  if (same) return 0;
  tpdp_shape_format(ndim_a, a, a_s, len);
  tpdp_shape_format(ndim_b, b, b_s, len);
  return 1;
}

int core_device_types_differ(tpdp_device a, tpdp_device b, char *a_s, char *b_s,
                             size_t len) {
  if (a.type == b.type) return 0;
  tpdp_device_format(a, a_s, len);
  tpdp_device_format(b, b_s, len);
  return 1;
}

int64_t tpdp_tensor_numel(const tpdp_tensor *t) {
  /* A view with a corrupt ndim has no elements we could safely name. */
  if (t == NULL || t->ndim < 0 || t->ndim > TPDP_MAX_DIMS) return 0;
  int64_t n = 0;
  return core_shape_size(t->ndim, t->shape, 1, &n) == 0 ? n : -1;
}

size_t tpdp_tensor_nbytes(const tpdp_tensor *t) {
  if (t == NULL || t->ndim < 0 || t->ndim > TPDP_MAX_DIMS) return 0;
  size_t es = tpdp_dtype_size(t->dtype);
  int64_t n = 0;
  if (core_shape_size(t->ndim, t->shape, es, &n) != 0) return 0;
  return (size_t)n * es;
}

int tpdp_tensor_is_contiguous(const tpdp_tensor *t) {
  if (t == NULL || t->ndim < 0 || t->ndim > TPDP_MAX_DIMS) return 0;
  if (tpdp_tensor_numel(t) == 0) return 1;
  int64_t expected = 1;
  for (int i = t->ndim - 1; i >= 0; i--) {
    if (t->shape[i] != 1 && t->strides[i] != expected) return 0;
    expected *= t->shape[i];
  }
  return 1;
}

int tpdp_tensor_same_shape(const tpdp_tensor *a, const tpdp_tensor *b) {
  if (a == NULL || b == NULL || a->ndim != b->ndim) return 0;
  if (a->ndim < 0 || a->ndim > TPDP_MAX_DIMS) return 0;
  for (int i = 0; i < a->ndim; i++)
    if (a->shape[i] != b->shape[i]) return 0;
  return 1;
}

void tpdp_shape_format(int ndim, const int64_t *shape, char *buf, size_t len) {
  if (buf == NULL || len == 0) return;
  if (shape == NULL) ndim = 0;
  size_t used = 0;
  buf[0] = '\0';
  int n = snprintf(buf, len, "[");
  if (n > 0) used = (size_t)n;
  for (int i = 0; i < ndim && used < len; i++) {
    n = snprintf(buf + used, len - used, i ? ", %lld" : "%lld",
                 (long long)shape[i]);
    if (n < 0) return;
    used += (size_t)n;
  }
  if (used < len) snprintf(buf + used, len - used, "]");
}

tpdp_status tpdp_tensor_narrow(const tpdp_tensor *t, int dim, int64_t start,
                               int64_t length, tpdp_tensor *out) {
  TPDP_API_ENTRY;
  CHECK_PTR(t);
  CHECK_PTR(out);
  if (t->ndim < 0 || t->ndim > TPDP_MAX_DIMS)
    return TPDP_ERR(TPDP_ERR_TOO_MANY_DIMS, "tensor ndim %d outside [0, %d]",
                    t->ndim, TPDP_MAX_DIMS);
  if (dim < 0 || dim >= t->ndim)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "dim %d outside [0, %d) of a %d-d tensor", dim, t->ndim,
                    t->ndim);
  if (start < 0 || length < 0 || start > t->shape[dim] ||
      length > t->shape[dim] - start)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "start %lld length %lld outside [0, %lld] of dim %d",
                    (long long)start, (long long)length,
                    (long long)t->shape[dim], dim);
  tpdp_tensor v = *t;
  v.shape[dim] = length;
  /* Views from tpdp_tensor_init cannot overflow here; hand-made strides
   * can. */
  int64_t off;
  if (__builtin_mul_overflow(start, t->strides[dim], &off) ||
      __builtin_mul_overflow(off, (int64_t)tpdp_dtype_size(t->dtype), &off))
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "start %lld times stride %lld of dim %d overflows: the "
                    "byte offset is outside int64",
                    (long long)start, (long long)t->strides[dim], dim);
  if (t->data != NULL) v.data = (char *)t->data + off;
  *out = v;
  return TPDP_SUCCESS;
}

/* Recursive strided copy; the innermost dim is a memcpy when both sides are
 * unit-stride there. */
static void copy_rec(char *dst, const char *src, const tpdp_tensor *d,
                     const tpdp_tensor *s, int dim, size_t es) {
  if (dim == d->ndim) {
    memcpy(dst, src, es);
    return;
  }
  int64_t n = d->shape[dim];
  if (dim == d->ndim - 1 && d->strides[dim] == 1 && s->strides[dim] == 1) {
    memcpy(dst, src, (size_t)n * es);
    return;
  }
  for (int64_t i = 0; i < n; i++)
    copy_rec(dst + (size_t)(i * d->strides[dim]) * es,
             src + (size_t)(i * s->strides[dim]) * es, d, s, dim + 1, es);
}

tpdp_status core_check_copy_pair(const tpdp_tensor *dst,
                                 const tpdp_tensor *src) {
  char a[128], b[128];
  if (core_shapes_differ(dst->ndim, dst->shape, src->ndim, src->shape, a, b,
                         sizeof a))
    return TPDP_ERR(TPDP_ERR_SHAPE_MISMATCH, "dst shape %s != src shape %s", a,
                    b);
  if (dst->dtype != src->dtype)
    return TPDP_ERR(TPDP_ERR_DTYPE_MISMATCH, "dst dtype %s != src dtype %s",
                    tpdp_dtype_name(dst->dtype), tpdp_dtype_name(src->dtype));
  return TPDP_SUCCESS;
}

tpdp_status tpdp_tensor_copy(tpdp_tensor *dst, const tpdp_tensor *src) {
  TPDP_API_ENTRY;
  CHECK_PTR(dst);
  CHECK_PTR(src);
  if (dst->ndim < 0 || dst->ndim > TPDP_MAX_DIMS || src->ndim < 0 ||
      src->ndim > TPDP_MAX_DIMS)
    return TPDP_ERR(TPDP_ERR_TOO_MANY_DIMS,
                    "dst ndim %d / src ndim %d outside [0, %d]", dst->ndim,
                    src->ndim, TPDP_MAX_DIMS);
  CHECK(core_check_copy_pair(dst, src));
  if (dst->device.type != TPDP_DEVICE_CPU ||
      src->device.type != TPDP_DEVICE_CPU)
#ifdef TPDP_WITH_CUDA
    return core_cuda_tensor_copy(dst, src); /* core/tensor_cuda.c */
#else
    return TPDP_ERR(TPDP_ERR_DEVICE_MISMATCH,
                    "device memory needs a build with --config=cuda");
#endif
  if (tpdp_tensor_numel(dst) == 0) return TPDP_SUCCESS;
  if (dst->data == NULL || src->data == NULL)
    return TPDP_ERR(TPDP_ERR_NULL_POINTER, "%s data is NULL with %lld elements",
                    dst->data == NULL ? "dst" : "src",
                    (long long)tpdp_tensor_numel(dst));
  size_t es = tpdp_dtype_size(dst->dtype);
  if (tpdp_tensor_is_contiguous(dst) && tpdp_tensor_is_contiguous(src)) {
    memmove(dst->data, src->data, tpdp_tensor_nbytes(dst));
    return TPDP_SUCCESS;
  }
  copy_rec((char *)dst->data, (const char *)src->data, dst, src, 0, es);
  return TPDP_SUCCESS;
}

/* ----------------------------------------------------------- DLPack */

/* The DLPack type code and bits of each tpdp dtype, both ways. */
static const struct {
  uint8_t code, bits;
} dlpack_dtypes[TPDP_DTYPE_COUNT] = {
    [TPDP_F32] = {kDLFloat, 32}, [TPDP_F64] = {kDLFloat, 64},
    [TPDP_F16] = {kDLFloat, 16}, [TPDP_BF16] = {kDLBfloat, 16},
    [TPDP_I32] = {kDLInt, 32},   [TPDP_I64] = {kDLInt, 64},
    [TPDP_U8] = {kDLUInt, 8}};

tpdp_status tpdp_tensor_to_dlpack(const tpdp_tensor *t, DLTensor *out) {
  TPDP_API_ENTRY;
  CHECK_PTR(t);
  CHECK_PTR(out);
  if (tpdp_dtype_size(t->dtype) == 0)
    return TPDP_ERR(TPDP_ERR_DTYPE_MISMATCH, "invalid dtype %d", (int)t->dtype);
  if (t->ndim < 0 || t->ndim > TPDP_MAX_DIMS)
    return TPDP_ERR(TPDP_ERR_TOO_MANY_DIMS, "tensor ndim %d outside [0, %d]",
                    t->ndim, TPDP_MAX_DIMS);
  memset(out, 0, sizeof *out);
  out->data = t->data;
  out->device.device_type =
      t->device.type == TPDP_DEVICE_CUDA ? kDLCUDA : kDLCPU;
  out->device.device_id =
      t->device.type == TPDP_DEVICE_CUDA ? t->device.index : 0;
  out->ndim = t->ndim;
  out->dtype.code = dlpack_dtypes[t->dtype].code;
  out->dtype.bits = dlpack_dtypes[t->dtype].bits;
  out->dtype.lanes = 1;
  /* DLTensor's fields are non-const; the view promises not to write. */
  out->shape = (int64_t *)t->shape;
  out->strides = (int64_t *)t->strides;
  out->byte_offset = 0;
  return TPDP_SUCCESS;
}

/* 1 if every element of a strided view (strides in elements, any sign)
 * lies at a byte offset from its first that fits in int64. */
static int strides_fit(int ndim, const int64_t *shape, const int64_t *strides,
                       size_t es) {
  for (int i = 0; i < ndim; i++)
    if (shape[i] == 0) return 1; /* no element at all */
  int64_t lo = 0, hi = 0, step, bytes;
  for (int i = 0; i < ndim; i++) {
    if (__builtin_mul_overflow(shape[i] - 1, strides[i], &step)) return 0;
    int64_t *end = step < 0 ? &lo : &hi; /* furthest back / forward */
    if (__builtin_add_overflow(*end, step, end)) return 0;
  }
  return !__builtin_mul_overflow(lo, (int64_t)es, &bytes) &&
         !__builtin_mul_overflow(hi, (int64_t)es, &bytes);
}

tpdp_status tpdp_tensor_from_dlpack(const DLTensor *in, tpdp_tensor *out) {
  TPDP_API_ENTRY;
  CHECK_PTR(in);
  CHECK_PTR(out);
  int bits = in->dtype.bits;
  if (in->dtype.lanes != 1)
    return TPDP_ERR(TPDP_ERR_DTYPE_MISMATCH,
                    "DLPack dtype has %d lanes; "
                    "tpdp takes 1",
                    in->dtype.lanes);
  int d = 0;
  while (d < TPDP_DTYPE_COUNT && (dlpack_dtypes[d].code != in->dtype.code ||
                                  dlpack_dtypes[d].bits != bits))
    d++;
  if (d == TPDP_DTYPE_COUNT)
    return TPDP_ERR(TPDP_ERR_DTYPE_MISMATCH,
                    "DLPack dtype code %d bits %d has no tpdp dtype",
                    in->dtype.code, bits);
  tpdp_dtype dtype = (tpdp_dtype)d;
  tpdp_device device = {TPDP_DEVICE_CPU, 0};
  if (in->device.device_type == kDLCUDA) {
    device.type = TPDP_DEVICE_CUDA;
    device.index = in->device.device_id;
  } else if (in->device.device_type != kDLCPU) {
    return TPDP_ERR(TPDP_ERR_DEVICE_MISMATCH,
                    "DLPack device type %d is not cpu or cuda",
                    (int)in->device.device_type);
  }
  if (in->ndim < 0 || in->ndim > TPDP_MAX_DIMS)
    return TPDP_ERR(TPDP_ERR_TOO_MANY_DIMS, "DLPack ndim %d outside [0, %d]",
                    in->ndim, TPDP_MAX_DIMS);
  if (in->ndim > 0 && in->shape == NULL)
    return TPDP_ERR(TPDP_ERR_NULL_POINTER, "DLPack shape is NULL");
  size_t es = tpdp_dtype_size(dtype);
  if (in->byte_offset % es != 0)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "DLPack byte_offset %llu is not a multiple of %zu",
                    (unsigned long long)in->byte_offset, es);
  tpdp_tensor t;
  void *data = in->data ? (char *)in->data + in->byte_offset : NULL;
  CHECK(tpdp_tensor_init(&t, data, dtype, device, in->ndim, in->shape));
  if (in->strides != NULL) {
    if (!strides_fit(in->ndim, in->shape, in->strides, es)) {
      char sh[TPDP_MAX_DIMS * 24], st[TPDP_MAX_DIMS * 24];
      tpdp_shape_format(in->ndim, in->shape, sh, sizeof sh);
      tpdp_shape_format(in->ndim, in->strides, st, sizeof st);
      return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                      "DLPack strides %s of shape %s overflow: an element's "
                      "byte offset is outside int64",
                      st, sh);
    }
    for (int i = 0; i < in->ndim; i++) t.strides[i] = in->strides[i];
  }
  *out = t;
  return TPDP_SUCCESS;
}

/* ------------------------------------------------- half precision */

/* A float's bits and back. */
static float f32_from_bits(uint32_t bits) {
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}
static uint32_t f32_bits(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  return x;
}

float tpdp_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else { /* subnormal: normalise */
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        exp--;
      }
      mant &= 0x3ffu;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  return f32_from_bits(bits);
}

uint16_t tpdp_f32_to_f16(float f) {
  uint32_t x = f32_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t exp = (x >> 23) & 0xffu;
  uint32_t mant = x & 0x7fffffu;
  if (exp == 0xff) /* inf or nan (keep a quiet nan) */
    return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u : 0));
  int e = (int)exp - 127 + 15;
  if (e >= 0x1f) return (uint16_t)(sign | 0x7c00u); /* overflow -> inf */
  if (e <= 0) {                                     /* subnormal or zero */
    if (e < -10) return (uint16_t)sign;
    mant |= 0x800000u;
    int shift = 14 - e;
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u))) half++;
    return (uint16_t)(sign | half);
  }
  uint32_t half = sign | ((uint32_t)e << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) half++;
  return (uint16_t)half; /* a carry into the exponent rounds up correctly */
}

float tpdp_bf16_to_f32(uint16_t b) { return core_bf16_to_f32(b); }

uint16_t tpdp_f32_to_bf16(float f) { return core_f32_to_bf16(f); }

/* Loops of one conversion each, so that the bf16 ones vectorize. */
static void to_f32(float *d, const uint16_t *s, tpdp_dtype sd, int64_t n) {
  if (sd == TPDP_BF16)
    for (int64_t k = 0; k < n; k++) d[k] = core_bf16_to_f32(s[k]);
  else
    for (int64_t k = 0; k < n; k++) d[k] = tpdp_f16_to_f32(s[k]);
}

static void from_f32(uint16_t *d, tpdp_dtype dd, const float *s, int64_t n) {
  if (dd == TPDP_BF16)
    for (int64_t k = 0; k < n; k++) d[k] = core_f32_to_bf16(s[k]);
  else
    for (int64_t k = 0; k < n; k++) d[k] = tpdp_f32_to_f16(s[k]);
}

static int is_f32_or_half(tpdp_dtype dt) {
  return dt == TPDP_F32 || dt == TPDP_BF16 || dt == TPDP_F16;
}

tpdp_status tpdp_convert_floats(void *dst, tpdp_dtype dst_dtype,
                                const void *src, tpdp_dtype src_dtype,
                                int64_t n) {
  TPDP_API_ENTRY;
  if (n < 0)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT, "negative count %lld",
                    (long long)n);
  if (n == 0) return TPDP_SUCCESS;
  CHECK_PTR(dst);
  CHECK_PTR(src);
  if (!is_f32_or_half(dst_dtype) || !is_f32_or_half(src_dtype))
    return TPDP_ERR(TPDP_ERR_DTYPE_MISMATCH,
                    "tpdp_convert_floats converts between f32, bf16 and f16, "
                    "not %s to %s",
                    tpdp_dtype_name(src_dtype), tpdp_dtype_name(dst_dtype));
  if (dst_dtype == src_dtype) {
    memmove(dst, src, (size_t)n * tpdp_dtype_size(dst_dtype));
  } else if (dst_dtype == TPDP_F32) {
    to_f32(dst, src, src_dtype, n);
  } else if (src_dtype == TPDP_F32) {
    from_f32(dst, dst_dtype, src, n);
  } else { /* bf16 <-> f16 through f32, a block at a time */
    float tmp[1024];
    for (int64_t k = 0; k < n; k += 1024) {
      int64_t m = n - k < 1024 ? n - k : 1024;
      to_f32(tmp, (const uint16_t *)src + k, src_dtype, m);
      from_f32((uint16_t *)dst + k, dst_dtype, tmp, m);
    }
  }
  return TPDP_SUCCESS;
}
