// SPDX-License-Identifier: BSD-3-Clause
/* The DDP-style gradient reducer (see tpdp/reducer.h): creation, destruction,
 * options and accessors. The iteration path is reducer_step.c, the
 * communication thread reducer_thread.c, the create-time checks
 * reducer_checks.c; their shared state is reducer_internal.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/services.h"
#include "core/mem.h"
#include "dp/reducer_internal.h"

tpdp_reducer_options tpdp_reducer_options_default(void) {
  tpdp_reducer_options o = TPDP_REDUCER_OPTIONS_INIT;
  return o;
}

/* ------------------------------------------------------------ helpers */

tpdp_status dp_check_handle(const tpdp_reducer *r) {
  if (r == NULL) return TPDP_ERR(TPDP_ERR_NULL_POINTER, "argument 'r' is NULL");
  if (r->magic != DP_REDUCER_MAGIC)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "reducer %p has been destroyed (tpdp_reducer_destroy), or "
                    "is not a reducer",
                    (const void *)r);
  return TPDP_SUCCESS;
}

int64_t dp_find_ptr(const tpdp_reducer *r, const void *data) {
  int64_t lo = 0, hi = r->nptr - 1;
  uintptr_t x = (uintptr_t)data;
  while (lo <= hi) {
    int64_t mid = lo + (hi - lo) / 2;
    uintptr_t m = (uintptr_t)r->by_ptr[mid].ptr;
    if (m == x) return r->by_ptr[mid].index;
    if (m < x)
      lo = mid + 1;
    else
      hi = mid - 1;
  }
  return -1;
}

void dp_param_desc(const tpdp_reducer *r, int64_t i, char *buf, size_t len) {
  if (r->fqns[i])
    snprintf(buf, len, "%lld ('%s')", (long long)i, r->fqns[i]);
  else
    snprintf(buf, len, "%lld", (long long)i);
}

tpdp_tensor dp_slot_view(const tpdp_reducer *r, const dp_bucket *b, int64_t k) {
  const tpdp_tensor *p = &r->params[b->params[k]].param;
  tpdp_tensor v;
  tpdp_tensor_init(&v, (char *)b->buf + b->offsets[k], p->dtype, p->device,
                   p->ndim, p->shape);
  return v;
}

static size_t align_up(size_t x) {
  return (x + DP_ALIGN - 1) & ~(DP_ALIGN - 1);
}

tpdp_status dp_free_buckets(dp_bucket *b, int64_t nb) {
  tpdp_status st = TPDP_SUCCESS;
  if (b == NULL) return st;
  for (int64_t i = 0; i < nb; i++) {
    /* Work still attached only after a failed iteration: it must finish
     * before the memory it writes goes. */
    if (b[i].work) {
      tpdp_status ws = tpdp_work_wait(b[i].work);
      if (st == TPDP_SUCCESS) st = ws;
    }
    free(b[i].params);
    free(b[i].offsets);
  }
  free(b);
  return st;
}

tpdp_status dp_build_buckets(tpdp_reducer *r, const tpdp_bucket_assignment *a,
                             void *arena, dp_bucket **out, int64_t *nout) {
  tpdp_status st = TPDP_SUCCESS;
  dp_bucket *bs = NULL;
  int64_t nb = a->nbuckets;
  size_t at = 0, half_at = 0;
  CHECK(TPDP_CALLOC(bs, (size_t)nb));
  for (int64_t j = 0; j < nb; j++) {
    dp_bucket *b = &bs[j];
    int64_t cnt = a->offsets[j + 1] - a->offsets[j];
    b->n = cnt;
    b->limit = a->limits[j];
    CHECK_GOTO(TPDP_CALLOC(b->params, (size_t)cnt), st, fail);
    CHECK_GOTO(TPDP_CALLOC(b->offsets, (size_t)cnt), st, fail);
    size_t off = 0;
    b->expect = 0;
    for (int64_t k = 0; k < cnt; k++) {
      int64_t p = a->indices[a->offsets[j] + k];
      b->params[k] = p;
      b->offsets[k] = off;
      off += tpdp_tensor_nbytes(&r->params[p].param);
      if (!r->static_learned || r->expected[p] > 0) b->expect++;
    }
    b->bytes = off;
    b->dtype = r->params[b->params[0]].param.dtype;
    b->buf = (char *)arena + at;
    at = align_up(at + b->bytes);
    if (r->half_arena != NULL && b->dtype != r->half_dtype) {
      b->half = (char *)r->half_arena + half_at;
      half_at = align_up(half_at + b->bytes / tpdp_dtype_size(b->dtype) * 2);
    }
  }
  /* The arenas have DP_ALIGN bytes of slack per parameter, and a bucket
   * holds at least one. */
  if (at > r->arena_bytes || half_at > r->half_bytes) {
    st = TPDP_ERR(TPDP_ERR_INTERNAL,
                  "bucket layout needs %zu + %zu bytes, the arenas hold %zu + "
                  "%zu",
                  at, half_at, r->arena_bytes, r->half_bytes);
    goto fail;
  }
  *out = bs;
  *nout = nb;
  return TPDP_SUCCESS;
fail:
  (void)dp_free_buckets(bs, nb); /* no work attached yet */
  return st;
}

