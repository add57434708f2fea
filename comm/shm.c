// SPDX-License-Identifier: BSD-3-Clause
/* Shared memory among the ranks of a host-memory communicator on each of
 * its hosts, and the allreduce that works in it (see comm/services.h).
 *
 * Why: a blocking allreduce through Open MPI on one host copies each
 * message through the kernel (CMA) or a bounce buffer and adds it in a
 * third pass: per rank, about 3.5 times the message in memory traffic.
 * When every rank's buffer lies in memory all of them map, rank r can read
 * slice r of every peer's buffer, sum it and write the result back into
 * every buffer: once the message read and once written, per rank. On the
 * 2-core development VM the reducer's 100 MB of gradients on 2 ranks went
 * from 29-33 ms to 15-18 ms, 1.5-2x faster than raw MPI_Allreduce of the
 * same buffers (bench/reducer.sh).
 *
 * The segment is one POSIX shared-memory file that rank 0 creates, sizes
 * with posix_fallocate (so a full /dev/shm is an error now rather than a
 * SIGBUS later) and names to the others, who map it; rank 0 unlinks it
 * once all have it mapped, so nothing outlives the processes. Layout: a
 * control page (a header, then one slot of two cache lines per rank), then
 * one region of `stride` bytes per rank. Every rank maps the same file, so
 * a peer's copy of "my pointer p" is p - my region + the peer's region.
 *
 * Synchronisation is two counters per rank in its slot: `ready` (my buffer
 * holds my input of call `seq`, and the slot says what the call is) and
 * `done` (I have written my slice into every buffer). A call waits for
 * every ready, reduces, then waits for every done: the second wait is what
 * lets the caller touch its buffer again, and lets the next call reuse the
 * slot. Every rank numbers its calls alike because, like any collective,
 * they are made in the same order on every rank. A waiter spins briefly,
 * then sleeps on the counter as a process-shared futex.
 *
 * Across hosts (hierarchical, as NCCL and Horovod do): every host has a
 * segment of its own among its ranks, made when every host holds the same
 * number (two or more) of the communicator's ranks. Local rank r sums
 * slice r of its host's buffers into its own buffer, allreduces that slice
 * over MPI with the local ranks r of the other hosts (`cross`: one
 * communicator per local rank, one rank per host), scales it for AVG and
 * writes it into every buffer of its host. Each rank thus sends 1/local
 * size of the message across hosts, and every local rank's slice crosses
 * at once. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* MADV_REMOVE */
#endif
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "comm/backend.h"
#include "core/mem.h"

#define SHM_PAGE 4096
#define SHM_LINE 64
#define SHM_NAME_BYTES 64

/* One allreduce as a rank called it. */
typedef struct {
  int64_t offset; /* of the buffer in the caller's region */
  int64_t count;
  int32_t dtype;
  int32_t op;
} shm_call;

/* One rank's slot: what its current call is and how far it got. */
typedef struct {
  _Atomic uint32_t ready; /* 32 bits: a futex word (wait_all) */
  uint32_t unused;
  shm_call call;
  char pad1[SHM_LINE - 8 - sizeof(shm_call)];
  _Atomic uint32_t done;
  char pad2[SHM_LINE - 4];
} shm_slot;
_Static_assert(sizeof(shm_slot) == 2 * SHM_LINE,
               "a slot is two cache lines: ready and done apart");

typedef struct {
  uint64_t nonce; /* written by rank 0: the others check what they mapped */
  char pad[SHM_LINE - 8];
} shm_header;

struct comm_shm {
  char *map;
  size_t map_bytes;
  size_t bytes;     /* usable bytes of each region */
  int rank, size;   /* this rank among its host's ranks, and their number */
  int total;        /* ranks of the communicator, all hosts together */
  tpdp_comm *cross; /* the local ranks `rank` of every host; NULL: one host */
  shm_slot *slots;
  char **regions; /* every rank's region in this process */
  uint32_t seq;   /* calls so far (wraps; compared as a difference) */
};

static size_t round_up(size_t x, size_t to) { return (x + to - 1) / to * to; }

static size_t control_bytes(int size) {
  return round_up(sizeof(shm_header) + (size_t)size * sizeof(shm_slot),
                  SHM_PAGE);
}

