/* The DDP-style gradient reducer (see tpdp/reducer.h).
 *
 * State per iteration: how often each parameter was marked, how many
 * parameters each bucket still waits for, and the next bucket to launch
 * (buckets launch strictly in order). Bucket memory is touched only through
 * dp/buffers.h so that the device path stays in one file. */
#include "tpdp/reducer.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/check.h"
#include "dp/buffers.h"

#define DESC_LEN (2 + TPDP_MAX_DIMS) /* dtype, ndim, shape[8] */

/* Errors raised in helpers carry the public entry point's name. */

typedef struct {
  int64_t n;       /* parameters in the bucket */
  int64_t *params; /* their indices, in bucket order */
  size_t *offsets; /* byte offset of each in buf */
  size_t bytes, limit;
  tpdp_dtype dtype;
  tpdp_device device;
  void *buf;  /* contiguous gradients */
  void *half; /* 16-bit copy for the compression hooks */
  tpdp_dtype half_dtype;
  int64_t pending; /* parameters not yet ready this iteration */
  int launched;
  int done; /* reduction complete (tested) */
  tpdp_work *work;
  tpdp_tensor comm_view; /* what the communication thread reduces */
  int thread_prepares;   /* the thread divides (and casts) before reducing */
  int fused_avg;         /* reduce with TPDP_OP_AVG: no divide pass */
} dp_bucket;

/* The communication thread of a host (MPI) reducer. Open MPI's
 * non-blocking collectives progress only inside MPI calls and run slower
 * algorithms than the blocking ones, so a launched bucket is handed to this
 * thread, which runs the blocking allreduce while the caller goes on with
 * backward. Buckets launch in order, so the queue is two counters. */
typedef struct {
  int active;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t more; /* launched grew, or stop */
  pthread_cond_t done; /* finished grew */
  int64_t launched;    /* buckets [0, launched) handed over this iteration */
  int64_t finished;    /* buckets [0, finished) reduced (or failed) */
  int stop;
  tpdp_status status; /* first failure of this iteration */
  char message[1024]; /* its tpdp_last_error(), from the thread */
} comm_thread;

typedef struct {
  const void *ptr;
  int64_t index;
} ptr_entry;

typedef struct {
  int64_t key, index;
} key_entry;

static int cmp_key(const void *a, const void *b) {
  const key_entry *x = (const key_entry *)a, *y = (const key_entry *)b;
  if (x->key != y->key) return (x->key > y->key) - (x->key < y->key);
  return (x->index > y->index) - (x->index < y->index);
}

struct tpdp_reducer {
  tpdp_comm *comm;
  void *stream; /* the comm's CUDA stream (NCCL) for bucket ops; NULL on MPI */
  tpdp_reducer_param *params; /* the caller's array */
  int64_t n;
  tpdp_reducer_options opt;
  double divide;
  char **fqns;
  tpdp_tensor *views; /* current grad views (slots in view mode) */
  int64_t *bucket_of;
  ptr_entry *by_ptr;
  int64_t nptr;

  dp_bucket *buckets;
  int64_t nbuckets;
  int64_t next_launch;
  int64_t first_inflight;

  int *marks;             /* marks this iteration */
  int *expected;          /* static graph: marks per iteration, learned */
  unsigned char *touched; /* marked in any step since the last reduction */
  int64_t *last_seq;      /* sequence number of the last mark (first sync) */
  int64_t seq;

  int in_iter;
  int sync;
  int64_t synced_iters;
  int static_learned;
  int rebuilt;
  int rebuild_pending;
  int64_t *rebuild_order;

  int64_t *unused;
  int64_t nunused;

