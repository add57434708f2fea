// SPDX-License-Identifier: BSD-3-Clause
/* comm_bench: tpdp collectives (blocking form, MPI backend) against the raw
 * MPI calls they wrap, on the same buffers in the same run.
 *
 * For each size (bytes of the larger buffer, as nccl-tests counts them: the
 * whole buffer for allreduce, the gathered recv buffer for allgather, the
 * send buffer for reduce_scatter) and each collective, `rounds` pairs of
 * measurements alternate raw-first and tpdp-first; each measurement times
 * `k` back-to-back calls (k shrinks as sizes grow) and keeps the slowest
 * rank's time per call. The table shows the median times and the median of
 * the per-round ratios raw/tpdp; the last line is
 *   comm: ratio <min over sizes >= 1 MiB and collectives of raw/tpdp>
 * (1.0 = no overhead; above 1 = tpdp faster).
 *
 * usage: mpirun -np 2 comm_bench [--min-bytes B] [--max-bytes B] [--rounds R (default 15)]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpdp/tpdp.h"

enum { ALLREDUCE, ALLGATHER, REDUCE_SCATTER, NCOLL };
static const char *const names[NCOLL] = {"allreduce", "allgather",
                                         "reduce_scatter"};

typedef struct {
  tpdp_comm *comm;
  MPI_Comm mpi;
  int p;
  float *send, *recv;
} bench_ctx;

/* One call of `coll` over `n` f32 (the larger buffer), raw or through tpdp. */
static int call(const bench_ctx *c, int coll, int64_t n, int raw) {
  int64_t part = n / c->p;
  if (raw) {
    switch (coll) {
      case ALLREDUCE:
        return MPI_Allreduce(c->send, c->recv, (int)n, MPI_FLOAT, MPI_SUM,
                             c->mpi);
      case ALLGATHER:
        return MPI_Allgather(c->send, (int)part, MPI_FLOAT, c->recv, (int)part,
                             MPI_FLOAT, c->mpi);
      default:
        return MPI_Reduce_scatter_block(c->send, c->recv, (int)part, MPI_FLOAT,
                                        MPI_SUM, c->mpi);
    }
  }
  tpdp_tensor s, r;
  switch (coll) {
    case ALLREDUCE:
      s = tpdp_tensor_1d(c->send, TPDP_F32, n);
      r = tpdp_tensor_1d(c->recv, TPDP_F32, n);
      return tpdp_allreduce(c->comm, &s, &r, TPDP_OP_SUM);
    case ALLGATHER:
      s = tpdp_tensor_1d(c->send, TPDP_F32, part);
      r = tpdp_tensor_1d(c->recv, TPDP_F32, part * c->p);
      return tpdp_allgather(c->comm, &s, &r);
    default:
      s = tpdp_tensor_1d(c->send, TPDP_F32, part * c->p);
      r = tpdp_tensor_1d(c->recv, TPDP_F32, part);
      return tpdp_reduce_scatter(c->comm, &s, &r, TPDP_OP_SUM);
  }
}

/* Seconds per call, the slowest rank's, for k calls; < 0 on failure. */
static double measure(const bench_ctx *c, int coll, int64_t n, int raw, int k) {
  MPI_Barrier(c->mpi);
  double t0 = MPI_Wtime();
  int rc = 0;
  for (int i = 0; i < k && rc == 0; i++) rc = call(c, coll, n, raw);
  double t = (MPI_Wtime() - t0) / k;
  if (rc != 0) {
    fprintf(stderr, "comm_bench: %s %s failed: %s\n", raw ? "MPI" : "tpdp",
            names[coll], raw ? "MPI error" : tpdp_last_error());
    t = -1;
  }
  double worst = 0;
  MPI_Allreduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, c->mpi);
  double any_fail = t < 0 ? 1 : 0, fails = 0;
  MPI_Allreduce(&any_fail, &fails, 1, MPI_DOUBLE, MPI_MAX, c->mpi);
  return fails > 0 ? -1 : worst;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static long long arg_ll(int argc, char **argv, const char *name,
                        long long dflt) {
  for (int i = 1; i + 1 < argc; i++)
    if (strcmp(argv[i], name) == 0) return strtoll(argv[i + 1], NULL, 10);
  return dflt;
}

