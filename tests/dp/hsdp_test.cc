// SPDX-License-Identifier: BSD-3-Clause
// Hybrid sharding (tpdp_fully_shard_options.replicate): the world's N ranks
// laid out as R replica groups of S consecutive ranks (world rank w =
// r * S + s), the units sharding over each group's dp communicator and
// all-reducing over the replicate one. Every rank's gradient shard and
// parameters are checked against the mean over all N ranks computed here
// from the gradient formulas (fsdp_model.h), at each level, with
// accumulation, mixed precision, the norm of the full gradient, the
// collectives' bytes from the shapes, the persistent bytes with S in
// place of N, the agreement errors and a caller built against version 2.
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tests/dp/fsdp_model.h"
#include "tests/test_util.h"

namespace {

using namespace fsdp_model;  // NOLINT: the model every test here drives

struct Mesh {
  int R = 1, S = 1, w = 0, r = 0, s = 0;
  tpdp_comm *dp = nullptr, *rep = nullptr;
  explicit Mesh(int replicas) {
    int n = tpdp_test::WorldSize();
    R = replicas;
    S = n / R;
    w = tpdp_test::WorldRank();
    r = w / S;
    s = w % S;
    EXPECT_TPDP_OK(tpdp_comm_split(tpdp_test::World(), r, w, &dp));
    EXPECT_TPDP_OK(tpdp_comm_split(tpdp_test::World(), s, w, &rep));
    EXPECT_EQ(tpdp_comm_size(dp), S);
    EXPECT_EQ(tpdp_comm_size(rep), R);
    EXPECT_EQ(tpdp_comm_rank(dp), s);
  }
  ~Mesh() {
    EXPECT_TPDP_OK(tpdp_comm_destroy(dp));
    EXPECT_TPDP_OK(tpdp_comm_destroy(rep));
  }
};

struct Config {
  int level = 3;
  tpdp_dtype param = TPDP_F32, reduce = TPDP_F32;
  bool mixed() const { return param != TPDP_F32 || reduce != TPDP_F32; }
};

Units ShardHybrid(Model &m, const Mesh &mesh, const Config &c) {
  Units u;
  tpdp_fully_shard_options o = tpdp_fully_shard_options_default();
  o.zero_level = c.level;
  o.param_dtype = c.param;
  o.reduce_dtype = c.reduce;
  o.replicate = mesh.rep;
  for (int b = 0; b < 2; b++)
    EXPECT_TPDP_OK(tpdp_fully_shard(m.blocks[b], mesh.dp, &o, &u.block[b]));
  EXPECT_TPDP_OK(tpdp_fully_shard(m.root, mesh.dp, &o, &u.root));
  return u;
}

// The mean over all world ranks of the gradients element e of parameter p
// gets in this step (each rank's micro-batch sum, rounded to param_dtype
// where it is written in that dtype).
double MeanGrad(int step, int micro, int p, int64_t e, tpdp_dtype pdt) {
  int n = tpdp_test::WorldSize();
  double mean = 0;
  for (int w = 0; w < n; w++) {
    float sum = 0;
    for (int mb = 0; mb < micro; mb++)
      sum = RoundTo(pdt, sum + Grad(step, mb, w, p, e));
    mean += sum;
  }
  return mean / n;
}

void AddGradAs(const Model &m, int p, int step, int mb, int w) {
  const tpdp_tensor *g = tpdp_param_grad(m.params[p]);
  ASSERT_NE(g, nullptr);
  ASSERT_EQ(tpdp_tensor_numel(g), Numel(kSpecs[p])) << "full gradient";
  for (int64_t e = 0; e < Numel(kSpecs[p]); e++)
    Store(g, e, Load(g, e) + Grad(step, mb, w, p, e));
}

// Every element of parameter p's full view (param_dtype) against the
// reference rounded to it.
// Tolerance: exact f32 steps, else the roundings of mixed precision.
void ExpectFullAs(const Model &m, int p, tpdp_dtype pdt, bool mixed,
                  const char *when) {
  const tpdp_tensor *t = tpdp_param_tensor(m.params[p]);
  ASSERT_EQ(t->shape[0], kSpecs[p].shape[0]) << when;
  for (int64_t e = 0; e < Numel(kSpecs[p]); e++)
    ASSERT_NEAR(Load(t, e), RoundTo(pdt, (float)m.ref[p][e]),
                mixed ? 1e-2 * (1 + std::fabs(m.ref[p][e])) : 1e-5)
        << "param " << p << " element " << e << " " << when;
}

struct StepResult {
  uint64_t rep_bytes_before_sync = 0, rep_bytes = 0;
  double local_sumsq = 0, expected_sumsq = 0;
};

// One step as a framework runs it, with `micro` micro-batches (sync off for
// all but the last); checks every rank's gradient shard against the mean
// over all N ranks, then SGD on the shard and on the reference.
void HybridStep(Model &m, Units &u, const Mesh &mesh, const Config &c, int step,
                int micro, StepResult *res) {
  ASSERT_TPDP_OK(tpdp_comm_traffic_reset(mesh.rep));
  for (int mb = 0; mb < micro; mb++) {
    ASSERT_TPDP_OK(
        tpdp_fsdp_set_requires_gradient_sync(u.root, mb == micro - 1));
    ASSERT_TPDP_OK(tpdp_module_forward_begin(m.root));
    ExpectFullAs(m, 0, c.param, c.mixed(), "root forward");
    for (int b = 0; b < 2; b++) {
      ASSERT_TPDP_OK(tpdp_module_forward_begin(m.blocks[b]));
      ExpectFullAs(m, 1 + 2 * b, c.param, c.mixed(), "block forward");
      ASSERT_TPDP_OK(tpdp_module_forward_end(m.blocks[b]));
    }
    ASSERT_TPDP_OK(tpdp_module_forward_end(m.root));
    ASSERT_TPDP_OK(tpdp_module_backward_begin(m.root));
    AddGradAs(m, 0, step, mb, mesh.w);
    for (int b = 1; b >= 0; b--) {
      ASSERT_TPDP_OK(tpdp_module_backward_begin(m.blocks[b]));
      AddGradAs(m, 1 + 2 * b, step, mb, mesh.w);
      AddGradAs(m, 2 + 2 * b, step, mb, mesh.w);
      ASSERT_TPDP_OK(tpdp_module_backward_end(m.blocks[b]));
    }
    ASSERT_TPDP_OK(tpdp_module_backward_end(m.root));
    if (mb < micro - 1) {
      tpdp_comm_traffic t;
      ASSERT_TPDP_OK(tpdp_comm_traffic_get(mesh.rep, &t));
      res->rep_bytes_before_sync += t.bytes;
    }
  }
  ASSERT_TPDP_OK(tpdp_fsdp_finalize(u.root));
  tpdp_comm_traffic t;
  ASSERT_TPDP_OK(tpdp_comm_traffic_get(mesh.rep, &t));
  res->rep_bytes = t.bytes;
  // bf16/f16 reductions round the mean: the reduce-scatter's result once,
  // then the all-reduce over the replicas in reduce_dtype (each partial
  // sum and the division: three times more at R = 3).
  const double tol = c.reduce == TPDP_BF16  ? 8e-3
                     : c.reduce == TPDP_F16 ? 1e-3
                                            : 1e-5;
  for (size_t p = 0; p < kSpecs.size(); p++) {
    const ParamSpec &sp = kSpecs[p];
    int64_t re = RowElems(sp), rows = Rows(sp, mesh.s, mesh.S);
    int64_t e0 = mesh.s * Chunk(sp, mesh.S) * re;
    const tpdp_tensor *g = tpdp_param_grad(m.params[p]);
    const tpdp_tensor *tt = tpdp_param_tensor(m.params[p]);
    ASSERT_EQ(g->shape[0], rows);
    ASSERT_EQ(tt->shape[0], rows);
    float *gx = static_cast<float *>(g->data);
    float *tx = static_cast<float *>(tt->data);
    for (int64_t k = 0; k < rows * re; k++) {
      double mean = MeanGrad(step, micro, (int)p, e0 + k, c.param);
      ASSERT_NEAR(gx[k], mean, tol * (1 + std::fabs(mean)))
          << "param " << p << " element " << e0 + k << " step " << step
          << " rank " << mesh.w << " (r " << mesh.r << ", s " << mesh.s << ")";
      res->local_sumsq += (double)gx[k] * gx[k];
      tx[k] -= (float)kLr * gx[k];
    }
    for (int64_t e = 0; e < Numel(sp); e++) {
      double mean = MeanGrad(step, micro, (int)p, e, c.param);
      res->expected_sumsq += mean * mean;
      m.ref[p][e] -= kLr * mean;
    }
  }
}

// Three steps at (R, S) = (replicas, N / replicas), checked as above, plus
// per step: the replicate traffic (one ring all-reduce of each unit's
// padded shard, none while accumulating) and the dp all-gathers (their
// count by level, each of S padded shards); persistent bytes by the ZeRO
// formula over S.
void RunHybrid(int replicas, const Config &c, int micro) {
  int n = tpdp_test::WorldSize();
  if (n % replicas != 0) GTEST_SKIP() << n << " ranks, " << replicas;
  Mesh mesh(replicas);
  Model m;
  Units u = ShardHybrid(m, mesh, c);
  ASSERT_NE(u.root, nullptr) << tpdp_last_error();
  uint64_t want_rep = 0;
  int64_t want_allreduced = 0;  // tpdp_fsdp_stats: the shards' bytes
  int64_t shard_total = 0, full_total = 0, gathered = 0;
  for (const std::vector<int> &unit : kUnitParams) {
    int64_t se = ShardElems(unit, mesh.S);
    shard_total += se;
    for (int p : unit) full_total += Numel(kSpecs[p]);
    // in reduce_dtype (FSDP2's HSDP reduces the shard as it came)
    want_rep +=
        RingAllreduceBytes(se, mesh.R, mesh.r, (int)tpdp_dtype_size(c.reduce));
    want_allreduced += se * (int64_t)tpdp_dtype_size(c.reduce);
    gathered += se * mesh.S;
  }
  int psize = (int)tpdp_dtype_size(c.param);
  for (int step = 0; step < 3; step++) {
    StepResult res;
    HybridStep(m, u, mesh, c, step, micro, &res);
    if (::testing::Test::HasFatalFailure()) return;
    EXPECT_EQ(res.rep_bytes_before_sync, 0u) << "no reduction while "
                                                "accumulating";
    EXPECT_EQ(res.rep_bytes, want_rep) << "step " << step;
    // The norm of the full gradient: the shards' squares summed over dp
    // only; over the world each shard would count R times.
    double sums[2] = {res.local_sumsq, 0};
    tpdp_tensor sd = tpdp_tensor_1d(&sums[0], TPDP_F64, 1);
    tpdp_tensor rd = tpdp_tensor_1d(&sums[1], TPDP_F64, 1);
    ASSERT_TPDP_OK(tpdp_allreduce(mesh.dp, &sd, &rd, TPDP_OP_SUM));
    double tol = c.reduce == TPDP_F32 ? 1e-5 : 2e-2;
    EXPECT_NEAR(sums[1], res.expected_sumsq, tol * res.expected_sumsq);
    ASSERT_TPDP_OK(tpdp_allreduce(tpdp_test::World(), &sd, &rd, TPDP_OP_SUM));
    EXPECT_NEAR(sums[1], mesh.R * res.expected_sumsq,
                tol * mesh.R * res.expected_sumsq);
    tpdp_fsdp_stats st;
    ASSERT_TPDP_OK(tpdp_fsdp_get_stats(u.root, &st));
    // Levels 1-2 gather the three units once a step; level 3 reshards
    // all after backward and the blocks after forward too: per micro-batch
    // the three for forward, the two blocks again for backward. Each
    // gathers S padded shards of its unit, over dp only.
    EXPECT_EQ(st.allgathers, c.level == 3 ? 5 * micro : 3);
    int64_t want_bytes = 0;
    for (int k = 0; k < 3; k++)
      want_bytes += ShardElems(kUnitParams[k], mesh.S) * mesh.S * psize *
                    (c.level < 3 ? 1
                     : k < 2     ? 2 * micro
                                 : micro);
    EXPECT_EQ(st.bytes_allgathered, want_bytes);
    EXPECT_EQ(st.reduce_scatters, 3);
    // one all-reduce over dp_replicate per unit, none with one replica
    EXPECT_EQ(st.allreduces, mesh.R > 1 ? 3 : 0);
    EXPECT_EQ(st.bytes_allreduced, mesh.R > 1 ? want_allreduced : 0);
    int64_t want_persistent = c.level == 3   ? 8 * shard_total
                              : c.level == 2 ? 4 * full_total + 4 * shard_total
                                             : 8 * full_total;
    if (c.param != TPDP_F32) {  // param_dtype full tensors, f32 shards
      want_persistent = c.level == 3 ? 8 * shard_total
                        : c.level == 2
                            ? psize * full_total + 8 * shard_total
                            : 2 * psize * full_total + 8 * shard_total;
    }
    EXPECT_EQ(st.persistent_bytes, want_persistent);
  }
  // The updated shards gather into the reference's values.
  ASSERT_TPDP_OK(tpdp_fsdp_summon_full_params(u.root));
  for (size_t p = 0; p < kSpecs.size(); p++)
    ExpectFullAs(m, (int)p, TPDP_F32, c.mixed(), "summoned after 3 steps");
  ASSERT_TPDP_OK(tpdp_fsdp_summon_end(u.root, 0));
}

struct Case {
  int replicas, level;
  tpdp_dtype param, reduce;
  int micro;
};

class Hybrid : public ::testing::TestWithParam<Case> {};

TEST_P(Hybrid, GradientsAreTheMeanOverAllRanks) {
  Case k = GetParam();
  Config c;
  c.level = k.level;
  c.param = k.param;
  c.reduce = k.reduce;
  RunHybrid(k.replicas, c, k.micro);
}

std::vector<Case> Cases() {
  std::vector<Case> v;
  for (int r : {1, 2, 3, 4, 6})
    for (int level : {1, 2, 3}) {
      v.push_back({r, level, TPDP_F32, TPDP_F32, 1});
      v.push_back({r, level, TPDP_F32, TPDP_F32, 2});
    }
  for (int r : {2, 3}) {
    v.push_back({r, 1, TPDP_F32, TPDP_BF16, 1});
    v.push_back({r, 2, TPDP_BF16, TPDP_F32, 1});
    v.push_back({r, 3, TPDP_BF16, TPDP_BF16, 1});
  }
  return v;
}

std::string CaseName(const ::testing::TestParamInfo<Case> &i) {
  const Case &k = i.param;
  return "R" + std::to_string(k.replicas) + "_zero" + std::to_string(k.level) +
         "_" + tpdp_dtype_name(k.param) + "_" + tpdp_dtype_name(k.reduce) +
         "_micro" + std::to_string(k.micro);
}

INSTANTIATE_TEST_SUITE_P(Layouts, Hybrid, ::testing::ValuesIn(Cases()),
                         CaseName);

// ---- agreement ----

// One unit over dp with replicate `rep` (may be NULL); every rank must fail
// with a mismatch naming both replicate sizes, the module left as it was.
void ExpectRefused(tpdp_comm *dp, tpdp_comm *rep, const char *a,
                   const char *b) {
  Model m;
  tpdp_fully_shard_options o = tpdp_fully_shard_options_default();
  o.replicate = rep;
  tpdp_fsdp_unit *unit = nullptr;
  EXPECT_EQ(tpdp_fully_shard(m.root, dp, &o, &unit), TPDP_ERR_SHAPE_MISMATCH);
  EXPECT_EQ(unit, nullptr);
  EXPECT_EQ(tpdp_fsdp_unit_of(m.root), nullptr);
  std::string msg = tpdp_last_error();
  EXPECT_NE(msg.find(a), std::string::npos) << msg;
  EXPECT_NE(msg.find(b), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank"), std::string::npos) << msg;
}

TEST(HybridAgreement, ReplicateGivenOnSomeRanksOnly) {
  if (tpdp_test::WorldSize() != 4) GTEST_SKIP() << "a 2 x 2 layout";
  Mesh mesh(2);
  // The first rank of each dp group passes none: both groups disagree
  // inside, and ranks 1 and 3 carry the failure to their replicas.
  ExpectRefused(mesh.dp, mesh.s == 0 ? nullptr : mesh.rep,
                "replicate size none", "replicate size 2");
}

TEST(HybridAgreement, ReplicateSizesDiffer) {
  if (tpdp_test::WorldSize() != 4) GTEST_SKIP() << "a 2 x 2 layout";
  Mesh mesh(2);
  tpdp_comm *self = nullptr;
  ASSERT_TPDP_OK(tpdp_comm_split(tpdp_test::World(), mesh.w, 0, &self));
  ExpectRefused(mesh.dp, mesh.s == 0 ? mesh.rep : self, "replicate size 2",
                "replicate size 1");
  EXPECT_TPDP_OK(tpdp_comm_destroy(self));
}

TEST(HybridAgreement, ReplicasWithDifferentShardSizesAreRefused) {
  if (tpdp_test::WorldSize() != 4) GTEST_SKIP() << "4 ranks";
  // dp groups {0}, {1, 2, 3}; replicate {0, 1}, {2, 3}: rank 0 and its
  // replica rank 1 shard over 1 and 3 ranks. Every rank's replicate size
  // is 2, so only the agreement over replicate sees it.
  int w = tpdp_test::WorldRank();
  tpdp_comm *dp = nullptr, *rep = nullptr;
  ASSERT_TPDP_OK(tpdp_comm_split(tpdp_test::World(), w == 0 ? 0 : 1, w, &dp));
  ASSERT_TPDP_OK(tpdp_comm_split(tpdp_test::World(), w <= 1 ? 0 : 1, w, &rep));
  Model m;
  tpdp_fully_shard_options o = tpdp_fully_shard_options_default();
  o.replicate = rep;
  tpdp_fsdp_unit *unit = nullptr;
  tpdp_status st = tpdp_fully_shard(m.root, dp, &o, &unit);
  // Ranks 2 and 3 agree with rank 1 over dp, and rank 1's failure over
  // replicate comes after that agreement: only the pair {0, 1} fails (a
  // rank whose replica groups disagree cannot be told apart from one
  // whose own dp group agreed; what the header says).
  if (w <= 1) {
    EXPECT_EQ(st, TPDP_ERR_SHAPE_MISMATCH);
    std::string msg = tpdp_last_error();
    EXPECT_NE(msg.find("dp size 1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("dp size 3"), std::string::npos) << msg;
  }
  // Whatever ranks 2 and 3 got, their units go with the module.
  EXPECT_TPDP_OK(tpdp_comm_destroy(dp));
  EXPECT_TPDP_OK(tpdp_comm_destroy(rep));
}

TEST(HybridAgreement, ANullReplicateOnEveryRankIsPlainFsdp) {
  // replicate NULL on every rank: plain FSDP over the world, the
  // existing test's step and reference.
  Model m;
  tpdp_fully_shard_options o = tpdp_fully_shard_options_default();
  o.replicate = nullptr;
  Units u;
  for (int b = 0; b < 2; b++)
    ASSERT_TPDP_OK(
        tpdp_fully_shard(m.blocks[b], tpdp_test::World(), &o, &u.block[b]));
  ASSERT_TPDP_OK(tpdp_fully_shard(m.root, tpdp_test::World(), &o, &u.root));
  Step(m, u, 0);
}

TEST(HybridAgreement, NestedUnitsShareTheRootsReplicate) {
  if (tpdp_test::WorldSize() != 4) GTEST_SKIP() << "a 2 x 2 layout";
  Mesh mesh(2);
  Model m;
  tpdp_fully_shard_options o = tpdp_fully_shard_options_default();
  o.replicate = mesh.rep;
  tpdp_fsdp_unit *unit = nullptr;
  for (int b = 0; b < 2; b++)
    ASSERT_TPDP_OK(tpdp_fully_shard(m.blocks[b], mesh.dp, &o, &unit));
  o.replicate = nullptr;  // the root without: refused on every rank
  EXPECT_EQ(tpdp_fully_shard(m.root, mesh.dp, &o, &unit),
            TPDP_ERR_INVALID_ARGUMENT);
  std::string msg = tpdp_last_error();
  EXPECT_NE(msg.find("the units under one root share one"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("(2 ranks)"), std::string::npos) << msg;
  EXPECT_EQ(tpdp_fsdp_unit_of(m.root), nullptr);
}

// ---- a caller built against version 2 ----

// The version 2 struct: everything before `replicate`, in memory of
// exactly that size (ASan would see a read past it).
TEST(HybridOptions, Version2CallersShardAsBefore) {
  const size_t v2 = offsetof(tpdp_fully_shard_options, replicate);
  tpdp_fully_shard_options d = tpdp_fully_shard_options_default();
  d.size = v2;
  d.version = 2;
  d.zero_level = 2;
  void *mem = std::malloc(v2);
  ASSERT_NE(mem, nullptr);
  std::memcpy(mem, &d, v2);
  const tpdp_fully_shard_options *o =
      static_cast<const tpdp_fully_shard_options *>(mem);
  Model m;
  Units u;
  for (int b = 0; b < 2; b++)
    ASSERT_TPDP_OK(
        tpdp_fully_shard(m.blocks[b], tpdp_test::World(), o, &u.block[b]));
  ASSERT_TPDP_OK(tpdp_fully_shard(m.root, tpdp_test::World(), o, &u.root));
  Step(m, u, 0);
  Step(m, u, 1);
  // level 2: the full parameters and the gradient shards persist
  tpdp_fsdp_stats st;
  ASSERT_TPDP_OK(tpdp_fsdp_get_stats(u.root, &st));
  int64_t full = 0, shard = 0;
  for (const std::vector<int> &unit : kUnitParams) {
    shard += ShardElems(unit, tpdp_test::WorldSize());
    for (int p : unit) full += Numel(kSpecs[p]);
  }
  EXPECT_EQ(st.persistent_bytes, 4 * full + 4 * shard);
  std::free(mem);
}

TEST(HybridOptions, OtherSizesAndVersionsAreRefused) {
  Model m;
  tpdp_fully_shard_options o = tpdp_fully_shard_options_default();
  o.version = 2;  // version 2 with version 3's size
  tpdp_fsdp_unit *unit = nullptr;
  EXPECT_EQ(tpdp_fully_shard(m.root, tpdp_test::World(), &o, &unit),
            TPDP_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tpdp_last_error()).find("version 2"),
            std::string::npos);
  o = tpdp_fully_shard_options_default();
  o.size -= 1;
  EXPECT_EQ(tpdp_fully_shard(m.root, tpdp_test::World(), &o, &unit),
            TPDP_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(unit, nullptr);
}

}  // namespace
