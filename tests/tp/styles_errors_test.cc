// SPDX-License-Identifier: BSD-3-Clause
// tpdp_parallelize's bad input on a real mesh (2 ranks, tp=2): every error
// names the culprit and leaves the tree unchanged.
#include <string>

#include "tests/tp/styles_test_util.h"

namespace {

using styles_test::MakeMlp;
using styles_test::Tree;

class StylesErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(tpdp_test::WorldSize(), 2);
    ASSERT_TPDP_OK(
        tpdp_mesh_create_from_string(tpdp_test::World(), "tp=2", &mesh_));
    tree_ = MakeMlp(7, 5);
    ASSERT_NE(tree_, nullptr);
  }
  void TearDown() override {
    tree_.reset();
    EXPECT_TPDP_OK(tpdp_mesh_destroy(mesh_));
  }

  // Every parameter still views the caller's full tensor, plain, and no
  // module is a unit.
  void ExpectUntouched() {
    for (auto &kv : tree_->params) {
      const tpdp_tensor *t = tpdp_param_tensor(kv.second);
      EXPECT_EQ(t->data, (void *)tree_->full[kv.first].data()) << kv.first;
      EXPECT_EQ(tpdp_param_spec(kv.second), nullptr) << kv.first;
      EXPECT_EQ(tpdp_param_get_form(kv.second), TPDP_PARAM_PLAIN) << kv.first;
      EXPECT_EQ(tpdp_param_grad(kv.second), nullptr) << kv.first;
    }
    for (const char *m : {"fc1", "fc2", "norm", "proj"}) {
      tpdp_tp_style s;
      EXPECT_EQ(tpdp_tp_module_style(tree_->Module(m), &s), TPDP_ERR_NOT_FOUND)
          << m;
      if (std::string(m) != "fc1") {  // fc1 may carry a test's own unit
        EXPECT_EQ(tpdp_module_unit_kind(tree_->Module(m)), nullptr) << m;
      }
    }
  }

  tpdp_mesh *mesh_ = nullptr;
  std::unique_ptr<Tree> tree_;
};

TEST_F(StylesErrors, PatternMatchingNoModuleIsNamed) {
  tpdp_tp_plan_entry plan[] = {{"fc1", TPDP_STYLE_COLWISE},
                               {"layers.*.fc9", TPDP_STYLE_ROWWISE}};
  EXPECT_TPDP_ERROR(tpdp_parallelize(tree_->root, mesh_, "tp", plan, 2),
                    TPDP_ERR_NOT_FOUND, "layers.*.fc9");
  ExpectUntouched();
  // A star that would need to match the empty root name matches nothing.
  tpdp_tp_plan_entry star[] = {{"*.weight", TPDP_STYLE_REPLICATE}};
  EXPECT_TPDP_ERROR(tpdp_parallelize(tree_->root, mesh_, "tp", star, 1),
                    TPDP_ERR_NOT_FOUND, "*.weight");
  ExpectUntouched();
}

TEST_F(StylesErrors, UnknownMeshDim) {
  tpdp_tp_plan_entry plan[] = {{"fc1", TPDP_STYLE_COLWISE}};
  EXPECT_TPDP_ERROR(tpdp_parallelize(tree_->root, mesh_, "mp", plan, 1),
                    TPDP_ERR_NOT_FOUND, "mp");
  ExpectUntouched();
}

TEST_F(StylesErrors, ColwiseOnOneDimWeightNamesParameter) {
  tpdp_tp_plan_entry plan[] = {{"norm", TPDP_STYLE_COLWISE}};
  EXPECT_TPDP_ERROR(tpdp_parallelize(tree_->root, mesh_, "tp", plan, 1),
                    TPDP_ERR_SHAPE_MISMATCH, "norm.weight");
  // Named once, after the function the caller called (the inner
  // tpdp_tp_style_placement's message is not re-parsed or re-prefixed).
  EXPECT_EQ(std::string(tpdp_last_error()),
            "tpdp_parallelize: colwise style: parameter 'norm.weight' must be "
            "a 2-D Linear weight [out, in], got 1 dims");
  ExpectUntouched();
  tpdp_tp_plan_entry row[] = {{"norm", TPDP_STYLE_ROWWISE}};
  EXPECT_TPDP_ERROR(tpdp_parallelize(tree_->root, mesh_, "tp", row, 1),
                    TPDP_ERR_SHAPE_MISMATCH, "norm.weight");
  ExpectUntouched();
}

