// SPDX-License-Identifier: BSD-3-Clause
/* The reducer's per-iteration path (see tpdp/reducer.h): prepare (with the
 * one-time rebuild of the buckets in gradient-ready order), mark_ready,
 * the in-order launch of ready buckets, progress of the non-blocking
 * collectives, and finalize. See reducer_internal.h for why none of it
 * allocates or walks every parameter in a normal step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/mem.h"
#include "dp/buffers.h"
#include "dp/reducer_internal.h"

/* Marks of parameter p in the current iteration. */
static int marks_now(const tpdp_reducer *r, int64_t p) {
  return r->mark_iter[p] == r->iter ? r->marks[p] : 0;
}

/* p holds local gradient data not yet reduced (marked in this iteration or
 * in a no_sync one since the last reduction). */
static int touched(const tpdp_reducer *r, int64_t p) {
  return r->mark_iter[p] > r->reduced_iter;
}

int dp_rebuild_ahead(const tpdp_reducer *r) {
  /* As DDP: not with find_unused_parameters unless the graph is static.
   * One rank has no launches to overlap. */
  return (r->opt.static_graph || !r->opt.find_unused_parameters) && !r->solo;
}

/* Up to 8 unmarked parameters, "3 ('a'), 5 ('b') and 2 more" (an error
 * path: it walks every parameter). */
static int64_t list_unmarked(const tpdp_reducer *r, char *buf, size_t len) {
  int64_t cnt = 0;
  size_t pos = 0;
  buf[0] = '\0';
  for (int64_t i = 0; i < r->n; i++) {
    if (marks_now(r, i) > 0) continue;
    if (r->static_learned && r->expected[i] == 0) continue;
    if (cnt < 8 && pos < len) {
      char d[300];
      dp_param_desc(r, i, d, sizeof d);
      int w = snprintf(buf + pos, len - pos, "%s%s", cnt ? ", " : "", d);
      if (w > 0) pos += (size_t)w;
    }
    cnt++;
  }
  if (cnt > 8 && pos < len)
    snprintf(buf + pos, len - pos, " and %lld more", (long long)(cnt - 8));
  return cnt;
}

/* Gradients are marked and reduced outside the module's forward: inside it
 * the parameters are DTensors (the TP+DP transform), not the local tensors
 * the reducer holds. */
static tpdp_status check_not_in_forward(const tpdp_reducer *r,
                                        const char *what) {
  if (r->opt.module == NULL || !tpdp_module_in_forward(r->opt.module))
    return TPDP_SUCCESS;
  char lbl[256];
  tpdp_module_label(r->opt.module, lbl, sizeof lbl);
  return TPDP_ERR(TPDP_ERR_STATE,
                  "%s inside the forward of module '%s' (between "
                  "tpdp_module_forward_begin and tpdp_module_forward_end, "
                  "where its parameters are DTensors): expected state "
                  "FORWARD_BACKWARD outside forward, actual: in forward",
                  what, lbl);
}

/* The iteration is over: the module's step ends too. */
static tpdp_status end_iteration(tpdp_reducer *r) {
  r->in_iter = 0;
  if (r->opt.module == NULL) return TPDP_SUCCESS;
  return tpdp_module_set_state(r->opt.module, TPDP_STATE_IDLE);
}

/* ------------------------------------------------------------ launch */

/* Reduce `view` (bucket j's buffer or its 16-bit copy): hand it to the
 * communication thread, or start a non-blocking collective. On one rank
 * the reduction is the identity. */
static tpdp_status start_reduction(tpdp_reducer *r, int64_t j,
                                   const tpdp_tensor *view) {
  dp_bucket *b = &r->buckets[j];
  b->comm_view = *view;
  if (r->solo) {
    b->done = 1;
    return TPDP_SUCCESS;
  }
  if (r->ct.active) {
    dp_thread_hand(r, j);
    return TPDP_SUCCESS;
  }
  DP_CHECK_TIMED(r, comm_seconds,
                 tpdp_allreduce_async(r->comm, &b->comm_view, &b->comm_view,
                                      TPDP_OP_SUM, &b->work));
  return TPDP_SUCCESS;
}

