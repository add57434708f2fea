/*
 * Internal: every operation the reducer performs on bucket memory, in one
 * place, so that the device (CUDA) path is one file: allocation, zeroing,
 * copies, scaling and casts, plus the staging of the reducer's small host
 * metadata through device memory on an NCCL communicator. Host versions
 * always; the CUDA versions (dp/buffers.c under TPDP_WITH_CUDA, kernels in
 * dp/buffers_kernels.cu) in a build with --config=cuda. Without CUDA,
 * device memory is refused with TPDP_ERR_UNSUPPORTED.
 *
 * Streams: `stream` is the reducer communicator's CUDA stream
 * (tpdp_comm_nccl_stream; NULL on an MPI communicator, where it is
 * ignored). Device operations are queued on it and return at once, so
 * they are ordered with the bucket's collectives without host syncs;
 * dp_buf_sync waits for them. Host operations are done on return.
 */
#ifndef TPDP_DP_BUFFERS_H
#define TPDP_DP_BUFFERS_H

#include <stddef.h>

#include "tpdp/comm.h"
#include "tpdp/core.h"

/* TPDP_SUCCESS if bucket memory can live on `device` in this build (cpu;
 * cuda when built with CUDA); else TPDP_ERR_UNSUPPORTED with a message
 * naming the parameter `what`. */
tpdp_status dp_buf_device_supported(tpdp_device device, const char *what);

/* Zeroed buffer of `bytes` bytes on `device` (bytes may be 0: *out is then
 * a valid 1-byte allocation). Synchronous: the zeros are in place on
 * return, visible to every stream. */
tpdp_status dp_buf_alloc(tpdp_device device, size_t bytes, void **out);
/* Free a dp_buf_alloc buffer (NULL: no-op). Device: cudaFree, which waits
 * for work queued on the buffer. */
void dp_buf_free(tpdp_device device, void *p);
tpdp_status dp_buf_zero(tpdp_device device, void *stream, void *p,
                        size_t bytes);
/* dst (contiguous) = src (contiguous), `bytes` bytes, both on `device`. */
tpdp_status dp_buf_copy(tpdp_device device, void *stream, void *dst,
                        const void *src, size_t bytes);
/* dst = src elementwise, any strides (same shape and dtype, same device
 * type). */
tpdp_status dp_buf_copy_tensor(void *stream, tpdp_tensor *dst,
                               const tpdp_tensor *src);
/* p[i] /= divisor for n elements of a float dtype (divisor 1: no-op). */
tpdp_status dp_buf_divide(tpdp_device device, void *stream, tpdp_dtype dtype,
                          void *p, size_t n, double divisor);
/* dst[i] = (dst_dtype)(src[i] / divisor), n elements, float dtypes. */
tpdp_status dp_buf_cast_divide(tpdp_device device, void *stream,
                               tpdp_dtype src_dtype, const void *src,
                               tpdp_dtype dst_dtype, void *dst, size_t n,
                               double divisor);
/* Wait on the host until everything queued on `stream` for `device` is
 * done (host memory, or stream NULL on a host device: no-op). */
tpdp_status dp_buf_sync(tpdp_device device, void *stream);

/* Collectives over small HOST buffers (the reducer's metadata: status
 * agreement, parameter signatures, the rebuilt ready order) on any
 * communicator. On a host communicator they are the plain blocking
 * collectives. On a device (NCCL) communicator the bytes are staged through
 * a temporary device buffer on the communicator's GPU: copied in on its
 * stream, the collective, copied back, and the stream synchronised, so the
 * host buffers hold the result on return. Collective: every rank calls. */
tpdp_status dp_buf_host_allgather(tpdp_comm *comm, const tpdp_tensor *send,
                                  tpdp_tensor *recv);
/* In place: root's `t` lands in every rank's `t`. */
tpdp_status dp_buf_host_broadcast(tpdp_comm *comm, tpdp_tensor *t, int root);

#endif /* TPDP_DP_BUFFERS_H */
