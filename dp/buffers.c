/* The bucket-memory operations (see buffers.h): host implementations,
 * and under TPDP_WITH_CUDA the device ones (cudaMalloc, cudaMemsetAsync /
 * cudaMemcpyAsync and the kernels of dp/buffers_kernels.cu on the
 * communicator's stream). Each public function tests the device once and
 * goes to one branch or the other. */
#include "dp/buffers.h"

#include <stdlib.h>
#include <string.h>

#include "core/check.h"

#ifdef TPDP_WITH_CUDA
#include <cuda_runtime.h>

#include "core/tensor_cuda.h"
#include "dp/buffers_cuda.h"

static int on_gpu(tpdp_device d) { return d.type == TPDP_DEVICE_CUDA; }

/* Run one cudaError_t-returning expression with `dev` current; the status
 * names the call. */
#define ON_DEVICE(dev, call)                                \
  do {                                                      \
    core_cuda_device_guard g_;                              \
    CHECK(core_cuda_guard_enter(&g_, (dev)));               \
    tpdp_status st_ = core_cuda_status((int)(call), #call); \
    core_cuda_guard_exit(&g_);                              \
    return st_;                                             \
  } while (0)

static tpdp_status dev_alloc(tpdp_device device, size_t bytes, void **out) {
  core_cuda_device_guard g;
  void *p = NULL;
  size_t n = bytes ? bytes : 1;
  CHECK(core_cuda_guard_enter(&g, device.index));
  tpdp_status st = core_cuda_status(cudaMalloc(&p, n), "cudaMalloc");
  /* Zeroed and complete before any stream uses it. */
  if (st == TPDP_SUCCESS)
    st = core_cuda_status(cudaMemset(p, 0, n), "cudaMemset");
  if (st == TPDP_SUCCESS)
    st = core_cuda_status(cudaStreamSynchronize(NULL), "cudaStreamSynchronize");
  core_cuda_guard_exit(&g);
  if (st != TPDP_SUCCESS) {
    if (p) (void)cudaFree(p);
    return TPDP_ERR(st, "device bucket buffer of %zu bytes on cuda:%d: %s",
                    bytes, device.index, tpdp_last_error());
  }
  *out = p;
  return TPDP_SUCCESS;
}

static tpdp_status dev_divide(tpdp_device device, void *stream,
                              tpdp_dtype src_dtype, const void *src,
                              tpdp_dtype dst_dtype, void *dst, size_t n,
                              double divisor) {
  if (n == 0) return TPDP_SUCCESS;
  ON_DEVICE(device.index, dp_cuda_launch_cast_divide(src_dtype, src, dst_dtype,
                                                     dst, n, divisor, stream));
}
#endif /* TPDP_WITH_CUDA */

tpdp_status dp_buf_device_supported(tpdp_device device, const char *what) {
  if (device.type == TPDP_DEVICE_CPU) return TPDP_SUCCESS;
#ifdef TPDP_WITH_CUDA
  if (device.type == TPDP_DEVICE_CUDA) return TPDP_SUCCESS;
#endif
  char dev[32];
  tpdp_device_format(device, dev, sizeof dev);
  return TPDP_ERR(TPDP_ERR_UNSUPPORTED,
                  "%s is on %s: the reducer's device buffers (allocation, "
                  "casts) are not built in this build; only host (cpu) "
                  "parameters with an MPI communicator are supported",
                  what, dev);
}

tpdp_status dp_buf_alloc(tpdp_device device, size_t bytes, void **out) {
  CHECK(dp_buf_device_supported(device, "bucket buffer"));
#ifdef TPDP_WITH_CUDA
  if (on_gpu(device)) return dev_alloc(device, bytes, out);
#endif
  void *p = calloc(bytes ? bytes : 1, 1);
  if (p == NULL)
    return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "bucket buffer of %zu bytes",
                    bytes);
  *out = p;
  return TPDP_SUCCESS;
}

void dp_buf_free(tpdp_device device, void *p) {
#ifdef TPDP_WITH_CUDA
  if (on_gpu(device)) {
    /* A destructor: nothing to report to (cudaFree waits for the work
     * still queued on the buffer). */
    if (p != NULL) (void)cudaFree(p);
    return;
  }
#else
  (void)device;
#endif
  free(p);
}

