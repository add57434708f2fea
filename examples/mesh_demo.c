// SPDX-License-Identifier: BSD-3-Clause
/* mesh_demo: build a device mesh over the MPI world (2x2 (dp, tp) by
 * default), run each collective on each mesh dim, check every result, and
 * report timing.
 *
 *   mpirun -np 4 bazel-bin/examples/mesh_demo [--mesh dp=2,tp=2]
 *          [--count N] [--iters K]
 *
 * Rank 0 prints one line per dim and collective: the mean time per call
 * (the slowest rank's), and the bus bandwidth as nccl-tests defines it
 * (algorithm bandwidth times 2(p-1)/p for allreduce, (p-1)/p for allgather,
 * reduce_scatter and alltoall, 1 for broadcast). Exit status: 0 when every
 * result is right ("mesh_demo: ok" last), 1 on a wrong result or a failed
 * call, 2 on bad arguments. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tpdp/tpdp.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Input of group rank g at element i: small integers, exact sums in f32. */
static float input(int g, int64_t i) { return (float)((g * 7 + i) % 11); }

static void usage(FILE *out) {
  fprintf(
      out,
      "usage: mpirun -np N mesh_demo [--mesh SPEC] [--count N] [--iters K]\n"
      "  --mesh SPEC  mesh over the world, e.g. dp=2,tp=2 (default; the\n"
      "               product of the sizes must equal the number of ranks)\n"
      "  --count N    f32 elements each rank contributes (default 262144)\n"
      "  --iters K    timed calls per collective (default 20)\n");
}

enum {
  ALLREDUCE,
  ALLGATHER,
  REDUCE_SCATTER,
  BROADCAST,
  ALLTOALL,
  BARRIER,
  NCOLL
};
static const char *const coll_names[NCOLL] = {
    "allreduce(sum)",    "allgather", "reduce_scatter(sum)",
    "broadcast(root 0)", "alltoall",  "barrier"};

typedef struct {
  tpdp_comm *comm;
  int g, p;
  int64_t n;
  float *send, *recv;
} run_ctx;

static tpdp_status run_once(run_ctx *c, int coll) {
  int64_t n = c->n, p = c->p;
  tpdp_tensor s, r;
  switch (coll) {
    case ALLREDUCE:
      s = tpdp_tensor_1d(c->send, TPDP_F32, n);
      r = tpdp_tensor_1d(c->recv, TPDP_F32, n);
      return tpdp_allreduce(c->comm, &s, &r, TPDP_OP_SUM);
    case ALLGATHER:
      s = tpdp_tensor_1d(c->send, TPDP_F32, n);
      r = tpdp_tensor_1d(c->recv, TPDP_F32, n * p);
      return tpdp_allgather(c->comm, &s, &r);
    case REDUCE_SCATTER:
      s = tpdp_tensor_1d(c->send, TPDP_F32, n * p);
      r = tpdp_tensor_1d(c->recv, TPDP_F32, n);
      return tpdp_reduce_scatter(c->comm, &s, &r, TPDP_OP_SUM);
    case BROADCAST:
      s = tpdp_tensor_1d(c->send, TPDP_F32, n);
      r = tpdp_tensor_1d(c->recv, TPDP_F32, n);
      return tpdp_broadcast(c->comm, c->g == 0 ? &s : NULL, &r, 0);
    case ALLTOALL:
      s = tpdp_tensor_1d(c->send, TPDP_F32, n * p);
      r = tpdp_tensor_1d(c->recv, TPDP_F32, n * p);
      return tpdp_alltoall(c->comm, &s, &r);
    default:
      return tpdp_barrier(c->comm);
  }
}

