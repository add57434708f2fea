// SPDX-License-Identifier: BSD-3-Clause
// Multi-rank reducer tests: averaged gradients equal the mean computed here
// from a formula of (rank, parameter, element, micro-step), in every mode;
// bucket layouts checked against hand-worked assignments; every bad input;
// the module's training states; failures of memory (fault injection,
// core/util.h) leave a reducer that works; a one-rank communicator.
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/util.h"
#include "dp/reducer_internal.h"
#include "tests/dp/reducer_model.h"
#include "tests/test_util.h"

using namespace reducer_model;  // NOLINT: the fixture of every test here

TEST(Reducer, CreateBroadcastsParamsAndAssignsReversedBuckets) {
  int rank = tpdp_test::WorldRank();
  Model m(rank);
  tpdp_reducer_options o = Opts(1);
  tpdp_reducer *r = nullptr;
  ASSERT_TPDP_OK(
      tpdp_reducer_create(tpdp_test::World(), m.params.data(), kN, &o, &r));
  m.r = r;
  for (int p = 0; p < kN; p++)
    for (int64_t i = 0; i < m.Numel(p); i++)
      EXPECT_EQ(m.pdata[p][i], (float)(p * 10 + i))
          << "rank 0's value, param " << p;
  EXPECT_EQ(Buckets(r), kInitialBuckets);
  size_t bytes = 0, limit = 0;
  EXPECT_TPDP_OK(tpdp_reducer_bucket(r, 1, nullptr, nullptr, &bytes, &limit));
  EXPECT_EQ(bytes, 140u);
  EXPECT_EQ(limit, 100u);
  EXPECT_TPDP_OK(tpdp_reducer_bucket(r, 2, nullptr, nullptr, &bytes, &limit));
  EXPECT_EQ(bytes, 68u);
  EXPECT_EQ(limit, 64u);
  // View mode: params[p].grad now aliases the bucket slot.
  for (int p = 0; p < kN; p++) {
    tpdp_tensor v;
    EXPECT_TPDP_OK(tpdp_reducer_grad_view(r, p, &v));
    EXPECT_EQ(v.data, m.params[p].grad.data);
    EXPECT_NE(v.data, (void *)m.gdata[p].data());
  }
  // p2 and p3 share bucket 1: p3 starts 48 bytes after p2.
  EXPECT_EQ((char *)m.params[3].grad.data - (char *)m.params[2].grad.data, 48);
  EXPECT_TPDP_OK(tpdp_reducer_destroy(r));
}

TEST(Reducer, ViewModeKeepsInitialGradientValues) {
  int rank = tpdp_test::WorldRank();
  Model m(rank);
  m.gdata[2][3] = 7.5f;
  tpdp_reducer_options o = Opts(1);
  tpdp_reducer *r = nullptr;
  ASSERT_TPDP_OK(
      tpdp_reducer_create(tpdp_test::World(), m.params.data(), kN, &o, &r));
  m.r = r;
  EXPECT_EQ(m.Grad(2)[3], 7.5f);
  EXPECT_TPDP_OK(tpdp_reducer_destroy(r));
}

class ReducerModes : public ::testing::TestWithParam<int> {};  // 1 view, 0 copy

TEST_P(ReducerModes, AveragedGradientsOverThreeIterations) {
  int rank = tpdp_test::WorldRank(), size = tpdp_test::WorldSize();
  Model m(rank);
  tpdp_reducer_options o = Opts(GetParam());
  tpdp_reducer *r = nullptr;
  ASSERT_TPDP_OK(
      tpdp_reducer_create(tpdp_test::World(), m.params.data(), kN, &o, &r));
  m.r = r;
  for (int step = 0; step < 3; step++) {
    SyncStep(m, r, rank, size, step);
    if (!GetParam()) {
      for (int p = 0; p < kN; p++)
        EXPECT_EQ(m.params[p].grad.data, (void *)m.gdata[p].data());
    }
  }
  // Reverse order = initial launch order: the rebuild keeps the layout
  // except that p4 (64 B) alone reaches the first limit (64 B):
  // walk 5,4,3,2,1,0: p5 4, p4 -> 68 >= 64 closes {5,4}; p3 28, p2 76,
  // p1 96, p0 144 >= 100 closes {3,2,1,0}.
  EXPECT_EQ(tpdp_reducer_rebuilt(r), 1);
  std::vector<std::vector<int64_t>> want = {{5, 4}, {3, 2, 1, 0}};
  EXPECT_EQ(Buckets(r), want);
  EXPECT_TPDP_OK(tpdp_reducer_destroy(r));
}

// With every rank on one host the communication thread reduces the buckets
// in shared memory (comm/shm.c); TPDP_SHM=0 keeps them in the reducer's own
// memory and reduces through MPI. Both give the mean worked out here, before
// and after the rebuild, which moves view mode's gradients into the spare
// part of the segment.
TEST_P(ReducerModes, BucketsInSharedMemoryUnlessTurnedOff) {
  int rank = tpdp_test::WorldRank(), size = tpdp_test::WorldSize();
  for (int shm : {1, 0}) {
    SCOPED_TRACE(shm ? "shared memory" : "TPDP_SHM=0");
    if (!shm) setenv("TPDP_SHM", "0", 1);
    Model m(rank);
    tpdp_reducer_options o = Opts(GetParam());
    tpdp_reducer *r = nullptr;
    tpdp_status st =
        tpdp_reducer_create(tpdp_test::World(), m.params.data(), kN, &o, &r);
    unsetenv("TPDP_SHM");
    ASSERT_TPDP_OK(st);
    m.r = r;
    ASSERT_EQ(r->shm != nullptr, shm == 1);
    for (int step = 0; step < 3; step++) {
      SyncStep(m, r, rank, size, step);
      if (!shm) continue;
      const char *lo = static_cast<const char *>(comm_shm_region(r->shm));
      const char *hi = lo + comm_shm_bytes(r->shm);
      for (int64_t j = 0; j < r->nbuckets; j++) {
        const char *b = static_cast<const char *>(r->buckets[j].buf);
        EXPECT_TRUE(b >= lo && b + r->buckets[j].bytes <= hi)
            << "bucket " << j << " outside the segment, step " << step;
      }
    }
    EXPECT_EQ(tpdp_reducer_rebuilt(r), 1);
    EXPECT_TPDP_OK(tpdp_reducer_destroy(r));
  }
}