  tpdp_reducer_stats stats;
  comm_thread ct;
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Run `call` (a tpdp_status expression) adding its time to stats.field;
 * the status lands in `st_out`. */
#define TIMED(r, field, st_out, call)  \
  do {                                 \
    double t0_ = now_s();              \
    (st_out) = (call);                 \
    (r)->stats.field += now_s() - t0_; \
  } while (0)
#define CHECK_TIMED(r, field, call)      \
  do {                                   \
    tpdp_status ct_;                     \
    TIMED(r, field, ct_, call);          \
    if (ct_ != TPDP_SUCCESS) return ct_; \
  } while (0)

/* "3 ('fc.weight')" or "3" */
static void pdesc(const tpdp_reducer *r, int64_t i, char *buf, size_t len) {
  if (r->fqns[i])
    snprintf(buf, len, "%lld ('%s')", (long long)i, r->fqns[i]);
  else
    snprintf(buf, len, "%lld", (long long)i);
}

tpdp_reducer_options tpdp_reducer_options_default(void) {
  tpdp_reducer_options o;
  memset(&o, 0, sizeof o);
  o.first_bucket_bytes = TPDP_BUCKET_FIRST_BYTES;
  o.bucket_cap_bytes = TPDP_BUCKET_CAP_BYTES;
  o.gradient_as_bucket_view = 1;
  o.find_unused_parameters = 0;
  o.static_graph = 0;
  o.divide_factor = 0.0;
  o.comm_hook = TPDP_REDUCER_HOOK_NONE;
  o.comm_thread = 1;
  return o;
}

/* ------------------------------------------------------------ buckets */

static void free_buckets(dp_bucket *b, int64_t nb) {
  if (b == NULL) return;
  for (int64_t i = 0; i < nb; i++) {
    if (b[i].work) tpdp_work_wait(b[i].work);
    free(b[i].params);
    free(b[i].offsets);
    if (b[i].buf) dp_buf_free(b[i].device, b[i].buf);
    if (b[i].half) dp_buf_free(b[i].device, b[i].half);
  }
  free(b);
}

static tpdp_tensor slot_view(const tpdp_reducer *r, const dp_bucket *b,
                             int64_t k) {
  const tpdp_tensor *p = &r->params[b->params[k]].param;
  tpdp_tensor v;
  tpdp_tensor_init(&v, (char *)b->buf + b->offsets[k], p->dtype, p->device,
                   p->ndim, p->shape);
  return v;
}

/* Build buckets from an assignment; bucket order = `reverse` ? reversed :
 * as given. On success replaces nothing: the caller swaps them in. */
static tpdp_status build_buckets(tpdp_reducer *r,
                                 const tpdp_bucket_assignment *a, int reverse,
                                 dp_bucket **out, int64_t *nout) {
  tpdp_status st = TPDP_SUCCESS;
  dp_bucket *bs = NULL;
  int64_t nb = a->nbuckets;
  CHECK(TPDP_CALLOC(bs, (size_t)nb));
  for (int64_t j = 0; j < nb; j++) {
    int64_t src = reverse ? nb - 1 - j : j;
    dp_bucket *b = &bs[j];
    int64_t cnt = a->offsets[src + 1] - a->offsets[src];
    b->n = cnt;
    b->limit = a->limits[src];
    CHECK_GOTO(TPDP_CALLOC(b->params, (size_t)cnt), st, fail);
    CHECK_GOTO(TPDP_CALLOC(b->offsets, (size_t)cnt), st, fail);
    size_t off = 0;
    for (int64_t k = 0; k < cnt; k++) {
      int64_t p = a->indices[a->offsets[src] + k];
      b->params[k] = p;
      b->offsets[k] = off;
      off += tpdp_tensor_nbytes(&r->params[p].param);
    }
    b->bytes = off;
    b->dtype = r->params[b->params[0]].param.dtype;
    b->device = r->params[b->params[0]].param.device;
    CHECK_GOTO(dp_buf_alloc(b->device, b->bytes, &b->buf), st, fail);
  }
  *out = bs;
  *nout = nb;
  return TPDP_SUCCESS;
fail:
  free_buckets(bs, nb);
  return st;
}

/* Point views (and, in view mode, the caller's grads) at the slots of the
 * buckets; in view mode first copy the gradients' current values in. */
static tpdp_status install_buckets(tpdp_reducer *r, dp_bucket *bs, int64_t nb) {
  for (int64_t j = 0; j < nb; j++) {
    dp_bucket *b = &bs[j];
    for (int64_t k = 0; k < b->n; k++) {
      int64_t p = b->params[k];
      r->bucket_of[p] = j;
      if (!r->opt.gradient_as_bucket_view) continue;
      tpdp_tensor v = slot_view(r, b, k);
      const tpdp_tensor *old = r->views[p].data ? &r->views[p] : NULL;
      if (old == NULL && r->params[p].grad.data) old = &r->params[p].grad;
      if (old && tpdp_tensor_numel(&v) > 0)
        CHECK(dp_buf_copy_tensor(r->stream, &v, old));
      r->views[p] = v;
      r->params[p].grad = v;
    }
  }
  return TPDP_SUCCESS;
}

/* ------------------------------------------------------------ launch */

static void *comm_thread_main(void *arg) {
  tpdp_reducer *r = arg;
  comm_thread *ct = &r->ct;
  pthread_mutex_lock(&ct->mu);
  for (;;) {
    while (!ct->stop && ct->finished == ct->launched)
      pthread_cond_wait(&ct->more, &ct->mu);
    if (ct->stop) break;
    int64_t j = ct->finished;
    int failed = ct->status != TPDP_SUCCESS;
    pthread_mutex_unlock(&ct->mu);
    /* After a failure the rest of the iteration is skipped: its peers
     * may be stuck in the failed collective. */
    tpdp_status st = TPDP_SUCCESS;
    if (!failed) {
      dp_bucket *b = &r->buckets[j];
      tpdp_tensor *v = &b->comm_view;
      size_t n = b->bytes / tpdp_dtype_size(b->dtype);
      /* divide before the reduction (16-bit: cast and divide, which also
       * keeps the sum from overflowing) */
      if (b->thread_prepares)
        st = v->data == b->buf
                 ? dp_buf_divide(b->device, r->stream, b->dtype, b->buf, n,
                                 r->divide)
                 : dp_buf_cast_divide(b->device, r->stream, b->dtype, b->buf,
                                      v->dtype, v->data, n, r->divide);
      if (st == TPDP_SUCCESS)
        st = tpdp_allreduce(r->comm, v, v,
                            b->fused_avg ? TPDP_OP_AVG : TPDP_OP_SUM);
    }
    pthread_mutex_lock(&ct->mu);
    if (st != TPDP_SUCCESS && ct->status == TPDP_SUCCESS) {
      ct->status = st;
      snprintf(ct->message, sizeof ct->message, "bucket %lld: %s", (long long)j,
               tpdp_last_error());
    }
    ct->finished = j + 1;
    pthread_cond_broadcast(&ct->done);
  }
  pthread_mutex_unlock(&ct->mu);
  return NULL;
}

/* Start the thread if this reducer can use one: host memory, a backend
 * that allows collectives from two threads, and no user hook (user hooks
 * run on the caller's thread, as documented). */
static tpdp_status comm_thread_start(tpdp_reducer *r) {
  comm_thread *ct = &r->ct;
  if (!r->opt.comm_thread ||
      tpdp_comm_device_type(r->comm) != TPDP_DEVICE_CPU ||
      !tpdp_comm_concurrent_threads(r->comm) ||
      r->opt.comm_hook == TPDP_REDUCER_HOOK_USER)
    return TPDP_SUCCESS;
  if (pthread_mutex_init(&ct->mu, NULL) != 0)
    return TPDP_ERR(TPDP_ERR_INTERNAL, "pthread_mutex_init failed");
  if (pthread_cond_init(&ct->more, NULL) != 0 ||
      pthread_cond_init(&ct->done, NULL) != 0) {
    pthread_mutex_destroy(&ct->mu);
    return TPDP_ERR(TPDP_ERR_INTERNAL, "pthread_cond_init failed");
  }
  int rc = pthread_create(&ct->thread, NULL, comm_thread_main, r);
  if (rc != 0) {
    pthread_cond_destroy(&ct->more);
    pthread_cond_destroy(&ct->done);
    pthread_mutex_destroy(&ct->mu);
    return TPDP_ERR(TPDP_ERR_INTERNAL,
                    "could not start the reducer's communication thread: %s",
                    strerror(rc));
  }
  ct->active = 1;
  return TPDP_SUCCESS;
}

static void comm_thread_stop(tpdp_reducer *r) {
  comm_thread *ct = &r->ct;
  if (!ct->active) return;
  pthread_mutex_lock(&ct->mu);
  ct->stop = 1;
  pthread_cond_signal(&ct->more);
  pthread_mutex_unlock(&ct->mu);
  pthread_join(ct->thread, NULL);
  pthread_cond_destroy(&ct->more);
  pthread_cond_destroy(&ct->done);
  pthread_mutex_destroy(&ct->mu);
  ct->active = 0;
}

/* A new iteration: nothing handed over yet. The thread is idle here (the
 * previous iteration's finalize waited for every bucket). */
static void comm_thread_reset(tpdp_reducer *r) {
  comm_thread *ct = &r->ct;
  if (!ct->active) return;
  pthread_mutex_lock(&ct->mu);
  ct->launched = ct->finished = 0;
  ct->status = TPDP_SUCCESS;
  ct->message[0] = '\0';
  pthread_mutex_unlock(&ct->mu);
}

/* Reduce `view` (bucket j's buffer or its 16-bit copy): hand it to the
 * communication thread, or start a non-blocking collective. */
static tpdp_status start_reduction(tpdp_reducer *r, int64_t j,
                                   const tpdp_tensor *view) {
  dp_bucket *b = &r->buckets[j];
  b->comm_view = *view;
  if (r->ct.active) {
    pthread_mutex_lock(&r->ct.mu);
    r->ct.launched = j + 1;
    pthread_cond_signal(&r->ct.more);
    pthread_mutex_unlock(&r->ct.mu);
    return TPDP_SUCCESS;
  }
  CHECK_TIMED(r, comm_seconds,
              tpdp_allreduce_async(r->comm, &b->comm_view, &b->comm_view,
                                   TPDP_OP_SUM, &b->work));
  return TPDP_SUCCESS;
}

/* Wait until the communication thread has reduced bucket j. */
static tpdp_status comm_thread_wait(tpdp_reducer *r, int64_t j) {
  comm_thread *ct = &r->ct;
  double t0 = now_s();
  pthread_mutex_lock(&ct->mu);
  while (ct->finished <= j) pthread_cond_wait(&ct->done, &ct->mu);
  tpdp_status st = ct->status;
  pthread_mutex_unlock(&ct->mu);
  r->stats.comm_seconds += now_s() - t0;
  if (st != TPDP_SUCCESS)
    return TPDP_ERR(st,
                    "allreduce on the reducer's communication thread "
                    "failed: %s",
                    ct->message);
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
  return r->ct.active && b->device.type == TPDP_DEVICE_CPU &&
         (b->dtype == TPDP_F32 || b->dtype == TPDP_F64) &&
         r->divide == (double)tpdp_comm_size(r->comm);
}

static tpdp_status launch(tpdp_reducer *r, int64_t j) {
  dp_bucket *b = &r->buckets[j];
  b->launched = 1;
  b->done = 0;
  b->fused_avg = 0;
  /* Device buckets: everything below runs on the communicator's stream,
   * after the gradient producer (MPI: a no-op). */
  CHECK(tpdp_comm_order_after(r->comm, r->opt.producer_stream));
  for (int64_t k = 0; k < b->n; k++) {
    int64_t p = b->params[k];
    tpdp_tensor slot = slot_view(r, b, k);
    size_t nbytes = tpdp_tensor_nbytes(&slot);
    if (nbytes == 0) continue;
    if (!r->touched[p])
      CHECK_TIMED(r, data_seconds,
                  dp_buf_zero(b->device, r->stream, slot.data, nbytes));
    else if (!r->opt.gradient_as_bucket_view)
      CHECK_TIMED(r, data_seconds,
                  dp_buf_copy_tensor(r->stream, &slot, &r->params[p].grad));
  }
  size_t es = tpdp_dtype_size(b->dtype);
  size_t n = b->bytes / es;
  tpdp_tensor flat = tpdp_tensor_1d(b->buf, b->dtype, (int64_t)n);
  flat.device = b->device;
  switch (r->opt.comm_hook) {
    case TPDP_REDUCER_HOOK_USER: {
      tpdp_reducer_hook_args args = {r->comm, j, &flat, r->divide,
                                     r->opt.hook_user_data};
      tpdp_status st = r->opt.hook_fn(&args);
      b->done = 1;
      if (st != TPDP_SUCCESS)
        return TPDP_ERR(st, "user comm hook failed on bucket %lld: %s",
                        (long long)j, tpdp_last_error());
      return TPDP_SUCCESS;
    }
    case TPDP_REDUCER_HOOK_BF16:
    case TPDP_REDUCER_HOOK_F16: {
      tpdp_dtype hd =
          r->opt.comm_hook == TPDP_REDUCER_HOOK_BF16 ? TPDP_BF16 : TPDP_F16;
      if (hd != b->dtype) {
        if (b->half == NULL) {
          CHECK(dp_buf_alloc(b->device, n * 2, &b->half));
          b->half_dtype = hd;
        }
        b->thread_prepares = r->ct.active;
        if (!b->thread_prepares)
          CHECK_TIMED(r, data_seconds,
                      dp_buf_cast_divide(b->device, r->stream, b->dtype, b->buf,
                                         hd, b->half, n, r->divide));
        tpdp_tensor h = tpdp_tensor_1d(b->half, hd, (int64_t)n);
        h.device = b->device;
        return start_reduction(r, j, &h);
      }
      break; /* already 16-bit of the hook's type: as NONE */
    }
    case TPDP_REDUCER_HOOK_NONE:
      break;
  }
  /* Averaging over the whole communicator on the host: the thread's
   * blocking allreduce runs as AVG, which the MPI backend folds into its
   * reduction (a ring that divides while it adds, for large f32/f64
   * messages), instead of a separate pass over the bucket. */
  b->fused_avg = fuse_avg(r, b);
  if (b->fused_avg) {
    b->thread_prepares = 0;
    return start_reduction(r, j, &flat);
  }
  /* With a communication thread the averaging pass runs there too, so the
   * caller's thread is free for backward as soon as the bucket is handed
   * over. */
  b->thread_prepares = r->ct.active;
  if (!b->thread_prepares)
    CHECK_TIMED(
        r, data_seconds,
        dp_buf_divide(b->device, r->stream, b->dtype, b->buf, n, r->divide));
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

/* Test in-flight reductions, oldest first, to drive MPI progress. */
static tpdp_status progress(tpdp_reducer *r) {
  while (r->first_inflight < r->next_launch) {
    dp_bucket *b = &r->buckets[r->first_inflight];
    if (b->work && !b->done) {
      int d = 0;
      CHECK_TIMED(r, comm_seconds, tpdp_work_test(b->work, &d));
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
  tpdp_status st = TPDP_SUCCESS;
  if (r->ct.active && r->opt.comm_hook != TPDP_REDUCER_HOOK_USER)
    CHECK(comm_thread_wait(r, j));
  if (b->work) {
    TIMED(r, comm_seconds, st, tpdp_work_wait(b->work));
    b->work = NULL;
    CHECK(st);
  }
  b->done = 1;
  size_t n = b->bytes / tpdp_dtype_size(b->dtype);
  if (r->opt.comm_hook != TPDP_REDUCER_HOOK_USER && b->half &&
      b->half_dtype != b->dtype &&
      ((r->opt.comm_hook == TPDP_REDUCER_HOOK_BF16 &&
        b->half_dtype == TPDP_BF16) ||
       (r->opt.comm_hook == TPDP_REDUCER_HOOK_F16 &&
        b->half_dtype == TPDP_F16)))
    CHECK_TIMED(r, data_seconds,
                dp_buf_cast_divide(b->device, r->stream, b->half_dtype, b->half,
                                   b->dtype, b->buf, n, 1.0));
  if (!r->opt.gradient_as_bucket_view) {
    for (int64_t k = 0; k < b->n; k++) {
      int64_t p = b->params[k];
      tpdp_tensor slot = slot_view(r, b, k);
      if (tpdp_tensor_numel(&slot) == 0) continue;
      CHECK_TIMED(r, data_seconds,
                  dp_buf_copy_tensor(r->stream, &r->params[p].grad, &slot));
    }
  }
  return TPDP_SUCCESS;
}

/* ------------------------------------------------------------ create */

static int cmp_ptr(const void *a, const void *b) {
  const ptr_entry *x = (const ptr_entry *)a, *y = (const ptr_entry *)b;
  uintptr_t px = (uintptr_t)x->ptr, py = (uintptr_t)y->ptr;
  if (px != py) return (px > py) - (px < py);
  return (x->index > y->index) - (x->index < y->index);
}

static void fill_desc(const tpdp_tensor *t, int64_t *d) {
  d[0] = t->dtype;
  d[1] = t->ndim;
  for (int k = 0; k < TPDP_MAX_DIMS; k++)
    d[2 + k] = k < t->ndim ? t->shape[k] : 0;
}

static void format_desc(const int64_t *d, char *buf, size_t len) {
  char shape[128];
  int64_t sh[TPDP_MAX_DIMS];
  int nd = (int)d[1];
  if (nd < 0 || nd > TPDP_MAX_DIMS) nd = 0;
  for (int k = 0; k < nd; k++) sh[k] = d[2 + k];
  tpdp_shape_format(nd, sh, shape, sizeof shape);
  snprintf(buf, len, "%s %s", tpdp_dtype_name((tpdp_dtype)d[0]), shape);
}

/* Checks that need no communication. */
static tpdp_status check_local(tpdp_comm *comm, tpdp_reducer_param *params,
                               int64_t n, const tpdp_reducer_options *o) {
  if (n <= 0)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "empty parameter list (nparams = %lld): a reducer needs "
                    "at least one parameter",
                    (long long)n);
  if (params == NULL)
    return TPDP_ERR(TPDP_ERR_NULL_POINTER, "argument 'params' is NULL");
  if (o->first_bucket_bytes == 0 || o->bucket_cap_bytes == 0)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "bucket size limits must be > 0 bytes (first_bucket_bytes "
                    "= %zu, bucket_cap_bytes = %zu)",
                    o->first_bucket_bytes, o->bucket_cap_bytes);
  if (!(o->divide_factor >= 0.0))
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "divide_factor %g must be > 0 (or 0 for the "
                    "communicator size)",
                    o->divide_factor);
  if ((int)o->comm_hook < 0 || o->comm_hook > TPDP_REDUCER_HOOK_USER)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT, "unknown comm hook %d",
                    (int)o->comm_hook);
  if (o->comm_hook == TPDP_REDUCER_HOOK_USER && o->hook_fn == NULL)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "comm_hook is TPDP_REDUCER_HOOK_USER but hook_fn is NULL");
  char a[64], b[64];
  for (int64_t i = 0; i < n; i++) {
    const tpdp_reducer_param *p = &params[i];
    const char *f = p->fqn ? p->fqn : "";
    if (!tpdp_dtype_is_float(p->param.dtype))
      return TPDP_ERR(TPDP_ERR_DTYPE_MISMATCH,
                      "parameter %lld '%s' has dtype %s: gradients must be "
                      "floating point (f32, f64, f16, bf16)",
                      (long long)i, f, tpdp_dtype_name(p->param.dtype));
    if (p->param.ndim < 0 || p->param.ndim > TPDP_MAX_DIMS)
      return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                      "parameter %lld '%s' has ndim %d", (long long)i, f,
                      p->param.ndim);
    if (!tpdp_device_equal(p->param.device, params[0].param.device)) {
      tpdp_device_format(params[0].param.device, a, sizeof a);
      tpdp_device_format(p->param.device, b, sizeof b);
      return TPDP_ERR(TPDP_ERR_DEVICE_MISMATCH,
                      "parameters on mixed devices: parameter 0 '%s' is on %s "
                      "but parameter %lld '%s' is on %s; one reducer serves "
                      "one device (one DP communicator per device)",
                      params[0].fqn ? params[0].fqn : "", a, (long long)i, f,
                      b);
    }
    if (!tpdp_device_equal(p->grad.device, p->param.device)) {
      tpdp_device_format(p->param.device, a, sizeof a);
      tpdp_device_format(p->grad.device, b, sizeof b);
      return TPDP_ERR(TPDP_ERR_DEVICE_MISMATCH,
                      "parameter %lld '%s' is on %s but its gradient on %s",
                      (long long)i, f, a, b);
    }
  }
  char pn[256];
  snprintf(pn, sizeof pn, "parameter 0 '%s'",
           params[0].fqn ? params[0].fqn : "");
  CHECK(dp_buf_device_supported(params[0].param.device, pn));
  if (params[0].param.device.type != tpdp_comm_device_type(comm)) {
    tpdp_device_format(params[0].param.device, a, sizeof a);
    return TPDP_ERR(
        TPDP_ERR_DEVICE_MISMATCH,
        "parameters are on %s but communicator %s (%s) moves %s "
        "memory",
        a, tpdp_comm_name(comm), tpdp_comm_backend(comm),
        tpdp_comm_device_type(comm) == TPDP_DEVICE_CPU ? "host" : "device");
  }
  for (int64_t i = 0; i < n; i++) {
    const tpdp_reducer_param *p = &params[i];
    const char *f = p->fqn ? p->fqn : "";
    int64_t numel = tpdp_tensor_numel(&p->param);
    if (numel < 0)
      return TPDP_ERR(TPDP_ERR_BAD_DIM_SIZE,
                      "parameter %lld '%s' has a "
                      "negative dimension",
                      (long long)i, f);
    if (!tpdp_tensor_is_contiguous(&p->param))
      return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                      "parameter %lld '%s' is not contiguous", (long long)i, f);
    if (numel > 0 && p->param.data == NULL)
      return TPDP_ERR(TPDP_ERR_NULL_POINTER,
                      "parameter %lld '%s' has NULL data", (long long)i, f);
    if (p->grad.dtype != p->param.dtype)
      return TPDP_ERR(TPDP_ERR_DTYPE_MISMATCH,
                      "parameter %lld '%s' is %s but its gradient is %s",
                      (long long)i, f, tpdp_dtype_name(p->param.dtype),
                      tpdp_dtype_name(p->grad.dtype));
    if (!tpdp_tensor_same_shape(&p->grad, &p->param)) {
      tpdp_shape_format(p->param.ndim, p->param.shape, a, sizeof a);
      tpdp_shape_format(p->grad.ndim, p->grad.shape, b, sizeof b);
      return TPDP_ERR(TPDP_ERR_SHAPE_MISMATCH,
                      "parameter %lld '%s' has shape %s but its gradient %s",
                      (long long)i, f, a, b);
    }
    if (numel > 0 && p->grad.data == NULL && !o->gradient_as_bucket_view)
      return TPDP_ERR(TPDP_ERR_NULL_POINTER,
                      "parameter %lld '%s' has a NULL gradient (copy mode "
                      "needs the caller's gradient buffers)",
                      (long long)i, f);
  }
  return TPDP_SUCCESS;
}