TEST_F(StylesErrors, BiasOfWrongSizeNamesParameter) {
  // fc2's bias has H = 5 entries; as colwise fc1-like module that is fine,
  // but a Linear whose bias does not match its weight's out size is not.
  ASSERT_NE(tree_->AddModule("", "bad", "Linear"), nullptr);
  ASSERT_TRUE(tree_->AddParam("bad", "weight", {4, 5}, 7));
  ASSERT_TRUE(tree_->AddParam("bad", "bias", {5}, 8));
  tpdp_tp_plan_entry plan[] = {{"bad", TPDP_STYLE_COLWISE}};
  EXPECT_TPDP_ERROR(tpdp_parallelize(tree_->root, mesh_, "tp", plan, 1),
                    TPDP_ERR_SHAPE_MISMATCH, "bad.bias");
  ExpectUntouched();
}

TEST_F(StylesErrors, ErrorInALaterModuleChangesNothing) {
  // Header: "Nothing is changed when an error is returned." fc1 is fine,
  // norm (1-D weight) is not: fc1 must not be left parallelized.
  tpdp_tp_plan_entry plan[] = {{"fc1", TPDP_STYLE_COLWISE},
                               {"norm", TPDP_STYLE_COLWISE}};
  EXPECT_TPDP_ERROR(tpdp_parallelize(tree_->root, mesh_, "tp", plan, 2),
                    TPDP_ERR_SHAPE_MISMATCH, "norm.weight");
  ExpectUntouched();
  // And the tree can still be parallelized correctly afterwards.
  tpdp_tp_plan_entry good[] = {{"fc1", TPDP_STYLE_COLWISE}};
  EXPECT_TPDP_OK(tpdp_parallelize(tree_->root, mesh_, "tp", good, 1));
}

TEST_F(StylesErrors, ParallelizeTwice) {
  tpdp_tp_plan_entry plan[] = {{"fc1", TPDP_STYLE_COLWISE},
                               {"fc2", TPDP_STYLE_ROWWISE}};
  ASSERT_TPDP_OK(tpdp_parallelize(tree_->root, mesh_, "tp", plan, 2));
  const tpdp_tensor before = *tpdp_param_tensor(tree_->Param("fc1.weight"));
  EXPECT_TPDP_ERROR(tpdp_parallelize(tree_->root, mesh_, "tp", plan, 2),
                    TPDP_ERR_ALREADY, "'fc1[Linear]'", "already parallelized");
  // Twice on one module under another style too, and with a fresh module
  // in the same plan: the fresh one is left alone.
  tpdp_tp_plan_entry again[] = {{"proj", TPDP_STYLE_REPLICATE},
                                {"fc2", TPDP_STYLE_COLWISE}};
  EXPECT_TPDP_ERROR(tpdp_parallelize(tree_->root, mesh_, "tp", again, 2),
                    TPDP_ERR_ALREADY, "'fc2[Linear]'");
  EXPECT_EQ(tpdp_param_spec(tree_->Param("proj.weight")), nullptr);
  const tpdp_tensor *after = tpdp_param_tensor(tree_->Param("fc1.weight"));
  EXPECT_EQ(after->data, before.data);
  EXPECT_EQ(after->shape[0], before.shape[0]);
  tpdp_tp_style s;
  ASSERT_TPDP_OK(tpdp_tp_module_style(tree_->Module("fc2"), &s));
  EXPECT_EQ(s, TPDP_STYLE_ROWWISE);
}

TEST_F(StylesErrors, ModuleAlreadyAUnitOfAnotherKind) {
  // fc1 is already managed by someone else: parallelize must fail and must
  // not leave fc1's parameters pointing at storage it freed.
  ASSERT_TPDP_OK(tpdp_module_set_unit(tree_->Module("fc1"), "DP", nullptr));
  tpdp_tp_plan_entry plan[] = {{"fc1", TPDP_STYLE_COLWISE}};
  tpdp_status st = tpdp_parallelize(tree_->root, mesh_, "tp", plan, 1);
  EXPECT_NE(st, TPDP_SUCCESS);
  if (st != TPDP_SUCCESS) {
    EXPECT_NE(std::string(tpdp_last_error()).find("fc1"), std::string::npos)
        << tpdp_last_error();
    ExpectUntouched();
    EXPECT_EQ(std::string(tpdp_module_unit_kind(tree_->Module("fc1"))), "DP");
  }
}

