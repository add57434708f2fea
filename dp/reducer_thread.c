// SPDX-License-Identifier: BSD-3-Clause
/* The reducer's communication thread (see dp_comm_thread in
 * reducer_internal.h). The caller's thread hands buckets over in order
 * (dp_thread_hand) and waits for them at finalize (dp_thread_wait); the
 * thread divides (and casts) a bucket when the launch left that to it, runs
 * its blocking allreduce, and moves on. A hand-off signals the condition
 * variable only when the thread sleeps on it, so a burst of launches while
 * it is busy costs the caller a lock and an unlock each. */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "comm/services.h"
#include "dp/bucket_passes.h"
#include "dp/reducer_internal.h"

/* Bucket j's work: the optional divide (and cast), then the allreduce. */
static tpdp_status reduce_bucket(tpdp_reducer *r, int64_t j) {
  dp_bucket *b = &r->buckets[j];
  tpdp_tensor *v = &b->comm_view;
  if (b->thread_prepares) {
    /* divide before the reduction (16-bit: cast and divide, which also
     * keeps the sum from overflowing) */
    size_t n = b->bytes / tpdp_dtype_size(b->dtype);
    CHECK(v->data == b->buf
              ? dp_pass_divide(r->device, r->stream, b->dtype, b->buf, n,
                               r->divide)
              : dp_pass_cast_divide(r->device, r->stream, b->dtype, b->buf,
                                    v->dtype, v->data, n, r->divide));
  }
  tpdp_reduce_op op = b->fused_avg ? TPDP_OP_AVG : TPDP_OP_SUM;
  /* The bucket itself (not a 16-bit copy) in shared memory: every rank
   * takes the same branch, since the buckets and hook agree. */
  if (r->shm != NULL && v->data == b->buf && comm_shm_supports(v->dtype, op))
    return comm_allreduce_shm(r->comm, r->shm, v, op);
  return tpdp_allreduce(r->comm, v, v, op);
}

static void *thread_main(void *arg) {
  tpdp_reducer *r = arg;
  dp_comm_thread *ct = &r->ct;
  comm_watch_label = "the reducer's communication thread";
#ifdef SCHED_BATCH
  /* A hint (ignored where refused): the thread's wake-ups (a hand-off, a
   * peer's arrival in a shared-memory allreduce) do not preempt the
   * training thread. Where a core is free it runs at once; where every
   * core is busy it runs at the scheduler's next turn instead of stopping
   * the caller inside tpdp_reducer_mark_ready. On 2 ranks of the 2-core
   * VM that preemption was 9-30 ms a step of GPT-2 at dp=2 spent inside
   * mark_ready (up to 2% of the step); with SCHED_BATCH 0.1-1.7 ms. */
  struct sched_param sp = {0};
  (void)pthread_setschedparam(pthread_self(), SCHED_BATCH, &sp);
#endif
  pthread_mutex_lock(&ct->mu);
  for (;;) {
    while (!ct->stop && ct->finished == ct->launched) {
      ct->waiting = 1;
      pthread_cond_wait(&ct->more, &ct->mu);
      ct->waiting = 0;
    }
    if (ct->stop) break;
    int64_t j = ct->finished;
    int failed = ct->status != TPDP_SUCCESS;
    pthread_mutex_unlock(&ct->mu);
    /* After a failure the rest of the iteration is skipped: its peers
     * may be stuck in the failed collective. */
    tpdp_status st = failed ? TPDP_SUCCESS : reduce_bucket(r, j);
    pthread_mutex_lock(&ct->mu);
    if (st != TPDP_SUCCESS && ct->status == TPDP_SUCCESS) {
      ct->status = st;
      ct->failed = j;
      snprintf(ct->message, sizeof ct->message, "%s", tpdp_last_error());
    }
    ct->finished = j + 1;
    pthread_cond_broadcast(&ct->done);
  }
  pthread_mutex_unlock(&ct->mu);
  return NULL;
}