/* 1 unless TPDP_SHM is set to 0: the escape hatch back to plain MPI. */
static int shm_wanted(void) {
  const char *e = getenv("TPDP_SHM");
  return e == NULL || strcmp(e, "0") != 0;
}

/* The segment's name: the creator's pid, a count of its segments and 64
 * random bits (which the header carries too), so no other job on the host
 * can have it. */
static void segment_name(char *name, int pid, unsigned counter,
                         uint64_t nonce) {
  snprintf(name, SHM_NAME_BYTES, "/tpdp-%d-%u-%016llx", pid, counter,
           (unsigned long long)nonce);
}

static uint64_t random_nonce(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t x = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ULL ^
               (uint64_t)ts.tv_sec << 20 ^ (uint64_t)getpid() << 40;
  x ^= x >> 31;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 29;
  return x | 1;
}

/* Map the segment `name` of `total` bytes (rank 0 creates and sizes it).
 * Returns an errno-style reason on failure (0: mapped). */
static int map_segment(const char *name, size_t total, int create, char **map) {
  int fd = create ? shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600)
                  : shm_open(name, O_RDWR, 0600);
  if (fd < 0) return errno;
  int err = 0;
  if (create) {
    if (ftruncate(fd, (off_t)total) != 0) err = errno;
    /* Reserve the pages now: tmpfs would otherwise fail at first touch,
     * with SIGBUS. */
    if (err == 0) err = posix_fallocate(fd, 0, (off_t)total);
  } else {
    struct stat sb;
    if (fstat(fd, &sb) != 0)
      err = errno;
    else if ((size_t)sb.st_size != total)
      err = EINVAL;
  }
  if (err == 0) {
    void *m = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED)
      err = errno;
    else
      *map = m;
  }
  close(fd);
  if (err != 0 && create) shm_unlink(name);
  return err;
}

/* What each rank tells the others while the segment is being made. */
typedef struct {
  int32_t ok;  /* step 1: takes part; steps 2 and 3: mapped it */
  int32_t err; /* why not (an errno; ENOMEM: no memory for the exchange) */
  uint64_t host;
  uint64_t bytes; /* the region size asked for */
  int32_t pid;    /* rank 0's: names the segment */
  uint32_t counter;
  uint64_t nonce;
} shm_record;

/* More ranks than this get no segment (the exchange's records live on the
 * stack, so that a rank short of memory still takes part). */
#define SHM_MAX_RANKS 256

/* Where rank q stands among the hosts: the lowest rank on its host (whose
 * segment it maps), its local rank and the number of ranks on its host. */
typedef struct {
  int leader, local_rank, local_size, host; /* host: index, in rank order */
} shm_place;

/* 1 if no rank below o shares its host. */
static int first_on_host(const shm_record *all, int o) {
  for (int q = 0; q < o; q++)
    if (all[q].host == all[o].host) return 0;
  return 1;
}

static shm_place place_of(const shm_record *all, int size, int q) {
  shm_place p = {-1, 0, 0, 0};
  for (int o = 0; o < size; o++) {
    if (all[o].host != all[q].host) continue;
    if (p.leader < 0) p.leader = o;
    if (o < q) p.local_rank++;
    p.local_size++;
  }
  for (int o = 0; o < p.leader; o++) /* hosts whose first rank comes earlier */
    if (first_on_host(all, o)) p.host++;
  return p;
}

/* Why there is no segment, naming rank *who, or NULL. */
static const char *refusal(const shm_record *all, int size, int *who) {
  for (int q = 0; q < size; q++) {
    *who = q;
    if (!all[q].ok)
      return all[q].err == ENOMEM ? "out of memory" : "TPDP_SHM=0";
    if (all[q].bytes != all[0].bytes) return "asked for another size";
  }
  const shm_place p0 = place_of(all, size, 0);
  for (int q = 0; q < size; q++) {
    *who = q;
    const shm_place p = place_of(all, size, q);
    if (p.local_size != p0.local_size)
      return "on a host with another number of ranks than rank 0's";
  }
  *who = 0;
  if (p0.local_size < 2) return "alone on its host (one rank per host)";
  return NULL;
}