/* 1 if bucket b (reduced without a hook) can be averaged by the
 * allreduce itself (TPDP_OP_AVG) instead of a divide pass before a SUM:
 * host memory, f32/f64, the divide factor is the communicator size, and
 * the reduction is a blocking call on the communication thread (the
 * non-blocking path keeps divide + SUM: its AVG would be a pass at
 * completion all the same). f16/bf16 keep dividing first, which also keeps
 * their sum from overflowing. For these dtypes dividing the sum and
 * summing the quotients differ only in rounding, and not at all for a
 * power-of-two size. */
static int fuse_avg(const tpdp_reducer *r, const dp_bucket *b) {
  return r->ct.active && (b->dtype == TPDP_F32 || b->dtype == TPDP_F64) &&
         r->divide == (double)tpdp_comm_size(r->comm);
}

static tpdp_status launch(tpdp_reducer *r, int64_t j) {
  dp_bucket *b = &r->buckets[j];
  b->launched = 1;
  b->done = 0;
  b->fused_avg = 0;
  b->thread_prepares = 0;
  /* Device buckets: everything below runs on the communicator's stream,
   * after the gradient producer (MPI: a no-op). */
  CHECK(tpdp_comm_order_after(r->comm, r->opt.producer_stream));
  for (int64_t k = 0; k < b->n; k++) {
    int64_t p = b->params[k];
    if (touched(r, p) && r->opt.gradient_as_bucket_view) continue;
    tpdp_tensor slot = dp_slot_view(r, b, k);
    if (tpdp_tensor_numel(&slot) == 0) continue;
    /* Unused since the last reduction: contributes zero. */
    if (!touched(r, p))
      DP_CHECK_TIMED(r, data_seconds, core_mem_zero_async(&slot, r->stream));
    else
      DP_CHECK_TIMED(r, data_seconds,
                     core_mem_copy_async(&slot, &r->params[p].grad, r->stream));
  }
  size_t n = b->bytes / tpdp_dtype_size(b->dtype);
  tpdp_tensor flat = tpdp_tensor_1d(b->buf, b->dtype, (int64_t)n);
  flat.device = r->device;
  if (r->opt.comm_hook == TPDP_REDUCER_HOOK_USER) {
    tpdp_reducer_hook_args args = {r->comm, j, &flat, r->divide,
                                   r->opt.hook_user_data};
    tpdp_status st = r->opt.hook_fn(&args);
    b->done = 1;
    if (st != TPDP_SUCCESS)
      return TPDP_ERR(st, "user comm hook failed on bucket %lld: %s",
                      (long long)j, tpdp_last_error());
    return TPDP_SUCCESS;
  }
  /* With a communication thread the averaging (and casting) pass runs
   * there, so the caller's thread is free for backward as soon as the
   * bucket is handed over. */
  b->thread_prepares = r->ct.active;
  if (b->half != NULL) { /* a compression hook, another dtype */
    tpdp_tensor h = tpdp_tensor_1d(b->half, r->half_dtype, (int64_t)n);
    h.device = r->device;
    if (!b->thread_prepares)
      DP_CHECK_TIMED(r, data_seconds,
                     dp_buf_cast_divide(r->device, r->stream, b->dtype, b->buf,
                                        r->half_dtype, b->half, n, r->divide));
    return start_reduction(r, j, &h);
  }
  /* Averaging over the whole communicator on the host: the thread's
   * blocking allreduce runs as AVG, which the MPI backend folds into its
   * reduction (a ring that divides while it adds, for large f32/f64
   * messages), instead of a separate pass over the bucket. */
  b->fused_avg = fuse_avg(r, b);
  if (b->fused_avg || r->divide == 1.0)
    b->thread_prepares = 0; /* no pass at all */
  else if (!b->thread_prepares)
    DP_CHECK_TIMED(
        r, data_seconds,
        dp_buf_divide(r->device, r->stream, b->dtype, b->buf, n, r->divide));
  return start_reduction(r, j, &flat);
}

static tpdp_status launch_ready(tpdp_reducer *r) {
  while (r->next_launch < r->nbuckets &&
         r->buckets[r->next_launch].pending == 0) {
    int64_t j = r->next_launch++;
    CHECK(launch(r, j));
  }
  return TPDP_SUCCESS;
}

/* Test in-flight non-blocking reductions, oldest first, to drive MPI
 * progress. */