tpdp_status dp_param_tensors(const tpdp_reducer *r, tpdp_tensor **out) {
  tpdp_tensor *t = NULL;
  CHECK(TPDP_CALLOC(t, (size_t)r->n));
  for (int64_t i = 0; i < r->n; i++) t[i] = r->params[i].param;
  *out = t;
  return TPDP_SUCCESS;
}

/* ------------------------------------------------------------ create */

static int cmp_ptr(const void *a, const void *b) {
  const dp_ptr_entry *x = (const dp_ptr_entry *)a, *y = (const dp_ptr_entry *)b;
  uintptr_t px = (uintptr_t)x->ptr, py = (uintptr_t)y->ptr;
  if (px != py) return (px > py) - (px < py);
  return (x->index > y->index) - (x->index < y->index);
}

/* The pointer index of mark_ready_ptr; TPDP_ERR_DUPLICATE for two
 * parameters over the same data. */
static tpdp_status index_pointers(tpdp_reducer *r) {
  for (int64_t i = 0; i < r->n; i++)
    if (tpdp_tensor_numel(&r->params[i].param) > 0) {
      r->by_ptr[r->nptr].ptr = r->params[i].param.data;
      r->by_ptr[r->nptr].index = i;
      r->nptr++;
    }
  qsort(r->by_ptr, (size_t)r->nptr, sizeof *r->by_ptr, cmp_ptr);
  for (int64_t k = 1; k < r->nptr; k++)
    if (r->by_ptr[k].ptr == r->by_ptr[k - 1].ptr) {
      char d1[300], d2[300];
      dp_param_desc(r, r->by_ptr[k - 1].index, d1, sizeof d1);
      dp_param_desc(r, r->by_ptr[k].index, d2, sizeof d2);
      return TPDP_ERR(TPDP_ERR_DUPLICATE,
                      "duplicate parameter: parameters %s and %s share the "
                      "same tensor data (%p); register a shared parameter "
                      "once",
                      d1, d2, r->by_ptr[k].ptr);
    }
  return TPDP_SUCCESS;
}

/* View mode with options.module: the module's parameters that are this
 * reducer's (same data pointer), each retained, for finalize's check that
 * their gradients are still the reducer's views. */
static tpdp_status watch_module_params(tpdp_reducer *r) {
  if (r->opt.module == NULL || !r->opt.gradient_as_bucket_view)
    return TPDP_SUCCESS;
  tpdp_param_fqns *map = NULL;
  CHECK(tpdp_param_fqns_create(r->opt.module, 1, NULL, 0, &map));
  int count = tpdp_param_fqns_count(map);
  tpdp_status st = TPDP_SUCCESS;
  if (count > 0) st = TPDP_CALLOC(r->mod_params, (size_t)count);
  for (int i = 0; st == TPDP_SUCCESS && i < count; i++) {
    tpdp_param *p = tpdp_param_fqns_param(map, i);
    int64_t index = dp_find_ptr(r, tpdp_param_tensor(p)->data);
    if (index < 0) continue;
    tpdp_param_retain(p);
    r->mod_params[r->nmod_params].param = p;
    r->mod_params[r->nmod_params].index = index;
    r->nmod_params++;
  }
  tpdp_param_fqns_destroy(map);
  return st;
}

