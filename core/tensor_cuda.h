// SPDX-License-Identifier: BSD-3-Clause
/*
 * Internal (built with --config=cuda only): tensor views in CUDA device
 * memory. core/tensor.c's tpdp_tensor_copy calls core_cuda_tensor_copy when
 * either side is on a GPU; library layers above core (dp, tp) use the
 * stream-ordered forms directly.
 */
#ifndef TPDP_CORE_TENSOR_CUDA_H
#define TPDP_CORE_TENSOR_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "tpdp/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Shape and element strides handed to the kernels by value. */
typedef struct {
  int ndim;
  int64_t numel;
  int64_t shape[TPDP_MAX_DIMS];
  int64_t dst_strides[TPDP_MAX_DIMS];
  int64_t src_strides[TPDP_MAX_DIMS];
} core_cuda_layout;

/* Kernel launchers (core/tensor_cuda_kernels.cu); return a cudaError_t. */
int core_cuda_launch_strided_copy(void *dst, const void *src, size_t elem_size,
                                  const core_cuda_layout *layout, void *stream);
int core_cuda_launch_strided_zero(void *dst, size_t elem_size,
                                  const core_cuda_layout *layout, void *stream);

/* Synchronous copy for tpdp_tensor_copy: any strides, any mix of host and
 * device memory (same shape and dtype, checked by the caller). Runs on the
 * legacy default stream and returns once the data is in dst. */
tpdp_status core_cuda_tensor_copy(tpdp_tensor *dst, const tpdp_tensor *src);

/* Stream-ordered copy (stream: a cudaStream_t, NULL = legacy default
 * stream): returns once queued. Both views must be in device memory (on any
 * GPU the current context can reach), any strides, same shape and dtype.
 * Errors: TPDP_ERR_DEVICE_MISMATCH (a host view), SHAPE/DTYPE_MISMATCH,
 * TPDP_ERR_CUDA naming the call. */
tpdp_status core_cuda_tensor_copy_async(tpdp_tensor *dst,
                                        const tpdp_tensor *src, void *stream);

/* Stream-ordered zero fill of a device view (any strides). */
tpdp_status core_cuda_tensor_zero_async(tpdp_tensor *t, void *stream);

/* Make a GPU the current device for a few calls and restore the caller's
 * afterwards: streams, kernels and allocations belong to the current one.
 *   core_cuda_device_guard g;
 *   CHECK(core_cuda_guard_enter(&g, dev)); ...; core_cuda_guard_exit(&g);
 * exit returns the status of restoring the caller's device (cudaSetDevice),
 * TPDP_SUCCESS when it was not changed. */
typedef struct {
  int prev;
  int changed;
} core_cuda_device_guard;

tpdp_status core_cuda_guard_enter(core_cuda_device_guard *g, int dev);
tpdp_status core_cuda_guard_exit(core_cuda_device_guard *g);
/* Exit the guard at the end of a call whose status so far is `st`: returns
 * st when it failed (its message kept), else the exit's status. */
tpdp_status core_cuda_guard_leave(core_cuda_device_guard *g, tpdp_status st);

/* Turn a cudaError_t into TPDP_ERR_CUDA naming the call and CUDA's error
 * string; TPDP_SUCCESS for cudaSuccess. */
tpdp_status core_cuda_status(int cuda_error, const char *call);
#define TPDP_CUDA_CHECK(call)                                    \
  do {                                                           \
    tpdp_status cuda_st_ = core_cuda_status((int)(call), #call); \
    if (cuda_st_ != TPDP_SUCCESS) return cuda_st_;               \
  } while (0)

#ifdef __cplusplus
}
#endif
#endif /* TPDP_CORE_TENSOR_CUDA_H */
