// SPDX-License-Identifier: BSD-3-Clause
// The reducer's iteration path (dp/reducer_step.c) beyond the averages of
// reducer_test.cc: the module's training states (PyTorch FSDP's IDLE /
// FORWARD_BACKWARD), failures of memory inside prepare, mark_ready and
// finalize (fault injection of core/util.h, armed alike on every rank so
// that every rank fails at the same point), module parameters' gradients
// that must stay the reducer's views, and a communicator of one rank.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/util.h"
#include "tests/dp/reducer_model.h"
#include "tests/test_util.h"

using namespace reducer_model;  // NOLINT: the fixture of every test here

namespace {

// Disarms the calling thread's (and every thread's) allocation fault
// counter when a test ends, whatever happened.
struct Disarm {
  ~Disarm() {
    core_alloc_fail_at(0, 0);
    core_alloc_fail_at(0, 1);
  }
};

// One step of the formula's gradients, marked in reverse order.
void Step(Model &m, tpdp_reducer *r, int rank, int step) {
  ASSERT_TPDP_OK(tpdp_reducer_prepare(r));
  WriteGrads(m, rank, step, false);
  MarkAll(r, kReverse);
  ASSERT_TPDP_OK(tpdp_reducer_finalize(r));
}

// The module tree the reducer tracks: a root "Net" with one child.
struct Tree {
  tpdp_module *root = nullptr;
  Tree() {
    tpdp_module *child = nullptr;
    EXPECT_TPDP_OK(tpdp_module_create("Net", &root));
    EXPECT_TPDP_OK(tpdp_module_create("Linear", &child));
    EXPECT_TPDP_OK(tpdp_module_add_child(root, "fc", child));
  }
  ~Tree() { tpdp_module_destroy(root); }
};

// One forward of m: its pre-hooks, then its forward hooks.
void Forward(tpdp_module *m) {
  ASSERT_TPDP_OK(tpdp_module_forward_begin(m));
  ASSERT_TPDP_OK(tpdp_module_forward_end(m));
}

// As the TP+DP forward hooks do at the first forward of a step.
tpdp_status EnterForwardBackward(tpdp_module *m, void *) {
  return tpdp_module_set_state(m, TPDP_STATE_FORWARD_BACKWARD);
}

// A forward hook that tries the reducer from inside the forward.
struct Inside {
  tpdp_reducer *r = nullptr;
  int64_t param = 0;
  tpdp_status mark = TPDP_SUCCESS, finalize = TPDP_SUCCESS;
  std::string mark_msg, finalize_msg;
};
tpdp_status TryReducerInForward(tpdp_module *, void *ctx) {
  Inside *in = (Inside *)ctx;
  in->mark = tpdp_reducer_mark_ready(in->r, in->param);
  in->mark_msg = tpdp_last_error();
  in->finalize = tpdp_reducer_finalize(in->r);
  in->finalize_msg = tpdp_last_error();
  return TPDP_SUCCESS;
}

}  // namespace

// ------------------------------------------------------- training states

// A reducer over the Model tracking the states of a module tree.
class ReducerModuleState : public ::testing::Test {
 protected:
  void SetUp() override {
    tpdp_reducer_options o = Opts(1);
    o.module = t.root;
    r = Attach(m, o);
    ASSERT_NE(r, nullptr);
  }
  void TearDown() override { EXPECT_TPDP_OK(tpdp_reducer_destroy(r)); }
  int rank = tpdp_test::WorldRank(), size = tpdp_test::WorldSize();
  Tree t;
  Model m{tpdp_test::WorldRank()};
  tpdp_reducer *r = nullptr;
};