/* Arenas sized for any bucket layout (see reducer_internal.h), zeroed and
 * touched now so that no step of the training loop faults pages in. */
static tpdp_status alloc_arenas(tpdp_reducer *r) {
  size_t bytes = 0, half = 0;
  int compress = r->opt.comm_hook == TPDP_REDUCER_HOOK_BF16 ||
                 r->opt.comm_hook == TPDP_REDUCER_HOOK_F16;
  r->half_dtype =
      r->opt.comm_hook == TPDP_REDUCER_HOOK_BF16 ? TPDP_BF16 : TPDP_F16;
  for (int64_t i = 0; i < r->n; i++) {
    const tpdp_tensor *p = &r->params[i].param;
    bytes += tpdp_tensor_nbytes(p) + DP_ALIGN;
    if (compress && p->dtype != r->half_dtype)
      half += (size_t)tpdp_tensor_numel(p) * 2 + DP_ALIGN;
  }
  r->arena_bytes = bytes;
  CHECK(core_mem_alloc_zeroed(r->device, bytes, &r->arena));
  /* View mode: the rebuild moves the gradients into new buckets. */
  if (r->opt.gradient_as_bucket_view && dp_rebuild_ahead(r))
    CHECK(core_mem_alloc_zeroed(r->device, bytes, &r->spare));
  if (half > 0) {
    r->half_bytes = half;
    CHECK(core_mem_alloc_zeroed(r->device, half, &r->half_arena));
  }
  return TPDP_SUCCESS;
}

tpdp_status dp_release_spare(tpdp_reducer *r) {
  tpdp_status st = TPDP_SUCCESS;
  if (r->shm != NULL && r->spare != NULL)
    comm_shm_discard(r->shm, r->spare, r->arena_bytes);
  else
    st = core_mem_free(r->device, r->spare);
  r->spare = NULL;
  return st;
}

/* Buckets reduced on the communication thread move into memory that every
 * rank of the host maps (comm_shm_create), where the thread's allreduce
 * reads the peers' buckets directly instead of going through MPI.
 * Collective (every rank has a thread or none: the options and the
 * communicator agree); called while the buckets are still empty. */
static tpdp_status share_arenas(tpdp_reducer *r) {
  if (!r->ct.active) return TPDP_SUCCESS;
  /* The spare starts on a page of its own, so that it can be given back
   * after the rebuild (comm_shm_discard). */
  size_t main_bytes = (r->arena_bytes + 4095) / 4096 * 4096;
  size_t bytes = main_bytes + (r->spare != NULL ? r->arena_bytes : 0);
  CHECK(comm_shm_create(r->comm, bytes, &r->shm));
  if (r->shm == NULL) return TPDP_SUCCESS;
  char *base = comm_shm_region(r->shm);
  for (int64_t j = 0; j < r->nbuckets; j++)
    r->buckets[j].buf = base + ((char *)r->buckets[j].buf - (char *)r->arena);
  tpdp_status st = core_mem_free(r->device, r->arena);
  r->arena = base;
  if (r->spare != NULL) {
    tpdp_status ss = core_mem_free(r->device, r->spare);
    if (st == TPDP_SUCCESS) st = ss;
    r->spare = base + main_bytes;
  }
  return st;
}

/* Everything this rank does on its own: the copies, the indexes, the
 * buckets and their memory, the thread. On failure *out holds what was
 * made (for reducer_free). */
