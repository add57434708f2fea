// SPDX-License-Identifier: BSD-3-Clause
/* Fully sharded units (tpdp/fsdp.h): dim-0 chunk sharding of a module's
 * local parameters over a dp communicator, one flat all-gather and one flat
 * reduce-scatter per unit and step, driven by the module's forward and
 * backward hooks. Host memory over MPI; CUDA memory over NCCL, every copy
 * and buffer ordered on the framework's stream (options.stream), the
 * collectives on the communicator's stream after it and it after them. */
#include "tpdp/fsdp.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "comm/services.h"
#include "core/check.h"
#include "core/mem.h"

#define FSDP_EXT_KEY "tpdp.fsdp"
#define FSDP_MAGIC 0x46534450u /* "FSDP" */

typedef struct {
  tpdp_param *param; /* retained */
  char *fqn;         /* relative to the unit's module */
  int ndim;
  int64_t shape[TPDP_MAX_DIMS]; /* the full local shape */
  int64_t row_elems;            /* elements of one dim-0 row */
  int64_t chunk;                /* c = ceil(d0 / N) */
  int64_t shard_off;            /* in a rank's flat shard (elements) */
  int64_t full_off;             /* in the full buffer (elements) */
  tpdp_tensor original;         /* the caller's view, until creation ends */
} fsdp_param;

typedef enum { GATHER_NONE, GATHER_IN_FLIGHT, GATHER_DONE } gather_state;

typedef struct fsdp_group fsdp_group;

struct tpdp_fsdp_unit {
  unsigned magic;
  tpdp_module *module;
  tpdp_comm *comm;
  int rank, nranks;
  tpdp_device device; /* of every parameter: host, or one GPU */
  void *stream;       /* CUDA: the framework's stream (options.stream) */
  int level, reshard_option;
  char label[256];
  char watch_label[288]; /* "the fully sharded unit <label>" */
  fsdp_param *p;
  int np;
  int64_t shard_elems; /* S: one rank's padded flat shard */
  int64_t full_elems;  /* the unpadded full tensors, back to back */
  tpdp_dtype pdt, rdt; /* param_dtype, reduce_dtype */
  /* f32: the master copy and its gradient, each rank's rows padded. With
   * f32 parameters, levels 1-2 keep the master rows inside the persistent
   * full tensors and level 1 the gradient rows inside the full gradients
   * (ZeRO's memory: no second copy); shard / shard_grad are NULL then. */
  int shard_in_full, grad_in_full;
  float *shard, *shard_grad;
  void *full;      /* parameters when gathered (param_dtype) */
  void *full_grad; /* gradients during backward and accumulation (pdt) */
  /* summon_full_params with param_dtype other than f32: the f32 master
   * gathered here (FSDP's summon_full_params gives full precision) */
  float *summoned;
  /* transient: the all-gather's output (and its cast input), the
   * reduce-scatter's packed input (and its output before the f32 cast) */
  void *gather_buf, *gather_send, *rs_send, *rs_recv;
  tpdp_work *gather_work, *rs_work;
  /* Host memory over MPI: the collectives run over pieces of memory
   * (comm_allgather_pieces_async), gathering straight into the full
   * tensors and reducing straight out of the full gradients, with no
   * packed copy. The flat layout rank by rank as pieces: every rank's rows
   * in the full tensors (full_pc), this rank's in its shard (shard_pc) and
   * in the full tensors (mine_pc); padding rows are holes. */
  int pieces;
  comm_pieces full_pc, shard_pc, mine_pc;
  int rs_pieces; /* the reduce-scatter in flight keeps full_grad until done */
  /* a packed reduce-scatter's buffers as one piece each (send, recv): over
   * pieces the sum runs in rank order, unlike MPI's reduction tree */
  comm_piece packed[2];
  comm_pieces packed_send, packed_recv;
  void *rs_scratch; /* its room for the peers' contributions */
  int64_t rs_scratch_elems;
  int reduced; /* this step's reduce-scatter has started */
  gather_state gather;
  tpdp_handle_state state;
  int grads_pending; /* full_grad holds values not yet reduced */
  int forwarded;     /* ran forward in this step */
  tpdp_fsdp_unit *parent;
  fsdp_group *group;
};

struct fsdp_group {
  int refs;
  tpdp_fsdp_unit **units; /* members, creation order */
  int nunits, cap_units;
  tpdp_fsdp_unit **order; /* this step's forward order */
  int norder, cap_order;
  int sync;
  tpdp_fsdp_stats cur, last;
  int64_t transient; /* bytes alive beyond the persistent ones */
};

tpdp_fully_shard_options tpdp_fully_shard_options_default(void) {
  tpdp_fully_shard_options o;
  memset(&o, 0, sizeof o);
  o.size = sizeof o;
  o.version = TPDP_FULLY_SHARD_OPTIONS_VERSION;
  o.zero_level = 3;
  o.reshard_after_forward = -1;
  o.param_dtype = TPDP_F32;
  o.reduce_dtype = TPDP_F32;
  o.stream = NULL;
  return o;
}

static tpdp_status check_unit(const tpdp_fsdp_unit *u, const char *arg) {
  return core_check_handle(u, u ? u->magic : 0, FSDP_MAGIC, arg,
                           "fully sharded unit", "its module was destroyed");
}

static int64_t rows_of(const fsdp_param *q, int r) {
  int64_t lo = (int64_t)r * q->chunk, n = q->shape[0] - lo;
  return n < 0 ? 0 : (n > q->chunk ? q->chunk : n);
}

static int reshards_after_forward(const tpdp_fsdp_unit *u) {
  if (u->reshard_option >= 0) return u->reshard_option;
  return u->level == 3 && u->parent != NULL;
}

/* ------------------------------------------------------ memory accounting */

static void transient_add(tpdp_fsdp_unit *u, int64_t bytes) {
  fsdp_group *g = u->group;
  g->transient += bytes;
  if (g->transient > g->cur.peak_transient_bytes)
    g->cur.peak_transient_bytes = g->transient;
}

/* Level 1 keeps the full parameters and gradients, level 2 the full
 * parameters: persistent there, transient at level 3. */
static int full_is_persistent(const tpdp_fsdp_unit *u) { return u->level <= 2; }
static int grad_is_persistent(const tpdp_fsdp_unit *u) { return u->level == 1; }

/* The units' buffers. Large ones are mapped (mmap), so that they never
 * pile up in malloc's heap (which keeps blocks below its mmap threshold,
 * up to 32 MiB, raised as large blocks are freed). A freed mapping is kept
 * for the next request of about its size, as PyTorch's caching allocator
 * keeps device memory: the units ask for the same sizes every step, and a
 * fresh mapping costs a page fault and a page of zeros for every 4 KiB
 * touched (on the 2-core VM, 500 MB took 270 ms to touch fresh against
 * 20 ms to write again). The cache empties when the last unit is freed.
 * A 64-byte header before the data records the mapping's size (0: from
 * calloc). */
#define BUF_HEADER 64
#define BUF_MAP_MIN ((size_t)1 << 20)
#define BUF_CACHE_MAX 64
#define BUF_PAGE ((size_t)4096)

static struct {
  pthread_mutex_t mu;
  char *base[BUF_CACHE_MAX];
  size_t total[BUF_CACHE_MAX];
  int n;
  int live_units;
} buf_cache = {PTHREAD_MUTEX_INITIALIZER, {0}, {0}, 0, 0};

/* A cached mapping of `total` bytes or a little more (at most 1/8), the
 * smallest such; NULL if none. */