int main(int argc, char **argv) {
  if (tpdp_init(&argc, &argv) != TPDP_SUCCESS) {
    fprintf(stderr, "comm_bench: tpdp_init: %s\n", tpdp_last_error());
    return 1;
  }
  long long min_bytes = arg_ll(argc, argv, "--min-bytes", 1024);
  long long max_bytes = arg_ll(argc, argv, "--max-bytes", 256LL << 20);
  int rounds = (int)arg_ll(argc, argv, "--rounds", 15);
  if (rounds < 1) rounds = 1;
  if (rounds > 64) rounds = 64;
  bench_ctx c;
  tpdp_comm_world(&c.comm);
  c.mpi = MPI_COMM_WORLD;
  c.p = tpdp_comm_size(c.comm);
  int me = tpdp_comm_rank(c.comm);
  size_t cap = (size_t)(max_bytes / 4) + 64;
  c.send = malloc(cap * sizeof(float));
  c.recv = malloc(cap * sizeof(float));
  if (!c.send || !c.recv) {
    fprintf(stderr, "comm_bench: out of memory (%lld bytes)\n", max_bytes);
    return 1;
  }
  for (size_t i = 0; i < cap; i++) {
    c.send[i] = (float)((i + (size_t)me) % 7);
    c.recv[i] = 0;
  }
  if (me == 0) {
    printf(
        "comm_bench: %d ranks, f32, MPI backend; median of %d alternating "
        "rounds; time per call (slowest rank)\n",
        c.p, rounds);
    printf("%12s %-15s %6s %12s %12s %8s\n", "bytes", "collective", "calls",
           "raw_us", "tpdp_us", "raw/tpdp");
  }
  double min_ratio = 1e30;
  int failed = 0;
  for (long long bytes = min_bytes; bytes <= max_bytes && !failed; bytes *= 4) {
    int64_t n = bytes / 4;
    n -= n % c.p;
    if (n < c.p) continue;
    /* About 64 MiB of traffic per measurement, at least two calls below
     * 64 MiB so one slow call weighs less. */
    int k = (int)((64LL << 20) / bytes);
    if (k < 2) k = bytes <= (64LL << 20) ? 2 : 1;
    if (k > 1000) k = 1000;
    for (int coll = 0; coll < NCOLL && !failed; coll++) {
      double raw[64], tp[64], pair[64];
      if (measure(&c, coll, n, 1, 1) < 0 || measure(&c, coll, n, 0, 1) < 0) {
        failed = 1;
        break;
      }
      for (int r = 0; r < rounds; r++) {
        int raw_first = r % 2 == 0;
        double a = measure(&c, coll, n, raw_first, k);
        double b = measure(&c, coll, n, !raw_first, k);
        if (a < 0 || b < 0) {
          failed = 1;
          break;
        }
        raw[r] = raw_first ? a : b;
        tp[r] = raw_first ? b : a;
        pair[r] = tp[r] > 0 ? raw[r] / tp[r] : 0;
      }
      if (failed) break;
      /* The ratio is the median of per-round ratios: the two runs of a
       * round are back to back, so load from other processes affects both
       * alike, and a disturbed round is an outlier the median drops. */
      double mr = median(raw, rounds), mt = median(tp, rounds);
      double ratio = median(pair, rounds);
      if (bytes >= (1LL << 20) && ratio < min_ratio) min_ratio = ratio;
      if (me == 0)
        printf("%12lld %-15s %6d %12.1f %12.1f %8.3f\n", bytes, names[coll], k,
               mr * 1e6, mt * 1e6, ratio);
    }
  }
  if (me == 0) {
    if (failed)
      printf("comm: failed\n");
    else if (min_ratio > 1e29)
      printf("comm: ratio n/a (no size >= 1 MiB measured)\n");
    else
      printf("comm: ratio %.3f\n", min_ratio);
  }
  free(c.send);
  free(c.recv);
  tpdp_finalize();
  return failed;
}