static tpdp_status setup(tpdp_comm *comm, const tpdp_reducer_param *params,
                         int64_t n, const tpdp_reducer_options *o,
                         tpdp_reducer **out) {
  tpdp_reducer *r = NULL;
  CHECK(TPDP_CALLOC(r, 1));
  *out = r;
  r->magic = DP_REDUCER_MAGIC;
  r->comm = comm;
  /* A mesh's dim communicator: the mesh refuses to go before the reducer
   * (comm/services.h). */
  r->mesh = comm_mesh_hold_by_comm(comm, COMM_MESH_REDUCER);
  r->stream = tpdp_comm_nccl_stream(comm);
  r->device = params[0].param.device;
  r->solo = tpdp_comm_size(comm) == 1;
  r->n = n;
  r->opt = *o;
  r->divide = o->divide_factor > 0 ? o->divide_factor : tpdp_comm_size(comm);
  r->sync = 1;
  CHECK(TPDP_CALLOC(r->params, (size_t)n));
  CHECK(TPDP_CALLOC(r->fqns, (size_t)n));
  CHECK(TPDP_CALLOC(r->views, (size_t)n));
  CHECK(TPDP_CALLOC(r->bucket_of, (size_t)n));
  CHECK(TPDP_CALLOC(r->mark_iter, (size_t)n));
  CHECK(TPDP_CALLOC(r->marks, (size_t)n));
  CHECK(TPDP_CALLOC(r->expected, (size_t)n));
  CHECK(TPDP_CALLOC(r->last_seq, (size_t)n));
  CHECK(TPDP_CALLOC(r->unused, (size_t)n));
  CHECK(TPDP_CALLOC(r->by_ptr, (size_t)n));
  if (dp_rebuild_ahead(r)) {
    /* finalize never allocates: the rebuild's order is made in place */
    CHECK(TPDP_CALLOC(r->rebuild_order, (size_t)n));
    CHECK(TPDP_CALLOC(r->sort_tmp, (size_t)n));
  }
  for (int64_t i = 0; i < n; i++) {
    r->params[i] = params[i];
    if (params[i].fqn) {
      r->fqns[i] = core_strdup(params[i].fqn);
      if (r->fqns[i] == NULL)
        return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY,
                        "out of memory copying the name of parameter %lld",
                        (long long)i);
    }
    r->params[i].fqn = r->fqns[i];
    r->views[i] = params[i].grad;
  }
  CHECK(index_pointers(r));
  CHECK(watch_module_params(r));
  CHECK(alloc_arenas(r));
  tpdp_tensor *metas = NULL;
  tpdp_bucket_assignment a;
  memset(&a, 0, sizeof a);
  size_t limits[2] = {o->first_bucket_bytes, o->bucket_cap_bytes};
  tpdp_status st = dp_param_tensors(r, &metas);
  if (st == TPDP_SUCCESS)
    st = tpdp_bucket_assign(metas, n, limits, 2, NULL, &a);
  /* DDP's first buckets hold the last parameters; their gradients come
   * first in backward. */
  if (st == TPDP_SUCCESS) st = tpdp_bucket_assignment_reverse(&a);
  if (st == TPDP_SUCCESS)
    st = dp_build_buckets(r, &a, r->arena, &r->buckets, &r->nbuckets);
  tpdp_bucket_assignment_free(&a);
  free(metas);
  CHECK(st);
  return dp_thread_start(r);
}

/* Point each parameter's gradient at its slot (view mode: with the
 * caller's current values copied in, and the caller's params[i].grad
 * re-pointed too). */
static tpdp_status install(tpdp_reducer *r, tpdp_reducer_param *caller) {
  /* From the first re-pointed gradient on, destroy (also the one of a
   * failed create) points the caller's gradients back. */
  if (r->opt.gradient_as_bucket_view) r->caller = caller;
  for (int64_t j = 0; j < r->nbuckets; j++) {
    dp_bucket *b = &r->buckets[j];
    for (int64_t k = 0; k < b->n; k++) {
      int64_t p = b->params[k];
      r->bucket_of[p] = j;
      if (!r->opt.gradient_as_bucket_view) continue;
      tpdp_tensor v = dp_slot_view(r, b, k);
      const tpdp_tensor *old = &r->params[p].grad;
      if (old->data != NULL && tpdp_tensor_numel(&v) > 0)
        CHECK(core_mem_copy_async(&v, old, r->stream));
      r->views[p] = v;
      caller[p].grad = v;
    }
  }
  /* Device gradient views hold their values before the caller uses them. */
  return core_mem_sync(r->device, r->stream);
}

/* The first failure of a sequence of cleanup steps, with its message. */
typedef struct {
  tpdp_status st;
  char msg[1024];
} first_failure;

