// SPDX-License-Identifier: BSD-3-Clause
// The reducer's create-time checks (dp/reducer_checks.c) beyond the
// parameter lists of reducer_test.cc: the versioned options (size and
// version, an older smaller struct), non-finite divide factors.
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "tests/dp/reducer_model.h"
#include "tests/test_util.h"

using namespace reducer_model;  // NOLINT: the fixture of every test here

TEST(ReducerOptions, SizeAndVersionAreChecked) {
  int rank = tpdp_test::WorldRank();
  tpdp_comm *w = tpdp_test::World();
  Model m(rank);
  tpdp_reducer *r = nullptr;
  tpdp_reducer_options o;
  std::memset(&o, 0, sizeof o);  // never initialised
  EXPECT_TPDP_ERROR(tpdp_reducer_create(w, m.params.data(), kN, &o, &r),
                    TPDP_ERR_INVALID_ARGUMENT, "options->size is 0",
                    "TPDP_REDUCER_OPTIONS_INIT");
  o = Opts(1);
  o.size = sizeof o + 8;  // a newer caller
  const std::string sizes = "options->size is " + std::to_string(sizeof o + 8) +
                            " bytes but this library's tpdp_reducer_options "
                            "has " +
                            std::to_string(sizeof o);
  EXPECT_TPDP_ERROR(tpdp_reducer_create(w, m.params.data(), kN, &o, &r),
                    TPDP_ERR_INVALID_ARGUMENT, sizes.c_str());
  o = Opts(1);
  o.size = 12;  // smaller than the header
  EXPECT_TPDP_ERROR(tpdp_reducer_create(w, m.params.data(), kN, &o, &r),
                    TPDP_ERR_INVALID_ARGUMENT, "options->size is 12 bytes");
  o = Opts(1);
  o.version = TPDP_REDUCER_OPTIONS_VERSION + 1;
  EXPECT_TPDP_ERROR(tpdp_reducer_create(w, m.params.data(), kN, &o, &r),
                    TPDP_ERR_INVALID_ARGUMENT, "options->version is 3",
                    "versions 1 to 2");
  EXPECT_EQ(r, nullptr);
}

// A caller built against an older, smaller struct: the fields within its
// size are read, the ones beyond keep their defaults whatever the memory
// after the old struct holds.
TEST(ReducerOptions, OlderSmallerStructTakesDefaultsForTheRest) {
  int rank = tpdp_test::WorldRank(), size = tpdp_test::WorldSize();
  Model m(rank);
  tpdp_reducer_options o = Opts(1);  // limits 64 / 100
  o.size = offsetof(tpdp_reducer_options, divide_factor);
  // Beyond the old size: garbage that must not be read.
  o.divide_factor = -1.0;
  o.hook_fn = nullptr;
  o.comm_thread = 77;
  std::memset(&o.module, 0xA5, sizeof o.module);
  o.broadcast_from_rank0 = 0;  // beyond the old size too
  tpdp_reducer *r = Attach(m, o);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(Buckets(r), kInitialBuckets);  // the limits were read
  // Version 1 broadcast rank 0's values: an old caller still gets that.
  EXPECT_EQ(m.pdata[1][2], (float)(10 + 2));
  ASSERT_TPDP_OK(tpdp_reducer_prepare(r));
  WriteGrads(m, rank, 0, false);
  MarkAll(r, kReverse);
  ASSERT_TPDP_OK(tpdp_reducer_finalize(r));  // no module was dereferenced
  ExpectMean(m, AllRanks(size), {0});        // divided by the size
  EXPECT_TPDP_OK(tpdp_reducer_destroy(r));

  // A size ending inside a field takes the fields before it only.
  Model m2(rank);
  o = Opts(1);
  o.size = offsetof(tpdp_reducer_options, bucket_cap_bytes) + 4;
  ASSERT_TPDP_OK(
      tpdp_reducer_create(tpdp_test::World(), m2.params.data(), kN, &o, &r));
  // first bucket 64 B, the cap the default 25 MiB: {0,1} and {2..5}.
  std::vector<std::vector<int64_t>> want = {{2, 3, 4, 5}, {0, 1}};
  EXPECT_EQ(Buckets(r), want);
  EXPECT_TPDP_OK(tpdp_reducer_destroy(r));
}

TEST(ReducerOptions, NonFiniteDivideFactorIsRefused) {
  int rank = tpdp_test::WorldRank();
  Model m(rank);
  tpdp_reducer *r = nullptr;
  tpdp_reducer_options o = Opts(1);
  o.divide_factor = std::numeric_limits<double>::infinity();
  EXPECT_TPDP_ERROR(
      tpdp_reducer_create(tpdp_test::World(), m.params.data(), kN, &o, &r),
      TPDP_ERR_INVALID_ARGUMENT, "divide_factor inf is not a finite number",
      "would all become 0");
  o.divide_factor = std::nan("");
  EXPECT_TPDP_ERROR(
      tpdp_reducer_create(tpdp_test::World(), m.params.data(), kN, &o, &r),
      TPDP_ERR_INVALID_ARGUMENT, "is not a finite number",
      "would all become NaN");
  o.divide_factor = -std::numeric_limits<double>::infinity();
  EXPECT_TPDP_ERROR(
      tpdp_reducer_create(tpdp_test::World(), m.params.data(), kN, &o, &r),
      TPDP_ERR_INVALID_ARGUMENT, "-inf is not a finite number");
  EXPECT_EQ(r, nullptr);
}

// One rank's bad options fail every rank with its message, naming it.
TEST(ReducerOptions, OneRanksBadOptionsFailEveryRank) {
  int rank = tpdp_test::WorldRank();
  Model m(rank);
  tpdp_reducer *r = nullptr;
  tpdp_reducer_options o = Opts(1);
  if (rank == 0) o.size = 0;
  EXPECT_TPDP_ERROR(
      tpdp_reducer_create(tpdp_test::World(), m.params.data(), kN, &o, &r),
      TPDP_ERR_INVALID_ARGUMENT, "tpdp_reducer_create: ", "options->size is 0",
      "(rank 0 of world)");
  EXPECT_EQ(r, nullptr);
}
