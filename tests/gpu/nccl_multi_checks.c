// SPDX-License-Identifier: BSD-3-Clause
/* Multi-rank NCCL backend checks (see nccl_multi_checks.h).
 *
 * Expected values are computed on the host. Rank p's input element j is
 *     pat(p, j) = (j % 4 + 1) + m * ((p + j) % P)
 * for world size P, m = 2 when P is even and 1 when odd: every value is a
 * small integer (at most 4 + 2 * (P - 1)), so sums stay exact in f16 and
 * bf16 (and below 256 for u8) up to 8 ranks, the rank holding the
 * maximum changes from element to element, and the sum over all P ranks,
 * P * (j % 4 + 1) + m * P * (P - 1) / 2, is a multiple of P: AVG is an
 * integer, exact in every dtype. (With a world size that is not a power of
 * two NCCL may scale by 1/P before summing, so AVG on floating dtypes is
 * then compared with a tolerance; everything else is compared exactly.)
 *
 * Buffers are filled with cudaMemcpy and cudaDeviceSynchronize before each
 * collective, and read back with cudaMemcpy after a blocking call returns,
 * or, for the async form, after tpdp_work_wait_stream on a user stream and
 * cudaStreamSynchronize of that stream. */
#include "tests/gpu/nccl_multi_checks.h"

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/gpu/check_macros.h"

/* A wrong value: keep the first message, go on (the other ranks still
 * expect this rank in the collectives that follow). */
#define MISMATCH(...)                                   \
  do {                                                  \
    if ((*bad)++ == 0) snprintf(msg, len, __VA_ARGS__); \
  } while (0)

#define MAXN ((1 << 20) + 3)
static const int64_t kCounts[] = {1, 7, MAXN};
#define NCOUNTS ((int)(sizeof kCounts / sizeof kCounts[0]))

/* ------------------------------------------------------------ world */

int tpdp_gpu_multi_all(tpdp_comm *world, int ok) {
  int32_t v = ok ? 1 : 0, r = 0;
  tpdp_tensor s = tpdp_tensor_1d(&v, TPDP_I32, 1);
  tpdp_tensor t = tpdp_tensor_1d(&r, TPDP_I32, 1);
  if (tpdp_allreduce(world, &s, &t, TPDP_OP_MIN) != TPDP_SUCCESS) return 0;
  return r == 1;
}

int tpdp_gpu_multi_ready(tpdp_comm *world, char *msg, size_t len) {
  char own[512] = "", host[128] = "?";
  int size = tpdp_comm_size(world), rank = tpdp_comm_rank(world);
  if (size < 2) {
    snprintf(msg, len, "needs >= 2 ranks (world size %d)", size);
    return 0; /* the same on every rank */
  }
  gethostname(host, sizeof host - 1);
  host[sizeof host - 1] = '\0';
  int n = 0, local_rank = 0, local_size = 1;
  tpdp_status st = tpdp_cuda_device_count(&n);
  if (st != TPDP_SUCCESS)
    snprintf(own, sizeof own, "no GPU: %s", tpdp_last_error());
  /* Collective over the world: called on every rank whatever happened. */
  tpdp_status lst = tpdp_comm_local_rank(world, &local_rank, &local_size);
  if (!own[0] && lst != TPDP_SUCCESS)
    snprintf(own, sizeof own, "tpdp_comm_local_rank: %s: %s",
             tpdp_status_string(lst), tpdp_last_error());
  if (!own[0] && n < local_size)
    snprintf(own, sizeof own,
             "needs one GPU per rank: %d GPUs for %d ranks on host %s", n,
             local_size, host);
  /* Every rank learns the lowest failing rank, then gets its reason. */
  int32_t key = own[0] ? size - rank : 0, maxkey = 0;
  tpdp_tensor k = tpdp_tensor_1d(&key, TPDP_I32, 1);
  tpdp_tensor mk = tpdp_tensor_1d(&maxkey, TPDP_I32, 1);
  st = tpdp_allreduce(world, &k, &mk, TPDP_OP_MAX);
  if (st != TPDP_SUCCESS) {
    snprintf(msg, len, "deciding over the world: tpdp_allreduce: %s: %s",
             tpdp_status_string(st), tpdp_last_error());
    return 0;
  }
  if (maxkey == 0) return 1;
  int root = size - maxkey;
  char buf[600];
  memset(buf, 0, sizeof buf);
  if (rank == root) snprintf(buf, sizeof buf, "rank %d: %s", rank, own);
  tpdp_tensor b = tpdp_tensor_1d(buf, TPDP_U8, (int64_t)sizeof buf);
  st = tpdp_broadcast(world, &b, &b, root);
  buf[sizeof buf - 1] = '\0';
  if (st != TPDP_SUCCESS)
    snprintf(msg, len, "rank %d has no usable GPU (%s)", root,
             own[0] ? own : "see its output");
  else
    snprintf(msg, len, "%s", buf);
  return 0;
}

