// SPDX-License-Identifier: BSD-3-Clause
/* Redistribute throughput against raw MPI collectives, same buffers, same
 * run. Global tensor: --mib MiB of f32 as [rows, 4096] (default 64 MiB).
 * For each case, rounds alternate raw MPI and tpdp_redistribute; each timing
 * is the slowest rank's (barrier before, max-reduce after); the ratio is
 * median(raw) / median(tpdp) (1.0 = no overhead).
 *   S(0)->R: raw MPI_Allgather;  P->S(0): raw MPI_Reduce_scatter_block;
 *   S(1)->R: raw MPI_Allgather of the same bytes (tpdp must pack).
 * Usage (under mpirun): redistribute_bench [--mib N] [--rounds N] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpdp/tpdp.h"

static double slowest(double t0) {
  double dt = MPI_Wtime() - t0, mx = 0;
  MPI_Allreduce(&dt, &mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return mx;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}
static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#define DIE(st)                                                               \
  do {                                                                        \
    if ((st) != TPDP_SUCCESS) {                                               \
      fprintf(stderr, "redistribute_bench: %s: %s\n", tpdp_status_string(st), \
              tpdp_last_error());                                             \
      MPI_Abort(MPI_COMM_WORLD, 1);                                           \
    }                                                                         \
  } while (0)

int main(int argc, char **argv) {
  int mib = 64, rounds = 7;
  for (int i = 1; i + 1 < argc; i++) {
    if (strcmp(argv[i], "--mib") == 0)
      mib = atoi(argv[++i]);
    else if (strcmp(argv[i], "--rounds") == 0)
      rounds = atoi(argv[++i]);
  }
  DIE(tpdp_init(&argc, &argv));
  tpdp_comm *world;
  DIE(tpdp_comm_world(&world));
  int rank = tpdp_comm_rank(world), p = tpdp_comm_size(world);
  int64_t cols = 4096;
  int64_t rows = (int64_t)mib * 1024 * 1024 / 4 / cols;
  rows -= rows % (p * p);
  int64_t n = rows * cols, part = n / p;
  int64_t msize[1] = {p};
  tpdp_mesh *mesh;
  DIE(tpdp_mesh_create(world, 1, msize, NULL, &mesh));
  tpdp_device cpu = {TPDP_DEVICE_CPU, 0};
  int64_t g[2] = {rows, cols};
  tpdp_placement s0 = tpdp_shard(0), s1 = tpdp_shard(1), r = tpdp_replicate(),
                 ps = tpdp_partial(TPDP_OP_SUM);
  tpdp_spec *spec_s0, *spec_s1, *spec_r, *spec_p;
  DIE(tpdp_spec_create(mesh, &s0, 1, 2, g, TPDP_F32, cpu, &spec_s0));
  DIE(tpdp_spec_create(mesh, &s1, 1, 2, g, TPDP_F32, cpu, &spec_s1));
  DIE(tpdp_spec_create(mesh, &r, 1, 2, g, TPDP_F32, cpu, &spec_r));
  DIE(tpdp_spec_create(mesh, &ps, 1, 2, g, TPDP_F32, cpu, &spec_p));
  float *full = malloc((size_t)n * 4), *full2 = malloc((size_t)n * 4);
  float *shard = malloc((size_t)part * 4);
  if (!full || !full2 || !shard) return 1;
  for (int64_t i = 0; i < n; i++) full[i] = full2[i] = (float)(i % 977);
  for (int64_t i = 0; i < part; i++) shard[i] = (float)(i % 631);
  const char *names[3] = {"S(0)->R", "P->S(0)", "S(1)->R"};
  double ratio[3];
  double *traw = malloc(sizeof(double) * (size_t)rounds);
  double *ttp = malloc(sizeof(double) * (size_t)rounds);
  for (int c = 0; c < 3; c++) {
    const tpdp_spec *src = c == 0 ? spec_s0 : c == 1 ? spec_p : spec_s1;
    const tpdp_spec *dst = c == 1 ? spec_s0 : spec_r;
    int64_t ls[2], ld[2];
    DIE(tpdp_spec_local_shape(src, rank, ls, NULL));
    DIE(tpdp_spec_local_shape(dst, rank, ld, NULL));
    tpdp_tensor sl, dl;
    DIE(tpdp_tensor_init(&sl, c == 1 ? full : shard, TPDP_F32, cpu, 2, ls));
    DIE(tpdp_tensor_init(&dl, c == 1 ? shard : full2, TPDP_F32, cpu, 2, ld));
    tpdp_dtensor dt;
    DIE(tpdp_dtensor_unflatten(&sl, src, &dt));
    for (int it = -1; it < rounds; it++) { /* it == -1: warm-up */
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      if (c == 1)
        MPI_Reduce_scatter_block(full, shard, (int)part, MPI_FLOAT, MPI_SUM,
                                 MPI_COMM_WORLD);
      else
        MPI_Allgather(shard, (int)part, MPI_FLOAT, full2, (int)part, MPI_FLOAT,
                      MPI_COMM_WORLD);
      double a = slowest(t0);
      MPI_Barrier(MPI_COMM_WORLD);
      t0 = MPI_Wtime();
      DIE(tpdp_redistribute(&dt, dst, &dl));
      double b = slowest(t0);
      if (it >= 0) {
        traw[it] = a;
        ttp[it] = b;
      }
    }
    double mr = median(traw, rounds), mt = median(ttp, rounds);
    ratio[c] = mr / mt;
    if (rank == 0)
      printf(
          "%-8s %d MiB f32 [%lld, %lld] on %d ranks: raw MPI %.2f ms, "
          "tpdp %.2f ms, ratio %.3f\n",
          names[c], mib, (long long)rows, (long long)cols, p, mr * 1e3,
          mt * 1e3, ratio[c]);
  }
  if (rank == 0)
    printf("redistribute: ratio %.3f\n",
           ratio[0] < ratio[1] ? ratio[0] : ratio[1]);
  free(traw);
  free(ttp);
  free(full);
  free(full2);
  free(shard);
  tpdp_spec_destroy(spec_s0);
  tpdp_spec_destroy(spec_s1);
  tpdp_spec_destroy(spec_r);
  tpdp_spec_destroy(spec_p);
  tpdp_status mesh_st = tpdp_mesh_destroy(mesh); /* DIE reads it twice */
  DIE(mesh_st);
  tpdp_finalize();
  return 0;
}