/* Number of wrong elements in this rank's result. */
static int64_t check(const run_ctx *c, int coll) {
  int64_t bad = 0, n = c->n;
  int p = c->p, g = c->g;
  switch (coll) {
    case ALLREDUCE:
      for (int64_t i = 0; i < n; i++) {
        float want = 0;
        for (int r = 0; r < p; r++) want += input(r, i);
        bad += c->recv[i] != want;
      }
      break;
    case ALLGATHER:
      for (int r = 0; r < p; r++)
        for (int64_t i = 0; i < n; i++)
          bad += c->recv[r * n + i] != input(r, i);
      break;
    case REDUCE_SCATTER:
      for (int64_t i = 0; i < n; i++) {
        float want = 0;
        for (int r = 0; r < p; r++) want += input(r, g * n + i);
        bad += c->recv[i] != want;
      }
      break;
    case BROADCAST:
      for (int64_t i = 0; i < n; i++) bad += c->recv[i] != input(0, i);
      break;
    case ALLTOALL: /* block r of the result is block g of rank r's input */
      for (int r = 0; r < p; r++)
        for (int64_t i = 0; i < n; i++)
          bad += c->recv[r * n + i] != input(r, g * n + i);
      break;
    default:
      break;
  }
  return bad;
}

/* Bytes and bus-bandwidth factor, as nccl-tests reports them. */
static void traffic(int coll, int64_t n, int p, double *bytes, double *factor) {
  double es = sizeof(float);
  switch (coll) {
    case ALLREDUCE:
      *bytes = (double)n * es;
      *factor = 2.0 * (p - 1) / p;
      break;
    case ALLGATHER:
    case REDUCE_SCATTER:
    case ALLTOALL:
      *bytes = (double)n * p * es;
      *factor = (double)(p - 1) / p;
      break;
    case BROADCAST:
      *bytes = (double)n * es;
      *factor = 1;
      break;
    default:
      *bytes = 0;
      *factor = 0;
      break;
  }
}

static int fail(int rank, const char *what, tpdp_status st) {
  fprintf(stderr, "mesh_demo: rank %d: %s failed: %s (%s)\n", rank, what,
          tpdp_last_error(), tpdp_status_string(st));
  return 1;
}