int tpdp_gpu_multi_open(tpdp_gpu_multi_ctx *ctx, tpdp_comm *world, char *msg,
                        size_t len) {
  ctx->world = world;
  ctx->nccl = NULL;
  setenv("TPDP_TIMEOUT_S", "120", 0);
  tpdp_status st = tpdp_comm_create_nccl(world, -1, &ctx->nccl);
  if (st != TPDP_SUCCESS)
    snprintf(msg, len, "tpdp_comm_create_nccl(world, -1): %s: %s",
             tpdp_status_string(st), tpdp_last_error());
  if (!tpdp_gpu_multi_all(world, st == TPDP_SUCCESS)) {
    if (st == TPDP_SUCCESS)
      snprintf(msg, len, "tpdp_comm_create_nccl failed on another rank");
    tpdp_comm_destroy(ctx->nccl);
    ctx->nccl = NULL;
    return 1;
  }
  return 0;
}

/* ------------------------------------------------------------ values */

static double pat(int p, int psize, int64_t j) {
  int m = psize % 2 == 0 ? 2 : 1;
  return (double)(j % 4 + 1) + m * (double)((p + j) % psize);
}

static void put(void *b, tpdp_dtype dt, int64_t i, double v) {
  switch (dt) {
    case TPDP_F32:
      ((float *)b)[i] = (float)v;
      break;
    case TPDP_F64:
      ((double *)b)[i] = v;
      break;
    case TPDP_F16:
      ((uint16_t *)b)[i] = tpdp_f32_to_f16((float)v);
      break;
    case TPDP_BF16:
      ((uint16_t *)b)[i] = tpdp_f32_to_bf16((float)v);
      break;
    case TPDP_I32:
      ((int32_t *)b)[i] = (int32_t)v;
      break;
    case TPDP_I64:
      ((int64_t *)b)[i] = (int64_t)v;
      break;
    case TPDP_U8:
      ((uint8_t *)b)[i] = (uint8_t)v;
      break;
    default:
      break;
  }
}

static double get(const void *b, tpdp_dtype dt, int64_t i) {
  switch (dt) {
    case TPDP_F32:
      return ((const float *)b)[i];
    case TPDP_F64:
      return ((const double *)b)[i];
    case TPDP_F16:
      return tpdp_f16_to_f32(((const uint16_t *)b)[i]);
    case TPDP_BF16:
      return tpdp_bf16_to_f32(((const uint16_t *)b)[i]);
    case TPDP_I32:
      return ((const int32_t *)b)[i];
    case TPDP_I64:
      return (double)((const int64_t *)b)[i];
    case TPDP_U8:
      return ((const uint8_t *)b)[i];
    default:
      return NAN;
  }
}

static int is_float(tpdp_dtype dt) {
  return dt == TPDP_F32 || dt == TPDP_F64 || dt == TPDP_F16 || dt == TPDP_BF16;
}

