// SPDX-License-Identifier: BSD-3-Clause
// The model the fully sharded unit tests drive (tests/dp/fsdp_test.cc,
// tests/misuse/fsdp_misuse_test.cc): Net{emb; blocks.0, blocks.1: Block{w,
// b}}, its values and gradients as formulas, and the units over it.
#ifndef TPDP_TESTS_DP_FSDP_MODEL_H
#define TPDP_TESTS_DP_FSDP_MODEL_H

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

}  // namespace fsdp_model

#endif  // TPDP_TESTS_DP_FSDP_MODEL_H