TEST_F(ReducerModuleState, PrepareAndFinalizeDriveTheState) {
  EXPECT_TPDP_ERROR(tpdp_reducer_finalize(r), TPDP_ERR_STATE,
                    "finalize without prepare", "expected", "FORWARD_BACKWARD",
                    "actual state IDLE");
  EXPECT_EQ(tpdp_module_get_state(t.root), TPDP_STATE_IDLE);
  ASSERT_TPDP_OK(tpdp_reducer_prepare(r));
  EXPECT_EQ(tpdp_module_get_state(t.root), TPDP_STATE_FORWARD_BACKWARD);
  WriteGrads(m, rank, 0, false);
  MarkAll(r, kReverse);
  ASSERT_TPDP_OK(tpdp_reducer_finalize(r));
  EXPECT_EQ(tpdp_module_get_state(t.root), TPDP_STATE_IDLE);
  ExpectMean(m, AllRanks(size), {0});

  // prepare refuses a module summoning its full parameters.
  ASSERT_TPDP_OK(tpdp_module_set_state(t.root, TPDP_STATE_SUMMON_FULL_PARAMS));
  EXPECT_TPDP_ERROR(tpdp_reducer_prepare(r), TPDP_ERR_STATE, "[Net]",
                    "{IDLE, FORWARD_BACKWARD}", "SUMMON_FULL_PARAMS");
  EXPECT_TPDP_ERROR(tpdp_reducer_mark_ready(r, 0), TPDP_ERR_STATE,
                    "outside an iteration");
  ASSERT_TPDP_OK(tpdp_module_set_state(t.root, TPDP_STATE_IDLE));

  // finalize wants FORWARD_BACKWARD and keeps the iteration open otherwise.
  ASSERT_TPDP_OK(tpdp_reducer_prepare(r));
  WriteGrads(m, rank, 1, false);
  MarkAll(r, kReverse);
  ASSERT_TPDP_OK(tpdp_module_set_state(t.root, TPDP_STATE_IDLE));
  EXPECT_TPDP_ERROR(tpdp_reducer_finalize(r), TPDP_ERR_STATE, "[Net]",
                    "{FORWARD_BACKWARD}", "current state is IDLE");
  ASSERT_TPDP_OK(tpdp_module_set_state(t.root, TPDP_STATE_FORWARD_BACKWARD));
  ASSERT_TPDP_OK(tpdp_reducer_finalize(r));
  EXPECT_EQ(tpdp_module_get_state(t.root), TPDP_STATE_IDLE);
  ExpectMean(m, AllRanks(size), {1});

  // A no_sync step ends IDLE too.
  ASSERT_TPDP_OK(tpdp_reducer_set_sync(r, 0));
  ASSERT_TPDP_OK(tpdp_reducer_prepare(r));
  MarkAll(r, kReverse);
  ASSERT_TPDP_OK(tpdp_reducer_finalize(r));
  EXPECT_EQ(tpdp_module_get_state(t.root), TPDP_STATE_IDLE);
}

// Inside the module's forward the parameters are DTensors: the reducer
// refuses marks and finalize there (the hook sees the refusals); outside
// it they proceed.
TEST_F(ReducerModuleState, RefusesMarksAndFinalizeInsideForward) {
  Inside in;
  in.r = r;
  in.param = 3;
  tpdp_hook_handle h;
  ASSERT_TPDP_OK(tpdp_module_register_forward_pre_hook(
      t.root, TryReducerInForward, &in, &h));
  ASSERT_TPDP_OK(tpdp_reducer_prepare(r));
  WriteGrads(m, rank, 0, false);
  Forward(t.root);
  EXPECT_EQ(in.mark, TPDP_ERR_STATE);
  EXPECT_NE(in.mark_msg.find("parameter 3 ('l1.bias') marked ready inside "
                             "the forward of module '[Net]'"),
            std::string::npos)
      << in.mark_msg;
  EXPECT_EQ(in.finalize, TPDP_ERR_STATE);
  EXPECT_NE(in.finalize_msg.find("finalize called inside the forward"),
            std::string::npos)
      << in.finalize_msg;
  ASSERT_TPDP_OK(tpdp_hook_remove(h));
  MarkAll(r, kReverse);  // p3 was not marked by the refused call
  ASSERT_TPDP_OK(tpdp_reducer_finalize(r));
  ExpectMean(m, AllRanks(size), {0});
}