static char *cache_take(size_t total, size_t *got) {
  char *base = NULL;
  pthread_mutex_lock(&buf_cache.mu);
  int best = -1;
  for (int i = 0; i < buf_cache.n; i++) {
    size_t t = buf_cache.total[i];
    if (t >= total && t - total <= total / 8 &&
        (best < 0 || t < buf_cache.total[best]))
      best = i;
  }
  if (best >= 0) {
    base = buf_cache.base[best];
    *got = buf_cache.total[best];
    buf_cache.n--;
    buf_cache.base[best] = buf_cache.base[buf_cache.n];
    buf_cache.total[best] = buf_cache.total[buf_cache.n];
  }
  pthread_mutex_unlock(&buf_cache.mu);
  return base;
}

static void cache_put(char *base, size_t total) {
  pthread_mutex_lock(&buf_cache.mu);
  int kept = buf_cache.live_units > 0 && buf_cache.n < BUF_CACHE_MAX;
  if (kept) {
    buf_cache.base[buf_cache.n] = base;
    buf_cache.total[buf_cache.n++] = total;
  }
  pthread_mutex_unlock(&buf_cache.mu);
  if (!kept) munmap(base, total);
}

static void cache_units(int delta) {
  pthread_mutex_lock(&buf_cache.mu);
  buf_cache.live_units += delta;
  int empty = buf_cache.live_units == 0;
  int n = empty ? buf_cache.n : 0;
  char *base[BUF_CACHE_MAX];
  size_t total[BUF_CACHE_MAX];
  for (int i = 0; i < n; i++) {
    base[i] = buf_cache.base[i];
    total[i] = buf_cache.total[i];
  }
  if (empty) buf_cache.n = 0;
  pthread_mutex_unlock(&buf_cache.mu);
  for (int i = 0; i < n; i++) munmap(base[i], total[i]);
}

/* `bytes` of memory, zeroed when `zero` (fresh mappings always are). */
static void *buf_alloc(size_t bytes, int zero) {
  size_t total = bytes + BUF_HEADER, mapped = 0;
  char *base;
  if (bytes >= BUF_MAP_MIN) {
    total = (total + BUF_PAGE - 1) / BUF_PAGE * BUF_PAGE;
    base = cache_take(total, &mapped);
    if (base != NULL) {
      if (zero) memset(base + BUF_HEADER, 0, bytes);
    } else {
      base = mmap(NULL, total, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (base == MAP_FAILED) return NULL;
      mapped = total;
    }
  } else {
    base = calloc(1, total);
    if (base == NULL) return NULL;
  }
  memcpy(base, &mapped, sizeof mapped);
  return base + BUF_HEADER;
}

static void buf_free(void *p) {
  if (p == NULL) return;
  char *base = (char *)p - BUF_HEADER;
  size_t mapped;
  memcpy(&mapped, base, sizeof mapped);
  if (mapped)
    cache_put(base, mapped);
  else
    free(base);
}

/* ------------------------------------------- memory on the unit's device */

static int on_gpu(const tpdp_fsdp_unit *u) {
  return u->device.type == TPDP_DEVICE_CUDA;
}

/* n elements of dtype dt at `data` as a flat tensor on the unit's device. */
static tpdp_tensor flat(const tpdp_fsdp_unit *u, void *data, tpdp_dtype dt,
                        int64_t n) {
  tpdp_tensor t = tpdp_tensor_1d(data, dt, n);
  t.device = u->device;
  return t;
}

/* n elements of dtype dt (zeroed when `zero`); counted as transient when
 * `transient`. On a GPU stream-ordered on the unit's stream: the pool
 * takes the memory back when a free's turn comes on the stream, without
 * waiting for the device (as PyTorch's caching allocator does for
 * FSDP2). */
static tpdp_status alloc_elems(tpdp_fsdp_unit *u, int64_t n, tpdp_dtype dt,
                               int transient, int zero, void **out) {
  int64_t bytes = n * (int64_t)tpdp_dtype_size(dt);
  if (on_gpu(u)) {
    tpdp_status st =
        core_mem_alloc_async(u->device, (size_t)bytes, u->stream, out);
    if (st != TPDP_SUCCESS)
      return TPDP_ERR(st, "unit %s on rank %d: %lld bytes for its buffers: %s",
                      u->label, u->rank, (long long)bytes, core_error_detail());
    if (zero) {
      tpdp_tensor t = flat(u, *out, dt, n);
      CHECK(core_mem_zero_async(&t, u->stream));
    }
  } else {
    *out = buf_alloc((size_t)bytes, zero);
    if (*out == NULL)
      return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY,
                      "unit %s on rank %d: %lld bytes for its buffers",
                      u->label, u->rank, (long long)bytes);
  }
  if (transient) transient_add(u, bytes);
  return TPDP_SUCCESS;
}

static void free_elems(tpdp_fsdp_unit *u, void **p, int64_t n, tpdp_dtype dt,
                       int transient) {
  if (*p == NULL) return;
  if (on_gpu(u))
    (void)core_mem_free_async(u->device, *p, u->stream);
  else
    buf_free(*p);
  *p = NULL;
  if (transient) u->group->transient -= n * (int64_t)tpdp_dtype_size(dt);
}

/* A buffer's last free, when the unit goes (waits for the device). */
static void release(const tpdp_fsdp_unit *u, void *p) {
  if (on_gpu(u))
    (void)core_mem_free(u->device, p);
  else
    buf_free(p);
}

/* dst[0, n) = src[0, n) (dtype dt): memcpy on the host, queued on the
 * unit's stream on a GPU. */
static tpdp_status copy_elems(const tpdp_fsdp_unit *u, void *dst,
                              const void *src, tpdp_dtype dt, int64_t n) {
  if (n == 0) return TPDP_SUCCESS;
  if (!on_gpu(u)) {
    memcpy(dst, src, (size_t)n * tpdp_dtype_size(dt));
    return TPDP_SUCCESS;
  }
  tpdp_tensor d = flat(u, dst, dt, n), s = flat(u, (void *)src, dt, n);
  return core_mem_copy_async(&d, &s, u->stream);
}

static tpdp_status zero_elems(const tpdp_fsdp_unit *u, void *dst, tpdp_dtype dt,
                              int64_t n) {
  if (n == 0) return TPDP_SUCCESS;
  if (!on_gpu(u)) {
    memset(dst, 0, (size_t)n * tpdp_dtype_size(dt));
    return TPDP_SUCCESS;
  }
  tpdp_tensor d = flat(u, dst, dt, n);
  return core_mem_zero_async(&d, u->stream);
}

/* The element at index k of a buffer of dtype dt (f32, bf16 or f16). */
static void *at(void *base, tpdp_dtype dt, int64_t k) {
  return (char *)base + k * (int64_t)tpdp_dtype_size(dt);
}

/* dst = src converted between f32, bf16 and f16 on the unit's device: a
 * plain copy when the dtypes agree (CUDA units have f32 only: checked at
 * creation). */
static tpdp_status convert_elems(const tpdp_fsdp_unit *u, void *dst,
                                 tpdp_dtype dd, const void *src, tpdp_dtype sd,
                                 int64_t n) {
  if (dd == sd) return copy_elems(u, dst, src, dd, n);
  return tpdp_convert_floats(dst, dd, src, sd, n); /* host: rounds as torch */
}

/* Where this rank's rows of parameter i live (f32): in the separate shard
 * or inside the full tensors. */
static float *shard_rows(const tpdp_fsdp_unit *u, const fsdp_param *q) {
  if (!u->shard_in_full) return u->shard + q->shard_off;
  return (float *)u->full + q->full_off + u->rank * q->chunk * q->row_elems;
}
static float *grad_rows(const tpdp_fsdp_unit *u, const fsdp_param *q) {
  if (!u->grad_in_full) return u->shard_grad + q->shard_off;
  return (float *)u->full_grad + q->full_off +
         u->rank * q->chunk * q->row_elems;
}

/* ------------------------------------------------------------- views */

