// SPDX-License-Identifier: BSD-3-Clause
/* The reducer's collectives over small host buffers (see
 * host_collectives.h): the plain blocking collectives on a host
 * communicator, staged through device memory on an NCCL one. */
#include "dp/host_collectives.h"

#include "core/check.h"
#include "core/mem.h"

#ifdef TPDP_WITH_CUDA
#include <cuda_runtime.h>

#include "core/tensor_cuda.h"

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

tpdp_status dp_host_allgather(tpdp_comm *comm, const tpdp_tensor *send,
                              tpdp_tensor *recv) {
#ifdef TPDP_WITH_CUDA
  if (tpdp_comm_device_type(comm) == TPDP_DEVICE_CUDA)
    return staged(comm, STAGE_ALLGATHER, send, recv, TPDP_OP_SUM, 0);
#endif
  return tpdp_allgather(comm, send, recv);
}

tpdp_status dp_host_allreduce(tpdp_comm *comm, tpdp_tensor *t,
                              tpdp_reduce_op op) {
#ifdef TPDP_WITH_CUDA
  if (tpdp_comm_device_type(comm) == TPDP_DEVICE_CUDA)
    return staged(comm, STAGE_ALLREDUCE, NULL, t, op, 0);
#endif
  return tpdp_allreduce(comm, t, t, op);
}

tpdp_status dp_host_broadcast(tpdp_comm *comm, tpdp_tensor *t, int root) {
#ifdef TPDP_WITH_CUDA
  if (tpdp_comm_device_type(comm) == TPDP_DEVICE_CUDA)
    return staged(comm, STAGE_BROADCAST, NULL, t, TPDP_OP_SUM, root);
#endif
  return tpdp_broadcast(comm, t, t, root);
}
