// SPDX-License-Identifier: BSD-3-Clause
// The TP+DP transform's forward hooks (tp/dp_transform.c) on a nested
// tree with DTensor parameters at every level, over a layout-only 2x4 (dp,
// tp) mesh whose self rank is mesh rank 0 (coords (0, 0)). Every parameter
// has its own data and gradient storage holding distinct values, so each
// check tells the parameters apart: identity (its own storage, its own
// spec), local shape, form and handle state after each hook, and untouched
// values and gradients.
#include <gtest/gtest.h>

#include <deque>
#include <string>
#include <vector>

#include "tests/test_util.h"
#include "tpdp/comm.h"
#include "tpdp/module.h"
#include "tpdp/tp.h"

namespace {

const tpdp_device kCpu = {TPDP_DEVICE_CPU, 0};

// What a parameter must keep through every hook, recorded at creation.
struct Expect {
  tpdp_param *p = nullptr;
  std::string fqn;
  std::vector<int64_t> shape;  // local shape of mesh rank 0
  const tpdp_spec *spec = nullptr;
  std::vector<float> data, grad;  // its own storage
  std::vector<float> data0, grad0;
};

// Local shapes of mesh rank 0, worked out by hand with torch.chunk rules:
//   scale  [3]     R,R    -> [3]
//   block.w [10,6] R,S(0) -> tp=4: chunk ceil(10/4)=3, shard 0 -> [3,6]
//   inner.w [8,6]  R,S(1) -> tp=4: chunk ceil(6/4)=2 -> [8,2]
//   inner.b [10]   S0,S0  -> dp=2: chunk 5 -> 5; tp=4 on 5: chunk 2 -> [2]
//   leaf.u  [5,4]  S1,R   -> dp=2: chunk ceil(4/2)=2 -> [5,2]
// block.inner.leaf.tied is block.w registered a second time (a weight tied
// inside `block`, but reaching outside `block.inner`).
struct Fixture : ::testing::Test {
  tpdp_mesh *mesh = nullptr;
  std::vector<tpdp_spec *> specs;
  tpdp_module *root = nullptr, *block = nullptr, *inner = nullptr,
              *leaf = nullptr;
  std::deque<Expect> params;  // deque: elements never move
  tpdp_param *scale = nullptr, *bw = nullptr, *iw = nullptr, *ib = nullptr,
             *lu = nullptr, *plain = nullptr;

  const tpdp_spec *Spec(std::vector<tpdp_placement> pl,
                        std::vector<int64_t> shape) {
    tpdp_spec *s = nullptr;
    EXPECT_EQ(
        tpdp_spec_create(mesh, pl.data(), (int)pl.size(), (int)shape.size(),
                         shape.data(), TPDP_F32, kCpu, &s),
        TPDP_SUCCESS)
        << tpdp_last_error();
    specs.push_back(s);
    return s;
  }

