// SPDX-License-Identifier: BSD-3-Clause
// Status strings and the thread-local last-error contract.
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/test_util.h"

TEST(Status, EveryCodeHasADistinctName) {
  std::set<std::string> names;
  for (int s = 0; s < TPDP_STATUS_COUNT; s++) {
    std::string name = tpdp_status_string(static_cast<tpdp_status>(s));
    EXPECT_EQ(name.rfind("TPDP_", 0), 0u) << name;
    names.insert(name);
  }
  EXPECT_EQ(names.size(), static_cast<size_t>(TPDP_STATUS_COUNT));
  EXPECT_STREQ(tpdp_status_string(TPDP_SUCCESS), "TPDP_SUCCESS");
  EXPECT_STREQ(tpdp_status_string(static_cast<tpdp_status>(9999)),
               "TPDP_ERR_UNKNOWN_STATUS");
}

TEST(Status, ExplicitValuesAreStable) {
  // Values are part of the ABI: they must never change.
  EXPECT_EQ(TPDP_SUCCESS, 0);
  EXPECT_EQ(TPDP_ERR_INVALID_ARGUMENT, 1);
  EXPECT_EQ(TPDP_ERR_NULL_POINTER, 2);
  EXPECT_EQ(TPDP_ERR_SHAPE_MISMATCH, 4);
  EXPECT_EQ(TPDP_ERR_MPI, 7);
  EXPECT_EQ(TPDP_ERR_TIMEOUT, 10);
  EXPECT_EQ(TPDP_ERR_MESH_SIZE, 13);
}

TEST(Status, LastErrorNamesFunctionAndIsThreadLocal) {
  tpdp_tensor t;
  int64_t shape[1] = {-3};
  tpdp_device cpu = {TPDP_DEVICE_CPU, 0};
  EXPECT_TPDP_ERROR(tpdp_tensor_init(&t, nullptr, TPDP_F32, cpu, 1, shape),
                    TPDP_ERR_BAD_DIM_SIZE, "tpdp_tensor_init", "-3");
  std::string other;
  std::thread th([&] { other = tpdp_last_error(); });
  th.join();
  EXPECT_EQ(other, "");  // another thread sees its own (empty) message
  EXPECT_NE(std::string(tpdp_last_error()), "");
  tpdp_clear_error();
  EXPECT_STREQ(tpdp_last_error(), "");
}

TEST(Version, RuntimeMatchesHeader) { EXPECT_EQ(tpdp_version(), TPDP_VERSION); }

#include "core/check.h"

// Stand-ins for library functions, built with the library's own macros: two
// "public" functions (TPDP_API_ENTRY) and a static helper below them.
static tpdp_status helper_that_fails(int x) {
  return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT, "x = %d is odd", x);
}
static tpdp_status tpdp_fake_inner(int x) {
  TPDP_API_ENTRY;
  CHECK(helper_that_fails(x));
  return TPDP_SUCCESS;
}
static const int kCheckLine = __LINE__ - 3;  // the CHECK above
static tpdp_status tpdp_fake_outer(int x) {
  TPDP_API_ENTRY;
  tpdp_status st = tpdp_fake_inner(x);
  if (st != TPDP_SUCCESS)
    return TPDP_ERR(st, "while doing the outer thing: %s", core_error_detail());
  return TPDP_SUCCESS;
}

