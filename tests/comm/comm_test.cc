// SPDX-License-Identifier: BSD-3-Clause
// Communicator split, the device mesh over the world (coordinates, groups,
// sub-communicator membership), and bad input to every collective. Bad
// input is the same on every rank, so each rank fails locally and nobody is
// left waiting in a collective.
#include <algorithm>
#include <string>
#include <vector>

#include "tests/comm/coll_util.h"
#include "tests/comm/fake_backend.h"

namespace {

using coll::HostBuf;

// World ranks of the members of `c`, in c's rank order (via allgather).
std::vector<int> Members(tpdp_comm *c) {
  int p = tpdp_comm_size(c);
  int32_t me = tpdp_test::WorldRank();
  std::vector<int32_t> all(p, -1);
  tpdp_tensor s = tpdp_tensor_1d(&me, TPDP_I32, 1);
  tpdp_tensor r = tpdp_tensor_1d(all.data(), TPDP_I32, p);
  EXPECT_TPDP_OK(tpdp_allgather(c, &s, &r));
  return std::vector<int>(all.begin(), all.end());
}

TEST(Comm, WorldBasics) {
  tpdp_comm *w = tpdp_test::World();
  ASSERT_NE(w, nullptr);
  EXPECT_TRUE(tpdp_is_initialized());
  EXPECT_STREQ(tpdp_comm_name(w), "world");
  EXPECT_STREQ(tpdp_comm_backend(w), "mpi");
  EXPECT_EQ(tpdp_comm_device_type(w), TPDP_DEVICE_CPU);
  int p = tpdp_comm_size(w);
  std::vector<int> m = Members(w);
  for (int r = 0; r < p; r++) EXPECT_EQ(m[r], r);
  EXPECT_TPDP_OK(tpdp_init(nullptr, nullptr));  // second call: no-op
  tpdp_comm *again = nullptr;
  ASSERT_TPDP_OK(tpdp_comm_world(&again));
  EXPECT_EQ(again, w);
  EXPECT_TPDP_ERROR(tpdp_comm_destroy(w), TPDP_ERR_STATE, "world");
  EXPECT_TPDP_OK(tpdp_comm_order_after(w, nullptr));  // no-op on MPI
  EXPECT_TPDP_ERROR(tpdp_comm_world(nullptr), TPDP_ERR_NULL_POINTER, "'out'");
}

TEST(Comm, SplitByColorAndKey) {
  tpdp_comm *w = tpdp_test::World();
  int me = tpdp_comm_rank(w), p = tpdp_comm_size(w);
  // Two groups by parity; key = -rank reverses the order inside each.
  tpdp_comm *c = nullptr;
  ASSERT_TPDP_OK(tpdp_comm_split(w, me % 2, -me, &c));
  ASSERT_NE(c, nullptr);
  std::vector<int> want;
  for (int r = p - 1; r >= 0; r--)
    if (r % 2 == me % 2) want.push_back(r);
  EXPECT_EQ(tpdp_comm_size(c), static_cast<int>(want.size()));
  EXPECT_EQ(tpdp_comm_rank(c),
            std::find(want.begin(), want.end(), me) - want.begin());
  EXPECT_EQ(Members(c), want);
  EXPECT_NE(std::string(tpdp_comm_name(c)).find("world/split("),
            std::string::npos)
      << tpdp_comm_name(c);
  // A split of a split.
  tpdp_comm *cc = nullptr;
  ASSERT_TPDP_OK(tpdp_comm_split(c, 0, 0, &cc));
  EXPECT_EQ(tpdp_comm_size(cc), tpdp_comm_size(c));
  EXPECT_EQ(Members(cc), Members(c));
  EXPECT_TPDP_OK(tpdp_comm_destroy(cc));
  EXPECT_TPDP_OK(tpdp_comm_destroy(c));
}

TEST(Comm, SplitWithNegativeColorLeavesRankOut) {
  tpdp_comm *w = tpdp_test::World();
  int me = tpdp_comm_rank(w), p = tpdp_comm_size(w);
  tpdp_comm *c = reinterpret_cast<tpdp_comm *>(0x1);  // must be overwritten
  ASSERT_TPDP_OK(tpdp_comm_split(w, me == 0 ? -1 : 5, me, &c));
  if (me == 0) {
    EXPECT_EQ(c, nullptr);
  } else {
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(tpdp_comm_size(c), p - 1);
    EXPECT_EQ(tpdp_comm_rank(c), me - 1);
    std::vector<int> want;
    for (int r = 1; r < p; r++) want.push_back(r);
    EXPECT_EQ(Members(c), want);
    EXPECT_TPDP_OK(tpdp_comm_destroy(c));
  }
  EXPECT_TPDP_OK(tpdp_comm_destroy(nullptr));
  EXPECT_TPDP_ERROR(tpdp_comm_split(nullptr, 0, 0, &c), TPDP_ERR_NULL_POINTER,
                    "'comm'");
  EXPECT_TPDP_ERROR(tpdp_comm_split(w, 0, 0, nullptr), TPDP_ERR_NULL_POINTER,
                    "'out'");
}

// The layout worked out by hand for the world size this test runs on.
struct Layout {
  const char *spec;
  std::vector<std::vector<int>> coords;               // per rank
  std::vector<std::vector<std::vector<int>>> groups;  // per dim, per group
};

Layout HandLayout(int p) {
  if (p == 4)
    return {"dp=2,tp=2",
            {{0, 0}, {0, 1}, {1, 0}, {1, 1}},
            {{{0, 2}, {1, 3}}, {{0, 1}, {2, 3}}}};
  return {"dp=2,tp=1", {{0, 0}, {1, 0}}, {{{0, 1}}, {{0}, {1}}}};
}

TEST(Mesh, CoordinatesGroupsAndSubCommunicators) {
  tpdp_comm *w = tpdp_test::World();
  int me = tpdp_comm_rank(w), p = tpdp_comm_size(w);
  ASSERT_TRUE(p == 2 || p == 4) << "run with 2 or 4 ranks";
  Layout L = HandLayout(p);
  tpdp_mesh *m = nullptr;
  ASSERT_TPDP_OK(tpdp_mesh_create_from_string(w, L.spec, &m));
  EXPECT_EQ(tpdp_mesh_ndim(m), 2);
  EXPECT_EQ(tpdp_mesh_size(m), p);
  EXPECT_EQ(tpdp_mesh_rank(m), me);
  EXPECT_EQ(tpdp_mesh_comm(m), w);
  EXPECT_STREQ(tpdp_mesh_dim_name(m, 0), "dp");
  EXPECT_STREQ(tpdp_mesh_dim_name(m, 1), "tp");
  EXPECT_EQ(tpdp_mesh_dim_index(m, "tp"), 1);
  EXPECT_EQ(tpdp_mesh_dim_index(m, "pp"), -1);
  for (int r = 0; r < p; r++) {
    int64_t c[2] = {-1, -1};
    ASSERT_TPDP_OK(tpdp_mesh_coords(m, r, c));
    EXPECT_EQ(c[0], L.coords[r][0]) << "rank " << r;
    EXPECT_EQ(c[1], L.coords[r][1]) << "rank " << r;
    int back = -1;
    ASSERT_TPDP_OK(tpdp_mesh_rank_of(m, c, &back));
    EXPECT_EQ(back, r);
  }
  for (int d = 0; d < 2; d++) {
    SCOPED_TRACE(tpdp_mesh_dim_name(m, d));
    // The group this rank belongs to along d, by hand.
    std::vector<int> mine;
    for (const auto &grp : L.groups[d])
      if (std::find(grp.begin(), grp.end(), me) != grp.end()) mine = grp;
    std::vector<int> ranks(tpdp_mesh_dim_size(m, d), -1);
    ASSERT_TPDP_OK(tpdp_mesh_group_ranks(m, d, me, ranks.data()));
    EXPECT_EQ(ranks, mine);
    tpdp_comm *c = nullptr;
    ASSERT_TPDP_OK(tpdp_mesh_dim_comm(m, d, &c));
    EXPECT_EQ(tpdp_comm_size(c), static_cast<int>(mine.size()));
    EXPECT_EQ(tpdp_comm_rank(c), L.coords[me][d]);  // group rank = coordinate
    EXPECT_EQ(Members(c), mine);
    EXPECT_EQ(std::string(tpdp_comm_name(c)),
              std::string("mesh.") + tpdp_mesh_dim_name(m, d));
    tpdp_comm *byname = nullptr;
    ASSERT_TPDP_OK(
        tpdp_mesh_dim_comm_by_name(m, tpdp_mesh_dim_name(m, d), &byname));
    EXPECT_EQ(byname, c);
  }
  tpdp_comm *c = nullptr;
  EXPECT_TPDP_ERROR(tpdp_mesh_dim_comm_by_name(m, "pp", &c), TPDP_ERR_NOT_FOUND,
                    "'pp'");
  EXPECT_TPDP_ERROR(tpdp_mesh_dim_comm(m, 2, &c), TPDP_ERR_INVALID_ARGUMENT,
                    "dim 2");
  EXPECT_TPDP_ERROR(tpdp_mesh_dim_comm(m, -1, &c), TPDP_ERR_INVALID_ARGUMENT,
                    "dim -1");
  int64_t bad[2] = {0, 5};
  int r = -1;
  EXPECT_TPDP_ERROR(tpdp_mesh_rank_of(m, bad, &r), TPDP_ERR_INVALID_ARGUMENT,
                    "5", "'tp'");
  int64_t cc[2];
  std::string rank_p = "rank " + std::to_string(p);
  EXPECT_TPDP_ERROR(tpdp_mesh_coords(m, p, cc), TPDP_ERR_INVALID_ARGUMENT,
                    rank_p.c_str());

  // Same dims and parent compare equal; a layout-only twin does not.
  tpdp_mesh *twin = nullptr, *layout = nullptr;
  ASSERT_TPDP_OK(tpdp_mesh_create_from_string(w, L.spec, &twin));
  ASSERT_TPDP_OK(tpdp_mesh_create_from_string(nullptr, L.spec, &layout));
  EXPECT_TRUE(tpdp_mesh_equal(m, twin));
  EXPECT_FALSE(tpdp_mesh_equal(m, layout));
  EXPECT_TPDP_OK(tpdp_mesh_destroy(layout));
  EXPECT_TPDP_OK(tpdp_mesh_destroy(twin));
  EXPECT_TPDP_OK(tpdp_mesh_destroy(m));
}

TEST(Mesh, OneDimMeshAndThreeDimsWithOnes) {
  tpdp_comm *w = tpdp_test::World();
  int me = tpdp_comm_rank(w), p = tpdp_comm_size(w);
  int64_t sizes[3] = {1, p, 1};
  const char *names[3] = {"pp", "dp", "tp"};
  tpdp_mesh *m = nullptr;
  ASSERT_TPDP_OK(tpdp_mesh_create(w, 3, sizes, names, &m));
  tpdp_comm *dp = nullptr, *pp = nullptr;
  ASSERT_TPDP_OK(tpdp_mesh_dim_comm_by_name(m, "dp", &dp));
  ASSERT_TPDP_OK(tpdp_mesh_dim_comm_by_name(m, "pp", &pp));
  EXPECT_EQ(tpdp_comm_size(dp), p);
  EXPECT_EQ(tpdp_comm_rank(dp), me);
  EXPECT_EQ(tpdp_comm_size(pp), 1);
  EXPECT_EQ(Members(pp), std::vector<int>{me});
  EXPECT_TPDP_OK(tpdp_mesh_destroy(m));
  // names NULL: dims are d0, d1, ...
  ASSERT_TPDP_OK(tpdp_mesh_create(w, 1, sizes + 1, nullptr, &m));
  EXPECT_STREQ(tpdp_mesh_dim_name(m, 0), "d0");
  EXPECT_TPDP_OK(tpdp_mesh_destroy(m));
}

TEST(Mesh, BadInputOverTheWorld) {
  tpdp_comm *w = tpdp_test::World();
  int p = tpdp_comm_size(w);
  tpdp_mesh *m = reinterpret_cast<tpdp_mesh *>(0x1);
  std::string spec = "dp=" + std::to_string(p) + ",tp=3";
  std::string have = std::to_string(3 * p) + " ranks";
  std::string world_has = "has " + std::to_string(p);
  EXPECT_TPDP_ERROR(tpdp_mesh_create_from_string(w, spec.c_str(), &m),
                    TPDP_ERR_MESH_SIZE, "tpdp_mesh_create", have.c_str(),
                    "world", world_has.c_str());
  EXPECT_EQ(m, nullptr);
  EXPECT_TPDP_ERROR(tpdp_mesh_create_from_string(w, "dp=2,dp=2", &m),
                    TPDP_ERR_DUPLICATE, "'dp'");
  int64_t sizes[9] = {p, 1, 1, 1, 1, 1, 1, 1, 1};
  const char *names[9] = {"a", "b", "c", "d", "e", "f", "g", "h", "i"};
  EXPECT_TPDP_ERROR(tpdp_mesh_create(w, 9, sizes, names, &m),
                    TPDP_ERR_TOO_MANY_DIMS, "9 dims", "at most 8");
  const char *empty[2] = {"dp", ""};
  EXPECT_TPDP_ERROR(tpdp_mesh_create(w, 2, sizes, empty, &m),
                    TPDP_ERR_EMPTY_NAME, "dim 1");
  int64_t zero[2] = {p, 0};
  EXPECT_TPDP_ERROR(tpdp_mesh_create(w, 2, zero, names, &m),
                    TPDP_ERR_BAD_DIM_SIZE, "dim 1", "'b'", "size 0");
  int64_t neg[2] = {-p, -1};
  EXPECT_TPDP_ERROR(tpdp_mesh_create(w, 2, neg, names, &m),
                    TPDP_ERR_BAD_DIM_SIZE, "dim 0", "'a'");
  // The world still works after all of that.
  EXPECT_TPDP_OK(tpdp_barrier(w));
}

// ------------------------------------------------------------ bad input

class BadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    w_ = tpdp_test::World();
    p_ = tpdp_comm_size(w_);
  }
  // After every bad call the communicator must still work.
  void TearDown() override {
    int32_t one = 1, sum = 0;
    tpdp_tensor s = tpdp_tensor_1d(&one, TPDP_I32, 1),
                r = tpdp_tensor_1d(&sum, TPDP_I32, 1);
    EXPECT_TPDP_OK(tpdp_allreduce(w_, &s, &r, TPDP_OP_SUM));
    EXPECT_EQ(sum, p_);
  }
  tpdp_comm *w_ = nullptr;
  int p_ = 0;
};

