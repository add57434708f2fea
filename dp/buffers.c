// SPDX-License-Identifier: BSD-3-Clause
/* The passes over bucket data and the metadata staging (see buffers.h):
 * host implementations, and under TPDP_WITH_CUDA the device ones (the
 * kernels of dp/buffers_kernels.cu on the communicator's stream). Each
 * function tests the device once and goes to one branch or the other. */
#include "dp/buffers.h"

#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/mem.h"

#ifdef TPDP_WITH_CUDA
#include <cuda_runtime.h>

#include "core/tensor_cuda.h"
#include "dp/buffers_cuda.h"

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

tpdp_status dp_buf_divide(tpdp_device device, void *stream, tpdp_dtype dtype,
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

tpdp_status dp_buf_cast_divide(tpdp_device device, void *stream,
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

/* ------------------------------------------------ host metadata staging */

#ifdef TPDP_WITH_CUDA
/* The staged collectives: `host` views (send may be NULL) copied into one
 * device buffer on the communicator's GPU, the collective run on device
 * views of it, recv copied back; all on the communicator's stream, which is
 * synchronised before the host buffers are read. */
typedef enum { STAGE_ALLGATHER, STAGE_ALLREDUCE, STAGE_BROADCAST } stage_kind;

static tpdp_status staged(tpdp_comm *comm, stage_kind kind,
                          const tpdp_tensor *send, tpdp_tensor *recv,
                          tpdp_reduce_op op, int root) {
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
  tpdp_status st;
  CHECK_GOTO(core_mem_alloc(d, sb + rb, &buf), st, done);
  dsend = (char *)buf;
  drecv = (char *)buf + sb;
  if (sb)
    CHECK_GOTO(core_cuda_status(cudaMemcpyAsync(dsend, send->data, sb,
                                                cudaMemcpyHostToDevice, s),
                                "cudaMemcpyAsync"),
               st, done);
  if (kind != STAGE_ALLGATHER && rb)
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
  } else if (kind == STAGE_ALLREDUCE) {
    CHECK_GOTO(tpdp_allreduce(comm, &rv, &rv, op), st, done);
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
  /* After an error, let queued copies drain before freeing (cudaFree
   * would wait for them too, but not report their failure as ours). */
  if (st != TPDP_SUCCESS && buf != NULL) (void)cudaStreamSynchronize(s);
  st = core_mem_free_keep(d, buf, st);
  core_cuda_guard_exit(&g);
  return st;
}
#endif /* TPDP_WITH_CUDA */

tpdp_status dp_buf_host_allgather(tpdp_comm *comm, const tpdp_tensor *send,
                                  tpdp_tensor *recv) {
#ifdef TPDP_WITH_CUDA
  if (tpdp_comm_device_type(comm) == TPDP_DEVICE_CUDA)
    return staged(comm, STAGE_ALLGATHER, send, recv, TPDP_OP_SUM, 0);
#endif
  return tpdp_allgather(comm, send, recv);
}

tpdp_status dp_buf_host_allreduce(tpdp_comm *comm, tpdp_tensor *t,
                                  tpdp_reduce_op op) {
#ifdef TPDP_WITH_CUDA
  if (tpdp_comm_device_type(comm) == TPDP_DEVICE_CUDA)
    return staged(comm, STAGE_ALLREDUCE, NULL, t, op, 0);
#endif
  return tpdp_allreduce(comm, t, t, op);
}

tpdp_status dp_buf_host_broadcast(tpdp_comm *comm, tpdp_tensor *t, int root) {
#ifdef TPDP_WITH_CUDA
  if (tpdp_comm_device_type(comm) == TPDP_DEVICE_CUDA)
    return staged(comm, STAGE_BROADCAST, NULL, t, TPDP_OP_SUM, root);
#endif
  return tpdp_broadcast(comm, t, t, root);
}