// Evaluation forwards (no backward, no reducer calls) between steps, and a
// forward recomputed in the middle of backward (activation checkpointing)
// leave training as it was. The pre-forward hook sets FORWARD_BACKWARD as
// the TP+DP hooks do.
TEST_F(ReducerModuleState, EvalForwardsAndRecomputedForwards) {
  tpdp_hook_handle h;
  ASSERT_TPDP_OK(tpdp_module_register_forward_pre_hook(
      t.root, EnterForwardBackward, nullptr, &h));
  for (int step = 0; step < 3; step++) {
    Forward(t.root);  // evaluation: forward only
    // training: forward, then backward with a checkpointed segment
    Forward(t.root);
    ASSERT_TPDP_OK(tpdp_reducer_prepare(r));
    WriteGrads(m, rank, step, false);
    MarkAll(r, {5, 4, 3});
    Forward(t.root);  // recomputation
    MarkAll(r, {2, 1, 0});
    ASSERT_TPDP_OK(tpdp_reducer_finalize(r));
    EXPECT_EQ(tpdp_module_get_state(t.root), TPDP_STATE_IDLE);
    ExpectMean(m, AllRanks(size), {step});
  }
  EXPECT_EQ(tpdp_reducer_rebuilt(r), 1);
}

// ------------------------------------------------------ failures of memory

// A prepare whose rebuild runs short of memory (at each of its allocations
// in turn) fails on every rank and changes nothing: no iteration starts,
// the old buckets keep working, and the next prepare rebuilds.
TEST(ReducerFaults, PrepareShortOfMemoryChangesNothing) {
  Disarm disarm;
  int rank = tpdp_test::WorldRank(), size = tpdp_test::WorldSize();
  Model m(rank);
  tpdp_reducer_options o = Opts(1);
  tpdp_reducer *r = Attach(m, o);
  ASSERT_NE(r, nullptr);
  // Rank 0's ready order differs from the initial layout: a real rebuild.
  ASSERT_TPDP_OK(tpdp_reducer_prepare(r));
  WriteGrads(m, rank, 0, false);
  MarkAll(r, {4, 1, 5, 0, 3, 2});
  ASSERT_TPDP_OK(tpdp_reducer_finalize(r));
  int failures = 0;
  for (long n = 1; n < 100; n++) {
    core_alloc_fail_at(n, 0);
    tpdp_status st = tpdp_reducer_prepare(r);
    core_alloc_fail_at(0, 0);
    if (st == TPDP_SUCCESS) break;
    failures++;
    EXPECT_EQ(st, TPDP_ERR_OUT_OF_MEMORY)
        << "allocation " << n << ": " << tpdp_last_error();
    EXPECT_EQ(tpdp_reducer_rebuilt(r), 0);
    EXPECT_EQ(Buckets(r), kInitialBuckets);
    EXPECT_TPDP_ERROR(tpdp_reducer_mark_ready(r, 0), TPDP_ERR_STATE,
                      "outside an iteration");
    ExpectMean(m, AllRanks(size), {0});  // gradients where they were
  }
  EXPECT_GE(failures, 3);  // broadcast, assignment, buckets, agreement
  EXPECT_EQ(tpdp_reducer_rebuilt(r), 1);
  std::vector<std::vector<int64_t>> want = {{4}, {1, 5, 0, 3}, {2}};
  EXPECT_EQ(Buckets(r), want);
  ExpectMean(m, AllRanks(size), {0});  // moved with the rebuild
  WriteGrads(m, rank, 1, false);
  MarkAll(r, {4, 1, 5, 0, 3, 2});
  ASSERT_TPDP_OK(tpdp_reducer_finalize(r));
  ExpectMean(m, AllRanks(size), {1});
  EXPECT_TPDP_OK(tpdp_reducer_destroy(r));
}

