// SPDX-License-Identifier: BSD-3-Clause
// Allgather and reduce-scatter over pieces of memory (comm/services.h):
// the flat buffer rank by rank given as pieces, padding as holes, in the
// layout of a fully sharded unit (each parameter's rows by the chunk rule,
// some ranks with fewer rows or none). Results against values worked out
// here by formula; holes and the memory around the buffers untouched; bad
// arguments refused alike on every rank.
#include <stdlib.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "comm/services.h"
#include "tests/test_util.h"

namespace {

// Messages of 40 bytes (TPDP_PIECES_MSG_BYTES, read at the first call):
// every exchange is cut into many messages, mid-piece and across pieces.
const int kSmallMessages = setenv("TPDP_PIECES_MSG_BYTES", "40", 1);

// Parameters of the test's unit: dim 0 and the elements of one row. Dim
// 0 of 1 leaves ranks 1.. without rows; 5 and 7 do not divide by 2-4.
struct Param {
  int64_t d0, row;
};
const std::vector<Param> kParams = {{5, 3}, {1, 4}, {7, 2}};

int64_t Chunk(const Param &p, int n) { return (p.d0 + n - 1) / n; }
int64_t Rows(const Param &p, int r, int n) {
  int64_t left = p.d0 - r * Chunk(p, n);
  return left < 0 ? 0 : (left > Chunk(p, n) ? Chunk(p, n) : left);
}
// Offsets of each parameter in the full tensors (back to back) and in a
// rank's padded shard; the sizes of both.
int64_t FullOff(int i) {
  int64_t o = 0;
  for (int k = 0; k < i; k++) o += kParams[k].d0 * kParams[k].row;
  return o;
}
int64_t ShardOff(int i, int n) {
  int64_t o = 0;
  for (int k = 0; k < i; k++) o += Chunk(kParams[k], n) * kParams[k].row;
  return o;
}
int64_t FullElems() { return FullOff((int)kParams.size()); }
int64_t ShardElems(int n) { return ShardOff((int)kParams.size(), n); }
int64_t MineElems(int r, int n) {
  int64_t e = 0;
  for (const Param &p : kParams) e += Rows(p, r, n) * p.row;
  return e;
}

// The pieces of ranks [q0, q1)'s blocks: each parameter's rows, in the
// full tensors (in_full) or in a shard, then a hole for the padding.
std::vector<comm_piece> Pieces(int q0, int q1, int n, bool in_full) {
  std::vector<comm_piece> v;
  for (int q = q0; q < q1; q++)
    for (size_t i = 0; i < kParams.size(); i++) {
      const Param &p = kParams[i];
      int64_t rows = Rows(p, q, n);
      int64_t off = in_full ? FullOff((int)i) + q * Chunk(p, n) * p.row
                            : ShardOff((int)i, n);
      if (rows > 0) v.push_back({off, rows * p.row});
      if (rows < Chunk(p, n)) v.push_back({-1, (Chunk(p, n) - rows) * p.row});
    }
  return v;
}

// Element e of parameter i's full tensor (global row e / row): exact in
// f32 and f64.
double Value(int i, int64_t e) { return 1000.0 * i + e; }

constexpr float kSentinel = -7.0f;
constexpr int kGuard = 8;  // elements of sentinel after each buffer

template <typename T>
void ExpectGuard(const std::vector<T> &buf, int64_t used, const char *what) {
  for (int k = 0; k < kGuard; k++)
    EXPECT_EQ(buf[used + k], (T)kSentinel) << what << " guard " << k;
}

tpdp_tensor Flat(void *data, tpdp_dtype dt, int64_t n) {
  return tpdp_tensor_1d(data, dt, n);
}

// Every rank sends its rows from a padded shard (or from inside its full
// tensors); every rank ends with the whole full tensors.
void CheckAllgather(bool send_in_full) {
  tpdp_comm *w = tpdp_test::World();
  const int me = tpdp_comm_rank(w), n = tpdp_comm_size(w);
  const int64_t S = ShardElems(n), F = FullElems();
  std::vector<float> shard(S + kGuard, kSentinel), full(F + kGuard, kSentinel);
  for (size_t i = 0; i < kParams.size(); i++) {
    const Param &p = kParams[i];
    for (int64_t e = 0; e < Rows(p, me, n) * p.row; e++) {
      int64_t ge = me * Chunk(p, n) * p.row + e;  // in the full tensor
      shard[ShardOff((int)i, n) + e] = (float)Value((int)i, ge);
      full[FullOff((int)i) + ge] = (float)Value((int)i, ge);
    }
  }
  std::vector<comm_piece> sp = Pieces(me, me + 1, n, send_in_full);
  std::vector<comm_piece> rp = Pieces(0, n, n, true);
  comm_pieces spl = {sp.data(), (int)sp.size()};
  comm_pieces rpl = {rp.data(), (int)rp.size()};
  tpdp_tensor send =
      Flat(send_in_full ? full.data() : shard.data(), TPDP_F32, S);
  tpdp_tensor recv = Flat(full.data(), TPDP_F32, S * n);
  tpdp_work *work = nullptr;
  ASSERT_TPDP_OK(
      comm_allgather_pieces_async(w, &send, &spl, &recv, &rpl, &work));
  ASSERT_TPDP_OK(tpdp_work_wait(work));
  for (size_t i = 0; i < kParams.size(); i++)
    for (int64_t e = 0; e < kParams[i].d0 * kParams[i].row; e++)
      ASSERT_EQ(full[FullOff((int)i) + e], (float)Value((int)i, e))
          << "parameter " << i << " element " << e;
  ExpectGuard(full, F, "full");
  ExpectGuard(shard, S, "shard");
}

TEST(Pieces, AllgatherFromAShardIntoTheFullTensors) { CheckAllgather(false); }

TEST(Pieces, AllgatherWithTheRowsAlreadyInPlace) { CheckAllgather(true); }

// Rank q's full gradient: (q + 1) * Value. This rank's rows of the sum
// (or mean) land in its shard (outside the send buffer) or in place
// inside its full gradient; padding and everything else untouched.
template <typename T>
void CheckReduceScatter(tpdp_dtype dt, tpdp_reduce_op op, bool in_place) {
  tpdp_comm *w = tpdp_test::World();
  const int me = tpdp_comm_rank(w), n = tpdp_comm_size(w);
  const int64_t S = ShardElems(n), F = FullElems();
  std::vector<T> grad(F + kGuard, (T)kSentinel);
  std::vector<T> shard(S + kGuard, (T)kSentinel);
  for (size_t i = 0; i < kParams.size(); i++)
    for (int64_t e = 0; e < kParams[i].d0 * kParams[i].row; e++)
      grad[FullOff((int)i) + e] = (T)((me + 1) * Value((int)i, e));
  std::vector<comm_piece> sp = Pieces(0, n, n, true);
  std::vector<comm_piece> rp = Pieces(me, me + 1, n, in_place);
  comm_pieces spl = {sp.data(), (int)sp.size()};
  comm_pieces rpl = {rp.data(), (int)rp.size()};
  int64_t ns =
      comm_reduce_scatter_pieces_scratch(w, MineElems(me, n), in_place);
  EXPECT_EQ(ns, std::max(0, n - (in_place ? 1 : 2)) * MineElems(me, n));
  std::vector<T> scratch(ns + 1);
  tpdp_tensor send = Flat(grad.data(), dt, S * n);
  tpdp_tensor recv = Flat(in_place ? grad.data() : shard.data(), dt, S);
  tpdp_work *work = nullptr;
  ASSERT_TPDP_OK(comm_reduce_scatter_pieces_async(
      w, &send, &spl, &recv, &rpl, op, scratch.data(), ns, &work));
  ASSERT_TPDP_OK(tpdp_work_wait(work));
  const double ranks_sum = n * (n + 1) / 2.0;
  for (size_t i = 0; i < kParams.size(); i++) {
    const Param &p = kParams[i];
    int64_t lo = me * Chunk(p, n) * p.row, mine = Rows(p, me, n) * p.row;
    for (int64_t e = 0; e < p.d0 * p.row; e++) {
      bool ours = e >= lo && e < lo + mine;
      double sum = ranks_sum * Value((int)i, e);
      double want = op == TPDP_OP_AVG ? sum / n : sum;
      if (in_place) {
        // Our rows hold the result, the others still this rank's input.
        double expect = ours ? want : (me + 1) * Value((int)i, e);
        ASSERT_NEAR(grad[FullOff((int)i) + e], expect, 1e-6 * std::fabs(expect))
            << "parameter " << i << " element " << e;
      } else if (ours) {
        ASSERT_NEAR(shard[ShardOff((int)i, n) + e - lo], want,
                    1e-6 * std::fabs(want))
            << "parameter " << i << " element " << e;
      }
    }
    if (!in_place) {  // the shard's padding rows are holes: never written
      for (int64_t e = mine; e < Chunk(p, n) * p.row; e++) {
        EXPECT_EQ(shard[ShardOff((int)i, n) + e], (T)kSentinel)
            << "padding of parameter " << i;
      }
    }
  }
  ExpectGuard(grad, F, "gradient");
  ExpectGuard(shard, S, "shard");
}

TEST(Pieces, ReduceScatterIntoAShard) {
  CheckReduceScatter<float>(TPDP_F32, TPDP_OP_AVG, false);
  CheckReduceScatter<double>(TPDP_F64, TPDP_OP_SUM, false);
}

TEST(Pieces, ReduceScatterInPlace) {
  CheckReduceScatter<float>(TPDP_F32, TPDP_OP_SUM, true);
  CheckReduceScatter<double>(TPDP_F64, TPDP_OP_AVG, true);
}

// bf16 and f16 sum in f32 and round once: rank 0 sends 1 + k ulp, every
// other rank a quarter ulp or so (u), all exact in the dtype. On 4 ranks
// the three small ones add up past half an ulp, which rounding at every
// addition (as MPI's user-defined ops do) would lose. The expected value:
// the exact sum (divided by the ranks for AVG) rounded to the dtype here.
void CheckHalfReduceScatter(tpdp_dtype dt, tpdp_reduce_op op) {
  tpdp_comm *w = tpdp_test::World();
  const int me = tpdp_comm_rank(w), n = tpdp_comm_size(w);
  const int64_t S = ShardElems(n), F = FullElems();
  const bool bf = dt == TPDP_BF16;
  const double ulp = bf ? std::ldexp(1.0, -7) : std::ldexp(1.0, -10);
  auto contribution = [&](int q, int64_t e) {
    return q == 0 ? 1.0 + (double)(e % 8) * ulp : ulp / 4 * (1 + (e + q) % 3);
  };
  auto to_half = [&](double x) {
    return bf ? tpdp_f32_to_bf16((float)x) : tpdp_f32_to_f16((float)x);
  };
  auto from_half = [&](uint16_t h) {
    return (double)(bf ? tpdp_bf16_to_f32(h) : tpdp_f16_to_f32(h));
  };
  std::vector<uint16_t> grad(F), shard(S + kGuard, 0xBEEF);
  for (int64_t e = 0; e < F; e++) {
    grad[e] = to_half(contribution(me, e));
    ASSERT_EQ(from_half(grad[e]), contribution(me, e)) << "exact input";
  }
  std::vector<comm_piece> sp = Pieces(0, n, n, true);
  std::vector<comm_piece> rp = Pieces(me, me + 1, n, false);
  comm_pieces spl = {sp.data(), (int)sp.size()};
  comm_pieces rpl = {rp.data(), (int)rp.size()};
  int64_t ns = comm_reduce_scatter_pieces_scratch(w, MineElems(me, n), false);
  std::vector<uint16_t> scratch(ns + 1);
  tpdp_tensor send = Flat(grad.data(), dt, S * n);
  tpdp_tensor recv = Flat(shard.data(), dt, S);
  tpdp_work *work = nullptr;
  ASSERT_TPDP_OK(comm_reduce_scatter_pieces_async(
      w, &send, &spl, &recv, &rpl, op, scratch.data(), ns, &work));
  ASSERT_TPDP_OK(tpdp_work_wait(work));
  for (size_t i = 0; i < kParams.size(); i++) {
    const Param &p = kParams[i];
    int64_t lo = me * Chunk(p, n) * p.row;
    for (int64_t k = 0; k < Rows(p, me, n) * p.row; k++) {
      int64_t e = FullOff((int)i) + lo + k;
      double sum = 0;
      for (int q = 0; q < n; q++) sum += contribution(q, e);
      double want = from_half(to_half(op == TPDP_OP_AVG ? sum / n : sum));
      ASSERT_EQ(from_half(shard[ShardOff((int)i, n) + k]), want)
          << tpdp_dtype_name(dt) << " parameter " << i << " element " << e;
    }
  }
  for (int k = 0; k < kGuard; k++) EXPECT_EQ(shard[S + k], 0xBEEF);
}

TEST(Pieces, HalfPrecisionSumsInF32AndRoundsOnce) {
  CheckHalfReduceScatter(TPDP_BF16, TPDP_OP_SUM);
  CheckHalfReduceScatter(TPDP_F16, TPDP_OP_SUM);
  CheckHalfReduceScatter(TPDP_BF16, TPDP_OP_AVG);
  CheckHalfReduceScatter(TPDP_F16, TPDP_OP_AVG);
}

// Several in flight at once, waited in another order than started.
TEST(Pieces, ManyInFlightCompleteInAnyOrder) {
  ASSERT_EQ(kSmallMessages, 0);
  tpdp_comm *w = tpdp_test::World();
  const int me = tpdp_comm_rank(w), n = tpdp_comm_size(w);
  const int64_t S = ShardElems(n), F = FullElems();
  std::vector<comm_piece> rp = Pieces(0, n, n, true);
  std::vector<comm_piece> sp = Pieces(me, me + 1, n, false);
  comm_pieces spl = {sp.data(), (int)sp.size()};
  comm_pieces rpl = {rp.data(), (int)rp.size()};
  const int kCalls = 4;
  std::vector<std::vector<float>> shard(kCalls, std::vector<float>(S)),
      full(kCalls, std::vector<float>(F, kSentinel));
  std::vector<tpdp_work *> work(kCalls, nullptr);
  for (int c = 0; c < kCalls; c++) {
    for (size_t i = 0; i < kParams.size(); i++) {
      const Param &p = kParams[i];
      for (int64_t e = 0; e < Rows(p, me, n) * p.row; e++)
        shard[c][ShardOff((int)i, n) + e] =
            (float)(c * 100000 + Value((int)i, me * Chunk(p, n) * p.row + e));
    }
    tpdp_tensor send = Flat(shard[c].data(), TPDP_F32, S);
    tpdp_tensor recv = Flat(full[c].data(), TPDP_F32, S * n);
    ASSERT_TPDP_OK(
        comm_allgather_pieces_async(w, &send, &spl, &recv, &rpl, &work[c]));
  }
  for (int c = kCalls - 1; c >= 0; c--) ASSERT_TPDP_OK(tpdp_work_wait(work[c]));
  for (int c = 0; c < kCalls; c++)
    for (size_t i = 0; i < kParams.size(); i++)
      for (int64_t e = 0; e < kParams[i].d0 * kParams[i].row; e++)
        ASSERT_EQ(full[c][FullOff((int)i) + e],
                  (float)(c * 100000 + Value((int)i, e)))
            << "call " << c << " parameter " << i << " element " << e;
}

// Bad arguments, the same on every rank: refused before any message.
TEST(Pieces, BadArgumentsAreRefusedOnEveryRank) {
  tpdp_comm *w = tpdp_test::World();
  const int me = tpdp_comm_rank(w), n = tpdp_comm_size(w);
  const int64_t S = ShardElems(n), F = FullElems();
  std::vector<float> grad(F, 1.0f), shard(S);
  std::vector<comm_piece> sp = Pieces(0, n, n, true);
  std::vector<comm_piece> rp = Pieces(me, me + 1, n, false);
  comm_pieces spl = {sp.data(), (int)sp.size()};
  comm_pieces rpl = {rp.data(), (int)rp.size()};
  tpdp_tensor send = Flat(grad.data(), TPDP_F32, S * n);
  tpdp_tensor recv = Flat(shard.data(), TPDP_F32, S);
  tpdp_work *work = nullptr;
  // Pieces that do not cover the buffer.
  comm_pieces short_recv = {rp.data(), (int)rp.size() - 1};
  if (rp.back().count > 0)
    EXPECT_TPDP_ERROR(
        comm_reduce_scatter_pieces_async(w, &send, &spl, &recv, &short_recv,
                                         TPDP_OP_SUM, nullptr, 0, &work),
        TPDP_ERR_SHAPE_MISMATCH, "recv pieces cover");
  // No reduction of integers, nor MAX, here.
  std::vector<int32_t> ints(S * n), ints_out(S);
  tpdp_tensor is = Flat(ints.data(), TPDP_I32, S * n);
  tpdp_tensor ir = Flat(ints_out.data(), TPDP_I32, S);
  EXPECT_TPDP_ERROR(
      comm_reduce_scatter_pieces_async(w, &is, &spl, &ir, &rpl, TPDP_OP_SUM,
                                       nullptr, 0, &work),
      TPDP_ERR_UNSUPPORTED, "f32/f64/bf16/f16 SUM/AVG", "i32");
  EXPECT_TPDP_ERROR(
      comm_reduce_scatter_pieces_async(w, &send, &spl, &recv, &rpl, TPDP_OP_MAX,
                                       nullptr, 0, &work),
      TPDP_ERR_UNSUPPORTED, "not f32 max");
  // Scratch too small for the peers' contributions (in place: size - 1).
  if (n > 1) {
    std::vector<comm_piece> in_place = Pieces(me, me + 1, n, true);
    comm_pieces ipl = {in_place.data(), (int)in_place.size()};
    tpdp_tensor recv_in = Flat(grad.data(), TPDP_F32, S);
    EXPECT_TPDP_ERROR(
        comm_reduce_scatter_pieces_async(w, &send, &spl, &recv_in, &ipl,
                                         TPDP_OP_SUM, nullptr, 0, &work),
        TPDP_ERR_INVALID_ARGUMENT, "scratch of 0 elements");
  }
  EXPECT_EQ(work, nullptr);
  // Still in step afterwards.
  ASSERT_TPDP_OK(tpdp_barrier(w));
}

}  // namespace
