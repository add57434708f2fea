// SPDX-License-Identifier: BSD-3-Clause
// The model the fully sharded unit tests drive (tests/dp/fsdp_test.cc,
// fsdp_faults_test.cc, tests/misuse/fsdp_misuse_test.cc): Net{emb;
// blocks.0, blocks.1: Block{w, b}}, its values and gradients as formulas,
// the units over it, and a training step checked against the reference.
#ifndef TPDP_TESTS_DP_FSDP_MODEL_H
#define TPDP_TESTS_DP_FSDP_MODEL_H

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "tests/test_util.h"

namespace fsdp_model {

// Net{emb [5,3]; blocks.0: Block{w [7,3], b [2]}; blocks.1: Block{...}}.
// 7 and 5 rows divide by none of 2, 3, 4; b has fewer rows than 3 or 4
// ranks, so some ranks hold none of it.
struct ParamSpec {
  const char *module;  // "" = root
  const char *name;
  std::vector<int64_t> shape;
};
const std::vector<ParamSpec> kSpecs = {
    {"", "emb", {5, 3}},    {"blocks.0", "w", {7, 3}},
    {"blocks.0", "b", {2}}, {"blocks.1", "w", {7, 3}},
    {"blocks.1", "b", {2}},
};
constexpr double kLr = 0.1;

int64_t Numel(const ParamSpec &s) {
  int64_t n = 1;
  for (int64_t d : s.shape) n *= d;
  return n;
}
int64_t RowElems(const ParamSpec &s) { return Numel(s) / s.shape[0]; }
int64_t Chunk(const ParamSpec &s, int n) { return (s.shape[0] + n - 1) / n; }
int64_t Rows(const ParamSpec &s, int r, int n) {
  int64_t c = Chunk(s, n), left = s.shape[0] - r * c;
  return left < 0 ? 0 : std::min(left, c);
}
// Padded elements of one rank's flat shard of a unit's parameters over S.
int64_t ShardElems(const std::vector<int> &params, int S) {
  int64_t n = 0;
  for (int p : params) n += Chunk(kSpecs[p], S) * RowElems(kSpecs[p]);
  return n;
}
// The parameters of each unit the HSDP tests build: the two blocks, then
// the root.
const std::vector<int> kUnitParams[3] = {{1, 2}, {3, 4}, {0}};
// Bytes rank r sends in a ring allreduce of n elements (elem_bytes each,
// f32 by default) over p ranks
// (tpdp/comm.h's traffic rule: n split into p blocks, the first n % p one
// longer; rank r sends block r - k, then block r + 1 - k, k = 0..p-2).
uint64_t RingAllreduceBytes(int64_t n, int p, int r, int elem_bytes = 4) {
  if (p <= 1) return 0;
  auto block = [&](int b) {
    b = ((b % p) + p) % p;
    return n / p + (b < n % p ? 1 : 0);
  };
  int64_t e = 0;
  for (int k = 0; k <= p - 2; k++) e += block(r - k) + block(r + 1 - k);
  return (uint64_t)e * (uint64_t)elem_bytes;
}
float Init(int p, int64_t e) { return 0.01f * (float)(p * 100 + e); }
// The gradient each rank adds in micro-batch `mb` of step `step`.
float Grad(int step, int mb, int rank, int p, int64_t e) {
  return 0.5f * (float)(rank + 1) + 0.25f * (float)p + 0.01f * (float)e +
         (float)step + 0.125f * (float)mb;
}

struct Model {
  tpdp_module *root = nullptr, *blocks[2] = {nullptr, nullptr};
  std::vector<std::vector<float>> data;  // the caller's original memory
  std::vector<tpdp_param *> params;
  std::vector<std::vector<double>> ref;  // the reference (full) values

