// SPDX-License-Identifier: BSD-3-Clause
/* The watchdog of bounded waits (see comm/watchdog.h): a registry of the
 * live communicators' watch records, the thread that checks them, and the
 * message that names who has not arrived. */
#include "comm/watchdog.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

CORE_THREAD_LOCAL const char *comm_watch_label;

#define TIMEOUT_DEFAULT_S 600

static struct {
  pthread_mutex_t mu; /* the registry and the board's slots of this rank */
  comm_watch *head;
  comm_watchdog_config cfg; /* its arrays are copies, owned here */
  double poll_s;
  int running;
  int stop;
  pthread_cond_t wake; /* stop */
  pthread_t thread;
  /* The latest copy of each remote rank's region (cfg.exchange), its
   * times turned into this host's clock, and 1 where one has arrived. */
  watch_region *remote;
  int *heard;
  int *arrived; /* scratch for the exchange */
} wd = {.mu = PTHREAD_MUTEX_INITIALIZER};

static _Atomic double timeout_cache = -1;

double comm_timeout_read(void) {
  long t = core_env_long("TPDP_TIMEOUT_S", TIMEOUT_DEFAULT_S);
  double v = t > 0 ? (double)t : 0;
  atomic_store(&timeout_cache, v);
  return v;
}

double comm_timeout_s(void) {
  double v = atomic_load(&timeout_cache);
  return v >= 0 ? v : comm_timeout_read();
}

size_t comm_watch_region_bytes(void) { return sizeof(watch_region); }

static watch_region *my_region(void) {
  const comm_watchdog_config *c = &wd.cfg;
  return c->nregions > 0 ? c->regions[c->my_region] : NULL;
}

/* ------------------------------------------------------------ registry */

