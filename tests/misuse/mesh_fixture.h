// SPDX-License-Identifier: BSD-3-Clause
// A mesh made from a spec string ("dp=1,tp=2") over a communicator (NULL:
// layout-only) and destroyed with the case: the misuse cases of dtensor.h
// and tp.h build theirs with it.
#ifndef TPDP_TESTS_MISUSE_MESH_FIXTURE_H
#define TPDP_TESTS_MISUSE_MESH_FIXTURE_H

#include "tests/test_util.h"

namespace tpdp_test {

struct Mesh {
  tpdp_mesh *m = nullptr;
  Mesh(tpdp_comm *c, const char *spec) {
    EXPECT_TPDP_OK(tpdp_mesh_create_from_string(c, spec, &m));
  }
  ~Mesh() { EXPECT_TPDP_OK(tpdp_mesh_destroy(m)); }
};

}  // namespace tpdp_test

#endif  // TPDP_TESTS_MISUSE_MESH_FIXTURE_H
