// TP+DP forward hooks (tp/hooks.c, seed 004) on a nested tree with DTensor
// parameters at every level, over a layout-only 2x4 (dp, tp) mesh whose
// self rank is mesh rank 0 (coords (0, 0)).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/test_util.h"
#include "tpdp/comm.h"
#include "tpdp/dtensor.h"
#include "tpdp/module.h"

namespace {

// Local shapes of mesh rank 0, worked out by hand with torch.chunk rules:
//   scale  [3]     R,R    -> [3]
//   block.w [10,6] R,S(0) -> tp=4: chunk ceil(10/4)=3, shard 0 -> [3,6]
//   inner.w [8,6]  R,S(1) -> tp=4: chunk ceil(6/4)=2 -> [8,2]
//   inner.b [10]   S0,S0  -> dp=2: chunk 5 -> 5; tp=4 on 5: chunk 2 -> [2]
//   leaf.u  [5,4]  S1,R   -> dp=2: chunk ceil(4/2)=2 -> [5,2]
struct Fixture : ::testing::Test {
  tpdp_mesh *mesh = nullptr;
  std::vector<tpdp_spec *> specs;
  tpdp_module *root = nullptr, *block = nullptr, *inner = nullptr,
              *leaf = nullptr;
  tpdp_param *scale = nullptr, *bw = nullptr, *iw = nullptr, *ib = nullptr,
             *lu = nullptr, *plain = nullptr;
  float data[256] = {};
  float grads[5][64] = {};

  const tpdp_spec *Spec(std::vector<tpdp_placement> pl,
                        std::vector<int64_t> shape) {
    tpdp_spec *s = nullptr;
    EXPECT_EQ(tpdp_spec_create(mesh, pl.data(), (int)pl.size(),
                               (int)shape.size(), shape.data(), TPDP_F32,
                               tpdp_device{TPDP_DEVICE_CPU, 0}, &s),
              TPDP_SUCCESS)
        << tpdp_last_error();
    specs.push_back(s);
    return s;
  }

  tpdp_param *DParam(tpdp_module *m, const char *name, const tpdp_spec *spec,
                     std::vector<int64_t> local, int grad_slot) {
    tpdp_tensor t;
    EXPECT_EQ(
        tpdp_tensor_init(&t, data, TPDP_F32, tpdp_device{TPDP_DEVICE_CPU, 0},
                         (int)local.size(), local.data()),
        TPDP_SUCCESS);
    tpdp_param *p = nullptr;
    EXPECT_EQ(tpdp_param_create(&t, &p), TPDP_SUCCESS);
    if (spec) {
      EXPECT_EQ(tpdp_param_set_spec(p, spec), TPDP_SUCCESS);
    }
    tpdp_tensor g = t;
    g.data = grads[grad_slot];
    EXPECT_EQ(tpdp_param_set_grad(p, &g), TPDP_SUCCESS);
    EXPECT_EQ(tpdp_module_add_param(m, name, p), TPDP_SUCCESS)
        << tpdp_last_error();
    tpdp_param_release(p);  // the tree keeps it alive
    return p;
  }

  tpdp_module *Child(tpdp_module *parent, const char *name, const char *cls) {
    tpdp_module *c = nullptr;
    EXPECT_EQ(tpdp_module_create(cls, &c), TPDP_SUCCESS);
    EXPECT_EQ(tpdp_module_add_child(parent, name, c), TPDP_SUCCESS);
    return c;
  }

