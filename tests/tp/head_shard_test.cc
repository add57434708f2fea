// SPDX-License-Identifier: BSD-3-Clause
// Attention sharded by whole heads (tp/head_shard.c): each rank's q|k|v and
// output-projection shards against the full tensors, and causal multi-head
// attention computed from the shards (local heads, rowwise output, one
// allreduce) against dense host math in double, forward and the output
// projection's backward. 5 heads: tp=2 holds 3 + 2, tp=4 holds 2, 2, 1 and
// none (that rank still joins the allreduce). Runs on 2 and 4 ranks.
#include <cmath>
#include <string>
#include <vector>

#include "tests/tp/layout_test_util.h"

namespace {

using layout_test::Data;
using layout_test::MakePlace;
using layout_test::Meshes;
using layout_test::Near;
using layout_test::Place;
using styles_test::Tree;

constexpr int64_t kC = 4, kHeads = 5, kHd = 2, kE = kHeads * kHd;
constexpr int64_t kB = 2, kT = 3, kN = kB * kT;

// Attn{qkv: [C, 3E] + [3E], out: [E, C] + [C]} (Conv1D), or the Linear
// orientation ([3E, C], [C, E]) with io = false.
std::unique_ptr<Tree> MakeAttn(bool io) {
  auto t = std::make_unique<Tree>();
  if (tpdp_module_create("Attention", &t->root) != TPDP_SUCCESS) return nullptr;
  using V = std::vector<int64_t>;
  bool ok =
      t->AddModule("", "qkv", "Conv1D") && t->AddModule("", "out", "Conv1D") &&
      t->AddParam("qkv", "weight", io ? V{kC, 3 * kE} : V{3 * kE, kC}, 1) &&
      t->AddParam("qkv", "bias", {3 * kE}, 2) &&
      t->AddParam("out", "weight", io ? V{kE, kC} : V{kC, kE}, 3) &&
      t->AddParam("out", "bias", {kC}, 4);
  return ok ? std::move(t) : nullptr;
}

// Causal attention of one sequence: qkv rows [T, 3 * w] (q | k | v, each w
// = nh * hd wide), y rows [T, w].
template <typename F>
void Attend(const F *qkv, int64_t nh, F *y) {
  const int64_t w = nh * kHd;
  for (int64_t h = 0; h < nh; h++)
    for (int64_t t1 = 0; t1 < kT; t1++) {
      F s[kT], mx = -1e30;
      for (int64_t t2 = 0; t2 <= t1; t2++) {
        F d = 0;
        for (int64_t k = 0; k < kHd; k++)
          d +=
              qkv[t1 * 3 * w + h * kHd + k] * qkv[t2 * 3 * w + w + h * kHd + k];
        s[t2] = d / std::sqrt((F)kHd);
        mx = s[t2] > mx ? s[t2] : mx;
      }
      F sum = 0;
      for (int64_t t2 = 0; t2 <= t1; t2++)
        sum += (s[t2] = std::exp(s[t2] - mx));
      for (int64_t k = 0; k < kHd; k++) {
        F acc = 0;
        for (int64_t t2 = 0; t2 <= t1; t2++)
          acc += s[t2] / sum * qkv[t2 * 3 * w + 2 * w + h * kHd + k];
        y[t1 * w + h * kHd + k] = acc;
      }
    }
}

// An attention module sharded by heads on `mesh`: this rank's heads
// [h0, h0 + hc).
struct Sharded {
  Place pl;
  std::unique_ptr<Tree> t;
  int64_t h0 = 0, hc = 0;
};
::testing::AssertionResult MakeSharded(const std::string &mesh, bool io,
                                       Sharded *s) {
  if (!MakePlace(mesh, &s->pl)) return ::testing::AssertionFailure() << mesh;
  s->t = MakeAttn(io);
  if (s->t == nullptr) return ::testing::AssertionFailure() << "tree";
  if (tpdp_tp_parallelize_attention(
          s->t->Module("qkv"), s->t->Module("out"), kHeads,
          io ? TPDP_LINEAR_IN_OUT : TPDP_LINEAR_OUT_IN, s->pl.mesh, "tp",
          nullptr, nullptr) != TPDP_SUCCESS)
    return ::testing::AssertionFailure() << tpdp_last_error();
  styles_test::Chunk(kHeads, s->pl.T, s->pl.tp_rank, &s->h0, &s->hc);
  return ::testing::AssertionSuccess();
}

TEST(HeadShard, ShardsHoldWholeHeadsOfQKV) {
  for (const std::string &mesh : Meshes()) {
    SCOPED_TRACE(mesh);
    Sharded sh;
    ASSERT_TRUE(MakeSharded(mesh, true, &sh));
    Tree *t = sh.t.get();
    const int64_t h0 = sh.h0, hc = sh.hc;
    int64_t first, count;
    ASSERT_TPDP_OK(tpdp_tp_attention_heads(t->Module("out"), &first, &count));
    EXPECT_EQ(count, hc);
    if (hc > 0) {
      EXPECT_EQ(first, h0);
    }
    const tpdp_tensor *w = tpdp_param_tensor(t->Param("qkv.weight"));
    ASSERT_EQ(w->ndim, 4);
    EXPECT_EQ(w->shape[2], hc);
    const auto &fw = t->full.at("qkv.weight");
    const float *lw = Data(t->Param("qkv.weight"));
    for (int64_t c = 0; c < kC; c++)
      for (int64_t s = 0; s < 3; s++)
        for (int64_t h = 0; h < hc; h++)
          for (int64_t d = 0; d < kHd; d++)
            EXPECT_EQ(lw[((c * 3 + s) * hc + h) * kHd + d],
                      fw[c * 3 * kE + s * kE + (h0 + h) * kHd + d]);
    const float *lb = Data(t->Param("qkv.bias"));
    for (int64_t s = 0; s < 3; s++)
      for (int64_t k = 0; k < hc * kHd; k++)
        EXPECT_EQ(lb[s * hc * kHd + k],
                  t->full.at("qkv.bias")[s * kE + h0 * kHd + k]);
    const float *lo = Data(t->Param("out.weight"));
    for (int64_t k = 0; k < hc * kHd * kC; k++)
      EXPECT_EQ(lo[k], t->full.at("out.weight")[h0 * kHd * kC + k]);
    EXPECT_EQ(tpdp_tensor_numel(tpdp_param_tensor(t->Param("out.bias"))), kC);
  }
}

TEST(HeadShard, LinearOrientation) {
  for (const std::string &mesh : Meshes()) {
    SCOPED_TRACE(mesh);
    Sharded sh;
    ASSERT_TRUE(MakeSharded(mesh, false, &sh));
    Tree *t = sh.t.get();
    const int64_t h0 = sh.h0, hc = sh.hc;
    const auto &fw = t->full.at("qkv.weight");  // [3E, C]
    const float *lw = Data(t->Param("qkv.weight"));
    for (int64_t s = 0; s < 3; s++)
      for (int64_t k = 0; k < hc * kHd; k++)
        for (int64_t c = 0; c < kC; c++)
          EXPECT_EQ(lw[(s * hc * kHd + k) * kC + c],
                    fw[(s * kE + h0 * kHd + k) * kC + c]);
    const auto &fo = t->full.at("out.weight");  // [C, E]
    const float *lo = Data(t->Param("out.weight"));
    for (int64_t c = 0; c < kC; c++)
      for (int64_t k = 0; k < hc * kHd; k++)
        EXPECT_EQ(lo[c * hc * kHd + k], fo[c * kE + h0 * kHd + k]);
  }
}

TEST(HeadShard, AttentionFromShardsMatchesDense) {
  for (const std::string &mesh : Meshes()) {
    SCOPED_TRACE(mesh);
    Sharded sh;
    ASSERT_TRUE(MakeSharded(mesh, true, &sh));
    Tree *t = sh.t.get();
    const int64_t h0 = sh.h0, hc = sh.hc;
    std::vector<float> x(kN * kC), dout(kN * kC);
    for (int64_t i = 0; i < kN * kC; i++) {
      x[i] = 2.0f * styles_test::Val(11, i);
      dout[i] = styles_test::Val(12, i);
    }
    // Dense, double.
    const auto &W = t->full.at("qkv.weight"), &bq = t->full.at("qkv.bias");
    const auto &Wo = t->full.at("out.weight"), &bo = t->full.at("out.bias");
    std::vector<double> qkv(kN * 3 * kE), y(kN * kE), out(kN * kC),
        dWo(kE * kC);
    for (int64_t n = 0; n < kN; n++)
      for (int64_t j = 0; j < 3 * kE; j++) {
        double s = bq[j];
        for (int64_t c = 0; c < kC; c++)
          s += (double)x[n * kC + c] * W[c * 3 * kE + j];
        qkv[n * 3 * kE + j] = s;
      }
    for (int64_t b = 0; b < kB; b++)
      Attend<double>(&qkv[b * kT * 3 * kE], kHeads, &y[b * kT * kE]);
    for (int64_t n = 0; n < kN; n++)
      for (int64_t c = 0; c < kC; c++) {
        double s = bo[c];
        for (int64_t k = 0; k < kE; k++) s += y[n * kE + k] * Wo[k * kC + c];
        out[n * kC + c] = s;
      }
    for (int64_t k = 0; k < kE; k++)
      for (int64_t c = 0; c < kC; c++)
        for (int64_t n = 0; n < kN; n++)
          dWo[k * kC + c] += y[n * kE + k] * dout[n * kC + c];

    // Local, f32, from the shards.
    const int64_t w = hc * kHd;
    const float *lw = Data(t->Param("qkv.weight")),
                *lb = Data(t->Param("qkv.bias"));
    const float *lo = Data(t->Param("out.weight")),
                *lob = Data(t->Param("out.bias"));
    std::vector<float> lq(kN * 3 * w + 1), ly(kN * w + 1), part(kN * kC, 0.0f);
    for (int64_t n = 0; n < kN; n++)
      for (int64_t j = 0; j < 3 * w; j++) {
        float s = lb[j];
        for (int64_t c = 0; c < kC; c++) s += x[n * kC + c] * lw[c * 3 * w + j];
        lq[n * 3 * w + j] = s;
      }
    for (int64_t b = 0; b < kB; b++)
      Attend<float>(&lq[b * kT * 3 * w], hc, &ly[b * kT * w]);
    for (int64_t n = 0; n < kN; n++)
      for (int64_t c = 0; c < kC; c++)
        for (int64_t k = 0; k < w; k++)
          part[n * kC + c] += ly[n * w + k] * lo[k * kC + c];
    tpdp_comm *comm = nullptr;
    ASSERT_TPDP_OK(tpdp_tp_layout_comm(t->Module("out"), &comm));
    tpdp_tensor pt = tpdp_tensor_1d(part.data(), TPDP_F32, kN * kC);
    ASSERT_TPDP_OK(tpdp_allreduce(comm, &pt, &pt, TPDP_OP_SUM));
    for (int64_t i = 0; i < kN * kC; i++)
      EXPECT_TRUE(Near(part[i] + lob[i % kC], out[i], "out", i));
    // Backward of the rowwise output projection: local rows of dWo, and the
    // local heads' columns of dy.
    for (int64_t k = 0; k < w; k++)
      for (int64_t c = 0; c < kC; c++) {
        float s = 0;
        for (int64_t n = 0; n < kN; n++) s += ly[n * w + k] * dout[n * kC + c];
        EXPECT_TRUE(Near(s, dWo[(h0 * kHd + k) * kC + c], "dWo", k * kC + c));
      }
    for (int64_t n = 0; n < kN; n++)
      for (int64_t k = 0; k < w; k++) {
        float s = 0;
        double want = 0;
        for (int64_t c = 0; c < kC; c++) {
          s += dout[n * kC + c] * lo[k * kC + c];
          want += (double)dout[n * kC + c] * Wo[(h0 * kHd + k) * kC + c];
        }
        EXPECT_TRUE(Near(s, want, "dy", n * w + k));
      }
  }
}

tpdp_status FailOnOut(void *ctx, const char *fqn, const tpdp_spec *,
                      const int64_t *, tpdp_tensor *) {
  (void)ctx;
  return std::string(fqn) == "out.weight" ? TPDP_ERR_IO : TPDP_SUCCESS;
}

TEST(HeadShard, Errors) {
  Place pl;
  ASSERT_TRUE(MakePlace(Meshes()[0], &pl));
  auto t = MakeAttn(true);
  ASSERT_NE(t, nullptr);
  tpdp_module *q = t->Module("qkv"), *o = t->Module("out");
  EXPECT_TPDP_ERROR(
      tpdp_tp_parallelize_attention(q, o, 0, TPDP_LINEAR_IN_OUT, pl.mesh, "tp",
                                    nullptr, nullptr),
      TPDP_ERR_INVALID_ARGUMENT, "n_head 0");
  EXPECT_TPDP_ERROR(
      tpdp_tp_parallelize_attention(q, q, kHeads, TPDP_LINEAR_IN_OUT, pl.mesh,
                                    "tp", nullptr, nullptr),
      TPDP_ERR_INVALID_ARGUMENT, "same module");
  // 10 columns per projection do not split into 3 heads.
  EXPECT_TPDP_ERROR(
      tpdp_tp_parallelize_attention(q, o, 3, TPDP_LINEAR_IN_OUT, pl.mesh, "tp",
                                    nullptr, nullptr),
      TPDP_ERR_SHAPE_MISMATCH, "'qkv.weight'", "[4, 30]", "3 x 3 heads");
  // In the Linear orientation the fused dim is the first: [4, 30] has 4.
  EXPECT_TPDP_ERROR(
      tpdp_tp_parallelize_attention(q, o, kHeads, TPDP_LINEAR_OUT_IN, pl.mesh,
                                    "tp", nullptr, nullptr),
      TPDP_ERR_SHAPE_MISMATCH, "'qkv.weight'", "[3E, in]");
  // A failure while preparing the second module leaves the first untouched.
  EXPECT_TPDP_ERROR(
      tpdp_tp_parallelize_attention(q, o, kHeads, TPDP_LINEAR_IN_OUT, pl.mesh,
                                    "tp", FailOnOut, nullptr),
      TPDP_ERR_IO, "'out.weight'");
  for (auto &kv : t->params) {
    EXPECT_EQ(tpdp_param_spec(kv.second), nullptr) << kv.first;
    EXPECT_EQ(tpdp_param_tensor(kv.second)->data,
              (void *)t->full[kv.first].data())
        << kv.first;
  }
  EXPECT_EQ(tpdp_module_unit_kind(q), nullptr);
  int64_t a, b;
  EXPECT_TPDP_ERROR(tpdp_tp_attention_heads(q, &a, &b), TPDP_ERR_NOT_FOUND,
                    "qkv[Conv1D]", "tpdp_tp_parallelize_attention");
  // The output projection must take E = 10 inputs.
  auto bad = std::make_unique<Tree>();
  ASSERT_TPDP_OK(tpdp_module_create("Attention", &bad->root));
  ASSERT_TRUE(bad->AddModule("", "qkv", "Conv1D") &&
              bad->AddModule("", "out", "Conv1D") &&
              bad->AddParam("qkv", "weight", {kC, 3 * kE}, 1) &&
              bad->AddParam("out", "weight", {kE + 1, kC}, 3));
  EXPECT_TPDP_ERROR(tpdp_tp_parallelize_attention(
                        bad->Module("qkv"), bad->Module("out"), kHeads,
                        TPDP_LINEAR_IN_OUT, pl.mesh, "tp", nullptr, nullptr),
                    TPDP_ERR_SHAPE_MISMATCH, "'out.weight'", "[11, 4]",
                    "E = 10");
}

}  // namespace