// A launch that fails in mark_ready (its non-blocking allreduce runs short
// of memory) abandons the iteration: no iteration is left open, and no
// gradient of it counts as accumulated into the next one (p5, unused
// there, contributes zero, not its stale value).
TEST(ReducerFaults, FailedLaunchInMarkAbandonsTheIteration) {
  Disarm disarm;
  int rank = tpdp_test::WorldRank(), size = tpdp_test::WorldSize();
  Tree t;
  Model m(rank);
  tpdp_reducer_options o = Opts(1);
  o.comm_thread = 0;  // the launch allocates the collective's handle
  o.find_unused_parameters = 1;
  o.module = t.root;
  tpdp_reducer *r = Attach(m, o);
  ASSERT_NE(r, nullptr);
  ASSERT_TPDP_OK(tpdp_reducer_prepare(r));
  WriteGrads(m, rank, 0, false);
  for (int64_t i = 0; i < m.Numel(5); i++) m.Grad(5)[i] = 1000.f;
  core_alloc_fail_at(1, 0);
  EXPECT_TPDP_ERROR(tpdp_reducer_mark_ready(r, 5), TPDP_ERR_OUT_OF_MEMORY,
                    "out of memory", "iteration was abandoned");
  core_alloc_fail_at(0, 0);
  EXPECT_EQ(tpdp_module_get_state(t.root), TPDP_STATE_IDLE);
  EXPECT_TPDP_ERROR(tpdp_reducer_mark_ready(r, 4), TPDP_ERR_STATE,
                    "outside an iteration");
  EXPECT_TPDP_ERROR(tpdp_reducer_finalize(r), TPDP_ERR_STATE,
                    "finalize without prepare");
  ASSERT_TPDP_OK(tpdp_reducer_prepare(r));
  WriteGrads(m, rank, 1, false, /*skip=*/5);
  MarkAll(r, {4, 3, 2, 1, 0});
  ASSERT_TPDP_OK(tpdp_reducer_finalize(r));
  for (int p = 0; p < 5; p++)
    for (int64_t i = 0; i < m.Numel(p); i++)
      EXPECT_NEAR(m.Grad(p)[i], Mean(AllRanks(size), p, i, {1}), 1e-5);
  EXPECT_EQ(m.Grad(5)[0], 0.f);
  EXPECT_TPDP_OK(tpdp_reducer_destroy(r));
}

// finalize short of memory (at each allocation of its launches in turn,
// on the non-blocking path) ends the iteration with the error; the next
// steps work, the rebuild included. A static graph's first iteration
// launches every bucket in finalize.
TEST(ReducerFaults, FinalizeShortOfMemoryEndsTheIteration) {
  Disarm disarm;
  int rank = tpdp_test::WorldRank(), size = tpdp_test::WorldSize();
  Model m(rank);
  tpdp_reducer_options o = Opts(1);
  o.comm_thread = 0;
  o.static_graph = 1;
  tpdp_reducer *r = Attach(m, o);
  ASSERT_NE(r, nullptr);
  int failures = 0;
  for (long n = 1; n < 100; n++) {
    ASSERT_TPDP_OK(tpdp_reducer_prepare(r));
    WriteGrads(m, rank, 0, false);
    MarkAll(r, kReverse);
    core_alloc_fail_at(n, 0);
    tpdp_status st = tpdp_reducer_finalize(r);
    core_alloc_fail_at(0, 0);
    if (st == TPDP_SUCCESS) break;
    failures++;
    EXPECT_EQ(st, TPDP_ERR_OUT_OF_MEMORY) << tpdp_last_error();
    EXPECT_TPDP_ERROR(tpdp_reducer_finalize(r), TPDP_ERR_STATE,
                      "finalize without prepare");
  }
  EXPECT_EQ(failures, 3);  // one collective handle per bucket, nothing else
  ExpectMean(m, AllRanks(size), {0});
  for (int step = 1; step < 3; step++) {
    Step(m, r, rank, step);
    ExpectMean(m, AllRanks(size), {step});
  }
  EXPECT_EQ(tpdp_reducer_rebuilt(r), 1);
  EXPECT_TPDP_OK(tpdp_reducer_destroy(r));
}

