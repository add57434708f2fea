// SPDX-License-Identifier: BSD-3-Clause
/* Allgather and reduce-scatter over pieces of memory (comm/services.h), the
 * MPI backend's algorithm for them: every pair of ranks exchanges its
 * blocks directly, each side describing its memory with a derived datatype
 * (MPI_Type_create_hindexed), so the data goes from the sender's parameters
 * or gradients to the receiver's without a packed copy on either side. On
 * one host Open MPI's shared memory transport moves such a message as fast
 * as a contiguous one (measured on the 2-core VM, 118 MB between 2 ranks:
 * 33 ms either way), and the reduce-scatter, a message each way and one
 * add, took 48 ms where MPI_Reduce_scatter_block took 215 ms.
 *
 * The calls only post their messages (the work's requests); the work's
 * wait or test completes them, and then runs a reduce-scatter's sum
 * (comm_mpi_pieces_sum_run). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "comm/mpi_internal.h"
#include "core/half.h"

#define PIECES_TAG 7412
/* Ranks a reduce-scatter over pieces takes (its sum keeps one pointer per
 * rank on the stack). */
#define TPDP_MAX_PIECES_RANKS 1024

/* A run of elements in memory. */
typedef struct {
  char *ptr;
  int64_t n;
} seg;

/* The memory of flat range [lo, hi) of `p` (NULL: contiguous at base),
 * holes left out: *out (malloc'd, *nout runs; NULL when none). */
static tpdp_status segments(const comm_pieces *p, char *base, size_t es,
                            int64_t lo, int64_t hi, seg **out, int *nout) {
  *out = NULL;
  *nout = 0;
  comm_piece whole = {0, hi};
  comm_pieces one = {&whole, 1};
  if (p == NULL) p = &one;
  int n = 0;
  for (int pass = 0; pass < 2; pass++) {
    int64_t f = 0;
    n = 0;
    for (int i = 0; i < p->n; i++) {
      const comm_piece *c = &p->piece[i];
      int64_t a = lo > f ? lo : f, b = hi < f + c->count ? hi : f + c->count;
      if (b > a && c->offset >= 0) {
        if (pass == 1)
          (*out)[n] = (seg){base + (size_t)(c->offset + (a - f)) * es, b - a};
        n++;
      }
      f += c->count;
    }
    if (pass == 0) {
      if (n == 0) return TPDP_SUCCESS;
      CHECK(TPDP_CALLOC(*out, (size_t)n));
    }
  }
  *nout = n;
  return TPDP_SUCCESS;
}

static int64_t segs_elems(const seg *s, int n) {
  int64_t t = 0;
  for (int i = 0; i < n; i++) t += s[i].n;
  return t;
}

/* The derived datatype of `n` runs relative to `base` (MPI_BYTE with
 * *count 0 when there are none), its block lengths and displacements
 * written to len and disp (n each, the caller's: no allocation here). */
static tpdp_status segs_type(const tpdp_comm *comm, const seg *s, int n,
                             const char *base, MPI_Datatype el, int *len,
                             MPI_Aint *disp, MPI_Datatype *type, int *count) {
  *type = MPI_BYTE;
  *count = 0;
  if (n == 0) return TPDP_SUCCESS;
  for (int i = 0; i < n; i++) {
    len[i] = (int)s[i].n;
    disp[i] = (MPI_Aint)(s[i].ptr - base);
  }
  CHECK(comm_mpi_status(MPI_Type_create_hindexed(n, len, disp, el, type),
                        "MPI_Type_create_hindexed", comm));
  tpdp_status st =
      comm_mpi_status(MPI_Type_commit(type), "MPI_Type_commit", comm);
  if (st != TPDP_SUCCESS) {
    MPI_Type_free(type);
    *type = MPI_BYTE;
    return st;
  }
  *count = 1;
  return TPDP_SUCCESS;
}

/* Elements per message of a collective over pieces (see plan_add): at most
 * TPDP_PIECES_MSG_BYTES (default 1 MiB; every rank must see the same
 * value, since both sides cut the stream alike). One message per peer
 * ran at the raw rate in a loop of its own, but inside GPT-2's dp=2 step
 * the transfers took 1-3.5 times as long from step to step (2-core VM:
 * --zero 1 at 1390-1810 ms/step); cut into 0.5-1 MiB messages they kept
 * the raw rate (1370-1450 ms/step; 2 MiB and up drifted again at
 * --zero 3). */
