// SPDX-License-Identifier: BSD-3-Clause
// tpdp_redistribute's cross-rank and memory checks (tp/redistribute_check.c)
// on 2 and 4 ranks, a 1-D mesh over all of them: ranks passing different
// global shapes, dtypes or placements all fail, naming each rank's
// arguments; a rank whose own arguments fail makes its peers fail too; the
// agreement runs once per pair of specs (every call with
// TPDP_DEBUG_COLLECTIVES); a destination overlapping the source is refused.
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/test_util.h"
#include "tp/tp_internal.h"

namespace {

const tpdp_device kCpu = {TPDP_DEVICE_CPU, 0};

int Me() { return tpdp_test::WorldRank(); }
int P() { return tpdp_test::WorldSize(); }
// The ranks after rank 0, as the messages group them.
std::string Others() {
  return P() == 2 ? "rank 1" : "ranks 1-" + std::to_string(P() - 1);
}

class RedistCheck : public ::testing::Test {
 protected:
  void SetUp() override { MakeMesh(tpdp_test::World()); }
  void TearDown() override {
    for (tpdp_spec *s : specs_) EXPECT_TPDP_OK(tpdp_spec_destroy(s));
    EXPECT_TPDP_OK(tpdp_mesh_destroy(mesh_));
  }
  void MakeMesh(tpdp_comm *c) {
    std::string text = "tp=" + std::to_string(P());
    ASSERT_TPDP_OK(tpdp_mesh_create_from_string(c, text.c_str(), &mesh_));
  }
  tpdp_spec *Spec(tpdp_placement pl, int64_t rows, int64_t cols,
                  tpdp_dtype dt = TPDP_F32) {
    int64_t g[2] = {rows, cols};
    tpdp_spec *s = nullptr;
    EXPECT_TPDP_OK(tpdp_spec_create(mesh_, &pl, 1, 2, g, dt, kCpu, &s));
    specs_.push_back(s);
    return s;
  }
  // This rank's local tensor of `s` in `buf` (resized to fit).
  tpdp_tensor Local(const tpdp_spec *s, std::vector<double> *buf) {
    int64_t shape[2], off[2];
    EXPECT_TPDP_OK(tpdp_spec_local_shape(s, tpdp_mesh_rank(mesh_), shape, off));
    buf->assign(shape[0] * shape[1] + 1, 0.0);
    tpdp_tensor t;
    EXPECT_TPDP_OK(
        tpdp_tensor_init(&t, buf->data(), tpdp_spec_dtype(s), kCpu, 2, shape));
    return t;
  }
  std::string Head() const {
    return "ranks of " + std::string(tpdp_comm_name(tpdp_mesh_comm(mesh_))) +
           " passed different arguments (this is rank " + std::to_string(Me()) +
           "): ";
  }
  tpdp_mesh *mesh_ = nullptr;
  std::vector<tpdp_spec *> specs_;
};

TEST_F(RedistCheck, DifferentGlobalShapesFailEveryRank) {
  int64_t cols = Me() == 0 ? 4 : 6;
  tpdp_spec *src = Spec(tpdp_shard(0), 8, cols);
  tpdp_spec *dst = Spec(tpdp_replicate(), 8, cols);
  std::vector<double> a, b;
  tpdp_dtensor in = {Local(src, &a), src};
  tpdp_tensor out = Local(dst, &b);
  std::string want = Head() + "rank 0 passed f32 [8, 4] [S0] -> [R], " +
                     Others() + " f32 [8, 6] [S0] -> [R]; every rank must " +
                     "pass the same global shape, dtype and placements";
  EXPECT_TPDP_ERROR(tpdp_redistribute(&in, dst, &out), TPDP_ERR_SHAPE_MISMATCH,
                    "tpdp_redistribute: ", want.c_str());
}

TEST_F(RedistCheck, DifferentDtypesFailEveryRank) {
  tpdp_dtype dt = Me() == 0 ? TPDP_F32 : TPDP_F64;
  tpdp_spec *src = Spec(tpdp_shard(0), 8, 2, dt);
  tpdp_spec *dst = Spec(tpdp_replicate(), 8, 2, dt);
  std::vector<double> a, b;
  tpdp_dtensor in = {Local(src, &a), src};
  tpdp_tensor out = Local(dst, &b);
  std::string want = Head() + "rank 0 passed f32 [8, 2] [S0] -> [R], " +
                     Others() + " f64 [8, 2] [S0] -> [R]";
  EXPECT_TPDP_ERROR(tpdp_redistribute(&in, dst, &out), TPDP_ERR_DTYPE_MISMATCH,
                    want.c_str());
}

TEST_F(RedistCheck, DifferentPlacementsFailEveryRank) {
  // Source placements differ, then (same source) destination placements.
  tpdp_spec *src = Spec(Me() == 0 ? tpdp_shard(0) : tpdp_shard(1), 8, 8);
  tpdp_spec *dst = Spec(tpdp_replicate(), 8, 8);
  std::vector<double> a, b;
  tpdp_dtensor in = {Local(src, &a), src};
  tpdp_tensor out = Local(dst, &b);
  std::string want = Head() + "rank 0 passed f32 [8, 8] [S0] -> [R], " +
                     Others() + " f32 [8, 8] [S1] -> [R]";
  EXPECT_TPDP_ERROR(tpdp_redistribute(&in, dst, &out),
                    TPDP_ERR_INVALID_ARGUMENT, want.c_str());
  tpdp_spec *s0 = Spec(tpdp_shard(0), 8, 8);
  tpdp_spec *d2 =
      Spec(Me() == 0 ? tpdp_partial(TPDP_OP_SUM) : tpdp_shard(1), 8, 8);
  in = {Local(s0, &a), s0};
  out = Local(d2, &b);
  want = Head() + "rank 0 passed f32 [8, 8] [S0] -> [P:sum], " + Others() +
         " f32 [8, 8] [S0] -> [S1]";
  EXPECT_TPDP_ERROR(tpdp_redistribute(&in, d2, &out), TPDP_ERR_INVALID_ARGUMENT,
                    want.c_str());
}

TEST_F(RedistCheck, ARankRejectingItsArgumentsFailsItsPeersToo) {
  // The last rank's destination has the wrong local shape.
  int last = P() - 1;
  tpdp_spec *src = Spec(tpdp_shard(0), 8, 2);
  tpdp_spec *dst = Spec(tpdp_replicate(), 8, 2);
  std::vector<double> a, b(64);
  tpdp_dtensor in = {Local(src, &a), src};
  tpdp_tensor out = Local(dst, &b);
  // Every rank gets its message, naming it.
  std::string from = " (rank " + std::to_string(last) + " of world)";
  if (Me() == last) out.shape[0] = 7;
  EXPECT_TPDP_ERROR(tpdp_redistribute(&in, dst, &out), TPDP_ERR_SHAPE_MISMATCH,
                    "tpdp_redistribute: ",
                    "destination local tensor has shape [7, 2]", from.c_str());
}

TEST_F(RedistCheck, AgreedOncePerPairOfSpecs) {
  // 8 x 2 f32 sharded on rows; every rank fills its rows with their global
  // row index, so the gathered tensor holds row r = r everywhere.
  tpdp_spec *src = Spec(tpdp_shard(0), 8, 2);
  tpdp_spec *dst = Spec(tpdp_replicate(), 8, 2);
  std::vector<float> a(8 * 2), b(8 * 2, -1.0f);
  int64_t shape[2], off[2];
  ASSERT_TPDP_OK(tpdp_spec_local_shape(src, Me(), shape, off));
  for (int64_t i = 0; i < shape[0] * 2; i++)
    a[i] = static_cast<float>(off[0] + i / 2);
  tpdp_dtensor in;
  ASSERT_TPDP_OK(
      tpdp_tensor_init(&in.local, a.data(), TPDP_F32, kCpu, 2, shape));
  in.spec = src;
  int64_t full[2] = {8, 2};
  tpdp_tensor out;
  ASSERT_TPDP_OK(tpdp_tensor_init(&out, b.data(), TPDP_F32, kCpu, 2, full));
  EXPECT_EQ(src->agreed_next, 0);
  ASSERT_TPDP_OK(tpdp_redistribute(&in, dst, &out));
  EXPECT_EQ(src->agreed_next, 1);
  for (int i = 0; i < 16; i++) EXPECT_EQ(b[i], static_cast<float>(i / 2));
  // The same pair again (another spec object with the same value): no
  // agreement exchange.
  tpdp_spec *dst2 = Spec(tpdp_replicate(), 8, 2);
  ASSERT_TPDP_OK(tpdp_redistribute(&in, dst2, &out));
  EXPECT_EQ(src->agreed_next, 1);
  // A new pair is agreed on.
  tpdp_spec *dst3 = Spec(tpdp_shard(1), 8, 2);
  std::vector<double> c;
  tpdp_tensor out3 = Local(dst3, &c);
  ASSERT_TPDP_OK(tpdp_redistribute(&in, dst3, &out3));
  EXPECT_EQ(src->agreed_next, 2);
}

TEST_F(RedistCheck, OverlappingDestinationIsRefused) {
  tpdp_spec *src = Spec(tpdp_shard(0), 8, 2);
  tpdp_spec *dst = Spec(tpdp_replicate(), 8, 2);
  // One buffer: the local shard at its start, the full tensor from its
  // second element (overlapping), then from just past the shard (not).
  std::vector<float> buf(64, 0.0f);
  int64_t shape[2], off[2];
  ASSERT_TPDP_OK(tpdp_spec_local_shape(src, Me(), shape, off));
  tpdp_dtensor in;
  ASSERT_TPDP_OK(
      tpdp_tensor_init(&in.local, buf.data(), TPDP_F32, kCpu, 2, shape));
  in.spec = src;
  int64_t full[2] = {8, 2};
  tpdp_tensor out;
  ASSERT_TPDP_OK(
      tpdp_tensor_init(&out, buf.data() + 1, TPDP_F32, kCpu, 2, full));
  EXPECT_TPDP_ERROR(
      tpdp_redistribute(&in, dst, &out), TPDP_ERR_INVALID_ARGUMENT,
      "overlaps the source local tensor", "pass a separate destination buffer");
  // Same buffer, same view: R -> R would be a copy onto itself.
  tpdp_dtensor rep = {out, dst};
  EXPECT_TPDP_ERROR(tpdp_redistribute(&rep, dst, &out),
                    TPDP_ERR_INVALID_ARGUMENT, "overlaps");
  // A strided source (rows 4 elements apart) whose span reaches into the
  // destination.
  in.local.strides[0] = 4;
  ASSERT_TPDP_OK(tpdp_tensor_init(&out, buf.data() + 4 * shape[0] - 3, TPDP_F32,
                                  kCpu, 2, full));
  EXPECT_TPDP_ERROR(tpdp_redistribute(&in, dst, &out),
                    TPDP_ERR_INVALID_ARGUMENT, "overlaps");
  // Right after the strided source's last element: fine.
  ASSERT_TPDP_OK(tpdp_tensor_init(&out, buf.data() + 4 * shape[0] - 2, TPDP_F32,
                                  kCpu, 2, full));
  EXPECT_TPDP_OK(tpdp_redistribute(&in, dst, &out));
}

TEST(RedistCheckDebug, EveryCallIsCheckedWithDebugCollectives) {
  // A mesh over a communicator made with TPDP_DEBUG_COLLECTIVES=1: a pair
  // agreed before is compared again, so a rank that later passes another
  // destination is caught instead of the ranks running different plans.
  setenv("TPDP_DEBUG_COLLECTIVES", "1", 1);
  tpdp_comm *c = nullptr;
  ASSERT_TPDP_OK(tpdp_comm_split(tpdp_test::World(), 0, Me(), &c));
  unsetenv("TPDP_DEBUG_COLLECTIVES");
  tpdp_mesh *mesh = nullptr;
  std::string text = "tp=" + std::to_string(P());
  ASSERT_TPDP_OK(tpdp_mesh_create_from_string(c, text.c_str(), &mesh));
  tpdp_placement s0 = tpdp_shard(0), r = tpdp_replicate(), s1 = tpdp_shard(1);
  int64_t g[2] = {8, 4};
  tpdp_spec *src = nullptr, *rep = nullptr, *col = nullptr;
  ASSERT_TPDP_OK(tpdp_spec_create(mesh, &s0, 1, 2, g, TPDP_F32, kCpu, &src));
  ASSERT_TPDP_OK(tpdp_spec_create(mesh, &r, 1, 2, g, TPDP_F32, kCpu, &rep));
  ASSERT_TPDP_OK(tpdp_spec_create(mesh, &s1, 1, 2, g, TPDP_F32, kCpu, &col));
  std::vector<float> a(32, 1.0f), b(32, 0.0f);
  int64_t shape[2], off[2];
  ASSERT_TPDP_OK(tpdp_spec_local_shape(src, Me(), shape, off));
  tpdp_dtensor in;
  ASSERT_TPDP_OK(
      tpdp_tensor_init(&in.local, a.data(), TPDP_F32, kCpu, 2, shape));
  in.spec = src;
  tpdp_tensor full;
  ASSERT_TPDP_OK(tpdp_tensor_init(&full, b.data(), TPDP_F32, kCpu, 2, g));
  ASSERT_TPDP_OK(tpdp_redistribute(&in, rep, &full));
  int64_t cs[2], co[2];
  ASSERT_TPDP_OK(tpdp_spec_local_shape(col, Me(), cs, co));
  tpdp_tensor part;
  ASSERT_TPDP_OK(tpdp_tensor_init(&part, b.data(), TPDP_F32, kCpu, 2, cs));
  std::string want =
      "ranks of world/split(0) passed different arguments "
      "(this is rank " +
      std::to_string(Me()) + "): rank 0 passed f32 [8, 4] [S0] -> [R], " +
      Others() + " f32 [8, 4] [S0] -> [S1]";
  EXPECT_TPDP_ERROR(
      tpdp_redistribute(&in, Me() == 0 ? rep : col, Me() == 0 ? &full : &part),
      TPDP_ERR_INVALID_ARGUMENT, want.c_str());
  EXPECT_TPDP_OK(tpdp_spec_destroy(src));
  EXPECT_TPDP_OK(tpdp_spec_destroy(rep));
  EXPECT_TPDP_OK(tpdp_spec_destroy(col));
  EXPECT_TPDP_OK(tpdp_mesh_destroy(mesh));
  EXPECT_TPDP_OK(tpdp_comm_destroy(c));
}

}  // namespace