TEST_F(BadInput, NullPointers) {
  float x[8] = {0};
  tpdp_tensor t = tpdp_tensor_1d(x, TPDP_F32, 1);
  tpdp_tensor g = tpdp_tensor_1d(x, TPDP_F32, p_);
  tpdp_work *wk = nullptr;
  EXPECT_TPDP_ERROR(tpdp_allreduce(nullptr, &t, &t, TPDP_OP_SUM),
                    TPDP_ERR_NULL_POINTER, "allreduce", "communicator is NULL");
  EXPECT_TPDP_ERROR(tpdp_allreduce(w_, nullptr, &t, TPDP_OP_SUM),
                    TPDP_ERR_NULL_POINTER, "allreduce", "send tensor is NULL");
  EXPECT_TPDP_ERROR(tpdp_allreduce(w_, &t, nullptr, TPDP_OP_SUM),
                    TPDP_ERR_NULL_POINTER, "allreduce", "recv tensor is NULL");
  EXPECT_TPDP_ERROR(tpdp_allgather(w_, nullptr, &g), TPDP_ERR_NULL_POINTER,
                    "allgather", "send");
  EXPECT_TPDP_ERROR(tpdp_reduce_scatter(w_, &g, nullptr, TPDP_OP_SUM),
                    TPDP_ERR_NULL_POINTER, "reduce_scatter", "recv");
  EXPECT_TPDP_ERROR(tpdp_alltoall(w_, &g, nullptr), TPDP_ERR_NULL_POINTER,
                    "alltoall", "recv");
  EXPECT_TPDP_ERROR(tpdp_broadcast(w_, &t, nullptr, 0), TPDP_ERR_NULL_POINTER,
                    "broadcast", "recv");
  EXPECT_TPDP_ERROR(tpdp_barrier(nullptr), TPDP_ERR_NULL_POINTER, "barrier",
                    "communicator");
  EXPECT_TPDP_ERROR(tpdp_allreduce_async(w_, &t, &t, TPDP_OP_SUM, nullptr),
                    TPDP_ERR_NULL_POINTER, "allreduce", "work handle");
  EXPECT_TPDP_ERROR(tpdp_barrier_async(w_, nullptr), TPDP_ERR_NULL_POINTER,
                    "barrier", "work handle");
  tpdp_tensor nodata = tpdp_tensor_1d(nullptr, TPDP_F32, 3);
  EXPECT_TPDP_ERROR(tpdp_allreduce(w_, &nodata, &nodata, TPDP_OP_SUM),
                    TPDP_ERR_NULL_POINTER, "recv buffer has NULL data",
                    "3 elements");
  int done = 0;
  EXPECT_TPDP_ERROR(tpdp_work_test(nullptr, &done), TPDP_ERR_NULL_POINTER,
                    "'work'");
  EXPECT_TPDP_OK(tpdp_work_wait(nullptr));
  EXPECT_TPDP_OK(tpdp_work_wait_stream(nullptr, nullptr));
  // A failed async call leaves *work NULL.
  wk = reinterpret_cast<tpdp_work *>(0x1);
  EXPECT_TPDP_ERROR(tpdp_allreduce_async(w_, nullptr, &t, TPDP_OP_SUM, &wk),
                    TPDP_ERR_NULL_POINTER, "send");
  EXPECT_EQ(wk, nullptr);
  // tpdp_work_test on a live handle needs a place to put the answer.
  ASSERT_TPDP_OK(tpdp_barrier_async(w_, &wk));
  EXPECT_TPDP_ERROR(tpdp_work_test(wk, nullptr), TPDP_ERR_NULL_POINTER,
                    "'done'");
  EXPECT_TPDP_OK(tpdp_work_wait(wk));
}