static tpdp_status view(const tpdp_fsdp_unit *u, const fsdp_param *q,
                        void *base, tpdp_dtype dt, int64_t rows,
                        tpdp_tensor *out) {
  int64_t shape[TPDP_MAX_DIMS];
  memcpy(shape, q->shape, sizeof shape);
  shape[0] = rows;
  return tpdp_tensor_init(out, base, dt, u->device, q->ndim, shape);
}

/* The parameters at full tensors of dtype dt back to back from `base`. */
static tpdp_status point_at(tpdp_fsdp_unit *u, void *base, tpdp_dtype dt) {
  for (int i = 0; i < u->np; i++) {
    const fsdp_param *q = &u->p[i];
    tpdp_tensor t;
    CHECK(view(u, q, at(base, dt, q->full_off), dt, q->shape[0], &t));
    CHECK(tpdp_param_set_tensor(q->param, &t));
    CHECK(tpdp_param_set_row_shard(q->param, 0, -1));
  }
  return TPDP_SUCCESS;
}

static tpdp_status point_at_shard(tpdp_fsdp_unit *u) {
  for (int i = 0; i < u->np; i++) {
    const fsdp_param *q = &u->p[i];
    int64_t rows = rows_of(q, u->rank);
    tpdp_tensor t;
    CHECK(view(u, q, shard_rows(u, q), TPDP_F32, rows, &t));
    CHECK(tpdp_param_set_tensor(q->param, &t));
    CHECK(tpdp_param_set_row_shard(q->param, rows ? u->rank * q->chunk : 0,
                                   q->shape[0]));
  }
  return TPDP_SUCCESS;
}

/* The gradients: the full ones (param_dtype) during backward, the f32
 * shards after finalize. */
static tpdp_status set_grads(tpdp_fsdp_unit *u, int full) {
  for (int i = 0; i < u->np; i++) {
    const fsdp_param *q = &u->p[i];
    tpdp_tensor t;
    if (full)
      CHECK(view(u, q, at(u->full_grad, u->pdt, q->full_off), u->pdt,
                 q->shape[0], &t));
    else
      CHECK(view(u, q, grad_rows(u, q), TPDP_F32, rows_of(q, u->rank), &t));
    CHECK(tpdp_param_set_grad(q->param, &t));
  }
  return TPDP_SUCCESS;
}

/* The full gradients, zeroed unless they hold an accumulation. */
static tpdp_status zeroed_full_grad(tpdp_fsdp_unit *u) {
  if (u->full_grad == NULL)
    return alloc_elems(u, u->full_elems, u->pdt, !grad_is_persistent(u), 1,
                       &u->full_grad);
  if (!u->grads_pending)
    return zero_elems(u, u->full_grad, u->pdt, u->full_elems);
  return TPDP_SUCCESS;
}

/* -------------------------------------------------------- collectives */

/* The unit's collectives and waits carry its name (comm_watch_label): a
 * TPDP_TIMEOUT_S report and a TPDP_DEBUG_COLLECTIVES mismatch name it. */
#define AS_UNIT(u, call)                   \
  do {                                     \
    const char *saved_ = comm_watch_label; \
    comm_watch_label = (u)->watch_label;   \
    tpdp_status as_unit_st_ = (call);      \
    comm_watch_label = saved_;             \
    CHECK(as_unit_st_);                    \
  } while (0)

/* The flat layout as pieces (see tpdp_fsdp_unit.pieces): rank q's rows of
 * each parameter at `base(i) + q * chunk * row` for every q in [q0, q1),
 * each followed by a hole for its padding. */
static tpdp_status make_pieces(const tpdp_fsdp_unit *u, int q0, int q1,
                               int in_full, comm_pieces *out) {
  comm_piece *pc = NULL;
  CHECK(TPDP_CALLOC(pc, (size_t)(2 * u->np * (q1 - q0))));
  int k = 0;
  for (int q = q0; q < q1; q++)
    for (int i = 0; i < u->np; i++) {
      const fsdp_param *p = &u->p[i];
      int64_t rows = rows_of(p, q);
      int64_t off =
          in_full ? p->full_off + q * p->chunk * p->row_elems : p->shard_off;
      if (rows > 0) pc[k++] = (comm_piece){off, rows * p->row_elems};
      if (rows < p->chunk)
        pc[k++] = (comm_piece){-1, (p->chunk - rows) * p->row_elems};
    }
  *out = (comm_pieces){pc, k};
  return TPDP_SUCCESS;
}

static tpdp_status build_pieces(tpdp_fsdp_unit *u) {
  u->pieces = comm_supports_pieces(u->comm);
  if (!u->pieces) return TPDP_SUCCESS;
  CHECK(make_pieces(u, 0, u->nranks, 1, &u->full_pc));
  CHECK(make_pieces(u, u->rank, u->rank + 1, 0, &u->shard_pc));
  CHECK(make_pieces(u, u->rank, u->rank + 1, 1, &u->mine_pc));
  return TPDP_SUCCESS;
}

/* Start the all-gather of the shards, in param_dtype (the f32 shard cast
 * into a send buffer first when that differs). */
static tpdp_status gather_start(tpdp_fsdp_unit *u) {
  if (u->gather != GATHER_NONE) return TPDP_SUCCESS;
  int64_t S = u->shard_elems, n = S * u->nranks;
  if (u->full == NULL)
    CHECK(alloc_elems(u, u->full_elems, u->pdt, !full_is_persistent(u), 0,
                      &u->full));
  void *send_buf = u->shard;
  if (u->pdt != TPDP_F32 || (u->shard_in_full && !u->pieces)) {
    /* this rank's rows, padded, in param_dtype */
    CHECK(alloc_elems(u, S, u->pdt, 1, 1, &u->gather_send));
    for (int i = 0; i < u->np; i++) {
      const fsdp_param *q = &u->p[i];
      CHECK(convert_elems(u, at(u->gather_send, u->pdt, q->shard_off), u->pdt,
                          shard_rows(u, q), TPDP_F32,
                          rows_of(q, u->rank) * q->row_elems));
    }
    send_buf = u->gather_send;
  }
  if (u->pieces) {
    /* Straight into the full tensors; this rank's rows are there already
     * when they live inside them. */
    int in_full = send_buf == u->shard && u->shard_in_full;
    if (in_full) send_buf = u->full;
    tpdp_tensor send = tpdp_tensor_1d(send_buf, u->pdt, S);
    tpdp_tensor recv = tpdp_tensor_1d(u->full, u->pdt, n);
    AS_UNIT(u, comm_allgather_pieces_async(
                   u->comm, &send, in_full ? &u->mine_pc : &u->shard_pc, &recv,
                   &u->full_pc, &u->gather_work));
  } else {
    CHECK(alloc_elems(u, n, u->pdt, 1, 0, &u->gather_buf));
    tpdp_tensor send = flat(u, send_buf, u->pdt, S);
    tpdp_tensor recv = flat(u, u->gather_buf, u->pdt, n);
    /* GPU: after the shard's last update and the buffers' allocation */
    if (on_gpu(u)) AS_UNIT(u, tpdp_comm_order_after(u->comm, u->stream));
    AS_UNIT(u, tpdp_allgather_async(u->comm, &send, &recv, &u->gather_work));
  }
  u->gather = GATHER_IN_FLIGHT;
  u->group->cur.allgathers++;
  u->group->cur.bytes_allgathered += n * (int64_t)tpdp_dtype_size(u->pdt);
  return TPDP_SUCCESS;
}

/* Each rank's rows out of the padded flat layout `packed` (rank by rank)
 * into the full tensors at `full`, both of dtype dt. */
static tpdp_status unpack(const tpdp_fsdp_unit *u, void *full,
                          const void *packed, tpdp_dtype dt) {
  for (int r = 0; r < u->nranks; r++)
    for (int i = 0; i < u->np; i++) {
      const fsdp_param *q = &u->p[i];
      CHECK(
          copy_elems(u, at(full, dt, q->full_off + r * q->chunk * q->row_elems),
                     at((void *)packed, dt, r * u->shard_elems + q->shard_off),
                     dt, rows_of(q, r) * q->row_elems));
    }
  return TPDP_SUCCESS;
}

