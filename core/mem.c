// SPDX-License-Identifier: BSD-3-Clause
/* Host or device memory for tp/ and dp/ (see core/mem.h). Each function
 * tests the device once and takes the host or the CUDA branch. */
#include "core/mem.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/check.h"

#ifdef TPDP_WITH_CUDA
#include <cuda_runtime.h>

#include "core/tensor_cuda.h"

static int on_gpu(tpdp_device d) { return d.type == TPDP_DEVICE_CUDA; }

static tpdp_status cuda_alloc(tpdp_device device, size_t bytes, int zero,
                              void **out) {
  core_cuda_device_guard g;
  void *p = NULL;
  size_t n = bytes ? bytes : 1;
  CHECK(core_cuda_guard_enter(&g, device.index));
  tpdp_status st = core_cuda_status(cudaMalloc(&p, n), "cudaMalloc");
  /* Zeroed and complete before any stream uses it. */
  if (st == TPDP_SUCCESS && zero)
    st = core_cuda_status(cudaMemset(p, 0, n), "cudaMemset");
  if (st == TPDP_SUCCESS && zero)
    st = core_cuda_status(cudaStreamSynchronize(NULL), "cudaStreamSynchronize");
  core_cuda_guard_exit(&g);
  if (st != TPDP_SUCCESS) {
    if (p) (void)cudaFree(p);
    return TPDP_ERR(st, "%zu bytes on cuda:%d: %s", bytes, device.index,
                    core_error_detail());
  }
  *out = p;
  return TPDP_SUCCESS;
}

/* Run one tpdp_status expression with `dev` current. */
#define ON_DEVICE(dev, expr)                  \
  do {                                        \
    core_cuda_device_guard g_;                \
    CHECK(core_cuda_guard_enter(&g_, (dev))); \
    tpdp_status st_ = (expr);                 \
    core_cuda_guard_exit(&g_);                \
    return st_;                               \
  } while (0)
#endif /* TPDP_WITH_CUDA */

tpdp_status core_mem_supported(tpdp_device device, const char *what) {
  if (device.type == TPDP_DEVICE_CPU) return TPDP_SUCCESS;
#ifdef TPDP_WITH_CUDA
  if (device.type == TPDP_DEVICE_CUDA) return TPDP_SUCCESS;
#endif
  char dev[32];
  tpdp_device_format(device, dev, sizeof dev);
  return TPDP_ERR(TPDP_ERR_UNSUPPORTED,
                  "%s is on %s, but device memory is not built into this "
                  "build of tpdp (host memory only; build with "
                  "--config=cuda)",
                  what, dev);
}

/* Map every page of [p, p + n) now. Fresh pages otherwise fault in one
 * by one on first use, in the caller's hot path, and a fault costs tens of
 * microseconds on some VMs (17 MB: about 250 ms on the development VM).
 * MADV_POPULATE_WRITE (Linux >= 5.14; ignored where it fails) maps them in
 * one call, and one write per page then pays what the hypervisor still
 * charges for a page's first write: about 3x cheaper than the writes
 * alone. */
void core_mem_populate(void *p, size_t n) {
#ifdef MADV_POPULATE_WRITE
  long page = sysconf(_SC_PAGESIZE);
  if (page > 0) {
    uintptr_t mask = (uintptr_t)page - 1;
    uintptr_t lo = ((uintptr_t)p + mask) & ~mask;
    uintptr_t hi = ((uintptr_t)p + n) & ~mask;
    if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE);
  }
#endif
  for (size_t i = 0; i < n; i += 4096) ((volatile char *)p)[i] = 0;
}

static tpdp_status host_alloc(size_t bytes, int zero, void **out) {
  size_t n = bytes ? bytes : 1;
  void *p = core_alloc_fail_now() ? NULL : malloc(n);
  if (p == NULL)
    return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY,
                    "out of memory allocating %zu bytes", bytes);
  if (zero) {
    core_mem_populate(p, n);
    memset(p, 0, n);
  }
  *out = p;
  return TPDP_SUCCESS;
}

tpdp_status core_mem_alloc(tpdp_device device, size_t bytes, void **out) {
  CHECK(core_mem_supported(device, "a buffer"));
#ifdef TPDP_WITH_CUDA
  if (on_gpu(device)) return cuda_alloc(device, bytes, 0, out);
#endif
  return host_alloc(bytes, 0, out);
}

