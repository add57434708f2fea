// SPDX-License-Identifier: BSD-3-Clause
// Fully sharded units short of memory: every allocation of
// tpdp_fully_shard, and then every allocation of a training step (forward,
// backward, finalize, and a summon_full_params with writeback), fails in
// turn (core_alloc_fail_at of core/util.h, armed alike on every rank, so
// that every rank fails at the same allocation), at ZeRO levels 1, 2 and 3
// with f32, bf16 and f16 parameters and reductions. Each failure returns
// TPDP_ERR_OUT_OF_MEMORY on every rank with a message naming the unit, the
// rank and what ran short; nothing waits for a peer; and among the
// failures is one of every buffer the units' layout allocates (named in
// the message). After a failed tpdp_fully_shard the module is as it was
// (no unit, no hooks, its parameters on the caller's memory), and sharding
// again trains a step whose gradients are the mean over ranks computed
// here. Run on 2 and 3 ranks, and as a single process (a plain test
// binary, which scripts/valgrind-tests runs under memcheck: no failure
// leaks).
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "core/mem.h"
#include "core/util.h"
#include "tests/dp/fsdp_model.h"
#include "tests/test_util.h"

namespace {

using namespace fsdp_model;  // NOLINT: the fixture of every test here

// Disarms the calling thread's allocation fault counter when a test ends,
// whatever happened.
struct Disarm {
  ~Disarm() { core_alloc_fail_at(0, 0); }
};

// A communicator of the world's ranks of its own, destroyed with this
// after a barrier: the barrier's messages follow, on each pair of ranks,
// any message that a failed collective left on its way, so that none
// reaches a later communicator.
struct FreshComm {
  tpdp_comm *comm = nullptr;
  FreshComm() {
    EXPECT_TPDP_OK(tpdp_comm_split(tpdp_test::World(), 0, 0, &comm));
  }
  ~FreshComm() {
    EXPECT_TPDP_OK(tpdp_barrier(comm));
    EXPECT_TPDP_OK(tpdp_comm_destroy(comm));
  }
};

// Rows added to blocks.0.w in the configurations that say so, so that the
// full tensors of blocks.0 pass CORE_MEM_CACHE_MIN_BYTES: on the host they
// then come from the units' cache of buffers (core/mem.h), from which a
// second step takes them again. In two configurations only (f32 and
// bf16 parameters): fresh pages make such a try slow.
const int kExtraRows = (int)(CORE_MEM_CACHE_MIN_BYTES / 12);

struct Config {
  int level;
  tpdp_dtype param, reduce;
  int extra_rows;
};

std::string Name(const ::testing::TestParamInfo<Config> &info) {
  return "Zero" + std::to_string(info.param.level) + "_" +
         tpdp_dtype_name(info.param.param) + "_" +
         tpdp_dtype_name(info.param.reduce) +
         (info.param.extra_rows ? "_cached" : "");
}

// The modules in the order they are sharded (inner units first) and their
// labels in messages.
tpdp_module *Module(const Model &m, int k) {
  return k < 2 ? m.blocks[k] : m.root;
}
const char *const kLabels[3] = {"blocks.0[Block]", "blocks.1[Block]", "[Net]"};
// The parameters (indices into kSpecs) each module's unit manages.
const std::vector<int> kManaged[3] = {{1, 2}, {3, 4}, {0}};

// Parameter p's spec in m (its rows, extra ones included).
ParamSpec Spec(const Model &m, int p) {
  ParamSpec s = kSpecs[p];
  s.shape[0] = (int64_t)m.data[p].size() / RowElems(s);
  return s;
}

// tpdp_fully_shard of each module that is not a unit yet; the first
// failure's status, with its module's index in *failed.
tpdp_status TryShard(Model &m, Units &u, const Config &c, tpdp_comm *dp,
                     int *failed) {
  tpdp_fully_shard_options o = tpdp_fully_shard_options_default();
  o.zero_level = c.level;
  o.param_dtype = c.param;
  o.reduce_dtype = c.reduce;
  tpdp_fsdp_unit **out[3] = {&u.block[0], &u.block[1], &u.root};
  for (int k = 0; k < 3; k++) {
    if (*out[k] != nullptr) continue;
    tpdp_status st = tpdp_fully_shard(Module(m, k), dp, &o, out[k]);
    if (st != TPDP_SUCCESS) {
      *failed = k;
      return st;
    }
  }
  return TPDP_SUCCESS;
}

// Add this rank's gradient of step 0 into each of module k's parameters'
// full gradient views (param_dtype).
void AddGrads(const Model &m, int k) {
  for (int p : kManaged[k]) {
    const tpdp_tensor *g = tpdp_param_grad(m.params[p]);
    const int64_t n = Numel(Spec(m, p));
    for (int64_t e = 0; e < n; e++)
      Store(g, e, Load(g, e) + Grad(0, 0, tpdp_test::WorldRank(), p, e));
  }
}

// One step as a framework runs it, then a summon_full_params and its end
// with writeback, `steps` times; the first failing call's status.
tpdp_status TrySteps(Model &m, const Units &u, int steps) {
#define TRY(call)                                \
  do {                                           \
    tpdp_status try_st_ = (call);                \
    if (try_st_ != TPDP_SUCCESS) return try_st_; \
  } while (0)
  for (int step = 0; step < steps; step++) {
    TRY(tpdp_module_forward_begin(m.root));
    for (int b = 0; b < 2; b++) {
      TRY(tpdp_module_forward_begin(m.blocks[b]));
      TRY(tpdp_module_forward_end(m.blocks[b]));
    }
    TRY(tpdp_module_forward_end(m.root));
    TRY(tpdp_module_backward_begin(m.root));
    AddGrads(m, 2);
    for (int b = 1; b >= 0; b--) {
      TRY(tpdp_module_backward_begin(m.blocks[b]));
      AddGrads(m, b);
      TRY(tpdp_module_backward_end(m.blocks[b]));
    }
    TRY(tpdp_module_backward_end(m.root));
    TRY(tpdp_fsdp_finalize(u.root));
    TRY(tpdp_fsdp_summon_full_params(u.root));
    TRY(tpdp_fsdp_summon_end(u.root, 1));
  }
  return TPDP_SUCCESS;
#undef TRY
}

// After successful TrySteps: each rank's gradient rows are the mean over
// ranks of the gradients rounded to param_dtype (reduced in reduce_dtype:
// within its rounding; each step starts from zero), and its parameter
// rows still the initial values (the writebacks of unchanged values change
// nothing).
void ExpectStepResults(const Model &m, const Config &c) {
  int rank = tpdp_test::WorldRank(), n = tpdp_test::WorldSize();
  double eps = c.reduce == TPDP_F32    ? 1e-5
               : c.reduce == TPDP_BF16 ? 8e-3 * n
                                       : 1e-3 * n;
  for (size_t p = 0; p < kSpecs.size(); p++) {
    const ParamSpec s = Spec(m, (int)p);
    int64_t re = RowElems(s), rows = Rows(s, rank, n);
    int64_t e0 = rank * Chunk(s, n) * re;
    const tpdp_tensor *g = tpdp_param_grad(m.params[p]);
    const tpdp_tensor *t = tpdp_param_tensor(m.params[p]);
    ASSERT_EQ(g->shape[0], rows);
    ASSERT_EQ(t->shape[0], rows);
    for (int64_t k = 0; k < rows * re; k++) {
      double mean = 0;
      for (int r = 0; r < n; r++)
        mean += RoundTo(c.param, Grad(0, 0, r, (int)p, e0 + k));
      mean /= n;
      ASSERT_NEAR(static_cast<const float *>(g->data)[k], mean,
                  eps * (1 + std::fabs(mean)))
          << "gradient of param " << p << " element " << e0 + k;
      ASSERT_EQ(static_cast<const float *>(t->data)[k], Init((int)p, e0 + k))
          << "param " << p << " element " << e0 + k;
    }
  }
}

// The message of a failure of memory names the unit (its module's label)
// and the rank; an allocation of the unit's own buffers also names the
// buffer, which is added to *buffers.
void ExpectMemoryError(tpdp_status st, long n, const char *when,
                       std::set<std::string> *buffers) {
  std::string msg = tpdp_last_error();
  EXPECT_EQ(st, TPDP_ERR_OUT_OF_MEMORY)
      << when << ", allocation " << n << ": " << msg;
  bool names_a_unit = false;
  for (const char *l : kLabels)
    names_a_unit = names_a_unit || msg.find(l) != std::string::npos;
  EXPECT_TRUE(names_a_unit) << when << ", allocation " << n << ": " << msg;
  EXPECT_NE(msg.find(" on rank "), std::string::npos) << msg;
  const std::string its = " bytes for its ";
  size_t at = msg.find(its);
  if (at != std::string::npos) {
    at += its.size();
    buffers->insert(msg.substr(at, msg.find(':', at) - at));
  }
}

// The unit buffers a configuration allocates on n ranks, by the layout of
// dp/fsdp_internal.h: with f32 parameters, levels 1-2 keep this rank's
// master rows inside the persistent full parameters and level 1 its
// gradient rows inside the full gradients; else separate f32 shards. At
// creation: the master rows and the gradient rows.
std::set<std::string> CreationBuffers(const Config &c) {
  bool shard_in_full = c.level <= 2 && c.param == TPDP_F32;
  bool grad_in_full = c.level == 1 && c.param == TPDP_F32;
  return {shard_in_full ? "full parameters" : "f32 shard",
          grad_in_full ? "full gradients" : "gradient shard"};
}
// In a step with a summon: the full tensors not made at creation, the
// all-gather's param_dtype input, the reduce-scatter's reduce_dtype input
// (when it casts) and output (unless it lands in place in f32), its room
// for the peers' rows (MPI: ranks beyond the two whose rows need none),
// and the summoned f32 master (when param_dtype is not f32).
std::set<std::string> StepBuffers(const Config &c, int n) {
  bool shard_in_full = c.level <= 2 && c.param == TPDP_F32;
  bool grad_in_full = c.level == 1 && c.param == TPDP_F32;
  bool cast = c.param != c.reduce, in_place = !cast && grad_in_full;
  std::set<std::string> b;
  if (!shard_in_full) b.insert("full parameters");
  if (!grad_in_full) b.insert("full gradients");
  if (c.param != TPDP_F32) {
    b.insert("all-gather's input");
    b.insert("summoned f32 parameters");
  }
  if (cast) b.insert("reduce-scatter's input");
  if (!in_place && (c.reduce != TPDP_F32 || grad_in_full))
    b.insert("reduce-scatter's output");
  if (n - (in_place ? 1 : 2) > 0)
    b.insert("reduce-scatter's room for the peers' rows");
  return b;
}

class FsdpFaults : public ::testing::TestWithParam<Config> {};

// Each allocation of the three tpdp_fully_shard calls (blocks, then the
// root that adopts them) fails in turn. The module whose call failed is
// left as it was; the others stay units; sharding the rest again works
// and trains.
TEST_P(FsdpFaults, FullyShardShortOfMemoryChangesNothingAndCanBeRetried) {
  Disarm disarm;
  const Config c = GetParam();
  int failures = 0;
  std::set<std::string> buffers;
  for (long n = 1; n < 1000; n++) {
    Model m;  // creation keeps its buffers: none comes from the cache
    Units u;
    int failed = -1;
    core_alloc_fail_at(n, 0);
    tpdp_status st = TryShard(m, u, c, tpdp_test::World(), &failed);
    bool fired = core_alloc_fail_left() == 0;
    core_alloc_fail_at(0, 0);
    if (st == TPDP_SUCCESS) {
      EXPECT_FALSE(fired) << "allocation " << n << " failed unnoticed";
      ASSERT_TPDP_OK(TrySteps(m, u, 1));
      ExpectStepResults(m, c);
      break;
    }
    failures++;
    ASSERT_TRUE(fired) << "allocation " << n << ": " << tpdp_last_error();
    ExpectMemoryError(st, n, "tpdp_fully_shard", &buffers);
    std::string msg = tpdp_last_error();
    EXPECT_NE(msg.find(kLabels[failed]), std::string::npos) << msg;
    tpdp_module *mod = Module(m, failed);
    EXPECT_EQ(tpdp_fsdp_unit_of(mod), nullptr) << msg;
    EXPECT_EQ(tpdp_module_unit_kind(mod), nullptr) << msg;
    EXPECT_EQ(tpdp_module_num_hooks(mod), 0) << msg;
    for (int p : kManaged[failed]) {
      const tpdp_tensor *t = tpdp_param_tensor(m.params[p]);
      EXPECT_EQ(t->data, m.data[p].data()) << "param " << p << ": " << msg;
      EXPECT_EQ(t->shape[0], Spec(m, p).shape[0]) << msg;
    }
    for (int k = 0; k < failed; k++)
      EXPECT_NE(tpdp_fsdp_unit_of(Module(m, k)), nullptr) << msg;
    // The run goes on: the rest shards, and a step reduces right.
    ASSERT_TPDP_OK(TryShard(m, u, c, tpdp_test::World(), &failed));
    ASSERT_TPDP_OK(TrySteps(m, u, 1));
    ExpectStepResults(m, c);
  }
  // Per unit at least: its state, parameter list and names, the agreement,
  // the shard and gradient storage, the pieces lists, the module's marks.
  EXPECT_GE(failures, 3 * 8);
  EXPECT_EQ(buffers, CreationBuffers(c));
}

// Each allocation of two steps (the buffers the all-gathers, the
// gradients, the reduce-scatters and the summon need, and the
// communicator's own; in the second step the large ones come from the
// units' cache) fails in turn on a freshly sharded model. The module's destruction then
// frees everything; the next model shards and, once no allocation fails,
// reduces right. A collective over pieces makes all its allocations
// before it posts its first message (comm/mpi_pieces.c), so a failure
// there leaves no message behind: no send half gone that reads the
// units' buffers after they were freed (the large configurations send
// 1 MiB messages, by rendezvous), none that a later collective would take
// for its own. Each try still runs on a communicator of its own, so that
// a stray message would fail the next try instead of passing unseen.
TEST_P(FsdpFaults, StepShortOfMemoryFailsEveryRankAlike) {
  Disarm disarm;
  const Config c = GetParam();
  int failures = 0;
  std::set<std::string> buffers;
  for (long n = 1; n < 1000; n++) {
    FreshComm dp;  // destroyed after the model
    Model m(c.extra_rows);
    Units u;
    int failed = -1;
    ASSERT_TPDP_OK(TryShard(m, u, c, dp.comm, &failed));
    core_alloc_fail_at(n, 0);
    tpdp_status st = TrySteps(m, u, 2);
    bool fired = core_alloc_fail_left() == 0;
    core_alloc_fail_at(0, 0);
    if (st == TPDP_SUCCESS) {
      EXPECT_FALSE(fired) << "allocation " << n << " failed unnoticed";
      ExpectStepResults(m, c);
      break;
    }
    failures++;
    ASSERT_TRUE(fired) << "allocation " << n << ": " << tpdp_last_error();
    ExpectMemoryError(st, n, "the step", &buffers);
  }
  // Per unit at least: an all-gather in forward, a reduce-scatter, the
  // summon's all-gather; and every buffer of the layout.
  EXPECT_GE(failures, 3 * 3);
  EXPECT_EQ(buffers, StepBuffers(c, tpdp_test::WorldSize()));
}

INSTANTIATE_TEST_SUITE_P(
    Levels, FsdpFaults,
    ::testing::Values(Config{1, TPDP_F32, TPDP_F32, 0},
                      Config{2, TPDP_F32, TPDP_F32, 0},
                      Config{3, TPDP_F32, TPDP_F32, 0},
                      Config{3, TPDP_F32, TPDP_F32, kExtraRows},
                      Config{1, TPDP_F16, TPDP_F16, 0},
                      Config{2, TPDP_BF16, TPDP_F32, kExtraRows},
                      Config{3, TPDP_BF16, TPDP_BF16, 0}),
    Name);

}  // namespace
