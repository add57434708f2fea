// SPDX-License-Identifier: BSD-3-Clause
// main() for multi-rank GoogleTest binaries: initialises tpdp (and MPI)
// before the tests and finalises after. Every rank runs every test; each
// rank's result decides mpirun's exit status.
#include <gtest/gtest.h>

#include <cstdio>

#include "tests/test_util.h"

int main(int argc, char **argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (tpdp_init(&argc, &argv) != TPDP_SUCCESS) {
    std::fprintf(stderr, "tpdp_init failed: %s\n", tpdp_last_error());
    return 1;
  }
  int rc = RUN_ALL_TESTS();
  tpdp_finalize();
  return rc;
}