  void SetUp() override {
    int64_t sizes[] = {2, 4};
    const char *names[] = {"dp", "tp"};
    ASSERT_TPDP_OK(tpdp_mesh_create(nullptr, 2, sizes, names, &mesh));
    tpdp_placement R = tpdp_replicate();
    ASSERT_TPDP_OK(tpdp_module_create("Model", &root));
    block = Child(root, "block", "Block");
    inner = Child(block, "inner", "Inner");
    leaf = Child(inner, "leaf", "Leaf");
    scale = DParam(root, "scale", Spec({R, R}, {3}), {3}, 0);
    plain = DParam(root, "plain", nullptr, {4}, 4);
    bw = DParam(block, "w", Spec({R, tpdp_shard(0)}, {10, 6}), {3, 6}, 1);
    iw = DParam(inner, "w", Spec({R, tpdp_shard(1)}, {8, 6}), {8, 2}, 2);
    ib = DParam(inner, "b", Spec({tpdp_shard(0), tpdp_shard(0)}, {10}), {2}, 3);
    lu = DParam(leaf, "u", Spec({tpdp_shard(1), R}, {5, 4}), {5, 2}, 4);
    // A shared weight: the leaf ties block.w under a second name.
    ASSERT_TPDP_OK(tpdp_module_add_param(leaf, "tied", bw));
  }

  void TearDown() override {
    EXPECT_EQ(tpdp_module_destroy(root), TPDP_SUCCESS);
    for (tpdp_spec *s : specs) tpdp_spec_destroy(s);
    EXPECT_TPDP_OK(tpdp_mesh_destroy(mesh));
  }

  std::vector<tpdp_param *> DParams() { return {scale, bw, iw, ib, lu}; }

