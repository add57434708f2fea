// SPDX-License-Identifier: BSD-3-Clause
// The planning library's last error (tools/planning/error.h): named after
// the outermost planning function running, thread-local, separate from
// libtpdp's, wrapping libtpdp's message and the message without its prefix.
#include "tools/planning/error.h"

#include <string>
#include <thread>

#include "tests/tools/planning/planning_test_util.h"

namespace {

tpdp_status Inner(int fail) {
  PLANNING_ENTRY;
  if (fail) return planning_error(TPDP_ERR_NOT_FOUND, "inner %d", fail);
  return TPDP_SUCCESS;
}

tpdp_status Outer(int fail) {
  PLANNING_ENTRY;
  PLANNING_CHECK(Inner(fail));
  return TPDP_SUCCESS;
}

tpdp_status WrapTpdp() {
  PLANNING_ENTRY;
  tpdp_dtype dt;
  return planning_error_tpdp(tpdp_dtype_parse("f9", &dt));
}

tpdp_status WithPath(const char *source, int fail) {
  PLANNING_ENTRY;
  return planning_error_in(source, Inner(fail));
}

TEST(PlanningError, NamedAfterTheOutermostFunction) {
  EXPECT_PLANNING_ERROR(Outer(7), TPDP_ERR_NOT_FOUND, "inner 7");
  EXPECT_EQ(std::string(planning_last_error()), "Outer: inner 7");
  EXPECT_EQ(std::string(planning_error_detail()), "inner 7");
  EXPECT_PLANNING_ERROR(Inner(2), TPDP_ERR_NOT_FOUND, "inner 2");
  EXPECT_EQ(std::string(planning_last_error()), "Inner: inner 2");
  // Outside any planning function (frames left on every return path).
  planning_error(TPDP_ERR_INTERNAL, "x");
  EXPECT_EQ(std::string(planning_last_error()), "planning: x");
}

TEST(PlanningError, SuccessKeepsTheLastErrorAndClearEmptiesIt) {
  EXPECT_PLANNING_ERROR(Outer(1), TPDP_ERR_NOT_FOUND, "Outer: inner 1");
  ASSERT_PLANNING_OK(Outer(0));
  EXPECT_EQ(std::string(planning_last_error()), "Outer: inner 1");
  planning_clear_error();
  EXPECT_EQ(std::string(planning_last_error()), "");
}

TEST(PlanningError, WrapsLibtpdpAndLeavesItsErrorAlone) {
  tpdp_clear_error();
  EXPECT_PLANNING_ERROR(WrapTpdp(), TPDP_ERR_PARSE,
                        "WrapTpdp: ", "tpdp_dtype_parse", "f9");
  // libtpdp's own last error is the library's message, not ours.
  EXPECT_EQ(std::string(tpdp_last_error()).find("WrapTpdp"), std::string::npos);
  EXPECT_PLANNING_ERROR(Outer(5), TPDP_ERR_NOT_FOUND, "inner 5");
  EXPECT_NE(std::string(tpdp_last_error()).find("tpdp_dtype_parse"),
            std::string::npos);
}

TEST(PlanningError, WrappingTheDetail) {
  EXPECT_PLANNING_ERROR(WithPath("m.json", 3), TPDP_ERR_NOT_FOUND, "inner 3");
  EXPECT_EQ(std::string(planning_last_error()), "WithPath: m.json: inner 3");
  // No source, or success: the last error is left as it was.
  EXPECT_PLANNING_ERROR(WithPath(nullptr, 4), TPDP_ERR_NOT_FOUND, "inner 4");
  EXPECT_EQ(std::string(planning_last_error()), "WithPath: inner 4");
  ASSERT_PLANNING_OK(WithPath("m.json", 0));
  EXPECT_EQ(std::string(planning_last_error()), "WithPath: inner 4");
}

TEST(PlanningError, ThreadLocal) {
  EXPECT_PLANNING_ERROR(Outer(1), TPDP_ERR_NOT_FOUND, "inner 1");
  std::string other;
  std::thread t([&] {
    other = planning_last_error();
    Inner(9);
  });
  t.join();
  EXPECT_EQ(other, "");
  EXPECT_EQ(std::string(planning_last_error()), "Outer: inner 1");
}

TEST(PlanningError, CheckPtrAndCalloc) {
  auto f = [](const int *p) -> tpdp_status {
    PLANNING_CHECK_PTR(p);
    return TPDP_SUCCESS;
  };
  EXPECT_PLANNING_ERROR(f(nullptr), TPDP_ERR_NULL_POINTER,
                        "argument 'p' is NULL");
  int *x = nullptr;
  ASSERT_PLANNING_OK(PLANNING_CALLOC(x, 0));  // at least one element
  ASSERT_NE(x, nullptr);
  free(x);
  EXPECT_PLANNING_ERROR(PLANNING_CALLOC(x, SIZE_MAX / 2),
                        TPDP_ERR_OUT_OF_MEMORY, "out of memory");
}

}  // namespace