  // A parameter with its own storage: data 1000k + i + 0.5, gradient
  // -(1000k + i) - 0.25 for the k-th parameter made.
  tpdp_param *Param(tpdp_module *m, const char *name, const char *fqn,
                    const tpdp_spec *spec, std::vector<int64_t> local) {
    params.emplace_back();
    Expect &e = params.back();
    e.fqn = fqn;
    e.shape = local;
    e.spec = spec;
    int64_t n = 1;
    for (int64_t d : local) n *= d;
    float k = 1000.0f * (float)(params.size() - 1);
    for (int64_t i = 0; i < n; i++) {
      e.data.push_back(k + (float)i + 0.5f);
      e.grad.push_back(-(k + (float)i) - 0.25f);
    }
    e.data0 = e.data;
    e.grad0 = e.grad;
    tpdp_tensor t, g;
    EXPECT_EQ(tpdp_tensor_init(&t, e.data.data(), TPDP_F32, kCpu,
                               (int)local.size(), local.data()),
              TPDP_SUCCESS);
    g = t;
    g.data = e.grad.data();
    EXPECT_EQ(tpdp_param_create(&t, &e.p), TPDP_SUCCESS);
    if (spec) {
      EXPECT_EQ(tpdp_param_set_spec(e.p, spec), TPDP_SUCCESS);
    }
    EXPECT_EQ(tpdp_param_set_grad(e.p, &g), TPDP_SUCCESS);
    EXPECT_EQ(tpdp_module_add_param(m, name, e.p), TPDP_SUCCESS)
        << tpdp_last_error();
    tpdp_param_release(e.p);  // the tree keeps it alive
    return e.p;
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
    scale = Param(root, "scale", "scale", Spec({R, R}, {3}), {3});
    plain = Param(root, "plain", "plain", nullptr, {4});
    bw =
        Param(block, "w", "block.w", Spec({R, tpdp_shard(0)}, {10, 6}), {3, 6});
    iw = Param(inner, "w", "block.inner.w", Spec({R, tpdp_shard(1)}, {8, 6}),
               {8, 2});
    ib = Param(inner, "b", "block.inner.b",
               Spec({tpdp_shard(0), tpdp_shard(0)}, {10}), {2});
    lu = Param(leaf, "u", "block.inner.leaf.u",
               Spec({tpdp_shard(1), R}, {5, 4}), {5, 2});
    ASSERT_TPDP_OK(tpdp_module_add_param(leaf, "tied", bw));
  }

  void TearDown() override {
    EXPECT_EQ(tpdp_module_destroy(root), TPDP_SUCCESS);
    for (tpdp_spec *s : specs) EXPECT_TPDP_OK(tpdp_spec_destroy(s));
    EXPECT_TPDP_OK(tpdp_mesh_destroy(mesh));
  }

  // Identity, shape, values and gradient of one parameter, plus its form
  // and handle state.
  void ExpectParam(const Expect &e, tpdp_param_form form,
                   tpdp_handle_state state) {
    SCOPED_TRACE(e.fqn);
    const tpdp_tensor *t = tpdp_param_tensor(e.p);
    EXPECT_EQ(t->data, (const void *)e.data.data());  // its own storage
    EXPECT_EQ(std::vector<int64_t>(t->shape, t->shape + t->ndim), e.shape);
    EXPECT_EQ(t->dtype, TPDP_F32);
    EXPECT_EQ(tpdp_param_spec(e.p), e.spec);
    EXPECT_EQ(tpdp_param_get_form(e.p), form);
    EXPECT_EQ(tpdp_handle_state_name(tpdp_param_get_state(e.p)),
              std::string(tpdp_handle_state_name(state)));
    EXPECT_EQ(e.data, e.data0);  // values untouched
    const tpdp_tensor *g = tpdp_param_grad(e.p);
    ASSERT_NE(g, nullptr);
    EXPECT_EQ(g->data, (const void *)e.grad.data());
    EXPECT_EQ(std::vector<int64_t>(g->shape, g->shape + g->ndim), e.shape);
    EXPECT_EQ(e.grad, e.grad0);
  }

  // Every DTensor parameter in `form` / `state`; the plain one untouched.
  void ExpectAll(tpdp_param_form form, tpdp_handle_state state) {
    for (const Expect &e : params) {
      if (e.spec == nullptr)
        ExpectParam(e, TPDP_PARAM_PLAIN, TPDP_HANDLE_IDLE);
      else
        ExpectParam(e, form, state);
    }
  }

  // As ExpectAll, for the parameters in `which` only; the others (DTensor
  // or plain) as they were made.
  void ExpectOnly(const std::vector<tpdp_param *> &which, tpdp_param_form form,
                  tpdp_handle_state state) {
    for (const Expect &e : params) {
      bool in = false;
      for (tpdp_param *p : which) in = in || p == e.p;
      if (in)
        ExpectParam(e, form, state);
      else
        ExpectParam(e, e.spec ? TPDP_PARAM_DTENSOR : TPDP_PARAM_PLAIN,
                    TPDP_HANDLE_IDLE);
    }
  }