tpdp_status dp_buf_zero(tpdp_device device, void *stream, void *p,
                        size_t bytes) {
  CHECK(dp_buf_device_supported(device, "bucket buffer"));
#ifdef TPDP_WITH_CUDA
  if (on_gpu(device)) {
    if (bytes == 0) return TPDP_SUCCESS;
    ON_DEVICE(device.index, cudaMemsetAsync(p, 0, bytes, (cudaStream_t)stream));
  }
#else
  (void)stream;
#endif
  if (bytes) memset(p, 0, bytes);
  return TPDP_SUCCESS;
}

tpdp_status dp_buf_copy(tpdp_device device, void *stream, void *dst,
                        const void *src, size_t bytes) {
  CHECK(dp_buf_device_supported(device, "bucket buffer"));
#ifdef TPDP_WITH_CUDA
  if (on_gpu(device)) {
    if (bytes == 0 || dst == src) return TPDP_SUCCESS;
    ON_DEVICE(device.index,
              cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
                              (cudaStream_t)stream));
  }
#else
  (void)stream;
#endif
  if (bytes && dst != src) memmove(dst, src, bytes);
  return TPDP_SUCCESS;
}

tpdp_status dp_buf_copy_tensor(void *stream, tpdp_tensor *dst,
                               const tpdp_tensor *src) {
  CHECK(dp_buf_device_supported(dst->device, "gradient"));
#ifdef TPDP_WITH_CUDA
  if (on_gpu(dst->device) || on_gpu(src->device)) {
    if (dst->data == src->data && tpdp_tensor_is_contiguous(dst) &&
        tpdp_tensor_is_contiguous(src))
      return TPDP_SUCCESS;
    core_cuda_device_guard g;
    CHECK(core_cuda_guard_enter(&g, dst->device.index));
    /* Stream-ordered, any strides; a host side is an error it names. */
    tpdp_status st = core_cuda_tensor_copy_async(dst, src, stream);
    core_cuda_guard_exit(&g);
    return st;
  }
#else
  (void)stream;
#endif
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

tpdp_status dp_buf_divide(tpdp_device device, void *stream, tpdp_dtype dtype,
                          void *p, size_t n, double divisor) {
  CHECK(dp_buf_device_supported(device, "bucket buffer"));
  if (divisor == 1.0) return TPDP_SUCCESS;
  if (!tpdp_dtype_is_float(dtype))
    return TPDP_ERR(TPDP_ERR_DTYPE_MISMATCH, "cannot divide %s gradients",
                    tpdp_dtype_name(dtype));
#ifdef TPDP_WITH_CUDA
  if (on_gpu(device))
    return dev_divide(device, stream, dtype, p, dtype, p, n, divisor);
#else
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
  } else if (dtype == TPDP_F16 || dtype == TPDP_BF16) {
    const float d = (float)divisor;
    for (size_t i = 0; i < n; i++)
      store_f(dtype, p, i, load_f(dtype, p, i) / d);
  } else {
    return TPDP_ERR(TPDP_ERR_DTYPE_MISMATCH, "cannot divide %s gradients",
                    tpdp_dtype_name(dtype));
  }
  return TPDP_SUCCESS;
}

