// SPDX-License-Identifier: BSD-3-Clause
// Logging: the "[rank r]" prefix, level filtering, and the level read from
// TPDP_DEBUG. The environment is read once per process, so the TPDP_DEBUG
// cases run in fresh processes (GoogleTest's threadsafe death-test style
// re-executes this binary for each).
#include <cstdlib>
#include <string>

#include "tests/test_util.h"

namespace {

using ::testing::ExitedWithCode;

void ExitWithLevelFrom(const char *value) {
  if (value)
    setenv("TPDP_DEBUG", value, 1);
  else
    unsetenv("TPDP_DEBUG");
  std::exit(static_cast<int>(tpdp_log_get_level()));
}

TEST(LogEnvDeathTest, LevelComesFromTpdpDebug) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  EXPECT_EXIT(ExitWithLevelFrom(nullptr), ExitedWithCode(1), "");
  EXPECT_EXIT(ExitWithLevelFrom(""), ExitedWithCode(1), "");
  EXPECT_EXIT(ExitWithLevelFrom("WARN"), ExitedWithCode(1), "");
  EXPECT_EXIT(ExitWithLevelFrom("INFO"), ExitedWithCode(2), "");
  EXPECT_EXIT(ExitWithLevelFrom("info"), ExitedWithCode(2), "");
  EXPECT_EXIT(ExitWithLevelFrom("TRACE"), ExitedWithCode(3), "");
  EXPECT_EXIT(ExitWithLevelFrom("Trace"), ExitedWithCode(3), "");
  EXPECT_EXIT(ExitWithLevelFrom("NONE"), ExitedWithCode(0), "");
  EXPECT_EXIT(ExitWithLevelFrom("verbose"), ExitedWithCode(1), "");  // unknown
}

TEST(LogEnvDeathTest, InfoLevelFromEnvPrintsInfoNotTrace) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  EXPECT_EXIT(
      {
        setenv("TPDP_DEBUG", "INFO", 1);
        tpdp_log(TPDP_LOG_TRACE, "trace-line");
        tpdp_log(TPDP_LOG_INFO, "info-line %d", 42);
        std::exit(0);
      },
      ExitedWithCode(0), "\\[rank \\?\\] tpdp INFO: info-line 42");
}

class Log : public ::testing::Test {
 protected:
  void SetUp() override { saved_ = tpdp_log_get_level(); }
  void TearDown() override {
    tpdp_log_set_level(saved_);
    tpdp_log_set_rank(-1);
  }
  tpdp_log_level saved_;
};

TEST_F(Log, PrefixAndFiltering) {
  tpdp_log_set_level(TPDP_LOG_WARN);
  tpdp_log_set_rank(-1);
  ::testing::internal::CaptureStderr();
  tpdp_log(TPDP_LOG_INFO, "hidden");
  tpdp_log(TPDP_LOG_WARN, "shown %d", 5);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(),
            "[rank ?] tpdp WARN: shown 5\n");

  tpdp_log_set_level(TPDP_LOG_INFO);
  tpdp_log_set_rank(3);
  ::testing::internal::CaptureStderr();
  tpdp_log(TPDP_LOG_INFO, "hello %s", "there");
  tpdp_log(TPDP_LOG_TRACE, "hidden");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(),
            "[rank 3] tpdp INFO: hello there\n");

  tpdp_log_set_level(TPDP_LOG_NONE);
  ::testing::internal::CaptureStderr();
  tpdp_log(TPDP_LOG_WARN, "hidden");
  tpdp_log(TPDP_LOG_NONE, "never printed");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

TEST_F(Log, TraceShowsFailedCalls) {
  tpdp_log_set_level(TPDP_LOG_TRACE);
  tpdp_log_set_rank(0);
  ::testing::internal::CaptureStderr();
  tpdp_dtype d;
  EXPECT_EQ(tpdp_dtype_parse("f7", &d), TPDP_ERR_PARSE);
  std::string err = ::testing::internal::GetCapturedStderr();
  // Where the error was recorded: file:line, status, message.
  EXPECT_NE(err.find("[rank 0] tpdp TRACE: core/tensor.c:"), std::string::npos)
      << err;
  EXPECT_NE(err.find(": TPDP_ERR_PARSE: tpdp_dtype_parse: unknown dtype"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("'f7'"), std::string::npos) << err;
}

TEST_F(Log, SetLevelClampsAndBadLevelsPrintNothing) {
  tpdp_log_set_level(static_cast<tpdp_log_level>(99));
  EXPECT_EQ(tpdp_log_get_level(), TPDP_LOG_TRACE);
  tpdp_log_set_level(static_cast<tpdp_log_level>(-4));
  EXPECT_EQ(tpdp_log_get_level(), TPDP_LOG_NONE);
  tpdp_log_set_level(TPDP_LOG_TRACE);
  ::testing::internal::CaptureStderr();
  tpdp_log(static_cast<tpdp_log_level>(7), "out of range");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

}  // namespace