TEST_F(StylesErrors, BadPlanEntries) {
  tpdp_tp_plan_entry nullpat[] = {{nullptr, TPDP_STYLE_COLWISE}};
  EXPECT_TPDP_ERROR(tpdp_parallelize(tree_->root, mesh_, "tp", nullpat, 1),
                    TPDP_ERR_NULL_POINTER, "");
  tpdp_tp_plan_entry badstyle[] = {{"fc1", (tpdp_tp_style)9}};
  EXPECT_TPDP_ERROR(tpdp_parallelize(tree_->root, mesh_, "tp", badstyle, 1),
                    TPDP_ERR_INVALID_ARGUMENT, "fc1");
  EXPECT_TPDP_ERROR(tpdp_parallelize(tree_->root, mesh_, "tp", nullptr, 1),
                    TPDP_ERR_INVALID_ARGUMENT, "");
  EXPECT_TPDP_ERROR(tpdp_parallelize(nullptr, mesh_, "tp", nullpat, 0),
                    TPDP_ERR_NULL_POINTER, "");
  EXPECT_TPDP_ERROR(tpdp_parallelize(tree_->root, nullptr, "tp", nullpat, 0),
                    TPDP_ERR_NULL_POINTER, "");
  EXPECT_TPDP_ERROR(tpdp_parallelize(tree_->root, mesh_, nullptr, nullpat, 0),
                    TPDP_ERR_NULL_POINTER, "");
  ExpectUntouched();
}

TEST_F(StylesErrors, LayoutOnlyMesh) {
  tpdp_mesh *layout = nullptr;
  int64_t sizes[] = {2};
  const char *names[] = {"tp"};
  ASSERT_TPDP_OK(tpdp_mesh_create(nullptr, 1, sizes, names, &layout));
  tpdp_tp_plan_entry plan[] = {{"fc1", TPDP_STYLE_COLWISE}};
  EXPECT_TPDP_ERROR(tpdp_parallelize(tree_->root, layout, "tp", plan, 1),
                    TPDP_ERR_STATE, "");
  ExpectUntouched();
  EXPECT_TPDP_OK(tpdp_mesh_destroy(layout));
}

TEST_F(StylesErrors, CollectivesNeedAParallelizedModule) {
  tpdp_tp_plan_entry plan[] = {{"fc1", TPDP_STYLE_COLWISE}};
  ASSERT_TPDP_OK(tpdp_parallelize(tree_->root, mesh_, "tp", plan, 1));
  float buf[4] = {1, 2, 3, 4};
  tpdp_tensor t = tpdp_tensor_1d(buf, TPDP_F32, 4);
  // Checked before any communication: no rank enters a collective.
  EXPECT_TPDP_ERROR(tpdp_tp_rowwise_output_forward(tree_->Module("fc2"), &t),
                    TPDP_ERR_NOT_FOUND, "'fc2[Linear]'");
  EXPECT_TPDP_ERROR(tpdp_tp_colwise_input_backward(tree_->root, &t),
                    TPDP_ERR_NOT_FOUND, "'[Model]'");
  tpdp_comm *c = nullptr;
  EXPECT_TPDP_ERROR(tpdp_tp_module_comm(tree_->Module("proj"), &c),
                    TPDP_ERR_NOT_FOUND, "'proj[Linear]'");
  float out[4];
  tpdp_tensor o = tpdp_tensor_1d(out, TPDP_F32, 4);
  EXPECT_TPDP_ERROR(tpdp_tp_sequence_gather(tree_->Module("fc1"), &t, 1, &o),
                    TPDP_ERR_INVALID_ARGUMENT, "1");
  EXPECT_TPDP_ERROR(
      tpdp_tp_rowwise_output_reduce_scatter(tree_->Module("fc1"), &t, -1, &o),
      TPDP_ERR_INVALID_ARGUMENT, "");
  EXPECT_TPDP_ERROR(
      tpdp_tp_colwise_input_backward(tree_->Module("fc1"), nullptr),
      TPDP_ERR_NULL_POINTER, "");
  // The module's communicator is the mesh's tp sub-communicator.
  tpdp_comm *tp = nullptr;
  ASSERT_TPDP_OK(tpdp_tp_module_comm(tree_->Module("fc1"), &c));
  ASSERT_TPDP_OK(tpdp_mesh_dim_comm_by_name(mesh_, "tp", &tp));
  EXPECT_EQ(c, tp);
}