tpdp_status dp_thread_start(tpdp_reducer *r) {
  dp_comm_thread *ct = &r->ct;
  /* Nothing to overlap on one rank; user hooks run on the caller's thread,
   * as documented. */
  if (!r->opt.comm_thread || r->solo ||
      tpdp_comm_device_type(r->comm) != TPDP_DEVICE_CPU ||
      !tpdp_comm_concurrent_threads(r->comm) ||
      r->opt.comm_hook == TPDP_REDUCER_HOOK_USER)
    return TPDP_SUCCESS;
  int rc = pthread_mutex_init(&ct->mu, NULL);
  if (rc != 0)
    return TPDP_ERR(TPDP_ERR_INTERNAL,
                    "pthread_mutex_init for the reducer's communication "
                    "thread failed: %s",
                    strerror(rc));
  rc = pthread_cond_init(&ct->more, NULL);
  if (rc == 0) {
    /* `done` is waited on with a deadline (TPDP_TIMEOUT_S) on the
     * monotonic clock. */
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    rc = pthread_cond_init(&ct->done, &ca);
    pthread_condattr_destroy(&ca);
    if (rc != 0) pthread_cond_destroy(&ct->more);
  }
  if (rc != 0) {
    pthread_mutex_destroy(&ct->mu);
    return TPDP_ERR(TPDP_ERR_INTERNAL,
                    "pthread_cond_init for the reducer's communication "
                    "thread failed: %s",
                    strerror(rc));
  }
  rc = pthread_create(&ct->thread, NULL, thread_main, r);
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

tpdp_status dp_thread_stop(tpdp_reducer *r) {
  dp_comm_thread *ct = &r->ct;
  if (!ct->active) return TPDP_SUCCESS;
  pthread_mutex_lock(&ct->mu);
  ct->stop = 1;
  pthread_cond_signal(&ct->more);
  pthread_mutex_unlock(&ct->mu);
  int rc = pthread_join(ct->thread, NULL);
  pthread_cond_destroy(&ct->more);
  pthread_cond_destroy(&ct->done);
  pthread_mutex_destroy(&ct->mu);
  ct->active = 0;
  if (rc != 0)
    return TPDP_ERR(TPDP_ERR_INTERNAL,
                    "joining the reducer's communication thread failed: %s",
                    strerror(rc));
  return TPDP_SUCCESS;
}

void dp_thread_reset(tpdp_reducer *r) {
  dp_comm_thread *ct = &r->ct;
  if (!ct->active) return;
  /* The thread is idle here: the previous iteration ended by waiting for
   * every bucket it was handed. */
  pthread_mutex_lock(&ct->mu);
  ct->launched = ct->finished = 0;
  ct->status = TPDP_SUCCESS;
  ct->failed = -1;
  ct->message[0] = '\0';
  pthread_mutex_unlock(&ct->mu);
}

void dp_thread_hand(tpdp_reducer *r, int64_t j) {
  dp_comm_thread *ct = &r->ct;
  pthread_mutex_lock(&ct->mu);
  ct->launched = j + 1;
  int wake = ct->waiting;
  pthread_mutex_unlock(&ct->mu);
  /* After the unlock: woken under the lock, the thread would block on the
   * mutex at once. */
  if (wake) pthread_cond_signal(&ct->more);
}

/* The iteration's failure as an error of the caller's thread. */
static tpdp_status thread_failure(const dp_comm_thread *ct) {
  return TPDP_ERR(ct->status,
                  "bucket %lld failed on the reducer's communication "
                  "thread: %s",
                  (long long)ct->failed, ct->message);
}

/* Wait (ct->mu held) until buckets [0, upto) are done, at most
 * TPDP_TIMEOUT_S: the thread is normally inside MPI then, where the
 * watchdog ends the job first; this bounds the wait whatever holds the
 * thread. Returns the iteration's status, or TPDP_ERR_TIMEOUT. */
static tpdp_status wait_finished(tpdp_reducer *r, int64_t upto) {
  dp_comm_thread *ct = &r->ct;
  double limit = comm_timeout_s(), t0 = core_now_s();
  struct timespec dl;
  clock_gettime(CLOCK_MONOTONIC, &dl);
  dl.tv_sec += (time_t)limit;
  while (ct->finished < upto) {
    if (limit <= 0) {
      pthread_cond_wait(&ct->done, &ct->mu);
    } else if (pthread_cond_timedwait(&ct->done, &ct->mu, &dl) == ETIMEDOUT &&
               ct->finished < upto) {
      return TPDP_ERR(
          TPDP_ERR_TIMEOUT,
          "timed out after %.0f s (TPDP_TIMEOUT_S) waiting for bucket %lld "
          "of %lld, reduced by the reducer's communication thread (allreduce "
          "on %s, rank %d of %d): a rank of %s has not called its "
          "allreduce",
          core_now_s() - t0, (long long)ct->finished, (long long)r->nbuckets,
          tpdp_comm_name(r->comm), tpdp_comm_rank(r->comm),
          tpdp_comm_size(r->comm), tpdp_comm_name(r->comm));
    }
  }
  return ct->status == TPDP_SUCCESS ? TPDP_SUCCESS : thread_failure(ct);
}

tpdp_status dp_thread_wait(tpdp_reducer *r, int64_t j) {
  dp_comm_thread *ct = &r->ct;
  double t0 = core_now_s();
  pthread_mutex_lock(&ct->mu);
  tpdp_status st = wait_finished(r, j + 1);
  pthread_mutex_unlock(&ct->mu);
  r->stats.comm_seconds += core_now_s() - t0;
  return st;
}

tpdp_status dp_thread_drain(tpdp_reducer *r) {
  dp_comm_thread *ct = &r->ct;
  if (!ct->active) return TPDP_SUCCESS;
  pthread_mutex_lock(&ct->mu);
  tpdp_status st = wait_finished(r, ct->launched);
  pthread_mutex_unlock(&ct->mu);
  return st;
}
