// SPDX-License-Identifier: BSD-3-Clause
// Collective mismatch detection (comm/fingerprint.c), on 2 and 4 ranks: a
// communicator made with TPDP_DEBUG_COLLECTIVES=1 fails every rank of a
// collective whose ranks disagree (op, dtype, counts the backends cannot
// see, root, reduce op) with a message listing each rank's call, and runs
// matching calls as usual. Ranks split by parity ("even" ranks 0, 2 and
// "odd" ranks 1, 3) make the two sides of each mismatch; every expected
// message is written out here by hand.
#include <cstdlib>
#include <string>
#include <vector>

#include "comm/backend.h"
#include "tests/test_util.h"

namespace {

// A fresh communicator over the world with fingerprints on: its sequence
// numbers start at 0, so its first collective is #1.
class Fp : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("TPDP_DEBUG_COLLECTIVES", "1", 1);
    me_ = tpdp_test::WorldRank();
    p_ = tpdp_test::WorldSize();
    ASSERT_TPDP_OK(tpdp_comm_split(tpdp_test::World(), 0, me_, &c_));
    ASSERT_EQ(c_->debug_collectives, 1);
    name_ = tpdp_comm_name(c_);
  }
  void TearDown() override { EXPECT_TPDP_OK(tpdp_comm_destroy(c_)); }
  bool Even() const { return me_ % 2 == 0; }
  // "rank 0" on 2 ranks, "ranks 0, 2" on 4 (the even or the odd ones).
  std::string Side(int first) const {
    return p_ == 2 ? "rank " + std::to_string(first)
                   : "ranks " + std::to_string(first) + ", " +
                         std::to_string(first + 2);
  }
  std::string Head() const {
    return "collective mismatch on " + name_ + " (this is rank " +
           std::to_string(me_) + "): ";
  }
  int me_ = 0, p_ = 0;
  tpdp_comm *c_ = nullptr;
  std::string name_;
};

TEST_F(Fp, DifferentCollectivesFailOnEveryRankNamingEachCall) {
  std::vector<float> a(1000, 1.0f), b(1000 * p_, 0.0f);
  tpdp_tensor s = tpdp_tensor_1d(a.data(), TPDP_F32, Even() ? 1000 : 10);
  tpdp_tensor r = tpdp_tensor_1d(b.data(), TPDP_F32, Even() ? 1000 : 10 * p_);
  std::string want = Head() + Side(0) +
                     " called tpdp_allreduce sum f32 x 1000 (#1), " + Side(1) +
                     " tpdp_allgather f32 x 10 (#1)";
  if (Even())
    EXPECT_TPDP_ERROR(tpdp_allreduce(c_, &s, &r, TPDP_OP_SUM),
                      TPDP_ERR_INVALID_ARGUMENT,
                      "tpdp_allreduce: ", want.c_str());
  else
    EXPECT_TPDP_ERROR(tpdp_allgather(c_, &s, &r), TPDP_ERR_INVALID_ARGUMENT,
                      "tpdp_allgather: ", want.c_str());
  // Nobody is left behind: the communicator still works, at #2.
  float one = 1, sum = 0;
  tpdp_tensor o = tpdp_tensor_1d(&one, TPDP_F32, 1);
  tpdp_tensor t = tpdp_tensor_1d(&sum, TPDP_F32, 1);
  EXPECT_TPDP_OK(tpdp_allreduce(c_, &o, &t, TPDP_OP_SUM));
  EXPECT_EQ(sum, static_cast<float>(p_));
  EXPECT_EQ(c_->seq, 2u);
}

TEST_F(Fp, BroadcastCountsOffTheRootAreCompared) {
  // MPI itself cannot see a non-root rank expecting fewer elements than
  // the root sends (it truncates) or more (it leaves the rest unwritten).
  std::vector<float> buf(100, 2.0f);
  tpdp_tensor t = tpdp_tensor_1d(buf.data(), TPDP_F32, Even() ? 100 : 60);
  std::string want = Head() + Side(0) +
                     " called tpdp_broadcast f32 x 100 root 0 (#1), " +
                     Side(1) + " tpdp_broadcast f32 x 60 root 0 (#1)";
  EXPECT_TPDP_ERROR(tpdp_broadcast(c_, &t, &t, 0), TPDP_ERR_SHAPE_MISMATCH,
                    want.c_str());
}

