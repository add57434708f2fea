// SPDX-License-Identifier: BSD-3-Clause
/* What every file of the fully sharded units uses (FSDP2's
 * _fsdp_common.py, with _fsdp_param.py's storage helpers): memory on the
 * unit's device from core/mem, copies, zero fills and casts there, and the
 * count of transient bytes behind tpdp_fsdp_stats. Host buffers come from
 * the group's core_mem_cache (the same sizes return every step; see
 * core/mem.h), device ones from the stream-ordered pool on the unit's
 * stream, which the memory goes back to when a free's turn comes on the
 * stream, without waiting for the device (as PyTorch's caching allocator
 * does for FSDP2). */
#include <string.h>

#include "dp/fsdp_internal.h"

tpdp_tensor fsdp_flat(const tpdp_fsdp_unit *u, void *data, tpdp_dtype dt,
                      int64_t n) {
  tpdp_tensor t = tpdp_tensor_1d(data, dt, n);
  t.device = u->device;
  return t;
}

static void transient_add(tpdp_fsdp_unit *u, int64_t bytes) {
  fsdp_group *g = u->group;
  g->transient += bytes;
  if (g->transient > g->cur.peak_transient_bytes)
    g->cur.peak_transient_bytes = g->transient;
}

tpdp_status fsdp_alloc(tpdp_fsdp_unit *u, const char *what, int64_t n,
                       tpdp_dtype dt, int transient, int zero, void **out) {
  size_t bytes = (size_t)n * tpdp_dtype_size(dt);
  void *p = NULL;
  tpdp_status st;
  if (fsdp_on_gpu(u)) {
    st = core_mem_alloc_async(u->device, bytes, u->stream, &p);
    if (st == TPDP_SUCCESS && zero) {
      tpdp_tensor t = fsdp_flat(u, p, dt, n);
      st = core_mem_zero_async(&t, u->stream);
      if (st != TPDP_SUCCESS)
        (void)core_mem_free_async(u->device, p, u->stream);
    }
  } else {
    st = core_mem_cache_get(&u->group->cache, bytes, zero, &p);
  }
  if (st != TPDP_SUCCESS)
    return TPDP_ERR(st, "unit %s on rank %d: %zu bytes for its %s: %s",
                    u->label, u->rank, bytes, what, core_error_detail());
  *out = p;
  if (transient) transient_add(u, (int64_t)bytes);
  return TPDP_SUCCESS;
}

void fsdp_free(tpdp_fsdp_unit *u, void **p, int64_t n, tpdp_dtype dt,
               int transient) {
  if (*p == NULL) return;
  size_t bytes = (size_t)n * tpdp_dtype_size(dt);
  if (fsdp_on_gpu(u))
    (void)core_mem_free_async(u->device, *p, u->stream);
  else
    core_mem_cache_put(&u->group->cache, *p, bytes);
  *p = NULL;
  if (transient) u->group->transient -= (int64_t)bytes;
}

void fsdp_release(const tpdp_fsdp_unit *u, void *p) {
  (void)core_mem_free(u->device, p);
}

tpdp_status fsdp_copy(const tpdp_fsdp_unit *u, void *dst, const void *src,
                      tpdp_dtype dt, int64_t n) {
  if (n == 0) return TPDP_SUCCESS;
  if (!fsdp_on_gpu(u)) {
    memcpy(dst, src, (size_t)n * tpdp_dtype_size(dt));
    return TPDP_SUCCESS;
  }
  tpdp_tensor d = fsdp_flat(u, dst, dt, n),
              s = fsdp_flat(u, (void *)src, dt, n);
  return core_mem_copy_async(&d, &s, u->stream);
}

tpdp_status fsdp_zero(const tpdp_fsdp_unit *u, void *dst, tpdp_dtype dt,
                      int64_t n) {
  if (n == 0) return TPDP_SUCCESS;
  if (!fsdp_on_gpu(u)) {
    memset(dst, 0, (size_t)n * tpdp_dtype_size(dt));
    return TPDP_SUCCESS;
  }
  tpdp_tensor d = fsdp_flat(u, dst, dt, n);
  return core_mem_zero_async(&d, u->stream);
}

/* A plain copy when the dtypes agree (CUDA units have f32 only: checked
 * at creation). */
tpdp_status fsdp_convert(const tpdp_fsdp_unit *u, void *dst, tpdp_dtype dd,
                         const void *src, tpdp_dtype sd, int64_t n) {
  if (dd == sd) return fsdp_copy(u, dst, src, dd, n);
  return tpdp_convert_floats(dst, dd, src, sd, n); /* host: rounds as torch */
}
