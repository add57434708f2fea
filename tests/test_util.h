// SPDX-License-Identifier: BSD-3-Clause
// Helpers shared by tpdp's GoogleTest suites.
#ifndef TPDP_TESTS_TEST_UTIL_H
#define TPDP_TESTS_TEST_UTIL_H

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tpdp/tpdp.h"

// Expect `call` to return `status` and the last-error message to contain
// every given substring.
#define EXPECT_TPDP_ERROR(call, status, ...)                            \
  do {                                                                  \
    tpdp_clear_error();                                                 \
    tpdp_status st_ = (call);                                           \
    EXPECT_EQ(tpdp_status_string(st_),                                  \
              std::string(tpdp_status_string(status)))                  \
        << "message: " << tpdp_last_error();                            \
    for (const char *needle_ : {__VA_ARGS__})                           \
      EXPECT_NE(std::string(tpdp_last_error()).find(needle_),           \
                std::string::npos)                                      \
          << "message '" << tpdp_last_error() << "' lacks '" << needle_ \
          << "'";                                                       \
  } while (0)

#define ASSERT_TPDP_OK(call)                                     \
  do {                                                           \
    tpdp_status st_ = (call);                                    \
    ASSERT_EQ(st_, TPDP_SUCCESS)                                 \
        << tpdp_status_string(st_) << ": " << tpdp_last_error(); \
  } while (0)

#define EXPECT_TPDP_OK(call)                                     \
  do {                                                           \
    tpdp_status st_ = (call);                                    \
    EXPECT_EQ(st_, TPDP_SUCCESS)                                 \
        << tpdp_status_string(st_) << ": " << tpdp_last_error(); \
  } while (0)

namespace tpdp_test {

// World communicator of an MPI test (tpdp_init done by mpi_main.cc).
tpdp_comm *World();
int WorldRank();
int WorldSize();
// Host index of every world rank (0 for the first host name seen, in rank
// order), from their host names: collective over World().
std::vector<int> HostOfRanks();

// Directory of test data files (tests/data) under Bazel's runfiles.
std::string DataPath(const std::string &file);

// True under ASan or valgrind, which report any read of freed memory: the
// tests of tpdp's best-effort use-after-destroy checks (a handle's magic
// read after its memory was freed) skip there.
bool FreedMemoryChecked();

}  // namespace tpdp_test

#endif  // TPDP_TESTS_TEST_UTIL_H