tpdp_status core_mem_alloc_zeroed(tpdp_device device, size_t bytes,
                                  void **out) {
  CHECK(core_mem_supported(device, "a buffer"));
#ifdef TPDP_WITH_CUDA
  if (on_gpu(device)) return cuda_alloc(device, bytes, 1, out);
#endif
  return host_alloc(bytes, 1, out);
}

tpdp_status core_mem_free(tpdp_device device, void *p) {
  if (p == NULL) return TPDP_SUCCESS;
#ifdef TPDP_WITH_CUDA
  if (on_gpu(device)) return core_cuda_status(cudaFree(p), "cudaFree");
#else
  (void)device;
#endif
  free(p);
  return TPDP_SUCCESS;
}

tpdp_status core_mem_alloc_async(tpdp_device device, size_t bytes, void *stream,
                                 void **out) {
  CHECK(core_mem_supported(device, "a buffer"));
#ifdef TPDP_WITH_CUDA
  if (on_gpu(device)) {
    void *p = NULL;
    core_cuda_device_guard g;
    CHECK(core_cuda_guard_enter(&g, device.index));
    tpdp_status st = core_cuda_status(
        cudaMallocAsync(&p, bytes ? bytes : 1, (cudaStream_t)stream),
        "cudaMallocAsync");
    core_cuda_guard_exit(&g);
    if (st != TPDP_SUCCESS)
      return TPDP_ERR(st, "%zu bytes on cuda:%d: %s", bytes, device.index,
                      core_error_detail());
    *out = p;
    return TPDP_SUCCESS;
  }
#else
  (void)stream;
#endif
  return host_alloc(bytes, 0, out);
}

tpdp_status core_mem_free_async(tpdp_device device, void *p, void *stream) {
  if (p == NULL) return TPDP_SUCCESS;
#ifdef TPDP_WITH_CUDA
  if (on_gpu(device))
    ON_DEVICE(device.index,
              core_cuda_status(cudaFreeAsync(p, (cudaStream_t)stream),
                               "cudaFreeAsync"));
#else
  (void)stream;
#endif
  return core_mem_free(device, p);
}

tpdp_status core_mem_free_keep(tpdp_device device, void *p, tpdp_status st) {
  tpdp_status fs = core_mem_free(device, p);
  return st != TPDP_SUCCESS ? st : fs;
}

tpdp_status core_scratch_get(core_scratch *s, tpdp_device device, size_t bytes,
                             void **out) {
  if (s->data != NULL && s->bytes >= bytes && s->device.type == device.type &&
      s->device.index == device.index) {
    *out = s->data;
    return TPDP_SUCCESS;
  }
  CHECK(core_scratch_free(s));
  CHECK(core_mem_alloc(device, bytes, &s->data));
  s->device = device;
  s->bytes = bytes;
  *out = s->data;
  return TPDP_SUCCESS;
}

tpdp_status core_scratch_free(core_scratch *s) {
  tpdp_status st = core_mem_free(s->device, s->data);
  s->data = NULL;
  s->bytes = 0;
  return st;
}

/* The size class of a request of `bytes` >= CORE_MEM_CACHE_MIN_BYTES: a
 * multiple of an eighth of the largest power of two not above it. */
static size_t cache_class(size_t bytes) {
  size_t top = (size_t)1 << (63 - __builtin_clzll((unsigned long long)bytes));
  size_t step = top / 8;
  return (bytes + step - 1) / step * step;
}

tpdp_status core_mem_cache_get(core_mem_cache *c, size_t bytes, int zero,
                               void **out) {
  if (bytes < CORE_MEM_CACHE_MIN_BYTES) return host_alloc(bytes, zero, out);
  size_t cls = cache_class(bytes);
  for (int i = c->n - 1; i >= 0; i--) {
    if (c->bytes[i] != cls) continue;
    /* Counted as an allocation, so that fault injection reaches it. */
    if (core_alloc_fail_now())
      return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY,
                      "out of memory allocating %zu bytes", bytes);
    void *p = c->data[i];
    c->n--;
    c->data[i] = c->data[c->n];
    c->bytes[i] = c->bytes[c->n];
    if (zero) memset(p, 0, bytes);
    *out = p;
    return TPDP_SUCCESS;
  }
  void *p = NULL;
  CHECK(host_alloc(cls, 0, &p));
  if (zero) { /* the bytes asked for only: the rest of the class may */
    core_mem_populate(p, bytes); /* never be touched, and costs nothing */
    memset(p, 0, bytes);
  }
  *out = p;
  return TPDP_SUCCESS;
}