/* The ranks of one communicator, and the pattern rank (world rank) of each:
 * the world for the world communicator, a group for a mesh dim. */
typedef struct {
  tpdp_comm *c;
  const int *prank; /* prank[r]: the pattern rank of rank r of c */
  int psize;        /* world size (the pattern's period) */
} target;

static double reduce_expect(const target *t, int64_t j, tpdp_reduce_op op) {
  int cs = tpdp_comm_size(t->c);
  double acc = pat(t->prank[0], t->psize, j);
  for (int r = 1; r < cs; r++) {
    double x = pat(t->prank[r], t->psize, j);
    if (op == TPDP_OP_SUM || op == TPDP_OP_AVG)
      acc += x;
    else if (op == TPDP_OP_MAX)
      acc = x > acc ? x : acc;
    else
      acc = x < acc ? x : acc;
  }
  return op == TPDP_OP_AVG ? acc / cs : acc;
}

static int close_enough(double got, double want, tpdp_dtype dt,
                        tpdp_reduce_op op, int csize) {
  if (got == want) return 1;
  if (op != TPDP_OP_AVG || !is_float(dt) || (csize & (csize - 1)) == 0)
    return 0;
  double tol = (dt == TPDP_F16 || dt == TPDP_BF16) ? 1.0 / 64 : 1e-5;
  return fabs(got - want) <= tol * fabs(want);
}

/* ------------------------------------------------------------ buffers */

typedef struct {
  void *d_a, *d_b, *h_in, *h_out;
  cudaStream_t user;
} bufs;

static int bufs_open(bufs *b, int world_size, char *msg, size_t len) {
  size_t bytes = (size_t)MAXN * (size_t)world_size * 8;
  memset(b, 0, sizeof *b);
  b->h_in = malloc(bytes);
  b->h_out = malloc(bytes);
  if (!b->h_in || !b->h_out) FAILF("malloc(%zu)", bytes);
  COK(cudaMalloc(&b->d_a, bytes));
  COK(cudaMalloc(&b->d_b, bytes));
  COK(cudaStreamCreateWithFlags(&b->user, cudaStreamNonBlocking));
  return 0;
out:
  return 1;
}

static void bufs_close(bufs *b) {
  if (b->d_a) cudaFree(b->d_a);
  if (b->d_b) cudaFree(b->d_b);
  if (b->user) cudaStreamDestroy(b->user);
  free(b->h_in);
  free(b->h_out);
  memset(b, 0, sizeof *b);
}

static tpdp_tensor dev_view(void *p, tpdp_dtype dt, int64_t n, int dev) {
  tpdp_tensor t;
  tpdp_device d = {TPDP_DEVICE_CUDA, dev};
  tpdp_tensor_init(&t, p, dt, d, 1, &n);
  return t;
}

/* ------------------------------------------------------------ one run */

enum { K_ALLREDUCE, K_ALLGATHER, K_REDUCE_SCATTER, K_BROADCAST, K_ALLTOALL };
static const char *const kKindNames[] = {
    "allreduce", "allgather", "reduce_scatter", "broadcast", "alltoall"};

/* One collective on t->c: n is the per-rank block (allgather's send,
 * reduce_scatter's recv, alltoall's block; the whole buffer otherwise).
 * 0 when the call went through (a wrong value counted in *bad, first
 * message in msg), 1 on an API or CUDA error (message in msg). */
