// SPDX-License-Identifier: BSD-3-Clause
// Vocabulary-parallel embedding and cross-entropy (tp/vocab_parallel.c)
// against dense host math: lookup, its backward into a tied weight's
// gradient, and the loss with its gradient on vocab-sharded logits. V = 11
// (tp=2: 6 + 5 rows, tp=4: 3, 3, 3, 2) and V = 3 (tp=4: a rank with no
// row). Runs on 2 and 4 ranks.
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
using layout_test::View;
using styles_test::Tree;

constexpr int64_t kD = 3, kN = 7;

// LM{wte: Embedding [V, D], head: Linear sharing wte's weight}.
std::unique_ptr<Tree> MakeLm(int64_t V) {
  auto t = std::make_unique<Tree>();
  if (tpdp_module_create("LM", &t->root) != TPDP_SUCCESS) return nullptr;
  if (!t->AddModule("", "wte", "Embedding") ||
      !t->AddModule("", "head", "Linear") ||
      !t->AddParam("wte", "weight", {V, kD}, 1))
    return nullptr;
  if (tpdp_module_add_param(t->Module("head"), "weight",
                            t->Param("wte.weight")) != TPDP_SUCCESS)
    return nullptr;
  return t;
}

std::vector<int32_t> Ids(int64_t V, int64_t n, int salt) {
  std::vector<int32_t> ids(n);
  for (int64_t i = 0; i < n; i++) ids[i] = (int32_t)((i * 5 + salt) % V);
  ids[0] = (int32_t)(V - 1);  // the last row, on the last non-empty shard
  return ids;
}

// A vocab-parallel LM on `mesh`: this rank's rows [v0, v0 + vl).
struct Lm {
  Place pl;
  std::unique_ptr<Tree> t;
  tpdp_module *wte = nullptr;
  int64_t v0 = 0, vl = 0;
};
::testing::AssertionResult MakeShardedLm(const std::string &mesh, int64_t V,
                                         Lm *lm) {
  if (!MakePlace(mesh, &lm->pl)) return ::testing::AssertionFailure() << mesh;
  lm->t = MakeLm(V);
  if (lm->t == nullptr) return ::testing::AssertionFailure() << "tree";
  lm->wte = lm->t->Module("wte");
  if (tpdp_tp_parallelize_vocab(lm->wte, lm->pl.mesh, "tp", nullptr, nullptr) !=
      TPDP_SUCCESS)
    return ::testing::AssertionFailure() << tpdp_last_error();
  styles_test::Chunk(V, lm->pl.T, lm->pl.tp_rank, &lm->v0, &lm->vl);
  return ::testing::AssertionSuccess();
}

TEST(VocabParallel, EmbeddingForwardBackwardTied) {
  for (const std::string &mesh : Meshes())
    for (int64_t V : {11, 3}) {
      SCOPED_TRACE(mesh + " V=" + std::to_string(V));
      Lm lm;
      ASSERT_TRUE(MakeShardedLm(mesh, V, &lm));
      tpdp_module *wte = lm.wte;
      Tree *t = lm.t.get();
      const int64_t v0 = lm.v0, vl = lm.vl;
      int64_t start, len, vocab;
      ASSERT_TPDP_OK(tpdp_tp_vocab_range(wte, &start, &len, &vocab));
      EXPECT_EQ(len, vl);
      EXPECT_EQ(vocab, V);
      if (vl > 0) {
        EXPECT_EQ(start, v0);
      }
      const auto &full = t->full.at("wte.weight");
      const tpdp_tensor *lw = tpdp_param_tensor(t->Param("wte.weight"));
      EXPECT_EQ(lw->shape[0], vl);
      for (int64_t k = 0; k < vl * kD; k++)
        EXPECT_EQ(((const float *)lw->data)[k], full[v0 * kD + k]);
      // The tied head holds the same parameter object, so the same shard.
      const char *name = nullptr;
      EXPECT_EQ(tpdp_module_param(t->Module("head"), 0, &name),
                t->Param("wte.weight"));

      std::vector<int32_t> ids = Ids(V, kN, 2);
      std::vector<float> out(kN * kD, -1.0f);
      tpdp_tensor ot = View(out.data(), {kN, kD});
      ASSERT_TPDP_OK(tpdp_tp_vocab_embedding_forward(wte, ids.data(), kN, &ot));
      for (int64_t i = 0; i < kN; i++)
        for (int64_t k = 0; k < kD; k++)
          EXPECT_EQ(out[i * kD + k], full[ids[i] * kD + k]) << i;

      // Backward adds into what is there (a tied head's gradient).
      std::vector<float> g(kN * kD), dw(vl * kD + 1);
      for (int64_t i = 0; i < kN * kD; i++) g[i] = styles_test::Val(5, i);
      for (int64_t k = 0; k < vl * kD; k++) dw[k] = 0.5f;
      tpdp_tensor gt = View(g.data(), {kN, kD}),
                  dwt = View(dw.data(), {vl, kD});
      ASSERT_TPDP_OK(
          tpdp_tp_vocab_embedding_backward(wte, ids.data(), kN, &gt, &dwt));
      for (int64_t r = 0; r < vl; r++)
        for (int64_t k = 0; k < kD; k++) {
          double want = 0.5;
          for (int64_t i = 0; i < kN; i++)
            if (ids[i] == v0 + r) want += g[i * kD + k];
          EXPECT_TRUE(Near(dw[r * kD + k], want, "dw", r * kD + k));
        }
    }
}