static void keep(first_failure *f, tpdp_status st) {
  if (st == TPDP_SUCCESS || f->st != TPDP_SUCCESS) return;
  f->st = st;
  snprintf(f->msg, sizeof f->msg, "%s", core_error_detail());
}

/* View mode: the caller's gradients leave the buckets before they are
 * freed: each current value is copied into the caller's own buffer (the
 * one given to create; a NULL one is left NULL) and params[i].grad points
 * at that buffer again. */
static tpdp_status restore_caller_grads(tpdp_reducer *r) {
  tpdp_status st = TPDP_SUCCESS;
  if (r->caller == NULL) return st;
  for (int64_t i = 0; i < r->n; i++) {
    tpdp_tensor *own = &r->params[i].grad;
    if (own->data != NULL && r->views[i].data != own->data &&
        tpdp_tensor_numel(own) > 0 && st == TPDP_SUCCESS)
      st = core_mem_copy(own, &r->views[i]);
    r->caller[i].grad = *own;
  }
  return st;
}

/* Wait for what is in flight, stop the thread, free everything; the first
 * failure (everything is freed regardless). */
static tpdp_status reducer_free(tpdp_reducer *r) {
  if (r == NULL) return TPDP_SUCCESS;
  first_failure f = {TPDP_SUCCESS, ""};
  /* Buckets handed over must finish before their memory goes. */
  if (r->in_iter) keep(&f, dp_abort_iteration(r));
  keep(&f, dp_thread_stop(r));
  keep(&f, dp_free_buckets(r->buckets, r->nbuckets));
  keep(&f, restore_caller_grads(r));
  if (r->mesh != NULL) comm_mesh_release(r->mesh, COMM_MESH_REDUCER);
  r->magic = 0;
  if (r->shm != NULL) {
    comm_shm_free(r->shm); /* arena and spare with it */
  } else {
    keep(&f, core_mem_free(r->device, r->arena));
    keep(&f, core_mem_free(r->device, r->spare));
  }
  keep(&f, core_mem_free(r->device, r->half_arena));
  if (r->fqns)
    for (int64_t i = 0; i < r->n; i++) free(r->fqns[i]);
  free(r->fqns);
  free(r->params);
  free(r->views);
  free(r->bucket_of);
  free(r->mark_iter);
  free(r->marks);
  free(r->expected);
  free(r->last_seq);
  free(r->unused);
  free(r->by_ptr);
  for (int64_t i = 0; i < r->nmod_params; i++)
    tpdp_param_release(r->mod_params[i].param);
  free(r->mod_params);
  free(r->rebuild_order);
  free(r->sort_tmp);
  free(r);
  if (f.st != TPDP_SUCCESS) return TPDP_ERR(f.st, "%s", f.msg);
  return TPDP_SUCCESS;
}