static int run_one(const target *t, bufs *b, int kind, tpdp_dtype dt,
                   tpdp_reduce_op op, int64_t n, int inplace, int async,
                   int root, int *bad, char *msg, size_t len) {
  tpdp_comm *c = t->c;
  int cs = tpdp_comm_size(c), cr = tpdp_comm_rank(c);
  int dev = tpdp_comm_cuda_device(c);
  int me = t->prank[cr];
  size_t es = tpdp_dtype_size(dt);
  int64_t ns = n, nr = n;
  if (kind == K_ALLGATHER) nr = n * cs;
  if (kind == K_REDUCE_SCATTER) ns = n * cs;
  if (kind == K_ALLTOALL) ns = nr = n * cs;
  for (int64_t j = 0; j < ns; j++) put(b->h_in, dt, j, pat(me, t->psize, j));

  char *sp = (char *)b->d_a, *rp = (char *)b->d_b;
  if (inplace) {
    rp = sp;
    if (kind == K_ALLGATHER) sp = rp + (size_t)cr * (size_t)n * es;
    if (kind == K_REDUCE_SCATTER) rp = sp + (size_t)cr * (size_t)n * es;
  }
  /* Poison the receive buffer, then place the input. */
  COK(cudaMemset(rp, 0xEE, (size_t)nr * es));
  COK(cudaMemcpy(sp, b->h_in, (size_t)ns * es, cudaMemcpyHostToDevice));
  COK(cudaDeviceSynchronize());
  tpdp_tensor s = dev_view(sp, dt, ns, dev);
  tpdp_tensor r = dev_view(rp, dt, nr, dev);
  tpdp_work *w = NULL;
  switch (kind) {
    case K_ALLREDUCE:
      if (async)
        TOK(tpdp_allreduce_async(c, &s, &r, op, &w));
      else
        TOK(tpdp_allreduce(c, &s, &r, op));
      break;
    case K_ALLGATHER:
      if (async)
        TOK(tpdp_allgather_async(c, &s, &r, &w));
      else
        TOK(tpdp_allgather(c, &s, &r));
      break;
    case K_REDUCE_SCATTER:
      if (async)
        TOK(tpdp_reduce_scatter_async(c, &s, &r, op, &w));
      else
        TOK(tpdp_reduce_scatter(c, &s, &r, op));
      break;
    case K_BROADCAST:
      if (async)
        TOK(tpdp_broadcast_async(c, &s, &r, root, &w));
      else
        TOK(tpdp_broadcast(c, &s, &r, root));
      break;
    case K_ALLTOALL:
      if (async)
        TOK(tpdp_alltoall_async(c, &s, &r, &w));
      else
        TOK(tpdp_alltoall(c, &s, &r));
      break;
  }
  if (async) {
    TOK(tpdp_work_wait_stream(w, b->user));
    COK(cudaStreamSynchronize(b->user));
  }
  COK(cudaMemcpy(b->h_out, rp, (size_t)nr * es, cudaMemcpyDeviceToHost));
  for (int64_t j = 0; j < nr; j++) {
    double want = 0;
    switch (kind) {
      case K_ALLREDUCE:
        want = reduce_expect(t, j, op);
        break;
      case K_ALLGATHER:
        want = pat(t->prank[j / n], t->psize, j % n);
        break;
      case K_REDUCE_SCATTER:
        want = reduce_expect(t, (int64_t)cr * n + j, op);
        break;
      case K_BROADCAST:
        want = pat(t->prank[root], t->psize, j);
        break;
      case K_ALLTOALL:
        want = pat(t->prank[j / n], t->psize, (int64_t)cr * n + j % n);
        break;
    }
    double got = get(b->h_out, dt, j);
    if (!close_enough(got, want, dt, op, cs)) {
      char extra[32] = "";
      if (kind == K_BROADCAST) snprintf(extra, sizeof extra, ", root %d", root);
      MISMATCH(
          "%s on %s (rank %d of %d): %s, op %s, count %lld, %s, %s%s: "
          "element %lld is %g, expected %g",
          kKindNames[kind], tpdp_comm_name(c), cr, cs, tpdp_dtype_name(dt),
          tpdp_reduce_op_name(op), (long long)n,
          inplace ? "in place" : "out of place",
          async ? "async + wait_stream" : "blocking", extra, (long long)j, got,
          want);
      break;
    }
  }
  return 0;
out:
  return 1;
}

