/* Memory helpers of tp/: every copy, pack, zero-fill and temporary
 * allocation redistribute does goes through these four functions, so that
 * device memory needs changes in this file only. Host memory always; CUDA
 * device memory when built with --config=cuda (TPDP_WITH_CUDA), else a
 * CUDA tensor is TPDP_ERR_UNSUPPORTED.
 *
 * The CUDA forms are synchronous: they run on the legacy default stream
 * and return once the bytes are in place. Redistribute's collectives are
 * the blocking ones (the host waits for the communicator's stream), so
 * every step sees the previous one complete without further events. */
#include <stdlib.h>
#include <string.h>

#include "tp/tp_internal.h"

#ifdef TPDP_WITH_CUDA
#include <cuda_runtime.h>

#include "core/tensor_cuda.h"

static tpdp_status cuda_alloc(int dev, size_t bytes, void **out) {
  core_cuda_device_guard g;
  CHECK(core_cuda_guard_enter(&g, dev));
  tpdp_status st =
      core_cuda_status(cudaMalloc(out, bytes ? bytes : 1), "cudaMalloc");
  core_cuda_guard_exit(&g);
  if (st != TPDP_SUCCESS) *out = NULL;
  return st;
}

static tpdp_status cuda_zero(tpdp_tensor *t) {
  core_cuda_device_guard g;
  CHECK(core_cuda_guard_enter(&g, t->device.index));
  tpdp_status st = core_cuda_tensor_zero_async(t, NULL);
  if (st == TPDP_SUCCESS)
    st = core_cuda_status(cudaStreamSynchronize(NULL), "cudaStreamSynchronize");
  core_cuda_guard_exit(&g);
  return st;
}
#endif /* TPDP_WITH_CUDA */

tpdp_status tp_mem_supported(tpdp_device device) {
  if (device.type == TPDP_DEVICE_CPU) return TPDP_SUCCESS;
#ifdef TPDP_WITH_CUDA
  if (device.type == TPDP_DEVICE_CUDA) return TPDP_SUCCESS;
#endif
  char dev[32];
  tpdp_device_format(device, dev, sizeof dev);
  return TPDP_ERR(TPDP_ERR_UNSUPPORTED,
                  "tensor on %s: redistributing device memory needs CUDA "
                  "copies, which this build of tpdp does not have (host "
                  "memory only)",
                  dev);
}

tpdp_status tp_mem_alloc(tpdp_device device, size_t bytes, void **out) {
  CHECK(tp_mem_supported(device));
#ifdef TPDP_WITH_CUDA
  if (device.type == TPDP_DEVICE_CUDA)
    return cuda_alloc(device.index, bytes, out);
#endif
  *out = malloc(bytes ? bytes : 1);
  if (*out == NULL)
    return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "cannot allocate %zu bytes", bytes);
  return TPDP_SUCCESS;
}

void tp_mem_free(tpdp_device device, void *p) {
#ifdef TPDP_WITH_CUDA
  if (device.type == TPDP_DEVICE_CUDA) {
    /* Nothing to report to: the frees follow completed work. */
    if (p != NULL) (void)cudaFree(p);
    return;
  }
#else
  (void)device;
#endif
  free(p);
}

/* Host strided copy: rows of the innermost dim go by memcpy when both
 * sides are unit-stride there (the common case of packing shards). */
static void copy_rec(char *d, const char *s, const tpdp_tensor *dt,
                     const tpdp_tensor *st, int k, size_t es) {
  int last = dt->ndim - 1;
  if (k == last) {
    int64_t n = dt->shape[k];
    if (dt->strides[k] == 1 && st->strides[k] == 1) {
      memcpy(d, s, (size_t)n * es);
      return;
    }
    for (int64_t i = 0; i < n; i++)
      memcpy(d + (ptrdiff_t)(i * dt->strides[k]) * (ptrdiff_t)es,
             s + (ptrdiff_t)(i * st->strides[k]) * (ptrdiff_t)es, es);
    return;
  }
  for (int64_t i = 0; i < dt->shape[k]; i++)
    copy_rec(d + (ptrdiff_t)(i * dt->strides[k]) * (ptrdiff_t)es,
             s + (ptrdiff_t)(i * st->strides[k]) * (ptrdiff_t)es, dt, st, k + 1,
             es);
}

tpdp_status tp_mem_copy(tpdp_tensor *dst, const tpdp_tensor *src) {
  CHECK(tp_mem_supported(dst->device));
  CHECK(tp_mem_supported(src->device));
#ifdef TPDP_WITH_CUDA
  /* Any strides, device<->device or host<->device; checks shape/dtype. */
  if (dst->device.type == TPDP_DEVICE_CUDA ||
      src->device.type == TPDP_DEVICE_CUDA)
    return core_cuda_tensor_copy(dst, src);
#endif
  if (dst->ndim == 0 || tpdp_tensor_numel(dst) == 0 ||
      !tpdp_tensor_same_shape(dst, src) || dst->dtype != src->dtype ||
      (tpdp_tensor_is_contiguous(dst) && tpdp_tensor_is_contiguous(src)))
    return tpdp_tensor_copy(dst, src); /* checks, and the contiguous case */
  copy_rec((char *)dst->data, (const char *)src->data, dst, src, 0,
           tpdp_dtype_size(dst->dtype));
  return TPDP_SUCCESS;
}

static void zero_rec(char *p, const tpdp_tensor *t, int d, size_t es) {
  if (d == t->ndim - 1) {
    if (t->strides[d] == 1) {
      memset(p, 0, (size_t)t->shape[d] * es);
      return;
    }
    for (int64_t i = 0; i < t->shape[d]; i++)
      memset(p + (size_t)(i * t->strides[d]) * es, 0, es);
    return;
  }
  for (int64_t i = 0; i < t->shape[d]; i++)
    zero_rec(p + (ptrdiff_t)(i * t->strides[d]) * (ptrdiff_t)es, t, d + 1, es);
}

tpdp_status tp_mem_zero(tpdp_tensor *dst) {
  CHECK(tp_mem_supported(dst->device));
  if (tpdp_tensor_numel(dst) == 0) return TPDP_SUCCESS;
#ifdef TPDP_WITH_CUDA
  if (dst->device.type == TPDP_DEVICE_CUDA) return cuda_zero(dst);
#endif
  size_t es = tpdp_dtype_size(dst->dtype);
  if (dst->ndim == 0 || tpdp_tensor_is_contiguous(dst)) {
    memset(dst->data, 0, tpdp_tensor_nbytes(dst));
    return TPDP_SUCCESS;
  }
  zero_rec((char *)dst->data, dst, 0, es);
  return TPDP_SUCCESS;
}
