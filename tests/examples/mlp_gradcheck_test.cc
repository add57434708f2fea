// SPDX-License-Identifier: BSD-3-Clause
// The example model's backward against central finite differences of its
// own loss, and the TP split of the model against the unsplit one: two
// "ranks" each holding part of fc1's rows / fc2's columns produce partial
// sums that add up to the unsplit model's.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

extern "C" {
#include "examples/train_mlp/mlp.h"
}

namespace {

struct Params {
  std::vector<std::vector<float>> data, grad;
  std::vector<float *> p, g;
};

Params MakeParams(const mlp_shape &s, int f_local, int f_off, uint64_t seed) {
  Params r;
  int n = mlp_num_params(&s);
  r.data.resize(n);
  r.grad.resize(n);
  for (int i = 0; i < n; i++) {
    int nd, ld;
    int64_t full[2], loc[2];
    char name[64];
    mlp_param_info(&s, i, name, sizeof name, &nd, full);
    mlp_local_shape(&s, f_local, i, &ld, loc);
    std::vector<float> f(nd == 2 ? full[0] * full[1] : full[0]);
    mlp_init_param(&s, i, seed, f.data());
    int64_t ln = ld == 2 ? loc[0] * loc[1] : loc[0];
    std::vector<float> l(ln + 1);
    int slot = (i - 2) % BLK_SLOTS;
    bool block = i >= 2 && i < mlp_head_param(&s);
    for (int64_t k = 0; k < ln; k++) {
      if (block && (slot == BLK_FC1_W)) {  // rows f_off..
        l[k] = f[(f_off + k / full[1]) * full[1] + k % full[1]];
      } else if (block && slot == BLK_FC1_B) {
        l[k] = f[f_off + k];
      } else if (block && slot == BLK_FC2_W) {  // columns f_off..
        l[k] = f[(k / loc[1]) * full[1] + f_off + k % loc[1]];
      } else {
        l[k] = f[k];
      }
    }
    r.data[i] = l;
    r.grad[i].assign(ln + 1, 0.0f);
  }
  for (int i = 0; i < n; i++) {
    r.p.push_back(r.data[i].data());
    r.g.push_back(r.grad[i].data());
  }
  return r;
}

double Loss(const mlp_shape &s, Params &P, const std::vector<float> &x,
            const std::vector<int> &y, int B) {
  mlp_model m;
  EXPECT_EQ(mlp_model_init(&m, &s, s.ffn, B, P.p.data(), P.g.data()), 0);
  mlp_timers t = {0, 0};
  double loss = 0;
  mlp_forward(&m, x.data(), y.data(), (float)B, nullptr, nullptr, &loss, &t);
  mlp_backward(&m, nullptr, nullptr, nullptr, nullptr, &t);
  mlp_model_free(&m);
  return loss / B;
}

TEST(MlpModel, GradientsMatchFiniteDifferences) {
  mlp_shape s = {5, 6, 7, 3, 2};
  int B = 4;
  std::vector<float> x(B * s.d_in);
  std::vector<int> y(B);
  mlp_make_batch(&s, 3, 0, B, x.data(), y.data());
  Params P = MakeParams(s, s.ffn, 0, 3);
  Loss(s, P, x, y, B);
  Params G = P;  // analytic gradients at the base point
  G.p.clear();
  for (auto &v : G.grad) G.g.push_back(v.data());
  int n = mlp_num_params(&s);
  const double eps = 1e-2;
  int checked = 0;
  for (int i = 0; i < n; i++) {
    int64_t ln = (int64_t)P.data[i].size() - 1;
    for (int64_t k = 0; k < ln; k += 3) {
      float orig = P.data[i][k];
      P.data[i][k] = orig + (float)eps;
      double lp = Loss(s, P, x, y, B);
      P.data[i][k] = orig - (float)eps;
      double lm = Loss(s, P, x, y, B);
      P.data[i][k] = orig;
      double fd = (lp - lm) / (2 * eps);
      double an = G.grad[i][k];
      EXPECT_NEAR(an, fd, 2e-3 + 2e-2 * std::fabs(fd))
          << "param " << i << " element " << k;
      checked++;
    }
  }
  EXPECT_GT(checked, 50);
}

TEST(MlpModel, TensorParallelSplitMatchesUnsplit) {
  mlp_shape s = {5, 6, 7, 3, 1};  // F = 7 split 4 + 3
  int B = 3;
  std::vector<float> x(B * s.d_in);
  std::vector<int> y(B);
  mlp_make_batch(&s, 5, 1, B, x.data(), y.data());
  Params full = MakeParams(s, 7, 0, 5);
  double ref = Loss(s, full, x, y, B);

  // One layer: the forward's only TP collective is the allreduce of fc2's
  // output. A callback that records each half's partial sum (and does not
  // reduce) lets the test check that the two partials add up to the
  // unsplit model's value.
  Params h0 = MakeParams(s, 4, 0, 5), h1 = MakeParams(s, 3, 4, 5);
  struct Rec {
    std::vector<float> out;
  } r0, r1;
  auto record = [](int kind, int layer, float *data, int64_t n, void *ctx) {
    (void)layer;
    auto *r = static_cast<Rec *>(ctx);
    if (kind == MLP_TP_ROWWISE_OUT) r->out.assign(data, data + n);
    return 0;
  };
  mlp_model m0, m1, mf;
  ASSERT_EQ(mlp_model_init(&m0, &s, 4, B, h0.p.data(), h0.g.data()), 0);
  ASSERT_EQ(mlp_model_init(&m1, &s, 3, B, h1.p.data(), h1.g.data()), 0);
  ASSERT_EQ(mlp_model_init(&mf, &s, 7, B, full.p.data(), full.g.data()), 0);
  Rec rf;
  mlp_timers t = {0, 0};
  double l0, l1, lf;
  mlp_forward(&m0, x.data(), y.data(), (float)B, record, &r0, &l0, &t);
  mlp_forward(&m1, x.data(), y.data(), (float)B, record, &r1, &l1, &t);
  mlp_forward(&mf, x.data(), y.data(), (float)B, record, &rf, &lf, &t);
  EXPECT_NEAR(lf / B, ref, 1e-6);
  ASSERT_EQ(r0.out.size(), rf.out.size());
  for (size_t k = 0; k < rf.out.size(); k++)
    EXPECT_NEAR(r0.out[k] + r1.out[k], rf.out[k], 1e-5) << k;
  mlp_model_free(&m0);
  mlp_model_free(&m1);
  mlp_model_free(&mf);
}

}  // namespace