/* Wait for the all-gather (starting it if needed) and, from a packed
 * buffer, copy each rank's rows out of the padded flat layout into the
 * full tensors. */
static tpdp_status gather_finish(tpdp_fsdp_unit *u) {
  if (u->gather == GATHER_DONE) return TPDP_SUCCESS;
  CHECK(gather_start(u));
  tpdp_work *w = u->gather_work;
  u->gather_work = NULL;
  /* GPU: the framework's stream waits for it (the host does not) */
  AS_UNIT(u,
          on_gpu(u) ? tpdp_work_wait_stream(w, u->stream) : tpdp_work_wait(w));
  if (u->gather_buf != NULL) CHECK(unpack(u, u->full, u->gather_buf, u->pdt));
  free_elems(u, &u->gather_buf, u->shard_elems * u->nranks, u->pdt, 1);
  free_elems(u, &u->gather_send, u->shard_elems, u->pdt, 1);
  u->gather = GATHER_DONE;
  return point_at(u, u->full, u->pdt);
}

/* summon_full_params under another param_dtype: the f32 master shards
 * gathered into u->summoned (synchronous), the parameters pointed there.
 * The shards are separate then (shard_in_full needs f32 parameters). */
static tpdp_status summon_master(tpdp_fsdp_unit *u) {
  int64_t S = u->shard_elems, n = S * u->nranks;
  CHECK(alloc_elems(u, u->full_elems, TPDP_F32, 1, 0, (void **)&u->summoned));
  tpdp_tensor send = tpdp_tensor_1d(u->shard, TPDP_F32, S);
  tpdp_work *w = NULL;
  if (u->pieces) {
    tpdp_tensor recv = tpdp_tensor_1d(u->summoned, TPDP_F32, n);
    AS_UNIT(u, comm_allgather_pieces_async(u->comm, &send, &u->shard_pc, &recv,
                                           &u->full_pc, &w));
    AS_UNIT(u, tpdp_work_wait(w));
  } else {
    void *packed = NULL;
    CHECK(alloc_elems(u, n, TPDP_F32, 1, 0, &packed));
    tpdp_tensor recv = tpdp_tensor_1d(packed, TPDP_F32, n);
    tpdp_status st = tpdp_allgather(u->comm, &send, &recv);
    if (st == TPDP_SUCCESS) st = unpack(u, u->summoned, packed, TPDP_F32);
    free_elems(u, &packed, n, TPDP_F32, 1);
    CHECK(st);
  }
  u->group->cur.allgathers++;
  u->group->cur.bytes_allgathered += n * (int64_t)sizeof(float);
  return point_at(u, u->summoned, TPDP_F32);
}

static tpdp_status reshard(tpdp_fsdp_unit *u) {
  CHECK(point_at_shard(u));
  if (!full_is_persistent(u)) free_elems(u, &u->full, u->full_elems, u->pdt, 1);
  u->gather = GATHER_NONE;
  return TPDP_SUCCESS;
}

static tpdp_status reduce_finish(tpdp_fsdp_unit *u);

/* Start the reduce-scatter (AVG) of the full gradients into the gradient
 * shard. Without a cast (param_dtype = reduce_dtype) over pieces, straight
 * from the full gradients, which stay until it is done (so one at a time
 * is in flight: the others are finished first). With a cast, packed rank
 * by rank (padding zero) in reduce_dtype first. The result lands in the
 * f32 shard, in place inside the full gradients (level 1, f32), or in a
 * reduce_dtype buffer cast to the f32 shard at the end. Over pieces the
 * sum runs in rank order (bf16/f16 in f32, rounded once), whatever the
 * dtypes. */
static tpdp_status reduce_start(tpdp_fsdp_unit *u) {
  int64_t S = u->shard_elems, n = S * u->nranks;
  u->grads_pending = 0;
  u->reduced = 1;
  const int direct = u->pieces && u->pdt == u->rdt;
  const int in_place = direct && u->grad_in_full;
  void *send_buf = u->full_grad;
  if (direct) {
    fsdp_group *g = u->group;
    for (int i = 0; i < g->nunits; i++)
      if (g->units[i] != u) CHECK(reduce_finish(g->units[i]));
  } else {
    CHECK(alloc_elems(u, n, u->rdt, 1, 1, &u->rs_send));
    for (int r = 0; r < u->nranks; r++)
      for (int i = 0; i < u->np; i++) {
        const fsdp_param *q = &u->p[i];
        CHECK(convert_elems(
            u, at(u->rs_send, u->rdt, r * S + q->shard_off), u->rdt,
            at(u->full_grad, u->pdt, q->full_off + r * q->chunk * q->row_elems),
            u->pdt, rows_of(q, r) * q->row_elems));
      }
    if (!grad_is_persistent(u))
      free_elems(u, &u->full_grad, u->full_elems, u->pdt, 1);
    send_buf = u->rs_send;
  }
  void *recv_buf = in_place ? u->full_grad : (void *)u->shard_grad;
  if (!in_place && (u->rdt != TPDP_F32 || u->grad_in_full)) {
    CHECK(alloc_elems(u, S, u->rdt, 1, 0, &u->rs_recv));
    recv_buf = u->rs_recv;
  }
  tpdp_tensor send = flat(u, send_buf, u->rdt, n);
  tpdp_tensor recv = flat(u, recv_buf, u->rdt, S);
  if (u->pieces) {
    /* Packed, the buffers are contiguous (padding travels, as zeros). */
    int64_t mine = direct ? 0 : S; /* this rank's elements outside holes */
    for (int i = 0; i < u->np && direct; i++)
      mine += rows_of(&u->p[i], u->rank) * u->p[i].row_elems;
    u->rs_scratch_elems =
        comm_reduce_scatter_pieces_scratch(u->comm, mine, in_place);
    if (u->rs_scratch_elems > 0)
      CHECK(alloc_elems(u, u->rs_scratch_elems, u->rdt, 1, 0, &u->rs_scratch));
    u->packed[0] = (comm_piece){0, n};
    u->packed[1] = (comm_piece){0, S};
    u->packed_send = (comm_pieces){&u->packed[0], 1};
    u->packed_recv = (comm_pieces){&u->packed[1], 1};
    const comm_pieces *rp = in_place ? &u->mine_pc : &u->shard_pc;
    AS_UNIT(u, comm_reduce_scatter_pieces_async(
                   u->comm, &send, direct ? &u->full_pc : &u->packed_send,
                   &recv, direct ? rp : &u->packed_recv, TPDP_OP_AVG,
                   u->rs_scratch, u->rs_scratch_elems, &u->rs_work));
    u->rs_pieces = direct;
  } else {
    /* GPU: after the packing (and the backward that wrote the gradients) */
    if (on_gpu(u)) AS_UNIT(u, tpdp_comm_order_after(u->comm, u->stream));
    AS_UNIT(u, tpdp_reduce_scatter_async(u->comm, &send, &recv, TPDP_OP_AVG,
                                         &u->rs_work));
  }
  u->group->cur.reduce_scatters++;
  u->group->cur.bytes_reduce_scattered += n * (int64_t)tpdp_dtype_size(u->rdt);
  return TPDP_SUCCESS;
}