/* Every rank learns whether every rank passed its local checks. */
static tpdp_status agree(tpdp_comm *comm, tpdp_status mine) {
  int size = tpdp_comm_size(comm);
  int32_t *all = NULL;
  int32_t me = (int32_t)mine;
  CHECK(TPDP_CALLOC(all, (size_t)size));
  tpdp_tensor s = tpdp_tensor_1d(&me, TPDP_I32, 1);
  tpdp_tensor rv = tpdp_tensor_1d(all, TPDP_I32, size);
  tpdp_status st = dp_buf_host_allgather(comm, &s, &rv);
  if (st != TPDP_SUCCESS) {
    free(all);
    return st;
  }
  int bad = -1;
  for (int k = 0; k < size && bad < 0; k++)
    if (all[k] != TPDP_SUCCESS) bad = k;
  int32_t code = bad >= 0 ? all[bad] : 0;
  free(all);
  if (mine != TPDP_SUCCESS) return mine; /* its own message is kept */
  if (bad >= 0)
    return TPDP_ERR((tpdp_status)code,
                    "rank %d of %s rejected its parameters (%s); see "
                    "that rank's error message",
                    bad, tpdp_comm_name(comm),
                    tpdp_status_string((tpdp_status)code));
  return TPDP_SUCCESS;
}

