// SPDX-License-Identifier: BSD-3-Clause
// Helpers shared by the spec tests (spec_test.cc, spec_json_test.cc):
// layout-only meshes and specs that free themselves.
#ifndef TPDP_TESTS_TP_SPEC_TEST_UTIL_H
#define TPDP_TESTS_TP_SPEC_TEST_UTIL_H

#include <vector>

#include "tests/test_util.h"

namespace tpdp_test {

const tpdp_device kCpu = {TPDP_DEVICE_CPU, 0};

// A layout-only mesh (no communicator): unflatten checks mesh rank 0.
struct Mesh {
  tpdp_mesh *m = nullptr;
  Mesh(std::vector<int64_t> sizes, std::vector<const char *> names = {}) {
    tpdp_status st =
        tpdp_mesh_create(nullptr, (int)sizes.size(), sizes.data(),
                         names.empty() ? nullptr : names.data(), &m);
    EXPECT_EQ(st, TPDP_SUCCESS) << tpdp_last_error();
  }
  ~Mesh() { tpdp_mesh_destroy(m); }
};

struct Spec {
  tpdp_spec *s = nullptr;
  ~Spec() { EXPECT_TPDP_OK(tpdp_spec_destroy(s)); }
};

}  // namespace tpdp_test

#endif  // TPDP_TESTS_TP_SPEC_TEST_UTIL_H
