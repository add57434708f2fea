// SPDX-License-Identifier: BSD-3-Clause
// JSON helpers of the planning library (tools/planning/json.h): the
// position of a syntax error, and integers read with their exact range.
#include "tools/planning/json.h"

#include <string>

#include "tests/tools/planning/planning_test_util.h"

namespace {

struct Doc {
  cJSON *j = nullptr;
  ~Doc() { cJSON_Delete(j); }
};

TEST(PlanningJson, ParseErrorLineAndColumn) {
  Doc d;
  // The error is at the '}' of line 2, column 3 (after 2 characters).
  EXPECT_PLANNING_ERROR(planning_json_parse("[1,\n  }", &d.j), TPDP_ERR_PARSE,
                        "not valid JSON (line 2, column 3)");
  EXPECT_EQ(d.j, nullptr);
  ASSERT_PLANNING_OK(planning_json_parse("{\"a\": [1]}", &d.j));
  EXPECT_TRUE(cJSON_IsObject(d.j));
}

// Parse "[v]" and read v in [min, max].
tpdp_status Int(const char *v, int64_t min, int64_t max, int64_t *out) {
  Doc d;
  std::string text = std::string("[") + v + "]";
  if (planning_json_parse(text.c_str(), &d.j) != TPDP_SUCCESS)
    return TPDP_ERR_INTERNAL;
  return planning_json_int(d.j->child, "x.size", min, max,
                           TPDP_ERR_BAD_DIM_SIZE, out);
}

TEST(PlanningJson, IntegersInRange) {
  int64_t v = 0;
  ASSERT_PLANNING_OK(Int("9007199254740991", 1, PLANNING_JSON_INT_MAX, &v));
  EXPECT_EQ(v, 9007199254740991);  // 2^53 - 1, exact
  ASSERT_PLANNING_OK(Int("0", 0, 5, &v));
  EXPECT_EQ(v, 0);
  ASSERT_PLANNING_OK(Int("-4", -4, 5, &v));
  EXPECT_EQ(v, -4);
}

TEST(PlanningJson, TooLargeNamesTheMaximum) {
  int64_t v = 7;
  // 2^53: no longer exact in a double; 2^62 and 1e20 must not print as
  // "4.61169e+18" or as digits nobody wrote.
  for (const char *big :
       {"9007199254740992", "4611686018427387904", "99999999999999999999"}) {
    EXPECT_PLANNING_ERROR(Int(big, 1, PLANNING_JSON_INT_MAX, &v),
                          TPDP_ERR_BAD_DIM_SIZE,
                          "x.size is too large (max 9007199254740991)");
    EXPECT_EQ(std::string(planning_last_error()).find("e+"), std::string::npos);
  }
  EXPECT_PLANNING_ERROR(Int("1048577", 1, 1048576, &v), TPDP_ERR_BAD_DIM_SIZE,
                        "x.size is too large (max 1048576)");
  EXPECT_EQ(v, 7);  // untouched
}

TEST(PlanningJson, NotAPositiveIntegerShowsTheValueAsWritten) {
  int64_t v = 0;
  EXPECT_PLANNING_ERROR(Int("0", 1, 10, &v), TPDP_ERR_BAD_DIM_SIZE,
                        "x.size must be a positive integer (got 0)");
  EXPECT_PLANNING_ERROR(Int("2.5", 1, 10, &v), TPDP_ERR_BAD_DIM_SIZE,
                        "(got 2.5)");
  EXPECT_PLANNING_ERROR(Int("1234567.5", 1, PLANNING_JSON_INT_MAX, &v),
                        TPDP_ERR_BAD_DIM_SIZE, "(got 1234567.5)");
  EXPECT_PLANNING_ERROR(Int("-3", 1, 10, &v), TPDP_ERR_BAD_DIM_SIZE,
                        "(got -3)");
  EXPECT_PLANNING_ERROR(Int("\"8\"", 1, 10, &v), TPDP_ERR_BAD_DIM_SIZE,
                        "(got a non-number)");
  EXPECT_PLANNING_ERROR(Int("-1", 0, 10, &v), TPDP_ERR_BAD_DIM_SIZE,
                        "x.size must be a non-negative integer (got -1)");
  EXPECT_PLANNING_ERROR(Int("-9", -5, 10, &v), TPDP_ERR_BAD_DIM_SIZE,
                        "x.size must be an integer >= -5 (got -9)");
}

}  // namespace
