// Status strings and the thread-local last-error contract.
#include <cstring>
#include <set>
#include <string>
#include <thread>

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

extern "C" {
#include "core/check.h"
}

TEST(Status, WrappingTheLastErrorInANewOneIsSafe) {
  // A caller may pass tpdp_last_error() as an argument of its own message.
  tpdp_set_error(TPDP_ERR_PARSE, "inner_fn", "bad token '%s'", "x");
  tpdp_status st = tpdp_set_error(TPDP_ERR_IO, "outer_fn", "reading cfg: %s",
                                  tpdp_last_error());
  EXPECT_EQ(st, TPDP_ERR_IO);
  EXPECT_STREQ(tpdp_last_error(),
               "outer_fn: reading cfg: inner_fn: bad token 'x'");
}

TEST(Status, LongMessagesAreTruncatedNotOverflowed) {
  std::string big(5000, 'z');
  tpdp_set_error(TPDP_ERR_INTERNAL, "f", "%s", big.c_str());
  std::string msg = tpdp_last_error();
  EXPECT_LT(msg.size(), 1024u);
  EXPECT_EQ(msg.rfind("f: zzz", 0), 0u);
}
