// SPDX-License-Identifier: BSD-3-Clause
// Assertions on the planning library's own last error
// (tools/planning/error.h), as tests/test_util.h's on libtpdp's, and what
// the model tests share: loading a fixture, an owned description, its
// leaves' parameter counts.
#ifndef TPDP_TESTS_TOOLS_PLANNING_PLANNING_TEST_UTIL_H
#define TPDP_TESTS_TOOLS_PLANNING_PLANNING_TEST_UTIL_H

#include <cstdint>
#include <string>
#include <vector>

#include "tests/test_util.h"
#include "tools/planning/error.h"
#include "tools/planning/model_json.h"

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

// Load the model fixture tests/data/<name> into *out; the test stops there
// if it does not load.
#define ASSERT_MODEL_LOADED(name, out) \
  ASSERT_PLANNING_OK(                  \
      planning_model_desc_load(tpdp_test::DataPath(name).c_str(), (out)))

namespace tpdp_test {

// A model description the test owns (destroyed with it).
struct Desc {
  planning_model_desc *d = nullptr;
  ~Desc() { planning_model_desc_destroy(d); }
};

// Each leaf's parameter count, in leaf order (the partitioners' weights).
inline std::vector<int64_t> LeafParams(const planning_model_desc *d) {
  std::vector<int64_t> v;
  for (int i = 0; i < d->nleaves; i++) v.push_back(d->leaves[i].params);
  return v;
}

}  // namespace tpdp_test

#endif  // TPDP_TESTS_TOOLS_PLANNING_PLANNING_TEST_UTIL_H
