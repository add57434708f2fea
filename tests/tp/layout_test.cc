// SPDX-License-Identifier: BSD-3-Clause
// Linear modules in either orientation (tp/layout.c): local shards against
// the full tensors, a colwise -> rowwise pair against dense host math, the
// fill-callback source, and the errors (each naming the culprit and leaving
// the tree unchanged). Runs on 2 ranks (tp=2) and 4 (dp=2,tp=2; tp=2,dp=2;
// tp=4), with a width (7) no TP size divides.
#include <cstring>
#include <string>
#include <vector>

#include "tests/tp/layout_test_util.h"

namespace {

using layout_test::Data;
using layout_test::MakePlace;
using layout_test::Meshes;
using layout_test::Near;
using layout_test::Place;
using styles_test::Tree;

constexpr int64_t kH = 5, kF = 7, kN = 3;

// Model{fc: [H, F] + [F], proj: [F, H] + [H]} in Conv1D ([in, out])
// orientation, or Linear ([out, in]) with io = false.
std::unique_ptr<Tree> MakeTree(bool io) {
  auto t = std::make_unique<Tree>();
  if (tpdp_module_create("Model", &t->root) != TPDP_SUCCESS) return nullptr;
  bool ok = t->AddModule("", "fc", "Conv1D") &&
            t->AddModule("", "proj", "Conv1D") &&
            t->AddParam("fc", "weight",
                        io ? std::vector<int64_t>{kH, kF}
                           : std::vector<int64_t>{kF, kH},
                        1) &&
            t->AddParam("fc", "bias", {kF}, 2) &&
            t->AddParam("proj", "weight",
                        io ? std::vector<int64_t>{kF, kH}
                           : std::vector<int64_t>{kH, kF},
                        3) &&
            t->AddParam("proj", "bias", {kH}, 4);
  return ok ? std::move(t) : nullptr;
}

TEST(Layout, ChunkRange) {
  int64_t s, l;
  const int64_t want5[4][2] = {{0, 2}, {2, 2}, {4, 1}, {5, 0}};
  for (int i = 0; i < 4; i++) {
    tpdp_chunk_range(5, 4, i, &s, &l);
    EXPECT_EQ(s, want5[i][0]) << i;
    EXPECT_EQ(l, want5[i][1]) << i;
  }
  tpdp_chunk_range(10, 3, 2, &s, &l);  // chunk 4: [8, 10)
  EXPECT_EQ(s, 8);
  EXPECT_EQ(l, 2);
  tpdp_chunk_range(10, 0, 0, &s, &l);  // no parts
  EXPECT_EQ(l, 0);
  tpdp_chunk_range(10, 3, 3, &s, &l);  // i out of range
  EXPECT_EQ(s, 10);
  EXPECT_EQ(l, 0);
}

// fc colwise and proj rowwise on `mesh` in either orientation: this rank's
// columns [f0, f0 + fl) of the width F.
struct Pair {
  Place pl;
  std::unique_ptr<Tree> t;
  int64_t f0 = 0, fl = 0;
};
::testing::AssertionResult MakePair(const std::string &mesh, bool io, Pair *p) {
  if (!MakePlace(mesh, &p->pl)) return ::testing::AssertionFailure() << mesh;
  p->t = MakeTree(io);
  if (p->t == nullptr) return ::testing::AssertionFailure() << "tree";
  tpdp_linear_layout lay = io ? TPDP_LINEAR_IN_OUT : TPDP_LINEAR_OUT_IN;
  if (tpdp_tp_parallelize_linear(p->t->Module("fc"), TPDP_STYLE_COLWISE, lay,
                                 p->pl.mesh, "tp", nullptr,
                                 nullptr) != TPDP_SUCCESS ||
      tpdp_tp_parallelize_linear(p->t->Module("proj"), TPDP_STYLE_ROWWISE, lay,
                                 p->pl.mesh, "tp", nullptr,
                                 nullptr) != TPDP_SUCCESS)
    return ::testing::AssertionFailure() << tpdp_last_error();
  styles_test::Chunk(kF, p->pl.T, p->pl.tp_rank, &p->f0, &p->fl);
  return ::testing::AssertionSuccess();
}

TEST(Layout, Conv1DColwiseRowwiseMatchDense) {
  for (const std::string &mesh : Meshes()) {
    SCOPED_TRACE(mesh);
    Pair pr;
    ASSERT_TRUE(MakePair(mesh, true, &pr));
    Tree *t = pr.t.get();
    Place &pl = pr.pl;
    const int64_t f0 = pr.f0, fl = pr.fl;
    EXPECT_STREQ(tpdp_module_unit_kind(t->Module("fc")), "TP");

    // Shards: fc columns [f0, f0+fl) of [H, F]; proj rows of [F, H].
    const tpdp_tensor *w = tpdp_param_tensor(t->Param("fc.weight"));
    ASSERT_EQ(w->ndim, 2);
    EXPECT_EQ(w->shape[0], kH);
    EXPECT_EQ(w->shape[1], fl);
    const auto &fw = t->full.at("fc.weight");
    for (int64_t i = 0; i < kH; i++)
      for (int64_t j = 0; j < fl; j++)
        EXPECT_EQ(Data(t->Param("fc.weight"))[i * fl + j], fw[i * kF + f0 + j]);
    const tpdp_spec *spec =
        (const tpdp_spec *)tpdp_param_spec(t->Param("fc.weight"));
    ASSERT_NE(spec, nullptr);
    int tpd = tpdp_mesh_dim_index(pl.mesh, "tp");
    EXPECT_TRUE(
        tpdp_placement_equal(tpdp_spec_placements(spec)[tpd], tpdp_shard(1)));
    for (int64_t j = 0; j < fl; j++)
      EXPECT_EQ(Data(t->Param("fc.bias"))[j], t->full.at("fc.bias")[f0 + j]);
    const auto &pw = t->full.at("proj.weight");
    for (int64_t j = 0; j < fl * kH; j++)
      EXPECT_EQ(Data(t->Param("proj.weight"))[j], pw[f0 * kH + j]);
    EXPECT_EQ(tpdp_tensor_numel(tpdp_param_tensor(t->Param("proj.bias"))), kH);
    EXPECT_EQ(tpdp_param_grad(t->Param("fc.weight"))->shape[1], fl);

    // y = (x Wfc + bfc) Wproj + bproj: local columns, partial sums over TP.
    std::vector<float> x(kN * kH);
    for (int64_t i = 0; i < kN * kH; i++) x[i] = styles_test::Val(9, i);
    std::vector<float> y(kN * kH, 0.0f);
    for (int64_t n = 0; n < kN; n++)
      for (int64_t j = 0; j < fl; j++) {
        float h = Data(t->Param("fc.bias"))[j];
        for (int64_t i = 0; i < kH; i++)
          h += x[n * kH + i] * Data(t->Param("fc.weight"))[i * fl + j];
        for (int64_t o = 0; o < kH; o++)
          y[n * kH + o] += h * Data(t->Param("proj.weight"))[j * kH + o];
      }
    tpdp_comm *comm = nullptr;
    ASSERT_TPDP_OK(tpdp_tp_layout_comm(t->Module("proj"), &comm));
    EXPECT_EQ(tpdp_comm_size(comm), pl.T);
    tpdp_tensor yt = tpdp_tensor_1d(y.data(), TPDP_F32, kN * kH);
    ASSERT_TPDP_OK(tpdp_allreduce(comm, &yt, &yt, TPDP_OP_SUM));
    for (int64_t n = 0; n < kN; n++)
      for (int64_t o = 0; o < kH; o++) {
        double want = t->full.at("proj.bias")[o];
        for (int64_t f = 0; f < kF; f++) {
          double h = t->full.at("fc.bias")[f];
          for (int64_t i = 0; i < kH; i++)
            h += (double)x[n * kH + i] * fw[i * kF + f];
          want += h * pw[f * kH + o];
        }
        EXPECT_TRUE(Near(y[n * kH + o] + Data(t->Param("proj.bias"))[o], want,
                         "y", n * kH + o));
      }
  }
}

TEST(Layout, LinearOutInShardsTheOutDimColwiseAndInDimRowwise) {
  for (const std::string &mesh : Meshes()) {
    SCOPED_TRACE(mesh);
    Pair pr;
    ASSERT_TRUE(MakePair(mesh, false, &pr));
    Tree *t = pr.t.get();
    const int64_t f0 = pr.f0, fl = pr.fl;
    const auto &fw = t->full.at("fc.weight");  // [F, H]: rows
    for (int64_t j = 0; j < fl * kH; j++)
      EXPECT_EQ(Data(t->Param("fc.weight"))[j], fw[f0 * kH + j]);
    const auto &pw = t->full.at("proj.weight");  // [H, F]: columns
    for (int64_t o = 0; o < kH; o++)
      for (int64_t j = 0; j < fl; j++)
        EXPECT_EQ(Data(t->Param("proj.weight"))[o * fl + j],
                  pw[o * kF + f0 + j]);
  }
}

// A fill callback that writes each element's flat index in the global view,
// recording what it was given.
struct FillLog {
  std::vector<std::string> fqns;
  tpdp_status fail_with = TPDP_SUCCESS;
};
tpdp_status FillIndex(void *ctx, const char *fqn, const tpdp_spec *spec,
                      const int64_t *offset, tpdp_tensor *local) {
  FillLog *log = (FillLog *)ctx;
  log->fqns.push_back(fqn);
  if (log->fail_with != TPDP_SUCCESS) return log->fail_with;
  const int64_t *g = tpdp_spec_global_shape(spec);
  int nd = tpdp_spec_ndim(spec);
  int64_t n = tpdp_tensor_numel(local);
  for (int64_t k = 0; k < n; k++) {
    int64_t rem = k, flat = 0, stride = 1;
    for (int d = nd - 1; d >= 0; d--) {
      int64_t idx = rem % local->shape[d] + offset[d];
      rem /= local->shape[d];
      flat += idx * stride;
      stride *= g[d];
    }
    ((float *)local->data)[k] = (float)flat;
  }
  return TPDP_SUCCESS;
}

TEST(Layout, FillCallbackWritesOnlyTheLocalShard) {
  for (const std::string &mesh : Meshes()) {
    SCOPED_TRACE(mesh);
    Place pl;
    ASSERT_TRUE(MakePlace(mesh, &pl));
    // Metadata-only parameters: no data at all.
    Tree t;
    ASSERT_TPDP_OK(tpdp_module_create("Model", &t.root));
    ASSERT_NE(t.AddModule("", "fc", "Conv1D"), nullptr);
    int64_t shape[2] = {kH, kF};
    tpdp_tensor meta;
    ASSERT_TPDP_OK(tpdp_tensor_init(&meta, nullptr, TPDP_F32,
                                    tpdp_device{TPDP_DEVICE_CPU, 0}, 2, shape));
    tpdp_param *p = nullptr;
    ASSERT_TPDP_OK(tpdp_param_create(&meta, &p));
    ASSERT_TPDP_OK(tpdp_module_add_param(t.Module("fc"), "weight", p));
    tpdp_param_release(p);
    FillLog log;
    ASSERT_TPDP_OK(tpdp_tp_parallelize_linear(
        t.Module("fc"), TPDP_STYLE_COLWISE, TPDP_LINEAR_IN_OUT, pl.mesh, "tp",
        FillIndex, &log));
    ASSERT_EQ(log.fqns.size(), 1u);
    EXPECT_EQ(log.fqns[0], "fc.weight");
    int64_t f0, fl;
    styles_test::Chunk(kF, pl.T, pl.tp_rank, &f0, &fl);
    const float *d = Data(p);
    for (int64_t i = 0; i < kH; i++)
      for (int64_t j = 0; j < fl; j++)
        EXPECT_EQ(d[i * fl + j], (float)(i * kF + f0 + j));
  }
}

class LayoutErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(MakePlace(Meshes()[0], &pl_));
    tree_ = MakeTree(true);
    ASSERT_NE(tree_, nullptr);
  }
  // Every parameter still views the caller's full tensor, plain, and no
  // module is a unit.
  void ExpectUntouched() {
    for (auto &kv : tree_->params) {
      EXPECT_EQ(tpdp_param_tensor(kv.second)->data,
                (void *)tree_->full[kv.first].data())
          << kv.first;
      EXPECT_EQ(tpdp_param_spec(kv.second), nullptr) << kv.first;
      EXPECT_EQ(tpdp_param_grad(kv.second), nullptr) << kv.first;
    }
    EXPECT_EQ(tpdp_module_unit_kind(tree_->Module("fc")), nullptr);
    EXPECT_EQ(tpdp_module_unit_kind(tree_->Module("proj")), nullptr);
  }
  tpdp_status Linear(const char *m, tpdp_tp_style style,
                     tpdp_tp_fill_fn fill = nullptr, void *ctx = nullptr) {
    return tpdp_tp_parallelize_linear(
        tree_->Module(m), style, TPDP_LINEAR_IN_OUT, pl_.mesh, "tp", fill, ctx);
  }
  Place pl_;
  std::unique_ptr<Tree> tree_;
};

