// SPDX-License-Identifier: BSD-3-Clause
/*
 * Internal: host or device memory for the layers above core (tp/, dp/):
 * allocation, zero fill, copies and frees of memory that may live on a GPU.
 * One copy of these helpers; tp/ and dp/ call nothing else to touch tensor
 * bytes outside their communicators. Not installed.
 *
 * Host memory always. CUDA device memory in a build with --config=cuda
 * (TPDP_WITH_CUDA; cudaMalloc/cudaFree and core/tensor_cuda.h's copies and
 * zero fill); without it a device is TPDP_ERR_UNSUPPORTED naming it.
 *
 * Two kinds of device operations:
 *  - synchronous (core_mem_copy, core_mem_zero, core_mem_alloc*): on the
 *    legacy default stream, returning once the bytes are in place;
 *  - stream-ordered (*_async): queued on `stream` (a cudaStream_t; NULL is
 *    the legacy default stream), returning at once; core_mem_sync waits.
 * On the host every operation is done on return and `stream` is ignored.
 */
#ifndef TPDP_CORE_MEM_H
#define TPDP_CORE_MEM_H

#include <stddef.h>

#include "tpdp/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* TPDP_SUCCESS if memory on `device` can be handled in this build (cpu;
 * cuda when built with CUDA), else TPDP_ERR_UNSUPPORTED naming `what` (e.g.
 * "parameter 0 'fc.weight'") and the device. */
tpdp_status core_mem_supported(tpdp_device device, const char *what);

/* `bytes` bytes (0: a valid 1-byte allocation) on `device`, uninitialised.
 * Errors: TPDP_ERR_UNSUPPORTED, TPDP_ERR_OUT_OF_MEMORY / TPDP_ERR_CUDA
 * naming the size. */
tpdp_status core_mem_alloc(tpdp_device device, size_t bytes, void **out);
/* Same, zero-filled. On the host every page is mapped and written now, so
 * none faults in later in a hot path (a first touch costs tens of
 * microseconds a page on some VMs); on a GPU the zeros are complete before
 * any stream uses the memory. */
tpdp_status core_mem_alloc_zeroed(tpdp_device device, size_t bytes, void **out);
/* Map every page of host memory [p, p + n) now, writing it (its contents
 * are kept only where they are zeros: for fresh memory). */
void core_mem_populate(void *p, size_t n);
/* Free a core_mem_alloc* pointer (NULL: no-op). Device: cudaFree, which
 * waits for work queued on the memory; its failure is returned. */
tpdp_status core_mem_free(tpdp_device device, void *p);
/* Stream-ordered allocation and free (CUDA's stream-ordered allocator,
 * cudaMallocAsync / cudaFreeAsync on `stream`): the memory may be used by
 * work queued on `stream` after the allocation, and goes back to the
 * device's pool once the work queued on `stream` before the free is done,
 * without a host synchronisation (cudaFree would wait for the whole
 * device). Use on another stream must be ordered after `stream` (events).
 * Host: core_mem_alloc / core_mem_free. */
tpdp_status core_mem_alloc_async(tpdp_device device, size_t bytes, void *stream,
                                 void **out);
tpdp_status core_mem_free_async(tpdp_device device, void *p, void *stream);
/* core_mem_free for cleanup paths: returns `st` if it is a failure (the
 * first one wins), else the free's own status. */
tpdp_status core_mem_free_keep(tpdp_device device, void *p, tpdp_status st);

/* A buffer reused from call to call (a collective's packing space), so
 * that a hot path pays for an allocation and its first-touch page faults
 * once instead of every call: 80 MB malloc'ed and freed per call cost more
 * than the copy it held (tp/redistribute.c). It grows to the largest
 * request and stays until core_scratch_free; one user at a time. Zero it
 * with {0} ("empty"). */
typedef struct {
  tpdp_device device;
  void *data;
  size_t bytes;
} core_scratch;
/* At least `bytes` bytes on `device`, uninitialised: s's buffer when it is
 * large enough and on that device, else a new one (the old one freed, its
 * contents lost). Errors as core_mem_alloc; s is then empty. */
tpdp_status core_scratch_get(core_scratch *s, tpdp_device device, size_t bytes,
                             void **out);
/* Free s's buffer (empty: no-op); s is empty after. */
tpdp_status core_scratch_free(core_scratch *s);

/* Host buffers kept for reuse, for an owner that frees and asks again for
 * the same sizes on every step of a hot path (the fully sharded units'
 * gathered parameters, full gradients and communication buffers, dp/), as
 * PyTorch's caching allocator keeps device memory. A freed buffer keeps
 * its pages mapped for the next request of its size: a fresh mapping
 * costs a page fault for every page written (on the 2-core development
 * VM, 500 MB took 270 ms to write fresh against 20 ms to write again).
 *
 * Requests below CORE_MEM_CACHE_MIN_BYTES are plain core_mem_alloc /
 * core_mem_free (malloc's heap reuses small blocks well). Larger ones are
 * rounded up to a size class (8 per power of two, so at most 1/8 more
 * than asked; only the bytes asked for are ever written by the cache) and
 * served by a kept buffer of that class, else by core_mem_alloc. At most
 * CORE_MEM_CACHE_SLOTS buffers are kept; one given back beyond that is
 * freed. Every request counts as one allocation of core_alloc_fail_at
 * (core/util.h), served from the cache or not, so a test reaches each.
 *
 * Host memory only: device memory has CUDA's stream-ordered pool
 * (core_mem_alloc_async), which caches by itself. A buffer from the cache
 * may also be freed with core_mem_free. One thread at a time; zero it with
 * {0} ("empty"). */
#define CORE_MEM_CACHE_MIN_BYTES ((size_t)1 << 20)
#define CORE_MEM_CACHE_SLOTS 64
typedef struct {
  void *data[CORE_MEM_CACHE_SLOTS];
  size_t bytes[CORE_MEM_CACHE_SLOTS]; /* each buffer's size class */
  int n;
} core_mem_cache;
/* `bytes` bytes of host memory, zero-filled when `zero` (on a new buffer
 * every page of them written now, as core_mem_alloc_zeroed). Errors as
 * core_mem_alloc (c unchanged). */
tpdp_status core_mem_cache_get(core_mem_cache *c, size_t bytes, int zero,
                               void **out);
/* Give back p (NULL: no-op), got from core_mem_cache_get for `bytes`
 * bytes (the same count: it names p's size class). */
void core_mem_cache_put(core_mem_cache *c, void *p, size_t bytes);
/* Free every kept buffer; c is empty after. */
void core_mem_cache_release(core_mem_cache *c);

/* dst = src elementwise: any strides, same shape and dtype (else
 * SHAPE/DTYPE_MISMATCH naming both), host or device on either side.
 * Synchronous. */
tpdp_status core_mem_copy(tpdp_tensor *dst, const tpdp_tensor *src);
/* Every element of dst (any strides) = 0. Synchronous. */
tpdp_status core_mem_zero(tpdp_tensor *dst);

/* Stream-ordered forms (both views on the same kind of memory: host, or
 * device memory the current context can reach). */
tpdp_status core_mem_copy_async(tpdp_tensor *dst, const tpdp_tensor *src,
                                void *stream);
tpdp_status core_mem_zero_async(tpdp_tensor *dst, void *stream);
/* Wait on the host until the work queued on `stream` of `device` is done
 * (host device: no-op). */
tpdp_status core_mem_sync(tpdp_device device, void *stream);

#ifdef __cplusplus
}
#endif
#endif /* TPDP_CORE_MEM_H */