/* Same count, dtypes and shapes on every rank. */
static tpdp_status check_across(tpdp_comm *comm, tpdp_reducer_param *params,
                                int64_t n) {
  int size = tpdp_comm_size(comm), me = tpdp_comm_rank(comm);
  tpdp_status st = TPDP_SUCCESS;
  int64_t *counts = NULL, *mine = NULL, *all = NULL;
  CHECK(TPDP_CALLOC(counts, (size_t)size));
  tpdp_tensor s = tpdp_tensor_1d(&n, TPDP_I64, 1);
  tpdp_tensor rv = tpdp_tensor_1d(counts, TPDP_I64, size);
  CHECK_GOTO(dp_buf_host_allgather(comm, &s, &rv), st, done);
  for (int k = 1; k < size; k++)
    if (counts[k] != counts[0]) {
      st = TPDP_ERR(TPDP_ERR_SHAPE_MISMATCH,
                    "parameter count differs across ranks of %s: rank 0 has "
                    "%lld parameters, rank %d has %lld (this is rank %d)",
                    tpdp_comm_name(comm), (long long)counts[0], k,
                    (long long)counts[k], me);
      goto done;
    }
  CHECK_GOTO(TPDP_CALLOC(mine, (size_t)n * DESC_LEN), st, done);
  CHECK_GOTO(TPDP_CALLOC(all, (size_t)n * DESC_LEN * (size_t)size), st, done);
  for (int64_t i = 0; i < n; i++)
    fill_desc(&params[i].param, mine + i * DESC_LEN);
  s = tpdp_tensor_1d(mine, TPDP_I64, n * DESC_LEN);
  rv = tpdp_tensor_1d(all, TPDP_I64, n * DESC_LEN * size);
  CHECK_GOTO(dp_buf_host_allgather(comm, &s, &rv), st, done);
  for (int64_t i = 0; i < n; i++) {
    const int64_t *d0 = all + i * DESC_LEN;
    for (int k = 1; k < size; k++) {
      const int64_t *dk = all + ((int64_t)k * n + i) * DESC_LEN;
      if (memcmp(d0, dk, DESC_LEN * sizeof(int64_t)) == 0) continue;
      char a[160], b[160];
      format_desc(d0, a, sizeof a);
      format_desc(dk, b, sizeof b);
      st = TPDP_ERR(
          d0[0] != dk[0] ? TPDP_ERR_DTYPE_MISMATCH : TPDP_ERR_SHAPE_MISMATCH,
          "parameter %lld '%s' differs across ranks of %s: rank 0 "
          "has %s, rank %d has %s (first mismatching parameter; "
          "this is rank %d)",
          (long long)i, params[i].fqn ? params[i].fqn : "",
          tpdp_comm_name(comm), a, k, b, me);
      goto done;
    }
  }
done:
  free(counts);
  free(mine);
  free(all);
  return st;
}