  void ExpectForms(tpdp_param_form f) {
    for (tpdp_param *p : DParams()) EXPECT_EQ(tpdp_param_get_form(p), f);
    EXPECT_EQ(tpdp_param_get_form(plain), TPDP_PARAM_PLAIN);
  }
};

std::vector<int64_t> Shape(const tpdp_param *p) {
  const tpdp_tensor *t = tpdp_param_tensor(p);
  return std::vector<int64_t>(t->shape, t->shape + t->ndim);
}

TEST_F(Fixture, TransformLocalizesEveryLevelAndKeepsGrads) {
  ExpectForms(TPDP_PARAM_DTENSOR);
  ASSERT_TPDP_OK(tpdp_pre_dp_transform(root));
  EXPECT_EQ(tpdp_pre_dp_transform_count(root), 5);  // tied counted once
  ExpectForms(TPDP_PARAM_LOCALIZED);
  EXPECT_EQ(tpdp_module_num_hooks(root), 2);
  EXPECT_EQ(tpdp_module_num_hooks(block), 0);
  // What a DP wrapper listing the tree's parameters sees: local tensors of
  // the local shape, none exposed as a DTensor, gradients where they were.
  tpdp_param_fqns *map = nullptr;
  ASSERT_TPDP_OK(tpdp_param_fqns_create(root, 1, nullptr, 0, &map));
  ASSERT_EQ(tpdp_param_fqns_count(map), 6);
  std::vector<std::string> fqns;
  for (int i = 0; i < 6; i++) {
    fqns.push_back(tpdp_param_fqns_get(map, i, 0));
    EXPECT_NE(tpdp_param_get_form(tpdp_param_fqns_param(map, i)),
              TPDP_PARAM_DTENSOR);
  }
  EXPECT_EQ(fqns, (std::vector<std::string>{"scale", "plain", "block.w",
                                            "block.inner.w", "block.inner.b",
                                            "block.inner.leaf.u"}));
  tpdp_param_fqns_destroy(map);
  EXPECT_EQ(Shape(scale), (std::vector<int64_t>{3}));
  EXPECT_EQ(Shape(bw), (std::vector<int64_t>{3, 6}));
  EXPECT_EQ(Shape(iw), (std::vector<int64_t>{8, 2}));
  EXPECT_EQ(Shape(ib), (std::vector<int64_t>{2}));
  EXPECT_EQ(Shape(lu), (std::vector<int64_t>{5, 2}));
  EXPECT_EQ(tpdp_param_tensor(bw)->data, data);
  EXPECT_EQ(tpdp_param_grad(scale)->data, grads[0]);
  EXPECT_EQ(tpdp_param_grad(bw)->data, grads[1]);
  EXPECT_EQ(tpdp_param_grad(iw)->data, grads[2]);
  EXPECT_EQ(tpdp_param_grad(ib)->data, grads[3]);
  EXPECT_EQ(tpdp_param_grad(lu)->data, grads[4]);
}

TEST_F(Fixture, ForwardReconstructsThenLocalizes) {
  ASSERT_TPDP_OK(tpdp_pre_dp_transform(root));
  for (int step = 0; step < 3; step++) {
    ASSERT_TPDP_OK(tpdp_module_forward_begin(root));
    ExpectForms(TPDP_PARAM_DTENSOR);
    // The reconstructed DTensor is the same local view plus its spec.
    tpdp_dtensor dt;
    ASSERT_TPDP_OK(tpdp_dtensor_unflatten(tpdp_param_tensor(iw),
                                          tpdp_param_spec(iw), &dt));
    EXPECT_EQ(dt.local.data, data);
    ASSERT_TPDP_OK(tpdp_module_forward_end(root));
    ExpectForms(TPDP_PARAM_LOCALIZED);
    EXPECT_EQ(Shape(lu), (std::vector<int64_t>{5, 2}));
    EXPECT_EQ(tpdp_param_grad(lu)->data, grads[4]);
  }
  // A nested module's forward runs only its own (here: no) hooks.
  ASSERT_TPDP_OK(tpdp_module_forward_begin(inner));
  ExpectForms(TPDP_PARAM_LOCALIZED);
}

tpdp_status SeeForm(tpdp_module *, void *ctx) {
  auto *p = static_cast<std::pair<tpdp_param *, tpdp_param_form> *>(ctx);
  p->second = tpdp_param_get_form(p->first);
  return TPDP_SUCCESS;
}

TEST_F(Fixture, UserHooksRegisteredLaterSeeTheRightForm) {
  ASSERT_TPDP_OK(tpdp_pre_dp_transform(root));
  std::pair<tpdp_param *, tpdp_param_form> pre{iw, TPDP_PARAM_PLAIN},
      post{iw, TPDP_PARAM_PLAIN};
  tpdp_hook_handle h1, h2;
  ASSERT_TPDP_OK(
      tpdp_module_register_forward_pre_hook(root, SeeForm, &pre, &h1));
  ASSERT_TPDP_OK(tpdp_module_register_forward_hook(root, SeeForm, &post, &h2));
  ASSERT_TPDP_OK(tpdp_module_forward_begin(root));
  ASSERT_TPDP_OK(tpdp_module_forward_end(root));
  EXPECT_EQ(pre.second, TPDP_PARAM_DTENSOR);     // after reconstruct
  EXPECT_EQ(post.second, TPDP_PARAM_LOCALIZED);  // after localize
}

TEST_F(Fixture, TransformTwiceIsAlready) {
  ASSERT_TPDP_OK(tpdp_pre_dp_transform(root));
  EXPECT_TPDP_ERROR(tpdp_pre_dp_transform(root), TPDP_ERR_ALREADY, "[Model]",
                    "already");
  EXPECT_EQ(tpdp_module_num_hooks(root), 2);
  EXPECT_TPDP_ERROR(tpdp_pre_dp_transform(nullptr), TPDP_ERR_NULL_POINTER,
                    "root");
}

TEST_F(Fixture, WrongLocalShapeInPreHookNamesTheFqnAndRollsBack) {
  ASSERT_TPDP_OK(tpdp_pre_dp_transform(root));
  // The framework swaps block.inner.w for a tensor of the wrong shape.
  int64_t wrong[] = {8, 3};
  tpdp_tensor t;
  ASSERT_TPDP_OK(tpdp_tensor_init(&t, data, TPDP_F32,
                                  tpdp_device{TPDP_DEVICE_CPU, 0}, 2, wrong));
  ASSERT_TPDP_OK(tpdp_param_set_tensor(iw, &t));
  EXPECT_TPDP_ERROR(tpdp_module_forward_begin(root), TPDP_ERR_SHAPE_MISMATCH,
                    "block.inner.w", "[8, 3]", "[8, 2]");
  // scale and block.w came before it and were localized again.
  ExpectForms(TPDP_PARAM_LOCALIZED);
  // Fix it and the next forward works.
  int64_t right[] = {8, 2};
  ASSERT_TPDP_OK(tpdp_tensor_init(&t, data, TPDP_F32,
                                  tpdp_device{TPDP_DEVICE_CPU, 0}, 2, right));
  ASSERT_TPDP_OK(tpdp_param_set_tensor(iw, &t));
  ASSERT_TPDP_OK(tpdp_module_forward_begin(root));
  ExpectForms(TPDP_PARAM_DTENSOR);
  ASSERT_TPDP_OK(tpdp_module_forward_end(root));
}

TEST_F(Fixture, WrongDtypeAtTransformTimeChangesNothing) {
  tpdp_tensor t = *tpdp_param_tensor(lu);
  t.dtype = TPDP_F64;
  ASSERT_TPDP_OK(tpdp_param_set_tensor(lu, &t));
  EXPECT_TPDP_ERROR(tpdp_pre_dp_transform(root), TPDP_ERR_DTYPE_MISMATCH,
                    "block.inner.leaf.u", "f64", "f32");
  ExpectForms(TPDP_PARAM_DTENSOR);
  EXPECT_EQ(tpdp_module_num_hooks(root), 0);
  EXPECT_EQ(tpdp_pre_dp_transform_count(root), -1);
}

TEST_F(Fixture, UndoRemovesHooksAndRestoresDTensors) {
  EXPECT_TPDP_ERROR(tpdp_pre_dp_transform_undo(root), TPDP_ERR_NOT_FOUND,
                    "[Model]");
  ASSERT_TPDP_OK(tpdp_pre_dp_transform(root));
  ASSERT_TPDP_OK(tpdp_pre_dp_transform_undo(root));
  EXPECT_EQ(tpdp_module_num_hooks(root), 0);
  EXPECT_EQ(tpdp_pre_dp_transform_count(root), -1);
  ExpectForms(TPDP_PARAM_DTENSOR);
  ASSERT_TPDP_OK(tpdp_module_forward_end(root));  // no hook left to run
  ExpectForms(TPDP_PARAM_DTENSOR);
  EXPECT_TPDP_ERROR(tpdp_pre_dp_transform_undo(root), TPDP_ERR_NOT_FOUND,
                    "[Model]");
  // And it can be applied again.
  ASSERT_TPDP_OK(tpdp_pre_dp_transform(root));
  ExpectForms(TPDP_PARAM_LOCALIZED);
}

TEST_F(Fixture, TransformOnASubtreeHandlesOnlyIt) {
  ASSERT_TPDP_OK(tpdp_pre_dp_transform(inner));
  EXPECT_EQ(tpdp_pre_dp_transform_count(inner), 4);  // w, b, leaf.u, leaf.tied
  EXPECT_EQ(tpdp_param_get_form(scale), TPDP_PARAM_DTENSOR);
  EXPECT_EQ(tpdp_param_get_form(iw), TPDP_PARAM_LOCALIZED);
  EXPECT_EQ(tpdp_param_get_form(lu), TPDP_PARAM_LOCALIZED);
  // leaf.tied is block.w: reached from inner, so inner's transform has it.
  EXPECT_EQ(tpdp_param_get_form(bw), TPDP_PARAM_LOCALIZED);
  // Errors name the subtree root's FQN.
  EXPECT_TPDP_ERROR(tpdp_pre_dp_transform(inner), TPDP_ERR_ALREADY,
                    "block.inner[Inner]");
}

}  // namespace