void core_mem_cache_put(core_mem_cache *c, void *p, size_t bytes) {
  if (p == NULL) return;
  if (bytes < CORE_MEM_CACHE_MIN_BYTES || c->n == CORE_MEM_CACHE_SLOTS) {
    free(p);
    return;
  }
  c->data[c->n] = p;
  c->bytes[c->n++] = cache_class(bytes);
}

void core_mem_cache_release(core_mem_cache *c) {
  for (int i = 0; i < c->n; i++) free(c->data[i]);
  c->n = 0;
}

tpdp_status core_mem_copy(tpdp_tensor *dst, const tpdp_tensor *src) {
  CHECK(core_mem_supported(dst->device, "the destination"));
  CHECK(core_mem_supported(src->device, "the source"));
  /* Host: strided with row memcpys; a GPU on either side: the CUDA copy
   * on the legacy default stream (core/tensor_cuda.c). */
  return tpdp_tensor_copy(dst, src);
}

/* Host strided zero fill: rows of the innermost dim by memset when it is
 * unit-stride. */
static void zero_rec(char *p, const tpdp_tensor *t, int d, size_t es) {
  if (d == t->ndim - 1) {
    if (t->strides[d] == 1) {
      memset(p, 0, (size_t)t->shape[d] * es);
      return;
    }
    for (int64_t i = 0; i < t->shape[d]; i++)
      memset(p + (ptrdiff_t)(i * t->strides[d]) * (ptrdiff_t)es, 0, es);
    return;
  }
  for (int64_t i = 0; i < t->shape[d]; i++)
    zero_rec(p + (ptrdiff_t)(i * t->strides[d]) * (ptrdiff_t)es, t, d + 1, es);
}

static void host_zero(tpdp_tensor *t) {
  if (t->ndim == 0 || tpdp_tensor_is_contiguous(t)) {
    memset(t->data, 0, tpdp_tensor_nbytes(t));
    return;
  }
  zero_rec((char *)t->data, t, 0, tpdp_dtype_size(t->dtype));
}

tpdp_status core_mem_zero(tpdp_tensor *dst) {
  CHECK(core_mem_supported(dst->device, "the tensor"));
  if (tpdp_tensor_numel(dst) == 0) return TPDP_SUCCESS;
#ifdef TPDP_WITH_CUDA
  if (on_gpu(dst->device)) {
    core_cuda_device_guard g;
    CHECK(core_cuda_guard_enter(&g, dst->device.index));
    tpdp_status st = core_cuda_tensor_zero_async(dst, NULL);
    if (st == TPDP_SUCCESS)
      st = core_cuda_status(cudaStreamSynchronize(NULL),
                            "cudaStreamSynchronize");
    core_cuda_guard_exit(&g);
    return st;
  }
#endif
  host_zero(dst);
  return TPDP_SUCCESS;
}

tpdp_status core_mem_copy_async(tpdp_tensor *dst, const tpdp_tensor *src,
                                void *stream) {
  if (dst->data == src->data && tpdp_tensor_is_contiguous(dst) &&
      tpdp_tensor_is_contiguous(src))
    return core_check_copy_pair(dst, src);
#ifdef TPDP_WITH_CUDA
  if (on_gpu(dst->device) || on_gpu(src->device))
    /* Stream-ordered, any strides; a host side is an error it names. */
    ON_DEVICE(dst->device.index, core_cuda_tensor_copy_async(dst, src, stream));
#else
  (void)stream;
#endif
  return core_mem_copy(dst, src);
}

tpdp_status core_mem_zero_async(tpdp_tensor *dst, void *stream) {
#ifdef TPDP_WITH_CUDA
  if (on_gpu(dst->device))
    ON_DEVICE(dst->device.index, core_cuda_tensor_zero_async(dst, stream));
#else
  (void)stream;
#endif
  return core_mem_zero(dst);
}

tpdp_status core_mem_sync(tpdp_device device, void *stream) {
#ifdef TPDP_WITH_CUDA
  if (on_gpu(device))
    ON_DEVICE(device.index,
              core_cuda_status(cudaStreamSynchronize((cudaStream_t)stream),
                               "cudaStreamSynchronize"));
#else
  (void)device;
  (void)stream;
#endif
  return TPDP_SUCCESS;
}