  void ExpectModule(tpdp_module *m, tpdp_training_state s, int in_forward) {
    EXPECT_EQ(tpdp_training_state_name(tpdp_module_get_state(m)),
              std::string(tpdp_training_state_name(s)));
    EXPECT_EQ(tpdp_module_in_forward(m), in_forward);
  }
};

TEST_F(Fixture, TransformLocalizesEveryLevelAndKeepsGrads) {
  ExpectAll(TPDP_PARAM_DTENSOR, TPDP_HANDLE_IDLE);
  ASSERT_TPDP_OK(tpdp_pre_dp_transform(root));
  EXPECT_EQ(tpdp_pre_dp_transform_count(root), 5);  // tied counted once
  ExpectAll(TPDP_PARAM_LOCALIZED, TPDP_HANDLE_IDLE);
  ExpectModule(root, TPDP_STATE_IDLE, 0);
  EXPECT_EQ(tpdp_module_num_hooks(root), 2);
  EXPECT_EQ(tpdp_module_num_hooks(block), 0);
  // What a DP wrapper listing the tree's parameters sees: each parameter
  // once, in pre-order, none exposed as a DTensor.
  tpdp_param_fqns *map = nullptr;
  ASSERT_TPDP_OK(tpdp_param_fqns_create(root, 1, nullptr, 0, &map));
  ASSERT_EQ(tpdp_param_fqns_count(map), 6);
  const std::vector<tpdp_param *> order = {scale, plain, bw, iw, ib, lu};
  std::vector<std::string> fqns;
  for (int i = 0; i < 6; i++) {
    EXPECT_EQ(tpdp_param_fqns_param(map, i), order[i]) << i;
    fqns.push_back(tpdp_param_fqns_get(map, i, 0));
    EXPECT_NE(tpdp_param_get_form(tpdp_param_fqns_param(map, i)),
              TPDP_PARAM_DTENSOR);
  }
  EXPECT_EQ(fqns, (std::vector<std::string>{"scale", "plain", "block.w",
                                            "block.inner.w", "block.inner.b",
                                            "block.inner.leaf.u"}));
  EXPECT_TPDP_OK(tpdp_param_fqns_destroy(map));
}

TEST_F(Fixture, ForwardReconstructsThenLocalizesWithLiveStates) {
  ASSERT_TPDP_OK(tpdp_pre_dp_transform(root));
  for (int step = 0; step < 3; step++) {
    SCOPED_TRACE("step " + std::to_string(step));
    ASSERT_TPDP_OK(tpdp_module_forward_begin(root));
    ExpectAll(TPDP_PARAM_DTENSOR, TPDP_HANDLE_FORWARD);
    ExpectModule(root, TPDP_STATE_FORWARD_BACKWARD, 1);
    // Each DTensor a forward sees is its own local shard plus its spec.
    for (const Expect &e : params) {
      if (e.spec == nullptr) continue;
      tpdp_dtensor dt;
      ASSERT_TPDP_OK(tpdp_dtensor_unflatten(tpdp_param_tensor(e.p),
                                            tpdp_param_spec(e.p), &dt));
      EXPECT_EQ(dt.local.data, (void *)e.data.data()) << e.fqn;
      EXPECT_EQ(((const float *)dt.local.data)[0], e.data0[0]) << e.fqn;
      EXPECT_EQ(dt.spec, e.spec) << e.fqn;
    }
    ASSERT_TPDP_OK(tpdp_module_forward_end(root));
    ExpectAll(TPDP_PARAM_LOCALIZED, TPDP_HANDLE_BACKWARD_PRE);
    // The module stays in FORWARD_BACKWARD until the DP side finalizes.
    ExpectModule(root, TPDP_STATE_FORWARD_BACKWARD, 0);
    // The reducer's finalize (another layer) sets it back to IDLE.
    ASSERT_TPDP_OK(tpdp_module_set_state(root, TPDP_STATE_IDLE));
  }
  // A nested module's forward runs only its own (here: no) hooks.
  ASSERT_TPDP_OK(tpdp_module_forward_begin(inner));
  ExpectAll(TPDP_PARAM_LOCALIZED, TPDP_HANDLE_BACKWARD_PRE);
  ASSERT_TPDP_OK(tpdp_module_forward_end(inner));
}

TEST_F(Fixture, EvaluationForwardsWithoutBackward) {
  ASSERT_TPDP_OK(tpdp_pre_dp_transform(root));
  // No reducer, no finalize: the module stays FORWARD_BACKWARD and the
  // handles go BACKWARD_PRE -> FORWARD -> BACKWARD_PRE each time.
  for (int i = 0; i < 4; i++) {
    ASSERT_TPDP_OK(tpdp_module_forward_begin(root));
    ExpectAll(TPDP_PARAM_DTENSOR, TPDP_HANDLE_FORWARD);
    ASSERT_TPDP_OK(tpdp_module_forward_end(root));
    ExpectAll(TPDP_PARAM_LOCALIZED, TPDP_HANDLE_BACKWARD_PRE);
    ExpectModule(root, TPDP_STATE_FORWARD_BACKWARD, 0);
  }
}

TEST_F(Fixture, ActivationCheckpointingRecomputesAForwardInBackward) {
  ASSERT_TPDP_OK(tpdp_pre_dp_transform(root));
  ASSERT_TPDP_OK(tpdp_module_forward_begin(root));
  ASSERT_TPDP_OK(tpdp_module_forward_end(root));
  // Backward: a checkpointed region runs its forward again before the
  // gradients are final (no finalize between the two forwards).
  ASSERT_TPDP_OK(tpdp_module_forward_begin(root));
  ExpectAll(TPDP_PARAM_DTENSOR, TPDP_HANDLE_FORWARD);
  ExpectModule(root, TPDP_STATE_FORWARD_BACKWARD, 1);
  ASSERT_TPDP_OK(tpdp_module_forward_end(root));
  ExpectAll(TPDP_PARAM_LOCALIZED, TPDP_HANDLE_BACKWARD_PRE);
  // Finalize, then the next step.
  ASSERT_TPDP_OK(tpdp_module_set_state(root, TPDP_STATE_IDLE));
  ASSERT_TPDP_OK(tpdp_module_forward_begin(root));
  ExpectModule(root, TPDP_STATE_FORWARD_BACKWARD, 1);
  ASSERT_TPDP_OK(tpdp_module_forward_end(root));
}

TEST_F(Fixture, ForwardWhileSummoningFullParamsIsRefused) {
  ASSERT_TPDP_OK(tpdp_pre_dp_transform(root));
  ASSERT_TPDP_OK(tpdp_module_set_state(root, TPDP_STATE_SUMMON_FULL_PARAMS));
  EXPECT_TPDP_ERROR(tpdp_module_forward_begin(root), TPDP_ERR_STATE,
                    "tpdp_module_forward_begin: ", "'[Model]'",
                    "{IDLE, FORWARD_BACKWARD}",
                    "current state is SUMMON_FULL_PARAMS");
  // Nothing changed, and the forward did not start.
  ExpectAll(TPDP_PARAM_LOCALIZED, TPDP_HANDLE_IDLE);
  ExpectModule(root, TPDP_STATE_SUMMON_FULL_PARAMS, 0);
  ASSERT_TPDP_OK(tpdp_module_set_state(root, TPDP_STATE_IDLE));
  ASSERT_TPDP_OK(tpdp_module_forward_begin(root));
  ExpectAll(TPDP_PARAM_DTENSOR, TPDP_HANDLE_FORWARD);
}

TEST_F(Fixture, HandleStatesAreCheckedBeforeAnyChange) {
  ASSERT_TPDP_OK(tpdp_pre_dp_transform(root));
  // One handle elsewhere (say, summoned by another layer): the forward is
  // refused naming it, and the parameters before it are not touched.
  ASSERT_TPDP_OK(tpdp_param_set_state(iw, TPDP_HANDLE_SUMMON_FULL_PARAMS));
  EXPECT_TPDP_ERROR(tpdp_module_forward_begin(root), TPDP_ERR_STATE,
                    "'block.inner.w'", "{IDLE, BACKWARD_PRE}",
                    "current state is SUMMON_FULL_PARAMS");
  ExpectParam(params[0], TPDP_PARAM_LOCALIZED, TPDP_HANDLE_IDLE);  // scale
  ExpectParam(params[2], TPDP_PARAM_LOCALIZED, TPDP_HANDLE_IDLE);  // bw
  ExpectModule(root, TPDP_STATE_IDLE, 0);
  ASSERT_TPDP_OK(tpdp_param_set_state(iw, TPDP_HANDLE_IDLE));
  // A second forward_begin without forward_end finds FORWARD handles.
  ASSERT_TPDP_OK(tpdp_module_forward_begin(root));
  EXPECT_TPDP_ERROR(tpdp_module_forward_begin(root), TPDP_ERR_STATE, "'scale'",
                    "{IDLE, BACKWARD_PRE}", "current state is FORWARD");
  ExpectAll(TPDP_PARAM_DTENSOR, TPDP_HANDLE_FORWARD);
  ExpectModule(root, TPDP_STATE_FORWARD_BACKWARD, 1);  // the first goes on
  ASSERT_TPDP_OK(tpdp_module_forward_end(root));
  ExpectAll(TPDP_PARAM_LOCALIZED, TPDP_HANDLE_BACKWARD_PRE);
  // forward_end without forward_begin: handles are not in FORWARD.
  EXPECT_TPDP_ERROR(tpdp_module_forward_end(root), TPDP_ERR_STATE, "'scale'",
                    "{FORWARD}", "current state is BACKWARD_PRE");
  ExpectAll(TPDP_PARAM_LOCALIZED, TPDP_HANDLE_BACKWARD_PRE);
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

TEST_F(Fixture, TransformTwiceOrNestedIsAlready) {
  ASSERT_TPDP_OK(tpdp_pre_dp_transform(root));
  EXPECT_TPDP_ERROR(tpdp_pre_dp_transform(root), TPDP_ERR_ALREADY, "'[Model]'",
                    "already");
  EXPECT_TPDP_ERROR(tpdp_pre_dp_transform(block), TPDP_ERR_ALREADY,
                    "'block[Block]'", "'[Model]'", "may not nest");
  EXPECT_EQ(tpdp_module_num_hooks(root), 2);
  EXPECT_EQ(tpdp_module_num_hooks(block), 0);
  EXPECT_TPDP_ERROR(tpdp_pre_dp_transform(nullptr), TPDP_ERR_NULL_POINTER,
                    "root");
  // And from below: a transformed descendant.
  ASSERT_TPDP_OK(tpdp_pre_dp_transform_undo(root));
  ASSERT_TPDP_OK(tpdp_pre_dp_transform(block));
  EXPECT_TPDP_ERROR(tpdp_pre_dp_transform(root), TPDP_ERR_ALREADY,
                    "'block[Block]'", "'[Model]'", "may not nest");
  EXPECT_EQ(tpdp_module_num_hooks(root), 0);
}

TEST_F(Fixture, WrongLocalShapeInPreHookNamesTheFqnAndChangesNothing) {
  ASSERT_TPDP_OK(tpdp_pre_dp_transform(root));
  // The framework swaps block.inner.w for a tensor of the wrong shape.
  Expect &e = params[3];
  ASSERT_EQ(e.p, iw);
  int64_t wrong[] = {8, 3};
  tpdp_tensor t;
  ASSERT_TPDP_OK(tpdp_tensor_init(&t, e.data.data(), TPDP_F32, kCpu, 2, wrong));
  ASSERT_TPDP_OK(tpdp_param_set_tensor(iw, &t));
  EXPECT_TPDP_ERROR(tpdp_module_forward_begin(root), TPDP_ERR_SHAPE_MISMATCH,
                    "'block.inner.w'", "[8, 3]", "[8, 2]");
  // Named once, after the function the caller called.
  EXPECT_EQ(std::string(tpdp_last_error()).find("tpdp_module_forward_begin"),
            0u);
  EXPECT_EQ(std::string(tpdp_last_error()).rfind("tpdp_"), 0u);
  // scale and block.w came before it and were not touched.
  ExpectParam(params[0], TPDP_PARAM_LOCALIZED, TPDP_HANDLE_IDLE);
  ExpectParam(params[2], TPDP_PARAM_LOCALIZED, TPDP_HANDLE_IDLE);
  ExpectModule(root, TPDP_STATE_IDLE, 0);
  // Fix it and the next forward works.
  int64_t right[] = {8, 2};
  ASSERT_TPDP_OK(tpdp_tensor_init(&t, e.data.data(), TPDP_F32, kCpu, 2, right));
  ASSERT_TPDP_OK(tpdp_param_set_tensor(iw, &t));
  ASSERT_TPDP_OK(tpdp_module_forward_begin(root));
  ExpectAll(TPDP_PARAM_DTENSOR, TPDP_HANDLE_FORWARD);
  ASSERT_TPDP_OK(tpdp_module_forward_end(root));
}

TEST_F(Fixture, WrongDtypeAtTransformTimeChangesNothing) {
  tpdp_tensor t = *tpdp_param_tensor(lu);
  t.dtype = TPDP_F64;
  ASSERT_TPDP_OK(tpdp_param_set_tensor(lu, &t));
  EXPECT_TPDP_ERROR(tpdp_pre_dp_transform(root), TPDP_ERR_DTYPE_MISMATCH,
                    "'block.inner.leaf.u'", "f64", "f32");
  for (const Expect &e : params)
    EXPECT_EQ(tpdp_param_get_form(e.p),
              e.spec ? TPDP_PARAM_DTENSOR : TPDP_PARAM_PLAIN)
        << e.fqn;
  EXPECT_EQ(tpdp_module_num_hooks(root), 0);
  EXPECT_EQ(tpdp_pre_dp_transform_count(root), -1);
}

TEST_F(Fixture, UndoRemovesHooksAndRestoresDTensors) {
  EXPECT_TPDP_ERROR(tpdp_pre_dp_transform_undo(root), TPDP_ERR_NOT_FOUND,
                    "'[Model]'");
  ASSERT_TPDP_OK(tpdp_pre_dp_transform(root));
  ASSERT_TPDP_OK(tpdp_module_forward_begin(root));
  EXPECT_TPDP_ERROR(tpdp_pre_dp_transform_undo(root), TPDP_ERR_STATE,
                    "'[Model]'", "in forward");
  ASSERT_TPDP_OK(tpdp_module_forward_end(root));
  ASSERT_TPDP_OK(tpdp_pre_dp_transform_undo(root));
  EXPECT_EQ(tpdp_module_num_hooks(root), 0);
  EXPECT_EQ(tpdp_pre_dp_transform_count(root), -1);
  ExpectAll(TPDP_PARAM_DTENSOR, TPDP_HANDLE_IDLE);
  ASSERT_TPDP_OK(tpdp_module_forward_end(root));  // no hook left to run
  ExpectAll(TPDP_PARAM_DTENSOR, TPDP_HANDLE_IDLE);
  EXPECT_TPDP_ERROR(tpdp_pre_dp_transform_undo(root), TPDP_ERR_NOT_FOUND,
                    "'[Model]'");
  // And it can be applied again.
  ASSERT_TPDP_OK(tpdp_pre_dp_transform(root));
  ExpectAll(TPDP_PARAM_LOCALIZED, TPDP_HANDLE_IDLE);
}

TEST_F(Fixture, TransformOnASubtreeHandlesOnlyIt) {
  // block.w is tied into block.inner.leaf: both registrations lie in block.
  ASSERT_TPDP_OK(tpdp_pre_dp_transform(block));
  EXPECT_EQ(tpdp_pre_dp_transform_count(block), 4);  // w, inner.w, .b, .u
  ExpectOnly({bw, iw, ib, lu}, TPDP_PARAM_LOCALIZED, TPDP_HANDLE_IDLE);
  // The root's forward has no hooks; block's does.
  ASSERT_TPDP_OK(tpdp_module_forward_begin(root));
  ExpectOnly({bw, iw, ib, lu}, TPDP_PARAM_LOCALIZED, TPDP_HANDLE_IDLE);
  ASSERT_TPDP_OK(tpdp_module_forward_begin(block));
  ExpectOnly({bw, iw, ib, lu}, TPDP_PARAM_DTENSOR, TPDP_HANDLE_FORWARD);
  ExpectModule(block, TPDP_STATE_FORWARD_BACKWARD, 1);
  ExpectModule(root, TPDP_STATE_IDLE, 1);
  ASSERT_TPDP_OK(tpdp_module_forward_end(block));
  ExpectOnly({bw, iw, ib, lu}, TPDP_PARAM_LOCALIZED, TPDP_HANDLE_BACKWARD_PRE);
  ASSERT_TPDP_OK(tpdp_module_forward_end(root));
}

TEST_F(Fixture, TiedParameterReachingOutsideTheSubtreeIsRefused) {
  // block.inner.leaf.tied is block.w, registered outside block.inner: DP
  // over block.inner would need it local while block's own forward uses
  // it as a DTensor. The closest module holding both is block.
  EXPECT_TPDP_ERROR(tpdp_pre_dp_transform(inner), TPDP_ERR_STATE,
                    "'block.inner.leaf.tied'", "'block.w'",
                    "outside 'block.inner[Inner]'", "'block[Block]'");
  EXPECT_TPDP_ERROR(tpdp_pre_dp_transform(leaf), TPDP_ERR_STATE,
                    "'block.inner.leaf.tied'", "'block.w'",
                    "outside 'block.inner.leaf[Leaf]'", "'block[Block]'");
  // Nothing changed: block.w keeps its DTensor form for block's forward.
  ExpectOnly({}, TPDP_PARAM_DTENSOR, TPDP_HANDLE_IDLE);
  EXPECT_EQ(tpdp_module_num_hooks(inner), 0);
  EXPECT_EQ(tpdp_pre_dp_transform_count(inner), -1);
  EXPECT_EQ(tpdp_pre_dp_transform_count(leaf), -1);
}

TEST_F(Fixture, TieAddedOutsideAfterTheTransformIsRefusedAtForward) {
  ASSERT_TPDP_OK(tpdp_pre_dp_transform(block));
  ASSERT_TPDP_OK(tpdp_module_add_param(root, "alias", iw));
  EXPECT_TPDP_ERROR(tpdp_module_forward_begin(block), TPDP_ERR_STATE,
                    "'block.inner.w'", "'alias'", "outside 'block[Block]'",
                    "'[Model]'");
  ExpectOnly({bw, iw, ib, lu}, TPDP_PARAM_LOCALIZED, TPDP_HANDLE_IDLE);
  EXPECT_EQ(tpdp_module_in_forward(block), 0);
}

TEST_F(Fixture, DTensorParameterAddedAfterTheTransformIsRefusedAtForward) {
  ASSERT_TPDP_OK(tpdp_pre_dp_transform(root));
  ASSERT_TPDP_OK(tpdp_module_forward_begin(root));
  ASSERT_TPDP_OK(tpdp_module_forward_end(root));
  // A plain parameter is no DTensor business: forwards go on.
  tpdp_param *late_plain =
      Param(leaf, "bias", "block.inner.leaf.bias", nullptr, {2});
  (void)late_plain;
  ASSERT_TPDP_OK(tpdp_module_forward_begin(root));
  ASSERT_TPDP_OK(tpdp_module_forward_end(root));
  // A DTensor parameter is refused, naming it, every time, changing
  // nothing.
  tpdp_param *late = Param(inner, "late", "block.inner.late",
                           Spec({tpdp_replicate(), tpdp_shard(0)}, {8}), {2});
  for (int i = 0; i < 2; i++) {
    EXPECT_TPDP_ERROR(tpdp_module_forward_begin(root), TPDP_ERR_STATE,
                      "'block.inner.late'", "'[Model]'", "undo the transform");
    ExpectModule(root, TPDP_STATE_FORWARD_BACKWARD, 0);
    for (const Expect &e : params) {
      if (e.p == late)
        ExpectParam(e, TPDP_PARAM_DTENSOR, TPDP_HANDLE_IDLE);
      else if (e.spec)
        ExpectParam(e, TPDP_PARAM_LOCALIZED, TPDP_HANDLE_BACKWARD_PRE);
    }
  }
  // Undo and apply again: the transform has it now.
  ASSERT_TPDP_OK(tpdp_pre_dp_transform_undo(root));
  ASSERT_TPDP_OK(tpdp_pre_dp_transform(root));
  EXPECT_EQ(tpdp_pre_dp_transform_count(root), 6);
  ASSERT_TPDP_OK(tpdp_module_forward_begin(root));
  ExpectAll(TPDP_PARAM_DTENSOR, TPDP_HANDLE_FORWARD);
  ASSERT_TPDP_OK(tpdp_module_forward_end(root));
  ExpectAll(TPDP_PARAM_LOCALIZED, TPDP_HANDLE_BACKWARD_PRE);
}

TEST_F(Fixture, DTensorSubtreeAddedAfterTheTransformIsRefusedAtForward) {
  ASSERT_TPDP_OK(tpdp_pre_dp_transform(root));
  tpdp_module *extra = nullptr;
  ASSERT_TPDP_OK(tpdp_module_create("Extra", &extra));
  Param(extra, "w", "extra.w", Spec({tpdp_replicate(), tpdp_replicate()}, {2}),
        {2});
  ASSERT_TPDP_OK(tpdp_module_forward_begin(root));  // not in the tree yet
  ASSERT_TPDP_OK(tpdp_module_forward_end(root));
  ASSERT_TPDP_OK(tpdp_module_add_child(root, "extra", extra));
  EXPECT_TPDP_ERROR(tpdp_module_forward_begin(root), TPDP_ERR_STATE,
                    "'extra.w'", "joined");
}

TEST_F(Fixture, DTensorParameterAddedOutsideASubtreeTransformIsFine) {
  ASSERT_TPDP_OK(tpdp_pre_dp_transform(block));
  Param(root, "head", "head", Spec({tpdp_replicate(), tpdp_replicate()}, {2}),
        {2});
  ASSERT_TPDP_OK(tpdp_module_forward_begin(block));
  ExpectOnly({bw, iw, ib, lu}, TPDP_PARAM_DTENSOR, TPDP_HANDLE_FORWARD);
  ASSERT_TPDP_OK(tpdp_module_forward_end(block));
}

TEST_F(Fixture, SpecChangedAfterTheTransformIsRefusedAtForward) {
  ASSERT_TPDP_OK(tpdp_pre_dp_transform(root));
  const tpdp_spec *other = Spec({tpdp_replicate(), tpdp_shard(1)}, {8, 6});
  ASSERT_TPDP_OK(tpdp_param_set_spec(iw, other));
  EXPECT_TPDP_ERROR(tpdp_module_forward_begin(root), TPDP_ERR_STATE,
                    "'block.inner.w'", "changed its spec");
  ASSERT_TPDP_OK(tpdp_param_set_spec(iw, nullptr));
  EXPECT_TPDP_ERROR(tpdp_module_forward_begin(root), TPDP_ERR_STATE,
                    "'block.inner.w'", "lost its spec");
  EXPECT_EQ(tpdp_module_in_forward(root), 0);
}

}  // namespace