static int64_t pieces_msg_elems(size_t es) {
  int64_t n = comm_pieces_message_bytes() / (int64_t)es;
  return n > 0 ? n : 1;
}

/* The messages of one call over pieces, all prepared (their runs cut,
 * room for their requests and datatypes taken) before the first is
 * posted: a call that fails, out of memory say, has then posted nothing.
 * Abandoning it after some messages went out would not be clean: MPI
 * cannot take a send back (Open MPI's MPI_Cancel leaves sends be), and a
 * rendezvous send, or a peer's single-copy read, would reach the caller's
 * buffers after the caller freed them on the error. Each message's
 * datatype is made just before it is posted, so that the first messages
 * travel while the next are described. */
typedef struct {
  int send, peer;
  char *base;
  int first, nruns; /* its runs in the plan's `runs` */
} msg;
typedef struct {
  msg *m;
  seg *runs;
  int n, cap, nruns, cap_runs, max_runs;
} msg_plan;

static void plan_free(msg_plan *pl) {
  free(pl->m);
  free(pl->runs);
  *pl = (msg_plan){0};
}

/* Add the runs `s` as receives (send: 0) from (sends to) `peer`, one
 * message per pieces_msg_elems elements: both sides cut the same element
 * stream at the same places. */
static tpdp_status plan_add(const tpdp_comm *comm, msg_plan *pl, int send,
                            const seg *s, int n, char *base, size_t es,
                            int peer) {
  const int64_t m = pieces_msg_elems(es);
  for (int i = 0; i < n; i++)
    if (s[i].n > INT_MAX)
      return TPDP_ERR(TPDP_ERR_UNSUPPORTED,
                      "a piece of %lld elements on %s exceeds the MPI "
                      "backend's limit of %d",
                      (long long)s[i].n, comm->name, INT_MAX);
  int i = 0;
  int64_t di = 0;
  do {
    CHECK(core_grow((void **)&pl->m, &pl->cap, pl->n + 1, sizeof *pl->m));
    msg *g = &pl->m[pl->n];
    *g = (msg){send, peer, base, pl->nruns, 0};
    int64_t left = m;
    while (i < n && left > 0) {
      CHECK(core_grow((void **)&pl->runs, &pl->cap_runs, pl->nruns + 1,
                      sizeof *pl->runs));
      int64_t take = s[i].n - di < left ? s[i].n - di : left;
      pl->runs[pl->nruns++] = (seg){s[i].ptr + di * es, take};
      g->nruns++;
      left -= take;
      if ((di += take) == s[i].n) i++, di = 0;
    }
    if (g->nruns > pl->max_runs) pl->max_runs = g->nruns;
    pl->n++;
  } while (i < n);
  return TPDP_SUCCESS;
}

/* Post every message of `pl` into w's requests; the plan is freed. Past
 * its allocations only an MPI error can stop it midway (MPI's errors are
 * fatal by default); what was posted is then cancelled as far as MPI can. */