tpdp_status tpdp_reducer_create(tpdp_comm *comm, tpdp_reducer_param *params,
                                int64_t nparams,
                                const tpdp_reducer_options *options,
                                tpdp_reducer **out) {
  TPDP_API_ENTRY;
  CHECK_PTR(out);
  *out = NULL;
  CHECK_PTR(comm);
  tpdp_reducer_options o = options ? *options : tpdp_reducer_options_default();
  tpdp_status st = check_local(comm, params, nparams, &o);
  CHECK(agree(comm, st));
  CHECK(check_across(comm, params, nparams));

  tpdp_reducer *r = NULL;
  tpdp_bucket_assignment a;
  memset(&a, 0, sizeof a);
  tpdp_tensor *metas = NULL;
  CHECK(TPDP_CALLOC(r, 1));
  r->comm = comm;
  r->stream = tpdp_comm_nccl_stream(comm);
  r->params = params;
  r->n = nparams;
  r->opt = o;
  r->divide = o.divide_factor > 0 ? o.divide_factor : tpdp_comm_size(comm);
  r->sync = 1;
  int64_t n = nparams;
  CHECK_GOTO(TPDP_CALLOC(r->fqns, (size_t)n), st, fail);
  CHECK_GOTO(TPDP_CALLOC(r->views, (size_t)n), st, fail);
  CHECK_GOTO(TPDP_CALLOC(r->bucket_of, (size_t)n), st, fail);
  CHECK_GOTO(TPDP_CALLOC(r->marks, (size_t)n), st, fail);
  CHECK_GOTO(TPDP_CALLOC(r->expected, (size_t)n), st, fail);
  CHECK_GOTO(TPDP_CALLOC(r->touched, (size_t)n), st, fail);
  CHECK_GOTO(TPDP_CALLOC(r->last_seq, (size_t)n), st, fail);
  CHECK_GOTO(TPDP_CALLOC(r->unused, (size_t)n), st, fail);
  CHECK_GOTO(TPDP_CALLOC(r->by_ptr, (size_t)n), st, fail);
  for (int64_t i = 0; i < n; i++) {
    if (params[i].fqn) {
      r->fqns[i] = strdup(params[i].fqn);
      if (r->fqns[i] == NULL) {
        st = TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "copying FQNs");
        goto fail;
      }
    }
    if (!o.gradient_as_bucket_view) r->views[i] = params[i].grad;
    if (tpdp_tensor_numel(&params[i].param) > 0) {
      r->by_ptr[r->nptr].ptr = params[i].param.data;
      r->by_ptr[r->nptr].index = i;
      r->nptr++;
    }
  }
  qsort(r->by_ptr, (size_t)r->nptr, sizeof *r->by_ptr, cmp_ptr);
  for (int64_t k = 1; k < r->nptr; k++)
    if (r->by_ptr[k].ptr == r->by_ptr[k - 1].ptr) {
      char d1[300], d2[300];
      pdesc(r, r->by_ptr[k - 1].index, d1, sizeof d1);
      pdesc(r, r->by_ptr[k].index, d2, sizeof d2);
      st = TPDP_ERR(TPDP_ERR_DUPLICATE,
                    "duplicate parameter: parameters %s and %s share the "
                    "same tensor data (%p); register a shared parameter once",
                    d1, d2, r->by_ptr[k].ptr);
      break;
    }
  /* The duplicate check is local; agree so that no rank hangs. */
  CHECK_GOTO(agree(comm, st), st, fail);

  /* Device parameters: the broadcast runs on the communicator's stream,
   * after whatever wrote them on the producer stream (MPI: a no-op). */
  CHECK_GOTO(tpdp_comm_order_after(comm, o.producer_stream), st, fail);
  for (int64_t i = 0; i < n; i++) {
    tpdp_tensor *p = &params[i].param;
    if (tpdp_tensor_numel(p) == 0) continue;
    CHECK_GOTO(tpdp_broadcast(comm, p, p, 0), st, fail);
  }

  size_t limits[2] = {o.first_bucket_bytes, o.bucket_cap_bytes};
  CHECK_GOTO(TPDP_CALLOC(metas, (size_t)n), st, fail);
  for (int64_t i = 0; i < n; i++) metas[i] = params[i].param;
  CHECK_GOTO(tpdp_bucket_assign(metas, n, limits, 2, NULL, &a), st, fail);
  CHECK_GOTO(build_buckets(r, &a, 1, &r->buckets, &r->nbuckets), st, fail);
  CHECK_GOTO(install_buckets(r, r->buckets, r->nbuckets), st, fail);
  /* Device gradient views hold their values before the caller uses them. */
  CHECK_GOTO(dp_buf_sync(params[0].param.device, r->stream), st, fail);
  CHECK_GOTO(comm_thread_start(r), st, fail);
  tpdp_bucket_assignment_free(&a);
  free(metas);
  TPDP_INFO(
      "reducer on %s: %lld parameters in %lld buckets, %s mode, "
      "divide by %g",
      tpdp_comm_name(comm), (long long)n, (long long)r->nbuckets,
      o.gradient_as_bucket_view ? "view" : "copy", r->divide);
  *out = r;
  return TPDP_SUCCESS;
