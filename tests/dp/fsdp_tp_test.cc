// SPDX-License-Identifier: BSD-3-Clause
// Fully sharded units on the TP-local tensors of a (dp, tp) mesh, 4 ranks:
// where each rank's rows lie in the global tensors (tpdp_param_global_box)
// against the chunk rule applied twice, written here: TP's chunk of the
// global tensor first, then dp's chunk of dim 0 of that local tensor - the
// dp rows inside the tp chunk when TP shards dim 0 too (PyTorch's
// _StridedShard case). Sizes divide by neither mesh dim. Then the units
// gather and the full TP-local tensors are back at TP's offsets.
#include <string>
#include <vector>

#include "tests/test_util.h"

namespace {

const tpdp_device kCpu = {TPDP_DEVICE_CPU, 0};

// torch.chunk of n over k parts: part i's [start, start + len).
void Chunk(int64_t n, int64_t k, int64_t i, int64_t *start, int64_t *len) {
  int64_t c = (n + k - 1) / k;
  *start = i * c;
  *len = n - *start < 0 ? 0 : (n - *start < c ? n - *start : c);
}

struct Param {
  const char *module, *name;
  std::vector<int64_t> shape;
  int tp_dim;  // the dim TP shards (-1: replicated)
};
// fc1 colwise (dim 0 of weight and bias), fc2 rowwise (dim 1 of the
// weight, bias replicated), norm plain.
const std::vector<Param> kParams = {{"fc1", "weight", {7, 3}, 0},
                                    {"fc1", "bias", {7}, 0},
                                    {"fc2", "weight", {3, 7}, 1},
                                    {"fc2", "bias", {3}, -1},
                                    {"norm", "weight", {5}, -1}};

float Value(int p, int64_t row, int64_t col) {
  return (float)(p * 1000 + row * 10 + col);
}

void RunMesh(const char *mesh_text) {
  SCOPED_TRACE(mesh_text);
  tpdp_mesh *mesh = nullptr;
  ASSERT_TPDP_OK(
      tpdp_mesh_create_from_string(tpdp_test::World(), mesh_text, &mesh));
  int64_t coords[2];
  ASSERT_TPDP_OK(tpdp_mesh_coords(mesh, tpdp_mesh_rank(mesh), coords));
  int dp_dim = tpdp_mesh_dim_index(mesh, "dp"),
      tp_dim = tpdp_mesh_dim_index(mesh, "tp");
  int64_t D = tpdp_mesh_dim_size(mesh, dp_dim),
          T = tpdp_mesh_dim_size(mesh, tp_dim);
  int64_t dp = coords[dp_dim], tp = coords[tp_dim];
  tpdp_comm *dp_comm = nullptr;
  ASSERT_TPDP_OK(tpdp_mesh_dim_comm_by_name(mesh, "dp", &dp_comm));

  tpdp_module *root = nullptr;
  ASSERT_TPDP_OK(tpdp_module_create("Net", &root));
  std::vector<std::vector<float>> data(kParams.size());
  std::vector<tpdp_param *> params;
  for (size_t p = 0; p < kParams.size(); p++) {
    const Param &q = kParams[p];
    tpdp_module *m = nullptr;
    if (tpdp_module_get_submodule(root, q.module, &m) != TPDP_SUCCESS) {
      tpdp_clear_error();
      ASSERT_TPDP_OK(tpdp_module_create(
          std::string(q.module) == "norm" ? "LayerNorm" : "Linear", &m));
      ASSERT_TPDP_OK(tpdp_module_add_child(root, q.module, m));
    }
    int64_t cols = q.shape.size() == 2 ? q.shape[1] : 1;
    for (int64_t r = 0; r < q.shape[0]; r++)
      for (int64_t c = 0; c < cols; c++) data[p].push_back(Value((int)p, r, c));
    tpdp_tensor t;
    ASSERT_TPDP_OK(tpdp_tensor_init(&t, data[p].data(), TPDP_F32, kCpu,
                                    (int)q.shape.size(), q.shape.data()));
    tpdp_param *prm = nullptr;
    ASSERT_TPDP_OK(tpdp_param_create(&t, &prm));
    ASSERT_TPDP_OK(tpdp_module_add_param(m, q.name, prm));
    params.push_back(prm);
  }
  tpdp_tp_plan_entry plan[2] = {{"fc1", TPDP_STYLE_COLWISE},
                                {"fc2", TPDP_STYLE_ROWWISE}};
  ASSERT_TPDP_OK(tpdp_parallelize(root, mesh, "tp", plan, 2));
  ASSERT_TPDP_OK(tpdp_pre_dp_transform(root));
  tpdp_fsdp_unit *unit = nullptr;
  ASSERT_TPDP_OK(tpdp_fully_shard(root, dp_comm, nullptr, &unit));

  for (size_t p = 0; p < kParams.size(); p++) {
    const Param &q = kParams[p];
    SCOPED_TRACE(std::string(q.module) + "." + q.name);
    int nd = (int)q.shape.size();
    // TP's box of the global tensor, then dp's rows of that local tensor.
    std::vector<int64_t> want_off(nd, 0), want_shape = q.shape;
    if (q.tp_dim >= 0)
      Chunk(q.shape[q.tp_dim], T, tp, &want_off[q.tp_dim],
            &want_shape[q.tp_dim]);
    int64_t row0, rows;
    Chunk(want_shape[0], D, dp, &row0, &rows);
    want_off[0] += row0;
    want_shape[0] = rows;
    int ndim = 0;
    int64_t shape[TPDP_MAX_DIMS], off[TPDP_MAX_DIMS], global[TPDP_MAX_DIMS];
    ASSERT_TPDP_OK(tpdp_param_global_box(params[p], &ndim, shape, off, global));
    ASSERT_EQ(ndim, nd);
    for (int d = 0; d < nd; d++) {
      EXPECT_EQ(global[d], q.shape[d]) << "dim " << d;
      EXPECT_EQ(shape[d], want_shape[d]) << "dim " << d;
      if (rows > 0) {
        EXPECT_EQ(off[d], want_off[d]) << "dim " << d;
      }
    }
    // The view holds exactly those global elements.
    const tpdp_tensor *t = tpdp_param_tensor(params[p]);
    int64_t cols = nd == 2 ? shape[1] : 1;
    for (int64_t r = 0; r < shape[0]; r++)
      for (int64_t c = 0; c < cols; c++)
        ASSERT_EQ(((const float *)t->data)[r * cols + c],
                  Value((int)p, off[0] + r, nd == 2 ? off[1] + c : 0))
            << "row " << r << " col " << c;
  }
  // Gathered, each parameter is its whole TP-local tensor again.
  ASSERT_TPDP_OK(tpdp_fsdp_summon_full_params(unit));
  for (size_t p = 0; p < kParams.size(); p++) {
    const Param &q = kParams[p];
    int64_t shape[TPDP_MAX_DIMS], off[TPDP_MAX_DIMS];
    ASSERT_TPDP_OK(
        tpdp_param_global_box(params[p], nullptr, shape, off, nullptr));
    int64_t start = 0, len = q.shape[0];
    if (q.tp_dim == 0) Chunk(q.shape[0], T, tp, &start, &len);
    EXPECT_EQ(shape[0], len) << q.module << "." << q.name;
    EXPECT_EQ(off[0], start) << q.module << "." << q.name;
  }
  ASSERT_TPDP_OK(tpdp_fsdp_summon_end(unit, 0));
  for (tpdp_param *prm : params) tpdp_param_release(prm);
  ASSERT_TPDP_OK(tpdp_module_destroy(root));
  ASSERT_TPDP_OK(tpdp_mesh_destroy(mesh));
}

TEST(FsdpTp, RowsOfEveryRankInTheGlobalTensors) {
  if (tpdp_test::WorldSize() != 4) GTEST_SKIP() << "needs 4 ranks";
  RunMesh("dp=2,tp=2");
  RunMesh("tp=2,dp=2");
  RunMesh("dp=4,tp=1");
  RunMesh("dp=1,tp=4");
}

}  // namespace
