// SPDX-License-Identifier: BSD-3-Clause
// Helpers for the parallel-style tests: a tiny module tree built from full
// tensors the test owns, and torch.chunk arithmetic computed independently
// of tp/.
#ifndef TPDP_TESTS_STYLES_STYLES_TEST_UTIL_H
#define TPDP_TESTS_STYLES_STYLES_TEST_UTIL_H

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tests/test_util.h"
#include "tpdp/dtensor.h"

namespace styles_test {

// torch.chunk: chunk = ceil(n/k); shard i covers [i*chunk, min((i+1)*chunk, n)).
inline void Chunk(int64_t n, int64_t k, int64_t i, int64_t *start,
                  int64_t *len) {
  int64_t c = (n + k - 1) / k;
  int64_t s = std::min(i * c, n), e = std::min((i + 1) * c, n);
  *start = s;
  *len = e - s;
}

// Deterministic full-tensor values, identical on every rank.
inline float Val(int tag, int64_t i) {
  return 0.05f * (float)((tag * 13 + i * 7) % 17) - 0.4f;
}

// A module tree whose parameters view full tensors owned here.
struct Tree {
  tpdp_module *root = nullptr;
  // FQN -> full data and shape, kept alive for the tree's life.
  std::map<std::string, std::vector<float>> full;
  std::map<std::string, std::vector<int64_t>> shape;
  std::map<std::string, tpdp_param *> params;

  ~Tree() {
    if (root != nullptr) tpdp_module_destroy(root);
  }

  tpdp_module *Module(const std::string &path) {
    tpdp_module *m = nullptr;
    if (tpdp_module_get_submodule(root, path.c_str(), &m) != TPDP_SUCCESS)
      return nullptr;
    return m;
  }

  // Adds child `name` of class `cls` under `parent` ("" = root).
  tpdp_module *AddModule(const std::string &parent, const std::string &name,
                         const char *cls) {
    tpdp_module *m = nullptr;
    if (tpdp_module_create(cls, &m) != TPDP_SUCCESS) return nullptr;
    if (tpdp_module_add_child(Module(parent), name.c_str(), m) !=
        TPDP_SUCCESS) {
      tpdp_module_destroy(m);
      return nullptr;
    }
    return m;
  }

  // Adds parameter `name` of `shape` to module `path`, filled with Val(tag).
  bool AddParam(const std::string &path, const std::string &name,
                std::vector<int64_t> shp, int tag) {
    std::string fqn = path.empty() ? name : path + "." + name;
    int64_t n = 1;
    for (int64_t s : shp) n *= s;
    std::vector<float> &data = full[fqn];
    data.resize((size_t)n);
    for (int64_t i = 0; i < n; i++) data[(size_t)i] = Val(tag, i);
    shape[fqn] = shp;
    tpdp_tensor t;
    if (tpdp_tensor_init(&t, data.data(), TPDP_F32,
                         tpdp_device{TPDP_DEVICE_CPU, 0}, (int)shp.size(),
                         shp.data()) != TPDP_SUCCESS)
      return false;
    tpdp_param *p = nullptr;
    if (tpdp_param_create(&t, &p) != TPDP_SUCCESS) return false;
    tpdp_status st = tpdp_module_add_param(Module(path), name.c_str(), p);
    params[fqn] = p;
    tpdp_param_release(p);
    return st == TPDP_SUCCESS;
  }

  tpdp_param *Param(const std::string &fqn) { return params.at(fqn); }
};

// Model{fc1: Linear [F, H] + [F], fc2: Linear [H, F] + [H], norm: Norm [H],
// proj: Linear [3, H] (no bias)}.
inline std::unique_ptr<Tree> MakeMlp(int64_t F, int64_t H) {
  auto t = std::make_unique<Tree>();
  if (tpdp_module_create("Model", &t->root) != TPDP_SUCCESS) return nullptr;
  bool ok =
      t->AddModule("", "fc1", "Linear") && t->AddModule("", "fc2", "Linear") &&
      t->AddModule("", "norm", "Norm") && t->AddModule("", "proj", "Linear") &&
      t->AddParam("fc1", "weight", {F, H}, 1) &&
      t->AddParam("fc1", "bias", {F}, 2) &&
      t->AddParam("fc2", "weight", {H, F}, 3) &&
      t->AddParam("fc2", "bias", {H}, 4) &&
      t->AddParam("norm", "weight", {H}, 5) &&
      t->AddParam("proj", "weight", {3, H}, 6);
  if (!ok) return nullptr;
  return t;
}

}  // namespace styles_test

#endif  // TPDP_TESTS_STYLES_STYLES_TEST_UTIL_H