static uint64_t mix64(uint64_t x) { /* splitmix64's finaliser */
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t comm_watch_child_key(comm_watch *w, int color) {
  /* Every member of the child split the same parent (same key) in the
   * same call (the parent's n-th split, MPI's collective order) with the
   * same color. */
  w->splits++;
  uint64_t k = mix64(w->key ^ mix64(w->splits * 0x9e3779b97f4a7c15ULL ^
                                    (uint64_t)(uint32_t)color));
  return k ? k : 1;
}

static void copy_name(watch_slot *s, const char *name) {
  if (strncmp(s->name, name, WATCH_NAME_MAX - 1) != 0)
    snprintf(s->name, WATCH_NAME_MAX, "%.*s", WATCH_NAME_MAX - 1, name);
}

tpdp_status comm_watch_register(comm_watch *w, const tpdp_comm *comm,
                                uint64_t key, const int *world_ranks) {
  w->comm = comm;
  w->key = key;
  w->slot = &w->own;
  if (world_ranks != NULL) {
    CHECK(TPDP_CALLOC(w->world_ranks, (size_t)comm->size));
    memcpy(w->world_ranks, world_ranks, (size_t)comm->size * sizeof(int));
  }
  pthread_mutex_lock(&wd.mu);
  watch_region *r = my_region();
  for (int i = 0; r != NULL && i < WATCH_SLOTS; i++) {
    watch_slot *s = &r->slots[i];
    if (atomic_load(&s->key) != 0) continue;
    atomic_store(&s->started, 0);
    atomic_store(&s->finished, 0);
    copy_name(s, comm->name);
    atomic_store(&s->key, key);
    w->slot = s;
    break;
  }
  w->next = wd.head;
  wd.head = w;
  pthread_mutex_unlock(&wd.mu);
  return TPDP_SUCCESS;
}

void comm_watch_unregister(comm_watch *w) {
  pthread_mutex_lock(&wd.mu);
  for (comm_watch **p = &wd.head; *p != NULL; p = &(*p)->next)
    if (*p == w) {
      *p = w->next;
      break;
    }
  if (w->slot != &w->own) atomic_store(&w->slot->key, 0);
  w->slot = &w->own;
  pthread_mutex_unlock(&wd.mu);
  free(w->world_ranks);
  w->world_ranks = NULL;
}

/* ------------------------------------------------------------ diagnosis */

static const char *op_name(int op) {
  if (op == COMM_OP_SPLIT) return "split";
  return comm_coll_name((tpdp_coll_kind)op);
}

/* "allreduce f32 x 1000 #42" (no dtype for a barrier or a split). */
static void describe_op(core_strbuf *b, int op, int dtype, int64_t count,
                        int64_t seq) {
  if (op == TPDP_COLL_BARRIER || op == COMM_OP_SPLIT)
    core_sb_printf(b, "%s #%lld", op_name(op), (long long)seq);
  else
    core_sb_printf(b, "%s %s x %lld #%lld", op_name(op),
                   tpdp_dtype_name((tpdp_dtype)dtype), (long long)count,
                   (long long)seq);
}

static watch_slot *find_slot(watch_region *r, uint64_t key) {
  for (int i = 0; i < WATCH_SLOTS; i++)
    if (atomic_load(&r->slots[i].key) == key) return &r->slots[i];
  return NULL;
}

/* The op a rank is in (entered, not finished) that it entered last, on any
 * communicator, or NULL. */
static watch_slot *current_op(watch_region *r) {
  watch_slot *best = NULL;
  for (int i = 0; i < WATCH_SLOTS; i++) {
    watch_slot *s = &r->slots[i];
    if (atomic_load(&s->key) == 0 ||
        atomic_load(&s->started) <= atomic_load(&s->finished))
      continue;
    if (best == NULL ||
        atomic_load(&s->entered_s) > atomic_load(&best->entered_s))
      best = s;
  }
  return best;
}

/* What rank `region` is doing now, for a peer that has not arrived. */
static void describe_peer(core_strbuf *b, watch_region *r, watch_slot *s,
                          double now) {
  watch_slot *cur = current_op(r);
  if (atomic_load(&r->finalizing))
    core_sb_puts(b, "it is in tpdp_finalize");
  else if (cur != NULL) {
    core_sb_puts(b, "it is in ");
    describe_op(b, atomic_load(&cur->op), atomic_load(&cur->dtype),
                atomic_load(&cur->count), atomic_load(&cur->started));
    core_sb_printf(b, " on '%s' for %.0f s", cur->name,
                   now - atomic_load(&cur->entered_s));
  } else if (s != NULL && atomic_load(&s->finished) > 0) {
    core_sb_puts(b, "it last finished ");
    describe_op(b, atomic_load(&s->op), atomic_load(&s->dtype),
                atomic_load(&s->count), atomic_load(&s->finished));
    core_sb_printf(b, " on '%s' and is in no collective", s->name);
  } else {
    core_sb_puts(b, "it is in no collective");
  }
}

/* After this many seconds without a heartbeat a rank is "not responding":
 * a few watchdog rounds, and never less than 3 s (a loaded machine may
 * delay a round by a second or two). */
static double stale_s(void) { return fmax(3.0, 4 * wd.poll_s); }

/* The message for call `seq` of w, blocked since `since`; "" when the
 * record changed while it was read (the call has completed). */
static void report(core_strbuf *b, comm_watch *w, int64_t seq, double since,
                   double now) {
  const tpdp_comm *c = w->comm;
  const comm_watchdog_config *cfg = &wd.cfg;
  const char *func = atomic_load(&w->blocked_func);
  const char *label = atomic_load(&w->blocked_label);
  int op = atomic_load(&w->blocked_op);
  core_sb_printf(b, "[rank %d] tpdp ERROR: %s", cfg->world_rank,
                 func ? func : "tpdp");
  if (label) core_sb_printf(b, " (on %s)", label);
  core_sb_printf(b,
                 " timed out after %.0f s (TPDP_TIMEOUT_S=%.0f): ", now - since,
                 cfg->timeout_s);
  describe_op(b, op, atomic_load(&w->blocked_dtype),
              atomic_load(&w->blocked_count), seq);
  core_sb_printf(b, " on communicator '%s'", c->name);
  if (strncmp(c->name, "mesh.", 5) == 0)
    core_sb_printf(b, " (mesh dim %s)", c->name + 5);
  core_sb_printf(b, ", rank %d of %d, did not complete.", c->rank, c->size);

  int missing = 0, unknown = 0;
  for (int q = 0; q < c->size; q++) {
    if (q == c->rank) continue;
    int world = w->world_ranks ? w->world_ranks[q] : -1;
    watch_region *r = NULL;
    for (int i = 0; world >= 0 && i < cfg->nregions; i++)
      if (cfg->region_world[i] == world) r = cfg->regions[i];
    const int remote = r == NULL && world >= 0 && wd.heard != NULL &&
                       world < cfg->world_size && wd.heard[world];
    if (remote) r = &wd.remote[world];
    if (r == NULL) {
      unknown++;
      continue;
    }
    watch_slot *s = find_slot(r, w->key);
    int64_t started = s ? atomic_load(&s->started) : 0;
    double quiet = now - atomic_load(&r->heartbeat_s);
    /* A finalizing rank's watchdog has stopped: its silence is no sign. */
    int stalled = quiet > stale_s() && !atomic_load(&r->finalizing);
    int other_op = started == seq && s && atomic_load(&s->op) != op;
    if (started >= seq && !stalled && !other_op) continue; /* arrived */
    core_sb_printf(b, missing ? "; rank %d" : " Not arrived: rank %d", world);
    /* Several hosts: every rank's host is named. */
    if (cfg->exchange != NULL) core_sb_printf(b, " on host %s", r->host);
    if (world != q) core_sb_printf(b, " (rank %d of '%s')", q, c->name);
    if (other_op) {
      core_sb_printf(b, " called %s #%lld instead",
                     op_name(atomic_load(&s->op)), (long long)seq);
    } else {
      core_sb_puts(b, started >= seq ? " arrived but" : " has not arrived");
      if (stalled)
        core_sb_printf(b,
                       "%s is not responding (stopped or hung: no sign of "
                       "life for %.0f s%s);",
                       started >= seq ? "" : " and", quiet,
                       remote ? ", as of its last report from its host" : "");
      else
        core_sb_puts(b, ":");
      core_sb_puts(b, " ");
      describe_peer(b, r, s, now);
    }
    missing++;
  }
  if (missing)
    core_sb_puts(b, ".");
  else if (unknown == 0)
    core_sb_puts(b,
                 " Every rank has arrived: one may have died, or the ranks' "
                 "calls do not match (counts, roots).");
  if (unknown)
    core_sb_printf(b,
                   " %d rank(s) on other hosts never heard from: state "
                   "unknown.",
                   unknown);
  core_sb_puts(b, " Aborting the job.\n");
}

/* Send this rank's region to the other hosts' ranks and take in what they
 * sent: each copy's times (the sender's clock) moved to this host's, as
 * if its heartbeat were now. Called with wd.mu held. */
static void exchange(double now) {
  if (wd.cfg.exchange == NULL || wd.remote == NULL) return;
  const int n = wd.cfg.world_size;
  memset(wd.arrived, 0, (size_t)n * sizeof *wd.arrived);
  wd.cfg.exchange(my_region(), wd.remote, wd.arrived);
  for (int q = 0; q < n; q++) {
    if (!wd.arrived[q]) continue;
    watch_region *r = &wd.remote[q];
    const double shift = now - atomic_load(&r->heartbeat_s);
    atomic_store(&r->heartbeat_s, now);
    for (int i = 0; i < WATCH_SLOTS; i++)
      atomic_store(&r->slots[i].entered_s,
                   atomic_load(&r->slots[i].entered_s) + shift);
    r->host[WATCH_NAME_MAX - 1] = '\0';
    wd.heard[q] = 1;
  }
}

/* One round: the first call blocked past the timeout, reported, ends the
 * job. Called with wd.mu held. */
static void check_all(double now) {
  for (comm_watch *w = wd.head; w != NULL; w = w->next) {
    if (w->slot != &w->own) copy_name(w->slot, w->comm->name);
    int64_t seq = atomic_load_explicit(&w->blocked_seq, memory_order_acquire);
    if (seq == 0) continue;
    double since = atomic_load(&w->blocked_s);
    if (now - since < wd.cfg.timeout_s) continue;
    core_strbuf b = {0};
    report(&b, w, seq, since, now);
    /* Still the same call (it could have completed while we looked). */
    if (atomic_load(&w->blocked_seq) != seq ||
        atomic_load(&w->blocked_s) != since) {
      core_sb_free(&b);
      continue;
    }
    fputs(b.failed ? "tpdp ERROR: a wait timed out (TPDP_TIMEOUT_S)\n" : b.s,
          stderr);
    fflush(stderr);
    wd.cfg.abort_job();
  }
}

static void *watchdog_main(void *arg) {
  (void)arg;
  pthread_mutex_lock(&wd.mu);
  double last = core_now_s();
  while (!wd.stop) {
    double now = core_now_s();
    watch_region *me = my_region();
    if (me != NULL) atomic_store(&me->heartbeat_s, now);
    exchange(now);
    /* After a long gap this process was itself stopped (SIGSTOP) or
     * starved: its waits look long for that reason alone. Give the peers
     * a round to see its heartbeat first. */
    if (now - last < stale_s()) check_all(now);
    last = now;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double t = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec + wd.poll_s;
    ts.tv_sec = (time_t)t;
    ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    pthread_cond_timedwait(&wd.wake, &wd.mu, &ts);
  }
  pthread_mutex_unlock(&wd.mu);
  return NULL;
}

/* Forget the board (the backend frees it next): communicators still alive
 * write to their own records from now on. Called with wd.mu held. */
static void free_config(void) {
  for (comm_watch *w = wd.head; w != NULL; w = w->next) w->slot = &w->own;
  free(wd.cfg.regions);
  free((void *)wd.cfg.region_world);
  free(wd.remote);
  free(wd.heard);
  free(wd.arrived);
  wd.remote = NULL;
  wd.heard = wd.arrived = NULL;
  memset(&wd.cfg, 0, sizeof wd.cfg);
}

tpdp_status comm_watchdog_start(const comm_watchdog_config *cfg) {
  if (cfg->timeout_s <= 0 || wd.running) return TPDP_SUCCESS;
  tpdp_status st = TPDP_SUCCESS;
  watch_region **regions = NULL, *remote = NULL;
  int *world = NULL, *heard = NULL, *arrived = NULL;
  int n = cfg->nregions;
  if (n > 0) {
    CHECK(TPDP_CALLOC(regions, (size_t)n));
    CHECK_GOTO(TPDP_CALLOC(world, (size_t)n), st, fail);
    memcpy(regions, cfg->regions, (size_t)n * sizeof *regions);
    memcpy(world, cfg->region_world, (size_t)n * sizeof *world);
  }
  if (cfg->exchange != NULL && cfg->world_size > 0) {
    CHECK_GOTO(TPDP_CALLOC(remote, (size_t)cfg->world_size), st, fail);
    CHECK_GOTO(TPDP_CALLOC(heard, (size_t)cfg->world_size), st, fail);
    CHECK_GOTO(TPDP_CALLOC(arrived, (size_t)cfg->world_size), st, fail);
  }
  pthread_mutex_lock(&wd.mu);
  wd.cfg = *cfg;
  wd.cfg.regions = regions;
  wd.cfg.region_world = world;
  wd.remote = remote;
  wd.heard = heard;
  wd.arrived = arrived;
  /* A tenth of the timeout between rounds, between 0.1 and 1 s. */
  wd.poll_s = fmin(1.0, fmax(0.1, cfg->timeout_s / 10));
  wd.stop = 0;
  watch_region *me = my_region();
  if (me != NULL) {
    atomic_store(&me->world_rank, cfg->world_rank);
    atomic_store(&me->pid, (int32_t)getpid());
    atomic_store(&me->finalizing, 0);
    atomic_store(&me->heartbeat_s, core_now_s());
    if (gethostname(me->host, sizeof me->host - 1) != 0)
      snprintf(me->host, sizeof me->host, "(unknown)");
    me->host[sizeof me->host - 1] = '\0';
  }
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  int rc = pthread_cond_init(&wd.wake, &ca);
  pthread_condattr_destroy(&ca);
  if (rc == 0) {
    rc = pthread_create(&wd.thread, NULL, watchdog_main, NULL);
    if (rc != 0) pthread_cond_destroy(&wd.wake);
  }
  if (rc != 0) {
    free_config();
    pthread_mutex_unlock(&wd.mu);
    return TPDP_ERR(TPDP_ERR_INTERNAL,
                    "could not start the watchdog thread of TPDP_TIMEOUT_S: "
                    "%s",
                    strerror(rc));
  }
  wd.running = 1;
  pthread_mutex_unlock(&wd.mu);
  return TPDP_SUCCESS;
fail:
  free(regions);
  free(world);
  free(remote);
  free(heard);
  free(arrived);
  return st;
}

tpdp_status comm_watchdog_stop(void) {
  pthread_mutex_lock(&wd.mu);
  watch_region *me = my_region();
  if (me != NULL) atomic_store(&me->finalizing, 1);
  if (!wd.running) {
    free_config();
    pthread_mutex_unlock(&wd.mu);
    return TPDP_SUCCESS;
  }
  wd.stop = 1;
  pthread_cond_signal(&wd.wake);
  pthread_mutex_unlock(&wd.mu);
  int rc = pthread_join(wd.thread, NULL);
  pthread_mutex_lock(&wd.mu);
  pthread_cond_destroy(&wd.wake);
  wd.running = 0;
  free_config();
  pthread_mutex_unlock(&wd.mu);
  if (rc != 0)
    return TPDP_ERR(TPDP_ERR_INTERNAL, "joining the watchdog thread failed: %s",
                    strerror(rc));
  return TPDP_SUCCESS;
}