static tpdp_status progress(tpdp_reducer *r) {
  while (r->first_inflight < r->next_launch) {
    dp_bucket *b = &r->buckets[r->first_inflight];
    if (b->work && !b->done) {
      int d = 0;
      DP_CHECK_TIMED(r, comm_seconds, tpdp_work_test(b->work, &d));
      if (!d) return TPDP_SUCCESS;
      b->done = 1;
    }
    r->first_inflight++;
  }
  return TPDP_SUCCESS;
}

/* Wait for bucket j and leave its final gradients in place. */
static tpdp_status complete(tpdp_reducer *r, int64_t j) {
  dp_bucket *b = &r->buckets[j];
  tpdp_status st;
  if (r->ct.active) CHECK(dp_thread_wait(r, j));
  if (b->work) {
    DP_TIMED(r, comm_seconds, st, tpdp_work_wait(b->work));
    b->work = NULL;
    CHECK(st);
  }
  b->done = 1;
  size_t n = b->bytes / tpdp_dtype_size(b->dtype);
  if (b->half != NULL)
    DP_CHECK_TIMED(r, data_seconds,
                   dp_buf_cast_divide(r->device, r->stream, r->half_dtype,
                                      b->half, b->dtype, b->buf, n, 1.0));
  if (!r->opt.gradient_as_bucket_view) {
    for (int64_t k = 0; k < b->n; k++) {
      tpdp_tensor slot = dp_slot_view(r, b, k);
      if (tpdp_tensor_numel(&slot) == 0) continue;
      DP_CHECK_TIMED(
          r, data_seconds,
          core_mem_copy_async(&r->params[b->params[k]].grad, &slot, r->stream));
    }
  }
  return TPDP_SUCCESS;
}

tpdp_status dp_abort_iteration(tpdp_reducer *r) {
  /* Whatever was handed over or started must finish (its peers run it
   * too) before the iteration's memory can be reused. */
  tpdp_status st = dp_thread_drain(r);
  for (int64_t j = 0; j < r->nbuckets; j++) {
    dp_bucket *b = &r->buckets[j];
    if (b->work == NULL) continue;
    tpdp_status ws = tpdp_work_wait(b->work);
    b->work = NULL;
    if (st == TPDP_SUCCESS) st = ws;
  }
  /* The gradients of this iteration are consumed (partly reduced): none
   * counts as accumulated into the next one. */
  r->reduced_iter = r->iter;
  r->in_iter = 0;
  return st;
}

/* A failure inside the iteration's launches ends the iteration (see
 * dp_abort_iteration); the failure is what the caller gets. */
static tpdp_status fail_iteration(tpdp_reducer *r, tpdp_status st) {
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", core_error_detail());
  /* What the waits report follows from this failure (or is this failure,
   * seen by the communication thread): `st` is the one to report. */
  (void)dp_abort_iteration(r);
  (void)end_iteration(r); /* IDLE: cannot fail */
  return TPDP_ERR(st,
                  "%s (the iteration was abandoned: call "
                  "tpdp_reducer_prepare to start the next one)",
                  msg);
}

/* ------------------------------------------------------------ rebuild */

/* 1 if the buckets `nb` (count nnb) hold the same parameters in the same
 * order as the current ones. */
static int same_layout(const tpdp_reducer *r, const dp_bucket *nb,
                       int64_t nnb) {
  if (nnb != r->nbuckets) return 0;
  for (int64_t j = 0; j < nnb; j++) {
    const dp_bucket *a = &r->buckets[j], *b = &nb[j];
    if (a->n != b->n ||
        memcmp(a->params, b->params, (size_t)a->n * sizeof *a->params) != 0)
      return 0;
  }
  return 1;
}

/* Rebuild the buckets in rank 0's gradient-ready order (collective). A
 * failure on any rank fails every rank and leaves the buckets as they
 * were, with the rebuild still ahead. */
