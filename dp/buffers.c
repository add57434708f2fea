/* Host implementations of the bucket-memory operations (see buffers.h). */
#include "dp/buffers.h"

#include <stdlib.h>
#include <string.h>

#include "core/check.h"

tpdp_status dp_buf_device_supported(tpdp_device device, const char *what) {
  if (device.type == TPDP_DEVICE_CPU) return TPDP_SUCCESS;
  char dev[32];
  tpdp_device_format(device, dev, sizeof dev);
  return tpdp_set_error(TPDP_ERR_UNSUPPORTED, "tpdp_reducer",
                  "%s is on %s: the reducer's device buffers (allocation, "
                  "casts) are not built in this build; only host (cpu) "
                  "parameters with an MPI communicator are supported",
                  what, dev);
}

tpdp_status dp_buf_alloc(tpdp_device device, size_t bytes, void **out) {
  CHECK(dp_buf_device_supported(device, "bucket buffer"));
  void *p = calloc(bytes ? bytes : 1, 1);
  if (p == NULL)
    return tpdp_set_error(TPDP_ERR_OUT_OF_MEMORY, "tpdp_reducer", "bucket buffer of %zu bytes",
                    bytes);
  *out = p;
  return TPDP_SUCCESS;
}

void dp_buf_free(tpdp_device device, void *p) {
  (void)device;
  free(p);
}

tpdp_status dp_buf_zero(tpdp_device device, void *p, size_t bytes) {
  CHECK(dp_buf_device_supported(device, "bucket buffer"));
  if (bytes) memset(p, 0, bytes);
  return TPDP_SUCCESS;
}

tpdp_status dp_buf_copy(tpdp_device device, void *dst, const void *src,
                        size_t bytes) {
  CHECK(dp_buf_device_supported(device, "bucket buffer"));
  if (bytes && dst != src) memmove(dst, src, bytes);
  return TPDP_SUCCESS;
}

tpdp_status dp_buf_copy_tensor(tpdp_tensor *dst, const tpdp_tensor *src) {
  CHECK(dp_buf_device_supported(dst->device, "gradient"));
  if (dst->data == src->data && tpdp_tensor_is_contiguous(dst) &&
      tpdp_tensor_is_contiguous(src))
    return TPDP_SUCCESS;
  if (tpdp_tensor_is_contiguous(dst) && tpdp_tensor_is_contiguous(src)) {
    size_t n = tpdp_tensor_nbytes(dst);
    if (n) memmove(dst->data, src->data, n);
    return TPDP_SUCCESS;
  }
  return tpdp_tensor_copy(dst, src);
}

static float load_f(tpdp_dtype dt, const void *p, size_t i) {
  switch (dt) {
    case TPDP_F32: return ((const float *)p)[i];
    case TPDP_F64: return (float)((const double *)p)[i];
    case TPDP_F16: return tpdp_f16_to_f32(((const uint16_t *)p)[i]);
    case TPDP_BF16: return tpdp_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return 0.0f;
  }
}

static void store_f(tpdp_dtype dt, void *p, size_t i, float v) {
  switch (dt) {
    case TPDP_F32: ((float *)p)[i] = v; break;
    case TPDP_F64: ((double *)p)[i] = v; break;
    case TPDP_F16: ((uint16_t *)p)[i] = tpdp_f32_to_f16(v); break;
    case TPDP_BF16: ((uint16_t *)p)[i] = tpdp_f32_to_bf16(v); break;
    default: break;
  }
}

tpdp_status dp_buf_divide(tpdp_device device, tpdp_dtype dtype, void *p,
                          size_t n, double divisor) {
  CHECK(dp_buf_device_supported(device, "bucket buffer"));
  if (divisor == 1.0) return TPDP_SUCCESS;
  /* A power-of-two divisor (the usual DP size) is an exact multiply by
   * its reciprocal, which vectorises better than a division. */
  double m = divisor;
  while (m >= 2.0 && m < 1e300) m *= 0.5;
  while (m < 1.0 && m > 1e-300) m *= 2.0;
  int pow2 = m == 1.0;
  if (dtype == TPDP_F32) {
    float *x = (float *)p;
    const float d = (float)divisor;
    if (pow2) {
      const float inv = 1.0f / d;
      for (size_t i = 0; i < n; i++) x[i] *= inv;
    } else {
      for (size_t i = 0; i < n; i++) x[i] /= d;
    }
  } else if (dtype == TPDP_F64) {
    double *x = (double *)p;
    if (pow2) {
      const double inv = 1.0 / divisor;
      for (size_t i = 0; i < n; i++) x[i] *= inv;
    } else {
      for (size_t i = 0; i < n; i++) x[i] /= divisor;
    }
  } else if (dtype == TPDP_F16 || dtype == TPDP_BF16) {
    const float d = (float)divisor;
    for (size_t i = 0; i < n; i++) store_f(dtype, p, i, load_f(dtype, p, i) / d);
  } else {
    return tpdp_set_error(TPDP_ERR_DTYPE_MISMATCH, "tpdp_reducer", "cannot divide %s gradients",
                    tpdp_dtype_name(dtype));
  }
  return TPDP_SUCCESS;
}

tpdp_status dp_buf_cast_divide(tpdp_device device, tpdp_dtype src_dtype,
                               const void *src, tpdp_dtype dst_dtype,
                               void *dst, size_t n, double divisor) {
  CHECK(dp_buf_device_supported(device, "bucket buffer"));
  if (!tpdp_dtype_is_float(src_dtype) || !tpdp_dtype_is_float(dst_dtype))
    return tpdp_set_error(TPDP_ERR_DTYPE_MISMATCH, "tpdp_reducer", "cannot cast %s to %s",
                    tpdp_dtype_name(src_dtype), tpdp_dtype_name(dst_dtype));
  if (src_dtype == TPDP_F64 && dst_dtype == TPDP_F64) {
    const double *s = (const double *)src;
    double *d = (double *)dst;
    for (size_t i = 0; i < n; i++) d[i] = s[i] / divisor;
    return TPDP_SUCCESS;
  }
  const float div = (float)divisor;
  if (src_dtype == TPDP_F32 && dst_dtype == TPDP_BF16) {
    const float *s = (const float *)src;
    uint16_t *d = (uint16_t *)dst;
    for (size_t i = 0; i < n; i++) d[i] = tpdp_f32_to_bf16(s[i] / div);
    return TPDP_SUCCESS;
  }
  if (src_dtype == TPDP_F32 && dst_dtype == TPDP_F16) {
    const float *s = (const float *)src;
    uint16_t *d = (uint16_t *)dst;
    for (size_t i = 0; i < n; i++) d[i] = tpdp_f32_to_f16(s[i] / div);
    return TPDP_SUCCESS;
  }
  for (size_t i = 0; i < n; i++)
    store_f(dst_dtype, dst, i, load_f(src_dtype, src, i) / div);
  return TPDP_SUCCESS;
}
