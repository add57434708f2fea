// SPDX-License-Identifier: BSD-3-Clause
/*
 * Internal: the reducer's passes over bucket data (averaging, and the casts
 * of the bf16/f16 compression hooks). Host versions always; the CUDA
 * versions (dp/bucket_passes.c under TPDP_WITH_CUDA, kernels in
 * dp/bucket_passes_kernels.cu) in a build with --config=cuda. Allocation,
 * zero fill and copies of bucket memory are core/mem.h's; the staging of
 * the reducer's host metadata is dp/host_collectives.h.
 *
 * Streams: `stream` is the reducer communicator's CUDA stream
 * (tpdp_comm_nccl_stream; NULL on an MPI communicator, where it is
 * ignored). Device operations are queued on it and return at once, so
 * they are ordered with the bucket's collectives without host syncs;
 * core_mem_sync waits for them. Host operations are done on return.
 * Callers pass float dtypes on a device core_mem_supported accepts (the
 * reducer checks both at create).
 */
#ifndef TPDP_DP_BUCKET_PASSES_H
#define TPDP_DP_BUCKET_PASSES_H

#include <stddef.h>

#include "tpdp/core.h"

/* p[i] /= divisor for n elements of a float dtype (divisor 1: no-op). */
tpdp_status dp_pass_divide(tpdp_device device, void *stream, tpdp_dtype dtype,
                           void *p, size_t n, double divisor);
/* dst[i] = (dst_dtype)(src[i] / divisor), n elements, float dtypes. */
tpdp_status dp_pass_cast_divide(tpdp_device device, void *stream,
                                tpdp_dtype src_dtype, const void *src,
                                tpdp_dtype dst_dtype, void *dst, size_t n,
                                double divisor);

#endif /* TPDP_DP_BUCKET_PASSES_H */