// ------------------------------------------------ module gradients

// View mode with options.module: the module parameters over the reducer's
// tensors must keep the reducer's views as gradients. Written into the
// views (read again after each prepare, as the rebuild moves them) or
// never set, finalize passes; re-pointed at a buffer of the framework's
// own on the last rank, that rank's finalize fails naming the parameter
// (reducer index and FQN, module FQN) while its peer's passes, and neither
// is left waiting: the next step reduces on every rank.
TEST(ReducerModuleGrads, GradientReplacedOnOneRankFailsThatRanksFinalize) {
  int rank = tpdp_test::WorldRank(), size = tpdp_test::WorldSize();
  const int last = size - 1;
  Tree t;
  tpdp_module *fc = tpdp_module_child(t.root, 0, nullptr);
  ASSERT_NE(fc, nullptr);
  Model m(rank);
  // fc.weight over parameter 0 (its gradient never set), fc.bias over 3.
  tpdp_param *w = nullptr, *b = nullptr;
  ASSERT_TPDP_OK(tpdp_param_create(&m.params[0].param, &w));
  ASSERT_TPDP_OK(tpdp_param_create(&m.params[3].param, &b));
  ASSERT_TPDP_OK(tpdp_module_add_param(fc, "weight", w));
  ASSERT_TPDP_OK(tpdp_module_add_param(fc, "bias", b));
  tpdp_param_release(w);
  tpdp_param_release(b);
  tpdp_reducer_options o = Opts(1);
  o.module = t.root;
  tpdp_reducer *r = Attach(m, o);
  ASSERT_NE(r, nullptr);
  for (int step = 0; step < 3; step++) {
    ASSERT_TPDP_OK(tpdp_reducer_prepare(r));
    tpdp_tensor v;
    ASSERT_TPDP_OK(tpdp_reducer_grad_view(r, 3, &v));
    ASSERT_TPDP_OK(tpdp_param_set_grad(b, &v));
    WriteGrads(m, rank, step, false);
    MarkAll(r, kReverse);
    ASSERT_TPDP_OK(tpdp_reducer_finalize(r));
    ExpectMean(m, AllRanks(size), {step});
  }
  EXPECT_EQ(tpdp_reducer_rebuilt(r), 1);

  std::vector<float> own(7, 0.f);
  ASSERT_TPDP_OK(tpdp_reducer_prepare(r));
  tpdp_tensor v;
  ASSERT_TPDP_OK(tpdp_reducer_grad_view(r, 3, &v));
  tpdp_tensor mine = v;
  if (rank == last) mine.data = own.data();
  ASSERT_TPDP_OK(tpdp_param_set_grad(b, &mine));
  WriteGrads(m, rank, 3, false);
  MarkAll(r, kReverse);
  if (rank == last) {
    EXPECT_TPDP_ERROR(tpdp_reducer_finalize(r), TPDP_ERR_STATE,
                      "tpdp_reducer_finalize: ",
                      "the gradient of parameter 3 ('l1.bias') (module "
                      "parameter 'fc.bias') was replaced",
                      "so it was left out of the reduction (1 module "
                      "parameter(s) like this)",
                      "tpdp_reducer_grad_view");
  } else {
    EXPECT_TPDP_OK(tpdp_reducer_finalize(r));
  }
  EXPECT_EQ(tpdp_module_get_state(t.root), TPDP_STATE_IDLE);
  EXPECT_EQ(own[0], 0.f);  // the replacement was not reduced

  ASSERT_TPDP_OK(tpdp_reducer_prepare(r));
  ASSERT_TPDP_OK(tpdp_reducer_grad_view(r, 3, &v));
  ASSERT_TPDP_OK(tpdp_param_set_grad(b, &v));
  WriteGrads(m, rank, 4, false);
  MarkAll(r, kReverse);
  ASSERT_TPDP_OK(tpdp_reducer_finalize(r));
  ExpectMean(m, AllRanks(size), {4});
  EXPECT_TPDP_OK(tpdp_reducer_destroy(r));
}