TEST_F(BadInput, MismatchedDtypes) {
  float f[8] = {0};
  int32_t i[8] = {0};
  tpdp_tensor tf = tpdp_tensor_1d(f, TPDP_F32, 1),
              ti = tpdp_tensor_1d(i, TPDP_I32, 1);
  tpdp_tensor tfp = tpdp_tensor_1d(f, TPDP_F32, p_),
              tip = tpdp_tensor_1d(i, TPDP_I32, p_);
  EXPECT_TPDP_ERROR(tpdp_allreduce(w_, &tf, &ti, TPDP_OP_SUM),
                    TPDP_ERR_DTYPE_MISMATCH, "allreduce", "send dtype f32",
                    "recv dtype i32");
  EXPECT_TPDP_ERROR(tpdp_allgather(w_, &tf, &tip), TPDP_ERR_DTYPE_MISMATCH,
                    "allgather", "f32", "i32");
  EXPECT_TPDP_ERROR(tpdp_reduce_scatter(w_, &tip, &tf, TPDP_OP_MAX),
                    TPDP_ERR_DTYPE_MISMATCH, "reduce_scatter",
                    "send dtype i32");
  EXPECT_TPDP_ERROR(tpdp_alltoall(w_, &tfp, &tip), TPDP_ERR_DTYPE_MISMATCH,
                    "alltoall");
  // Broadcast checks send on the root only: every rank is root here.
  tpdp_comm *self = nullptr;
  ASSERT_TPDP_OK(tpdp_comm_split(w_, tpdp_comm_rank(w_), 0, &self));
  EXPECT_TPDP_ERROR(tpdp_broadcast(self, &tf, &ti, 0), TPDP_ERR_DTYPE_MISMATCH,
                    "broadcast", "f32", "i32");
  tpdp_tensor bad = tpdp_tensor_1d(f, static_cast<tpdp_dtype>(9), 1);
  EXPECT_TPDP_ERROR(tpdp_allreduce(w_, &bad, &bad, TPDP_OP_SUM),
                    TPDP_ERR_DTYPE_MISMATCH, "invalid dtype 9");
  EXPECT_TPDP_OK(tpdp_comm_destroy(self));
}