void comm_shm_free(comm_shm *s) {
  if (s == NULL) return;
  if (s->cross != NULL) (void)tpdp_comm_destroy(s->cross);
  if (s->map != NULL) munmap(s->map, s->map_bytes);
  free(s->regions);
  free(s);
}

/* Every failure on one rank is told to the others in the next exchange,
 * so that all ranks make the same number of exchanges and end alike: with
 * a segment, or all without one. Only a failed exchange returns an
 * error. */
tpdp_status comm_shm_create(tpdp_comm *comm, size_t bytes, comm_shm **out) {
  *out = NULL;
  if (comm->size < 2 || comm->size > SHM_MAX_RANKS ||
      comm->ops->device_type != TPDP_DEVICE_CPU)
    return TPDP_SUCCESS;
  static _Atomic unsigned counter;
  /* Zeros where a backend's exchange leaves records unwritten (a test's
   * fake backend): they read as ranks that decline. */
  shm_record mine, all[SHM_MAX_RANKS];
  memset(&mine, 0, sizeof mine);
  memset(all, 0, sizeof all);
  mine.ok = shm_wanted();
  /* Ranks with equal host hashes are taken to share a host, which the
   * mapping then proves (the header's nonce). */
  mine.host = comm_host_hash();
  mine.bytes = bytes;
  mine.pid = (int32_t)getpid();
  mine.counter = atomic_fetch_add(&counter, 1);
  mine.nonce = random_nonce();
  comm_shm *s = NULL;
  if (TPDP_CALLOC(s, 1) != TPDP_SUCCESS ||
      TPDP_CALLOC(s->regions, (size_t)comm->size) != TPDP_SUCCESS) {
    mine.ok = 0;
    mine.err = ENOMEM;
  }
  tpdp_status st = TPDP_SUCCESS;
  /* Rank 0's file until it is unlinked: every way out unlinks it (an
   * exchange that fails, e.g. short of memory, included). */
  char name[SHM_NAME_BYTES] = "";
  /* Step 1: every rank willing, able, asking the same, as many ranks on
   * every host, two or more. */
  CHECK_GOTO(comm_host_allgather(comm, &mine, sizeof mine, all), st, done);
  int who = 0;
  const char *why = refusal(all, comm->size, &who);
  if (why != NULL) {
    TPDP_INFO("%s (rank %d): no shared-memory segment: rank %d %s", comm->name,
              comm->rank, who, why);
    goto done;
  }
  const shm_place me = place_of(all, comm->size, comm->rank);
  const int leader = me.leader;
  const int hosts = comm->size / me.local_size;
  const size_t stride = round_up(bytes > 0 ? bytes : 1, SHM_PAGE);
  const size_t ctl = control_bytes(me.local_size);
  const size_t total = ctl + stride * (size_t)me.local_size;
  const uint64_t nonce = all[leader].nonce;
  char segment[SHM_NAME_BYTES];
  segment_name(segment, all[leader].pid, all[leader].counter, nonce);
  s->map_bytes = total;
  /* Step 2: each host's first rank creates its host's segment and says how
   * it went; step 3: the others map it and say how it went. */
  int err = 0;
  if (comm->rank == leader) {
    err = map_segment(segment, total, 1, &s->map);
    if (err == 0) memcpy(name, segment, sizeof name);
    if (err == 0)
      atomic_store_explicit((_Atomic uint64_t *)&((shm_header *)s->map)->nonce,
                            nonce, memory_order_release);
  }
  mine.ok = err == 0;
  mine.err = err;
  CHECK_GOTO(comm_host_allgather(comm, &mine, sizeof mine, all), st, done);
  if (comm->rank != leader && all[leader].ok) {
    err = map_segment(segment, total, 0, &s->map);
    if (err == 0 &&
        atomic_load_explicit((_Atomic uint64_t *)&((shm_header *)s->map)->nonce,
                             memory_order_acquire) != nonce)
      err = ESTALE; /* a namesake on another host */
  }
  mine.ok = all[leader].ok && err == 0;
  mine.err = err ? err : all[leader].err;
  CHECK_GOTO(comm_host_allgather(comm, &mine, sizeof mine, all), st, done);
  if (name[0] != '\0') shm_unlink(name);
  name[0] = '\0';
  for (int q = 0; q < comm->size; q++) {
    if (all[q].ok) continue;
    TPDP_INFO(
        "%s (rank %d): no shared-memory segment of %zu bytes: rank %d "
        "could not map it (%s)",
        comm->name, comm->rank, total, q, strerror(all[q].err));
    goto done;
  }
  /* Every rank saw the same records: all of them get here, or none. */
  if (hosts > 1)
    CHECK_GOTO(tpdp_comm_split(comm, me.local_rank, me.host, &s->cross), st,
               done);
  comm_traffic_charge_to(s->cross, comm); /* its bytes are comm's */
  s->rank = me.local_rank;
  s->size = me.local_size;
  s->total = comm->size;
  s->bytes = bytes;
  s->slots = (shm_slot *)(s->map + sizeof(shm_header));
  for (int q = 0; q < me.local_size; q++)
    s->regions[q] = s->map + ctl + stride * (size_t)q;
  /* This rank's region is mapped now (its pages are zeros), as the
   * reducer's private arenas are (core_mem_alloc_zeroed): a first touch
   * costs tens of microseconds a page on some VMs. The peers' pages are
   * left to fault in where this rank first reduces them, in the first
   * iteration: every process counts the shared pages it has touched in
   * its RSS, so mapping them all here would count every region in every
   * rank's RSS (PSS splits them). */
  core_mem_populate(s->regions[s->rank], stride);
  *out = s;
  s = NULL;
  TPDP_INFO("%s (rank %d): shared-memory segment of %d x %zu bytes%s",
            comm->name, comm->rank, me.local_size, stride,
            hosts > 1 ? " on each host (hierarchical across hosts)" : "");
done:
  if (name[0] != '\0') shm_unlink(name);
  comm_shm_free(s);
  return st;
}

