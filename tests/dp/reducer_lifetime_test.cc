// SPDX-License-Identifier: BSD-3-Clause
// The reducer's lifetime: tpdp_reducer_destroy points the caller's
// params[i].grad back at the caller's own buffers (holding the last
// gradients), so nothing points into freed buckets and a reducer can be
// created again from the same array; a destroyed reducer is refused (a
// best-effort check, skipped under ASan and valgrind, which see the read of
// freed memory it makes on purpose).
#include <string>
#include <vector>

#include "tests/dp/reducer_model.h"
#include "tests/test_util.h"

using namespace reducer_model;  // NOLINT: the fixture of every test here

namespace {

// One synchronised step with this rank's gradients of `step`.
void Step(tpdp_reducer *r, Model &m, int rank, int step) {
  ASSERT_TPDP_OK(tpdp_reducer_prepare(r));
  WriteGrads(m, rank, step, false);
  MarkAll(r, kReverse);
  ASSERT_TPDP_OK(tpdp_reducer_finalize(r));
}

}  // namespace

TEST(ReducerLifetime, DestroyRestoresTheCallersGradientsAndRecreateWorks) {
  int rank = tpdp_test::WorldRank(), size = tpdp_test::WorldSize();
  Model m(rank);
  tpdp_reducer *r = Attach(m, Opts(1));
  ASSERT_NE(r, nullptr);
  for (int p = 0; p < kN; p++)  // view mode: re-pointed into the buckets
    ASSERT_NE(m.params[p].grad.data, (void *)m.gdata[p].data());
  Step(r, m, rank, 0);
  Step(r, m, rank, 1);  // the second prepare rebuilt the buckets
  EXPECT_EQ(tpdp_reducer_rebuilt(r), 1);
  ASSERT_TPDP_OK(tpdp_reducer_destroy(r));
  m.r = nullptr;  // Grad() reads params[p].grad again
  for (int p = 0; p < kN; p++) {
    EXPECT_EQ(m.params[p].grad.data, (void *)m.gdata[p].data()) << p;
    EXPECT_EQ(m.params[p].grad.ndim, m.params[p].param.ndim);
    for (int64_t i = 0; i < m.Numel(p); i++) {  // the last averages kept
      double want = Mean(AllRanks(size), p, i, {1});
      ASSERT_NEAR(m.gdata[p][i], want, 1e-6 * want) << p << " " << i;
    }
  }
  // The same array again: the restored buffers are read, not freed memory.
  r = Attach(m, Opts(1));
  ASSERT_NE(r, nullptr);
  EXPECT_NEAR(m.Grad(2)[3], Mean(AllRanks(size), 2, 3, {1}), 1e-5);
  Step(r, m, rank, 2);
  ExpectMean(m, AllRanks(size), {2});
  ASSERT_TPDP_OK(tpdp_reducer_destroy(r));
  for (int p = 0; p < kN; p++)
    EXPECT_EQ(m.params[p].grad.data, (void *)m.gdata[p].data()) << p;
}

// Gradients given as NULL (view mode allows it) are NULL again after
// destroy; copy mode never re-points them.
TEST(ReducerLifetime, NullGradientsAndCopyMode) {
  int rank = tpdp_test::WorldRank();
  Model m(rank);
  for (int p = 0; p < kN; p++) m.params[p].grad.data = nullptr;
  tpdp_reducer *r = Attach(m, Opts(1));
  ASSERT_NE(r, nullptr);
  EXPECT_NE(m.params[0].grad.data, nullptr);
  ASSERT_TPDP_OK(tpdp_reducer_destroy(r));
  for (int p = 0; p < kN; p++) EXPECT_EQ(m.params[p].grad.data, nullptr);

  Model c(rank);
  r = Attach(c, Opts(0));
  ASSERT_NE(r, nullptr);
  Step(r, c, rank, 0);
  ASSERT_TPDP_OK(tpdp_reducer_destroy(r));
  for (int p = 0; p < kN; p++)
    EXPECT_EQ(c.params[p].grad.data, (void *)c.gdata[p].data());
}

TEST(ReducerLifetime, DestroyedReducerIsRefused) {
  if (tpdp_test::FreedMemoryChecked())
    GTEST_SKIP() << "reads a freed reducer on purpose: not under ASan or "
                    "valgrind";
  Model m(tpdp_test::WorldRank());
  tpdp_reducer *r = Attach(m, Opts(1));
  ASSERT_NE(r, nullptr);
  ASSERT_TPDP_OK(tpdp_reducer_destroy(r));
  EXPECT_TPDP_ERROR(tpdp_reducer_destroy(r), TPDP_ERR_INVALID_ARGUMENT,
                    "tpdp_reducer_destroy: reducer",
                    "has been destroyed (tpdp_reducer_destroy)");
  EXPECT_TPDP_ERROR(tpdp_reducer_prepare(r), TPDP_ERR_INVALID_ARGUMENT,
                    "tpdp_reducer_prepare: reducer", "has been destroyed");
  EXPECT_TPDP_ERROR(tpdp_reducer_mark_ready(r, 0), TPDP_ERR_INVALID_ARGUMENT,
                    "has been destroyed");
  EXPECT_TPDP_ERROR(tpdp_reducer_finalize(r), TPDP_ERR_INVALID_ARGUMENT,
                    "has been destroyed");
  EXPECT_EQ(tpdp_reducer_num_buckets(r), 0);
}