TEST_F(StylesErrors, EmptyPlanChangesNothing) {
  EXPECT_TPDP_OK(tpdp_parallelize(tree_->root, mesh_, "tp", nullptr, 0));
  ExpectUntouched();
}

TEST_F(StylesErrors, FirstMatchingEntryWins) {
  // "*" also matches fc1, fc2 and proj; the earlier entries win for fc1 and
  // fc2, and an entry that only matches modules taken by earlier entries
  // still counts as matching.
  tpdp_tp_plan_entry plan[] = {{"fc1", TPDP_STYLE_COLWISE},
                               {"fc2", TPDP_STYLE_ROWWISE},
                               {"*", TPDP_STYLE_REPLICATE}};
  ASSERT_TPDP_OK(tpdp_parallelize(tree_->root, mesh_, "tp", plan, 3));
  const char *mods[] = {"fc1", "fc2", "norm", "proj"};
  const tpdp_tp_style want[] = {TPDP_STYLE_COLWISE, TPDP_STYLE_ROWWISE,
                                TPDP_STYLE_REPLICATE, TPDP_STYLE_REPLICATE};
  for (int i = 0; i < 4; i++) {
    tpdp_tp_style s;
    ASSERT_TPDP_OK(tpdp_tp_module_style(tree_->Module(mods[i]), &s));
    EXPECT_EQ(s, want[i]) << mods[i];
  }
  // fc1 on 2 ranks: F = 7 rows -> 4 and 3.
  EXPECT_EQ(tpdp_param_tensor(tree_->Param("fc1.weight"))->shape[0],
            tpdp_test::WorldRank() == 0 ? 4 : 3);
  tpdp_tp_style s;
  EXPECT_EQ(tpdp_tp_module_style(tree_->root, &s), TPDP_ERR_NOT_FOUND);
}

}  // namespace

namespace {

// One parameter object registered in two modules that the plan both
// matches: it would be sharded twice, so parallelize refuses and names both.
TEST(StylesSharedParam, SharedAcrossMatchedModulesIsRefused) {
  tpdp_mesh *mesh = nullptr;
  ASSERT_TPDP_OK(
      tpdp_mesh_create_from_string(tpdp_test::World(), "tp=2", &mesh));
  float w[12] = {0};
  int64_t shape[2] = {4, 3};
  tpdp_tensor t;
  tpdp_device cpu = {TPDP_DEVICE_CPU, 0};
  ASSERT_TPDP_OK(tpdp_tensor_init(&t, w, TPDP_F32, cpu, 2, shape));
  tpdp_module *root = nullptr, *enc = nullptr, *dec = nullptr;
  ASSERT_TPDP_OK(tpdp_module_create("Tied", &root));
  ASSERT_TPDP_OK(tpdp_module_create("Linear", &enc));
  ASSERT_TPDP_OK(tpdp_module_create("Linear", &dec));
  ASSERT_TPDP_OK(tpdp_module_add_child(root, "enc", enc));
  ASSERT_TPDP_OK(tpdp_module_add_child(root, "dec", dec));
  tpdp_param *p = nullptr;
  ASSERT_TPDP_OK(tpdp_param_create(&t, &p));
  ASSERT_TPDP_OK(tpdp_module_add_param(enc, "weight", p));
  ASSERT_TPDP_OK(tpdp_module_add_param(dec, "weight", p));
  tpdp_tp_plan_entry plan[] = {{"enc", TPDP_STYLE_COLWISE},
                               {"dec", TPDP_STYLE_ROWWISE}};
  EXPECT_TPDP_ERROR(tpdp_parallelize(root, mesh, "tp", plan, 2),
                    TPDP_ERR_DUPLICATE, "enc.weight", "dec.weight");
  EXPECT_EQ(tpdp_param_spec(p), nullptr);
  EXPECT_EQ(tpdp_param_tensor(p)->data, (void *)w);
  tpdp_param_release(p);
  tpdp_module_destroy(root);
  EXPECT_TPDP_OK(tpdp_mesh_destroy(mesh));
}

}  // namespace
