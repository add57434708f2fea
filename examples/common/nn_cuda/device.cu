// SPDX-License-Identifier: BSD-3-Clause
// nn_cuda.h: the error message, devices, memory, copies, streams and
// events.
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "examples/common/nn_cuda/kernels.cuh"

// ------------------------------------------------------------ errors

static thread_local char g_err[640];

extern "C" int nn_cuda_fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_err, sizeof g_err, fmt, ap);
  va_end(ap);
  return 1;
}

extern "C" const char *nn_cuda_last_error(void) { return g_err; }

// ------------------------------------------------------------ device

extern "C" int nn_cuda_device_count(int *count) {
  *count = 0;
  CUDA_TRY(cudaGetDeviceCount(count));
  return 0;
}

extern "C" int nn_cuda_use_device(int device, char *name, size_t len) {
  CUDA_TRY(cudaSetDevice(device));
  cudaDeviceProp prop;
  CUDA_TRY(cudaGetDeviceProperties(&prop, device));
  if (name && len > 0) snprintf(name, len, "%s", prop.name);
  return 0;
}

static double gib(size_t bytes) { return (double)bytes / (1 << 30); }

extern "C" int nn_cuda_alloc(void **ptr, size_t bytes, const char *what) {
  *ptr = NULL;
  // +16: a valid, distinct pointer for an empty buffer.
  cudaError_t e = cudaMalloc(ptr, bytes + 16);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // not sticky: clear it
    size_t free_b = 0, total_b = 0;
    int dev = -1;
    cudaGetDevice(&dev);
    cudaMemGetInfo(&free_b, &total_b);
    *ptr = NULL;
    return nn_cuda_fail(
        "out of GPU memory allocating %.2f GiB for %s on cuda:%d (%.2f GiB "
        "free of %.2f GiB)",
        gib(bytes), what, dev, gib(free_b), gib(total_b));
  }
  if (e != cudaSuccess) {
    *ptr = NULL;
    return nn_cuda_fail("cudaMalloc(%zu bytes) for %s: %s", bytes + 16, what,
                        cudaGetErrorString(e));
  }
  e = cudaMemset(*ptr, 0, bytes + 16);
  if (e != cudaSuccess) {
    cudaFree(*ptr);
    *ptr = NULL;
    return nn_cuda_fail("cudaMemset(%zu bytes) for %s: %s", bytes + 16, what,
                        cudaGetErrorString(e));
  }
  return 0;
}

extern "C" void nn_cuda_free(void *ptr) {
  if (ptr) cudaFree(ptr);
}

extern "C" int nn_cuda_alloc_host(void **ptr, size_t bytes, const char *what) {
  *ptr = NULL;
  cudaError_t e = cudaMallocHost(ptr, bytes + 16);
  if (e != cudaSuccess) {
    cudaGetLastError();
    *ptr = NULL;
    return nn_cuda_fail("cudaMallocHost(%zu bytes) for %s: %s", bytes + 16,
                        what, cudaGetErrorString(e));
  }
  memset(*ptr, 0, bytes + 16);
  return 0;
}

extern "C" void nn_cuda_free_host(void *ptr) {
  if (ptr) cudaFreeHost(ptr);
}

extern "C" int nn_cuda_to_device(void *dst, const void *src, size_t bytes) {
  if (bytes == 0) return 0;
  CUDA_TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
  return 0;
}

extern "C" int nn_cuda_to_host(void *dst, const void *src, size_t bytes) {
  if (bytes == 0) return 0;
  CUDA_TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
  return 0;
}

extern "C" int nn_cuda_copy_async(void *dst, const void *src, size_t bytes,
                                  void *stream) {
  if (bytes == 0) return 0;
  CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, S(stream)));
  return 0;
}

extern "C" int nn_cuda_copy_2d_async(void *dst, size_t dpitch, const void *src,
                                     size_t spitch, size_t width, size_t height,
                                     void *stream) {
  if (width == 0 || height == 0) return 0;
  CUDA_TRY(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height,
                             cudaMemcpyDefault, S(stream)));
  return 0;
}

extern "C" int nn_cuda_zero_async(void *dst, size_t bytes, void *stream) {
  if (bytes == 0) return 0;
  CUDA_TRY(cudaMemsetAsync(dst, 0, bytes, S(stream)));
  return 0;
}

extern "C" int nn_cuda_stream_create(void **stream) {
  cudaStream_t s = NULL;
  // Default flags: the stream also orders itself with the legacy default
  // stream, which the synchronous copies above use.
  CUDA_TRY(cudaStreamCreate(&s));
  *stream = s;
  return 0;
}

extern "C" void nn_cuda_stream_destroy(void *stream) {
  if (stream) {
    cudaStreamSynchronize(S(stream));
    cudaStreamDestroy(S(stream));
  }
}

extern "C" int nn_cuda_stream_wait(void *waiter, void *producer) {
  if (waiter == producer) return 0;
  cudaEvent_t ev;
  CUDA_TRY(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  cudaError_t e = cudaEventRecord(ev, S(producer));
  if (e == cudaSuccess) e = cudaStreamWaitEvent(S(waiter), ev, 0);
  cudaEventDestroy(ev);  // released once the wait has been satisfied
  if (e != cudaSuccess)
    return nn_cuda_fail("cudaEventRecord/cudaStreamWaitEvent: %s",
                        cudaGetErrorString(e));
  return 0;
}

extern "C" int nn_cuda_stream_sync(void *stream) {
  CUDA_TRY(cudaStreamSynchronize(S(stream)));
  return 0;
}

extern "C" int nn_cuda_event_create(void **event) {
  cudaEvent_t ev;
  CUDA_TRY(cudaEventCreate(&ev));
  *event = ev;
  return 0;
}

extern "C" void nn_cuda_event_destroy(void *event) {
  if (event) cudaEventDestroy((cudaEvent_t)event);
}

extern "C" int nn_cuda_event_record(void *event, void *stream) {
  CUDA_TRY(cudaEventRecord((cudaEvent_t)event, S(stream)));
  return 0;
}

extern "C" int nn_cuda_event_sync(void *event) {
  CUDA_TRY(cudaEventSynchronize((cudaEvent_t)event));
  return 0;
}

extern "C" int nn_cuda_event_elapsed(void *start, void *end, float *ms) {
  CUDA_TRY(cudaEventElapsedTime(ms, (cudaEvent_t)start, (cudaEvent_t)end));
  return 0;
}