static tpdp_status rebuild(tpdp_reducer *r) {
  tpdp_status st;
  tpdp_bucket_assignment a;
  memset(&a, 0, sizeof a);
  tpdp_tensor *metas = NULL;
  dp_bucket *nb = NULL;
  int64_t nnb = 0;
  tpdp_tensor ord = tpdp_tensor_1d(r->rebuild_order, TPDP_I64, r->n);
  DP_CHECK_TIMED(r, comm_seconds, dp_buf_host_broadcast(r->comm, &ord, 0));
  size_t limits[2] = {r->opt.first_bucket_bytes, r->opt.bucket_cap_bytes};
  /* View mode: the gradients move into the spare arena (the current one
   * is freed afterwards); copy mode re-slices the current one. */
  void *target = r->opt.gradient_as_bucket_view ? r->spare : r->arena;
  st = dp_param_tensors(r, &metas);
  if (st == TPDP_SUCCESS)
    st = tpdp_bucket_assign(metas, r->n, limits, 2, r->rebuild_order, &a);
  if (st == TPDP_SUCCESS) st = dp_build_buckets(r, &a, target, &nb, &nnb);
  tpdp_bucket_assignment_free(&a);
  free(metas);
  DP_TIMED(r, comm_seconds, st, tpdp_comm_agree(r->comm, st, NULL));
  if (st != TPDP_SUCCESS) goto done;
  if (same_layout(r, nb, nnb)) {
    /* Nothing moves; keep the limits the ready order gave. */
    for (int64_t j = 0; j < nnb; j++) r->buckets[j].limit = nb[j].limit;
    goto rebuilt;
  }
  if (r->opt.gradient_as_bucket_view)
    for (int64_t j = 0; j < nnb; j++)
      for (int64_t k = 0; k < nb[j].n; k++) {
        int64_t p = nb[j].params[k];
        tpdp_tensor v = dp_slot_view(r, &nb[j], k);
        if (tpdp_tensor_numel(&v) > 0)
          DP_TIMED(r, data_seconds, st,
                   core_mem_copy_async(&v, &r->views[p], r->stream));
        if (st != TPDP_SUCCESS) goto done;
      }
  DP_TIMED(r, data_seconds, st, core_mem_sync(r->device, r->stream));
  if (st != TPDP_SUCCESS) goto done;
  /* Swap in: nothing fails from here on. */
  for (int64_t j = 0; j < nnb; j++)
    for (int64_t k = 0; k < nb[j].n; k++) {
      int64_t p = nb[j].params[k];
      r->bucket_of[p] = j;
      if (r->opt.gradient_as_bucket_view)
        r->views[p] = dp_slot_view(r, &nb[j], k);
    }
  (void)dp_free_buckets(r->buckets, r->nbuckets); /* no work between steps */
  r->buckets = nb;
  r->nbuckets = nnb;
  nb = NULL;
  if (r->opt.gradient_as_bucket_view) {
    void *old = r->arena;
    r->arena = r->spare;
    r->spare = old; /* freed below */
  }
  TPDP_INFO(
      "reducer on %s: buckets rebuilt in gradient-ready order (%lld "
      "buckets)",
      tpdp_comm_name(r->comm), (long long)r->nbuckets);
rebuilt:
  r->rebuilt = 1;
  r->rebuild_pending = 0;
  /* The spare arena's last use: the memory goes back now (no rank
   * touches it again: every reduction of the last iteration is over). */
  st = dp_release_spare(r);
done:
  if (nb) (void)dp_free_buckets(nb, nnb);
  return st;
}

/* ------------------------------------------------------------ prepare */

/* The body of a public per-iteration call: the handle checked, `call`
 * timed into the reducer's total (tpdp_reducer_stats), its status
 * returned. */
#define TIMED_ENTRY(r, call)                   \
  TPDP_API_ENTRY;                              \
  CHECK(dp_check_handle(r));                   \
  tpdp_status timed_st_;                       \
  DP_TIMED(r, total_seconds, timed_st_, call); \
  return timed_st_