TEST_F(BadInput, MismatchedCountsForEachCollective) {
  std::vector<double> a(64), b(64);
  auto T = [](std::vector<double> &v, int64_t n) {
    return tpdp_tensor_1d(v.data(), TPDP_F64, n);
  };
  std::string P = std::to_string(p_) + " ranks";
  tpdp_tensor s7 = T(a, 7), r6 = T(b, 6);
  EXPECT_TPDP_ERROR(tpdp_allreduce(w_, &s7, &r6, TPDP_OP_SUM),
                    TPDP_ERR_SHAPE_MISMATCH, "allreduce", "send has 7",
                    "recv 6");
  tpdp_work *wk = nullptr;
  EXPECT_TPDP_ERROR(tpdp_allreduce_async(w_, &s7, &r6, TPDP_OP_AVG, &wk),
                    TPDP_ERR_SHAPE_MISMATCH, "allreduce", "send has 7");
  EXPECT_EQ(wk, nullptr);
  tpdp_tensor s3 = T(a, 3), r3p1 = T(b, 3 * p_ + 1);
  std::string r3p1s = "recv " + std::to_string(3 * p_ + 1);
  EXPECT_TPDP_ERROR(tpdp_allgather(w_, &s3, &r3p1), TPDP_ERR_SHAPE_MISMATCH,
                    "allgather", "numel(recv) must be size * numel(send)",
                    "send has 3", r3p1s.c_str(), P.c_str());
  tpdp_tensor s3p1 = T(a, 3 * p_ + 1), r3 = T(b, 3);
  EXPECT_TPDP_ERROR(tpdp_reduce_scatter(w_, &s3p1, &r3, TPDP_OP_SUM),
                    TPDP_ERR_SHAPE_MISMATCH, "reduce_scatter",
                    "numel(send) must be size * numel(recv)", "recv 3",
                    P.c_str());
  tpdp_tensor s5 = T(a, 4 * p_ + 1), r5 = T(b, 4 * p_ + 1);
  EXPECT_TPDP_ERROR(tpdp_alltoall(w_, &s5, &r5), TPDP_ERR_SHAPE_MISMATCH,
                    "alltoall", "divide by size");
  tpdp_tensor s8 = T(a, 2 * p_), r4 = T(b, p_);
  EXPECT_TPDP_ERROR(tpdp_alltoall(w_, &s8, &r4), TPDP_ERR_SHAPE_MISMATCH,
                    "alltoall", "equal numel(recv)");
  // Broadcast compares counts on the root; a size-1 communicator makes
  // every rank its own root so no rank waits for another.
  tpdp_comm *self = nullptr;
  ASSERT_TPDP_OK(tpdp_comm_split(w_, tpdp_comm_rank(w_), 0, &self));
  EXPECT_TPDP_ERROR(tpdp_broadcast(self, &s7, &r6, 0), TPDP_ERR_SHAPE_MISMATCH,
                    "broadcast", "on the root", "send has 7", "recv 6");
  EXPECT_TPDP_OK(tpdp_comm_destroy(self));
}