TEST_P(ReducerModes, NoSyncAccumulatesThreeMicroSteps) {
  int rank = tpdp_test::WorldRank(), size = tpdp_test::WorldSize();
  Model m(rank);
  tpdp_reducer_options o = Opts(GetParam());
  tpdp_reducer *r = nullptr;
  ASSERT_TPDP_OK(
      tpdp_reducer_create(tpdp_test::World(), m.params.data(), kN, &o, &r));
  m.r = r;
  for (int p = 0; p < kN; p++)
    for (int64_t i = 0; i < m.Numel(p); i++) m.Grad(p)[i] = 0.f;
  ASSERT_TPDP_OK(tpdp_reducer_set_sync(r, 0));
  for (int step = 0; step < 2; step++) {
    ASSERT_TPDP_OK(tpdp_reducer_prepare(r));
    WriteGrads(m, rank, step, true);
    MarkAll(r, kReverse);
    ASSERT_TPDP_OK(tpdp_reducer_finalize(r));
  }
  // Nothing communicated yet: the local sum of steps 0 and 1.
  for (int p = 0; p < kN; p++)
    for (int64_t i = 0; i < m.Numel(p); i++)
      EXPECT_EQ(m.Grad(p)[i], (float)(G(rank, p, i, 0) + G(rank, p, i, 1)));
  ASSERT_TPDP_OK(tpdp_reducer_set_sync(r, 1));
  ASSERT_TPDP_OK(tpdp_reducer_prepare(r));
  WriteGrads(m, rank, 2, true);
  MarkAll(r, kReverse);
  ASSERT_TPDP_OK(tpdp_reducer_finalize(r));
  ExpectMean(m, AllRanks(size), {0, 1, 2});
  EXPECT_TPDP_OK(tpdp_reducer_destroy(r));
}

TEST_P(ReducerModes, FindUnusedParameters) {
  int rank = tpdp_test::WorldRank(), size = tpdp_test::WorldSize();
  Model m(rank);
  tpdp_reducer_options o = Opts(GetParam());
  o.find_unused_parameters = 1;
  tpdp_reducer *r = nullptr;
  ASSERT_TPDP_OK(
      tpdp_reducer_create(tpdp_test::World(), m.params.data(), kN, &o, &r));
  m.r = r;
  for (int step = 0; step < 2; step++) {
    // Odd ranks never use p3 (its stale value must not count); even ranks do.
    for (int64_t i = 0; i < m.Numel(3); i++) m.Grad(3)[i] = 1000.f;
    ASSERT_TPDP_OK(tpdp_reducer_prepare(r));
    bool odd = rank % 2 == 1;
    WriteGrads(m, rank, step, false, odd ? 3 : -1);
    for (int p : kReverse)
      if (!(odd && p == 3)) EXPECT_TPDP_OK(tpdp_reducer_mark_ready(r, p));
    ASSERT_TPDP_OK(tpdp_reducer_finalize(r));
    ExpectMean(m, AllRanks(size), {step}, 1e-6, /*skip_param_on_odd=*/3);
    const int64_t *unused = nullptr;
    int64_t nunused = -1;
    EXPECT_TPDP_OK(tpdp_reducer_unused_params(r, &unused, &nunused));
    if (odd) {
      ASSERT_EQ(nunused, 1);
      EXPECT_EQ(unused[0], 3);
    } else {
      EXPECT_EQ(nunused, 0);
    }
  }
  // find_unused without static_graph: no rebuild (as DDP).
  EXPECT_EQ(tpdp_reducer_rebuilt(r), 0);
  EXPECT_TPDP_OK(tpdp_reducer_destroy(r));
}

TEST_P(ReducerModes, StaticGraphAllowsRepeatedHooks) {
  int rank = tpdp_test::WorldRank(), size = tpdp_test::WorldSize();
  Model m(rank);
  tpdp_reducer_options o = Opts(GetParam());
  o.static_graph = 1;
  tpdp_reducer *r = nullptr;
  ASSERT_TPDP_OK(
      tpdp_reducer_create(tpdp_test::World(), m.params.data(), kN, &o, &r));
  m.r = r;
  for (int step = 0; step < 3; step++) {
    ASSERT_TPDP_OK(tpdp_reducer_prepare(r));
    // p2's hook fires twice (reentrant backward): first a partial gradient.
    WriteGrads(m, rank, step, false);
    float keep = m.Grad(2)[0];
    m.Grad(2)[0] = -1.f;
    EXPECT_TPDP_OK(tpdp_reducer_mark_ready(r, 2));
    m.Grad(2)[0] = keep;
    MarkAll(r, kReverse);  // p2 again: its last mark
    ASSERT_TPDP_OK(tpdp_reducer_finalize(r));
    ExpectMean(m, AllRanks(size), {step});
  }
  // Third mark of p2: more than the static graph recorded.
  ASSERT_TPDP_OK(tpdp_reducer_prepare(r));
  EXPECT_TPDP_OK(tpdp_reducer_mark_ready(r, 2));
  EXPECT_TPDP_OK(tpdp_reducer_mark_ready(r, 2));
  EXPECT_TPDP_ERROR(tpdp_reducer_mark_ready(r, 2), TPDP_ERR_ALREADY,
                    "l1.weight", "static graph");
  MarkAll(r, {5, 4, 3, 1, 0});
  EXPECT_TPDP_OK(tpdp_reducer_finalize(r));
  EXPECT_EQ(tpdp_reducer_rebuilt(r), 1);
  EXPECT_TPDP_OK(tpdp_reducer_destroy(r));
}

