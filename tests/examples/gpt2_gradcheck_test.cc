// SPDX-License-Identifier: BSD-3-Clause
// examples/train_gpt2/gpt2.c on one rank (tp = 1): every parameter's
// gradient from gpt2_backward against central finite differences of the
// loss, the loss against a direct evaluation, and the order in which
// gradients are reported ready (each once, wte last after both of its
// uses). The TP callbacks are the one-rank identities written here.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

extern "C" {
#include "examples/train_gpt2/gpt2.h"
}

namespace {

struct Ctx {
  int C = 0, V = 0;
  float *wte = nullptr;
  std::vector<int> ready;
};

int AllReduce(void *, float *, int64_t) { return 0; }
int Embed(void *vc, const int32_t *ids, int64_t n, float *out) {
  Ctx *c = (Ctx *)vc;
  for (int64_t i = 0; i < n; i++)
    std::memcpy(out + i * c->C, c->wte + (int64_t)ids[i] * c->C,
                sizeof(float) * c->C);
  return 0;
}
int EmbedBackward(void *vc, const int32_t *ids, int64_t n, const float *d,
                  float *dw) {
  Ctx *c = (Ctx *)vc;
  for (int64_t i = 0; i < n; i++)
    for (int k = 0; k < c->C; k++)
      dw[(int64_t)ids[i] * c->C + k] += d[i * c->C + k];
  return 0;
}
// Dense softmax cross-entropy in double.
int CrossEntropy(void *vc, float *z, const int32_t *tg, int64_t n, float scale,
                 double *loss) {
  Ctx *c = (Ctx *)vc;
  *loss = 0;
  for (int64_t i = 0; i < n; i++) {
    float *r = z + i * c->V;
    double mx = r[0], s = 0;
    for (int j = 1; j < c->V; j++) mx = std::max(mx, (double)r[j]);
    for (int j = 0; j < c->V; j++) s += std::exp(r[j] - mx);
    double lse = std::log(s) + mx;
    *loss += lse - r[tg[i]];
    for (int j = 0; j < c->V; j++)
      r[j] = (float)(scale * (std::exp(r[j] - lse) - (j == tg[i] ? 1 : 0)));
  }
  return 0;
}
int Ready(void *vc, int i) {
  ((Ctx *)vc)->ready.push_back(i);
  return 0;
}

TEST(Gpt2, GradientsMatchFiniteDifferences) {
  gpt2_config c = {2, 8, 2, 11, 8, 12};
  gpt2_dims d;
  std::memset(&d, 0, sizeof d);
  d.c = c;
  d.B = 2;
  d.T = 5;
  d.hd = 4;
  d.hl = 2;
  d.fl = 12;
  d.vl = 11;
  d.tl = 5;
  const int np = gpt2_num_params(&c);
  std::vector<std::vector<float>> P(np), G(np);
  std::vector<float *> pp(np), gp(np);
  std::vector<int64_t> numel(np);
  for (int i = 0; i < np; i++) {
    gpt2_param_info in;
    gpt2_param_info_get(&c, i, &in);
    numel[i] = in.ndim == 2 ? in.shape[0] * in.shape[1] : in.shape[0];
    P[i].resize(numel[i]);
    G[i].assign(numel[i], 0.0f);
    int64_t zero[2] = {0, 0};
    gpt2_init_box(&c, i, 5, in.ndim, in.shape, zero, in.shape, P[i].data());
    // Larger weights than GPT-2's and non-trivial biases / norms, so that
    // every term of the backward matters.
    for (int64_t k = 0; k < numel[i]; k++)
      P[i][k] = in.init_std > 0
                    ? P[i][k] * 10.0f
                    : in.init_fill + 0.1f * std::sin(1.0f + i * 7.0f + k);
    pp[i] = P[i].data();
    gp[i] = G[i].data();
  }
  Ctx ctx;
  ctx.C = c.n_embd;
  ctx.V = c.vocab;
  ctx.wte = pp[GPT2_WTE];
  gpt2_ops ops = {&ctx,  AllReduce,     nullptr,      nullptr,
                  Embed, EmbedBackward, CrossEntropy, Ready};
  gpt2_model m;
  ASSERT_EQ(gpt2_model_init(&m, &d, pp.data(), gp.data()), 0);
  const int N = d.B * d.T;
  std::vector<int32_t> tok(N + 1);
  for (int i = 0; i <= N; i++) tok[i] = (i * 7 + 3) % c.vocab;
  const float scale = 1.0f / N;
  gpt2_timers t = {0, 0};
  auto loss = [&]() {
    double s = 0;
    EXPECT_EQ(gpt2_forward(&m, tok.data(), tok.data() + 1, scale, &ops, &s, &t),
              0);
    return s / N;
  };
  double l0 = loss();
  EXPECT_NEAR(l0, std::log((double)c.vocab), 1.5);  // roughly uniform
  ASSERT_EQ(gpt2_backward(&m, &ops, &t), 0);
  // Each gradient reported once, wte last.
  ASSERT_EQ((int)ctx.ready.size(), np);
  EXPECT_EQ(ctx.ready.back(), GPT2_WTE);
  std::vector<int> seen(np, 0);
  for (int i : ctx.ready) seen[i]++;
  for (int i = 0; i < np; i++) EXPECT_EQ(seen[i], 1) << i;
  std::vector<std::vector<float>> grad = G;
  const double eps = 2e-3;
  int checked = 0;
  for (int i = 0; i < np; i++) {
    gpt2_param_info in;
    gpt2_param_info_get(&c, i, &in);
    // A few elements of each parameter, spread over it.
    for (int64_t k = 0; k < numel[i]; k += std::max<int64_t>(1, numel[i] / 5)) {
      float keep = P[i][k];
      P[i][k] = keep + (float)eps;
      double lp = loss();
      P[i][k] = keep - (float)eps;
      double lm = loss();
      P[i][k] = keep;
      double fd = (lp - lm) / (2 * eps), g = grad[i][k];
      EXPECT_NEAR(g, fd, 2e-4 + 0.005 * std::fabs(fd))
          << in.name << "[" << k << "]";
      checked++;
    }
  }
  EXPECT_GT(checked, np * 3);
  gpt2_model_free(&m);
}

TEST(Gpt2, InitIsGpt2sAndTheSameForAnySlice) {
  gpt2_config c = {4, 16, 2, 50, 32, 0};
  c.n_inner = 64;
  gpt2_param_info in;
  // h.1.mlp.c_proj.weight [64, 16]: N(0, 0.02 / sqrt(8)).
  int i = gpt2_block_param(1, GPT2_MO_W);
  gpt2_param_info_get(&c, i, &in);
  EXPECT_STREQ(in.name, "h.1.mlp.c_proj.weight");
  EXPECT_EQ(in.shape[0], 64);
  EXPECT_EQ(in.shape[1], 16);
  EXPECT_FLOAT_EQ(in.init_std, 0.02f / std::sqrt(8.0f));
  EXPECT_EQ(in.decay, 1);
  int64_t zero[2] = {0, 0};
  std::vector<float> full(64 * 16);
  gpt2_init_box(&c, i, 9, 2, in.shape, zero, in.shape, full.data());
  double s = 0, ss = 0;
  for (float v : full) {
    s += v;
    ss += (double)v * v;
  }
  double sd =
      std::sqrt(ss / full.size() - (s / full.size()) * (s / full.size()));
  EXPECT_NEAR(sd, in.init_std, 0.1 * in.init_std);
  // A slice of a view ([64, 2, 8], rows 3..5 of dim 0, the second half of
  // dim 1) holds the same elements as the full tensor.
  int64_t view[3] = {64, 2, 8}, off[3] = {3, 1, 0}, loc[3] = {3, 1, 8};
  std::vector<float> part(3 * 8);
  gpt2_init_box(&c, i, 9, 3, view, off, loc, part.data());
  for (int r = 0; r < 3; r++)
    for (int k = 0; k < 8; k++)
      EXPECT_EQ(part[r * 8 + k], full[(3 + r) * 16 + 8 + k]);
  // LayerNorm weights 1, biases 0; no decay on rank-1 tensors.
  gpt2_param_info_get(&c, gpt2_block_param(0, GPT2_LN2_W), &in);
  EXPECT_EQ(in.init_std, 0.0f);
  EXPECT_EQ(in.init_fill, 1.0f);
  EXPECT_EQ(in.decay, 0);
  gpt2_param_info_get(&c, gpt2_block_param(0, GPT2_QKV_B), &in);
  EXPECT_STREQ(in.name, "h.0.attn.c_attn.bias");
  EXPECT_EQ(in.shape[0], 48);
  EXPECT_EQ(in.init_fill, 0.0f);
}

}  // namespace
