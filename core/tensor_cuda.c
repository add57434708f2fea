// SPDX-License-Identifier: BSD-3-Clause
/* Tensor views in CUDA device memory (built with --config=cuda only).
 *
 * Contiguous copies are one cudaMemcpy; strided ones go through the N-D
 * kernel in tensor_cuda_kernels.cu. Host<->device copies with strides on
 * either side stage through a contiguous buffer, packed or unpacked on the
 * side where the strides are. */
#include "core/tensor_cuda.h"

#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"

tpdp_status core_cuda_status(int cuda_error, const char *call) {
  if (cuda_error == (int)cudaSuccess) return TPDP_SUCCESS;
  cudaError_t e = (cudaError_t)cuda_error;
  return TPDP_ERR(TPDP_ERR_CUDA, "%s failed: %s (%s)", call,
                  cudaGetErrorString(e), cudaGetErrorName(e));
}

static void contiguous_strides(int ndim, const int64_t *shape,
                               int64_t *strides) {
  int64_t s = 1;
  for (int k = ndim - 1; k >= 0; k--) {
    strides[k] = s;
    s *= shape[k] > 0 ? shape[k] : 1;
  }
}

static void make_layout(const tpdp_tensor *dst, const int64_t *dst_strides,
                        const int64_t *src_strides, core_cuda_layout *l) {
  memset(l, 0, sizeof *l);
  l->ndim = dst->ndim;
  l->numel = tpdp_tensor_numel(dst);
  for (int k = 0; k < dst->ndim; k++) {
    l->shape[k] = dst->shape[k];
    l->dst_strides[k] = dst_strides[k];
    l->src_strides[k] = src_strides[k];
  }
}

tpdp_status core_cuda_guard_enter(core_cuda_device_guard *g, int dev) {
  g->changed = 0;
  TPDP_CUDA_CHECK(cudaGetDevice(&g->prev));
  if (g->prev != dev) {
    TPDP_CUDA_CHECK(cudaSetDevice(dev));
    g->changed = 1;
  }
  return TPDP_SUCCESS;
}

tpdp_status core_cuda_guard_exit(core_cuda_device_guard *g) {
  if (!g->changed) return TPDP_SUCCESS;
  g->changed = 0;
  return core_cuda_status(cudaSetDevice(g->prev), "cudaSetDevice");
}

tpdp_status core_cuda_guard_leave(core_cuda_device_guard *g, tpdp_status st) {
  if (!g->changed) return st;
  core_first_error f;
  core_first_error_init(&f);
  core_first_error_add(&f, st);
  core_first_error_add(&f, core_cuda_guard_exit(g));
  return f.status;
}

tpdp_status core_cuda_tensor_copy_async(tpdp_tensor *dst,
                                        const tpdp_tensor *src, void *stream) {
  CHECK_PTR(dst);
  CHECK_PTR(src);
  CHECK(core_check_copy_pair(dst, src));
  if (dst->device.type != TPDP_DEVICE_CUDA ||
      src->device.type != TPDP_DEVICE_CUDA) {
    char a[32], b[32];
    tpdp_device_format(dst->device, a, sizeof a);
    tpdp_device_format(src->device, b, sizeof b);
    return TPDP_ERR(TPDP_ERR_DEVICE_MISMATCH,
                    "both views must be in device memory (dst on %s, src on "
                    "%s); use tpdp_tensor_copy for host memory",
                    a, b);
  }
  if (tpdp_tensor_numel(dst) == 0) return TPDP_SUCCESS;
  cudaStream_t s = (cudaStream_t)stream;
  if (tpdp_tensor_is_contiguous(dst) && tpdp_tensor_is_contiguous(src)) {
    TPDP_CUDA_CHECK(cudaMemcpyAsync(dst->data, src->data,
                                    tpdp_tensor_nbytes(dst),
                                    cudaMemcpyDeviceToDevice, s));
    return TPDP_SUCCESS;
  }
  core_cuda_device_guard g;
  CHECK(core_cuda_guard_enter(&g, dst->device.index));
  core_cuda_layout l;
  make_layout(dst, dst->strides, src->strides, &l);
  tpdp_status st = core_cuda_status(
      core_cuda_launch_strided_copy(dst->data, src->data,
                                    tpdp_dtype_size(dst->dtype), &l, stream),
      "strided_copy kernel launch");
  return core_cuda_guard_leave(&g, st);
}

tpdp_status core_cuda_tensor_zero_async(tpdp_tensor *t, void *stream) {
  CHECK_PTR(t);
  if (t->device.type != TPDP_DEVICE_CUDA)
    return TPDP_ERR(TPDP_ERR_DEVICE_MISMATCH,
                    "the view is in host memory; expected a CUDA device");
  if (tpdp_dtype_size(t->dtype) == 0)
    return TPDP_ERR(TPDP_ERR_DTYPE_MISMATCH, "invalid dtype %d", (int)t->dtype);
  if (tpdp_tensor_numel(t) == 0) return TPDP_SUCCESS;
  cudaStream_t s = (cudaStream_t)stream;
  if (tpdp_tensor_is_contiguous(t)) {
    TPDP_CUDA_CHECK(cudaMemsetAsync(t->data, 0, tpdp_tensor_nbytes(t), s));
    return TPDP_SUCCESS;
  }
  core_cuda_device_guard g;
  CHECK(core_cuda_guard_enter(&g, t->device.index));
  core_cuda_layout l;
  make_layout(t, t->strides, t->strides, &l);
  tpdp_status st =
      core_cuda_status(core_cuda_launch_strided_zero(
                           t->data, tpdp_dtype_size(t->dtype), &l, stream),
                       "strided_zero kernel launch");
  return core_cuda_guard_leave(&g, st);
}