// Rank 0 marks in order 4,1,5,0,3,2; other ranks in another order; all
// must rebuild with rank 0's. Walk 4,1,5,0,3,2 with limits 64/100:
// p4 64 >= 64 closes {4} (limit 64, then 100); p1 20, p5 24, p0 72,
// p3 100 >= 100 closes {1,5,0,3}; {2} left over (limit 100). No sort.
TEST(Reducer, RebuildFollowsRankZerosReadyOrder) {
  int rank = tpdp_test::WorldRank(), size = tpdp_test::WorldSize();
  Model m(rank);
  tpdp_reducer_options o = Opts(1);
  tpdp_reducer *r = nullptr;
  ASSERT_TPDP_OK(
      tpdp_reducer_create(tpdp_test::World(), m.params.data(), kN, &o, &r));
  m.r = r;
  ASSERT_TPDP_OK(tpdp_reducer_prepare(r));
  WriteGrads(m, rank, 0, false);
  if (rank == 0)
    MarkAll(r, {4, 1, 5, 0, 3, 2});
  else
    MarkAll(r, {0, 1, 2, 3, 4, 5});
  ASSERT_TPDP_OK(tpdp_reducer_finalize(r));
  ExpectMean(m, AllRanks(size), {0});
  EXPECT_EQ(tpdp_reducer_rebuilt(r), 0);
  ASSERT_TPDP_OK(tpdp_reducer_prepare(r));  // rebuilds here
  EXPECT_EQ(tpdp_reducer_rebuilt(r), 1);
  std::vector<std::vector<int64_t>> want = {{4}, {1, 5, 0, 3}, {2}};
  EXPECT_EQ(Buckets(r), want);
  size_t bytes = 0, limit = 0;
  EXPECT_TPDP_OK(tpdp_reducer_bucket(r, 1, nullptr, nullptr, &bytes, &limit));
  EXPECT_EQ(bytes, 100u);
  EXPECT_EQ(limit, 100u);
  // The averaged gradients moved into the new buffers with the views.
  ExpectMean(m, AllRanks(size), {0});
  EXPECT_EQ((char *)GradData(r, 5) - (char *)GradData(r, 1), 20);
  WriteGrads(m, rank, 1, false);
  MarkAll(r, {4, 1, 5, 0, 3, 2});
  ASSERT_TPDP_OK(tpdp_reducer_finalize(r));
  ExpectMean(m, AllRanks(size), {1});
  // Only once.
  ASSERT_TPDP_OK(tpdp_reducer_prepare(r));
  EXPECT_EQ(Buckets(r), want);
  MarkAll(r, kReverse);
  ASSERT_TPDP_OK(tpdp_reducer_finalize(r));
  EXPECT_TPDP_OK(tpdp_reducer_destroy(r));
}

namespace {
struct HookLog {
  std::vector<int64_t> buckets;
  int marks_seen = 0;
  std::vector<int> marks_at_call;
};
tpdp_status SumThenDivide(const tpdp_reducer_hook_args *a) {
  HookLog *log = (HookLog *)a->user_data;
  log->buckets.push_back(a->bucket);
  log->marks_at_call.push_back(log->marks_seen);
  tpdp_status st = tpdp_allreduce(a->comm, a->flat, a->flat, TPDP_OP_SUM);
  if (st != TPDP_SUCCESS) return st;
  float *x = (float *)a->flat->data;
  for (int64_t i = 0; i < tpdp_tensor_numel(a->flat); i++)
    x[i] = (float)(x[i] / a->divide_factor);
  return TPDP_SUCCESS;
}
tpdp_status FailingHook(const tpdp_reducer_hook_args *a) {
  (void)a;
  return TPDP_ERR_INTERNAL;
}
}  // namespace

