// SPDX-License-Identifier: BSD-3-Clause
// Misuse of include/tpdp/tp.h on 2 ranks (a mesh "dp=1,tp=2" over the
// world, or a layout-only one): each case asserts the status and that the
// message names the style, plan pattern, mesh dim, module or parameter FQN
// at fault with the expected and actual values. Every case fails alike on
// both ranks.
// Cases:
//  - styles and tpdp_parallelize: unknown style name, a plan pattern that
//    matches nothing, an unknown TP mesh dim (dims listed), a weight that
//    is not 2-D, a module parallelized twice, a layout-only mesh,
//    a negative plan count
//  - lookups on a module that was not parallelized
//  - TP+DP hooks: transform twice, undo without transform, forward_end
//    without forward_begin, a second forward_begin before forward_end,
//    forward in SUMMON_FULL_PARAMS, a local tensor replaced by one of
//    another shape behind the transform's back
#include <cstdint>
#include <string>
#include <vector>

#include "tests/misuse/mesh_fixture.h"
#include "tests/test_util.h"
#include "tpdp/tp.h"

namespace {

const tpdp_device kCpu = {TPDP_DEVICE_CPU, 0};

using tpdp_test::Mesh;

// "[Net]" with "fc[Linear]" (weight [4, 3], bias [4]) and "norm[Norm]"
// (weight [3, 1, 1]: not a Linear weight).
struct Net {
  tpdp_module *root = nullptr, *fc = nullptr, *norm = nullptr;
  std::vector<float> w = std::vector<float>(12, 1.f),
                     b = std::vector<float>(4, 1.f),
                     n = std::vector<float>(3, 1.f);
  Net() {
    EXPECT_TPDP_OK(tpdp_module_create("Net", &root));
    EXPECT_TPDP_OK(tpdp_module_create("Linear", &fc));
    EXPECT_TPDP_OK(tpdp_module_create("Norm", &norm));
    EXPECT_TPDP_OK(tpdp_module_add_child(root, "fc", fc));
    EXPECT_TPDP_OK(tpdp_module_add_child(root, "norm", norm));
    Add(fc, "weight", w.data(), {4, 3});
    Add(fc, "bias", b.data(), {4});
    Add(norm, "weight", n.data(), {3, 1, 1});
  }
  void Add(tpdp_module *m, const char *name, float *d,
           std::vector<int64_t> shape) {
    tpdp_tensor t;
    EXPECT_TPDP_OK(tpdp_tensor_init(&t, d, TPDP_F32, kCpu, (int)shape.size(),
                                    shape.data()));
    tpdp_param *p = nullptr;
    EXPECT_TPDP_OK(tpdp_param_create(&t, &p));
    EXPECT_TPDP_OK(tpdp_module_add_param(m, name, p));
    tpdp_param_release(p);
  }
  ~Net() { EXPECT_TPDP_OK(tpdp_module_destroy(root)); }
};

TEST(TpMisuse, StyleNameUnknown) {
  tpdp_tp_style s;
  EXPECT_TPDP_ERROR(tpdp_tp_style_parse("column", &s), TPDP_ERR_PARSE,
                    "unknown TP style 'column' (expected colwise, rowwise, "
                    "sequence_parallel or replicate)");
}

TEST(TpMisuse, ParallelizePlanErrors) {
  Mesh mesh(tpdp_test::World(), "dp=1,tp=2");
  Net net;
  tpdp_tp_plan_entry nomatch[1] = {{"layers.*.fc", TPDP_STYLE_COLWISE}};
  EXPECT_TPDP_ERROR(tpdp_parallelize(net.root, mesh.m, "tp", nomatch, 1),
                    TPDP_ERR_NOT_FOUND, "tpdp_parallelize: ",
                    "plan pattern 'layers.*.fc' (colwise) matches no module "
                    "under the root");
  tpdp_tp_plan_entry fc[1] = {{"fc", TPDP_STYLE_COLWISE}};
  EXPECT_TPDP_ERROR(tpdp_parallelize(net.root, mesh.m, "model", fc, 1),
                    TPDP_ERR_NOT_FOUND,
                    "mesh has no dim named 'model' (its dims: dp, tp)");
  EXPECT_TPDP_ERROR(tpdp_parallelize(net.root, mesh.m, "tp", fc, -1),
                    TPDP_ERR_INVALID_ARGUMENT, "nplan = -1 is negative");
  tpdp_tp_plan_entry norm[1] = {{"norm", TPDP_STYLE_ROWWISE}};
  EXPECT_TPDP_ERROR(tpdp_parallelize(net.root, mesh.m, "tp", norm, 1),
                    TPDP_ERR_SHAPE_MISMATCH,
                    "rowwise style: parameter 'norm.weight' must be a 2-D "
                    "Linear weight [out, in], got 3 dims");
  ASSERT_TPDP_OK(tpdp_parallelize(net.root, mesh.m, "tp", fc, 1));
  EXPECT_TPDP_ERROR(tpdp_parallelize(net.root, mesh.m, "tp", fc, 1),
                    TPDP_ERR_ALREADY,
                    "module 'fc[Linear]' is already "
                    "parallelized");
}

TEST(TpMisuse, ParallelizeOnALayoutOnlyMesh) {
  Mesh mesh(nullptr, "tp=2");
  Net net;
  tpdp_tp_plan_entry fc[1] = {{"fc", TPDP_STYLE_COLWISE}};
  EXPECT_TPDP_ERROR(tpdp_parallelize(net.root, mesh.m, "tp", fc, 1),
                    TPDP_ERR_STATE, "tpdp_parallelize: ", "layout-only");
}

TEST(TpMisuse, LookupsOnAModuleThatWasNotParallelized) {
  Net net;
  tpdp_tp_style style;
  EXPECT_TPDP_ERROR(tpdp_tp_module_style(net.fc, &style), TPDP_ERR_NOT_FOUND,
                    "module 'fc[Linear]' was not parallelized by a TP plan");
  int64_t first, count, start, len, vocab;
  EXPECT_TPDP_ERROR(tpdp_tp_attention_heads(net.fc, &first, &count),
                    TPDP_ERR_NOT_FOUND,
                    "module 'fc[Linear]' was not "
                    "parallelized by");
  EXPECT_TPDP_ERROR(tpdp_tp_vocab_range(net.fc, &start, &len, &vocab),
                    TPDP_ERR_NOT_FOUND,
                    "module 'fc[Linear]' was not "
                    "parallelized by");
}

// net with fc colwise over "tp=2" and the TP+DP transform on the root.
struct Transformed {
  Mesh mesh{tpdp_test::World(), "dp=1,tp=2"};
  Net net;
  Transformed() {
    tpdp_tp_plan_entry fc[1] = {{"fc", TPDP_STYLE_COLWISE}};
    EXPECT_TPDP_OK(tpdp_parallelize(net.root, mesh.m, "tp", fc, 1));
    EXPECT_TPDP_OK(tpdp_pre_dp_transform(net.root));
  }
};

TEST(TpMisuse, TransformTwiceAndUndoWithoutTransform) {
  Transformed t;
  EXPECT_TPDP_ERROR(tpdp_pre_dp_transform(t.net.root), TPDP_ERR_ALREADY,
                    "module '[Net]' already has the pre-DP transform");
  EXPECT_TPDP_ERROR(tpdp_pre_dp_transform(t.net.fc), TPDP_ERR_ALREADY,
                    "module 'fc[Linear]' is in the subtree of '[Net]'",
                    "transforms may not nest");
  EXPECT_TPDP_ERROR(tpdp_pre_dp_transform_undo(t.net.fc), TPDP_ERR_NOT_FOUND,
                    "module 'fc[Linear]' has no pre-DP transform to undo");
}

TEST(TpMisuse, ForwardEndWithoutForwardBegin) {
  Transformed t;
  EXPECT_TPDP_ERROR(tpdp_module_forward_end(t.net.root), TPDP_ERR_STATE,
                    "tpdp_module_forward_end: ", "parameter 'fc.weight'",
                    "expected to be in states {FORWARD}",
                    "current state is IDLE");
}

TEST(TpMisuse, SecondForwardBeginBeforeForwardEnd) {
  Transformed t;
  ASSERT_TPDP_OK(tpdp_module_forward_begin(t.net.root));
  EXPECT_TPDP_ERROR(tpdp_module_forward_begin(t.net.root), TPDP_ERR_STATE,
                    "tpdp_module_forward_begin: ", "parameter 'fc.weight'",
                    "current state is FORWARD");
  EXPECT_TPDP_ERROR(tpdp_pre_dp_transform_undo(t.net.root), TPDP_ERR_STATE,
                    "module '[Net]' is in forward: undo its pre-DP transform "
                    "after tpdp_module_forward_end");
  EXPECT_TPDP_OK(tpdp_module_forward_end(t.net.root));
}

TEST(TpMisuse, ForwardWhileSummoningFullParams) {
  Transformed t;
  ASSERT_TPDP_OK(
      tpdp_module_set_state(t.net.root, TPDP_STATE_SUMMON_FULL_PARAMS));
  EXPECT_TPDP_ERROR(tpdp_module_forward_begin(t.net.root), TPDP_ERR_STATE,
                    "module '[Net]'", "IDLE", "FORWARD_BACKWARD",
                    "current state is SUMMON_FULL_PARAMS");
  EXPECT_FALSE(tpdp_module_in_forward(t.net.root));
}

TEST(TpMisuse, LocalTensorReplacedBehindTheTransformsBack) {
  Transformed t;
  tpdp_param *w = tpdp_module_param(t.net.fc, 0, nullptr);
  ASSERT_NE(w, nullptr);
  tpdp_tensor grown = *tpdp_param_tensor(w);
  grown.shape[0] += 1;  // the framework reallocated it with another shape
  std::vector<float> bigger(64);
  grown.data = bigger.data();
  ASSERT_TPDP_OK(tpdp_param_set_tensor(w, &grown));
  EXPECT_TPDP_ERROR(tpdp_module_forward_begin(t.net.root),
                    TPDP_ERR_SHAPE_MISMATCH,
                    "pre-forward reconstruct of parameter 'fc.weight'",
                    "local tensor has shape [3, 3]", "the local shape [2, 3]");
}

}  // namespace
