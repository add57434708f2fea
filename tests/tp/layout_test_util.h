// SPDX-License-Identifier: BSD-3-Clause
// Helpers for the transformer-layout tests (tp/layout.c, tp/head_shard.c,
// tp/vocab_parallel.c): where this rank sits on a mesh, the meshes each
// world size runs, and a comparison that names the element.
#ifndef TPDP_TESTS_TP_LAYOUT_TEST_UTIL_H
#define TPDP_TESTS_TP_LAYOUT_TEST_UTIL_H

#include <cmath>
#include <string>
#include <vector>

#include "tests/tp/styles_test_util.h"

namespace layout_test {

// This rank's place on a mesh with a "tp" dim.
struct Place {
  tpdp_mesh *mesh = nullptr;
  int64_t T = 1;        // tp size
  int64_t tp_rank = 0;  // coordinate on tp
  ~Place() { tpdp_mesh_destroy(mesh); }
};

inline bool MakePlace(const std::string &text, Place *p) {
  if (tpdp_mesh_create_from_string(tpdp_test::World(), text.c_str(),
                                   &p->mesh) != TPDP_SUCCESS)
    return false;
  int dim = tpdp_mesh_dim_index(p->mesh, "tp");
  p->T = tpdp_mesh_dim_size(p->mesh, dim);
  int64_t coords[TPDP_MAX_DIMS];
  if (tpdp_mesh_coords(p->mesh, tpdp_mesh_rank(p->mesh), coords) !=
      TPDP_SUCCESS)
    return false;
  p->tp_rank = coords[dim];
  return true;
}

// The meshes a test runs on, by world size (np = 2 or 4).
inline std::vector<std::string> Meshes() {
  if (tpdp_test::WorldSize() == 2) return {"tp=2"};
  if (tpdp_test::WorldSize() == 4) return {"dp=2,tp=2", "tp=2,dp=2", "tp=4"};
  return {};
}

inline ::testing::AssertionResult Near(double got, double want,
                                       const std::string &what, int64_t i,
                                       double rel = 1e-5) {
  double tol = rel * std::max(1.0, std::fabs(want));
  if (std::fabs(got - want) <= tol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << "[" << i << "]: got " << got << ", want " << want;
}

inline const float *Data(tpdp_param *p) {
  return (const float *)tpdp_param_tensor(p)->data;
}

inline tpdp_tensor View(float *data, std::vector<int64_t> shape) {
  tpdp_tensor t;
  EXPECT_EQ(
      tpdp_tensor_init(&t, data, TPDP_F32, tpdp_device{TPDP_DEVICE_CPU, 0},
                       (int)shape.size(), shape.data()),
      TPDP_SUCCESS);
  return t;
}

}  // namespace layout_test

#endif  // TPDP_TESTS_TP_LAYOUT_TEST_UTIL_H