TEST_F(LayoutErrors, BadStyleLayoutAndDim) {
  EXPECT_TPDP_ERROR(Linear("fc", TPDP_STYLE_SEQUENCE_PARALLEL),
                    TPDP_ERR_INVALID_ARGUMENT, "tpdp_tp_parallelize_linear",
                    "sequence_parallel");
  EXPECT_TPDP_ERROR(
      tpdp_tp_parallelize_linear(tree_->Module("fc"), TPDP_STYLE_COLWISE,
                                 (tpdp_linear_layout)7, pl_.mesh, "tp", nullptr,
                                 nullptr),
      TPDP_ERR_INVALID_ARGUMENT, "layout 7");
  EXPECT_TPDP_ERROR(
      tpdp_tp_parallelize_linear(tree_->Module("fc"), TPDP_STYLE_COLWISE,
                                 TPDP_LINEAR_IN_OUT, pl_.mesh, "model", nullptr,
                                 nullptr),
      TPDP_ERR_NOT_FOUND, "'model'");
  ExpectUntouched();
}

TEST_F(LayoutErrors, ShapesAndParametersAreNamed) {
  ASSERT_TRUE(tree_->AddModule("", "odd", "Conv1D") != nullptr);
  ASSERT_TRUE(tree_->AddParam("odd", "weight", {kF}, 5));
  EXPECT_TPDP_ERROR(Linear("odd", TPDP_STYLE_COLWISE), TPDP_ERR_SHAPE_MISMATCH,
                    "'odd.weight'", "[in, out]", "[7]");
  ASSERT_TRUE(tree_->AddModule("", "bb", "Conv1D") != nullptr);
  ASSERT_TRUE(tree_->AddParam("bb", "weight", {kH, kF}, 5));
  ASSERT_TRUE(tree_->AddParam("bb", "bias", {kH}, 6));
  EXPECT_TPDP_ERROR(Linear("bb", TPDP_STYLE_ROWWISE), TPDP_ERR_SHAPE_MISMATCH,
                    "'bb.bias'", "[7]", "[5]");
  ASSERT_TRUE(tree_->AddParam("fc", "scale", {kF}, 7));
  EXPECT_TPDP_ERROR(Linear("fc", TPDP_STYLE_COLWISE), TPDP_ERR_INVALID_ARGUMENT,
                    "'fc.scale'", "linear layout");
  ASSERT_TRUE(tree_->AddModule("", "none", "Conv1D") != nullptr);
  EXPECT_TPDP_ERROR(Linear("none", TPDP_STYLE_COLWISE), TPDP_ERR_NOT_FOUND,
                    "'none.weight'");
  tpdp_comm *comm = nullptr;
  EXPECT_TPDP_ERROR(tpdp_tp_layout_comm(tree_->Module("proj"), &comm),
                    TPDP_ERR_NOT_FOUND, "proj[Conv1D]");
}

