// SPDX-License-Identifier: BSD-3-Clause
// examples/common/nn_cpu.c against double-precision formulas: nn_expf's
// accuracy, GELU and its derivative, LayerNorm forward/backward, AdamW's
// two first steps worked by hand (torch.optim.AdamW's order of
// operations), and the thread pool (long loops split over 1, 2 and 3
// threads give the same bits).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

extern "C" {
#include "examples/common/blas_core.h"
#include "examples/common/nn_cpu.h"
}

namespace {

TEST(NnCpu, ExpWithinTwoUlp) {
  for (double x = -87.0; x <= 88.0; x += 0.0137) {
    float got = nn_expf((float)x);
    double want = std::exp((double)(float)x);
    EXPECT_LE(std::fabs(got - want), 2.5e-7 * want) << x;
  }
  EXPECT_EQ(nn_expf(-1000.0f), nn_expf(-87.0f));  // clamped, finite
  EXPECT_TRUE(std::isfinite(nn_expf(1000.0f)));
  EXPECT_NEAR(nn_tanhf(0.5f), std::tanh(0.5), 1e-7);
  EXPECT_EQ(nn_tanhf(20.0f), 1.0f);
}

double Gelu(double x) {
  const double k = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

TEST(NnCpu, GeluAndItsDerivative) {
  const int n = 1000;
  std::vector<float> x(n), y(n), d(n, 1.0f);
  for (int i = 0; i < n; i++) x[i] = -6.0f + 12.0f * i / n;
  nn_gelu_fwd(x.data(), y.data(), n);
  nn_gelu_bwd(x.data(), d.data(), n);
  for (int i = 0; i < n; i++) {
    EXPECT_NEAR(y[i], Gelu(x[i]), 1e-6) << x[i];
    double h = 1e-4, fd = (Gelu(x[i] + h) - Gelu(x[i] - h)) / (2 * h);
    EXPECT_NEAR(d[i], fd, 1e-5) << x[i];
  }
}

// grad_beta 0 overwrites dg and db; 1 adds to what they hold (0.25).
class LayerNorm : public ::testing::TestWithParam<float> {};

TEST_P(LayerNorm, MatchesDouble) {
  const float grad_beta = GetParam();
  const int N = 3, C = 7;
  std::vector<float> X(N * C), g(C), b(C), Y(N * C), mean(N), rstd(N);
  std::vector<float> dY(N * C), dX(N * C, 0.5f), dg(C, 0.25f), db(C, 0.25f);
  for (int i = 0; i < N * C; i++) {
    X[i] = std::sin(0.7f * i) * 3.0f;
    dY[i] = std::cos(0.3f * i);
  }
  for (int k = 0; k < C; k++) {
    g[k] = 1.0f + 0.1f * k;
    b[k] = -0.2f * k;
  }
  nn_layernorm_fwd(X.data(), g.data(), b.data(), Y.data(), mean.data(),
                   rstd.data(), N, C, 1e-5f);
  nn_layernorm_bwd(X.data(), g.data(), mean.data(), rstd.data(), dY.data(),
                   dX.data(), dg.data(), db.data(), N, C, grad_beta);
  const double held = grad_beta == 0.0f ? 0.0 : 0.25;
  std::vector<double> wdg(C, held), wdb(C, held);
  for (int i = 0; i < N; i++) {
    double mu = 0, var = 0;
    for (int k = 0; k < C; k++) mu += X[i * C + k];
    mu /= C;
    for (int k = 0; k < C; k++)
      var += (X[i * C + k] - mu) * (X[i * C + k] - mu);
    var /= C;
    double r = 1.0 / std::sqrt(var + 1e-5), s1 = 0, s2 = 0;
    for (int k = 0; k < C; k++) {
      double xh = (X[i * C + k] - mu) * r;
      EXPECT_NEAR(Y[i * C + k], xh * g[k] + b[k], 1e-5);
      s1 += dY[i * C + k] * g[k];
      s2 += dY[i * C + k] * g[k] * xh;
      wdg[k] += dY[i * C + k] * xh;
      wdb[k] += dY[i * C + k];
    }
    for (int k = 0; k < C; k++) {
      double xh = (X[i * C + k] - mu) * r;
      double want = 0.5 + r * (dY[i * C + k] * g[k] - s1 / C - xh * s2 / C);
      EXPECT_NEAR(dX[i * C + k], want, 1e-5) << i << "," << k;
    }
  }
  for (int k = 0; k < C; k++) {
    EXPECT_NEAR(dg[k], wdg[k], 1e-5);
    EXPECT_NEAR(db[k], wdb[k], 1e-5);
  }
}

INSTANTIATE_TEST_SUITE_P(GradBeta, LayerNorm, ::testing::Values(0.0f, 1.0f));

TEST(NnCpu, AdamWTwoStepsByHand) {
  nn_adamw_opts o = {0.1, 0.9, 0.95, 1e-8};
  float p = 1.0f, m = 0.0f, v = 0.0f;
  const float g1 = 0.5f, g2 = -0.25f;
  nn_adamw(&p, &g1, &m, &v, 1, &o, 0.01, 1);
  // step 1: p = 1 * (1 - 0.1*0.01); m = 0.05; v = 0.0125;
  // p -= 0.1 / 0.1 * 0.05 / (sqrt(0.0125) / sqrt(0.05) + 1e-8)
  double pw = 1.0 * (1 - 0.001);
  double mw = 0.05, vw = 0.05 * 0.25;
  pw -= 0.1 / (1 - 0.9) * mw / (std::sqrt(vw) / std::sqrt(1 - 0.95) + 1e-8);
  EXPECT_NEAR(p, pw, 1e-6);
  EXPECT_NEAR(m, mw, 1e-8);
  EXPECT_NEAR(v, vw, 1e-8);
  nn_adamw(&p, &g2, &m, &v, 1, &o, 0.01, 2);
  pw *= 1 - 0.001;
  mw = 0.9 * mw + 0.1 * -0.25;
  vw = 0.95 * vw + 0.05 * 0.0625;
  pw -= 0.1 / (1 - 0.81) * mw /
        (std::sqrt(vw) / std::sqrt(1 - 0.95 * 0.95) + 1e-8);
  EXPECT_NEAR(p, pw, 1e-6);
}

TEST(NnCpu, ThreadsGiveTheSameBits) {
  const int n = 300001;  // long enough to split, not a multiple of 2 or 3
  std::vector<float> x(n), y1(n), p0(n), g(n), m0(n, 0.0f), v0(n, 0.0f);
  for (int i = 0; i < n; i++) {
    x[i] = std::sin(0.001f * i) * 4.0f;
    p0[i] = std::cos(0.002f * i);
    g[i] = std::sin(0.003f * i);
  }
  nn_adamw_opts o = {1e-3, 0.9, 0.95, 1e-8};
  nn_set_threads(1);
  nn_gelu_fwd(x.data(), y1.data(), n);
  std::vector<float> p1 = p0, m1 = m0, v1 = v0;
  nn_adamw(p1.data(), g.data(), m1.data(), v1.data(), n, &o, 0.1, 1);
  for (int t : {2, 3, 2}) {
    nn_set_threads(t);
    EXPECT_EQ(nn_threads(), t);
    std::vector<float> y(n), p = p0, m = m0, v = v0;
    nn_gelu_fwd(x.data(), y.data(), n);
    nn_adamw(p.data(), g.data(), m.data(), v.data(), n, &o, 0.1, 1);
    EXPECT_EQ(y, y1) << t << " threads";
    EXPECT_EQ(p, p1) << t << " threads";
    EXPECT_EQ(v, v1) << t << " threads";
  }
  nn_set_threads(1);
}

// OpenBLAS's core names by vector level, and the value the examples set:
// only where OpenBLAS's pick is narrower than the CPU (the table below is
// OpenBLAS's dynamic.c names and the ISA their kernels use).
TEST(BlasCore, LevelsAndTheValueToSet) {
  EXPECT_EQ(ex_blas_core_level("SkylakeX"), EX_BLAS_AVX512);
  EXPECT_EQ(ex_blas_core_level("COOPERLAKE"), EX_BLAS_AVX512);
  EXPECT_EQ(ex_blas_core_level("Haswell"), EX_BLAS_AVX2);
  EXPECT_EQ(ex_blas_core_level("Zen"), EX_BLAS_AVX2);
  EXPECT_EQ(ex_blas_core_level("Sandybridge"), EX_BLAS_AVX);
  EXPECT_EQ(ex_blas_core_level("Prescott"), EX_BLAS_SSE);
  EXPECT_EQ(ex_blas_core_level("Nehalem"), EX_BLAS_SSE);
  EXPECT_EQ(ex_blas_core_level("no such core"), EX_BLAS_SSE);
  EXPECT_EQ(ex_blas_core_level(nullptr), EX_BLAS_SSE);
  EXPECT_STREQ(ex_blas_better_core_for("Prescott", EX_BLAS_AVX512), "SKYLAKEX");
  EXPECT_STREQ(ex_blas_better_core_for("Haswell", EX_BLAS_AVX512), "SKYLAKEX");
  EXPECT_STREQ(ex_blas_better_core_for("Prescott", EX_BLAS_AVX2), "HASWELL");
  EXPECT_STREQ(ex_blas_better_core_for("Nehalem", EX_BLAS_AVX), "SANDYBRIDGE");
  EXPECT_EQ(ex_blas_better_core_for("Cooperlake", EX_BLAS_AVX512), nullptr);
  EXPECT_EQ(ex_blas_better_core_for("Zen", EX_BLAS_AVX2), nullptr);
  EXPECT_EQ(ex_blas_better_core_for("SkylakeX", EX_BLAS_AVX2), nullptr);
  EXPECT_EQ(ex_blas_better_core_for("Prescott", EX_BLAS_SSE), nullptr);
  // Each value names a kernel set of its own level.
  for (int level = EX_BLAS_AVX; level <= EX_BLAS_AVX512; level++)
    EXPECT_EQ(ex_blas_core_level(ex_blas_better_core_for("Prescott", level)),
              level);
}

// None once OPENBLAS_CORETYPE is set (whoever set it decided; OpenBLAS
// read it at load), and the summary's line names what runs and why.
TEST(BlasCore, TheEnvironmentDecides) {
  const char *had = getenv("OPENBLAS_CORETYPE");
  std::string saved = had ? had : "";
  setenv("OPENBLAS_CORETYPE", "HASWELL", 1);
  EXPECT_EQ(ex_blas_better_core(), nullptr);
  char line[512];
  ex_blas_describe(line, sizeof line);
  EXPECT_NE(std::string(line).find(
                "(OPENBLAS_CORETYPE=HASWELL from the environment)"),
            std::string::npos)
      << line;
  EXPECT_EQ(std::string(line).rfind(ex_blas_core(), 0), 0u) << line;
  unsetenv("OPENBLAS_CORETYPE");
  const char *advice = ex_blas_better_core();
  if (advice != nullptr) {
    EXPECT_GT(ex_blas_core_level(advice), ex_blas_core_level(ex_blas_core()));
  }
  if (had) setenv("OPENBLAS_CORETYPE", saved.c_str(), 1);
}

}  // namespace

// dW and db after two backwards, the second with grad_beta 1: the sum of
// both, worked out in double (gradient accumulation over micro-batches).
TEST(NnCpu, Conv1dAndLinearAccumulateParameterGradients) {
  const int N = 4, in = 3, out = 5;
  std::vector<float> X1(N * in), X2(N * in), W(in * out), dY1(N * out),
      dY2(N * out), dW(in * out), db(out), dWl(out * in);
  for (int i = 0; i < N * in; i++) {
    X1[i] = std::sin(0.5f * i);
    X2[i] = std::cos(0.9f * i);
  }
  for (int i = 0; i < N * out; i++) {
    dY1[i] = 0.1f * (i % 7) - 0.3f;
    dY2[i] = std::sin(1.3f * i);
  }
  nn_conv1d_bwd(X1.data(), W.data(), dY1.data(), nullptr, dW.data(), db.data(),
                N, in, out, 0.0f, 0.0f);
  nn_conv1d_bwd(X2.data(), W.data(), dY2.data(), nullptr, dW.data(), db.data(),
                N, in, out, 0.0f, 1.0f);
  // Linear: W [out, in], dW = dY^T X.
  nn_linear_bwd(X1.data(), W.data(), dY1.data(), nullptr, dWl.data(), N, in,
                out, 0.0f);
  nn_linear_bwd(X2.data(), W.data(), dY2.data(), nullptr, dWl.data(), N, in,
                out, 1.0f);
  for (int a = 0; a < in; a++)
    for (int o = 0; o < out; o++) {
      double want = 0;
      for (int i = 0; i < N; i++)
        want += (double)X1[i * in + a] * dY1[i * out + o] +
                (double)X2[i * in + a] * dY2[i * out + o];
      EXPECT_NEAR(dW[a * out + o], want, 1e-5) << a << "," << o;
      EXPECT_NEAR(dWl[o * in + a], want, 1e-5) << o << "," << a;
    }
  for (int o = 0; o < out; o++) {
    double want = 0;
    for (int i = 0; i < N; i++)
      want += (double)dY1[i * out + o] + dY2[i * out + o];
    EXPECT_NEAR(db[o], want, 1e-5) << o;
  }
}