tpdp_status dp_buf_cast_divide(tpdp_device device, void *stream,
                               tpdp_dtype src_dtype, const void *src,
                               tpdp_dtype dst_dtype, void *dst, size_t n,
                               double divisor) {
  CHECK(dp_buf_device_supported(device, "bucket buffer"));
  if (!tpdp_dtype_is_float(src_dtype) || !tpdp_dtype_is_float(dst_dtype))
    return TPDP_ERR(TPDP_ERR_DTYPE_MISMATCH, "cannot cast %s to %s",
                    tpdp_dtype_name(src_dtype), tpdp_dtype_name(dst_dtype));
#ifdef TPDP_WITH_CUDA
  if (on_gpu(device))
    return dev_divide(device, stream, src_dtype, src, dst_dtype, dst, n,
                      divisor);
#else
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

tpdp_status dp_buf_sync(tpdp_device device, void *stream) {
#ifdef TPDP_WITH_CUDA
  if (on_gpu(device))
    ON_DEVICE(device.index, cudaStreamSynchronize((cudaStream_t)stream));
#else
  (void)device;
  (void)stream;
#endif
  return TPDP_SUCCESS;
}

/* ------------------------------------------------ host metadata staging */

#ifdef TPDP_WITH_CUDA
/* The staged collectives: `host` views (send may be NULL) copied into one
 * device buffer on the communicator's GPU, the collective run on device
 * views of it, recv copied back; all on the communicator's stream, which is
 * synchronised before the host buffers are read. */
typedef enum { STAGE_ALLGATHER, STAGE_BROADCAST } stage_kind;

static tpdp_status staged(tpdp_comm *comm, stage_kind kind,
                          const tpdp_tensor *send, tpdp_tensor *recv,
                          int root) {
  if (send != NULL && !tpdp_tensor_is_contiguous(send))
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT, "send buffer not contiguous");
  if (!tpdp_tensor_is_contiguous(recv))
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT, "recv buffer not contiguous");
  int dev = tpdp_comm_cuda_device(comm);
  cudaStream_t s = (cudaStream_t)tpdp_comm_nccl_stream(comm);
  size_t sb = send ? tpdp_tensor_nbytes(send) : 0;
  size_t rb = tpdp_tensor_nbytes(recv);
  tpdp_device d = {TPDP_DEVICE_CUDA, dev};
  void *buf = NULL;
  char *dsend = NULL, *drecv = NULL;
  tpdp_tensor sv, rv;
  core_cuda_device_guard g;
  CHECK(core_cuda_guard_enter(&g, dev));
  tpdp_status st = core_cuda_status(cudaMalloc(&buf, (sb + rb) ? (sb + rb) : 1),
                                    "cudaMalloc");
  if (st != TPDP_SUCCESS) goto done;
  dsend = (char *)buf;
  drecv = (char *)buf + sb;
  if (sb)
    CHECK_GOTO(core_cuda_status(cudaMemcpyAsync(dsend, send->data, sb,
                                                cudaMemcpyHostToDevice, s),
                                "cudaMemcpyAsync"),
               st, done);
  if (kind == STAGE_BROADCAST && rb)
    CHECK_GOTO(core_cuda_status(cudaMemcpyAsync(drecv, recv->data, rb,
                                                cudaMemcpyHostToDevice, s),
                                "cudaMemcpyAsync"),
               st, done);
  rv = *recv;
  rv.data = drecv;
  rv.device = d;
  if (kind == STAGE_ALLGATHER) {
    sv = *send;
    sv.data = dsend;
    sv.device = d;
    CHECK_GOTO(tpdp_allgather(comm, &sv, &rv), st, done);
  } else {
    CHECK_GOTO(tpdp_broadcast(comm, &rv, &rv, root), st, done);
  }
  if (rb)
    CHECK_GOTO(core_cuda_status(cudaMemcpyAsync(recv->data, drecv, rb,
                                                cudaMemcpyDeviceToHost, s),
                                "cudaMemcpyAsync"),
               st, done);
  CHECK_GOTO(
      core_cuda_status(cudaStreamSynchronize(s), "cudaStreamSynchronize"), st,
      done);
done:
  if (buf != NULL) {
    /* After an error, let queued copies drain before freeing. */
    if (st != TPDP_SUCCESS) (void)cudaStreamSynchronize(s);
    (void)cudaFree(buf);
  }
  core_cuda_guard_exit(&g);
  return st;
}
#endif /* TPDP_WITH_CUDA */

tpdp_status dp_buf_host_allgather(tpdp_comm *comm, const tpdp_tensor *send,
                                  tpdp_tensor *recv) {
#ifdef TPDP_WITH_CUDA
  if (tpdp_comm_device_type(comm) == TPDP_DEVICE_CUDA)
    return staged(comm, STAGE_ALLGATHER, send, recv, 0);
#endif
  return tpdp_allgather(comm, send, recv);
}

tpdp_status dp_buf_host_broadcast(tpdp_comm *comm, tpdp_tensor *t, int root) {
#ifdef TPDP_WITH_CUDA
  if (tpdp_comm_device_type(comm) == TPDP_DEVICE_CUDA)
    return staged(comm, STAGE_BROADCAST, NULL, t, root);
#endif
  return tpdp_broadcast(comm, t, t, root);
}