TEST_F(BadInput, NonContiguousTensors) {
  float x[64] = {0};
  tpdp_tensor strided = tpdp_tensor_1d(x, TPDP_F32, 4);
  strided.strides[0] = 2;
  tpdp_tensor ok4 = tpdp_tensor_1d(x + 32, TPDP_F32, 4);
  tpdp_tensor okp = tpdp_tensor_1d(x + 40, TPDP_F32, 4 * p_);
  EXPECT_TPDP_ERROR(tpdp_allreduce(w_, &strided, &ok4, TPDP_OP_SUM),
                    TPDP_ERR_INVALID_ARGUMENT, "allreduce",
                    "send buffer is not contiguous");
  EXPECT_TPDP_ERROR(tpdp_allreduce(w_, &ok4, &strided, TPDP_OP_SUM),
                    TPDP_ERR_INVALID_ARGUMENT, "recv buffer is not contiguous");
  EXPECT_TPDP_ERROR(tpdp_allgather(w_, &strided, &okp),
                    TPDP_ERR_INVALID_ARGUMENT, "allgather",
                    "send buffer is not contiguous");
  EXPECT_TPDP_ERROR(tpdp_broadcast(w_, nullptr, &strided, 0),
                    TPDP_ERR_INVALID_ARGUMENT, "broadcast",
                    "recv buffer is not contiguous");
  // A 2-D column view.
  tpdp_tensor col = tpdp_tensor_1d(x, TPDP_F32, 0);
  col.ndim = 2;
  col.shape[0] = 4;
  col.shape[1] = 1;
  col.strides[0] = 3;
  col.strides[1] = 1;
  EXPECT_TPDP_ERROR(tpdp_reduce_scatter(w_, &okp, &col, TPDP_OP_SUM),
                    TPDP_ERR_INVALID_ARGUMENT, "reduce_scatter",
                    "recv buffer is not contiguous");
}

