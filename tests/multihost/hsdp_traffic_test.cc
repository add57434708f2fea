// SPDX-License-Identifier: BSD-3-Clause
// Hybrid sharding across hosts (tpdp_fully_shard_options.replicate) on 2
// simulated hosts x 2 ranks: the units shard over the ranks of one host
// (dp_shard, S = 2) and all-reduce over the same shard index on the other
// host (replicate, R = 2), the grouping taken from the ranks' host names
// and tpdp_comm_local_rank. One --zero 3 step of tests/dp/fsdp_model.h's
// model (gradients checked against the mean over all four ranks); then
// the bytes each communicator sent across hosts (tpdp_comm_traffic_get)
// against counts worked out here from the units' shard shapes and the
// ring rule include/tpdp/comm.h states: the shard communicator sends
// nothing across, the replicate communicator one ring all-reduce of each
// unit's padded shard over 2 ranks (all of it across). A flat unit over
// the four ranks (R = 1, S = 4) sends strictly more across hosts: its
// all-gathers and reduce-scatters over pieces reach the two peers on the
// other host, counted from the rows each rank holds.
#include <unistd.h>

#include <cmath>
#include <string>
#include <vector>

#include "tests/dp/fsdp_model.h"
#include "tests/test_util.h"

namespace {

using namespace fsdp_model;  // NOLINT: the model every test here drives
using tpdp_test::World;
using tpdp_test::WorldRank;
using tpdp_test::WorldSize;

// `v` of every rank of `c`, in its rank order.
std::vector<int> GatherInts(tpdp_comm *c, int v) {
  std::vector<int32_t> all((size_t)tpdp_comm_size(c));
  int32_t x = v;
  tpdp_tensor s = tpdp_tensor_1d(&x, TPDP_I32, 1);
  tpdp_tensor r = tpdp_tensor_1d(all.data(), TPDP_I32, (int64_t)all.size());
  EXPECT_TPDP_OK(tpdp_allgather(c, &s, &r));
  return std::vector<int>(all.begin(), all.end());
}

tpdp_comm_traffic Traffic(tpdp_comm *c) {
  tpdp_comm_traffic t = {~0ull, ~0ull};
  EXPECT_TPDP_OK(tpdp_comm_traffic_get(c, &t));
  return t;
}

// Sum of `v` over the world's ranks (counted on the world: call it after
// reading the counts).
uint64_t SumOverRanks(uint64_t v) {
  int64_t x = (int64_t)v;
  tpdp_tensor t = tpdp_tensor_1d(&x, TPDP_I64, 1);
  EXPECT_TPDP_OK(tpdp_allreduce(World(), &t, &t, TPDP_OP_SUM));
  return (uint64_t)x;
}

// Elements of a unit's parameters that shard index q of S holds (its rows
// only, no padding).
int64_t RealElems(const std::vector<int> &params, int q, int S) {
  int64_t n = 0;
  for (int p : params) n += Rows(kSpecs[p], q, S) * RowElems(kSpecs[p]);
  return n;
}

// Bytes rank q of a --zero 3 unit group over S ranks sends to the peers
// in `peers` in one step of the model (include/tpdp/comm.h: the
// collectives over pieces send each rank's block straight to every peer,
// counted per message; at f32 the blocks travel as the parameters' rows,
// padding left out). All-gathers: the root once, each block twice
// (forward, and again for backward after the reshard), this rank's rows
// to every peer. Reduce-scatters: once per unit, each peer's rows to it.
uint64_t PiecesBytes(int q, int S, const std::vector<int> &peers) {
  int64_t e = 0;
  for (int k = 0; k < 3; k++) {
    const int gathers = k < 2 ? 2 : 1;
    for (int p : peers) {
      e += gathers * RealElems(kUnitParams[k], q, S);
      e += RealElems(kUnitParams[k], p, S);
    }
  }
  return (uint64_t)e * 4;
}

Units ShardOver(Model &m, tpdp_comm *dp, tpdp_comm *rep) {
  Units u;
  tpdp_fully_shard_options o = tpdp_fully_shard_options_default();
  o.zero_level = 3;
  o.replicate = rep;
  for (int b = 0; b < 2; b++)
    EXPECT_TPDP_OK(tpdp_fully_shard(m.blocks[b], dp, &o, &u.block[b]));
  EXPECT_TPDP_OK(tpdp_fully_shard(m.root, dp, &o, &u.root));
  return u;
}

// One step (forward and backward hooks, finalize); each rank's gradient
// shard (shard index s of S) against the mean over all world ranks.
void OneStep(Model &m, Units &u, int s, int S) {
  ASSERT_TPDP_OK(tpdp_module_forward_begin(m.root));
  for (int b = 0; b < 2; b++) {
    ASSERT_TPDP_OK(tpdp_module_forward_begin(m.blocks[b]));
    ASSERT_TPDP_OK(tpdp_module_forward_end(m.blocks[b]));
  }
  ASSERT_TPDP_OK(tpdp_module_forward_end(m.root));
  ASSERT_TPDP_OK(tpdp_module_backward_begin(m.root));
  AddGrad(m, 0, 0, 0);
  for (int b = 1; b >= 0; b--) {
    ASSERT_TPDP_OK(tpdp_module_backward_begin(m.blocks[b]));
    AddGrad(m, 1 + 2 * b, 0, 0);
    AddGrad(m, 2 + 2 * b, 0, 0);
    ASSERT_TPDP_OK(tpdp_module_backward_end(m.blocks[b]));
  }
  ASSERT_TPDP_OK(tpdp_module_backward_end(m.root));
  ASSERT_TPDP_OK(tpdp_fsdp_finalize(u.root));
  const int n = WorldSize();
  for (size_t p = 0; p < kSpecs.size(); p++) {
    const ParamSpec &sp = kSpecs[p];
    int64_t re = RowElems(sp), rows = Rows(sp, s, S);
    int64_t e0 = s * Chunk(sp, S) * re;
    const tpdp_tensor *g = tpdp_param_grad(m.params[p]);
    ASSERT_EQ(g->shape[0], rows) << "param " << p;
    const float *gx = static_cast<const float *>(g->data);
    for (int64_t k = 0; k < rows * re; k++) {
      double mean = 0;
      for (int w = 0; w < n; w++) mean += Grad(0, 0, w, (int)p, e0 + k);
      mean /= n;
      ASSERT_NEAR(gx[k], mean, 1e-5 * (1 + std::fabs(mean)))
          << "param " << p << " element " << e0 + k << " rank " << WorldRank();
    }
  }
}

TEST(HsdpAcrossHosts, ShardInsideAHostReplicateAcross) {
  ASSERT_EQ(WorldSize(), 4);
  const std::vector<int> host = tpdp_test::HostOfRanks();
  const int w = WorldRank(), h = host[w];
  int local = -1, local_size = 0;
  ASSERT_TPDP_OK(tpdp_comm_local_rank(World(), &local, &local_size));
  ASSERT_EQ(local_size, 2) << "2 ranks a host";
  // dp_shard: the ranks of my host; replicate: my local rank's namesake
  // on each host, in host order.
  tpdp_comm *shard = nullptr, *rep = nullptr;
  ASSERT_TPDP_OK(tpdp_comm_split(World(), h, w, &shard));
  ASSERT_TPDP_OK(tpdp_comm_split(World(), local, h, &rep));
  ASSERT_EQ(tpdp_comm_size(shard), 2);
  ASSERT_EQ(tpdp_comm_size(rep), 2);
  const int S = 2, R = 2, s = tpdp_comm_rank(shard), r = tpdp_comm_rank(rep);
  EXPECT_EQ(s, local);
  EXPECT_EQ(r, h);
  // The layout: the shard group on one host, the replicate group on two,
  // its members at the same shard index.
  EXPECT_EQ(GatherInts(shard, h), (std::vector<int>{h, h}));
  std::vector<int> rep_hosts = GatherInts(rep, h);
  EXPECT_NE(rep_hosts[0], rep_hosts[1]) << "replicate inside one host";
  EXPECT_EQ(GatherInts(rep, s), (std::vector<int>{s, s}));

  uint64_t hsdp_cross = 0;
  {
    Model m;
    Units u = ShardOver(m, shard, rep);
    ASSERT_NE(u.root, nullptr) << tpdp_last_error();
    ASSERT_TPDP_OK(tpdp_comm_traffic_reset(shard));
    ASSERT_TPDP_OK(tpdp_comm_traffic_reset(rep));
    OneStep(m, u, s, S);
    if (HasFatalFailure()) return;
    tpdp_comm_traffic ts = Traffic(shard), tr = Traffic(rep);
    // (a) the shard's gathers and reduce-scatters stay on the host.
    EXPECT_GT(ts.bytes, 0u) << "the shard communicator did the sharding";
    EXPECT_EQ(ts.cross_host_bytes, 0u);
    EXPECT_EQ(ts.bytes, PiecesBytes(s, S, {1 - s}));
    // (b) a ring all-reduce over the 2 replicas of each unit's padded
    // shard over S = 2: emb [5,3] 3 rows of 3; each block w [7,3] 4 rows
    // of 3 and b [2] 1 row: 9 + 13 + 13 = 35 f32, each rank sending all
    // of it to the other host.
    uint64_t want = 0;
    for (const std::vector<int> &unit : kUnitParams)
      want += RingAllreduceBytes(ShardElems(unit, S), R, r);
    EXPECT_EQ(want, 35u * 4) << "the shapes' arithmetic";
    EXPECT_EQ(tr.bytes, want);
    EXPECT_EQ(tr.cross_host_bytes, want);
    hsdp_cross = ts.cross_host_bytes + tr.cross_host_bytes;
  }
  const uint64_t hsdp_all = SumOverRanks(hsdp_cross);
  EXPECT_EQ(hsdp_all, 4u * 35 * 4);

  // (c) the same step on a flat unit over the four ranks.
  uint64_t flat_cross = 0;
  {
    Model m;
    Units u = ShardOver(m, World(), nullptr);
    ASSERT_NE(u.root, nullptr) << tpdp_last_error();
    ASSERT_TPDP_OK(tpdp_comm_traffic_reset(World()));
    OneStep(m, u, w, 4);
    if (HasFatalFailure()) return;
    tpdp_comm_traffic tf = Traffic(World());
    // The peers on the other host, from the host names.
    std::vector<int> remote, all_peers;
    for (int q = 0; q < 4; q++) {
      if (q != w) all_peers.push_back(q);
      if (host[q] != h) remote.push_back(q);
    }
    EXPECT_EQ(tf.bytes, PiecesBytes(w, 4, all_peers));
    EXPECT_EQ(tf.cross_host_bytes, PiecesBytes(w, 4, remote));
    flat_cross = tf.cross_host_bytes;
  }
  const uint64_t flat_all = SumOverRanks(flat_cross);
  // By hand, rows over 4 (emb 2,2,1,0 of 3; w 2,2,2,1 of 3; b 1,1,0,0):
  // all-gathers to the 2 remote peers 2 * (6 + 4 * 7) from ranks 0 and 1,
  // 2 * (3 + 4 * 6) from rank 2, 2 * 4 * 3 from rank 3 (214); reduce-
  // scatters, ranks 0 and 1 to ranks 2 and 3: 3 + 2 * 9 each, ranks 2
  // and 3 to ranks 0 and 1: 12 + 2 * 14 each (122). 336 f32 in all.
  EXPECT_EQ(flat_all, 336u * 4);
  EXPECT_GT(flat_all, hsdp_all) << "flat " << flat_all << " vs HSDP "
                                << hsdp_all << " bytes across hosts";
  if (w == 0)
    printf("cross-host bytes per step, all ranks: HSDP %llu, flat %llu\n",
           (unsigned long long)hsdp_all, (unsigned long long)flat_all);
  EXPECT_TPDP_OK(tpdp_comm_destroy(shard));
  EXPECT_TPDP_OK(tpdp_comm_destroy(rep));
}

}  // namespace
