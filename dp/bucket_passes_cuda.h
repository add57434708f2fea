// SPDX-License-Identifier: BSD-3-Clause
/*
 * Internal (built with --config=cuda only): the kernel launchers behind the
 * device path of dp/bucket_passes.c, compiled by nvcc from
 * dp/bucket_passes_kernels.cu.
 * Plain C prototypes so that dp/ stays C11. Each queues its kernel on
 * `stream` (a cudaStream_t) of the current device, returns at once, and
 * gives back a cudaError_t (cudaSuccess, or the launch error; an unknown
 * dtype is cudaErrorInvalidValue). n == 0 launches nothing.
 */
#ifndef TPDP_DP_BUCKET_PASSES_CUDA_H
#define TPDP_DP_BUCKET_PASSES_CUDA_H

#include <stddef.h>

#include "tpdp/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dst[i] = (dst_dtype)(src[i] / divisor) for float dtypes: f64 -> f64 in
 * double, every other pair through float, as the host path does. dst may
 * be src (an in-place divide). */
int dp_cuda_launch_cast_divide(tpdp_dtype src_dtype, const void *src,
                               tpdp_dtype dst_dtype, void *dst, size_t n,
                               double divisor, void *stream);

#ifdef __cplusplus
}
#endif
#endif /* TPDP_DP_BUCKET_PASSES_CUDA_H */