TEST_F(BadInput, WrongDeviceBadRootBadOpBadShape) {
  float x[16] = {0};
  tpdp_tensor cpu = tpdp_tensor_1d(x, TPDP_F32, 2);
  tpdp_tensor gpu = cpu;
  gpu.device.type = TPDP_DEVICE_CUDA;
  gpu.device.index = 0;
  EXPECT_TPDP_ERROR(tpdp_allreduce(w_, &gpu, &cpu, TPDP_OP_SUM),
                    TPDP_ERR_DEVICE_MISMATCH, "allreduce",
                    "send buffer is on cuda:0", "world", "mpi");
  EXPECT_TPDP_ERROR(tpdp_broadcast(w_, nullptr, &gpu, 0),
                    TPDP_ERR_DEVICE_MISMATCH, "broadcast",
                    "recv buffer is on cuda:0");
  std::string root_p = "root " + std::to_string(p_);
  EXPECT_TPDP_ERROR(tpdp_broadcast(w_, &cpu, &cpu, p_),
                    TPDP_ERR_INVALID_ARGUMENT, "broadcast", root_p.c_str(),
                    "world");
  EXPECT_TPDP_ERROR(tpdp_broadcast(w_, &cpu, &cpu, -1),
                    TPDP_ERR_INVALID_ARGUMENT, "root -1");
  tpdp_work *wk = nullptr;
  EXPECT_TPDP_ERROR(tpdp_broadcast_async(w_, &cpu, &cpu, 1000, &wk),
                    TPDP_ERR_INVALID_ARGUMENT, "root 1000");
  EXPECT_TPDP_ERROR(
      tpdp_allreduce(w_, &cpu, &cpu, static_cast<tpdp_reduce_op>(9)),
      TPDP_ERR_INVALID_ARGUMENT, "allreduce", "reduce op 9");
  tpdp_tensor cpup = tpdp_tensor_1d(x, TPDP_F32, p_);
  EXPECT_TPDP_ERROR(
      tpdp_reduce_scatter(w_, &cpup, &cpu, static_cast<tpdp_reduce_op>(-1)),
      TPDP_ERR_INVALID_ARGUMENT, "reduce_scatter", "reduce op -1");
  tpdp_tensor neg = tpdp_tensor_1d(x, TPDP_F32, -2);
  EXPECT_TPDP_ERROR(tpdp_allreduce(w_, &neg, &neg, TPDP_OP_SUM),
                    TPDP_ERR_BAD_DIM_SIZE, "shape[0] = -2");
  tpdp_tensor nine = cpu;
  nine.ndim = 9;
  EXPECT_TPDP_ERROR(tpdp_allreduce(w_, &cpu, &nine, TPDP_OP_SUM),
                    TPDP_ERR_TOO_MANY_DIMS, "recv buffer has ndim 9");
}