// ------------------------------------------------------ one rank

// On a communicator of one rank nothing is communicated and, with the
// divide factor 1 that the size gives, nothing is averaged: the reducer's
// stats show no time in collectives or data passes, the gradients are the
// rank's own, and the buckets are never rebuilt. Another factor divides.
TEST(ReducerSolo, OneRankCommunicatesNothing) {
  int rank = tpdp_test::WorldRank();
  tpdp_comm *self = nullptr;
  ASSERT_TPDP_OK(tpdp_comm_split(tpdp_test::World(), rank, 0, &self));
  ASSERT_EQ(tpdp_comm_size(self), 1);
  for (double factor : {0.0, 4.0}) {
    SCOPED_TRACE("divide_factor " + std::to_string(factor));
    Model m(rank);
    tpdp_reducer_options o = Opts(1);
    o.divide_factor = factor;
    tpdp_reducer *r = Attach(m, o, self);
    ASSERT_NE(r, nullptr);
    for (int step = 0; step < 3; step++) {
      Step(m, r, rank, step);
      double scale = factor > 0 ? 1.0 / factor : 1.0;
      for (int p = 0; p < kN; p++)
        for (int64_t i = 0; i < m.Numel(p); i++)
          EXPECT_FLOAT_EQ(m.Grad(p)[i], (float)(scale * G(rank, p, i, step)));
    }
    EXPECT_EQ(tpdp_reducer_rebuilt(r), 0);
    EXPECT_EQ(Buckets(r), kInitialBuckets);
    tpdp_reducer_stats s;
    ASSERT_TPDP_OK(tpdp_reducer_get_stats(r, &s));
    EXPECT_EQ(s.iterations, 3);
    EXPECT_EQ(s.comm_seconds, 0.0);
    if (factor == 0.0) {
      EXPECT_EQ(s.data_seconds, 0.0);
    }
    EXPECT_TPDP_OK(tpdp_reducer_destroy(r));
  }
  EXPECT_TPDP_OK(tpdp_comm_destroy(self));
}

// find_unused_parameters off and one rank never marks a parameter: that
// rank's finalize fails at once naming the parameter (its peer waits in
// finalize for the bucket's reduction, bounded by TPDP_TIMEOUT_S); marking
// it then completes the iteration on both ranks with the right averages.
TEST(ReducerStep, OneRankNeverMarkingAParameterIsNamedAtFinalize) {
  int rank = tpdp_test::WorldRank(), size = tpdp_test::WorldSize();
  const int last = size - 1;
  for (int view : {1, 0}) {
    SCOPED_TRACE(view ? "view" : "copy");
    Model m(rank);
    tpdp_reducer *r = Attach(m, Opts(view));
    ASSERT_NE(r, nullptr);
    ASSERT_TPDP_OK(tpdp_reducer_prepare(r));
    WriteGrads(m, rank, 0, false);
    if (rank == last) {
      MarkAll(r, {5, 4, 2, 1, 0});  // never 3
      EXPECT_TPDP_ERROR(tpdp_reducer_finalize(r), TPDP_ERR_STATE,
                        "never marked ready", "3 ('l1.bias')",
                        "find_unused_parameters");
      EXPECT_TPDP_OK(tpdp_reducer_mark_ready(r, 3));
    } else {
      MarkAll(r, kReverse);
    }
    ASSERT_TPDP_OK(tpdp_reducer_finalize(r));
    ExpectMean(m, AllRanks(size), {0});
    EXPECT_TPDP_OK(tpdp_reducer_destroy(r));
  }
}