void *comm_shm_region(const comm_shm *s) { return s->regions[s->rank]; }

size_t comm_shm_bytes(const comm_shm *s) { return s->bytes; }

void comm_shm_discard(comm_shm *s, void *ptr, size_t bytes) {
  /* Whole pages only: the pages around a partial one may still be used. */
  uintptr_t lo = round_up((uintptr_t)ptr, SHM_PAGE);
  uintptr_t hi = ((uintptr_t)ptr + bytes) / SHM_PAGE * SHM_PAGE;
  (void)s;
  if (hi > lo) madvise((void *)lo, hi - lo, MADV_REMOVE);
}

int comm_shm_supports(tpdp_dtype dtype, tpdp_reduce_op op) {
  return (dtype == TPDP_F32 || dtype == TPDP_F64) &&
         (op == TPDP_OP_SUM || op == TPDP_OP_AVG);
}

/* ------------------------------------------------------------ waiting */

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/* Counter value v has reached call seq (wrap-safe). */
static int reached(uint32_t v, uint32_t seq) { return (int32_t)(v - seq) >= 0; }

/* Polls before a waiter sleeps: about 50 us of pause instructions, which
 * covers peers that arrive together (the bench's buckets). */
#define SHM_SPINS 1000

/* Wait until every rank's counter at `field` has reached `seq`: a short
 * spin, then a futex wait on the peer's counter (shared memory, so a
 * process-shared futex). Sleeping matters: with overlap a peer may still
 * be running its backward for hundreds of milliseconds, and a waiter that
 * spins or yields takes the core that backward needs (on the 2-core VM
 * spinning made GPT-2's dp=2 step 9% slower). No time limit of its own:
 * the caller is a blocking collective, which TPDP_TIMEOUT_S's watchdog
 * bounds. */
static void wait_all(comm_shm *s, size_t field, uint32_t seq) {
  for (int q = 0; q < s->size; q++) {
    _Atomic uint32_t *c = (_Atomic uint32_t *)((char *)&s->slots[q] + field);
    for (int k = 0;; k++) {
      uint32_t v = atomic_load_explicit(c, memory_order_acquire);
      if (reached(v, seq)) break;
      if (k < SHM_SPINS)
        cpu_relax();
      else /* returns at once if *c is no longer v */
        syscall(SYS_futex, (uint32_t *)c, FUTEX_WAIT, v, NULL, NULL, 0);
    }
  }
}

