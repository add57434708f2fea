// SPDX-License-Identifier: BSD-3-Clause
/*
 * Internal: the reducer's passes over bucket data (averaging, and the casts
 * of the bf16/f16 compression hooks) and the staging of its small host
 * metadata through device memory on an NCCL communicator. Host versions
 * always; the CUDA versions (dp/buffers.c under TPDP_WITH_CUDA, kernels in
 * dp/buffers_kernels.cu) in a build with --config=cuda. Allocation, zero
 * fill and copies of bucket memory are core/mem.h's.
 *
 * Streams: `stream` is the reducer communicator's CUDA stream
 * (tpdp_comm_nccl_stream; NULL on an MPI communicator, where it is
 * ignored). Device operations are queued on it and return at once, so
 * they are ordered with the bucket's collectives without host syncs;
 * core_mem_sync waits for them. Host operations are done on return.
 * Callers pass float dtypes on a device core_mem_supported accepts (the
 * reducer checks both at create).
 */
#ifndef TPDP_DP_BUFFERS_H
#define TPDP_DP_BUFFERS_H

#include <stddef.h>

#include "tpdp/comm.h"
#include "tpdp/core.h"

/* p[i] /= divisor for n elements of a float dtype (divisor 1: no-op). */
tpdp_status dp_buf_divide(tpdp_device device, void *stream, tpdp_dtype dtype,
                          void *p, size_t n, double divisor);
/* dst[i] = (dst_dtype)(src[i] / divisor), n elements, float dtypes. */
tpdp_status dp_buf_cast_divide(tpdp_device device, void *stream,
                               tpdp_dtype src_dtype, const void *src,
                               tpdp_dtype dst_dtype, void *dst, size_t n,
                               double divisor);

/* Collectives over small HOST buffers (the reducer's metadata: status
 * agreement, parameter signatures, the rebuilt ready order) on any
 * communicator. On a host communicator they are the plain blocking
 * collectives. On a device (NCCL) communicator the bytes are staged through
 * a temporary device buffer on the communicator's GPU: copied in on its
 * stream, the collective, copied back, and the stream synchronised, so the
 * host buffers hold the result on return. Collective: every rank calls. */
tpdp_status dp_buf_host_allgather(tpdp_comm *comm, const tpdp_tensor *send,
                                  tpdp_tensor *recv);
/* In place: `t` becomes its reduction over the ranks. */
tpdp_status dp_buf_host_allreduce(tpdp_comm *comm, tpdp_tensor *t,
                                  tpdp_reduce_op op);
/* In place: root's `t` lands in every rank's `t`. */
tpdp_status dp_buf_host_broadcast(tpdp_comm *comm, tpdp_tensor *t, int root);

#endif /* TPDP_DP_BUFFERS_H */