static tpdp_status plan_post(const tpdp_comm *comm, msg_plan *pl,
                             MPI_Datatype el, size_t es, mpi_work_impl *w) {
  const int n = pl->n, k = pl->max_runs > 0 ? pl->max_runs : 1;
  MPI_Request *reqs = NULL;
  int *len = NULL;
  MPI_Aint *disp = NULL;
  tpdp_status st = TPDP_CALLOC(reqs, (size_t)(n > 0 ? n : 1));
  if (st == TPDP_SUCCESS) st = TPDP_CALLOC(len, (size_t)k);
  if (st == TPDP_SUCCESS) st = TPDP_CALLOC(disp, (size_t)k);
  if (st != TPDP_SUCCESS) {
    free(reqs);
    free(len);
    plan_free(pl);
    return st;
  }
  for (int i = 0; i < (n > 0 ? n : 1); i++) reqs[i] = MPI_REQUEST_NULL;
  MPI_Comm mc = ((mpi_comm_impl *)comm->impl)->comm;
  int posted = 0;
  for (; posted < n && st == TPDP_SUCCESS; posted++) {
    const msg *g = &pl->m[posted];
    const seg *r = pl->runs + g->first;
    MPI_Datatype type;
    int count;
    st = segs_type(comm, r, g->nruns, g->base, el, len, disp, &type, &count);
    if (st != TPDP_SUCCESS) break;
    int rc = g->send ? MPI_Isend(g->base, count, type, g->peer, PIECES_TAG, mc,
                                 &reqs[posted])
                     : MPI_Irecv(g->base, count, type, g->peer, PIECES_TAG, mc,
                                 &reqs[posted]);
    /* MPI may free a datatype once its operation is posted */
    if (type != MPI_BYTE) MPI_Type_free(&type);
    if (rc != MPI_SUCCESS) {
      st = comm_mpi_status(rc, g->send ? "MPI_Isend" : "MPI_Irecv", comm);
      break;
    }
    if (g->send)
      comm_traffic_add(comm, g->peer, (uint64_t)segs_elems(r, g->nruns) * es);
  }
  free(len);
  free(disp);
  plan_free(pl);
  if (st != TPDP_SUCCESS) {
    for (int i = 0; i < posted; i++) {
      MPI_Cancel(&reqs[i]);
      MPI_Request_free(&reqs[i]);
    }
    free(reqs);
    return st;
  }
  w->reqs = reqs;
  w->nreqs = n > 0 ? n : 1;
  return TPDP_SUCCESS;
}

static tpdp_status holes_differ(const tpdp_comm *comm, const char *what,
                                int64_t a, int64_t b) {
  return TPDP_ERR(TPDP_ERR_SHAPE_MISMATCH,
                  "%s over pieces on %s (rank %d): this rank's block has %lld "
                  "elements outside holes in one buffer and %lld in the "
                  "other; holes must lie at the same flat positions",
                  what, comm->name, comm->rank, (long long)a, (long long)b);
}

/* Copy the elements of runs `src` into runs `dst` (as many in all). */
static void copy_segs(const seg *dst, int nd, const seg *src, int ns,
                      size_t es) {
  int64_t di = 0, si = 0;
  for (int i = 0, j = 0; i < nd && j < ns;) {
    int64_t n = dst[i].n - di < src[j].n - si ? dst[i].n - di : src[j].n - si;
    memcpy(dst[i].ptr + di * es, src[j].ptr + si * es, (size_t)n * es);
    if ((di += n) == dst[i].n) i++, di = 0;
    if ((si += n) == src[j].n) j++, si = 0;
  }
}

tpdp_status comm_mpi_allgather_pieces(tpdp_comm *comm, const tpdp_coll_args *a,
                                      mpi_work_impl *w) {
  const int p = comm->size, me = comm->rank;
  const size_t es = tpdp_dtype_size(a->recv->dtype);
  const MPI_Datatype el = comm_mpi_dtype(a->recv->dtype);
  const int64_t S = tpdp_tensor_numel(a->send);
  char *sbase = (char *)a->send->data, *rbase = (char *)a->recv->data;
  seg *ss = NULL, *rs = NULL;
  int nss = 0, nrs = 0;
  msg_plan pl = {0};
  tpdp_status st = segments(a->send_pieces, sbase, es, 0, S, &ss, &nss);
  for (int pass = 0; pass < 2 && st == TPDP_SUCCESS; pass++) /* recvs first */
    for (int q = 0; q < p && st == TPDP_SUCCESS; q++) {
      if (q == me) continue;
      if (pass == 0) {
        st = segments(a->recv_pieces, rbase, es, q * S, (q + 1) * S, &rs, &nrs);
        if (st == TPDP_SUCCESS)
          st = plan_add(comm, &pl, 0, rs, nrs, rbase, es, q);
        free(rs);
        rs = NULL;
      } else {
        st = plan_add(comm, &pl, 1, ss, nss, sbase, es, q);
      }
    }
  /* This rank's own block: copied unless it is the same memory. */
  if (st == TPDP_SUCCESS)
    st = segments(a->recv_pieces, rbase, es, me * S, (me + 1) * S, &rs, &nrs);
  if (st == TPDP_SUCCESS && segs_elems(ss, nss) != segs_elems(rs, nrs))
    st = holes_differ(comm, "allgather", segs_elems(ss, nss),
                      segs_elems(rs, nrs));
  /* The messages go out first; the copy runs while they travel. */
  if (st == TPDP_SUCCESS)
    st = plan_post(comm, &pl, el, es, w);
  else
    plan_free(&pl);
  if (st == TPDP_SUCCESS) {
    int same = nss == nrs;
    for (int i = 0; same && i < nss; i++)
      same = ss[i].ptr == rs[i].ptr && ss[i].n == rs[i].n;
    if (!same) copy_segs(rs, nrs, ss, nss, es);
  }
  free(ss);
  free(rs);
  return st;
}