// A fully sharded unit with param_dtype bf16 or f16 hands the lookup a
// half-precision local weight: each row is widened to f32 exactly (the
// expected values are the rounded weights, widened here). Another dtype is
// refused naming it.
TEST(VocabParallel, EmbeddingReadsHalfPrecisionWeights) {
  for (const std::string &mesh : Meshes()) {
    SCOPED_TRACE(mesh);
    Lm lm;
    ASSERT_TRUE(MakeShardedLm(mesh, 11, &lm));
    tpdp_param *w = lm.t->Param("wte.weight");
    const tpdp_tensor saved = *tpdp_param_tensor(w);
    const auto &full = lm.t->full.at("wte.weight");
    std::vector<int32_t> ids = Ids(11, kN, 4);
    for (tpdp_dtype dt : {TPDP_BF16, TPDP_F16}) {
      std::vector<uint16_t> half(lm.vl * kD + 1);
      for (int64_t k = 0; k < lm.vl * kD; k++)
        half[k] = dt == TPDP_BF16 ? tpdp_f32_to_bf16(full[lm.v0 * kD + k])
                                  : tpdp_f32_to_f16(full[lm.v0 * kD + k]);
      tpdp_tensor ht;
      int64_t shape[2] = {lm.vl, kD};
      ASSERT_TPDP_OK(tpdp_tensor_init(&ht, half.data(), dt,
                                      {TPDP_DEVICE_CPU, 0}, 2, shape));
      ASSERT_TPDP_OK(tpdp_param_set_tensor(w, &ht));
      std::vector<float> out(kN * kD, -1.0f);
      tpdp_tensor ot = View(out.data(), {kN, kD});
      ASSERT_TPDP_OK(
          tpdp_tp_vocab_embedding_forward(lm.wte, ids.data(), kN, &ot));
      for (int64_t i = 0; i < kN; i++)
        for (int64_t k = 0; k < kD; k++) {
          float x = full[ids[i] * kD + k];
          float want = dt == TPDP_BF16 ? tpdp_bf16_to_f32(tpdp_f32_to_bf16(x))
                                       : tpdp_f16_to_f32(tpdp_f32_to_f16(x));
          ASSERT_EQ(out[i * kD + k], want) << tpdp_dtype_name(dt) << " " << i;
        }
    }
    std::vector<int32_t> ints(lm.vl * kD + 1);
    tpdp_tensor it;
    int64_t shape[2] = {lm.vl, kD};
    ASSERT_TPDP_OK(tpdp_tensor_init(&it, ints.data(), TPDP_I32,
                                    {TPDP_DEVICE_CPU, 0}, 2, shape));
    ASSERT_TPDP_OK(tpdp_param_set_tensor(w, &it));
    std::vector<float> out(kN * kD);
    tpdp_tensor ot = View(out.data(), {kN, kD});
    EXPECT_TPDP_ERROR(
        tpdp_tp_vocab_embedding_forward(lm.wte, ids.data(), kN, &ot),
        TPDP_ERR_DTYPE_MISMATCH, "the local embedding weight is i32",
        "expected f32, bf16 or f16");
    ASSERT_TPDP_OK(tpdp_param_set_tensor(w, &saved));
  }
}