int main(int argc, char **argv) {
  const char *spec = "dp=2,tp=2";
  long long count = 262144, iters = 20;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      usage(stdout);
      return 0;
    }
    const char *val = i + 1 < argc ? argv[i + 1] : NULL;
    char *end = NULL;
    if (strcmp(argv[i], "--mesh") == 0 && val) {
      spec = val;
    } else if (strcmp(argv[i], "--count") == 0 && val) {
      count = strtoll(val, &end, 10);
      if (*end || count < 0 || count > (1LL << 28)) {
        fprintf(stderr, "mesh_demo: --count '%s' is not in [0, 2^28]\n", val);
        return 2;
      }
    } else if (strcmp(argv[i], "--iters") == 0 && val) {
      iters = strtoll(val, &end, 10);
      if (*end || iters < 1 || iters > 1000000) {
        fprintf(stderr, "mesh_demo: --iters '%s' is not in [1, 1000000]\n",
                val);
        return 2;
      }
    } else {
      fprintf(stderr, "mesh_demo: bad argument '%s'\n", argv[i]);
      usage(stderr);
      return 2;
    }
    i++;
  }

  tpdp_status st = tpdp_init(&argc, &argv);
  if (st != TPDP_SUCCESS) return fail(-1, "tpdp_init", st);
  tpdp_comm *world = NULL;
  tpdp_comm_world(&world);
  int me = tpdp_comm_rank(world), nranks = tpdp_comm_size(world);
  tpdp_mesh *mesh = NULL;
  st = tpdp_mesh_create_from_string(world, spec, &mesh);
  if (st != TPDP_SUCCESS) {
    if (me == 0)
      fprintf(stderr, "mesh_demo: %s (%s); launched with %d ranks\n",
              tpdp_last_error(), tpdp_status_string(st), nranks);
    tpdp_finalize();
    return 2;
  }
  int ndim = tpdp_mesh_ndim(mesh);
  int64_t maxp = 1;
  for (int d = 0; d < ndim; d++)
    if (tpdp_mesh_dim_size(mesh, d) > maxp) maxp = tpdp_mesh_dim_size(mesh, d);
  size_t cap = (size_t)(count > 0 ? count : 1) * (size_t)maxp;
  float *send = malloc(cap * sizeof(float)),
        *recv = malloc(cap * sizeof(float));
  if (send == NULL || recv == NULL) {
    fprintf(stderr, "mesh_demo: rank %d: out of memory for %zu floats\n", me,
            cap);
    free(send);
    free(recv);
    (void)tpdp_mesh_destroy(mesh); /* already failing */
    tpdp_finalize();
    return 1;
  }
  if (me == 0)
    printf(
        "mesh_demo: mesh %s over %d ranks, %lld f32 per rank, %lld iters, "
        "MPI backend (host memory)\n",
        spec, nranks, count, iters);

  int64_t wrong_total = 0;
  int rc = 0;
  for (int d = 0; d < ndim && rc == 0; d++) {
    run_ctx c;
    st = tpdp_mesh_dim_comm(mesh, d, &c.comm);
    if (st != TPDP_SUCCESS) {
      rc = fail(me, "tpdp_mesh_dim_comm", st);
      break;
    }
    c.g = tpdp_comm_rank(c.comm);
    c.p = tpdp_comm_size(c.comm);
    c.n = count;
    c.send = send;
    c.recv = recv;
    if (me == 0) {
      int *grp = malloc((size_t)c.p * sizeof *grp);
      printf("\ndim %s: size %d, rank 0's group (world ranks):",
             tpdp_mesh_dim_name(mesh, d), c.p);
      if (grp && tpdp_mesh_group_ranks(mesh, d, 0, grp) == TPDP_SUCCESS)
        for (int k = 0; k < c.p; k++) printf(" %d", grp[k]);
      printf("\n");
      free(grp);
    }
    for (int coll = 0; coll < NCOLL && rc == 0; coll++) {
      int64_t in_n =
          (coll == REDUCE_SCATTER || coll == ALLTOALL) ? count * c.p : count;
      for (int64_t i = 0; i < in_n; i++) send[i] = input(c.g, i);
      memset(recv, 0, cap * sizeof(float));
      st = run_once(&c, coll); /* warm-up, and the call whose result we check */
      if (st != TPDP_SUCCESS) {
        rc = fail(me, coll_names[coll], st);
        break;
      }
      int64_t wrong = check(&c, coll);
      st = tpdp_barrier(c.comm);
      double t0 = now_s();
      for (long long it = 0; it < iters && st == TPDP_SUCCESS; it++)
        st = run_once(&c, coll);
      double mean = (now_s() - t0) / (double)iters;
      if (st != TPDP_SUCCESS) {
        rc = fail(me, coll_names[coll], st);
        break;
      }
      /* Slowest rank's time; total wrong elements over the world. */
      tpdp_tensor tt = tpdp_tensor_1d(&mean, TPDP_F64, 1);
      tpdp_tensor tw = tpdp_tensor_1d(&wrong, TPDP_I64, 1);
      if ((st = tpdp_allreduce(world, &tt, &tt, TPDP_OP_MAX)) != TPDP_SUCCESS ||
          (st = tpdp_allreduce(world, &tw, &tw, TPDP_OP_SUM)) != TPDP_SUCCESS) {
        rc = fail(me, "allreduce of the results", st);
        break;
      }
      wrong_total += wrong;
      if (me == 0) {
        double bytes, factor;
        traffic(coll, count, c.p, &bytes, &factor);
        if (coll == BARRIER)
          printf("  %-20s %10.1f us %27s %s\n", coll_names[coll], mean * 1e6,
                 "", wrong ? "WRONG" : "ok");
        else
          printf("  %-20s %10.1f us %9.3f GB/s bus (%.0f B) %s\n",
                 coll_names[coll], mean * 1e6,
                 mean > 0 ? bytes / mean * factor / 1e9 : 0.0, bytes,
                 wrong ? "WRONG" : "ok");
        if (wrong)
          printf("  %s on dim %s: %lld wrong elements\n", coll_names[coll],
                 tpdp_mesh_dim_name(mesh, d), (long long)wrong);
      }
    }
  }
  if (rc == 0 && wrong_total != 0) rc = 1;
  if (me == 0) printf("\nmesh_demo: %s\n", rc == 0 ? "ok" : "FAILED");
  free(send);
  free(recv);
  if (tpdp_mesh_destroy(mesh) != TPDP_SUCCESS) {
    fprintf(stderr, "mesh_demo: rank %d: %s\n", me, tpdp_last_error());
    rc = 1;
  }
  tpdp_finalize();
  return rc;
}