static tpdp_status prepare(tpdp_reducer *r) {
  if (r->in_iter) {
    char list[1024];
    int64_t cnt = list_unmarked(r, list, sizeof list);
    if (cnt > 0)
      return TPDP_ERR(
          TPDP_ERR_STATE,
          "a new iteration started before the previous reduction finished: "
          "%lld parameter(s) were never marked ready: %s. If they do not "
          "take part in the loss, create the reducer with "
          "find_unused_parameters = 1; otherwise mark them and call "
          "tpdp_reducer_finalize",
          (long long)cnt, list);
    return TPDP_ERR(TPDP_ERR_STATE,
                    "a new iteration started before the previous one was "
                    "finalized: call tpdp_reducer_finalize after backward");
  }
  if (r->opt.module != NULL) {
    static const tpdp_training_state allowed[2] = {TPDP_STATE_IDLE,
                                                   TPDP_STATE_FORWARD_BACKWARD};
    CHECK(tpdp_module_check_state(r->opt.module, allowed, 2));
  }
  if (r->rebuild_pending) CHECK(rebuild(r));
  /* Nothing below fails: the iteration starts. */
  r->iter++;
  r->nmarked = 0;
  for (int64_t j = 0; j < r->nbuckets; j++) {
    dp_bucket *b = &r->buckets[j];
    b->launched = 0;
    b->done = 0;
    b->pending = b->expect;
  }
  r->next_launch = 0;
  r->first_inflight = 0;
  dp_thread_reset(r);
  r->in_iter = 1;
  if (r->opt.module != NULL)
    CHECK(tpdp_module_set_state(r->opt.module, TPDP_STATE_FORWARD_BACKWARD));
  return TPDP_SUCCESS;
}

tpdp_status tpdp_reducer_prepare(tpdp_reducer *r) {
  TIMED_ENTRY(r, prepare(r));
}

/* ------------------------------------------------------------ mark */

static tpdp_status mark(tpdp_reducer *r, int64_t index) {
  if (index < 0 || index >= r->n)
    return TPDP_ERR(TPDP_ERR_NOT_FOUND,
                    "unknown parameter index %lld: the reducer has %lld "
                    "parameters",
                    (long long)index, (long long)r->n);
  char d[300];
  if (!r->in_iter) {
    dp_param_desc(r, index, d, sizeof d);
    return TPDP_ERR(TPDP_ERR_STATE,
                    "parameter %s marked ready outside an iteration: call "
                    "tpdp_reducer_prepare before backward",
                    d);
  }
  if (r->opt.module != NULL && tpdp_module_in_forward(r->opt.module)) {
    dp_param_desc(r, index, d, sizeof d);
    char what[400];
    snprintf(what, sizeof what, "parameter %s marked ready", d);
    return check_not_in_forward(r, what);
  }
  int learning = r->opt.static_graph && !r->static_learned;
  int expect = r->static_learned ? r->expected[index] : 1;
  int m = marks_now(r, index);
  if (!learning && m >= expect) {
    dp_param_desc(r, index, d, sizeof d);
    if (r->static_learned)
      return TPDP_ERR(TPDP_ERR_ALREADY,
                      "parameter %s was marked ready %d time(s) this "
                      "iteration, more than the %d recorded in the first "
                      "iteration of the static graph: the graph changed",
                      d, m + 1, expect);
    return TPDP_ERR(TPDP_ERR_ALREADY,
                    "parameter %s was marked ready twice in one iteration. "
                    "Likely causes: the parameter is shared and used more "
                    "than once in forward (its gradient hook fires once per "
                    "use), or a reentrant backward (e.g. activation "
                    "checkpointing) ran its hook again. Mark it once after "
                    "its gradient is complete, or create the reducer with "
                    "static_graph = 1 if the graph is the same every "
                    "iteration (find_unused_parameters = 1 if some "
                    "parameters are unused)",
                    d);
  }
  if (m == 0) {
    r->mark_iter[index] = r->iter;
    r->marks[index] = 0;
    r->nmarked++;
  }
  r->marks[index]++;
  r->last_seq[index] = ++r->seq;
  if (learning || !r->sync) return TPDP_SUCCESS;
  tpdp_status st = TPDP_SUCCESS;
  if (r->marks[index] == expect &&
      --r->buckets[r->bucket_of[index]].pending == 0)
    st = launch_ready(r);
  if (st == TPDP_SUCCESS) st = progress(r);
  return st == TPDP_SUCCESS ? st : fail_iteration(r, st);
}

tpdp_status tpdp_reducer_mark_ready(tpdp_reducer *r, int64_t index) {
  TIMED_ENTRY(r, mark(r, index));
}

static tpdp_status mark_ptr(tpdp_reducer *r, const void *data) {
  int64_t index = dp_find_ptr(r, data);
  if (index >= 0) return mark(r, index);
  return TPDP_ERR(TPDP_ERR_NOT_FOUND,
                  "no parameter of this reducer has data pointer %p (the "
                  "reducer knows the parameters' data pointers given to "
                  "tpdp_reducer_create: a parameter reallocated since needs "
                  "a new reducer)",
                  data);
}

