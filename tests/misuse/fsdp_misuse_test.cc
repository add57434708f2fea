// SPDX-License-Identifier: BSD-3-Clause
// Misuse of include/tpdp/fsdp.h on 2 ranks: each case asserts the status
// and that the message names the unit (or the parameter's FQN), the rank,
// the expected and the actual state or value. Creation errors fail alike on
// every rank and leave the parameters viewing the caller's memory.
// Cases:
//  - tpdp_fully_shard: NULL module / comm / out, options of a wrong size,
//    zero_level 0 and 4, reshard_after_forward 2, an integer reduce_dtype, a level that only rank 1
//    passes, shapes that differ between ranks, an f64 parameter (named),
//    a module that is a unit already, a unit with no parameter of its own
//  - call order: backward before forward, a forward during the unit's
//    backward (activation recomputation), finalize mid-backward, finalize
//    or stats on a nested unit, finalize with gradient sync off, a forward
//    after a synced backward before finalize, summon_end without summon,
//    summon_full_params during a step
//  - lookups: tpdp_fsdp_param_rows out of range, a NULL unit
//  - a rank skipping a unit's collective (TPDP_DEBUG_COLLECTIVES=1)
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/dp/fsdp_model.h"
#include "tests/test_util.h"

namespace {

using fsdp_model::Model;
using fsdp_model::Shard;
using fsdp_model::Units;

TEST(Fsdp, OutOfOrderCallsAreStateErrorsNamingTheUnit) {
  Model m;
  Units u = Shard(m, 3);
  EXPECT_TPDP_ERROR(tpdp_module_backward_begin(m.blocks[0]), TPDP_ERR_STATE,
                    "blocks.0[Block]", "expects state FORWARD",
                    "the unit is in IDLE");
  ASSERT_TPDP_OK(tpdp_module_forward_begin(m.root));
  ASSERT_TPDP_OK(tpdp_module_forward_begin(m.blocks[0]));
  ASSERT_TPDP_OK(tpdp_module_forward_end(m.blocks[0]));
  ASSERT_TPDP_OK(tpdp_module_forward_end(m.root));
  ASSERT_TPDP_OK(tpdp_module_backward_begin(m.root));
  ASSERT_TPDP_OK(tpdp_module_backward_begin(m.blocks[0]));
  EXPECT_TPDP_ERROR(tpdp_module_forward_begin(m.blocks[0]), TPDP_ERR_STATE,
                    "blocks.0[Block]", "BACKWARD_PRE",
                    "activation recomputation");
  EXPECT_TPDP_ERROR(tpdp_fsdp_finalize(u.root), TPDP_ERR_STATE, "unit [Net]",
                    "BACKWARD_PRE", "not finished");
  EXPECT_TPDP_ERROR(tpdp_fsdp_finalize(u.block[0]), TPDP_ERR_INVALID_ARGUMENT,
                    "blocks.0[Block]", "nested in unit [Net]");
  ASSERT_TPDP_OK(tpdp_module_backward_end(m.blocks[0]));
  ASSERT_TPDP_OK(tpdp_module_backward_end(m.root));
  ASSERT_TPDP_OK(tpdp_fsdp_finalize(u.root));
  EXPECT_EQ(tpdp_fsdp_unit_state(u.root), TPDP_HANDLE_IDLE);
}

TEST(Fsdp, BadInputFailsOnEveryRankAndChangesNothing) {
  int rank = tpdp_test::WorldRank();
  {
    Model m;
    tpdp_fully_shard_options o = tpdp_fully_shard_options_default();
    o.zero_level = 0;
    tpdp_fsdp_unit *u = nullptr;
    EXPECT_TPDP_ERROR(tpdp_fully_shard(m.root, tpdp_test::World(), &o, &u),
                      TPDP_ERR_INVALID_ARGUMENT, "zero_level is 0");
    EXPECT_EQ(u, nullptr);
    o = tpdp_fully_shard_options_default();
    o.size = 8;
    EXPECT_TPDP_ERROR(tpdp_fully_shard(m.root, tpdp_test::World(), &o, &u),
                      TPDP_ERR_INVALID_ARGUMENT, "size 8");
    // Only rank 1 passes a bad level: every rank fails, naming rank 1.
    o = tpdp_fully_shard_options_default();
    if (rank == 1) o.zero_level = 7;
    if (tpdp_test::WorldSize() > 1)
      EXPECT_TPDP_ERROR(tpdp_fully_shard(m.root, tpdp_test::World(), &o, &u),
                        TPDP_ERR_INVALID_ARGUMENT, "rank 1", "zero_level is 7");
    EXPECT_EQ(tpdp_module_unit_kind(m.root), nullptr);
    EXPECT_EQ(tpdp_param_tensor(m.params[0])->shape[0], 5);
    EXPECT_EQ(tpdp_param_tensor(m.params[0])->data, m.data[0].data());
  }
  if (tpdp_test::WorldSize() > 1) {
    // Rank 0's w has one row more: a shape mismatch on every rank.
    Model m(rank == 0 ? 1 : 0);
    tpdp_fsdp_unit *u = nullptr;
    EXPECT_TPDP_ERROR(
        tpdp_fully_shard(m.blocks[0], tpdp_test::World(), nullptr, &u),
        TPDP_ERR_SHAPE_MISMATCH, "blocks.0[Block]", "disagree", "rank 0");
    EXPECT_EQ(tpdp_param_tensor(m.params[1])->data, m.data[1].data());
  }
  {
    // An f64 parameter is named by its FQN; a unit cannot be made twice.
    Model m;
    std::vector<double> d(4, 1.0);
    tpdp_tensor t = tpdp_tensor_1d(d.data(), TPDP_F64, 4);
    tpdp_param *q = nullptr;
    ASSERT_TPDP_OK(tpdp_param_create(&t, &q));
    ASSERT_TPDP_OK(tpdp_module_add_param(m.blocks[1], "scale", q));
    tpdp_param_release(q);
    tpdp_fsdp_unit *u = nullptr;
    EXPECT_TPDP_ERROR(
        tpdp_fully_shard(m.blocks[1], tpdp_test::World(), nullptr, &u),
        TPDP_ERR_DTYPE_MISMATCH, "'scale'", "f64");
    ASSERT_TPDP_OK(
        tpdp_fully_shard(m.blocks[0], tpdp_test::World(), nullptr, &u));
    EXPECT_TPDP_ERROR(
        tpdp_fully_shard(m.blocks[0], tpdp_test::World(), nullptr, &u),
        TPDP_ERR_ALREADY, "blocks.0[Block]", "FSDP unit already");
  }
  {
    // A CUDA parameter (never dereferenced): this build moves host memory
    // only (with --config=cuda, the MPI communicator's memory is the
    // mismatch); named by its FQN, on every rank.
    Model m;
    static float dummy[4];
    tpdp_tensor t;
    int64_t four = 4;
    ASSERT_TPDP_OK(tpdp_tensor_init(
        &t, dummy, TPDP_F32, tpdp_device{TPDP_DEVICE_CUDA, 0}, 1, &four));
    tpdp_param *q = nullptr;
    ASSERT_TPDP_OK(tpdp_param_create(&t, &q));
    ASSERT_TPDP_OK(tpdp_module_add_param(m.blocks[1], "gpu_scale", q));
    tpdp_param_release(q);
    tpdp_fsdp_unit *u = nullptr;
    tpdp_status st =
        tpdp_fully_shard(m.blocks[1], tpdp_test::World(), nullptr, &u);
    EXPECT_TRUE(st == TPDP_ERR_UNSUPPORTED || st == TPDP_ERR_DEVICE_MISMATCH)
        << tpdp_status_string(st);
    EXPECT_NE(std::string(tpdp_last_error()).find("'gpu_scale' is on cuda:0"),
              std::string::npos)
        << tpdp_last_error();
    EXPECT_EQ(u, nullptr);
    EXPECT_EQ(tpdp_module_unit_kind(m.blocks[1]), nullptr);
  }
}

TEST(Fsdp, NullArgumentsAndBadOptions) {
  Model m;
  tpdp_fsdp_unit *u = nullptr;
  tpdp_comm *w = tpdp_test::World();
  EXPECT_TPDP_ERROR(tpdp_fully_shard(nullptr, w, nullptr, &u),
                    TPDP_ERR_NULL_POINTER, "module");
  EXPECT_TPDP_ERROR(tpdp_fully_shard(m.root, nullptr, nullptr, &u),
                    TPDP_ERR_NULL_POINTER, "dp");
  EXPECT_TPDP_ERROR(tpdp_fully_shard(m.root, w, nullptr, nullptr),
                    TPDP_ERR_NULL_POINTER, "out");
  tpdp_fully_shard_options o = tpdp_fully_shard_options_default();
  o.zero_level = 4;
  EXPECT_TPDP_ERROR(tpdp_fully_shard(m.root, w, &o, &u),
                    TPDP_ERR_INVALID_ARGUMENT, "zero_level is 4",
                    "expected 1, 2 or 3");
  o = tpdp_fully_shard_options_default();
  o.reduce_dtype = TPDP_I32;
  EXPECT_TPDP_ERROR(tpdp_fully_shard(m.root, w, &o, &u),
                    TPDP_ERR_DTYPE_MISMATCH, "reduce_dtype is i32",
                    "expected f32, bf16 or f16");
  o = tpdp_fully_shard_options_default();
  o.reshard_after_forward = 2;
  EXPECT_TPDP_ERROR(tpdp_fully_shard(m.root, w, &o, &u),
                    TPDP_ERR_INVALID_ARGUMENT, "reshard_after_forward is 2");
  // A unit with no parameter of its own: the ModuleList.
  tpdp_module *seq = nullptr;
  ASSERT_TPDP_OK(tpdp_module_get_submodule(m.root, "blocks", &seq));
  tpdp_fsdp_unit *blk = nullptr;
  for (int b = 0; b < 2; b++)
    ASSERT_TPDP_OK(tpdp_fully_shard(m.blocks[b], w, nullptr, &blk));
  EXPECT_TPDP_ERROR(tpdp_fully_shard(seq, w, nullptr, &u),
                    TPDP_ERR_INVALID_ARGUMENT, "blocks[ModuleList]",
                    "no parameter outside nested units");
  int64_t row0 = 0, rows = 0;
  EXPECT_TPDP_ERROR(tpdp_fsdp_param_rows(blk, 2, &row0, &rows),
                    TPDP_ERR_INVALID_ARGUMENT, "blocks.1[Block]",
                    "2 parameters", "index 2");
  EXPECT_TPDP_ERROR(tpdp_fsdp_param_rows(nullptr, 0, &row0, &rows),
                    TPDP_ERR_NULL_POINTER, "unit");
}

TEST(Fsdp, StepCallsOutOfPlace) {
  Model m;
  Units u = Shard(m, 2);
  tpdp_fsdp_stats st;
  EXPECT_TPDP_ERROR(tpdp_fsdp_get_stats(u.block[1], &st),
                    TPDP_ERR_INVALID_ARGUMENT, "blocks.1[Block]",
                    "nested in unit [Net]");
  EXPECT_TPDP_ERROR(tpdp_fsdp_summon_end(u.root, 0), TPDP_ERR_STATE, "[Net]",
                    "expects state SUMMON_FULL_PARAMS", "the unit is in IDLE");
  // A forward after a synced backward, before finalize.
  ASSERT_TPDP_OK(tpdp_module_forward_begin(m.root));
  ASSERT_TPDP_OK(tpdp_module_forward_end(m.root));
  EXPECT_TPDP_ERROR(tpdp_fsdp_summon_full_params(u.root), TPDP_ERR_STATE,
                    "[Net]", "expects state IDLE", "the unit is in FORWARD");
  ASSERT_TPDP_OK(tpdp_module_backward_begin(m.root));
  ASSERT_TPDP_OK(tpdp_module_backward_end(m.root));
  EXPECT_TPDP_ERROR(tpdp_module_forward_begin(m.root), TPDP_ERR_STATE, "[Net]",
                    "forward after a synced backward",
                    "tpdp_fsdp_finalize first");
  ASSERT_TPDP_OK(tpdp_fsdp_finalize(u.root));
  // Finalize while accumulating (gradient sync off).
  ASSERT_TPDP_OK(tpdp_fsdp_set_requires_gradient_sync(u.root, 0));
  EXPECT_TPDP_ERROR(tpdp_fsdp_finalize(u.root), TPDP_ERR_STATE, "[Net]",
                    "gradient sync is off");
  EXPECT_TPDP_ERROR(tpdp_fsdp_set_requires_gradient_sync(u.block[0], 1),
                    TPDP_ERR_INVALID_ARGUMENT, "blocks.0[Block]",
                    "nested in unit [Net]");
}

// A rank that skips a unit's collective: with TPDP_DEBUG_COLLECTIVES=1 on
// the dp communicator every rank fails at the mismatched collective, and
// the message names each rank's unit. (Without it MPI would wait: see the
// watchdog's TPDP_TIMEOUT_S, whose report names the unit the same way.)
TEST(Fsdp, SkippedUnitCollectiveIsCaughtAndNamesTheUnits) {
  if (tpdp_test::WorldSize() < 2) GTEST_SKIP() << "needs 2 ranks";
  int rank = tpdp_test::WorldRank();
  setenv("TPDP_DEBUG_COLLECTIVES", "1", 1);
  tpdp_comm *dp = nullptr;
  tpdp_status st = tpdp_comm_split(tpdp_test::World(), 0, rank, &dp);
  unsetenv("TPDP_DEBUG_COLLECTIVES");
  ASSERT_TPDP_OK(st);
  {
    Model m;
    tpdp_fsdp_unit *b0 = nullptr, *b1 = nullptr, *root = nullptr;
    ASSERT_TPDP_OK(tpdp_fully_shard(m.blocks[0], dp, nullptr, &b0));
    ASSERT_TPDP_OK(tpdp_fully_shard(m.blocks[1], dp, nullptr, &b1));
    ASSERT_TPDP_OK(tpdp_fully_shard(m.root, dp, nullptr, &root));
    // Rank 0 gathers the root, rank 1 skips it and gathers block 0.
    EXPECT_TPDP_ERROR(
        tpdp_module_forward_begin(rank == 0 ? m.root : m.blocks[0]),
        TPDP_ERR_SHAPE_MISMATCH, "collective mismatch",
        "on the fully sharded unit [Net]",
        "on the fully sharded unit blocks.0[Block]");
  }
  ASSERT_TPDP_OK(tpdp_comm_destroy(dp));
}

}  // namespace