static tpdp_status reduce_finish(tpdp_fsdp_unit *u) {
  if (u->rs_work == NULL) return TPDP_SUCCESS;
  tpdp_work *w = u->rs_work;
  u->rs_work = NULL;
  const char *saved = comm_watch_label;
  comm_watch_label = u->watch_label;
  /* GPU: the framework's stream waits for it (the host does not) */
  tpdp_status st =
      on_gpu(u) ? tpdp_work_wait_stream(w, u->stream) : tpdp_work_wait(w);
  comm_watch_label = saved;
  for (int i = 0; st == TPDP_SUCCESS && u->rs_recv != NULL && i < u->np; i++) {
    const fsdp_param *q = &u->p[i];
    st = convert_elems(u, grad_rows(u, q), TPDP_F32,
                       at(u->rs_recv, u->rdt, q->shard_off), u->rdt,
                       rows_of(q, u->rank) * q->row_elems);
  }
  if (u->rs_pieces && !grad_is_persistent(u) && !u->grads_pending)
    free_elems(u, &u->full_grad, u->full_elems, u->pdt, 1);
  u->rs_pieces = 0;
  free_elems(u, &u->rs_scratch, u->rs_scratch_elems, u->rdt, 1);
  free_elems(u, &u->rs_send, u->shard_elems * u->nranks, u->rdt, 1);
  free_elems(u, &u->rs_recv, u->shard_elems, u->rdt, 1);
  return st;
}

/* ------------------------------------------------------------- states */

static tpdp_status expect_state(const tpdp_fsdp_unit *u,
                                const tpdp_handle_state *allowed, int n,
                                const char *call) {
  for (int i = 0; i < n; i++)
    if (u->state == allowed[i]) return TPDP_SUCCESS;
  char want[128] = "";
  for (int i = 0; i < n; i++) {
    strncat(want, i ? " or " : "", sizeof want - strlen(want) - 1);
    strncat(want, tpdp_handle_state_name(allowed[i]),
            sizeof want - strlen(want) - 1);
  }
  return TPDP_ERR(TPDP_ERR_STATE,
                  "fully sharded unit %s on rank %d: %s expects state %s, "
                  "the unit is in %s",
                  u->label, u->rank, call, want,
                  tpdp_handle_state_name(u->state));
}

/* ------------------------------------------------------------- hooks */

/* MPI advances a non-blocking collective only inside MPI calls: each hook
 * tests the group's collectives in flight (prefetched all-gathers,
 * reduce-scatters of units whose backward ended), so that they move on
 * between the blocks' compute instead of all at the next wait. */
static tpdp_status progress(fsdp_group *g) {
  for (int i = 0; i < g->nunits; i++) {
    tpdp_fsdp_unit *v = g->units[i];
    int done = 0;
    if (v->gather_work) AS_UNIT(v, tpdp_work_test(v->gather_work, &done));
    done = 0;
    if (v->rs_work) AS_UNIT(v, tpdp_work_test(v->rs_work, &done));
    /* done: its full gradients can go now */
    if (done && v->rs_pieces) CHECK(reduce_finish(v));
  }
  return TPDP_SUCCESS;
}

static tpdp_status on_forward_begin(tpdp_module *m, void *ctx) {
  (void)m;
  tpdp_fsdp_unit *u = ctx;
  CHECK(progress(u->group));
  /* BACKWARD_POST: the next micro-batch of an accumulation. */
  static const tpdp_handle_state ok[] = {TPDP_HANDLE_IDLE, TPDP_HANDLE_FORWARD,
                                         TPDP_HANDLE_BACKWARD_POST};
  CHECK(expect_state(u, ok, 3,
                     "forward (a second forward during backward, "
                     "e.g. activation recomputation, is not "
                     "supported)"));
  if (u->reduced)
    return TPDP_ERR(TPDP_ERR_STATE,
                    "fully sharded unit %s on rank %d: forward after a synced "
                    "backward; call tpdp_fsdp_finalize first",
                    u->label, u->rank);
  CHECK(gather_finish(u));
  if (!u->forwarded) {
    fsdp_group *g = u->group;
    CHECK(core_grow((void **)&g->order, &g->cap_order, g->norder + 1,
                    sizeof *g->order));
    g->order[g->norder++] = u;
    u->forwarded = 1;
  }
  u->state = TPDP_HANDLE_FORWARD;
  return TPDP_SUCCESS;
}

static tpdp_status on_forward_end(tpdp_module *m, void *ctx) {
  (void)m;
  tpdp_fsdp_unit *u = ctx;
  CHECK(progress(u->group));
  if (reshards_after_forward(u)) CHECK(reshard(u));
  return TPDP_SUCCESS;
}

static tpdp_status on_backward_begin(tpdp_module *m, void *ctx) {
  (void)m;
  tpdp_fsdp_unit *u = ctx;
  CHECK(progress(u->group));
  static const tpdp_handle_state ok[] = {TPDP_HANDLE_FORWARD};
  CHECK(expect_state(u, ok, 1, "backward (backward runs after forward)"));
  CHECK(gather_finish(u));
  /* Prefetch the unit that ran before this one in forward: its backward
   * comes next. */
  fsdp_group *g = u->group;
  for (int i = 1; i < g->norder; i++)
    if (g->order[i] == u) {
      CHECK(gather_start(g->order[i - 1]));
      break;
    }
  CHECK(zeroed_full_grad(u));
  u->grads_pending = 1;
  CHECK(set_grads(u, 1));
  u->state = TPDP_HANDLE_BACKWARD_PRE;
  return TPDP_SUCCESS;
}

static tpdp_status on_backward_end(tpdp_module *m, void *ctx) {
  (void)m;
  tpdp_fsdp_unit *u = ctx;
  CHECK(progress(u->group));
  static const tpdp_handle_state ok[] = {TPDP_HANDLE_BACKWARD_PRE};
  CHECK(expect_state(u, ok, 1, "the end of backward"));
  u->state = TPDP_HANDLE_BACKWARD_POST;
  if (u->group->sync && u->level >= 2) CHECK(reduce_start(u));
  if (u->level == 3) CHECK(reshard(u));
  return TPDP_SUCCESS;
}

/* ------------------------------------------------------------ creation */

typedef struct {
  tpdp_fsdp_unit *u;
  tpdp_status local;
} collect_ctx;

/* A parameter a unit can shard: f32, contiguous, on the unit's device
 * (that of its first parameter), the memory the dp communicator moves. */
static tpdp_status check_param(const tpdp_fsdp_unit *u, const fsdp_param *q,
                               const tpdp_tensor *t) {
  char what[320], dev[32], first[32];
  snprintf(what, sizeof what, "fully_shard of %s on rank %d: parameter '%s'",
           u->label, u->rank, q->fqn);
  tpdp_device_format(t->device, dev, sizeof dev);
  tpdp_device_format(u->device, first, sizeof first);
  if (t->dtype != TPDP_F32)
    return TPDP_ERR(TPDP_ERR_DTYPE_MISMATCH,
                    "%s is %s; only f32 parameters can be sharded", what,
                    tpdp_dtype_name(t->dtype));
  if (t->ndim < 1 || !tpdp_tensor_is_contiguous(t))
    return TPDP_ERR(TPDP_ERR_UNSUPPORTED,
                    "%s must be a contiguous tensor of at least one dimension",
                    what);
  CHECK(core_mem_supported(t->device, what));
  if (!tpdp_device_equal(t->device, u->device))
    return TPDP_ERR(TPDP_ERR_DEVICE_MISMATCH,
                    "%s is on %s, the unit's first parameter on %s: a unit's "
                    "parameters share one device",
                    what, dev, first);
  if (t->device.type != tpdp_comm_device_type(u->comm))
    return TPDP_ERR(
        TPDP_ERR_DEVICE_MISMATCH,
        "%s is on %s but the dp communicator %s (%s) moves %s "
        "memory",
        what, dev, tpdp_comm_name(u->comm), tpdp_comm_backend(u->comm),
        tpdp_comm_device_type(u->comm) == TPDP_DEVICE_CUDA ? "GPU" : "host");
  return TPDP_SUCCESS;
}