TEST_F(LayoutErrors, TwiceIsRefused) {
  ASSERT_TPDP_OK(Linear("proj", TPDP_STYLE_ROWWISE));
  EXPECT_TPDP_ERROR(Linear("proj", TPDP_STYLE_ROWWISE), TPDP_ERR_ALREADY,
                    "proj[Conv1D]", "'TP'");
}

TEST_F(LayoutErrors, FailingFillChangesNothing) {
  FillLog log;
  log.fail_with = TPDP_ERR_IO;
  EXPECT_TPDP_ERROR(Linear("fc", TPDP_STYLE_COLWISE, FillIndex, &log),
                    TPDP_ERR_IO, "fill callback", "'fc.weight'");
  ExpectUntouched();
}

TEST_F(LayoutErrors, NoDataNeedsAFill) {
  ASSERT_TRUE(tree_->AddModule("", "meta", "Conv1D") != nullptr);
  int64_t shape[2] = {kH, kF};
  tpdp_tensor meta;
  ASSERT_TPDP_OK(tpdp_tensor_init(&meta, nullptr, TPDP_F32,
                                  tpdp_device{TPDP_DEVICE_CPU, 0}, 2, shape));
  tpdp_param *p = nullptr;
  ASSERT_TPDP_OK(tpdp_param_create(&meta, &p));
  ASSERT_TPDP_OK(tpdp_module_add_param(tree_->Module("meta"), "weight", p));
  tpdp_param_release(p);
  EXPECT_TPDP_ERROR(Linear("meta", TPDP_STYLE_COLWISE),
                    TPDP_ERR_INVALID_ARGUMENT, "'meta.weight'",
                    "fill callback");
  EXPECT_EQ(tpdp_param_spec(p), nullptr);
}

}  // namespace