TEST_F(Fp, AllgatherAndReduceScatterCountsAreCompared) {
  // Each rank's send and recv agree with each other (the local check
  // passes), but not with the other ranks'.
  int n = Even() ? 4 : 5;
  std::vector<int32_t> send(5 * p_, 1), recv(5 * p_, 0);
  tpdp_tensor s = tpdp_tensor_1d(send.data(), TPDP_I32, n);
  tpdp_tensor r = tpdp_tensor_1d(recv.data(), TPDP_I32, n * p_);
  std::string want = Head() + Side(0) +
                     " called tpdp_allgather i32 x 4 (#1), " + Side(1) +
                     " tpdp_allgather i32 x 5 (#1)";
  EXPECT_TPDP_ERROR(tpdp_allgather(c_, &s, &r), TPDP_ERR_SHAPE_MISMATCH,
                    want.c_str());
  s = tpdp_tensor_1d(send.data(), TPDP_I32, n * p_);
  r = tpdp_tensor_1d(recv.data(), TPDP_I32, n);
  want = Head() + Side(0) + " called tpdp_reduce_scatter max i32 x 4 (#2), " +
         Side(1) + " tpdp_reduce_scatter max i32 x 5 (#2)";
  EXPECT_TPDP_ERROR(tpdp_reduce_scatter(c_, &s, &r, TPDP_OP_MAX),
                    TPDP_ERR_SHAPE_MISMATCH, want.c_str());
}

TEST_F(Fp, DtypeRootReduceOpAndFormAreCompared) {
  double d[8] = {0};
  tpdp_tensor t = tpdp_tensor_1d(d, Even() ? TPDP_F64 : TPDP_I64, 8);
  std::string want = Side(0) + " called tpdp_allreduce sum f64 x 8 (#1), " +
                     Side(1) + " tpdp_allreduce sum i64 x 8 (#1)";
  EXPECT_TPDP_ERROR(tpdp_allreduce(c_, &t, &t, TPDP_OP_SUM),
                    TPDP_ERR_DTYPE_MISMATCH, want.c_str());
  t = tpdp_tensor_1d(d, TPDP_F64, 8);
  want = Side(0) + " called tpdp_broadcast f64 x 8 root 0 (#2), " + Side(1) +
         " tpdp_broadcast f64 x 8 root 1 (#2)";
  EXPECT_TPDP_ERROR(tpdp_broadcast(c_, &t, &t, Even() ? 0 : 1),
                    TPDP_ERR_INVALID_ARGUMENT, want.c_str());
  want = Side(0) + " called tpdp_allreduce max f64 x 8 (#3), " + Side(1) +
         " tpdp_allreduce avg f64 x 8 (#3)";
  EXPECT_TPDP_ERROR(
      tpdp_allreduce(c_, &t, &t, Even() ? TPDP_OP_MAX : TPDP_OP_AVG),
      TPDP_ERR_INVALID_ARGUMENT, want.c_str());
  // MPI never matches a blocking collective with a non-blocking one.
  want = Side(0) + " called tpdp_allreduce sum f64 x 8 (#4), " + Side(1) +
         " tpdp_allreduce_async sum f64 x 8 (#4)";
  if (Even()) {
    EXPECT_TPDP_ERROR(tpdp_allreduce(c_, &t, &t, TPDP_OP_SUM),
                      TPDP_ERR_INVALID_ARGUMENT, want.c_str());
  } else {
    tpdp_work *w = reinterpret_cast<tpdp_work *>(0x1);
    EXPECT_TPDP_ERROR(tpdp_allreduce_async(c_, &t, &t, TPDP_OP_SUM, &w),
                      TPDP_ERR_INVALID_ARGUMENT, want.c_str());
    EXPECT_EQ(w, nullptr);
  }
}

TEST_F(Fp, BarrierAndSplitAreFingerprintedToo) {
  tpdp_comm *sub = nullptr;
  std::string want = Head() + Side(0) + " called tpdp_barrier (#1), " +
                     Side(1) + " tpdp_comm_split (#1)";
  if (Even()) {
    EXPECT_TPDP_ERROR(tpdp_barrier(c_), TPDP_ERR_INVALID_ARGUMENT,
                      want.c_str());
  } else {
    EXPECT_TPDP_ERROR(tpdp_comm_split(c_, 0, 0, &sub),
                      TPDP_ERR_INVALID_ARGUMENT,
                      "tpdp_comm_split: ", want.c_str());
    EXPECT_EQ(sub, nullptr);
  }
}

