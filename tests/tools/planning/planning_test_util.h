// Assertions on the planning library's own last error
// (tools/planning/error.h), as tests/test_util.h's on libtpdp's.
#ifndef TPDP_TESTS_TOOLS_PLANNING_PLANNING_TEST_UTIL_H
#define TPDP_TESTS_TOOLS_PLANNING_PLANNING_TEST_UTIL_H

#include <string>

#include "tests/test_util.h"
#include "tools/planning/error.h"

// Expect `call` to return `status` and planning_last_error() to contain
// every given substring.
#define EXPECT_PLANNING_ERROR(call, status, ...)                            \
  do {                                                                      \
    planning_clear_error();                                                 \
    tpdp_status st_ = (call);                                               \
    EXPECT_EQ(tpdp_status_string(st_),                                      \
              std::string(tpdp_status_string(status)))                      \
        << "message: " << planning_last_error();                            \
    for (const char *needle_ : {__VA_ARGS__})                               \
      EXPECT_NE(std::string(planning_last_error()).find(needle_),           \
                std::string::npos)                                          \
          << "message '" << planning_last_error() << "' lacks '" << needle_ \
          << "'";                                                           \
  } while (0)

#define ASSERT_PLANNING_OK(call)                                     \
  do {                                                               \
    tpdp_status st_ = (call);                                        \
    ASSERT_EQ(st_, TPDP_SUCCESS)                                     \
        << tpdp_status_string(st_) << ": " << planning_last_error(); \
  } while (0)

#endif  // TPDP_TESTS_TOOLS_PLANNING_PLANNING_TEST_UTIL_H