/* Every dtype in `dts` x op (reducing kinds; AVG left out on integer
 * dtypes unless ints_avg) x count x in place/out of place x blocking/async
 * (x root for broadcast). */
static int run_kind(const target *t, bufs *b, int kind, const tpdp_dtype *dts,
                    int ndts, int ints_avg, int *bad, char *msg, size_t len) {
  int cs = tpdp_comm_size(t->c);
  int reduces = kind == K_ALLREDUCE || kind == K_REDUCE_SCATTER;
  for (int d = 0; d < ndts; d++) {
    for (int op = 0; op < (reduces ? TPDP_OP_COUNT : 1); op++) {
      if (op == TPDP_OP_AVG && !is_float(dts[d]) && !ints_avg) continue;
      for (int k = 0; k < NCOUNTS; k++)
        for (int inplace = 0; inplace < 2; inplace++)
          for (int async = 0; async < 2; async++)
            for (int root = 0; root < (kind == K_BROADCAST ? cs : 1); root++)
              if (run_one(t, b, kind, dts[d], (tpdp_reduce_op)op, kCounts[k],
                          inplace, async, root, bad, msg, len))
                return 1;
    }
  }
  return 0;
}

static const tpdp_dtype kAllDtypes[] = {TPDP_F32, TPDP_F64, TPDP_F16, TPDP_BF16,
                                        TPDP_I32, TPDP_I64, TPDP_U8};
#define NALL ((int)(sizeof kAllDtypes / sizeof kAllDtypes[0]))

/* One kind over the world NCCL communicator, every dtype and op. */
static int world_kind(const tpdp_gpu_multi_ctx *ctx, int kind, char *msg,
                      size_t len) {
  int rc = 1, nbad = 0, *bad = &nbad;
  int size = tpdp_comm_size(ctx->nccl);
  int *ident = malloc(sizeof(int) * (size_t)size);
  bufs b;
  memset(&b, 0, sizeof b);
  if (!ident) FAILF("malloc");
  for (int i = 0; i < size; i++) ident[i] = i;
  target t = {ctx->nccl, ident, size};
  if (bufs_open(&b, size, msg, len)) goto out;
  if (run_kind(&t, &b, kind, kAllDtypes, NALL, 1, bad, msg, len)) goto out;
  rc = nbad ? 1 : 0;
out:
  bufs_close(&b);
  free(ident);
  return rc;
}

static int check_allreduce(const tpdp_gpu_multi_ctx *x, char *m, size_t l) {
  return world_kind(x, K_ALLREDUCE, m, l);
}
static int check_allgather(const tpdp_gpu_multi_ctx *x, char *m, size_t l) {
  return world_kind(x, K_ALLGATHER, m, l);
}
static int check_reduce_scatter(const tpdp_gpu_multi_ctx *x, char *m,
                                size_t l) {
  return world_kind(x, K_REDUCE_SCATTER, m, l);
}
static int check_broadcast(const tpdp_gpu_multi_ctx *x, char *m, size_t l) {
  return world_kind(x, K_BROADCAST, m, l);
}
static int check_alltoall(const tpdp_gpu_multi_ctx *x, char *m, size_t l) {
  return world_kind(x, K_ALLTOALL, m, l);
}

/* ------------------------------------------------------------ others */

/* The communicator over the world: ranks, backend, the GPU picked from the
 * host-local rank (and current on this thread), and a split of it. */