// Buckets launch strictly in order: completing bucket 2 ({0,1}) first
// launches nothing; completing bucket 0 ({5}) launches 0; completing
// bucket 1 then launches 1 and 2 together.
TEST(Reducer, UserHookAndInOrderLaunch) {
  int rank = tpdp_test::WorldRank(), size = tpdp_test::WorldSize();
  Model m(rank);
  HookLog log;
  tpdp_reducer_options o = Opts(1);
  o.comm_hook = TPDP_REDUCER_HOOK_USER;
  o.hook_fn = SumThenDivide;
  o.hook_user_data = &log;
  tpdp_reducer *r = nullptr;
  ASSERT_TPDP_OK(
      tpdp_reducer_create(tpdp_test::World(), m.params.data(), kN, &o, &r));
  m.r = r;
  ASSERT_TPDP_OK(tpdp_reducer_prepare(r));
  WriteGrads(m, rank, 0, false);
  for (int p : {0, 1, 5, 2, 3, 4}) {
    EXPECT_TPDP_OK(tpdp_reducer_mark_ready(r, p));
    log.marks_seen++;
  }
  EXPECT_EQ(log.buckets, (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(log.marks_at_call, (std::vector<int>{2, 5, 5}));
  ASSERT_TPDP_OK(tpdp_reducer_finalize(r));
  ExpectMean(m, AllRanks(size), {0});
  EXPECT_TPDP_OK(tpdp_reducer_destroy(r));
}

TEST(Reducer, UserHookErrorIsReported) {
  int rank = tpdp_test::WorldRank();
  Model m(rank);
  tpdp_reducer_options o = Opts(1);
  o.comm_hook = TPDP_REDUCER_HOOK_USER;
  o.hook_fn = FailingHook;
  tpdp_reducer *r = nullptr;
  ASSERT_TPDP_OK(
      tpdp_reducer_create(tpdp_test::World(), m.params.data(), kN, &o, &r));
  m.r = r;
  ASSERT_TPDP_OK(tpdp_reducer_prepare(r));
  EXPECT_TPDP_ERROR(tpdp_reducer_mark_ready(r, 5), TPDP_ERR_INTERNAL,
                    "user comm hook failed on bucket 0");
  EXPECT_TPDP_OK(tpdp_reducer_destroy(r));
}

class ReducerHooks : public ::testing::TestWithParam<tpdp_reducer_hook> {};

TEST_P(ReducerHooks, CompressedMeanWithinTolerance) {
  int rank = tpdp_test::WorldRank(), size = tpdp_test::WorldSize();
  Model m(rank);
  tpdp_reducer_options o = Opts(1);
  o.comm_hook = GetParam();
  tpdp_reducer *r = nullptr;
  ASSERT_TPDP_OK(
      tpdp_reducer_create(tpdp_test::World(), m.params.data(), kN, &o, &r));
  m.r = r;
  for (int step = 0; step < 2; step++) {
    ASSERT_TPDP_OK(tpdp_reducer_prepare(r));
    WriteGrads(m, rank, step, false);
    MarkAll(r, kReverse);
    ASSERT_TPDP_OK(tpdp_reducer_finalize(r));
    // bf16 keeps 8 significant bits, f16 11: each rounding (cast, every
    // combine, cast back) adds at most 2^-9 resp. 2^-12 relative.
    double tol = GetParam() == TPDP_REDUCER_HOOK_BF16 ? 8.0 / 512 : 8.0 / 4096;
    ExpectMean(m, AllRanks(size), {step}, tol);
  }
  EXPECT_TPDP_OK(tpdp_reducer_destroy(r));
}

// 60000 is near f16's largest finite value (65504): summing before dividing
// would overflow to inf; the hook divides first.
TEST(Reducer, F16HookDividesBeforeReducing) {
  int rank = tpdp_test::WorldRank();
  Model m(rank);
  tpdp_reducer_options o = Opts(1);
  o.comm_hook = TPDP_REDUCER_HOOK_F16;
  tpdp_reducer *r = nullptr;
  ASSERT_TPDP_OK(
      tpdp_reducer_create(tpdp_test::World(), m.params.data(), kN, &o, &r));
  m.r = r;
  ASSERT_TPDP_OK(tpdp_reducer_prepare(r));
  for (int p = 0; p < kN; p++)
    for (int64_t i = 0; i < m.Numel(p); i++) m.Grad(p)[i] = 60000.f;
  MarkAll(r, kReverse);
  ASSERT_TPDP_OK(tpdp_reducer_finalize(r));
  for (int p = 0; p < kN; p++)
    for (int64_t i = 0; i < m.Numel(p); i++)
      EXPECT_NEAR(m.Grad(p)[i], 60000.f, 60.f);
  EXPECT_TPDP_OK(tpdp_reducer_destroy(r));
}

INSTANTIATE_TEST_SUITE_P(
    Compression, ReducerHooks,
    ::testing::Values(TPDP_REDUCER_HOOK_BF16, TPDP_REDUCER_HOOK_F16),
    [](const ::testing::TestParamInfo<tpdp_reducer_hook> &i) {
      return std::string(i.param == TPDP_REDUCER_HOOK_BF16 ? "Bf16" : "F16");
    });

TEST(Reducer, DivideFactorAndMarkByPointer) {
  int rank = tpdp_test::WorldRank(), size = tpdp_test::WorldSize();
  Model m(rank);
  tpdp_reducer_options o = Opts(0);
  o.divide_factor = 1.0;  // sum
  tpdp_reducer *r = nullptr;
  ASSERT_TPDP_OK(
      tpdp_reducer_create(tpdp_test::World(), m.params.data(), kN, &o, &r));
  m.r = r;
  ASSERT_TPDP_OK(tpdp_reducer_prepare(r));
  WriteGrads(m, rank, 0, false);
  for (int p : kReverse)
    EXPECT_TPDP_OK(tpdp_reducer_mark_ready_ptr(r, m.pdata[p].data()));
  ASSERT_TPDP_OK(tpdp_reducer_finalize(r));
  for (int p = 0; p < kN; p++)
    for (int64_t i = 0; i < m.Numel(p); i++)
      EXPECT_NEAR(m.Grad(p)[i], size * Mean(AllRanks(size), p, i, {0}), 1e-4);
  EXPECT_TPDP_OK(tpdp_reducer_destroy(r));
}

// The dp dim of a 2x2 mesh: world rank = dp * 2 + tp; the dp group of a
// rank is {tp, 2 + tp}. The mean is over that group only.
TEST(ReducerMesh, DpDimOf2x2Mesh) {
  if (tpdp_test::WorldSize() != 4) GTEST_SKIP() << "needs 4 ranks";
  int rank = tpdp_test::WorldRank();
  tpdp_mesh *mesh = nullptr;
  ASSERT_TPDP_OK(
      tpdp_mesh_create_from_string(tpdp_test::World(), "dp=2,tp=2", &mesh));
  tpdp_comm *dp = nullptr;
  ASSERT_TPDP_OK(tpdp_mesh_dim_comm_by_name(mesh, "dp", &dp));
  std::vector<int> group = {rank % 2, 2 + rank % 2};
  for (int view : {1, 0}) {
    Model m(rank);
    tpdp_reducer_options o = Opts(view);
    tpdp_reducer *r = nullptr;
    ASSERT_TPDP_OK(tpdp_reducer_create(dp, m.params.data(), kN, &o, &r));
    m.r = r;
    // Broadcast from dp rank 0 = world rank tp.
    EXPECT_EQ(m.pdata[1][2], (float)((rank % 2) * 100 + 10 + 2));
    for (int step = 0; step < 2; step++) {
      ASSERT_TPDP_OK(tpdp_reducer_prepare(r));
      WriteGrads(m, rank, step, false);
      MarkAll(r, kReverse);
      ASSERT_TPDP_OK(tpdp_reducer_finalize(r));
      ExpectMean(m, group, {step});
    }
    EXPECT_TPDP_OK(tpdp_reducer_destroy(r));
  }
  EXPECT_TPDP_OK(tpdp_mesh_destroy(mesh));
}

// A larger model over the default limits: many 250k-element parameters go
// through real multi-bucket async reductions.
TEST(Reducer, DefaultLimitsLargeBuckets) {
  int rank = tpdp_test::WorldRank(), size = tpdp_test::WorldSize();
  const int n = 8;
  const int64_t numel =
      250000;  // 1,000,000 B: buckets {0,1},{2..7} -> reversed
  std::vector<std::vector<float>> pd(n, std::vector<float>(numel)),
      gd(n, std::vector<float>(numel));
  std::vector<tpdp_reducer_param> ps(n);
  for (int p = 0; p < n; p++) {
    ps[p].param = tpdp_tensor_1d(pd[p].data(), TPDP_F32, numel);
    ps[p].grad = tpdp_tensor_1d(gd[p].data(), TPDP_F32, numel);
  }
  tpdp_reducer *r = nullptr;
  ASSERT_TPDP_OK(
      tpdp_reducer_create(tpdp_test::World(), ps.data(), n, nullptr, &r));
  ASSERT_EQ(tpdp_reducer_num_buckets(r), 2);
  ASSERT_TPDP_OK(tpdp_reducer_prepare(r));
  for (int p = n - 1; p >= 0; p--) {
    float *g = (float *)GradData(r, p);
    for (int64_t i = 0; i < numel; i++) g[i] = (float)G(rank, p, i, 0);
    EXPECT_TPDP_OK(tpdp_reducer_mark_ready(r, p));
  }
  ASSERT_TPDP_OK(tpdp_reducer_finalize(r));
  int bad = 0;
  for (int p = 0; p < n; p++) {
    const float *g = (const float *)GradData(r, p);
    for (int64_t i = 0; i < numel; i += 997)
      if (std::fabs(g[i] - Mean(AllRanks(size), p, i, {0})) > 1e-5) bad++;
  }
  EXPECT_EQ(bad, 0);
  EXPECT_TPDP_OK(tpdp_reducer_destroy(r));
}

// Large f32 buckets with the default divide factor (the size) are averaged
// by the allreduce itself (AVG: the MPI backend's ring divides while it
// reduces); another divide factor keeps the division pass. Both give the
// formula's mean (times size / factor), f32 and f64.
TEST(Reducer, LargeBucketsFusedAverageAndOtherDivideFactor) {
  int rank = tpdp_test::WorldRank(), size = tpdp_test::WorldSize();
  const int n = 4;
  const int64_t numel = 100003;  // 400 KB (f32) per parameter: one bucket
  for (tpdp_dtype dt : {TPDP_F32, TPDP_F64})
    for (double factor : {0.0, 2.0 * size})
      for (int thread : {1, 0}) {
        SCOPED_TRACE(std::string(tpdp_dtype_name(dt)) + " divide_factor " +
                     std::to_string(factor) + " comm_thread " +
                     std::to_string(thread));
        size_t es = tpdp_dtype_size(dt);
        std::vector<std::vector<char>> pd(n, std::vector<char>(numel * es)),
            gd(n, std::vector<char>(numel * es));
        std::vector<tpdp_reducer_param> ps(n);
        for (int p = 0; p < n; p++) {
          ps[p].param = tpdp_tensor_1d(pd[p].data(), dt, numel);
          ps[p].grad = tpdp_tensor_1d(gd[p].data(), dt, numel);
          ps[p].fqn = nullptr;
        }
        tpdp_reducer_options o = tpdp_reducer_options_default();
        o.divide_factor = factor;
        o.comm_thread = thread;
        tpdp_reducer *r = nullptr;
        ASSERT_TPDP_OK(
            tpdp_reducer_create(tpdp_test::World(), ps.data(), n, &o, &r));
        for (int step = 0; step < 2; step++) {
          ASSERT_TPDP_OK(tpdp_reducer_prepare(r));
          for (int p = n - 1; p >= 0; p--) {
            void *gp = GradData(r, p);  // moved by the rebuild (step 1)
            for (int64_t i = 0; i < numel; i++) {
              double v = G(rank, p, i, step);
              if (dt == TPDP_F32)
                ((float *)gp)[i] = (float)v;
              else
                ((double *)gp)[i] = v;
            }
            EXPECT_TPDP_OK(tpdp_reducer_mark_ready(r, p));
          }
          ASSERT_TPDP_OK(tpdp_reducer_finalize(r));
          double scale = factor > 0 ? size / factor : 1.0;
          int64_t bad = 0;
          for (int p = 0; p < n; p++) {
            const void *gp = GradData(r, p);
            for (int64_t i = 0; i < numel; i++) {
              double g = dt == TPDP_F32 ? ((const float *)gp)[i]
                                        : ((const double *)gp)[i];
              double want = scale * Mean(AllRanks(size), p, i, {step});
              if (std::fabs(g - want) > 1e-6 * std::max(1.0, std::fabs(want)))
                bad++;
            }
          }
          EXPECT_EQ(bad, 0) << "step " << step;
        }
        EXPECT_TPDP_OK(tpdp_reducer_destroy(r));
      }
}

// ------------------------------------------------------------ bad input

TEST(ReducerErrors, CreateRejectsBadParameterLists) {
  int rank = tpdp_test::WorldRank();
  tpdp_comm *w = tpdp_test::World();
  tpdp_reducer *r = nullptr;
  tpdp_reducer_options o = Opts(1);
  {
    Model m(rank);
    EXPECT_TPDP_ERROR(tpdp_reducer_create(w, m.params.data(), 0, &o, &r),
                      TPDP_ERR_INVALID_ARGUMENT, "empty parameter list");
    EXPECT_EQ(r, nullptr);
  }
  {
    Model m(rank);
    m.params[4].param.data = m.params[1].param.data;
    EXPECT_TPDP_ERROR(tpdp_reducer_create(w, m.params.data(), kN, &o, &r),
                      TPDP_ERR_DUPLICATE, "duplicate parameter",
                      "1 ('l0.bias')", "4 ('head.weight')");
  }
  {
    Model m(rank);
    m.params[3].param.device = {TPDP_DEVICE_CUDA, 0};
    m.params[3].grad.device = {TPDP_DEVICE_CUDA, 0};
    EXPECT_TPDP_ERROR(tpdp_reducer_create(w, m.params.data(), kN, &o, &r),
                      TPDP_ERR_DEVICE_MISMATCH, "mixed devices",
                      "'l1.bias' is on cuda:0", "'l0.weight' is on cpu");
  }
  {
    Model m(rank);
    for (auto &p : m.params)
      p.param.device = p.grad.device = {TPDP_DEVICE_CUDA, 0};
#ifdef TPDP_WITH_CUDA
    // Device buffers are built: the MPI communicator is what refuses them.
    EXPECT_TPDP_ERROR(tpdp_reducer_create(w, m.params.data(), kN, &o, &r),
                      TPDP_ERR_DEVICE_MISMATCH, "cuda:0", "moves host memory");
#else
    EXPECT_TPDP_ERROR(tpdp_reducer_create(w, m.params.data(), kN, &o, &r),
                      TPDP_ERR_UNSUPPORTED, "cuda:0", "not built");
#endif
  }
  {
    Model m(rank);
    tpdp_reducer_options z = Opts(1);
    z.bucket_cap_bytes = 0;
    EXPECT_TPDP_ERROR(tpdp_reducer_create(w, m.params.data(), kN, &z, &r),
                      TPDP_ERR_INVALID_ARGUMENT, "bucket_cap_bytes = 0", "> 0");
    z = Opts(1);
    z.first_bucket_bytes = 0;
    EXPECT_TPDP_ERROR(tpdp_reducer_create(w, m.params.data(), kN, &z, &r),
                      TPDP_ERR_INVALID_ARGUMENT, "first_bucket_bytes = 0");
    z = Opts(1);
    z.comm_hook = TPDP_REDUCER_HOOK_USER;
    EXPECT_TPDP_ERROR(tpdp_reducer_create(w, m.params.data(), kN, &z, &r),
                      TPDP_ERR_INVALID_ARGUMENT, "hook_fn is NULL");
    z = Opts(1);
    z.divide_factor = -2;
    EXPECT_TPDP_ERROR(tpdp_reducer_create(w, m.params.data(), kN, &z, &r),
                      TPDP_ERR_INVALID_ARGUMENT, "divide_factor");
  }
  {
    Model m(rank);
    m.params[2].param.dtype = m.params[2].grad.dtype = TPDP_I32;
    EXPECT_TPDP_ERROR(tpdp_reducer_create(w, m.params.data(), kN, &o, &r),
                      TPDP_ERR_DTYPE_MISMATCH, "'l1.weight'", "floating point");
  }
  {
    Model m(rank);
    m.params[1].grad.shape[0] = 4;
    EXPECT_TPDP_ERROR(tpdp_reducer_create(w, m.params.data(), kN, &o, &r),
                      TPDP_ERR_SHAPE_MISMATCH, "'l0.bias'", "[5]", "[4]");
  }
  EXPECT_EQ(r, nullptr);
}

TEST(ReducerErrors, RanksDisagree) {
  int rank = tpdp_test::WorldRank(), size = tpdp_test::WorldSize();
  tpdp_comm *w = tpdp_test::World();
  tpdp_reducer *r = nullptr;
  tpdp_reducer_options o = Opts(1);
  const std::string last = "rank " + std::to_string(size - 1);
  const std::string shape_msg = last + " has f32 [2, 6]";
  const std::string dtype_msg = last + " has f64";
  const std::string count_msg = last + " has 5";
  {
    // The last rank's l1.weight is [2, 6] instead of [2, 3, 2].
    Model m(rank);
    if (rank == size - 1) {
      m.params[2].param.ndim = m.params[2].grad.ndim = 2;
      m.params[2].param.shape[1] = m.params[2].grad.shape[1] = 6;
      m.params[2].param.strides[0] = m.params[2].grad.strides[0] = 6;
      m.params[2].param.strides[1] = m.params[2].grad.strides[1] = 1;
    }
    EXPECT_TPDP_ERROR(tpdp_reducer_create(w, m.params.data(), kN, &o, &r),
                      TPDP_ERR_SHAPE_MISMATCH,
                      "parameter 2 'l1.weight' differs across ranks",
                      "rank 0 has f32 [2, 3, 2]", shape_msg.c_str());
  }
  {
    Model m(rank);
    if (rank == size - 1)
      m.params[4].param.dtype = m.params[4].grad.dtype = TPDP_F64;
    EXPECT_TPDP_ERROR(tpdp_reducer_create(w, m.params.data(), kN, &o, &r),
                      TPDP_ERR_DTYPE_MISMATCH, "parameter 4 'head.weight'",
                      "rank 0 has f32", dtype_msg.c_str());
  }
  {
    Model m(rank);
    int n = rank == size - 1 ? kN - 1 : kN;
    EXPECT_TPDP_ERROR(tpdp_reducer_create(w, m.params.data(), n, &o, &r),
                      TPDP_ERR_SHAPE_MISMATCH, "parameter count differs",
                      count_msg.c_str());
  }
  {
    // Only rank 0 has a duplicate: every rank fails with its message,
    // none hangs.
    Model m(rank);
    if (rank == 0) m.params[5].param.data = m.params[0].param.data;
    const std::string from0 =
        std::string(" (rank 0 of ") + tpdp_comm_name(w) + ")";
    EXPECT_TPDP_ERROR(tpdp_reducer_create(w, m.params.data(), kN, &o, &r),
                      TPDP_ERR_DUPLICATE, "duplicate parameter", from0.c_str());
  }
  EXPECT_EQ(r, nullptr);
}

TEST(ReducerErrors, IterationMisuse) {
  int rank = tpdp_test::WorldRank();
  Model m(rank);
  tpdp_reducer_options o = Opts(1);
  tpdp_reducer *r = nullptr;
  ASSERT_TPDP_OK(
      tpdp_reducer_create(tpdp_test::World(), m.params.data(), kN, &o, &r));
  m.r = r;
  EXPECT_TPDP_ERROR(tpdp_reducer_finalize(r), TPDP_ERR_STATE,
                    "finalize without prepare");
  EXPECT_TPDP_ERROR(tpdp_reducer_mark_ready(r, 0), TPDP_ERR_STATE,
                    "'l0.weight'", "outside an iteration");
  ASSERT_TPDP_OK(tpdp_reducer_prepare(r));
  EXPECT_TPDP_ERROR(tpdp_reducer_mark_ready(r, kN), TPDP_ERR_NOT_FOUND,
                    "unknown parameter index 6", "6 parameters");
  EXPECT_TPDP_ERROR(tpdp_reducer_mark_ready(r, -1), TPDP_ERR_NOT_FOUND,
                    "index -1");
  int stranger = 0;
  EXPECT_TPDP_ERROR(tpdp_reducer_mark_ready_ptr(r, &stranger),
                    TPDP_ERR_NOT_FOUND, "no parameter", "data pointer");
  EXPECT_TPDP_ERROR(tpdp_reducer_set_sync(r, 0), TPDP_ERR_STATE,
                    "inside an iteration");
  EXPECT_TPDP_OK(tpdp_reducer_mark_ready(r, 1));
  EXPECT_TPDP_ERROR(tpdp_reducer_mark_ready(r, 1), TPDP_ERR_ALREADY,
                    "parameter 1 ('l0.bias') was marked ready twice", "shared",
                    "reentrant backward", "static_graph");
  // Never marking p3 (and the rest): finalize names them and keeps the
  // iteration open; a new prepare does too.
  MarkAll(r, {5, 4, 2, 0});
  EXPECT_TPDP_ERROR(tpdp_reducer_finalize(r), TPDP_ERR_STATE,
                    "never marked ready", "3 ('l1.bias')",
                    "find_unused_parameters");
  EXPECT_TPDP_ERROR(tpdp_reducer_prepare(r), TPDP_ERR_STATE,
                    "before the previous reduction finished", "3 ('l1.bias')");
  // Recovery: mark it and finalize.
  EXPECT_TPDP_OK(tpdp_reducer_mark_ready(r, 3));
  EXPECT_TPDP_OK(tpdp_reducer_finalize(r));
  EXPECT_TPDP_ERROR(tpdp_reducer_finalize(r), TPDP_ERR_STATE,
                    "without prepare");
  EXPECT_TPDP_OK(tpdp_reducer_destroy(r));
}

// The reducer keeps a copy of the parameter array: the caller may
// overwrite its own as soon as create returns (here: scribbled over), in
// view and in copy mode; marking by pointer still finds the parameters. In
// view mode the array stays allocated: destroy writes the caller's
// gradient buffers back into its grad fields.
TEST_P(ReducerModes, CreateCopiesTheParamsArray) {
  int rank = tpdp_test::WorldRank(), size = tpdp_test::WorldSize();
  Model m(rank);
  tpdp_reducer_options o = Opts(GetParam());
  tpdp_reducer *r = Attach(m, o);
  ASSERT_NE(r, nullptr);
  std::vector<char> fqn_storage(m.params.size());
  for (auto &p : m.params) {
    std::memset(&p, 0xA5, sizeof p);
    p.fqn = fqn_storage.data();
  }
  for (int step = 0; step < 3; step++) {
    ASSERT_TPDP_OK(tpdp_reducer_prepare(r));
    WriteGrads(m, rank, step, false);
    for (int p : kReverse)
      EXPECT_TPDP_OK(tpdp_reducer_mark_ready_ptr(r, m.pdata[p].data()));
    ASSERT_TPDP_OK(tpdp_reducer_finalize(r));
    ExpectMean(m, AllRanks(size), {step});
  }
  if (!GetParam()) {  // copy mode: the averages land in the caller's buffers
    for (int p = 0; p < kN; p++) EXPECT_EQ(m.Grad(p), m.gdata[p].data());
  }
  // Messages still name the parameters (the FQNs were copied too).
  ASSERT_TPDP_OK(tpdp_reducer_prepare(r));
  EXPECT_TPDP_OK(tpdp_reducer_mark_ready(r, 2));
  EXPECT_TPDP_ERROR(tpdp_reducer_mark_ready(r, 2), TPDP_ERR_ALREADY,
                    "2 ('l1.weight')");
  MarkAll(r, {5, 4, 3, 1, 0});
  EXPECT_TPDP_OK(tpdp_reducer_finalize(r));
  EXPECT_TPDP_OK(tpdp_reducer_destroy(r));
  if (GetParam()) {
    for (int p = 0; p < kN; p++) {
      EXPECT_EQ(m.params[p].grad.data, (void *)m.gdata[p].data());
    }
  }
}

// Without the communication thread the reducer uses non-blocking
// collectives from the caller's thread: same averages.
TEST(Reducer, NonBlockingPathWithoutCommThread) {
  int rank = tpdp_test::WorldRank(), size = tpdp_test::WorldSize();
  Model m(rank);
  tpdp_reducer_options o = Opts(1);
  o.comm_thread = 0;
  tpdp_reducer *r = nullptr;
  ASSERT_TPDP_OK(
      tpdp_reducer_create(tpdp_test::World(), m.params.data(), kN, &o, &r));
  m.r = r;
  for (int step = 0; step < 3; step++) {
    ASSERT_TPDP_OK(tpdp_reducer_prepare(r));
    WriteGrads(m, rank, step, false);
    MarkAll(r, kReverse);
    ASSERT_TPDP_OK(tpdp_reducer_finalize(r));
    ExpectMean(m, AllRanks(size), {step});
  }
  EXPECT_TPDP_OK(tpdp_reducer_destroy(r));
}

// With the communication thread a bucket is reduced while the caller's
// thread is still "in backward": the first bucket ({5}) reaches its average
// before finalize is called.
TEST(Reducer, BucketReducedBeforeFinalizeOnCommThread) {
  if (!tpdp_comm_concurrent_threads(tpdp_test::World()))
    GTEST_SKIP() << "MPI was not initialised with MPI_THREAD_MULTIPLE";
  int rank = tpdp_test::WorldRank(), size = tpdp_test::WorldSize();
  Model m(rank);
  tpdp_reducer_options o = Opts(1);
  tpdp_reducer *r = nullptr;
  ASSERT_TPDP_OK(
      tpdp_reducer_create(tpdp_test::World(), m.params.data(), kN, &o, &r));
  m.r = r;
  ASSERT_TPDP_OK(tpdp_reducer_prepare(r));
  WriteGrads(m, rank, 0, false);
  EXPECT_TPDP_OK(tpdp_reducer_mark_ready(r, 5));  // bucket {5} launches
  double want = Mean(AllRanks(size), 5, 0, {0});
  bool reduced = false;
  for (int i = 0; i < 1000 && !reduced; i++) {  // up to 10 s
    volatile float *g = m.Grad(5);  // written by the reducer's thread
    reduced = std::fabs(g[0] - want) < 1e-6 * std::max(1.0, std::fabs(want));
    if (!reduced) usleep(10000);
  }
  EXPECT_TRUE(reduced) << "bucket {5} was not reduced before finalize";
  MarkAll(r, {4, 3, 2, 1, 0});
  ASSERT_TPDP_OK(tpdp_reducer_finalize(r));
  ExpectMean(m, AllRanks(size), {0});
  EXPECT_TPDP_OK(tpdp_reducer_destroy(r));
}

// Where the time went: the parts add up to at most the total.
TEST(Reducer, StatsAccountForTheTime) {
  int rank = tpdp_test::WorldRank();
  Model m(rank);
  tpdp_reducer_options o = Opts(0);
  tpdp_reducer *r = nullptr;
  ASSERT_TPDP_OK(
      tpdp_reducer_create(tpdp_test::World(), m.params.data(), kN, &o, &r));
  m.r = r;
  for (int step = 0; step < 2; step++) {
    ASSERT_TPDP_OK(tpdp_reducer_prepare(r));
    WriteGrads(m, rank, step, false);
    MarkAll(r, kReverse);
    ASSERT_TPDP_OK(tpdp_reducer_finalize(r));
  }
  tpdp_reducer_stats s;
  ASSERT_TPDP_OK(tpdp_reducer_get_stats(r, &s));
  EXPECT_EQ(s.iterations, 2);
  EXPECT_GT(s.total_seconds, 0.0);
  EXPECT_GT(s.comm_seconds, 0.0);
  EXPECT_GT(s.data_seconds, 0.0);  // copy mode copies in and out
  EXPECT_LE(s.comm_seconds + s.data_seconds, s.total_seconds * 1.0001);
  EXPECT_TPDP_ERROR(tpdp_reducer_get_stats(nullptr, &s), TPDP_ERR_NULL_POINTER,
                    "r");
  EXPECT_TPDP_OK(tpdp_reducer_destroy(r));
}

// ------------------------------------------------------ failures of memory
// (fault injection of core/util.h, armed alike on every rank)

// create short of memory at each of its allocations in turn fails on every
// rank (no rank left waiting in a collective), returns no reducer and
// frees what it made; then it succeeds.
TEST(ReducerFaults, CreateShortOfMemoryFailsEveryRankCleanly) {
  int rank = tpdp_test::WorldRank(), size = tpdp_test::WorldSize();
  for (int view : {1, 0}) {
    int failures = 0;
    for (long n = 1; n < 200; n++) {
      Model m(rank);
      tpdp_reducer_options o = Opts(view);
      o.comm_hook = TPDP_REDUCER_HOOK_BF16;  // its arena too
      tpdp_reducer *r = nullptr;
      core_alloc_fail_at(n, 0);
      tpdp_status st =
          tpdp_reducer_create(tpdp_test::World(), m.params.data(), kN, &o, &r);
      core_alloc_fail_at(0, 0);
      if (st == TPDP_SUCCESS) {
        m.r = r;
        for (int step = 0; step < 2; step++) {
          ASSERT_TPDP_OK(tpdp_reducer_prepare(r));
          WriteGrads(m, rank, step, false);
          MarkAll(r, kReverse);
          ASSERT_TPDP_OK(tpdp_reducer_finalize(r));
          ExpectMean(m, AllRanks(size), {step}, 8.0 / 512);
        }
        EXPECT_TPDP_OK(tpdp_reducer_destroy(r));
        break;
      }
      failures++;
      EXPECT_EQ(st, TPDP_ERR_OUT_OF_MEMORY)
          << "allocation " << n << ": " << tpdp_last_error();
      EXPECT_EQ(r, nullptr);
      // The caller's array is untouched by a failed create.
      for (int p = 0; p < kN; p++)
        EXPECT_EQ(m.params[p].grad.data, (void *)m.gdata[p].data());
    }
    EXPECT_GE(failures, 10) << (view ? "view" : "copy");
  }
}

// destroy returns the first failure while still freeing everything: here a
// bucket's allreduce failed on the communication thread in an iteration
// that was never finalized.
TEST(ReducerFaults, DestroyReturnsTheFirstFailure) {
  if (!tpdp_comm_concurrent_threads(tpdp_test::World()))
    GTEST_SKIP() << "MPI was not initialised with MPI_THREAD_MULTIPLE";
  int rank = tpdp_test::WorldRank();
  Model m(rank);
  tpdp_reducer_options o = Opts(1);
  tpdp_reducer *r = Attach(m, o);
  ASSERT_NE(r, nullptr);
  ASSERT_TPDP_OK(tpdp_reducer_prepare(r));
  WriteGrads(m, rank, 0, false);
  // The next allocation of any thread: the communication thread's
  // allreduce of bucket 0, which p5 launches.
  core_alloc_fail_at(1, 1);
  EXPECT_TPDP_OK(tpdp_reducer_mark_ready(r, 5));
  EXPECT_TPDP_ERROR(tpdp_reducer_destroy(r), TPDP_ERR_OUT_OF_MEMORY,
                    "tpdp_reducer_destroy: bucket 0 failed on the reducer's "
                    "communication thread",
                    "out of memory");
  core_alloc_fail_at(0, 1);
}

INSTANTIATE_TEST_SUITE_P(ViewAndCopy, ReducerModes, ::testing::Values(1, 0),
                         [](const ::testing::TestParamInfo<int> &i) {
                           return std::string(i.param ? "View" : "Copy");
                         });