fail:
  tpdp_bucket_assignment_free(&a);
  free(metas);
  tpdp_reducer_destroy(r);
  return st;
}

tpdp_status tpdp_reducer_destroy(tpdp_reducer *r) {
  TPDP_API_ENTRY;
  if (r == NULL) return TPDP_SUCCESS;
  if (r->ct.active && r->in_iter) {
    /* buckets handed over must finish before their memory goes */
    pthread_mutex_lock(&r->ct.mu);
    while (r->ct.finished < r->ct.launched)
      pthread_cond_wait(&r->ct.done, &r->ct.mu);
    pthread_mutex_unlock(&r->ct.mu);
  }
  comm_thread_stop(r);
  free_buckets(r->buckets, r->nbuckets);
  if (r->fqns)
    for (int64_t i = 0; i < r->n; i++) free(r->fqns[i]);
  free(r->fqns);
  free(r->views);
  free(r->bucket_of);
  free(r->marks);
  free(r->expected);
  free(r->touched);
  free(r->last_seq);
  free(r->unused);
  free(r->by_ptr);
  free(r->rebuild_order);
  free(r);
  return TPDP_SUCCESS;
}

/* ------------------------------------------------------------ iteration */

/* Up to 8 unmarked parameters, "3 ('a'), 5 ('b') and 2 more". */
static int64_t list_unmarked(const tpdp_reducer *r, char *buf, size_t len) {
  int64_t cnt = 0;
  size_t pos = 0;
  buf[0] = '\0';
  for (int64_t i = 0; i < r->n; i++) {
    if (r->marks[i] > 0) continue;
    if (r->static_learned && r->expected[i] == 0) continue;
    if (cnt < 8 && pos < len) {
      char d[300];
      pdesc(r, i, d, sizeof d);
      int w = snprintf(buf + pos, len - pos, "%s%s", cnt ? ", " : "", d);
      if (w > 0) pos += (size_t)w;
    }
    cnt++;
  }
  if (cnt > 8 && pos < len)
    snprintf(buf + pos, len - pos, " and %lld more", (long long)(cnt - 8));
  return cnt;
}

static int should_rebuild(const tpdp_reducer *r) {
  return (r->opt.static_graph || !r->opt.find_unused_parameters) && !r->rebuilt;
}