static int check_comm_basics(const tpdp_gpu_multi_ctx *ctx, char *msg,
                             size_t len) {
  int rc = 1, nbad = 0, *bad = &nbad;
  tpdp_comm *c = ctx->nccl, *sub = NULL;
  int *members = NULL;
  bufs b;
  memset(&b, 0, sizeof b);
  int size = tpdp_comm_size(ctx->world), rank = tpdp_comm_rank(ctx->world);
  int local_rank = -1, local_size = 0, ngpu = 0, cur = -1;
  TOK(tpdp_comm_local_rank(ctx->world, &local_rank, &local_size));
  TOK(tpdp_cuda_device_count(&ngpu));
  if (tpdp_comm_size(c) != size || tpdp_comm_rank(c) != rank)
    MISMATCH("rank/size %d/%d, expected the world's %d/%d", tpdp_comm_rank(c),
             tpdp_comm_size(c), rank, size);
  if (strcmp(tpdp_comm_backend(c), "nccl") != 0)
    MISMATCH("backend %s, expected nccl", tpdp_comm_backend(c));
  if (tpdp_comm_device_type(c) != TPDP_DEVICE_CUDA) MISMATCH("device type");
  if (tpdp_comm_nccl_stream(c) == NULL) MISMATCH("no stream");
  if (tpdp_comm_cuda_device(c) != local_rank % ngpu)
    MISMATCH("device %d, expected local rank %d mod %d GPUs",
             tpdp_comm_cuda_device(c), local_rank, ngpu);
  COK(cudaGetDevice(&cur));
  if (cur != tpdp_comm_cuda_device(c))
    MISMATCH("current device %d, communicator's %d", cur,
             tpdp_comm_cuda_device(c));
  /* Split by parity (ncclCommSplit): the even and the odd ranks. */
  TOK(tpdp_comm_split(c, rank % 2, rank, &sub));
  if (sub == NULL) FAILF("split by parity gave no communicator");
  int ssize = (size - rank % 2 + 1) / 2;
  if (tpdp_comm_size(sub) != ssize || tpdp_comm_rank(sub) != rank / 2 ||
      strcmp(tpdp_comm_backend(sub), "nccl") != 0)
    MISMATCH("split: rank/size %d/%d backend %s, expected %d/%d nccl",
             tpdp_comm_rank(sub), tpdp_comm_size(sub), tpdp_comm_backend(sub),
             rank / 2, ssize);
  members = malloc(sizeof(int) * (size_t)size);
  if (!members) FAILF("malloc");
  for (int i = 0; i < ssize; i++) members[i] = 2 * i + rank % 2;
  target t = {sub, members, size};
  if (bufs_open(&b, size, msg, len)) goto out;
  static const tpdp_dtype dts[] = {TPDP_F32, TPDP_BF16};
  if (tpdp_comm_size(sub) == ssize &&
      run_kind(&t, &b, K_ALLREDUCE, dts, 2, 0, bad, msg, len))
    goto out;
  rc = nbad ? 1 : 0;
out:
  bufs_close(&b);
  free(members);
  tpdp_comm_destroy(sub);
  return rc;
}

static int check_barrier(const tpdp_gpu_multi_ctx *ctx, char *msg, size_t len) {
  int rc = 1;
  cudaStream_t user = NULL;
  tpdp_work *w = NULL;
  COK(cudaStreamCreateWithFlags(&user, cudaStreamNonBlocking));
  for (int i = 0; i < 3; i++) TOK(tpdp_barrier(ctx->nccl));
  TOK(tpdp_barrier_async(ctx->nccl, &w));
  TOK(tpdp_work_wait_stream(w, user));
  COK(cudaStreamSynchronize(user));
  w = NULL;
  TOK(tpdp_barrier_async(ctx->nccl, &w));
  TOK(tpdp_work_wait(w));
  rc = 0;
out:
  if (user) cudaStreamDestroy(user);
  return rc;
}

/* World size 4: a dp=2 x tp=2 mesh over the NCCL communicator; each dim's
 * sub-communicator (ncclCommSplit) runs every collective over f32, f16,
 * bf16 and i32 against the values of its group's world ranks. */
