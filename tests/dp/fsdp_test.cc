// SPDX-License-Identifier: BSD-3-Clause
// Fully sharded units (dp/fully_shard.c and its fsdp_*.c) on 1-4 ranks, driven as a C framework
// drives them (forward_begin/end and backward_begin/end around each
// module, finalize, an SGD step on the shards). Everything expected is
// computed here: each rank's rows by the chunk rule, the gathered values
// from a reference model updated in double precision, the gradient as the
// mean over ranks of a formula, the collective counts and persistent bytes
// from the ZeRO formulas and the shapes. Misuse: tests/misuse/
// fsdp_misuse_test.cc.
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "tests/dp/fsdp_model.h"
#include "tests/test_util.h"

namespace {

using namespace fsdp_model;  // NOLINT: the fixture of every test here

class Levels : public ::testing::TestWithParam<int> {};

TEST_P(Levels, ShardsByTheChunkRuleAndTrainsLikeOneProcess) {
  int level = GetParam();
  int rank = tpdp_test::WorldRank(), n = tpdp_test::WorldSize();
  Model m;
  Units u = Shard(m, level);
  ASSERT_NE(u.root, nullptr);
  // Each parameter views its rows, unpadded; the caller's copy is unused.
  for (size_t p = 0; p < kSpecs.size(); p++) {
    ExpectShard(m, (int)p, "after fully_shard");
    int64_t row0 = -1, rows = -1;
    tpdp_fsdp_unit *owner = p == 0 ? u.root : u.block[(p - 1) / 2];
    ASSERT_TPDP_OK(tpdp_fsdp_param_rows(owner, p == 0 ? 0 : (int)(p - 1) % 2,
                                        &row0, &rows));
    EXPECT_EQ(rows, Rows(kSpecs[p], rank, n));
    if (rows) {
      EXPECT_EQ(row0, rank * Chunk(kSpecs[p], n));
    }
    std::fill(m.data[p].begin(), m.data[p].end(), -1.0f);
  }
  EXPECT_EQ(tpdp_fsdp_num_params(u.root), 1);
  const char *fqn = nullptr;
  EXPECT_EQ(tpdp_fsdp_param(u.block[1], 1, &fqn), m.params[4]);
  EXPECT_STREQ(fqn, "b");
  for (int step = 0; step < 3; step++) {
    Step(m, u, step);
    for (size_t p = 0; p < kSpecs.size(); p++)
      ExpectShard(m, (int)p, "after the optimizer step");
  }
  // Collectives per step (the last): all-gathers U = 3 in forward, plus
  // U - 1 = 2 in backward at level 3 (the root stays gathered);
  // reduce-scatters U. Bytes: each unit's padded shard S times n.
  tpdp_fsdp_stats st;
  ASSERT_TPDP_OK(tpdp_fsdp_get_stats(u.root, &st));
  EXPECT_EQ(st.allgathers, level == 3 ? 5 : 3);
  EXPECT_EQ(st.reduce_scatters, 3);
  int64_t s_root = Chunk(kSpecs[0], n) * RowElems(kSpecs[0]);
  int64_t s_block = Chunk(kSpecs[1], n) * RowElems(kSpecs[1]) +
                    Chunk(kSpecs[2], n) * RowElems(kSpecs[2]);
  int64_t full_root = Numel(kSpecs[0]);
  int64_t full_block = Numel(kSpecs[1]) + Numel(kSpecs[2]);
  EXPECT_EQ(st.bytes_reduce_scattered, 4 * n * (s_root + 2 * s_block));
  EXPECT_EQ(st.bytes_allgathered,
            4 * n * (level == 3 ? s_root + 4 * s_block : s_root + 2 * s_block));
  // Persistent bytes, ZeRO's: level 1 the full parameters and gradients
  // (the master rows and the gradient shards live inside them), level 2
  // the full parameters and the gradient shards, level 3 both shards.
  int64_t shards = s_root + 2 * s_block, full = full_root + 2 * full_block;
  int64_t want = 4 * (level == 1   ? 2 * full
                      : level == 2 ? full + shards
                                   : 2 * shards);
  EXPECT_EQ(st.persistent_bytes, want);
  // Level 1 holds nothing transient on one rank (nothing to exchange).
  if (level > 1 || n > 1) {
    EXPECT_GT(st.peak_transient_bytes, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Zero, Levels, ::testing::Values(1, 2, 3));

TEST(Fsdp, AccumulatesMicroBatchesWithoutSyncAndHandlesAnUnusedUnit) {
  for (int level = 1; level <= 3; level++) {
    Model m;
    Units u = Shard(m, level);
    Step(m, u, 0, 3);
    Step(m, u, 1, 1, /*skip_block1=*/true);
    Step(m, u, 2, 2);
    for (size_t p = 0; p < kSpecs.size(); p++) ExpectShard(m, (int)p, "end");
  }
}

TEST(Fsdp, SummonFullParamsGathersAndWritesBack) {
  Model m;
  Units u = Shard(m, 3);
  ASSERT_TPDP_OK(tpdp_fsdp_summon_full_params(u.root));
  EXPECT_EQ(tpdp_fsdp_unit_state(u.block[0]), TPDP_HANDLE_SUMMON_FULL_PARAMS);
  for (size_t p = 0; p < kSpecs.size(); p++) ExpectFull(m, (int)p, "summon");
  // Every rank writes the same change to the full view; writeback keeps it.
  float *w = static_cast<float *>(tpdp_param_tensor(m.params[1])->data);
  for (int64_t e = 0; e < Numel(kSpecs[1]); e++) {
    w[e] += 1.0f;
    m.ref[1][e] += 1.0;
  }
  ASSERT_TPDP_OK(tpdp_fsdp_summon_end(u.root, 1));
  EXPECT_EQ(tpdp_fsdp_unit_state(u.block[0]), TPDP_HANDLE_IDLE);
  for (size_t p = 0; p < kSpecs.size(); p++) ExpectShard(m, (int)p, "after");
  Step(m, u, 0);
}

// tpdp_fsdp_release frees one unit before its module, between steps
// only; children first (as tpdp.torch closes them) or the root first, the
// module tree is destroyed cleanly afterwards (the sanitizers and valgrind
// runs of this test check that nothing is freed twice or leaked).
TEST(Fsdp, ReleaseFreesOneUnitBetweenStepsOnly) {
  for (int root_first = 0; root_first < 2; root_first++) {
    for (int level = 1; level <= 3; level++) {
      Model m;
      Units u = Shard(m, level);
      Step(m, u, 0);
      // Not while the units are gathered (SUMMON_FULL_PARAMS): refused,
      // the unit kept.
      ASSERT_TPDP_OK(tpdp_fsdp_summon_full_params(u.root));
      EXPECT_EQ(tpdp_fsdp_release(u.block[0]), TPDP_ERR_STATE);
      EXPECT_NE(std::string(tpdp_last_error()).find("release it between steps"),
                std::string::npos)
          << tpdp_last_error();
      EXPECT_EQ(tpdp_fsdp_unit_of(m.blocks[0]), u.block[0]);
      ASSERT_TPDP_OK(tpdp_fsdp_summon_end(u.root, 0));
      Step(m, u, 1);
      tpdp_fsdp_unit *order[3] = {u.block[0], u.block[1], u.root};
      tpdp_module *mods[3] = {m.blocks[0], m.blocks[1], m.root};
      if (root_first) {
        std::swap(order[0], order[2]);
        std::swap(mods[0], mods[2]);
      }
      for (int k = 0; k < 3; k++) {
        ASSERT_TPDP_OK(tpdp_fsdp_release(order[k]));
        EXPECT_EQ(tpdp_fsdp_unit_of(mods[k]), nullptr);
        EXPECT_EQ(tpdp_module_unit_kind(mods[k]), nullptr);
        for (int j = k + 1; j < 3; j++) {  // the others untouched
          EXPECT_EQ(tpdp_fsdp_unit_of(mods[j]), order[j]);
          EXPECT_EQ(tpdp_fsdp_unit_state(order[j]), TPDP_HANDLE_IDLE);
        }
      }
    }
  }
  EXPECT_EQ(tpdp_fsdp_release(nullptr), TPDP_ERR_NULL_POINTER);
}

TEST(Fsdp, TreeReportMarksExactlyTheUnits) {
  Model m;
  Shard(m, 2);
  tpdp_tree_report *r = nullptr;
  ASSERT_TPDP_OK(tpdp_tree_report_create(m.root, nullptr, 0, &r));
  std::string text = tpdp_tree_report_text(r);
  EXPECT_NE(text.find("[Net] FULLY SHARDED\n"), std::string::npos) << text;
  EXPECT_NE(text.find("blocks.0[Block] FULLY SHARDED\n"), std::string::npos);
  EXPECT_NE(text.find("blocks.1[Block] FULLY SHARDED\n"), std::string::npos);
  EXPECT_NE(text.find("blocks[ModuleList]\n"), std::string::npos) << text;
  EXPECT_STREQ(tpdp_tree_report_json(r),
               "{\"[Net]\":[\"emb\"],\"blocks.0[Block]\":[\"blocks.0.w\","
               "\"blocks.0.b\"],\"blocks.1[Block]\":[\"blocks.1.w\","
               "\"blocks.1.b\"]}");
  tpdp_tree_report_destroy(r);
}

// ---- mixed precision (param_dtype / reduce_dtype) ----

struct Precision {
  tpdp_dtype param, reduce;
  int level;
};

class MixedPrecision : public ::testing::TestWithParam<Precision> {};

// Forward sees param_dtype tensors holding the rounded master values; the
// gradient each rank writes in param_dtype comes back to each rank's f32
// shard as the mean over ranks (reduced in reduce_dtype: within its
// rounding); the next forward gathers the updated shards, rounded again.
TEST_P(MixedPrecision, GathersAndReducesInTheirDtypes) {
  Precision pr = GetParam();
  int rank = tpdp_test::WorldRank(), n = tpdp_test::WorldSize();
  Model m;
  Units u;
  tpdp_fully_shard_options o = tpdp_fully_shard_options_default();
  o.zero_level = pr.level;
  o.param_dtype = pr.param;
  o.reduce_dtype = pr.reduce;
  for (int b = 0; b < 2; b++)
    ASSERT_TPDP_OK(
        tpdp_fully_shard(m.blocks[b], tpdp_test::World(), &o, &u.block[b]));
  ASSERT_TPDP_OK(tpdp_fully_shard(m.root, tpdp_test::World(), &o, &u.root));
  // Tolerances: a value rounded to param_dtype; a mean reduced in
  // reduce_dtype (one rounding per addition and the division).
  double eps_p = pr.param == TPDP_F32    ? 1e-6
                 : pr.param == TPDP_BF16 ? 8e-3
                                         : 1e-3;
  double eps_r = pr.reduce == TPDP_F32    ? 1e-5
                 : pr.reduce == TPDP_BF16 ? 8e-3 * n
                                          : 1e-3 * n;
  for (int step = 0; step < 2; step++) {
    ASSERT_TPDP_OK(tpdp_module_forward_begin(m.root));
    for (int b = 0; b < 2; b++) {
      ASSERT_TPDP_OK(tpdp_module_forward_begin(m.blocks[b]));
      for (int p = 1 + 2 * b; p <= 2 + 2 * b; p++) {
        const tpdp_tensor *t = tpdp_param_tensor(m.params[p]);
        ASSERT_EQ(t->dtype, pr.param);
        for (int64_t e = 0; e < Numel(kSpecs[p]); e++) {
          // After a step, the shard moved by lr times a gradient reduced
          // in reduce_dtype (|gradient| < 5 here).
          double want = RoundTo(pr.param, (float)m.ref[p][e]);
          ASSERT_NEAR(Load(t, e), want,
                      eps_p * (1 + std::fabs(want)) + step * kLr * eps_r * 5)
              << "param " << p << " element " << e << " step " << step;
        }
      }
      ASSERT_TPDP_OK(tpdp_module_forward_end(m.blocks[b]));
    }
    ASSERT_TPDP_OK(tpdp_module_forward_end(m.root));
    ASSERT_TPDP_OK(tpdp_module_backward_begin(m.root));
    for (int b = 1; b >= -1; b--) {
      if (b >= 0) ASSERT_TPDP_OK(tpdp_module_backward_begin(m.blocks[b]));
      std::vector<int> ps =
          b >= 0 ? std::vector<int>{1 + 2 * b, 2 + 2 * b} : std::vector<int>{0};
      for (int p : ps) {
        const tpdp_tensor *g = tpdp_param_grad(m.params[p]);
        ASSERT_EQ(g->dtype, pr.param);
        for (int64_t e = 0; e < Numel(kSpecs[p]); e++)
          Store(g, e, Load(g, e) + Grad(step, 0, rank, p, e));
      }
      if (b >= 0) ASSERT_TPDP_OK(tpdp_module_backward_end(m.blocks[b]));
    }
    ASSERT_TPDP_OK(tpdp_module_backward_end(m.root));
    ASSERT_TPDP_OK(tpdp_fsdp_finalize(u.root));
    for (size_t p = 0; p < kSpecs.size(); p++) {
      const ParamSpec &sp = kSpecs[p];
      int64_t re = RowElems(sp), rows = Rows(sp, rank, n);
      int64_t e0 = rank * Chunk(sp, n) * re;
      const tpdp_tensor *g = tpdp_param_grad(m.params[p]);
      const tpdp_tensor *t = tpdp_param_tensor(m.params[p]);
      ASSERT_EQ(g->dtype, TPDP_F32);
      ASSERT_EQ(t->dtype, TPDP_F32);
      for (int64_t k = 0; k < rows * re; k++) {
        double mean = 0;
        for (int r = 0; r < n; r++)
          mean += RoundTo(pr.param, Grad(step, 0, r, (int)p, e0 + k));
        mean /= n;
        float got = ((float *)g->data)[k];
        ASSERT_NEAR(got, mean, eps_r * (1 + std::fabs(mean)))
            << "param " << p << " element " << e0 + k << " step " << step;
        ((float *)t->data)[k] -= (float)kLr * got;
      }
      for (int64_t e = 0; e < Numel(sp); e++) {
        double mean = 0;
        for (int r = 0; r < n; r++)
          mean += RoundTo(pr.param, Grad(step, 0, r, (int)p, e));
        m.ref[p][e] -= kLr * (mean / n);
      }
    }
  }
  // summon_full_params gathers the f32 master whatever param_dtype (as
  // PyTorch FSDP's summon_full_params): every rank's f32 shard rows,
  // exactly (gathered here padded, rank by rank), and a writeback keeps
  // f32 values unrounded.
  std::vector<std::vector<float>> want(kSpecs.size());
  for (size_t p = 0; p < kSpecs.size(); p++) {
    const ParamSpec &sp = kSpecs[p];
    int64_t re = RowElems(sp), c = Chunk(sp, n);
    std::vector<float> mine(c * re, 0.0f), all(c * re * n);
    const tpdp_tensor *t = tpdp_param_tensor(m.params[p]);
    std::memcpy(mine.data(), t->data, sizeof(float) * Rows(sp, rank, n) * re);
    tpdp_tensor s1 = tpdp_tensor_1d(mine.data(), TPDP_F32, c * re);
    tpdp_tensor a1 = tpdp_tensor_1d(all.data(), TPDP_F32, c * re * n);
    ASSERT_TPDP_OK(tpdp_allgather(tpdp_test::World(), &s1, &a1));
    for (int r = 0; r < n; r++)
      want[p].insert(want[p].end(), all.begin() + r * c * re,
                     all.begin() + (r * c + Rows(sp, r, n)) * re);
  }
  ASSERT_TPDP_OK(tpdp_fsdp_summon_full_params(u.root));
  for (size_t p = 0; p < kSpecs.size(); p++) {
    const tpdp_tensor *t = tpdp_param_tensor(m.params[p]);
    ASSERT_EQ(t->dtype, TPDP_F32) << "summoned param " << p;
    ASSERT_EQ(tpdp_tensor_numel(t), Numel(kSpecs[p]));
    float *x = static_cast<float *>(t->data);
    for (int64_t e = 0; e < Numel(kSpecs[p]); e++) {
      ASSERT_EQ(x[e], want[p][e]) << "summoned param " << p << " element " << e;
      x[e] += 1.0f / 3.0f;  // not a bf16 or f16 value near 1
    }
  }
  ASSERT_TPDP_OK(tpdp_fsdp_summon_end(u.root, 1));
  for (size_t p = 0; p < kSpecs.size(); p++) {
    const ParamSpec &sp = kSpecs[p];
    int64_t re = RowElems(sp), e0 = rank * Chunk(sp, n) * re;
    const tpdp_tensor *t = tpdp_param_tensor(m.params[p]);
    ASSERT_EQ(t->dtype, TPDP_F32);
    for (int64_t k = 0; k < Rows(sp, rank, n) * re; k++)
      ASSERT_EQ(static_cast<float *>(t->data)[k], want[p][e0 + k] + 1.0f / 3.0f)
          << "written back: param " << p << " element " << e0 + k;
  }
  tpdp_fsdp_stats st;
  ASSERT_TPDP_OK(tpdp_fsdp_get_stats(u.root, &st));
  int64_t s_all = Chunk(kSpecs[0], n) * RowElems(kSpecs[0]) +
                  2 * (Chunk(kSpecs[1], n) * RowElems(kSpecs[1]) +
                       Chunk(kSpecs[2], n) * RowElems(kSpecs[2]));
  EXPECT_EQ(st.bytes_reduce_scattered,
            (int64_t)tpdp_dtype_size(pr.reduce) * n * s_all);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, MixedPrecision,
                         ::testing::Values(Precision{TPDP_BF16, TPDP_BF16, 3},
                                           Precision{TPDP_BF16, TPDP_F32, 2},
                                           Precision{TPDP_F32, TPDP_BF16, 3},
                                           Precision{TPDP_F16, TPDP_F16, 1}));

}  // namespace
