// SPDX-License-Identifier: BSD-3-Clause
/* The reducer's passes over bucket data (see bucket_passes.h): host
 * implementations, and under TPDP_WITH_CUDA the device ones (the kernels
 * of dp/bucket_passes_kernels.cu on the communicator's stream). Each
 * function tests the device once and goes to one branch or the other. */
#include "dp/bucket_passes.h"

#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/mem.h"

#ifdef TPDP_WITH_CUDA
#include <cuda_runtime.h>

#include "core/tensor_cuda.h"
#include "dp/bucket_passes_cuda.h"

static int on_gpu(tpdp_device d) { return d.type == TPDP_DEVICE_CUDA; }

static tpdp_status dev_divide(tpdp_device device, void *stream,
                              tpdp_dtype src_dtype, const void *src,
                              tpdp_dtype dst_dtype, void *dst, size_t n,
                              double divisor) {
  if (n == 0) return TPDP_SUCCESS;
  core_cuda_device_guard g;
  CHECK(core_cuda_guard_enter(&g, device.index));
  tpdp_status st =
      core_cuda_status(dp_cuda_launch_cast_divide(src_dtype, src, dst_dtype,
                                                  dst, n, divisor, stream),
                       "cast_divide kernel launch");
  core_cuda_guard_exit(&g);
  return st;
}
#endif /* TPDP_WITH_CUDA */

static float load_f(tpdp_dtype dt, const void *p, size_t i) {
  switch (dt) {
    case TPDP_F32:
      return ((const float *)p)[i];
    case TPDP_F64:
      return (float)((const double *)p)[i];
    case TPDP_F16:
      return tpdp_f16_to_f32(((const uint16_t *)p)[i]);
    case TPDP_BF16:
      return tpdp_bf16_to_f32(((const uint16_t *)p)[i]);
    default:
      return 0.0f;
  }
}

static void store_f(tpdp_dtype dt, void *p, size_t i, float v) {
  switch (dt) {
    case TPDP_F32:
      ((float *)p)[i] = v;
      break;
    case TPDP_F64:
      ((double *)p)[i] = v;
      break;
    case TPDP_F16:
      ((uint16_t *)p)[i] = tpdp_f32_to_f16(v);
      break;
    case TPDP_BF16:
      ((uint16_t *)p)[i] = tpdp_f32_to_bf16(v);
      break;
    default:
      break;
  }
}

tpdp_status dp_pass_divide(tpdp_device device, void *stream, tpdp_dtype dtype,
                           void *p, size_t n, double divisor) {
  if (divisor == 1.0) return TPDP_SUCCESS;
#ifdef TPDP_WITH_CUDA
  if (on_gpu(device))
    return dev_divide(device, stream, dtype, p, dtype, p, n, divisor);
#else
  (void)device;
  (void)stream;
#endif
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
  } else { /* f16, bf16 */
    const float d = (float)divisor;
    for (size_t i = 0; i < n; i++)
      store_f(dtype, p, i, load_f(dtype, p, i) / d);
  }
  return TPDP_SUCCESS;
}

tpdp_status dp_pass_cast_divide(tpdp_device device, void *stream,
                                tpdp_dtype src_dtype, const void *src,
                                tpdp_dtype dst_dtype, void *dst, size_t n,
                                double divisor) {
#ifdef TPDP_WITH_CUDA
  if (on_gpu(device))
    return dev_divide(device, stream, src_dtype, src, dst_dtype, dst, n,
                      divisor);
#else
  (void)device;
  (void)stream;
#endif
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