static int check_mesh_2d(const tpdp_gpu_multi_ctx *ctx, char *msg, size_t len) {
  int rc = 1, nbad = 0, *bad = &nbad;
  tpdp_mesh *mesh = NULL;
  bufs b;
  memset(&b, 0, sizeof b);
  int size = tpdp_comm_size(ctx->nccl), rank = tpdp_comm_rank(ctx->nccl);
  int dev = tpdp_comm_cuda_device(ctx->nccl);
  const int64_t sizes[2] = {2, 2};
  const char *const names[2] = {"dp", "tp"};
  if (size != 4) FAILF("needs world size 4, not %d", size);
  TOK(tpdp_mesh_create(ctx->nccl, 2, sizes, names, &mesh));
  int64_t coords[2] = {-1, -1};
  TOK(tpdp_mesh_coords(mesh, rank, coords));
  if (tpdp_mesh_rank(mesh) != rank || coords[0] != rank / 2 ||
      coords[1] != rank % 2)
    MISMATCH("mesh rank %d coords (%lld,%lld), expected %d (%d,%d)",
             tpdp_mesh_rank(mesh), (long long)coords[0], (long long)coords[1],
             rank, rank / 2, rank % 2);
  if (bufs_open(&b, size, msg, len)) goto out;
  static const tpdp_dtype dts[] = {TPDP_F32, TPDP_F16, TPDP_BF16, TPDP_I32};
  for (int dim = 0; dim < 2; dim++) {
    tpdp_comm *sub = NULL;
    int group[2] = {-1, -1};
    TOK(tpdp_mesh_dim_comm(mesh, dim, &sub));
    TOK(tpdp_mesh_group_ranks(mesh, dim, rank, group));
    /* dp groups {r%2, r%2+2}, tp groups {2*(r/2), 2*(r/2)+1} */
    int want0 = dim == 0 ? rank % 2 : rank - rank % 2;
    int want1 = dim == 0 ? rank % 2 + 2 : rank - rank % 2 + 1;
    if (group[0] != want0 || group[1] != want1)
      MISMATCH("%s group of rank %d is {%d,%d}, expected {%d,%d}", names[dim],
               rank, group[0], group[1], want0, want1);
    if (tpdp_comm_size(sub) != 2 || tpdp_comm_rank(sub) != coords[dim] ||
        strcmp(tpdp_comm_backend(sub), "nccl") != 0 ||
        tpdp_comm_cuda_device(sub) != dev)
      FAILF(
          "%s communicator %s: rank/size %d/%d backend %s device %d, "
          "expected %lld/2 nccl %d",
          names[dim], tpdp_comm_name(sub), tpdp_comm_rank(sub),
          tpdp_comm_size(sub), tpdp_comm_backend(sub),
          tpdp_comm_cuda_device(sub), (long long)coords[dim], dev);
    target t = {sub, group, size};
    for (int kind = K_ALLREDUCE; kind <= K_ALLTOALL; kind++)
      if (run_kind(&t, &b, kind, dts, 4, 0, bad, msg, len)) goto out;
    TOK(tpdp_barrier(sub));
  }
  rc = nbad ? 1 : 0;
out:
  bufs_close(&b);
  if (tpdp_mesh_destroy(mesh) != TPDP_SUCCESS && rc == 0) {
    snprintf(msg, len, "tpdp_mesh_destroy: %s", tpdp_last_error());
    rc = 1;
  }
  return rc;
}

const tpdp_gpu_multi_check tpdp_gpu_multi_checks[] = {
    {"comm_basics", 0, check_comm_basics},
    {"allreduce", 0, check_allreduce},
    {"allgather", 0, check_allgather},
    {"reduce_scatter", 0, check_reduce_scatter},
    {"broadcast", 0, check_broadcast},
    {"alltoall", 0, check_alltoall},
    {"barrier", 0, check_barrier},
    {"mesh_2d", 4, check_mesh_2d},
};
const int tpdp_gpu_multi_check_count =
    (int)(sizeof tpdp_gpu_multi_checks / sizeof tpdp_gpu_multi_checks[0]);
