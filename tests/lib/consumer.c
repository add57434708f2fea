// SPDX-License-Identifier: BSD-3-Clause
/* A framework backend's use of an installed libtpdp, built outside Bazel
 * (tests/lib/install_test.sh):
 *   cc consumer.c $(pkg-config --cflags --libs tpdp)
 * and run on 2 MPI ranks. It makes a dp=2 x tp=1 mesh over the world, a
 * DTensor spec sharding a [4, 3] f32 tensor over dp, flattens and
 * unflattens this rank's shard, and runs one reducer step (prepare, mark
 * every parameter ready, finalize) over the dp communicator, checking the
 * averaged gradients against values it computes itself. Exit 0 and
 * "consumer: rank R ok" on success, else 1 with the reason. */
#include <stdio.h>
#include <string.h>
#include <tpdp/tpdp.h>

static int rank = -1;

#define CHECK_OK(call)                                                       \
  do {                                                                       \
    tpdp_status st_ = (call);                                                \
    if (st_ != TPDP_SUCCESS) {                                               \
      fprintf(stderr, "consumer: rank %d: %s failed: %s: %s\n", rank, #call, \
              tpdp_status_string(st_), tpdp_last_error());                   \
      return 1;                                                              \
    }                                                                        \
  } while (0)

#define EXPECT(cond, ...)                                      \
  do {                                                         \
    if (!(cond)) {                                             \
      fprintf(stderr, "consumer: rank %d: %s: ", rank, #cond); \
      fprintf(stderr, __VA_ARGS__);                            \
      fprintf(stderr, "\n");                                   \
      return 1;                                                \
    }                                                          \
  } while (0)

static float absf(float x) { return x < 0 ? -x : x; }

/* Rank r's gradients: weight element i is (r + 1) * (i + 1), bias element
 * i is 10 * (r + 1) + i: exact in f32. */
static float grad_w(int r, int i) { return (float)((r + 1) * (i + 1)); }
static float grad_b(int r, int i) { return (float)(10 * (r + 1) + i); }

/* The reducer's result for p: the mean over ranks of grad(r, i). */
static int check_average(const tpdp_reducer_param *p, float (*grad)(int, int),
                         int size) {
  const float *got = p->grad.data;
  for (int64_t i = 0; i < tpdp_tensor_numel(&p->grad); i++) {
    float want = 0;
    for (int r = 0; r < size; r++) want += grad(r, (int)i);
    want /= (float)size;
    EXPECT(absf(got[i] - want) <= 1e-6f * absf(want), "%s[%lld] = %g, want %g",
           p->fqn, (long long)i, got[i], want);
  }
  return 0;
}

static int run(void) {
  tpdp_comm *world = NULL;
  CHECK_OK(tpdp_comm_world(&world));
  rank = tpdp_comm_rank(world);
  const int size = tpdp_comm_size(world);
  EXPECT(size == 2, "run on 2 ranks, not %d", size);
  EXPECT(tpdp_version() == TPDP_VERSION, "library %d, header %d",
         tpdp_version(), TPDP_VERSION);

  /* Mesh and spec: a [4, 3] tensor sharded over dp (rows), replicated
   * over tp. */
  tpdp_mesh *mesh = NULL;
  CHECK_OK(tpdp_mesh_create_from_string(world, "dp=2,tp=1", &mesh));
  tpdp_comm *dp = NULL;
  CHECK_OK(tpdp_mesh_dim_comm_by_name(mesh, "dp", &dp));
  EXPECT(tpdp_comm_size(dp) == 2, "dp size %d", tpdp_comm_size(dp));
  const tpdp_placement placements[2] = {tpdp_shard(0), tpdp_replicate()};
  const int64_t global[2] = {4, 3};
  const tpdp_device cpu = {TPDP_DEVICE_CPU, 0};
  tpdp_spec *spec = NULL;
  CHECK_OK(
      tpdp_spec_create(mesh, placements, 2, 2, global, TPDP_F32, cpu, &spec));
  int64_t local_shape[2], offset[2];
  CHECK_OK(
      tpdp_spec_local_shape(spec, tpdp_mesh_rank(mesh), local_shape, offset));
  EXPECT(local_shape[0] == 2 && local_shape[1] == 3 && offset[0] == 2 * rank &&
             offset[1] == 0,
         "local shape [%lld, %lld] at [%lld, %lld]", (long long)local_shape[0],
         (long long)local_shape[1], (long long)offset[0], (long long)offset[1]);

  /* This rank's shard, as a DTensor and back (zero-copy both ways). */
  float w[6], b[3];
  for (int i = 0; i < 6; i++) w[i] = (float)(offset[0] * 3 + i);
  for (int i = 0; i < 3; i++) b[i] = 0.5f * (float)i;
  tpdp_tensor local;
  CHECK_OK(tpdp_tensor_init(&local, w, TPDP_F32, cpu, 2, local_shape));
  tpdp_dtensor dt;
  CHECK_OK(tpdp_dtensor_unflatten(&local, spec, &dt));
  tpdp_tensor flat;
  const tpdp_spec *flat_spec = NULL;
  CHECK_OK(tpdp_dtensor_flatten(&dt, &flat, &flat_spec));
  EXPECT(flat.data == w && flat_spec == spec && flat.ndim == 2 &&
             flat.shape[0] == 2 && flat.shape[1] == 3,
         "flatten gave another tensor or spec");
  tpdp_tensor whole;
  CHECK_OK(tpdp_tensor_init(&whole, w, TPDP_F32, cpu, 2, global));
  tpdp_dtensor bad;
  EXPECT(tpdp_dtensor_unflatten(&whole, spec, &bad) == TPDP_ERR_SHAPE_MISMATCH,
         "unflatten of a [4, 3] local tensor: %s", tpdp_last_error());

  /* One reducer step over dp: the shard and a bias. */
  float gw[6] = {0}, gb[3] = {0};
  tpdp_reducer_param params[2];
  memset(params, 0, sizeof params);
  params[0].param = flat;
  CHECK_OK(
      tpdp_tensor_init(&params[0].grad, gw, TPDP_F32, cpu, 2, local_shape));
  params[0].fqn = "fc.weight";
  params[1].param = tpdp_tensor_1d(b, TPDP_F32, 3);
  params[1].grad = tpdp_tensor_1d(gb, TPDP_F32, 3);
  params[1].fqn = "fc.bias";
  /* The two ranks' values differ (each holds its own shard, standing in
   * for a replica here): the reducer refuses that unless asked to copy
   * rank 0's values first. */
  tpdp_reducer_options opt = TPDP_REDUCER_OPTIONS_INIT;
  opt.broadcast_from_rank0 = 1;
  tpdp_reducer *red = NULL;
  CHECK_OK(tpdp_reducer_create(dp, params, 2, &opt, &red));
  CHECK_OK(tpdp_reducer_prepare(red));
  /* Gradients are written where the reducer's grad views point. */
  float *vw = params[0].grad.data, *vb = params[1].grad.data;
  for (int i = 0; i < 6; i++) vw[i] = grad_w(rank, i);
  for (int i = 0; i < 3; i++) vb[i] = grad_b(rank, i);
  CHECK_OK(tpdp_reducer_mark_ready(red, 1));
  CHECK_OK(tpdp_reducer_mark_ready(red, 0));
  CHECK_OK(tpdp_reducer_finalize(red));
  if (check_average(&params[0], grad_w, size) != 0 ||
      check_average(&params[1], grad_b, size) != 0)
    return 1;
  CHECK_OK(tpdp_reducer_destroy(red));
  tpdp_spec_destroy(spec);
  CHECK_OK(tpdp_mesh_destroy(mesh));
  return 0;
}

int main(int argc, char **argv) {
  if (tpdp_init(&argc, &argv) != TPDP_SUCCESS) {
    fprintf(stderr, "consumer: tpdp_init failed: %s\n", tpdp_last_error());
    return 1;
  }
  int rc = run();
  if (tpdp_finalize() != TPDP_SUCCESS) {
    fprintf(stderr, "consumer: tpdp_finalize failed: %s\n", tpdp_last_error());
    rc = 1;
  }
  if (rc == 0) printf("consumer: rank %d ok\n", rank);
  return rc;
}