TEST(VocabParallel, CrossEntropyOnShardsMatchesDense) {
  for (const std::string &mesh : Meshes())
    for (int64_t V : {11, 3}) {
      SCOPED_TRACE(mesh + " V=" + std::to_string(V));
      Lm lm;
      ASSERT_TRUE(MakeShardedLm(mesh, V, &lm));
      tpdp_module *wte = lm.wte;
      const int64_t v0 = lm.v0, vl = lm.vl;
      std::vector<float> dense(kN * V);
      for (int64_t i = 0; i < kN * V; i++)
        dense[i] = 6.0f * styles_test::Val(7, i * 3 + 1);
      std::vector<int32_t> tg = Ids(V, kN, 1);
      std::vector<float> local(kN * vl + 1);
      for (int64_t i = 0; i < kN; i++)
        for (int64_t j = 0; j < vl; j++)
          local[i * vl + j] = dense[i * V + v0 + j];
      const float scale = 0.25f;
      double loss = -1;
      tpdp_tensor lt = View(local.data(), {kN, vl});
      ASSERT_TPDP_OK(
          tpdp_tp_vocab_cross_entropy(wte, &lt, tg.data(), kN, scale, &loss));
      double want = 0;
      for (int64_t i = 0; i < kN; i++) {
        double mx = -1e30, s = 0;
        for (int64_t j = 0; j < V; j++)
          mx = std::max(mx, (double)dense[i * V + j]);
        for (int64_t j = 0; j < V; j++) s += std::exp(dense[i * V + j] - mx);
        double lse = std::log(s) + mx;
        want += lse - dense[i * V + tg[i]];
        for (int64_t j = 0; j < vl; j++) {
          double p = std::exp(dense[i * V + v0 + j] - lse);
          double gw = scale * (p - (v0 + j == tg[i] ? 1.0 : 0.0));
          EXPECT_TRUE(Near(local[i * vl + j], gw, "dlogits", i * vl + j));
        }
      }
      EXPECT_TRUE(Near(loss, want, "loss", 0));
    }
}

TEST(VocabParallel, Errors) {
  Place pl;
  ASSERT_TRUE(MakePlace(Meshes()[0], &pl));
  auto t = MakeLm(11);
  ASSERT_NE(t, nullptr);
  tpdp_module *wte = t->Module("wte");
  std::vector<int32_t> ids = {1, 2, 11};
  std::vector<float> out(3 * kD);
  tpdp_tensor ot = View(out.data(), {3, kD});
  double loss;
  EXPECT_TPDP_ERROR(tpdp_tp_vocab_embedding_forward(wte, ids.data(), 3, &ot),
                    TPDP_ERR_NOT_FOUND, "wte[Embedding]",
                    "tpdp_tp_parallelize_vocab");
  ASSERT_TPDP_OK(
      tpdp_tp_parallelize_vocab(wte, pl.mesh, "tp", nullptr, nullptr));
  // Checked before communicating: every rank fails alike, none hangs.
  EXPECT_TPDP_ERROR(tpdp_tp_vocab_embedding_forward(wte, ids.data(), 3, &ot),
                    TPDP_ERR_INVALID_ARGUMENT, "ids[2] = 11",
                    "vocabulary [0, 11)");
  std::vector<float> logits(3 * 6);
  tpdp_tensor lt = View(logits.data(), {3, 6});
  EXPECT_TPDP_ERROR(
      tpdp_tp_vocab_cross_entropy(wte, &lt, ids.data(), 3, 1.0f, &loss),
      TPDP_ERR_INVALID_ARGUMENT, "targets[2] = 11");
  ids[2] = 3;
  tpdp_tensor small = View(out.data(), {2, kD});
  EXPECT_TPDP_ERROR(tpdp_tp_vocab_embedding_forward(wte, ids.data(), 3, &small),
                    TPDP_ERR_SHAPE_MISMATCH, "out has 6 elements; expected 9");
  // A second time: the module is a unit already.
  EXPECT_TPDP_ERROR(
      tpdp_tp_parallelize_vocab(wte, pl.mesh, "tp", nullptr, nullptr),
      TPDP_ERR_ALREADY, "wte[Embedding]");
  ASSERT_TRUE(t->AddModule("", "flat", "Embedding") != nullptr);
  ASSERT_TRUE(t->AddParam("flat", "weight", {11}, 3));
  EXPECT_TPDP_ERROR(tpdp_tp_parallelize_vocab(t->Module("flat"), pl.mesh, "tp",
                                              nullptr, nullptr),
                    TPDP_ERR_SHAPE_MISMATCH, "'flat.weight'", "[V, D]");
}

}  // namespace