TEST_F(Fp, ACollectiveInsideAnotherCallNamesThatCall) {
  // tpdp_comm_local_rank allgathers the host names (256 bytes a rank).
  int lr = -1, ls = -1;
  std::string want = Head() + Side(0) +
                     " called tpdp_allgather u8 x 256 (#1) in "
                     "tpdp_comm_local_rank, " +
                     Side(1) + " tpdp_barrier (#1)";
  if (Even())
    EXPECT_TPDP_ERROR(tpdp_comm_local_rank(c_, &lr, &ls),
                      TPDP_ERR_INVALID_ARGUMENT,
                      "tpdp_comm_local_rank: ", want.c_str());
  else
    EXPECT_TPDP_ERROR(tpdp_barrier(c_), TPDP_ERR_INVALID_ARGUMENT,
                      "tpdp_barrier: ", want.c_str());
}

TEST_F(Fp, ARankRejectingItsArgumentsFailsItsPeersToo) {
  // Odd ranks pass a recv one element short: their own check fails with
  // its usual message; the even ranks, whose call is fine, are told so
  // rather than left waiting.
  std::vector<float> a(10, 1.0f), b(10, 0.0f);
  tpdp_tensor s = tpdp_tensor_1d(a.data(), TPDP_F32, 10);
  tpdp_tensor r = tpdp_tensor_1d(b.data(), TPDP_F32, Even() ? 10 : 9);
  std::string want = "rank 1 of " + name_ +
                     " rejected its arguments (see that rank's message; "
                     "this is rank " +
                     std::to_string(me_) + "): " + Side(0) +
                     " called tpdp_allreduce sum f32 x 10 (#1), " + Side(1) +
                     " tpdp_allreduce rejected (TPDP_ERR_SHAPE_MISMATCH) (#1)";
  if (Even())
    EXPECT_TPDP_ERROR(tpdp_allreduce(c_, &s, &r, TPDP_OP_SUM),
                      TPDP_ERR_SHAPE_MISMATCH, want.c_str());
  else
    EXPECT_TPDP_ERROR(tpdp_allreduce(c_, &s, &r, TPDP_OP_SUM),
                      TPDP_ERR_SHAPE_MISMATCH,
                      "numel(send) must equal numel(recv)");
}

TEST_F(Fp, MatchingCallsRunAsUsual) {
  int32_t v = me_ + 1, sum = 0;
  tpdp_tensor s = tpdp_tensor_1d(&v, TPDP_I32, 1);
  tpdp_tensor r = tpdp_tensor_1d(&sum, TPDP_I32, 1);
  tpdp_work *w = nullptr;
  ASSERT_TPDP_OK(tpdp_allreduce_async(c_, &s, &r, TPDP_OP_SUM, &w));
  ASSERT_TPDP_OK(tpdp_work_wait(w));
  EXPECT_EQ(sum, p_ * (p_ + 1) / 2);
  std::vector<int32_t> all(p_, -1);
  tpdp_tensor g = tpdp_tensor_1d(all.data(), TPDP_I32, p_);
  ASSERT_TPDP_OK(tpdp_allgather(c_, &s, &g));
  for (int k = 0; k < p_; k++) EXPECT_EQ(all[k], k + 1);
  int32_t x = me_ == 1 ? 42 : 0;
  tpdp_tensor b = tpdp_tensor_1d(&x, TPDP_I32, 1);
  ASSERT_TPDP_OK(tpdp_broadcast(c_, me_ == 1 ? &b : nullptr, &b, 1));
  EXPECT_EQ(x, 42);
  ASSERT_TPDP_OK(tpdp_barrier(c_));
  EXPECT_EQ(c_->seq, 4u);
}

TEST(FpOff, OffUnlessTheVariableIsSetWhenTheCommunicatorIsMade) {
  unsetenv("TPDP_DEBUG_COLLECTIVES");
  tpdp_comm *c = nullptr;
  ASSERT_TPDP_OK(tpdp_comm_split(tpdp_test::World(), 0, 0, &c));
  EXPECT_EQ(c->debug_collectives, 0);
  EXPECT_TPDP_OK(tpdp_comm_destroy(c));
  setenv("TPDP_DEBUG_COLLECTIVES", "0", 1);
  ASSERT_TPDP_OK(tpdp_comm_split(tpdp_test::World(), 0, 0, &c));
  EXPECT_EQ(c->debug_collectives, 0);
  EXPECT_TPDP_OK(tpdp_comm_destroy(c));
}

}  // namespace