/* A contiguous view with t's shape and dtype over `data` on `device`. */
static tpdp_tensor contiguous_like(const tpdp_tensor *t, void *data,
                                   tpdp_device device) {
  tpdp_tensor c = *t;
  c.data = data;
  c.device = device;
  contiguous_strides(t->ndim, t->shape, c.strides);
  return c;
}

/* A host buffer of `bytes` bytes for packing or unpacking strided data. */
static tpdp_status host_staging(size_t bytes, void **out) {
  *out = malloc(bytes);
  if (*out == NULL)
    return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "staging buffer of %zu bytes",
                    bytes);
  return TPDP_SUCCESS;
}

tpdp_status core_cuda_tensor_copy(tpdp_tensor *dst, const tpdp_tensor *src) {
  CHECK_PTR(dst);
  CHECK_PTR(src);
  CHECK(core_check_copy_pair(dst, src));
  if (tpdp_tensor_numel(dst) == 0) return TPDP_SUCCESS;
  size_t bytes = tpdp_tensor_nbytes(dst);
  int dst_dev = dst->device.type == TPDP_DEVICE_CUDA;
  int src_dev = src->device.type == TPDP_DEVICE_CUDA;
  int dst_contig = tpdp_tensor_is_contiguous(dst);
  int src_contig = tpdp_tensor_is_contiguous(src);
  tpdp_device cpu = {TPDP_DEVICE_CPU, 0};
  tpdp_status st = TPDP_SUCCESS;
  void *host_tmp = NULL, *dev_tmp = NULL;

  if (dst_contig && src_contig) {
    TPDP_CUDA_CHECK(cudaMemcpy(dst->data, src->data, bytes, cudaMemcpyDefault));
    /* cudaMemcpy device-to-device may return before the copy is done. */
    TPDP_CUDA_CHECK(cudaStreamSynchronize(NULL));
    return TPDP_SUCCESS;
  }
  if (dst_dev && src_dev) {
    CHECK(core_cuda_tensor_copy_async(dst, src, NULL));
    TPDP_CUDA_CHECK(cudaStreamSynchronize(NULL));
    return TPDP_SUCCESS;
  }
  if (dst_dev) {
    /* host -> device: pack src on the host, then copy (and unpack on the
     * device if dst has strides). */
    const void *packed = src->data;
    if (!src_contig) {
      CHECK_GOTO(host_staging(bytes, &host_tmp), st, done);
      tpdp_tensor h = contiguous_like(src, host_tmp, cpu);
      CHECK_GOTO(tpdp_tensor_copy(&h, src), st, done);
      packed = host_tmp;
    }
    if (dst_contig) {
      CHECK_GOTO(core_cuda_status(cudaMemcpy(dst->data, packed, bytes,
                                             cudaMemcpyHostToDevice),
                                  "cudaMemcpy"),
                 st, done);
      goto done;
    }
    core_cuda_device_guard g;
    CHECK_GOTO(core_cuda_guard_enter(&g, dst->device.index), st, done);
    st = core_cuda_status(cudaMalloc(&dev_tmp, bytes), "cudaMalloc");
    if (st == TPDP_SUCCESS)
      st = core_cuda_status(
          cudaMemcpy(dev_tmp, packed, bytes, cudaMemcpyHostToDevice),
          "cudaMemcpy");
    if (st == TPDP_SUCCESS) {
      tpdp_tensor d = contiguous_like(dst, dev_tmp, dst->device);
      st = core_cuda_tensor_copy_async(dst, &d, NULL);
    }
    if (st == TPDP_SUCCESS)
      st = core_cuda_status(cudaStreamSynchronize(NULL),
                            "cudaStreamSynchronize");
    st = core_cuda_guard_leave(&g, st);
    goto done;
  }
  /* device -> host: pack src on the device if it has strides, copy, then
   * unpack on the host if dst has strides. */
  {
    const void *packed = src->data;
    if (!src_contig) {
      core_cuda_device_guard g;
      CHECK_GOTO(core_cuda_guard_enter(&g, src->device.index), st, done);
      st = core_cuda_status(cudaMalloc(&dev_tmp, bytes), "cudaMalloc");
      if (st == TPDP_SUCCESS) {
        tpdp_tensor d = contiguous_like(src, dev_tmp, src->device);
        st = core_cuda_tensor_copy_async(&d, src, NULL);
      }
      st = core_cuda_guard_leave(&g, st);
      if (st != TPDP_SUCCESS) goto done;
      packed = dev_tmp;
    }
    void *out = dst->data;
    if (!dst_contig) {
      CHECK_GOTO(host_staging(bytes, &host_tmp), st, done);
      out = host_tmp;
    }
    /* cudaMemcpy to pageable host memory waits for the default stream, so
     * the packing kernel above has finished when it returns. */
    CHECK_GOTO(
        core_cuda_status(cudaMemcpy(out, packed, bytes, cudaMemcpyDeviceToHost),
                         "cudaMemcpy"),
        st, done);
    if (!dst_contig) {
      tpdp_tensor h = contiguous_like(dst, host_tmp, cpu);
      CHECK_GOTO(tpdp_tensor_copy(dst, &h), st, done);
    }
  }
done:
  free(host_tmp);
  if (dev_tmp == NULL) return st;
  core_first_error f;
  core_first_error_init(&f);
  core_first_error_add(&f, st);
  core_first_error_add(&f, core_cuda_status(cudaFree(dev_tmp), "cudaFree"));
  return f.status;
}