TEST(Status, ThePublicFunctionCalledNamesTheErrorOnce) {
  // A helper's error carries the name of the public function it left
  // through, not the helper's.
  EXPECT_EQ(tpdp_fake_inner(3), TPDP_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(tpdp_last_error(), "tpdp_fake_inner: x = 3 is odd");
  EXPECT_STREQ(core_error_detail(), "x = 3 is odd");
  // Nested public calls: the outermost (the one the caller called) names
  // it, once.
  EXPECT_EQ(tpdp_fake_outer(5), TPDP_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(tpdp_last_error(),
               "tpdp_fake_outer: while doing the outer thing: x = 5 is odd");
  // The frame is left on every return path: a later error outside any
  // public function is named "tpdp".
  EXPECT_EQ(core_api.depth, 0);
  TPDP_ERR(TPDP_ERR_IO, "no public function");
  EXPECT_STREQ(tpdp_last_error(), "tpdp: no public function");
}

TEST(Status, WrappingTheLastErrorInANewOneIsSafe) {
  // A message may take tpdp_last_error() as an argument of its own.
  TPDP_ERR(TPDP_ERR_PARSE, "bad token '%s'", "x");
  tpdp_status st = TPDP_ERR(TPDP_ERR_IO, "reading cfg: %s", tpdp_last_error());
  EXPECT_EQ(st, TPDP_ERR_IO);
  EXPECT_STREQ(tpdp_last_error(), "tpdp: reading cfg: tpdp: bad token 'x'");
}

TEST(Status, LongMessagesAreTruncatedNotOverflowed) {
  std::string big(5000, 'z');
  TPDP_ERR(TPDP_ERR_INTERNAL, "%s", big.c_str());
  std::string msg = tpdp_last_error();
  EXPECT_LT(msg.size(), 1024u);
  EXPECT_EQ(msg.rfind("tpdp: zzz", 0), 0u);
}

TEST(Status, TraceLogsWhereAnErrorWasRecordedAndEachPropagation) {
  tpdp_log_level saved = tpdp_log_get_level();
  tpdp_log_set_level(TPDP_LOG_TRACE);
  testing::internal::CaptureStderr();
  tpdp_fake_inner(7);
  std::string log = testing::internal::GetCapturedStderr();
  tpdp_log_set_level(saved);
  // The origin, with file:line, status and message ...
  EXPECT_NE(log.find("status_test.cc:"), std::string::npos) << log;
  EXPECT_NE(
      log.find("TPDP_ERR_INVALID_ARGUMENT: tpdp_fake_inner: x = 7 is odd"),
      std::string::npos)
      << log;
  // ... and the CHECK that propagated it, as "file:line -> STATUS".
  EXPECT_NE(log.find("status_test.cc:" + std::to_string(kCheckLine) +
                     " -> TPDP_ERR_INVALID_ARGUMENT"),
            std::string::npos)
      << log;
}

// core_first_error: cleanup steps that must all run report the first
// failure, with its own message, and log the later ones.
static tpdp_status tpdp_fake_cleanup(const std::vector<int> &fails) {
  TPDP_API_ENTRY;
  core_first_error f;
  core_first_error_init(&f);
  for (size_t i = 0; i < fails.size(); i++)
    core_first_error_add(
        &f, fails[i] ? TPDP_ERR(fails[i] == 1 ? TPDP_ERR_MPI : TPDP_ERR_CUDA,
                                "step %zu failed", i)
                     : TPDP_SUCCESS);
  return f.status;
}

TEST(Status, FirstErrorKeepsTheFirstFailureAndLogsTheLaterOnes) {
  tpdp_clear_error();
  EXPECT_EQ(tpdp_fake_cleanup({0, 0, 0}), TPDP_SUCCESS);
  EXPECT_STREQ(tpdp_last_error(), "");
  EXPECT_EQ(tpdp_fake_cleanup({0, 1, 0}), TPDP_ERR_MPI);
  EXPECT_STREQ(tpdp_last_error(), "tpdp_fake_cleanup: step 1 failed");
  tpdp_log_level saved = tpdp_log_get_level();
  tpdp_log_set_level(TPDP_LOG_WARN);
  testing::internal::CaptureStderr();
  EXPECT_EQ(tpdp_fake_cleanup({0, 1, 2, 2}), TPDP_ERR_MPI);
  std::string log = testing::internal::GetCapturedStderr();
  tpdp_log_set_level(saved);
  EXPECT_STREQ(tpdp_last_error(), "tpdp_fake_cleanup: step 1 failed");
  EXPECT_STREQ(core_error_detail(), "step 1 failed");
  // Each later failure is logged at WARN, with its status.
  EXPECT_NE(log.find("after an earlier failure (TPDP_ERR_MPI), also "
                     "TPDP_ERR_CUDA: tpdp_fake_cleanup: step 2 failed"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("step 3 failed"), std::string::npos) << log;
}