// The front end over a scripted backend (fake_backend.h, this process
// only): a work handle's wait and release both count, the wait's failure
// first; the handle is released whatever happens.
TEST(Work, WaitReportsTheWaitsFailureThenTheReleases) {
  fake_backend::Script s;
  fake_backend::Parent parent(&s, 0, 1);
  tpdp_work *w = nullptr;
  ASSERT_TPDP_OK(tpdp_barrier_async(parent.get(), &w));
  s.fail_release = true;
  EXPECT_TPDP_ERROR(tpdp_work_wait(w), TPDP_ERR_MPI,
                    "tpdp_work_wait: fake release of barrier failed");
  EXPECT_EQ(s.released, 1);
  ASSERT_TPDP_OK(tpdp_barrier_async(parent.get(), &w));
  s.fail_wait = true;
  EXPECT_TPDP_ERROR(tpdp_work_wait(w), TPDP_ERR_MPI,
                    "tpdp_work_wait: fake wait of barrier failed");
  EXPECT_EQ(s.released, 2);
  // No wait_stream on a host backend: tpdp_work_wait_stream waits.
  ASSERT_TPDP_OK(tpdp_barrier_async(parent.get(), &w));
  s.fail_wait = false;
  EXPECT_TPDP_ERROR(tpdp_work_wait_stream(w, nullptr), TPDP_ERR_MPI,
                    "fake release of barrier failed");
  EXPECT_EQ(s.released, 3);
  // A blocking collective waits (and releases) inside.
  s.fail_release = false;
  EXPECT_TPDP_OK(tpdp_barrier(parent.get()));
  EXPECT_EQ(s.released, 4);
}