static int inside_nested_unit(const tpdp_module *m, const tpdp_module *top) {
  for (const tpdp_module *a = m; a && a != top; a = tpdp_module_parent(a))
    if (tpdp_fsdp_unit_of(a) != NULL) return 1;
  return 0;
}

static tpdp_status collect(tpdp_module *m, const char *prefix, int level,
                           void *vctx) {
  (void)level;
  collect_ctx *c = vctx;
  tpdp_fsdp_unit *u = c->u;
  if (inside_nested_unit(m, u->module)) return TPDP_SUCCESS;
  for (int k = 0; k < tpdp_module_num_params(m); k++) {
    const char *name;
    tpdp_param *p = tpdp_module_param(m, k, &name);
    int seen = 0;
    for (int i = 0; i < u->np && !seen; i++) seen = u->p[i].param == p;
    if (seen) continue;
    int cap = u->np; /* grown one at a time: creation only */
    CHECK(core_grow((void **)&u->p, &cap, u->np + 1, sizeof *u->p));
    fsdp_param *q = &u->p[u->np++];
    memset(q, 0, sizeof *q);
    size_t len = strlen(prefix) + strlen(name) + 1;
    q->fqn = malloc(len);
    if (q->fqn == NULL) return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "FQN");
    snprintf(q->fqn, len, "%s%s", prefix, name);
    tpdp_param_retain(p);
    q->param = p;
    const tpdp_tensor *t = tpdp_param_tensor(p);
    if (c->local != TPDP_SUCCESS) continue;
    if (u->np == 1) u->device = t->device; /* the unit's first parameter */
    c->local = check_param(u, q, t);
    q->original = *t;
    q->ndim = t->ndim;
    memcpy(q->shape, t->shape, sizeof q->shape);
  }
  return TPDP_SUCCESS;
}

/* What the ranks must agree on at creation. */
typedef struct {
  int32_t status;
  int32_t level;
  int32_t nparams;
  int32_t pad;
  uint64_t shapes;   /* FNV-1a over every parameter's ndim and shape */
  int64_t msg_bytes; /* TPDP_PIECES_MSG_BYTES (0: no collectives over
                        pieces): both sides of a message cut alike */
} fsdp_agree_rec;

static int rec_same(const void *a, const void *b) {
  const fsdp_agree_rec *x = a, *y = b;
  /* A rank whose own check failed is reported as such, not as different. */
  if (x->status != TPDP_SUCCESS || y->status != TPDP_SUCCESS) return 1;
  return x->level == y->level && x->nparams == y->nparams &&
         x->shapes == y->shapes && x->msg_bytes == y->msg_bytes;
}

static void rec_describe(core_strbuf *b, const void *rec) {
  const fsdp_agree_rec *r = rec;
  core_sb_printf(b,
                 "zero level %d, param_dtype %s, reduce_dtype %s, %d "
                 "parameters, shapes hash %016llx",
                 r->level & 0xff,
                 tpdp_dtype_name((tpdp_dtype)(r->level >> 8 & 0xff)),
                 tpdp_dtype_name((tpdp_dtype)(r->level >> 16 & 0xff)),
                 r->nparams, (unsigned long long)r->shapes);
  if (r->msg_bytes > 0)
    core_sb_printf(b, ", TPDP_PIECES_MSG_BYTES %lld", (long long)r->msg_bytes);
}

static CORE_THREAD_LOCAL const tpdp_fsdp_unit
    *agree_unit; /* for rec_mismatch's message */

static tpdp_status rec_mismatch(const tpdp_comm *comm, const void *a,
                                const void *b, const char *ranks) {
  (void)a;
  (void)b;
  return TPDP_ERR(TPDP_ERR_SHAPE_MISMATCH,
                  "fully_shard of %s on rank %d: the ranks of '%s' disagree "
                  "on the unit: %s",
                  agree_unit ? agree_unit->label : "?", tpdp_comm_rank(comm),
                  tpdp_comm_name(comm), ranks);
}

static uint64_t fnv(uint64_t h, int64_t v) {
  for (int i = 0; i < 8; i++) {
    h ^= (uint64_t)((v >> (8 * i)) & 0xff);
    h *= 1099511628211ull;
  }
  return h;
}

static void unit_free(void *vu) {
  tpdp_fsdp_unit *u = vu;
  if (u == NULL) return;
  if (u->gather_work) tpdp_work_wait(u->gather_work);
  if (u->rs_work) tpdp_work_wait(u->rs_work);
  fsdp_group *g = u->group;
  if (g) {
    int k = 0;
    for (int i = 0; i < g->nunits; i++) {
      if (g->units[i] == u) continue;
      if (g->units[i]->parent == u) g->units[i]->parent = NULL;
      g->units[k++] = g->units[i];
    }
    g->nunits = k;
    k = 0;
    for (int i = 0; i < g->norder; i++)
      if (g->order[i] != u) g->order[k++] = g->order[i];
    g->norder = k;
    if (--g->refs == 0) {
      free(g->units);
      free(g->order);
      free(g);
    }
  }
  for (int i = 0; i < u->np; i++) {
    free(u->p[i].fqn);
    tpdp_param_release(u->p[i].param);
  }
  free(u->p);
  void *bufs[] = {u->shard,    u->shard_grad, u->full,        u->full_grad,
                  u->summoned, u->gather_buf, u->gather_send, u->rs_send,
                  u->rs_recv,  u->rs_scratch};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) release(u, bufs[i]);
  free((void *)u->full_pc.piece);
  free((void *)u->shard_pc.piece);
  free((void *)u->mine_pc.piece);
  u->magic = 0;
  free(u);
  cache_units(-1);
}

/* Move every unit of `from` into `to`. */
static tpdp_status merge_group(fsdp_group *to, fsdp_group *from) {
  if (from == to) return TPDP_SUCCESS;
  CHECK(core_grow((void **)&to->units, &to->cap_units,
                  to->nunits + from->nunits, sizeof *to->units));
  for (int i = 0; i < from->nunits; i++) {
    to->units[to->nunits++] = from->units[i];
    from->units[i]->group = to;
    to->refs++;
  }
  to->transient += from->transient;
  free(from->units);
  free(from->order);
  free(from);
  return TPDP_SUCCESS;
}

typedef struct {
  tpdp_fsdp_unit *u;
  tpdp_status st;
} adopt_ctx;

static tpdp_status adopt(tpdp_module *m, const char *prefix, int level,
                         void *vctx) {
  (void)prefix;
  (void)level;
  adopt_ctx *c = vctx;
  tpdp_fsdp_unit *v = tpdp_fsdp_unit_of(m);
  if (v == NULL || v == c->u) return TPDP_SUCCESS;
  if (v->parent == NULL) v->parent = c->u;
  return merge_group(c->u->group, v->group);
}

static tpdp_status check_options(const tpdp_fully_shard_options *o) {
  if (o->size != sizeof *o || o->version != TPDP_FULLY_SHARD_OPTIONS_VERSION)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "tpdp_fully_shard_options: size %zu version %u, this "
                    "library expects size %zu version %d (use "
                    "tpdp_fully_shard_options_default())",
                    o->size, o->version, sizeof *o,
                    TPDP_FULLY_SHARD_OPTIONS_VERSION);
  if (o->zero_level < 1 || o->zero_level > 3)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "zero_level is %d; expected 1, 2 or 3 (level 0 is the "
                    "DDP reducer, tpdp/reducer.h)",
                    o->zero_level);
  if (o->reshard_after_forward < -1 || o->reshard_after_forward > 1)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "reshard_after_forward is %d; expected -1, 0 or 1",
                    o->reshard_after_forward);
  const tpdp_dtype dts[2] = {o->param_dtype, o->reduce_dtype};
  for (int k = 0; k < 2; k++)
    if (dts[k] != TPDP_F32 && dts[k] != TPDP_BF16 && dts[k] != TPDP_F16)
      return TPDP_ERR(
          TPDP_ERR_DTYPE_MISMATCH, "%s is %s; expected f32, bf16 or f16",
          k ? "reduce_dtype" : "param_dtype", tpdp_dtype_name(dts[k]));
  return TPDP_SUCCESS;
}