  explicit Model(int extra_rows = 0) {
    EXPECT_TPDP_OK(tpdp_module_create("Net", &root));
    tpdp_module *seq = nullptr;
    EXPECT_TPDP_OK(tpdp_module_create("ModuleList", &seq));
    EXPECT_TPDP_OK(tpdp_module_add_child(root, "blocks", seq));
    for (int b = 0; b < 2; b++) {
      EXPECT_TPDP_OK(tpdp_module_create("Block", &blocks[b]));
      EXPECT_TPDP_OK(
          tpdp_module_add_child(seq, std::to_string(b).c_str(), blocks[b]));
    }
    data.resize(kSpecs.size());
    ref.resize(kSpecs.size());
    for (size_t p = 0; p < kSpecs.size(); p++) {
      std::vector<int64_t> shape = kSpecs[p].shape;
      if (p == 1) shape[0] += extra_rows;
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      data[p].resize(n);
      ref[p].resize(n);
      for (int64_t e = 0; e < n; e++) ref[p][e] = data[p][e] = Init((int)p, e);
      tpdp_tensor t;
      EXPECT_TPDP_OK(tpdp_tensor_init(&t, data[p].data(), TPDP_F32,
                                      tpdp_device{TPDP_DEVICE_CPU, 0},
                                      (int)shape.size(), shape.data()));
      tpdp_param *q = nullptr;
      EXPECT_TPDP_OK(tpdp_param_create(&t, &q));
      tpdp_module *m = root;
      if (kSpecs[p].module[0])
        EXPECT_TPDP_OK(tpdp_module_get_submodule(root, kSpecs[p].module, &m));
      EXPECT_TPDP_OK(tpdp_module_add_param(m, kSpecs[p].name, q));
      params.push_back(q);
    }
  }
  ~Model() {
    for (tpdp_param *q : params) tpdp_param_release(q);
    EXPECT_TPDP_OK(tpdp_module_destroy(root));
  }
};

struct Units {
  tpdp_fsdp_unit *block[2] = {nullptr, nullptr}, *root = nullptr;
};

Units Shard(Model &m, int level) {
  Units u;
  tpdp_fully_shard_options o = tpdp_fully_shard_options_default();
  o.zero_level = level;
  for (int b = 0; b < 2; b++)
    EXPECT_TPDP_OK(
        tpdp_fully_shard(m.blocks[b], tpdp_test::World(), &o, &u.block[b]));
  EXPECT_TPDP_OK(tpdp_fully_shard(m.root, tpdp_test::World(), &o, &u.root));
  return u;
}

// Every element of parameter p's current view equals the reference's rows
// [row0, row0 + rows).
void ExpectValues(const Model &m, int p, int64_t row0, int64_t rows,
                  const char *when) {
  const tpdp_tensor *t = tpdp_param_tensor(m.params[p]);
  ASSERT_EQ(t->shape[0], rows) << kSpecs[p].name << " " << when;
  int64_t re = RowElems(kSpecs[p]);
  const float *x = static_cast<const float *>(t->data);
  for (int64_t k = 0; k < rows * re; k++)
    ASSERT_NEAR(x[k], m.ref[p][row0 * re + k], 1e-5)
        << "param " << p << " element " << row0 * re + k << " " << when;
}

void ExpectFull(const Model &m, int p, const char *when) {
  ExpectValues(m, p, 0, kSpecs[p].shape[0], when);
}

void ExpectShard(const Model &m, int p, const char *when) {
  int rank = tpdp_test::WorldRank(), n = tpdp_test::WorldSize();
  int64_t rows = Rows(kSpecs[p], rank, n);
  ExpectValues(m, p, rows ? rank * Chunk(kSpecs[p], n) : 0, rows, when);
}

// Add micro-batch mb's gradient into parameter p's (full) gradient view.
void AddGrad(const Model &m, int p, int step, int mb) {
  const tpdp_tensor *g = tpdp_param_grad(m.params[p]);
  ASSERT_NE(g, nullptr);
  ASSERT_EQ(tpdp_tensor_numel(g), Numel(kSpecs[p])) << "full gradient";
  float *x = static_cast<float *>(g->data);
  for (int64_t e = 0; e < Numel(kSpecs[p]); e++)
    x[e] += Grad(step, mb, tpdp_test::WorldRank(), p, e);
}

// One training step as a framework runs it, with `micro` micro-batches
// (sync off for all but the last); block 1 skipped when `skip_block1`.
void Step(Model &m, Units &u, int step, int micro = 1,
          bool skip_block1 = false) {
  for (int mb = 0; mb < micro; mb++) {
    ASSERT_TPDP_OK(
        tpdp_fsdp_set_requires_gradient_sync(u.root, mb == micro - 1));
    ASSERT_TPDP_OK(tpdp_module_forward_begin(m.root));
    ExpectFull(m, 0, "root forward");
    for (int b = 0; b < 2; b++) {
      if (b == 1 && skip_block1) continue;
      ASSERT_TPDP_OK(tpdp_module_forward_begin(m.blocks[b]));
      ExpectFull(m, 1 + 2 * b, "block forward");
      ExpectFull(m, 2 + 2 * b, "block forward");
      ASSERT_TPDP_OK(tpdp_module_forward_end(m.blocks[b]));
    }
    ASSERT_TPDP_OK(tpdp_module_forward_end(m.root));
    ASSERT_TPDP_OK(tpdp_module_backward_begin(m.root));
    AddGrad(m, 0, step, mb);
    for (int b = 1; b >= 0; b--) {
      if (b == 1 && skip_block1) continue;
      ASSERT_TPDP_OK(tpdp_module_backward_begin(m.blocks[b]));
      ExpectFull(m, 1 + 2 * b, "block backward");
      AddGrad(m, 1 + 2 * b, step, mb);
      AddGrad(m, 2 + 2 * b, step, mb);
      ASSERT_TPDP_OK(tpdp_module_backward_end(m.blocks[b]));
    }
    ASSERT_TPDP_OK(tpdp_module_backward_end(m.root));
  }
  ASSERT_TPDP_OK(tpdp_fsdp_finalize(u.root));
  // Each rank's gradient: the mean over ranks of the micro-batches' sum,
  // on its rows; then SGD on the shard, and the same on the reference.
  int rank = tpdp_test::WorldRank(), n = tpdp_test::WorldSize();
  for (size_t p = 0; p < kSpecs.size(); p++) {
    bool unused = skip_block1 && (p == 3 || p == 4);
    const ParamSpec &s = kSpecs[p];
    int64_t re = RowElems(s), rows = Rows(s, rank, n);
    int64_t e0 = rank * Chunk(s, n) * re;
    const tpdp_tensor *g = tpdp_param_grad(m.params[p]);
    const tpdp_tensor *t = tpdp_param_tensor(m.params[p]);
    ASSERT_EQ(g->shape[0], rows);
    ASSERT_EQ(t->shape[0], rows);
    float *gx = static_cast<float *>(g->data);
    float *tx = static_cast<float *>(t->data);
    for (int64_t k = 0; k < rows * re; k++) {
      double mean = 0;
      for (int r = 0; r < n && !unused; r++)
        for (int mb = 0; mb < micro; mb++)
          mean += Grad(step, mb, r, (int)p, e0 + k);
      mean /= n;
      ASSERT_NEAR(gx[k], mean, 1e-5 * (1 + std::fabs(mean)))
          << "param " << p << " element " << e0 + k << " step " << step;
      tx[k] -= (float)kLr * gx[k];
    }
    for (int64_t e = 0; e < Numel(s); e++) {
      double mean = 0;
      for (int r = 0; r < n && !unused; r++)
        for (int mb = 0; mb < micro; mb++) mean += Grad(step, mb, r, (int)p, e);
      m.ref[p][e] -= kLr * (mean / n);
    }
  }
}

// Round-to-nearest-even casts written here, independently of the library.
float RoundTo(tpdp_dtype dt, float x) {
  if (dt == TPDP_F32) return x;
  if (dt == TPDP_BF16) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    u = (u + 0x7fff + ((u >> 16) & 1)) & 0xffff0000u;
    std::memcpy(&x, &u, 4);
    return x;
  }
  // f16: 10 mantissa bits; these values are normal f16 numbers.
  int e;
  double m = std::frexp((double)x, &e);  // x = m * 2^e, 0.5 <= |m| < 1
  return (float)std::ldexp(std::nearbyint(std::ldexp(m, 11)), e - 11);
}
float Load(const tpdp_tensor *t, int64_t k) {
  if (t->dtype == TPDP_F32) return ((const float *)t->data)[k];
  uint16_t h = ((const uint16_t *)t->data)[k];
  return t->dtype == TPDP_BF16 ? tpdp_bf16_to_f32(h) : tpdp_f16_to_f32(h);
}
void Store(const tpdp_tensor *t, int64_t k, float x) {
  if (t->dtype == TPDP_F32) {
    ((float *)t->data)[k] = x;
    return;
  }
  ((uint16_t *)t->data)[k] =
      t->dtype == TPDP_BF16 ? tpdp_f32_to_bf16(x) : tpdp_f32_to_f16(x);
}

}  // namespace fsdp_model

#endif  // TPDP_TESTS_DP_FSDP_MODEL_H