/* A reduce-scatter's sum, run when its messages are in: each element of
 * this rank's block is the sum over ranks, in rank order, of their
 * contributions: its own (in the send buffer), the first peer's (received
 * straight into the result when that does not overlap the send buffer)
 * and the others' (in scratch). */
struct mpi_pieces_sum {
  tpdp_dtype dtype;
  int avg, size, me;
  seg *own, *out;
  int nown, nout;
  int out_peer; /* whose contribution arrived in `out`; -1: none */
  char **slot;  /* [size]: the others' contributions, contiguous */
};

#define SUM_CHUNK 1024

/* Elements of type T summed in ACC (loaded and stored through LOAD and
 * STORE) in rank order, divided for AVG. bf16 and f16 sum in f32 and
 * round once at the end - not at every addition as MPI's user-defined ops
 * round. */
#define PIECES_SUM(name, T, ACC, LOAD, STORE)                             \
  static void name(const mpi_pieces_sum *s) {                             \
    ACC acc[SUM_CHUNK];                                                   \
    const T *src[TPDP_MAX_PIECES_RANKS];                                  \
    int64_t k = 0, oi = 0, di = 0;                                        \
    for (int i = 0, j = 0; i < s->nown && j < s->nout;) {                 \
      int64_t n = s->own[i].n - oi < s->out[j].n - di ? s->own[i].n - oi  \
                                                      : s->out[j].n - di; \
      if (n > SUM_CHUNK) n = SUM_CHUNK;                                   \
      T *d = (T *)s->out[j].ptr + di;                                     \
      for (int q = 0; q < s->size; q++)                                   \
        src[q] = q == s->me         ? (const T *)s->own[i].ptr + oi       \
                 : q == s->out_peer ? d                                   \
                                    : (const T *)s->slot[q] + k;          \
      for (int64_t e = 0; e < n; e++) acc[e] = LOAD(src[0][e]);           \
      for (int q = 1; q < s->size; q++)                                   \
        for (int64_t e = 0; e < n; e++) acc[e] += LOAD(src[q][e]);        \
      if (s->avg && s->size > 1)                                          \
        for (int64_t e = 0; e < n; e++) acc[e] /= (ACC)s->size;           \
      for (int64_t e = 0; e < n; e++) d[e] = STORE(acc[e]);               \
      k += n;                                                             \
      if ((oi += n) == s->own[i].n) i++, oi = 0;                          \
      if ((di += n) == s->out[j].n) j++, di = 0;                          \
    }                                                                     \
  }
#define AS_IS(x) (x)
PIECES_SUM(pieces_sum_f32, float, float, AS_IS, AS_IS)
PIECES_SUM(pieces_sum_f64, double, double, AS_IS, AS_IS)
PIECES_SUM(pieces_sum_bf16, uint16_t, float, core_bf16_to_f32, core_f32_to_bf16)
PIECES_SUM(pieces_sum_f16, uint16_t, float, tpdp_f16_to_f32, tpdp_f32_to_f16)

void comm_mpi_pieces_sum_run(const mpi_pieces_sum *s) {
  switch (s->dtype) {
    case TPDP_F32:
      pieces_sum_f32(s);
      break;
    case TPDP_F64:
      pieces_sum_f64(s);
      break;
    case TPDP_BF16:
      pieces_sum_bf16(s);
      break;
    default:
      pieces_sum_f16(s);
      break;
  }
}

void comm_mpi_pieces_sum_free(mpi_pieces_sum *s) {
  if (s == NULL) return;
  free(s->own);
  free(s->out);
  free(s->slot);
  free(s);
}

