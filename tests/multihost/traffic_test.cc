// SPDX-License-Identifier: BSD-3-Clause
// Bytes each communicator moves to ranks on another host
// (tpdp_comm_traffic_get), on 2 simulated hosts x 2 ranks: every count is
// worked out here from the tensors' shapes, the ranks' hosts (gathered
// first) and the schedules include/tpdp/comm.h states (a ring in rank
// order; a chain from the root; alltoall and the collectives over pieces
// straight to each peer; the shared-memory reducer path crossing hosts
// with one slice per local rank). The hierarchical allreduce sends 2/3 of
// the bytes a ring over the four ranks sends across: what
// bench/multihost.sh reports as cross_host_bytes_ratio.
#include <unistd.h>

#include <numeric>
#include <string>
#include <vector>

#include "comm/services.h"
#include "tests/test_util.h"

namespace {

using tpdp_test::World;
using tpdp_test::WorldRank;
using tpdp_test::WorldSize;

constexpr uint64_t kF32 = 4;

tpdp_comm_traffic Traffic(tpdp_comm *c) {
  tpdp_comm_traffic t = {~0ull, ~0ull};
  EXPECT_TPDP_OK(tpdp_comm_traffic_get(c, &t));
  return t;
}

// Sum of `v` over the world's ranks (plain MPI through tpdp: counted on
// the world, so call it after reading the counts).
uint64_t SumOverRanks(uint64_t v) {
  int64_t x = (int64_t)v;
  tpdp_tensor t = tpdp_tensor_1d(&x, TPDP_I64, 1);
  EXPECT_TPDP_OK(tpdp_allreduce(World(), &t, &t, TPDP_OP_SUM));
  return (uint64_t)x;
}

// Block k of n elements split into p blocks, the first n % p of them one
// longer.
int64_t Block(int64_t n, int p, int k) {
  k = ((k % p) + p) % p;
  return n / p + (k < n % p ? 1 : 0);
}

class Traffic_ : public ::testing::Test {
 protected:
  void SetUp() override {
    host_ = tpdp_test::HostOfRanks();
    ASSERT_EQ(WorldSize(), 4);
    ASSERT_EQ(host_, (std::vector<int>{0, 0, 1, 1}))
        << "expected ranks 0-1 on one host, 2-3 on the other";
    ASSERT_TPDP_OK(tpdp_comm_traffic_reset(World()));
  }
  bool RightIsRemote(int r) const { return host_[r] != host_[(r + 1) % 4]; }
  std::vector<int> host_;
};

// A ring in rank order: rank r sends each of the p blocks twice (once
// reduced, once averaged or summed in full) but for block r + 1, the one it
// reduces last, and block r + 2, the last it receives in the allgather.
TEST_F(Traffic_, AllreduceCountsARingFromTheShape) {
  const int r = WorldRank(), p = 4;
  for (int64_t n : {4000, 4003, 5}) {
    SCOPED_TRACE(n);
    std::vector<float> x((size_t)n, 1.0f);
    tpdp_tensor t = tpdp_tensor_1d(x.data(), TPDP_F32, n);
    ASSERT_TPDP_OK(tpdp_comm_traffic_reset(World()));
    ASSERT_TPDP_OK(tpdp_allreduce(World(), &t, &t, TPDP_OP_SUM));
    tpdp_comm_traffic got = Traffic(World());
    const uint64_t want =
        (uint64_t)(2 * n - Block(n, p, r + 1) - Block(n, p, r + 2)) * kF32;
    EXPECT_EQ(got.bytes, want);
    EXPECT_EQ(got.cross_host_bytes, RightIsRemote(r) ? want : 0);
    // Whatever the blocks, the ranks send 2 (p - 1) n elements in all.
    EXPECT_EQ(SumOverRanks(got.bytes), 2 * (p - 1) * (uint64_t)n * kF32);
  }
}

// The ring AVG that the MPI backend runs itself (f32 of >= 256 KiB) moves
// what the same ring does.
TEST_F(Traffic_, RingAverageCountsTheSame) {
  const int64_t n = 1 << 18; /* 1 MiB */
  std::vector<float> x((size_t)n, 1.0f);
  tpdp_tensor t = tpdp_tensor_1d(x.data(), TPDP_F32, n);
  ASSERT_TPDP_OK(tpdp_allreduce(World(), &t, &t, TPDP_OP_AVG));
  tpdp_comm_traffic got = Traffic(World());
  EXPECT_EQ(got.bytes, 2 * 3 * (uint64_t)n / 4 * kF32);
  EXPECT_EQ(got.cross_host_bytes, RightIsRemote(WorldRank()) ? got.bytes : 0);
}

TEST_F(Traffic_, AllgatherReduceScatterBroadcastAlltoall) {
  const int r = WorldRank();
  std::vector<float> a(1000, 1.0f), b(4000, 1.0f);
  tpdp_tensor s = tpdp_tensor_1d(a.data(), TPDP_F32, 1000);
  tpdp_tensor g = tpdp_tensor_1d(b.data(), TPDP_F32, 4000);
  auto expect = [&](uint64_t bytes, uint64_t cross) {
    tpdp_comm_traffic got = Traffic(World());
    EXPECT_EQ(got.bytes, bytes);
    EXPECT_EQ(got.cross_host_bytes, cross);
    ASSERT_TPDP_OK(tpdp_comm_traffic_reset(World()));
  };
  // allgather of 1000 per rank: three rounds of one rank's block.
  ASSERT_TPDP_OK(tpdp_allgather(World(), &s, &g));
  expect(3000 * kF32, RightIsRemote(r) ? 3000 * kF32 : 0);
  // reduce_scatter to 1000 per rank: three rounds of one block.
  ASSERT_TPDP_OK(tpdp_reduce_scatter(World(), &g, &s, TPDP_OP_SUM));
  expect(3000 * kF32, RightIsRemote(r) ? 3000 * kF32 : 0);
  // broadcast from rank 2: the chain 2 -> 3 -> 0 -> 1; rank 1 sends none,
  // 3 -> 0 crosses.
  ASSERT_TPDP_OK(tpdp_broadcast(World(), &g, &g, 2));
  expect(r == 1 ? 0 : 4000 * kF32, r == 3 ? 4000 * kF32 : 0);
  // alltoall: a block of 1000 to each of the 3 peers, 2 of them remote.
  std::vector<float> c(4000);
  tpdp_tensor o = tpdp_tensor_1d(c.data(), TPDP_F32, 4000);
  ASSERT_TPDP_OK(tpdp_alltoall(World(), &g, &o));
  expect(3000 * kF32, 2000 * kF32);
  // A barrier moves no tensor.
  ASSERT_TPDP_OK(tpdp_barrier(World()));
  expect(0, 0);
}

// dp=2,tp=2: tp joins the ranks of one host, dp one rank of each host;
// each dim communicator counts its own.
TEST_F(Traffic_, MeshDimsCountApart) {
  tpdp_mesh *mesh = nullptr;
  ASSERT_TPDP_OK(tpdp_mesh_create_from_string(World(), "dp=2,tp=2", &mesh));
  tpdp_comm *dp = nullptr, *tp = nullptr;
  ASSERT_TPDP_OK(tpdp_mesh_dim_comm_by_name(mesh, "dp", &dp));
  ASSERT_TPDP_OK(tpdp_mesh_dim_comm_by_name(mesh, "tp", &tp));
  ASSERT_TPDP_OK(tpdp_comm_traffic_reset(World()));
  std::vector<float> x(3000, 1.0f);
  tpdp_tensor t = tpdp_tensor_1d(x.data(), TPDP_F32, 3000);
  ASSERT_TPDP_OK(tpdp_allreduce(tp, &t, &t, TPDP_OP_SUM));
  ASSERT_TPDP_OK(tpdp_allreduce(dp, &t, &t, TPDP_OP_SUM));
  ASSERT_TPDP_OK(tpdp_allreduce(dp, &t, &t, TPDP_OP_SUM));
  // Two ranks: each sends its half twice, the whole message.
  tpdp_comm_traffic gt = Traffic(tp), gd = Traffic(dp), gw = Traffic(World());
  EXPECT_EQ(gt.bytes, 3000 * kF32);
  EXPECT_EQ(gt.cross_host_bytes, 0u);
  EXPECT_EQ(gd.bytes, 2 * 3000 * kF32);
  EXPECT_EQ(gd.cross_host_bytes, 2 * 3000 * kF32);
  EXPECT_EQ(gw.bytes, 0u);
  ASSERT_TPDP_OK(tpdp_mesh_destroy(mesh));
}

// The fully sharded units' collectives over pieces send each rank's block
// straight to every peer: counted per message, 2 of the 3 peers remote.
TEST_F(Traffic_, PiecesAllgatherCountsEachSend) {
  const int64_t S = 1000;
  std::vector<float> mine((size_t)S, 1.0f), all((size_t)(4 * S));
  tpdp_tensor s = tpdp_tensor_1d(mine.data(), TPDP_F32, S);
  tpdp_tensor g = tpdp_tensor_1d(all.data(), TPDP_F32, 4 * S);
  comm_piece half[2] = {{0, S / 2}, {S / 2, S - S / 2}};
  comm_pieces sp = {half, 2};
  tpdp_work *w = nullptr;
  ASSERT_TPDP_OK(
      comm_allgather_pieces_async(World(), &s, &sp, &g, nullptr, &w));
  ASSERT_TPDP_OK(tpdp_work_wait(w));
  tpdp_comm_traffic got = Traffic(World());
  EXPECT_EQ(got.bytes, 3 * S * kF32);
  EXPECT_EQ(got.cross_host_bytes, 2 * S * kF32);
}

// The reducer's hierarchical path (comm_allreduce_shm): nothing between the
// ranks of a host; across, local rank l allreduces its half of the buffer
// with rank l of the other host (a ring of 2: its half, once), charged to
// the world. Against the ring over the 4 ranks: 2 n bytes across in all
// against 3 n, the ratio 2/3 of the ring formula.
TEST_F(Traffic_, HierarchicalSendsTwoThirdsOfTheRingAcross) {
  const int64_t n = 1 << 18;
  comm_shm *s = nullptr;
  ASSERT_TPDP_OK(comm_shm_create(World(), n * sizeof(float), &s));
  ASSERT_NE(s, nullptr) << "no segment across the hosts";
  float *buf = static_cast<float *>(comm_shm_region(s));
  for (int64_t i = 0; i < n; i++) buf[i] = 1.0f;
  tpdp_tensor t = tpdp_tensor_1d(buf, TPDP_F32, n);
  ASSERT_TPDP_OK(tpdp_comm_traffic_reset(World()));
  ASSERT_TPDP_OK(comm_allreduce_shm(World(), s, &t, TPDP_OP_AVG));
  tpdp_comm_traffic hier = Traffic(World());
  EXPECT_EQ(buf[0], 1.0f);
  EXPECT_EQ(hier.bytes, (uint64_t)n / 2 * kF32);
  EXPECT_EQ(hier.cross_host_bytes, (uint64_t)n / 2 * kF32);
  comm_shm_free(s);

  std::vector<float> x((size_t)n, 1.0f);
  tpdp_tensor f = tpdp_tensor_1d(x.data(), TPDP_F32, n);
  ASSERT_TPDP_OK(tpdp_comm_traffic_reset(World()));
  ASSERT_TPDP_OK(tpdp_allreduce(World(), &f, &f, TPDP_OP_AVG));
  tpdp_comm_traffic ring = Traffic(World());
  const uint64_t hier_all = SumOverRanks(hier.cross_host_bytes);
  const uint64_t ring_all = SumOverRanks(ring.cross_host_bytes);
  EXPECT_EQ(hier_all, 2 * (uint64_t)n * kF32);
  EXPECT_EQ(ring_all, 3 * (uint64_t)n * kF32);
  EXPECT_EQ(3 * hier_all, 2 * ring_all);
}

TEST_F(Traffic_, Misuse) {
  tpdp_comm_traffic t;
  EXPECT_TPDP_ERROR(tpdp_comm_traffic_get(nullptr, &t), TPDP_ERR_NULL_POINTER,
                    "'comm'");
  EXPECT_TPDP_ERROR(tpdp_comm_traffic_get(World(), nullptr),
                    TPDP_ERR_NULL_POINTER, "'out'");
  EXPECT_TPDP_ERROR(tpdp_comm_traffic_reset(nullptr), TPDP_ERR_NULL_POINTER,
                    "'comm'");
}

}  // namespace
