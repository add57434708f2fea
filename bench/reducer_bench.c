// SPDX-License-Identifier: BSD-3-Clause
/* bench/reducer.sh's MPI part: 100 f32 tensors of 250k elements (25M
 * parameters, 100 MB of gradients) over the world communicator.
 *
 *   reducer_bench time [--steps N]
 *     per step, alternating so that drift hits both alike:
 *       raw  = blocking MPI_Allreduce over each bucket's bytes, in the
 *              reducer's launch order (the same buckets: tpdp_bucket_assign
 *              with [1 MiB, 25 MiB], reversed)
 *       tpdp = tpdp_reducer_prepare, mark_ready 99..0, finalize (view mode)
 *       raw_async   = MPI_Iallreduce per bucket, then MPI_Waitall
 *       tpdp_nodiv  = the reducer with divide_factor 1 (no division pass;
 *                     MPI_Allreduce SUM rather than the fused ring AVG)
 *       ring_avg    = tpdp_allreduce(TPDP_OP_AVG) over the same buckets
 *                     (the collective alone: for f32 buckets this large the
 *                     MPI backend's ring, which divides while it reduces)
 *     prints "raw_ms X tpdp_ms Y buckets B raw_async_ms Z tpdp_nodiv_ms W
 *     ring_avg_ms V"
 *     (medians, max over ranks).
 *   reducer_bench multihost [--steps N]   (bench/multihost.sh)
 *     per step, alternating: raw (as above), hier = the reducer with its
 *     shared-memory buckets (hierarchical across hosts), flat = the reducer
 *     made with TPDP_SHM=0 (its buckets through MPI alone); prints
 *     "raw_ms X hier_ms Y flat_ms Z buckets B" (medians, max over ranks)
 *     "hier_cross_bytes H flat_cross_bytes F": the bytes the comm layer
 *     counted going to ranks on another host in one step of each reducer
 *     (tpdp_comm_traffic_get on the world, summed over the ranks).
 *   reducer_bench rss view|copy [--steps N]
 *     only the reducer in that mode (view: the gradients live in the
 *     buckets; copy: the caller owns separate gradient buffers), then
 *     prints "rss_mb_<mode> X" (peak RSS, ru_maxrss, max over ranks),
 *     then the steady RSS and PSS (/proc/self/smaps_rollup) after the steps.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "tpdp/comm.h"
#include "tpdp/reducer.h"

#define NT 100
#define NUMEL 250000

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double max_over_ranks(double x) {
  double y = x;
  MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return y;
}

static int die(const char *what) {
  fprintf(stderr, "reducer_bench: %s failed: %s\n", what, tpdp_last_error());
  MPI_Abort(MPI_COMM_WORLD, 1);
  return 1;
}

#define OK(call)                                   \
  do {                                             \
    if ((call) != TPDP_SUCCESS) return die(#call); \
  } while (0)

static int make_params(int with_grads, tpdp_reducer_param *ps, float **pbuf,
                       float **gbuf) {
  *pbuf = (float *)calloc((size_t)NT * NUMEL, sizeof(float));
  *gbuf =
      with_grads ? (float *)calloc((size_t)NT * NUMEL, sizeof(float)) : NULL;
  if (*pbuf == NULL || (with_grads && *gbuf == NULL)) return -1;
  for (int p = 0; p < NT; p++) {
    ps[p].param = tpdp_tensor_1d(*pbuf + (size_t)p * NUMEL, TPDP_F32, NUMEL);
    ps[p].grad = tpdp_tensor_1d(with_grads ? *gbuf + (size_t)p * NUMEL : NULL,
                                TPDP_F32, NUMEL);
    ps[p].fqn = NULL;
  }
  return 0;
}

static int reducer_step(tpdp_reducer *r) {
  OK(tpdp_reducer_prepare(r));
  for (int p = NT - 1; p >= 0; p--) OK(tpdp_reducer_mark_ready(r, p));
  OK(tpdp_reducer_finalize(r));
  return 0;
}

int main(int argc, char **argv) {
  if (tpdp_init(&argc, &argv) != TPDP_SUCCESS) {
    fprintf(stderr, "tpdp_init: %s\n", tpdp_last_error());
    return 1;
  }
  const char *mode = argc > 1 ? argv[1] : "time";
  const char *sub = argc > 2 && argv[2][0] != '-' ? argv[2] : "view";
  int steps = 10;
  for (int i = 1; i + 1 < argc; i++)
    if (strcmp(argv[i], "--steps") == 0) steps = atoi(argv[i + 1]);
  if (steps < 1) steps = 1;
  tpdp_comm *world = NULL;
  OK(tpdp_comm_world(&world));
  int rank = tpdp_comm_rank(world);
  static tpdp_reducer_param ps[NT];
  float *pbuf = NULL, *gbuf = NULL;

  if (strcmp(mode, "rss") == 0) {
    int view = strcmp(sub, "copy") != 0;
    if (make_params(!view, ps, &pbuf, &gbuf) != 0) return die("alloc");
    tpdp_reducer_options o = TPDP_REDUCER_OPTIONS_INIT;
    o.gradient_as_bucket_view = view;
    tpdp_reducer *r = NULL;
    OK(tpdp_reducer_create(world, ps, NT, &o, &r));
    for (int s = 0; s < steps; s++) {
      /* Write every gradient as backward would (in view mode the views
       * point into the buckets): untouched calloc'd pages would not count
       * towards RSS and would hide copy mode's extra buffers. */
      for (int p = 0; p < NT; p++) {
        tpdp_tensor gv; /* view mode: moved by the rebuild after step 1 */
        OK(tpdp_reducer_grad_view(r, p, &gv));
        float *g = (float *)gv.data;
        for (int64_t i = 0; i < NUMEL; i++) g[i] = (float)(s + 1);
      }
      if (reducer_step(r)) return 1;
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double mb = max_over_ranks(ru.ru_maxrss / 1024.0);
    /* Steady state too: the peak includes the spare buckets that view mode
     * holds from create until the one-time rebuild after the first step
     * (the old and the new buckets at once). */
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f != NULL) {
      if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
      fclose(f);
    }
    double now_mb =
        max_over_ranks(resident * (sysconf(_SC_PAGESIZE) / 1048576.0));
    /* PSS as well: RSS counts a shared page (the buckets in shared memory,
     * comm/shm.c) in every rank that touched it, PSS splits it among them,
     * so the ranks' PSS add up to the memory really used. */
    double pss_kb = -1;
    f = fopen("/proc/self/smaps_rollup", "r");
    if (f != NULL) {
      char line[256];
      while (fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "Pss: %lf", &pss_kb) == 1) break;
      fclose(f);
    }
    double pss_mb = max_over_ranks(pss_kb / 1024.0);
    const char *m = view ? "view" : "copy";
    if (rank == 0)
      printf("rss_mb_%s %.1f rss_now_mb_%s %.1f pss_now_mb_%s %.1f\n", m, mb, m,
             now_mb, m, pss_mb);
    OK(tpdp_reducer_destroy(r));
    free(pbuf);
    free(gbuf);
    tpdp_finalize();
    return 0;
  }

  if (strcmp(mode, "multihost") == 0) {
    static tpdp_reducer_param pf[NT];
    float *pbuf_f = NULL, *gbuf_f = NULL;
    if (make_params(0, ps, &pbuf, &gbuf) != 0 ||
        make_params(0, pf, &pbuf_f, &gbuf_f) != 0)
      return die("alloc");
    tpdp_reducer *rh = NULL, *rf = NULL;
    OK(tpdp_reducer_create(world, ps, NT, NULL, &rh));
    setenv("TPDP_SHM", "0", 1); /* read at create, alike on every rank */
    OK(tpdp_reducer_create(world, pf, NT, NULL, &rf));
    unsetenv("TPDP_SHM");
    int64_t nb = tpdp_reducer_num_buckets(rh);
    size_t *bbytes = (size_t *)calloc((size_t)nb, sizeof *bbytes);
    float *raw = (float *)calloc((size_t)NT * NUMEL, sizeof(float));
    double *t[3];
    for (int k = 0; k < 3; k++) t[k] = (double *)calloc((size_t)steps, 8);
    if (!bbytes || !raw || !t[0] || !t[1] || !t[2]) return die("alloc");
    for (int64_t b = 0; b < nb; b++)
      OK(tpdp_reducer_bucket(rh, b, NULL, NULL, &bbytes[b], NULL));
    uint64_t cross[3] = {0, 0, 0};     /* the last step's, this rank */
    for (int s = -2; s < steps; s++) { /* two warm-up steps */
      for (int k = 0; k < 3; k++) {
        MPI_Barrier(MPI_COMM_WORLD);
        OK(tpdp_comm_traffic_reset(world));
        double t0 = MPI_Wtime();
        if (k == 0) {
          size_t off = 0;
          for (int64_t b = 0; b < nb; b++) {
            MPI_Allreduce(MPI_IN_PLACE, (char *)raw + off, (int)(bbytes[b] / 4),
                          MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            off += bbytes[b];
          }
        } else if (reducer_step(k == 1 ? rh : rf)) {
          return 1;
        }
        if (s >= 0) t[k][s] = MPI_Wtime() - t0;
        tpdp_comm_traffic tr;
        OK(tpdp_comm_traffic_get(world, &tr));
        cross[k] = tr.cross_host_bytes;
      }
    }
    uint64_t cross_all[3];
    MPI_Allreduce(cross, cross_all, 3, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    double ms[3];
    for (int k = 0; k < 3; k++)
      ms[k] = max_over_ranks(median(t[k], steps) * 1e3);
    if (rank == 0)
      printf(
          "raw_ms %.2f hier_ms %.2f flat_ms %.2f buckets %lld "
          "hier_cross_bytes %llu flat_cross_bytes %llu\n",
          ms[0], ms[1], ms[2], (long long)nb, (unsigned long long)cross_all[1],
          (unsigned long long)cross_all[2]);
    OK(tpdp_reducer_destroy(rh));
    OK(tpdp_reducer_destroy(rf));
    for (int k = 0; k < 3; k++) free(t[k]);
    free(bbytes);
    free(raw);
    free(pbuf);
    free(gbuf);
    free(pbuf_f);
    free(gbuf_f);
    tpdp_finalize();
    return 0;
  }

  /* time: the raw baseline and the reducer (view mode) alternately. */
  if (make_params(0, ps, &pbuf, &gbuf) != 0) return die("alloc");
  tpdp_reducer *r = NULL, *r1 = NULL;
  OK(tpdp_reducer_create(world, ps, NT, NULL, &r));
  /* diagnostic: the same reducer without the division pass */
  static tpdp_reducer_param ps1[NT];
  float *pbuf1 = NULL, *gbuf1 = NULL;
  if (make_params(0, ps1, &pbuf1, &gbuf1) != 0) return die("alloc");
  tpdp_reducer_options o1 = TPDP_REDUCER_OPTIONS_INIT;
  o1.divide_factor = 1.0;
  OK(tpdp_reducer_create(world, ps1, NT, &o1, &r1));
  int64_t nb = tpdp_reducer_num_buckets(r);
  size_t *bbytes = (size_t *)calloc((size_t)nb, sizeof *bbytes);
  float *raw = (float *)calloc((size_t)NT * NUMEL, sizeof(float));
  double *t_raw = (double *)calloc((size_t)steps, sizeof(double));
  double *t_tpdp = (double *)calloc((size_t)steps, sizeof(double));
  double *t_async = (double *)calloc((size_t)steps, sizeof(double));
  double *t_nodiv = (double *)calloc((size_t)steps, sizeof(double));
  double *t_ring = (double *)calloc((size_t)steps, sizeof(double));
  MPI_Request *reqs = (MPI_Request *)calloc((size_t)nb, sizeof(MPI_Request));
  if (!bbytes || !raw || !t_raw || !t_tpdp || !t_async || !t_nodiv || !t_ring ||
      !reqs)
    return die("alloc");
  for (int64_t b = 0; b < nb; b++)
    OK(tpdp_reducer_bucket(r, b, NULL, NULL, &bbytes[b], NULL));
  /* Warm up both (first touches, rebuild after the first iteration). */
  for (int w = 0; w < 2; w++) {
    if (reducer_step(r)) return 1;
    if (reducer_step(r1)) return 1;
    size_t off = 0;
    for (int64_t b = 0; b < nb; b++) {
      MPI_Allreduce(MPI_IN_PLACE, (char *)raw + off, (int)(bbytes[b] / 4),
                    MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      off += bbytes[b];
    }
    off = 0;
    for (int64_t b = 0; b < nb; b++) {
      tpdp_tensor v =
          tpdp_tensor_1d((char *)raw + off, TPDP_F32, (int64_t)(bbytes[b] / 4));
      OK(tpdp_allreduce(world, &v, &v, TPDP_OP_AVG));
      off += bbytes[b];
    }
  }
  for (int s = 0; s < steps; s++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    size_t off = 0;
    for (int64_t b = 0; b < nb; b++) {
      MPI_Allreduce(MPI_IN_PLACE, (char *)raw + off, (int)(bbytes[b] / 4),
                    MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      off += bbytes[b];
    }
    t_raw[s] = MPI_Wtime() - t0;
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    if (reducer_step(r)) return 1;
    t_tpdp[s] = MPI_Wtime() - t0;
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    off = 0;
    for (int64_t b = 0; b < nb; b++) {
      MPI_Iallreduce(MPI_IN_PLACE, (char *)raw + off, (int)(bbytes[b] / 4),
                     MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &reqs[b]);
      off += bbytes[b];
    }
    MPI_Waitall((int)nb, reqs, MPI_STATUSES_IGNORE);
    t_async[s] = MPI_Wtime() - t0;
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    if (reducer_step(r1)) return 1;
    t_nodiv[s] = MPI_Wtime() - t0;
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    off = 0;
    for (int64_t b = 0; b < nb; b++) {
      tpdp_tensor v =
          tpdp_tensor_1d((char *)raw + off, TPDP_F32, (int64_t)(bbytes[b] / 4));
      OK(tpdp_allreduce(world, &v, &v, TPDP_OP_AVG));
      off += bbytes[b];
    }
    t_ring[s] = MPI_Wtime() - t0;
  }
  double raw_ms = max_over_ranks(median(t_raw, steps) * 1e3);
  double tpdp_ms = max_over_ranks(median(t_tpdp, steps) * 1e3);
  double async_ms = max_over_ranks(median(t_async, steps) * 1e3);
  double nodiv_ms = max_over_ranks(median(t_nodiv, steps) * 1e3);
  double ring_ms = max_over_ranks(median(t_ring, steps) * 1e3);
  if (rank == 0)
    printf(
        "raw_ms %.2f tpdp_ms %.2f buckets %lld raw_async_ms %.2f "
        "tpdp_nodiv_ms %.2f ring_avg_ms %.2f\n",
        raw_ms, tpdp_ms, (long long)nb, async_ms, nodiv_ms, ring_ms);
  OK(tpdp_reducer_destroy(r));
  OK(tpdp_reducer_destroy(r1));
  free(t_async);
  free(t_nodiv);
  free(t_ring);
  free(reqs);
  free(pbuf1);
  free(bbytes);
  free(raw);
  free(t_raw);
  free(t_tpdp);
  free(pbuf);
  tpdp_finalize();
  return 0;
}