// On one host no byte crosses hosts; the bytes are a ring's: 2 (p - 1) n
// elements over the ranks of an allreduce (tests/multihost:traffic_test
// has the cases across hosts).
TEST(Traffic, OneHostCountsNothingAcross) {
  tpdp_comm *w = tpdp_test::World();
  const int p = tpdp_comm_size(w);
  int lr = 0, ls = 0;
  ASSERT_TPDP_OK(tpdp_comm_local_rank(w, &lr, &ls));
  if (ls != p) GTEST_SKIP() << "ranks on several hosts (comm_multihost)";
  std::vector<float> x(1200, 1.0f);
  tpdp_tensor t = tpdp_tensor_1d(x.data(), TPDP_F32, 1200);
  ASSERT_TPDP_OK(tpdp_comm_traffic_reset(w));
  ASSERT_TPDP_OK(tpdp_allreduce(w, &t, &t, TPDP_OP_SUM));
  tpdp_comm_traffic got = {~0ull, ~0ull};
  ASSERT_TPDP_OK(tpdp_comm_traffic_get(w, &got));
  EXPECT_EQ(got.cross_host_bytes, 0u);
  int64_t sum = (int64_t)got.bytes;
  tpdp_tensor s = tpdp_tensor_1d(&sum, TPDP_I64, 1);
  ASSERT_TPDP_OK(tpdp_allreduce(w, &s, &s, TPDP_OP_SUM));
  EXPECT_EQ(sum, 2 * (p - 1) * 1200 * 4);
}

// A communicator of a backend that attaches no record (the fake one, as
// NCCL's) says it does not count.
TEST(Traffic, UncountedCommunicatorSaysSo) {
  fake_backend::Script s;
  fake_backend::Parent parent(&s, 0, 1);
  tpdp_comm_traffic t;
  EXPECT_TPDP_ERROR(tpdp_comm_traffic_get(parent.get(), &t),
                    TPDP_ERR_UNSUPPORTED,
                    "communicator fake (fake backend) does not count");
  EXPECT_TPDP_ERROR(tpdp_comm_traffic_reset(parent.get()), TPDP_ERR_UNSUPPORTED,
                    "does not count");
}

}  // namespace