tpdp_status tpdp_reducer_create(tpdp_comm *comm, tpdp_reducer_param *params,
                                int64_t nparams,
                                const tpdp_reducer_options *options,
                                tpdp_reducer **out) {
  TPDP_API_ENTRY;
  CHECK_PTR(out);
  *out = NULL;
  CHECK_PTR(comm);
  tpdp_reducer_options o;
  tpdp_reducer *r = NULL;
  tpdp_status st = dp_options_resolve(options, &o);
  if (st == TPDP_SUCCESS) st = dp_check_local(comm, params, nparams, &o);
  if (st == TPDP_SUCCESS) st = setup(comm, params, nparams, &o, &r);
  /* Every local failure (bad input, memory) is agreed before anything
   * collective, so that no rank is left waiting for another. */
  CHECK_GOTO(tpdp_comm_agree(comm, st, NULL), st, fail);
  CHECK_GOTO(dp_check_across(comm, params, nparams, &o), st, fail);
  if (o.broadcast_from_rank0) {
    /* Device parameters: the broadcast runs on the communicator's stream,
     * after whatever wrote them on the producer stream (MPI: a no-op). */
    CHECK_GOTO(tpdp_comm_order_after(comm, o.producer_stream), st, fail);
    for (int64_t i = 0; i < nparams; i++) {
      tpdp_tensor *p = &r->params[i].param;
      if (tpdp_tensor_numel(p) == 0) continue;
      CHECK_GOTO(tpdp_broadcast(comm, p, p, 0), st, fail);
    }
  } else {
    /* Replicas already: nothing to copy. Anything else is a wrong
     * communicator (e.g. the TP one) or replicas initialised apart. */
    CHECK_GOTO(dp_check_values(comm, r->params, nparams, o.producer_stream), st,
               fail);
  }
  CHECK_GOTO(share_arenas(r), st, fail);
  CHECK_GOTO(install(r, params), st, fail);
  /* tpdp_finalize refuses to run under a live reducer (its thread and
   * buckets still use the communicator). */
  char what[200];
  snprintf(what, sizeof what, "reducer on '%s' (%lld parameters)",
           tpdp_comm_name(comm), (long long)nparams);
  CHECK_GOTO(comm_live_add(r, what), st, fail);
  TPDP_INFO(
      "reducer on %s: %lld parameters in %lld buckets, %s mode, divide by "
      "%g%s",
      tpdp_comm_name(comm), (long long)nparams, (long long)r->nbuckets,
      o.gradient_as_bucket_view ? "view" : "copy", r->divide,
      r->solo        ? ", one rank: no communication"
      : r->shm       ? ", communication thread, shared-memory buckets"
      : r->ct.active ? ", communication thread"
                     : "");
  *out = r;
  return TPDP_SUCCESS;
fail:
  (void)reducer_free(r); /* st is the failure to report */
  return st;
}

tpdp_status tpdp_reducer_destroy(tpdp_reducer *r) {
  TPDP_API_ENTRY;
  if (r == NULL) return TPDP_SUCCESS;
  CHECK(dp_check_handle(r));
  comm_live_remove(r);
  return reducer_free(r);
}

/* ------------------------------------------------------------ accessors */

tpdp_status tpdp_reducer_grad_view(const tpdp_reducer *r, int64_t index,
                                   tpdp_tensor *out) {
  TPDP_API_ENTRY;
  CHECK(dp_check_handle(r));
  CHECK_PTR(out);
  if (index < 0 || index >= r->n)
    return TPDP_ERR(TPDP_ERR_NOT_FOUND,
                    "unknown parameter index %lld: the reducer has %lld "
                    "parameters",
                    (long long)index, (long long)r->n);
  *out = r->views[index];
  return TPDP_SUCCESS;
}

int64_t tpdp_reducer_num_buckets(const tpdp_reducer *r) {
  return r && r->magic == DP_REDUCER_MAGIC ? r->nbuckets : 0;
}

tpdp_status tpdp_reducer_bucket(const tpdp_reducer *r, int64_t bucket,
                                const int64_t **params, int64_t *count,
                                size_t *bytes, size_t *limit) {
  TPDP_API_ENTRY;
  CHECK(dp_check_handle(r));
  if (bucket < 0 || bucket >= r->nbuckets)
    return TPDP_ERR(TPDP_ERR_NOT_FOUND,
                    "unknown bucket %lld: the reducer has %lld buckets",
                    (long long)bucket, (long long)r->nbuckets);
  const dp_bucket *b = &r->buckets[bucket];
  if (params) *params = b->params;
  if (count) *count = b->n;
  if (bytes) *bytes = b->bytes;
  if (limit) *limit = b->limit;
  return TPDP_SUCCESS;
}

tpdp_status tpdp_reducer_unused_params(const tpdp_reducer *r,
                                       const int64_t **params, int64_t *count) {
  TPDP_API_ENTRY;
  CHECK(dp_check_handle(r));
  CHECK_PTR(params);
  CHECK_PTR(count);
  *params = r->unused;
  *count = r->nunused;
  return TPDP_SUCCESS;
}

int tpdp_reducer_rebuilt(const tpdp_reducer *r) {
  return r && r->magic == DP_REDUCER_MAGIC ? r->rebuilt : 0;
}

tpdp_status tpdp_reducer_get_stats(const tpdp_reducer *r,
                                   tpdp_reducer_stats *out) {
  TPDP_API_ENTRY;
  CHECK(dp_check_handle(r));
  CHECK_PTR(out);
  *out = r->stats;
  return TPDP_SUCCESS;
}