static tpdp_status rebuild(tpdp_reducer *r) {
  tpdp_status st = TPDP_SUCCESS;
  tpdp_bucket_assignment a;
  memset(&a, 0, sizeof a);
  tpdp_tensor *metas = NULL;
  dp_bucket *nb = NULL;
  int64_t nnb = 0;
  tpdp_tensor ord = tpdp_tensor_1d(r->rebuild_order, TPDP_I64, r->n);
  CHECK(dp_buf_host_broadcast(r->comm, &ord, 0));
  size_t limits[2] = {r->opt.first_bucket_bytes, r->opt.bucket_cap_bytes};
  CHECK(TPDP_CALLOC(metas, (size_t)r->n));
  for (int64_t i = 0; i < r->n; i++) metas[i] = r->params[i].param;
  CHECK_GOTO(tpdp_bucket_assign(metas, r->n, limits, 2, r->rebuild_order, &a),
             st, done);
  CHECK_GOTO(build_buckets(r, &a, 0, &nb, &nnb), st, done);
  if (!r->opt.gradient_as_bucket_view) {
    /* nothing lives in the buckets between iterations */
  }
  CHECK_GOTO(install_buckets(r, nb, nnb), st, done);
  CHECK_GOTO(dp_buf_sync(r->params[0].param.device, r->stream), st, done);
  free_buckets(r->buckets, r->nbuckets);
  r->buckets = nb;
  r->nbuckets = nnb;
  nb = NULL;
  r->rebuilt = 1;
  TPDP_INFO(
      "reducer on %s: buckets rebuilt in gradient-ready order (%lld "
      "buckets)",
      tpdp_comm_name(r->comm), (long long)r->nbuckets);
done:
  if (nb) {
    /* install_buckets failed half way: point views back at the old ones */
    for (int64_t j = 0; j < r->nbuckets; j++)
      for (int64_t k = 0; k < r->buckets[j].n; k++) {
        int64_t p = r->buckets[j].params[k];
        r->bucket_of[p] = j;
        if (r->opt.gradient_as_bucket_view) {
          r->views[p] = slot_view(r, &r->buckets[j], k);
          r->params[p].grad = r->views[p];
        }
      }
    free_buckets(nb, nnb);
  }
  tpdp_bucket_assignment_free(&a);
  free(metas);
  return st;
}

static tpdp_status reducer_prepare_impl(tpdp_reducer *r) {
  CHECK_PTR(r);
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
  if (r->rebuild_pending) {
    r->rebuild_pending = 0;
    CHECK(rebuild(r));
  }
  memset(r->marks, 0, (size_t)r->n * sizeof *r->marks);
  for (int64_t j = 0; j < r->nbuckets; j++) {
    dp_bucket *b = &r->buckets[j];
    b->launched = 0;
    b->done = 0;
    b->pending = 0;
    for (int64_t k = 0; k < b->n; k++)
      if (!r->static_learned || r->expected[b->params[k]] > 0) b->pending++;
  }
  r->next_launch = 0;
  r->first_inflight = 0;
  comm_thread_reset(r);
  r->in_iter = 1;
  return TPDP_SUCCESS;
}

static tpdp_status check_alias(tpdp_reducer *r, int64_t i) {
  if (!r->opt.gradient_as_bucket_view) return TPDP_SUCCESS;
  const tpdp_tensor *g = &r->params[i].grad;
  const tpdp_tensor *v = &r->views[i];
  if (g->data == v->data && g->dtype == v->dtype &&
      tpdp_tensor_same_shape(g, v) && tpdp_tensor_is_contiguous(g) &&
      tpdp_device_equal(g->device, v->device))
    return TPDP_SUCCESS;
  char d[300];
  pdesc(r, i, d, sizeof d);
  return TPDP_ERR(TPDP_ERR_STATE,
                  "the gradient view of parameter %s no longer aliases its "
                  "bucket (bucket %lld): it points at %p, the bucket slot is "
                  "%p. With gradient_as_bucket_view the gradient must stay "
                  "the view from tpdp_reducer_grad_view (write into it, do "
                  "not replace it), or create the reducer with "
                  "gradient_as_bucket_view = 0",
                  d, (long long)r->bucket_of[i], g->data, v->data);
}