tpdp_status comm_mpi_reduce_scatter_pieces(tpdp_comm *comm,
                                           const tpdp_coll_args *a,
                                           mpi_work_impl *w) {
  const int p = comm->size, me = comm->rank;
  const size_t es = tpdp_dtype_size(a->recv->dtype);
  const MPI_Datatype el = comm_mpi_dtype(a->recv->dtype);
  const int64_t n = tpdp_tensor_numel(a->recv);
  char *sbase = (char *)a->send->data, *rbase = (char *)a->recv->data;
  if (p > TPDP_MAX_PIECES_RANKS)
    return TPDP_ERR(TPDP_ERR_UNSUPPORTED,
                    "reduce-scatter over pieces on %s: %d ranks, at most %d",
                    comm->name, p, TPDP_MAX_PIECES_RANKS);
  mpi_pieces_sum *s = NULL;
  seg *all = NULL, *peer = NULL;
  int nall = 0, npeer = 0;
  tpdp_status st = TPDP_CALLOC(s, 1);
  if (st != TPDP_SUCCESS) return st;
  s->dtype = a->recv->dtype;
  s->avg = a->op == TPDP_OP_AVG;
  s->size = p;
  s->me = me;
  s->out_peer = -1;
  st = segments(a->send_pieces, sbase, es, me * n, (me + 1) * n, &s->own,
                &s->nown);
  if (st == TPDP_SUCCESS)
    st = segments(a->recv_pieces, rbase, es, 0, n, &s->out, &s->nout);
  const int64_t c = segs_elems(s->out, s->nout);
  if (st == TPDP_SUCCESS && segs_elems(s->own, s->nown) != c)
    st = holes_differ(comm, "reduce-scatter", segs_elems(s->own, s->nown), c);
  /* The first peer's contribution goes straight into the result when the
   * result lies outside the send buffer. */
  if (st == TPDP_SUCCESS)
    st = segments(a->send_pieces, sbase, es, 0, p * n, &all, &nall);
  if (st == TPDP_SUCCESS && p > 1 && nall > 0 && s->nout > 0) {
    char *lo = all[0].ptr, *hi = all[0].ptr;
    for (int i = 0; i < nall; i++) {
      if (all[i].ptr < lo) lo = all[i].ptr;
      if (all[i].ptr + all[i].n * es > hi) hi = all[i].ptr + all[i].n * es;
    }
    int overlap = 0;
    for (int i = 0; i < s->nout; i++)
      overlap |= s->out[i].ptr < hi && s->out[i].ptr + s->out[i].n * es > lo;
    if (!overlap) s->out_peer = me == 0 ? 1 : 0;
  }
  if (st == TPDP_SUCCESS) st = TPDP_CALLOC(s->slot, (size_t)p);
  const int64_t need =
      comm_reduce_scatter_pieces_scratch(comm, c, s->out_peer < 0);
  if (st == TPDP_SUCCESS &&
      (a->scratch_elems < need || (need > 0 && a->scratch == NULL)))
    st = TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                  "reduce-scatter over pieces on %s (rank %d): scratch of "
                  "%lld elements, it needs %lld",
                  comm->name, me, (long long)a->scratch_elems, (long long)need);
  for (int q = 0, k = 0; st == TPDP_SUCCESS && q < p; q++)
    if (q != me && q != s->out_peer)
      s->slot[q] = (char *)a->scratch + (size_t)(k++) * (size_t)c * es;
  msg_plan pl = {0};
  for (int q = 0; st == TPDP_SUCCESS && q < p; q++) {
    if (q == me) continue;
    if (q == s->out_peer) {
      st = plan_add(comm, &pl, 0, s->out, s->nout, rbase, es, q);
    } else {
      seg one = {s->slot[q], c};
      st = plan_add(comm, &pl, 0, &one, c > 0, s->slot[q], es, q);
    }
  }
  for (int q = 0; st == TPDP_SUCCESS && q < p; q++) {
    if (q == me) continue;
    st = segments(a->send_pieces, sbase, es, q * n, (q + 1) * n, &peer, &npeer);
    if (st == TPDP_SUCCESS)
      st = plan_add(comm, &pl, 1, peer, npeer, sbase, es, q);
    free(peer);
    peer = NULL;
  }
  free(all);
  if (st == TPDP_SUCCESS) {
    st = plan_post(comm, &pl, el, es, w);
  } else {
    plan_free(&pl);
  }
  if (st != TPDP_SUCCESS) {
    comm_mpi_pieces_sum_free(s);
    return st;
  }
  w->sum = s;
  return TPDP_SUCCESS;
}
