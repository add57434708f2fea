/*
 * Internal: every operation the reducer performs on bucket memory, in one
 * place, so that the device (CUDA) path is one file: allocation, zeroing,
 * copies, scaling and casts. The host versions live in buffers.c; in a
 * build without CUDA, device memory is refused with TPDP_ERR_UNSUPPORTED.
 */
#ifndef TPDP_DP_BUFFERS_H
#define TPDP_DP_BUFFERS_H

#include <stddef.h>

#include "tpdp/core.h"

/* TPDP_SUCCESS if bucket memory can live on `device` in this build; else
 * TPDP_ERR_UNSUPPORTED with a message naming the parameter `what`. */
tpdp_status dp_buf_device_supported(tpdp_device device, const char *what);

/* Zeroed buffer of `bytes` bytes (bytes may be 0: *out is then a valid
 * 1-byte allocation). */
tpdp_status dp_buf_alloc(tpdp_device device, size_t bytes, void **out);
void dp_buf_free(tpdp_device device, void *p);
tpdp_status dp_buf_zero(tpdp_device device, void *p, size_t bytes);
/* dst (contiguous) = src (contiguous), `bytes` bytes. */
tpdp_status dp_buf_copy(tpdp_device device, void *dst, const void *src,
                        size_t bytes);
/* dst = src elementwise, any strides (same shape and dtype). */
tpdp_status dp_buf_copy_tensor(tpdp_tensor *dst, const tpdp_tensor *src);
/* p[i] /= divisor for n elements of a float dtype (divisor 1: no-op). */
tpdp_status dp_buf_divide(tpdp_device device, tpdp_dtype dtype, void *p,
                          size_t n, double divisor);
/* dst[i] = (dst_dtype)(src[i] / divisor), n elements, float dtypes. */
tpdp_status dp_buf_cast_divide(tpdp_device device, tpdp_dtype src_dtype,
                               const void *src, tpdp_dtype dst_dtype,
                               void *dst, size_t n, double divisor);

#endif /* TPDP_DP_BUFFERS_H */