static tpdp_status reducer_mark_ready_impl(tpdp_reducer *r, int64_t index) {
  CHECK_PTR(r);
  if (index < 0 || index >= r->n)
    return TPDP_ERR(TPDP_ERR_NOT_FOUND,
                    "unknown parameter index %lld: the reducer has %lld "
                    "parameters",
                    (long long)index, (long long)r->n);
  char d[300];
  if (!r->in_iter) {
    pdesc(r, index, d, sizeof d);
    return TPDP_ERR(TPDP_ERR_STATE,
                    "parameter %s marked ready outside an iteration: call "
                    "tpdp_reducer_prepare before backward",
                    d);
  }
  CHECK(check_alias(r, index));
  int learning = r->opt.static_graph && !r->static_learned;
  int expect = r->static_learned ? r->expected[index] : 1;
  if (!learning && r->marks[index] >= expect) {
    pdesc(r, index, d, sizeof d);
    if (r->static_learned)
      return TPDP_ERR(TPDP_ERR_ALREADY,
                      "parameter %s was marked ready %d time(s) this "
                      "iteration, more than the %d recorded in the first "
                      "iteration of the static graph: the graph changed",
                      d, r->marks[index] + 1, expect);
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
  r->marks[index]++;
  r->touched[index] = 1;
  r->last_seq[index] = ++r->seq;
  if (learning || !r->sync) return TPDP_SUCCESS;
  if (r->marks[index] == expect) {
    dp_bucket *b = &r->buckets[r->bucket_of[index]];
    b->pending--;
    if (b->pending == 0) CHECK(launch_ready(r));
  }
  return progress(r);
}

tpdp_status tpdp_reducer_mark_ready_ptr(tpdp_reducer *r, const void *data) {
  TPDP_API_ENTRY;
  CHECK_PTR(r);
  int64_t lo = 0, hi = r->nptr - 1;
  while (lo <= hi) {
    int64_t mid = lo + (hi - lo) / 2;
    uintptr_t m = (uintptr_t)r->by_ptr[mid].ptr, x = (uintptr_t)data;
    if (m == x) return tpdp_reducer_mark_ready(r, r->by_ptr[mid].index);
    if (m < x)
      lo = mid + 1;
    else
      hi = mid - 1;
  }
  return TPDP_ERR(TPDP_ERR_NOT_FOUND,
                  "no parameter of this reducer has data pointer %p", data);
}

static tpdp_status reducer_finalize_impl(tpdp_reducer *r) {
  CHECK_PTR(r);
  if (!r->in_iter)
    return TPDP_ERR(TPDP_ERR_STATE,
                    "finalize without prepare: call tpdp_reducer_prepare at "
                    "the start of the iteration (before backward)");
  if (!r->sync) {
    r->in_iter = 0;
    return TPDP_SUCCESS;
  }
  int lenient = r->opt.find_unused_parameters || r->opt.static_graph;
  if (!lenient) {
    char list[1024];
    int64_t cnt = list_unmarked(r, list, sizeof list);
    if (cnt > 0)
      return TPDP_ERR(
          TPDP_ERR_STATE,
          "%lld parameter(s) were never marked ready in this iteration: %s. "
          "If they do not take part in the loss, create the reducer with "
          "find_unused_parameters = 1; otherwise mark them ready and call "
          "tpdp_reducer_finalize again",
          (long long)cnt, list);
  }
  for (int64_t i = 0; i < r->n; i++) CHECK(check_alias(r, i));

  /* Unused parameters: ready now, contributing zero unless accumulated. */
  r->nunused = 0;
  for (int64_t i = 0; i < r->n; i++)
    if (r->marks[i] == 0) r->unused[r->nunused++] = i;
  if (r->nunused > 0 && tpdp_log_get_level() >= TPDP_LOG_INFO) {
    char list[1024];
    list_unmarked(r, list, sizeof list);
    TPDP_INFO("reducer on %s: %lld unused parameter(s) this iteration: %s",
              tpdp_comm_name(r->comm), (long long)r->nunused, list);
  }
  tpdp_status st = TPDP_SUCCESS, st2;
  for (int64_t j = r->next_launch; j < r->nbuckets; j++)
    r->buckets[j].pending = 0;
  st = launch_ready(r);
  for (int64_t j = 0; j < r->nbuckets; j++) {
    if (!r->buckets[j].launched) continue;
    st2 = complete(r, j);
    if (st == TPDP_SUCCESS) st = st2;
  }
  /* Device buckets: the casts and copy-backs queued by complete() are done
   * before the caller reads the gradients (MPI: a no-op). */
  st2 = dp_buf_sync(r->params[0].param.device, r->stream);
  if (st == TPDP_SUCCESS) st = st2;
  if (st != TPDP_SUCCESS) {
    /* the buckets are consumed: end the iteration */
    memset(r->touched, 0, (size_t)r->n);
    r->in_iter = 0;
    return st;
  }

  if (r->opt.static_graph && !r->static_learned) {
    for (int64_t i = 0; i < r->n; i++) r->expected[i] = r->marks[i];
    r->static_learned = 1;
  }
  r->synced_iters++;
  if (r->synced_iters == 1 && should_rebuild(r)) {
    /* ready order: by last mark; never-marked ones last, by index */
    st = TPDP_CALLOC(r->rebuild_order, (size_t)r->n);
    if (st != TPDP_SUCCESS) return st;
    int64_t pos = 0;
    key_entry *tmp = NULL;
    st = TPDP_CALLOC(tmp, (size_t)r->n);
    if (st != TPDP_SUCCESS) return st;
    for (int64_t i = 0; i < r->n; i++) {
      tmp[i].key = r->marks[i] ? r->last_seq[i] : INT64_MAX;
      tmp[i].index = i;
    }
    qsort(tmp, (size_t)r->n, sizeof *tmp, cmp_key);
    for (int64_t i = 0; i < r->n; i++) r->rebuild_order[pos++] = tmp[i].index;
    free(tmp);
    r->rebuild_pending = 1;
  }
  memset(r->touched, 0, (size_t)r->n);
  r->in_iter = 0;
  return TPDP_SUCCESS;
}

tpdp_status tpdp_reducer_set_sync(tpdp_reducer *r, int sync) {
  TPDP_API_ENTRY;
  CHECK_PTR(r);
  if (r->in_iter)
    return TPDP_ERR(TPDP_ERR_STATE,
                    "cannot change sync inside an iteration (between "
                    "prepare and finalize)");
  r->sync = sync ? 1 : 0;
  return TPDP_SUCCESS;
}

tpdp_status tpdp_reducer_grad_view(const tpdp_reducer *r, int64_t index,
                                   tpdp_tensor *out) {
  TPDP_API_ENTRY;
  CHECK_PTR(r);
  CHECK_PTR(out);
  if (index < 0 || index >= r->n)
    return TPDP_ERR(TPDP_ERR_NOT_FOUND,
                    "unknown parameter index %lld: the reducer has %lld "
                    "parameters",
                    (long long)index, (long long)r->n);
  *out =
      r->opt.gradient_as_bucket_view ? r->views[index] : r->params[index].grad;
  return TPDP_SUCCESS;
}

int64_t tpdp_reducer_num_buckets(const tpdp_reducer *r) {
  return r ? r->nbuckets : 0;
}

tpdp_status tpdp_reducer_bucket(const tpdp_reducer *r, int64_t bucket,
                                const int64_t **params, int64_t *count,
                                size_t *bytes, size_t *limit) {
  TPDP_API_ENTRY;
  CHECK_PTR(r);
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
  CHECK_PTR(r);
  CHECK_PTR(params);
  CHECK_PTR(count);
  *params = r->unused;
  *count = r->nunused;
  return TPDP_SUCCESS;
}

int tpdp_reducer_rebuilt(const tpdp_reducer *r) { return r ? r->rebuilt : 0; }

/* ------------------------------------------------------------ timing */

tpdp_status tpdp_reducer_prepare(tpdp_reducer *r) {
  TPDP_API_ENTRY;
  CHECK_PTR(r);
  tpdp_status st;
  TIMED(r, total_seconds, st, reducer_prepare_impl(r));
  return st;
}

tpdp_status tpdp_reducer_mark_ready(tpdp_reducer *r, int64_t index) {
  TPDP_API_ENTRY;
  CHECK_PTR(r);
  tpdp_status st;
  TIMED(r, total_seconds, st, reducer_mark_ready_impl(r, index));
  return st;
}

tpdp_status tpdp_reducer_finalize(tpdp_reducer *r) {
  TPDP_API_ENTRY;
  CHECK_PTR(r);
  tpdp_status st;
  TIMED(r, total_seconds, st, reducer_finalize_impl(r));
  if (st == TPDP_SUCCESS) r->stats.iterations++;
  return st;
}

tpdp_status tpdp_reducer_get_stats(const tpdp_reducer *r,
                                   tpdp_reducer_stats *out) {
  TPDP_API_ENTRY;
  CHECK_PTR(r);
  CHECK_PTR(out);
  *out = r->stats;
  return TPDP_SUCCESS;
}
