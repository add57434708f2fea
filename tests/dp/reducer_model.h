// SPDX-License-Identifier: BSD-3-Clause
// Fixture of the reducer tests: six small f32 parameters ("Model") whose
// gradients follow a formula of (rank, parameter, element, step), the mean
// that formula gives over ranks and steps, and options with hand-worked
// bucket limits.
#ifndef TPDP_TESTS_DP_REDUCER_MODEL_H
#define TPDP_TESTS_DP_REDUCER_MODEL_H

#include <algorithm>
#include <cmath>
#include <vector>

#include "tests/test_util.h"

namespace reducer_model {

// Six f32 parameters: 12, 5, 12, 7, 16, 1 elements = 48, 20, 48, 28, 64, 4 B.
inline const std::vector<std::vector<int64_t>> kShapes = {
    {3, 4}, {5}, {2, 3, 2}, {7}, {16}, {1}};
inline const char *const kNames[] = {"l0.weight", "l0.bias",     "l1.weight",
                                     "l1.bias",   "head.weight", "head.bias"};
inline const int kN = 6;

// Limits 64 / 100 B. Registration-order walk: p0 48, p1 -> 68 >= 64 closes
// {0,1} (limit 64, then 100); p2 48, p3 76, p4 140 >= 100 closes {2,3,4};
// {5} left over. Sorted [{0,1},{2,3,4},{5}], reversed for launch order:
inline const std::vector<std::vector<int64_t>> kInitialBuckets = {
    {5}, {2, 3, 4}, {0, 1}};

inline double G(int rank, int p, int64_t i, int step) {
  return 0.25 * (rank + 1) + p + 0.5 * (double)(i % 5) + step;
}

struct Model {
  std::vector<std::vector<float>> pdata, gdata;
  std::vector<tpdp_reducer_param> params;
  explicit Model(int rank, int n = kN) {
    pdata.resize(n);
    gdata.resize(n);
    params.resize(n);
    for (int p = 0; p < n; p++) {
      const auto &s = kShapes[p % kN];
      int64_t numel = 1;
      for (auto d : s) numel *= d;
      pdata[p].assign(numel, 0.f);
      gdata[p].assign(numel, 0.f);
      for (int64_t i = 0; i < numel; i++)
        pdata[p][i] = (float)(rank * 100 + p * 10 + i);
      tpdp_device cpu = {TPDP_DEVICE_CPU, 0};
      tpdp_tensor_init(&params[p].param, pdata[p].data(), TPDP_F32, cpu,
                       (int)s.size(), s.data());
      tpdp_tensor_init(&params[p].grad, gdata[p].data(), TPDP_F32, cpu,
                       (int)s.size(), s.data());
      params[p].fqn = p < kN ? kNames[p] : nullptr;
    }
  }
  int64_t Numel(int p) const { return (int64_t)pdata[p].size(); }
  // The gradient the framework sees: the reducer's view once a reducer is
  // attached (view mode: a bucket slot, moved by the rebuild; copy mode:
  // the caller's buffer), before that params[p].grad.
  tpdp_reducer *r = nullptr;
  float *Grad(int p) {
    if (r == nullptr) return (float *)params[p].grad.data;
    tpdp_tensor v;
    EXPECT_TPDP_OK(tpdp_reducer_grad_view(r, p, &v));
    return (float *)v.data;
  }
};

// A reducer over m's parameters on `comm` (the world by default), attached
// to m (Grad() then reads its views); nullptr, with a failure recorded, if
// create fails.
inline tpdp_reducer *Attach(Model &m, const tpdp_reducer_options &o,
                            tpdp_comm *comm = tpdp_test::World()) {
  tpdp_reducer *r = nullptr;
  EXPECT_TPDP_OK(tpdp_reducer_create(comm, m.params.data(),
                                     (int64_t)m.params.size(), &o, &r));
  m.r = r;
  return r;
}

// The current gradient view's data of parameter p.
inline void *GradData(tpdp_reducer *r, int64_t p) {
  tpdp_tensor v;
  EXPECT_TPDP_OK(tpdp_reducer_grad_view(r, p, &v));
  return v.data;
}

// The Model's replicas start apart (rank-dependent values, as replicas
// initialised independently), so these options ask for rank 0's values.
inline tpdp_reducer_options Opts(int view) {
  tpdp_reducer_options o = TPDP_REDUCER_OPTIONS_INIT;
  o.first_bucket_bytes = 64;
  o.bucket_cap_bytes = 100;
  o.gradient_as_bucket_view = view;
  o.broadcast_from_rank0 = 1;
  return o;
}

inline std::vector<std::vector<int64_t>> Buckets(tpdp_reducer *r) {
  std::vector<std::vector<int64_t>> out;
  for (int64_t b = 0; b < tpdp_reducer_num_buckets(r); b++) {
    const int64_t *idx = nullptr;
    int64_t cnt = 0;
    EXPECT_TPDP_OK(tpdp_reducer_bucket(r, b, &idx, &cnt, nullptr, nullptr));
    out.emplace_back(idx, idx + cnt);
  }
  return out;
}

// Write (or, with accumulate, add) this rank's gradients for `step`.
inline void WriteGrads(Model &m, int rank, int step, bool accumulate,
                       int skip = -1) {
  for (int p = 0; p < (int)m.params.size(); p++) {
    if (p == skip) continue;
    float *g = m.Grad(p);
    for (int64_t i = 0; i < m.Numel(p); i++) {
      float v = (float)G(rank, p, i, step);
      g[i] = accumulate ? g[i] + v : v;
    }
  }
}

// Mean over the given ranks of sum over steps of G, for parameter p.
inline double Mean(const std::vector<int> &ranks, int p, int64_t i,
                   const std::vector<int> &steps, int skip_param_on_odd = -1) {
  double s = 0;
  for (int r : ranks) {
    if (p == skip_param_on_odd && r % 2 == 1) continue;
    for (int st : steps) s += G(r, p, i, st);
  }
  return s / ranks.size();
}

inline std::vector<int> AllRanks(int n) {
  std::vector<int> v;
  for (int i = 0; i < n; i++) v.push_back(i);
  return v;
}

inline void ExpectMean(Model &m, const std::vector<int> &ranks,
                       const std::vector<int> &steps, double rel_tol = 1e-6,
                       int skip_param_on_odd = -1) {
  for (int p = 0; p < (int)m.params.size(); p++)
    for (int64_t i = 0; i < m.Numel(p); i++) {
      double want = Mean(ranks, p, i, steps, skip_param_on_odd);
      EXPECT_NEAR(m.Grad(p)[i], want, rel_tol * std::max(1.0, std::fabs(want)))
          << "param " << p << " element " << i;
    }
}

inline void MarkAll(tpdp_reducer *r, const std::vector<int> &order) {
  for (int p : order) EXPECT_TPDP_OK(tpdp_reducer_mark_ready(r, p));
}

inline const std::vector<int> kReverse = {5, 4, 3, 2, 1, 0};

// One synchronised step: prepare, this rank's gradients of `step`, marks in
// reverse order, finalize; then the mean over all ranks, checked.
inline void SyncStep(Model &m, tpdp_reducer *r, int rank, int size, int step) {
  ASSERT_TPDP_OK(tpdp_reducer_prepare(r));
  WriteGrads(m, rank, step, false);
  MarkAll(r, kReverse);
  ASSERT_TPDP_OK(tpdp_reducer_finalize(r));
  ExpectMean(m, AllRanks(size), {step});
}

}  // namespace reducer_model

#endif  // TPDP_TESTS_DP_REDUCER_MODEL_H