static tpdp_status register_hooks(tpdp_fsdp_unit *u) {
  tpdp_hook_handle h;
  CHECK(tpdp_module_register_forward_pre_hook(u->module, on_forward_begin, u,
                                              &h));
  CHECK(tpdp_module_register_forward_hook(u->module, on_forward_end, u, &h));
  CHECK(tpdp_module_register_backward_pre_hook(u->module, on_backward_begin, u,
                                               &h));
  CHECK(tpdp_module_register_backward_hook(u->module, on_backward_end, u, &h));
  return TPDP_SUCCESS;
}

/* Lay out the shard, copy this rank's rows in and point the parameters at
 * them. */
static tpdp_status build_shard(tpdp_fsdp_unit *u) {
  int64_t soff = 0, foff = 0;
  for (int i = 0; i < u->np; i++) {
    fsdp_param *q = &u->p[i];
    q->row_elems = 1;
    for (int d = 1; d < q->ndim; d++) q->row_elems *= q->shape[d];
    q->chunk = (q->shape[0] + u->nranks - 1) / u->nranks;
    q->shard_off = soff;
    q->full_off = foff;
    soff += q->chunk * q->row_elems;
    foff += q->shape[0] * q->row_elems;
  }
  u->shard_elems = soff;
  u->full_elems = foff;
  u->shard_in_full = u->level <= 2 && u->pdt == TPDP_F32;
  u->grad_in_full = u->level == 1 && u->pdt == TPDP_F32;
  if (u->shard_in_full) /* persistent; the other ranks' rows come later */
    CHECK(alloc_elems(u, foff, TPDP_F32, 0, 1, &u->full));
  else
    CHECK(alloc_elems(u, soff, TPDP_F32, 0, 1, (void **)&u->shard));
  if (u->grad_in_full)
    CHECK(alloc_elems(u, foff, TPDP_F32, 0, 1, &u->full_grad));
  else
    CHECK(alloc_elems(u, soff, TPDP_F32, 0, 1, (void **)&u->shard_grad));
  for (int i = 0; i < u->np; i++) {
    const fsdp_param *q = &u->p[i];
    const float *src = tpdp_param_tensor(q->param)->data;
    CHECK(copy_elems(u, shard_rows(u, q),
                     src + u->rank * q->chunk * q->row_elems, TPDP_F32,
                     rows_of(q, u->rank) * q->row_elems));
  }
  /* The caller may free its tensors once this returns. */
  if (on_gpu(u)) CHECK(core_mem_sync(u->device, u->stream));
  CHECK(build_pieces(u));
  return point_at_shard(u);
}

tpdp_status tpdp_fully_shard(tpdp_module *module, tpdp_comm *dp,
                             const tpdp_fully_shard_options *options,
                             tpdp_fsdp_unit **out) {
  TPDP_API_ENTRY;
  CHECK_PTR(out);
  *out = NULL;
  CHECK_PTR(module);
  CHECK_PTR(dp);
  tpdp_fully_shard_options o = tpdp_fully_shard_options_default();
  if (options) o = *options;
  tpdp_status local = check_options(&o);

  tpdp_fsdp_unit *u = calloc(1, sizeof *u);
  fsdp_group *g = calloc(1, sizeof *g);
  if (u == NULL || g == NULL) {
    free(u);
    free(g);
    return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "fully sharded unit");
  }
  u->magic = FSDP_MAGIC;
  cache_units(+1);
  u->module = module;
  u->comm = dp;
  u->rank = tpdp_comm_rank(dp);
  u->nranks = tpdp_comm_size(dp);
  u->level = o.zero_level;
  u->reshard_option = o.reshard_after_forward;
  u->stream = o.stream;
  u->pdt = o.param_dtype;
  u->rdt = o.reduce_dtype;
  u->state = TPDP_HANDLE_IDLE;
  u->group = g;
  g->refs = 1;
  g->sync = 1;
  tpdp_module_label(module, u->label, sizeof u->label);
  snprintf(u->watch_label, sizeof u->watch_label, "the fully sharded unit %s",
           u->label);
  tpdp_status st =
      core_grow((void **)&g->units, &g->cap_units, 1, sizeof *g->units);
  if (st != TPDP_SUCCESS) goto fail;
  g->units[g->nunits++] = u;

  if (local == TPDP_SUCCESS && tpdp_module_unit_kind(module) != NULL)
    local = TPDP_ERR(TPDP_ERR_ALREADY,
                     "fully_shard of %s on rank %d: the module is a %s unit "
                     "already",
                     u->label, u->rank, tpdp_module_unit_kind(module));
  collect_ctx cc = {u, local};
  st = tpdp_module_apply(module, collect, &cc);
  if (st != TPDP_SUCCESS) goto fail;
  local = cc.local;
  if (local == TPDP_SUCCESS && on_gpu(u) &&
      (u->pdt != TPDP_F32 || u->rdt != TPDP_F32))
    local = TPDP_ERR(TPDP_ERR_UNSUPPORTED,
                     "fully_shard of %s on rank %d: param_dtype %s, "
                     "reduce_dtype %s on a GPU: CUDA units move f32 only (no "
                     "cast kernels yet)",
                     u->label, u->rank, tpdp_dtype_name(u->pdt),
                     tpdp_dtype_name(u->rdt));
  if (local == TPDP_SUCCESS && u->np == 0)
    local = TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                     "fully_shard of %s on rank %d: the module has no "
                     "parameter outside nested units",
                     u->label, u->rank);

  fsdp_agree_rec rec = {0};
  rec.status = local;
  /* the level and both dtypes */
  rec.level = o.zero_level | (int32_t)o.param_dtype << 8 |
              (int32_t)o.reduce_dtype << 16;
  rec.nparams = u->np;
  rec.msg_bytes = comm_supports_pieces(dp) ? comm_pieces_message_bytes() : 0;
  rec.shapes = 1469598103934665603ull;
  for (int i = 0; i < u->np; i++) {
    rec.shapes = fnv(rec.shapes, u->p[i].ndim);
    for (int d = 0; d < u->p[i].ndim; d++)
      rec.shapes = fnv(rec.shapes, u->p[i].shape[d]);
  }
  static const comm_agree_kind kind = {sizeof(fsdp_agree_rec), rec_same,
                                       rec_describe, rec_mismatch};
  agree_unit = u;
  st = comm_agree(dp, &kind, &rec, local);
  agree_unit = NULL;
  if (st != TPDP_SUCCESS) goto fail;

  st = build_shard(u);
  if (st != TPDP_SUCCESS) goto fail;
  st = tpdp_module_set_unit(module, "FSDP", " FULLY SHARDED");
  if (st != TPDP_SUCCESS) goto restore;
  /* From here the module owns the unit (freed with it). */
  st = tpdp_module_attach_state(module, FSDP_EXT_KEY, u, unit_free);
  if (st != TPDP_SUCCESS) {
    tpdp_module_clear_unit(module);
    goto restore;
  }
  adopt_ctx ac = {u, TPDP_SUCCESS};
  CHECK(tpdp_module_apply(module, adopt, &ac));
  CHECK(register_hooks(u));
  *out = u;
  return TPDP_SUCCESS;
restore: /* the parameters view the caller's memory again */
  for (int i = 0; i < u->np; i++) {
    tpdp_param_set_tensor(u->p[i].param, &u->p[i].original);
    tpdp_param_set_row_shard(u->p[i].param, 0, -1);
  }
fail:
  unit_free(u);
  return st;
}