/* Set this rank's counter to seq and wake whoever sleeps on it. */
static void publish(_Atomic uint32_t *c, uint32_t seq) {
  atomic_store_explicit(c, seq, memory_order_release);
  syscall(SYS_futex, (uint32_t *)c, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* ------------------------------------------------------------ reduction */

#define SHM_CHUNK 1024 /* elements summed per pass: stays in L1 */

/* dst[q][i] = (sum over q of src[q][i]) / divisor (0: no division), for
 * the `ndst` buffers of dst and i in [lo, hi), the buffers at offset `off`
 * of each region; summed in the order of src so that the result does not
 * depend on who computes it. */
#define SHM_REDUCE(name, T)                                                \
  static void name(char *const *src, int nsrc, char *const *dst, int ndst, \
                   int64_t off, int64_t lo, int64_t hi, int divisor) {     \
    T acc[SHM_CHUNK];                                                      \
    const T inv = divisor > 0 ? (T)1 / (T)divisor : (T)1;                  \
    const int pow2 = (divisor & (divisor - 1)) == 0;                       \
    for (int64_t c = lo; c < hi; c += SHM_CHUNK) {                         \
      const int64_t n = hi - c < SHM_CHUNK ? hi - c : SHM_CHUNK;           \
      const T *restrict a = (const T *)(src[0] + off) + c;                 \
      for (int64_t i = 0; i < n; i++) acc[i] = a[i];                       \
      for (int q = 1; q < nsrc; q++) {                                     \
        const T *restrict b = (const T *)(src[q] + off) + c;               \
        for (int64_t i = 0; i < n; i++) acc[i] += b[i];                    \
      }                                                                    \
      if (divisor > 1 && pow2) {                                           \
        for (int64_t i = 0; i < n; i++) acc[i] *= inv;                     \
      } else if (divisor > 1) {                                            \
        for (int64_t i = 0; i < n; i++) acc[i] /= (T)divisor;              \
      }                                                                    \
      for (int q = 0; q < ndst; q++) {                                     \
        T *restrict d = (T *)(dst[q] + off) + c;                           \
        for (int64_t i = 0; i < n; i++) d[i] = acc[i];                     \
      }                                                                    \
    }                                                                      \
  }
SHM_REDUCE(reduce_f32, float)
SHM_REDUCE(reduce_f64, double)

static void reduce(tpdp_dtype dtype, char *const *src, int nsrc,
                   char *const *dst, int ndst, int64_t off, int64_t lo,
                   int64_t hi, int divisor) {
  if (dtype == TPDP_F32)
    reduce_f32(src, nsrc, dst, ndst, off, lo, hi, divisor);
  else
    reduce_f64(src, nsrc, dst, ndst, off, lo, hi, divisor);
}

/* This rank's slice [lo, hi) of the buffer at `off`, reduced over every
 * rank of every host into every buffer of this host. One host: the sum of
 * its buffers in local-rank order. Several: that sum into this rank's own
 * buffer, an MPI allreduce of the slice with the same local rank of the
 * other hosts, then the scaled result into every buffer of the host (also
 * after a failed allreduce, so that no peer waits; the error returned). */
static tpdp_status reduce_slice(comm_shm *s, tpdp_dtype dtype, int64_t off,
                                int64_t lo, int64_t hi, int avg) {
  char **own = &s->regions[s->rank];
  if (s->cross == NULL) {
    reduce(dtype, s->regions, s->size, s->regions, s->size, off, lo, hi,
           avg ? s->size : 0);
    return TPDP_SUCCESS;
  }
  reduce(dtype, s->regions, s->size, own, 1, off, lo, hi, 0);
  tpdp_status st = TPDP_SUCCESS;
  if (hi > lo) {
    const size_t es = tpdp_dtype_size(dtype);
    tpdp_tensor slice =
        tpdp_tensor_1d(*own + off + (size_t)lo * es, dtype, hi - lo);
    st = tpdp_allreduce(s->cross, &slice, &slice, TPDP_OP_SUM);
  }
  reduce(dtype, own, 1, s->regions, s->size, off, lo, hi, avg ? s->total : 0);
  return st;
}

/* The first peer whose call differs from this rank's, or -1. */
static int differing_peer(const comm_shm *s) {
  const shm_call *me = &s->slots[s->rank].call;
  for (int q = 0; q < s->size; q++) {
    const shm_call *o = &s->slots[q].call;
    if (o->offset != me->offset || o->count != me->count ||
        o->dtype != me->dtype || o->op != me->op)
      return q;
  }
  return -1;
}

/* "rank 1 passed 15 f32 elements at offset 0 (sum)". A peer's call marked
 * invalid says only that; this rank's says what was wrong with it. */
static void describe_call(char *buf, size_t len, int rank, shm_call c,
                          int valid, const comm_shm *mine, const void *data) {
  if (valid)
    snprintf(buf, len, "rank %d passed %lld %s elements at offset %lld (%s)",
             rank, (long long)c.count, tpdp_dtype_name((tpdp_dtype)c.dtype),
             (long long)c.offset, tpdp_reduce_op_name((tpdp_reduce_op)c.op));
  else if (mine != NULL)
    snprintf(buf, len,
             "rank %d passed %lld %s elements at %p (%s), outside its region "
             "(%zu bytes at %p) or not f32/f64 SUM/AVG",
             rank, (long long)c.count, tpdp_dtype_name((tpdp_dtype)c.dtype),
             data, tpdp_reduce_op_name((tpdp_reduce_op)c.op), mine->bytes,
             (void *)mine->regions[mine->rank]);
  else
    snprintf(buf, len,
             "rank %d passed a buffer outside its region or not f32/f64 "
             "SUM/AVG",
             rank);
}

tpdp_status comm_shm_allreduce(comm_shm *s, const tpdp_comm *comm,
                               tpdp_tensor *t, tpdp_reduce_op op) {
  const size_t es = tpdp_dtype_size(t->dtype);
  const int64_t n = tpdp_tensor_numel(t);
  const char *base = s->regions[s->rank];
  const int64_t off = (const char *)t->data - base;
  /* A buffer outside the region would have the peers write past it. The
   * call still takes part in both waits, marked invalid, so that every
   * rank fails instead of its peers waiting for it. */
  const int valid = comm_shm_supports(t->dtype, op) && off >= 0 &&
                    (size_t)off + (size_t)n * es <= s->bytes;
  const uint32_t seq = ++s->seq;
  shm_slot *me = &s->slots[s->rank];
  me->call = valid ? (shm_call){off, n, (int32_t)t->dtype, (int32_t)op}
                   : (shm_call){-1, -1, -1, -1};
  publish(&me->ready, seq);
  wait_all(s, offsetof(shm_slot, ready), seq);
  /* Every rank sees the same slots, so all of them take the same branch. */
  int q = valid ? differing_peer(s) : s->rank;
  shm_call other = {0, 0, 0, 0};
  if (q >= 0) other = s->slots[q].call; /* read before the peer moves on */
  /* Every host splits alike (the same local size): slice r of every host
   * holds the same elements, which `cross` reduces; one that is empty is
   * empty on every host, whose ranks r then all skip the cross-host call. */
  tpdp_status st = TPDP_SUCCESS;
  if (q < 0 && n > 0) {
    const int p = s->size;
    const int64_t lo = n * s->rank / p, hi = n * (s->rank + 1) / p;
    st = reduce_slice(s, t->dtype, off, lo, hi, op == TPDP_OP_AVG);
  }
  publish(&me->done, seq);
  wait_all(s, offsetof(shm_slot, done), seq);
  if (q < 0) return st;
  char mine[200], theirs[200] = "";
  describe_call(mine, sizeof mine, s->rank,
                (shm_call){off, n, (int32_t)t->dtype, (int32_t)op}, valid, s,
                t->data);
  if (q != s->rank)
    describe_call(theirs, sizeof theirs, q, other, other.count >= 0, NULL,
                  NULL);
  return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                  "shared-memory allreduce on %s: %s%s%s; every rank must "
                  "reduce the same f32/f64 buffer of its region, with SUM or "
                  "AVG",
                  comm->name, mine, q != s->rank ? ", " : "", theirs);
}