tpdp_status tpdp_reducer_mark_ready_ptr(tpdp_reducer *r, const void *data) {
  TIMED_ENTRY(r, mark_ptr(r, data));
}

/* ------------------------------------------------------------ finalize */

static int cmp_key(const void *a, const void *b) {
  const dp_key_entry *x = (const dp_key_entry *)a, *y = (const dp_key_entry *)b;
  if (x->key != y->key) return (x->key > y->key) - (x->key < y->key);
  return (x->index > y->index) - (x->index < y->index);
}

/* After the first synchronised iteration: the order the next prepare
 * rebuilds in (by last mark; never-marked parameters last, by index). */
static void plan_rebuild(tpdp_reducer *r) {
  for (int64_t i = 0; i < r->n; i++) {
    r->sort_tmp[i].key = marks_now(r, i) ? r->last_seq[i] : INT64_MAX;
    r->sort_tmp[i].index = i;
  }
  qsort(r->sort_tmp, (size_t)r->n, sizeof *r->sort_tmp, cmp_key);
  for (int64_t i = 0; i < r->n; i++) r->rebuild_order[i] = r->sort_tmp[i].index;
  r->rebuild_pending = 1;
}

/* The first synchronised iteration of a static graph: how often each
 * parameter is marked from now on, and what each bucket waits for. */
static void learn_static_graph(tpdp_reducer *r) {
  for (int64_t i = 0; i < r->n; i++) r->expected[i] = marks_now(r, i);
  for (int64_t j = 0; j < r->nbuckets; j++) {
    dp_bucket *b = &r->buckets[j];
    b->expect = 0;
    for (int64_t k = 0; k < b->n; k++)
      b->expect += r->expected[b->params[k]] > 0;
  }
  r->static_learned = 1;
}

/* The module's FQN of p (an error path: it walks the tree), or "?". */
static void module_fqn(const tpdp_reducer *r, const tpdp_param *p, char *buf,
                       size_t len) {
  tpdp_param_fqns *map = NULL;
  int i = -1;
  snprintf(buf, len, "?");
  if (tpdp_param_fqns_create(r->opt.module, 1, NULL, 0, &map) == TPDP_SUCCESS &&
      tpdp_param_fqns_find(map, p, &i) == TPDP_SUCCESS)
    snprintf(buf, len, "%s", tpdp_param_fqns_get(map, i, 0));
  tpdp_param_fqns_destroy(map);
}

/* View mode with options.module: the module parameters that are ours must
 * still have the reducer's views as gradients. One that was re-pointed at
 * a buffer of its own (a gradient cleared to NULL is not) was left out of
 * the reduction. One pointer comparison per such parameter. */
static tpdp_status check_module_grads(const tpdp_reducer *r) {
  int64_t bad = 0, first = -1;
  for (int64_t k = 0; k < r->nmod_params; k++) {
    const tpdp_tensor *g = tpdp_param_grad(r->mod_params[k].param);
    if (g != NULL && g->data != NULL &&
        g->data != r->views[r->mod_params[k].index].data && bad++ == 0)
      first = k;
  }
  if (bad == 0) return TPDP_SUCCESS;
  const dp_module_param *m = &r->mod_params[first];
  char d[300], fqn[300];
  dp_param_desc(r, m->index, d, sizeof d);
  module_fqn(r, m->param, fqn, sizeof fqn);
  return TPDP_ERR(
      TPDP_ERR_STATE,
      "the gradient of parameter %s (module parameter '%s') was replaced: "
      "it points at %p, not at the reducer's gradient view %p, so it was "
      "left out of the reduction (%lld module parameter(s) like this). In "
      "gradient-as-bucket-view mode write gradients into the reducer's "
      "views (tpdp_reducer_grad_view, read again after a prepare that "
      "rebuilt the buckets) instead of replacing them",
      d, fqn, tpdp_param_grad(m->param)->data, r->views[m->index].data,
      (long long)bad);
}