/* ------------------------------------------------------------- accessors */

tpdp_fsdp_unit *tpdp_fsdp_unit_of(const tpdp_module *module) {
  return module ? tpdp_module_attached_state(module, FSDP_EXT_KEY) : NULL;
}

tpdp_module *tpdp_fsdp_unit_module(const tpdp_fsdp_unit *u) {
  return u && u->magic == FSDP_MAGIC ? u->module : NULL;
}

tpdp_handle_state tpdp_fsdp_unit_state(const tpdp_fsdp_unit *u) {
  return u && u->magic == FSDP_MAGIC ? u->state : TPDP_HANDLE_IDLE;
}

int tpdp_fsdp_num_params(const tpdp_fsdp_unit *u) {
  return u && u->magic == FSDP_MAGIC ? u->np : 0;
}

tpdp_param *tpdp_fsdp_param(const tpdp_fsdp_unit *u, int i, const char **fqn) {
  if (u == NULL || u->magic != FSDP_MAGIC || i < 0 || i >= u->np) return NULL;
  if (fqn) *fqn = u->p[i].fqn;
  return u->p[i].param;
}

tpdp_status tpdp_fsdp_param_rows(const tpdp_fsdp_unit *u, int i, int64_t *row0,
                                 int64_t *rows) {
  TPDP_API_ENTRY;
  CHECK(check_unit(u, "unit"));
  CHECK_PTR(row0);
  CHECK_PTR(rows);
  if (i < 0 || i >= u->np)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "unit %s has %d parameters; index %d is out of range",
                    u->label, u->np, i);
  *rows = rows_of(&u->p[i], u->rank);
  *row0 = *rows ? (int64_t)u->rank * u->p[i].chunk : u->p[i].shape[0];
  return TPDP_SUCCESS;
}

static tpdp_status check_root(const tpdp_fsdp_unit *u) {
  CHECK(check_unit(u, "root"));
  if (u->parent != NULL)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "unit %s is nested in unit %s; call it on the root unit",
                    u->label, u->parent->label);
  return TPDP_SUCCESS;
}

/* -------------------------------------------------------------- step */

tpdp_status tpdp_fsdp_finalize(tpdp_fsdp_unit *root) {
  TPDP_API_ENTRY;
  CHECK(check_root(root));
  fsdp_group *g = root->group;
  if (!g->sync)
    return TPDP_ERR(TPDP_ERR_STATE,
                    "%s: gradient sync is off "
                    "(accumulating); turn it on for the last micro-batch "
                    "first",
                    root->label);
  for (int i = 0; i < g->nunits; i++) {
    tpdp_fsdp_unit *u = g->units[i];
    if (u->state == TPDP_HANDLE_BACKWARD_PRE ||
        (u->state == TPDP_HANDLE_FORWARD && u->forwarded))
      return TPDP_ERR(TPDP_ERR_STATE,
                      "fully sharded unit %s on rank %d "
                      "is in state %s; expected BACKWARD_POST (its backward "
                      "has not finished)",
                      u->label, u->rank, tpdp_handle_state_name(u->state));
    if (u->state == TPDP_HANDLE_SUMMON_FULL_PARAMS)
      return TPDP_ERR(TPDP_ERR_STATE,
                      "unit %s on rank %d is in state "
                      "SUMMON_FULL_PARAMS; call tpdp_fsdp_summon_end first",
                      u->label, u->rank);
  }
  /* Level 1 reduces here; so does a unit unused in this step (zero
   * gradients), so that every rank makes the same collectives. At most two
   * of these are in flight (each holds a packed copy of its gradients). */
  tpdp_fsdp_unit *prev = NULL;
  for (int i = 0; i < g->nunits; i++) {
    tpdp_fsdp_unit *u = g->units[i];
    if (u->reduced) continue;
    CHECK(zeroed_full_grad(u));
    CHECK(reduce_start(u));
    if (prev) CHECK(reduce_finish(prev));
    prev = u;
  }
  core_first_error f;
  core_first_error_init(&f);
  for (int i = 0; i < g->nunits; i++) {
    tpdp_fsdp_unit *u = g->units[i];
    core_first_error_add(&f, reduce_finish(u));
    if (u->gather_work) { /* a prefetch nobody used */
      core_first_error_add(&f, gather_finish(u));
    }
    core_first_error_add(&f, reshard(u));
    core_first_error_add(&f, set_grads(u, 0));
    u->state = TPDP_HANDLE_IDLE;
    u->forwarded = 0;
    u->reduced = 0;
  }
  g->norder = 0;
  g->last = g->cur;
  memset(&g->cur, 0, sizeof g->cur);
  return f.status;
}

tpdp_status tpdp_fsdp_set_requires_gradient_sync(tpdp_fsdp_unit *root,
                                                 int sync) {
  TPDP_API_ENTRY;
  CHECK(check_root(root));
  root->group->sync = sync != 0;
  return TPDP_SUCCESS;
}

tpdp_status tpdp_fsdp_summon_full_params(tpdp_fsdp_unit *root) {
  TPDP_API_ENTRY;
  CHECK(check_root(root));
  fsdp_group *g = root->group;
  static const tpdp_handle_state ok[] = {TPDP_HANDLE_IDLE};
  for (int i = 0; i < g->nunits; i++)
    CHECK(expect_state(g->units[i], ok, 1, "summon_full_params"));
  for (int i = 0; i < g->nunits; i++) {
    tpdp_fsdp_unit *u = g->units[i];
    if (u->pdt == TPDP_F32)
      CHECK(gather_finish(u));
    else
      CHECK(summon_master(u));
    u->state = TPDP_HANDLE_SUMMON_FULL_PARAMS;
  }
  return TPDP_SUCCESS;
}

tpdp_status tpdp_fsdp_summon_end(tpdp_fsdp_unit *root, int writeback) {
  TPDP_API_ENTRY;
  CHECK(check_root(root));
  fsdp_group *g = root->group;
  static const tpdp_handle_state ok[] = {TPDP_HANDLE_SUMMON_FULL_PARAMS};
  for (int i = 0; i < g->nunits; i++)
    CHECK(expect_state(g->units[i], ok, 1, "summon_end"));
  for (int i = 0; i < g->nunits; i++) {
    tpdp_fsdp_unit *u = g->units[i];
    if (writeback && !u->shard_in_full) /* else the rows are the full's */
      for (int k = 0; k < u->np; k++) {
        const fsdp_param *q = &u->p[k];
        CHECK(copy_elems(u, u->shard + q->shard_off,
                         (u->summoned ? u->summoned : (float *)u->full) +
                             q->full_off + u->rank * q->chunk * q->row_elems,
                         TPDP_F32, rows_of(q, u->rank) * q->row_elems));
      }
    free_elems(u, (void **)&u->summoned, u->full_elems, TPDP_F32, 1);
    CHECK(reshard(u));
    u->state = TPDP_HANDLE_IDLE;
  }
  return TPDP_SUCCESS;
}

tpdp_status tpdp_fsdp_get_stats(const tpdp_fsdp_unit *root,
                                tpdp_fsdp_stats *out) {
  TPDP_API_ENTRY;
  CHECK(check_root(root));
  CHECK_PTR(out);
  const fsdp_group *g = root->group;
  *out = g->last;
  int64_t persistent = 0;
  for (int i = 0; i < g->nunits; i++) {
    const tpdp_fsdp_unit *u = g->units[i];
    int64_t full = u->full_elems * (int64_t)tpdp_dtype_size(u->pdt);
    if (!u->shard_in_full) persistent += u->shard_elems * 4;
    if (!u->grad_in_full) persistent += u->shard_elems * 4;
    if (full_is_persistent(u)) persistent += full;
    if (grad_is_persistent(u)) persistent += full;
  }
  out->persistent_bytes = persistent;
  return TPDP_SUCCESS;
}