static tpdp_status finalize(tpdp_reducer *r) {
  if (!r->in_iter)
    return TPDP_ERR(TPDP_ERR_STATE,
                    "finalize without prepare: expected the reducer in state "
                    "FORWARD_BACKWARD (between tpdp_reducer_prepare and "
                    "tpdp_reducer_finalize), actual state IDLE; call "
                    "tpdp_reducer_prepare at the start of the iteration "
                    "(before backward)");
  if (r->opt.module != NULL) {
    static const tpdp_training_state allowed[1] = {TPDP_STATE_FORWARD_BACKWARD};
    CHECK(tpdp_module_check_state(r->opt.module, allowed, 1));
    CHECK(check_not_in_forward(r, "finalize called"));
  }
  if (!r->sync) return end_iteration(r);
  int lenient = r->opt.find_unused_parameters || r->opt.static_graph;
  if (!lenient && r->nmarked < r->n) {
    char list[1024];
    int64_t cnt = list_unmarked(r, list, sizeof list);
    return TPDP_ERR(
        TPDP_ERR_STATE,
        "%lld parameter(s) were never marked ready in this iteration: %s. "
        "If they do not take part in the loss, create the reducer with "
        "find_unused_parameters = 1; otherwise mark them ready and call "
        "tpdp_reducer_finalize again",
        (long long)cnt, list);
  }

  /* Unused parameters: ready now, contributing zero unless accumulated
   * (a walk over every parameter only in a step that has some). */
  r->nunused = 0;
  if (r->nmarked < r->n) {
    for (int64_t i = 0; i < r->n; i++)
      if (marks_now(r, i) == 0) r->unused[r->nunused++] = i;
    if (tpdp_log_get_level() >= TPDP_LOG_INFO) {
      char list[1024];
      list_unmarked(r, list, sizeof list);
      TPDP_INFO("reducer on %s: %lld unused parameter(s) this iteration: %s",
                tpdp_comm_name(r->comm), (long long)r->nunused, list);
    }
  }
  for (int64_t j = r->next_launch; j < r->nbuckets; j++)
    r->buckets[j].pending = 0;
  tpdp_status st = launch_ready(r);
  for (int64_t j = 0; j < r->nbuckets; j++) {
    if (!r->buckets[j].launched) continue;
    tpdp_status cs = complete(r, j);
    if (st == TPDP_SUCCESS) st = cs;
  }
  /* Device buckets: the casts and copy-backs queued by complete() are done
   * before the caller reads the gradients (MPI: a no-op). The wait counts
   * as data: it waits for those passes and for the device work queued
   * before them (on one rank, the producer's backward), not for tpdp's own
   * bookkeeping. */
  tpdp_status ss = TPDP_SUCCESS;
  if (r->device.type != TPDP_DEVICE_CPU)
    DP_TIMED(r, data_seconds, ss, core_mem_sync(r->device, r->stream));
  if (st == TPDP_SUCCESS) st = ss;
  if (st != TPDP_SUCCESS) return fail_iteration(r, st);

  if (r->opt.static_graph && !r->static_learned) learn_static_graph(r);
  r->synced_iters++;
  if (r->synced_iters == 1 && dp_rebuild_ahead(r)) plan_rebuild(r);
  r->reduced_iter = r->iter;
  /* Checked once the reduction is complete: a rank whose check fails has
   * taken part in every collective and ends the iteration as its peers
   * do (the next prepare, rebuild included, matches theirs); only its
   * status differs. */
  tpdp_status gs = check_module_grads(r);
  CHECK(end_iteration(r));
  return gs;
}

/* An iteration counts once its finalize succeeded. */
static tpdp_status finalize_counted(tpdp_reducer *r) {
  CHECK(finalize(r));
  r->stats.iterations++;
  return TPDP_SUCCESS;
}

tpdp_status tpdp_reducer_finalize(tpdp_reducer *r) {
  TIMED_ENTRY(r, finalize_counted(r));
}

tpdp_status tpdp_reducer_set_sync(tpdp_reducer *r, int sync) {
  TPDP_API_ENTRY;
  CHECK(dp_check_handle(r));
  if (r->in_iter)
    return TPDP_ERR(TPDP_ERR_STATE,
                    "cannot change sync inside an iteration (between "
                    "prepare and finalize)");
  r->sync = sync ? 1 : 0;
  return TPDP_SUCCESS;
}
