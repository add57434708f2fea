// SPDX-License-Identifier: BSD-3-Clause
// The shared-memory segment of a host-memory communicator and its
// allreduce (comm/shm.c): made on every rank or on none, results against
// sums worked out here from each rank's formula, calls that differ across
// the ranks failing on every rank, the file gone from /dev/shm once mapped.
#include <dirent.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "comm/services.h"
#include "core/util.h"
#include "tests/test_util.h"

namespace {

// Rank r's element i: an integer, so sums are exact in f32 and f64.
double Input(int r, int64_t i) { return (r + 1) * 1000.0 + (i % 97); }

// Sum over the p ranks of Input(r, i), worked out by formula.
double ExactSum(int p, int64_t i) {
  return 1000.0 * p * (p + 1) / 2 + static_cast<double>(p) * (i % 97);
}

template <typename T>
T Expected(int p, int64_t i, tpdp_reduce_op op) {
  T sum = static_cast<T>(ExactSum(p, i));
  return op == TPDP_OP_AVG ? sum / static_cast<T>(p) : sum;
}

struct Segment {
  comm_shm *s = nullptr;
  ~Segment() { comm_shm_free(s); }
};

// Names in /dev/shm of segments that rank 0 (this process, on rank 0)
// created and did not unlink.
std::vector<std::string> LeftInDevShm() {
  std::vector<std::string> left;
  std::string prefix = "tpdp-" + std::to_string(getpid()) + "-";
  if (DIR *d = opendir("/dev/shm")) {
    while (dirent *e = readdir(d))
      if (std::string(e->d_name).rfind(prefix, 0) == 0)
        left.push_back(e->d_name);
    closedir(d);
  }
  return left;
}

// Allreduce `count` elements at byte offset `off` of the region and check
// every element, and that the guard elements around the buffer kept their
// value.
template <typename T>
void CheckAllreduce(tpdp_comm *c, comm_shm *s, size_t off, int64_t count,
                    tpdp_dtype dtype, tpdp_reduce_op op) {
  int me = tpdp_comm_rank(c), p = tpdp_comm_size(c);
  char *region = static_cast<char *>(comm_shm_region(s));
  T *buf = reinterpret_cast<T *>(region + off);
  for (int64_t i = 0; i < count; i++) buf[i] = static_cast<T>(Input(me, i));
  T *before = off >= sizeof(T) ? buf - 1 : nullptr;
  if (before) *before = static_cast<T>(-7);
  buf[count] = static_cast<T>(-9);  // the tests leave room for it
  tpdp_tensor t = tpdp_tensor_1d(buf, dtype, count);
  ASSERT_TPDP_OK(comm_allreduce_shm(c, s, &t, op));
  for (int64_t i = 0; i < count; i++)
    ASSERT_EQ(buf[i], Expected<T>(p, i, op))
        << "rank " << me << " element " << i << " of " << count << " ("
        << tpdp_dtype_name(dtype) << ", " << tpdp_reduce_op_name(op) << ")";
  if (before) {
    EXPECT_EQ(*before, static_cast<T>(-7));
  }
  EXPECT_EQ(buf[count], static_cast<T>(-9));
}

TEST(Shm, SegmentOnEveryRankZeroFilledAndUnlinked) {
  tpdp_comm *w = tpdp_test::World();
  Segment seg;
  ASSERT_TPDP_OK(comm_shm_create(w, 100000, &seg.s));
  ASSERT_NE(seg.s, nullptr) << "every rank of the test runs on one host";
  EXPECT_EQ(comm_shm_bytes(seg.s), 100000u);
  const char *region = static_cast<const char *>(comm_shm_region(seg.s));
  for (size_t b = 0; b < 100000; b++) ASSERT_EQ(region[b], 0) << b;
  // Rank 0 named the file after its pid and unlinked it once every rank
  // had mapped it (the exchange after the mapping is over on all ranks).
  ASSERT_TPDP_OK(tpdp_barrier(w));
  if (tpdp_comm_rank(w) == 0) {
    EXPECT_EQ(LeftInDevShm(), std::vector<std::string>{});
  }
}

TEST(Shm, AllreduceSumAndAvgEveryCount) {
  tpdp_comm *w = tpdp_test::World();
  int p = tpdp_comm_size(w);
  Segment seg;
  ASSERT_TPDP_OK(comm_shm_create(w, 1 << 20, &seg.s));
  ASSERT_NE(seg.s, nullptr);
  // 0, fewer elements than ranks, one per rank, uneven slices, and more
  // than one 1024-element chunk per slice; at offset 0 and inside.
  const int64_t counts[] = {0, 1, p - 1, p, 12345, 70001};
  for (int64_t n : counts)
    for (size_t off : {size_t{0}, size_t{4096 + 8}})
      for (tpdp_reduce_op op : {TPDP_OP_SUM, TPDP_OP_AVG}) {
        CheckAllreduce<float>(w, seg.s, off, n, TPDP_F32, op);
        CheckAllreduce<double>(w, seg.s, off, n, TPDP_F64, op);
      }
}

TEST(Shm, ManyCallsInARowKeepTheirOrder) {
  // Each call's slots are reused by the next: 300 calls of varying size,
  // each checked, with no barrier in between.
  tpdp_comm *w = tpdp_test::World();
  Segment seg;
  ASSERT_TPDP_OK(comm_shm_create(w, 64 << 10, &seg.s));
  ASSERT_NE(seg.s, nullptr);
  for (int k = 0; k < 300; k++)
    CheckAllreduce<float>(w, seg.s, 64 * static_cast<size_t>(k % 7),
                          1 + (k * 37) % 3000, TPDP_F32,
                          k % 2 ? TPDP_OP_AVG : TPDP_OP_SUM);
}

TEST(Shm, CallsThatDifferFailOnEveryRank) {
  tpdp_comm *w = tpdp_test::World();
  int me = tpdp_comm_rank(w);
  Segment seg;
  ASSERT_TPDP_OK(comm_shm_create(w, 4096, &seg.s));
  ASSERT_NE(seg.s, nullptr);
  float *buf = static_cast<float *>(comm_shm_region(seg.s));
  for (int i = 0; i < 16; i++) buf[i] = 1.0f;
  // Rank 1 reduces one element fewer: nobody's buffer is touched.
  tpdp_tensor t = tpdp_tensor_1d(buf, TPDP_F32, me == 1 ? 15 : 16);
  EXPECT_TPDP_ERROR(comm_allreduce_shm(w, seg.s, &t, TPDP_OP_SUM),
                    TPDP_ERR_INVALID_ARGUMENT, "rank 1 passed 15 f32",
                    "every rank must reduce the same f32/f64 buffer");
  for (int i = 0; i < 16; i++) EXPECT_EQ(buf[i], 1.0f);
  // A buffer outside the region on rank 0 only: every rank fails.
  std::vector<float> outside(16, 1.0f);
  tpdp_tensor u = tpdp_tensor_1d(me == 0 ? outside.data() : buf, TPDP_F32, 16);
  EXPECT_TPDP_ERROR(
      comm_allreduce_shm(w, seg.s, &u, TPDP_OP_SUM), TPDP_ERR_INVALID_ARGUMENT,
      me == 0 ? "rank 0 passed 16 f32 elements at 0x" : "rank 0 passed a",
      "rank 0 passed", "outside its region");
  // The next call is still in step on every rank.
  CheckAllreduce<float>(w, seg.s, 0, 100, TPDP_F32, TPDP_OP_SUM);
}

TEST(Shm, SubCommunicatorsHaveSegmentsOfTheirOwn) {
  tpdp_comm *w = tpdp_test::World();
  int me = tpdp_comm_rank(w);
  tpdp_comm *c = nullptr;
  ASSERT_TPDP_OK(tpdp_comm_split(w, me % 2, me, &c));
  Segment seg;
  ASSERT_TPDP_OK(comm_shm_create(c, 1 << 16, &seg.s));
  if (tpdp_comm_size(c) == 1) {
    EXPECT_EQ(seg.s, nullptr) << "one rank needs no shared memory";
  } else {
    ASSERT_NE(seg.s, nullptr);
    CheckAllreduce<double>(c, seg.s, 128, 5000, TPDP_F64, TPDP_OP_AVG);
  }
  comm_shm_free(seg.s);
  seg.s = nullptr;
  EXPECT_TPDP_OK(tpdp_comm_destroy(c));
}

TEST(Shm, OneRankWithTpdpShm0TurnsItOffEverywhere) {
  tpdp_comm *w = tpdp_test::World();
  if (tpdp_comm_rank(w) == tpdp_comm_size(w) - 1) setenv("TPDP_SHM", "0", 1);
  Segment seg;
  tpdp_status st = comm_shm_create(w, 4096, &seg.s);
  unsetenv("TPDP_SHM");
  ASSERT_TPDP_OK(st);
  EXPECT_EQ(seg.s, nullptr);
}

TEST(Shm, ARankShortOfMemoryTurnsItOffEverywhere) {
  // The last rank's first allocation fails: it still takes part in the
  // exchange, and every rank ends without a segment, none waiting.
  tpdp_comm *w = tpdp_test::World();
  bool last = tpdp_comm_rank(w) == tpdp_comm_size(w) - 1;
  if (last) core_alloc_fail_at(1, 0);
  Segment seg;
  tpdp_status st = comm_shm_create(w, 4096, &seg.s);
  if (last) {
    EXPECT_EQ(core_alloc_fail_left(), 0) << "the failure did not fire";
  }
  core_alloc_fail_at(0, 0);
  ASSERT_TPDP_OK(st);
  EXPECT_EQ(seg.s, nullptr);
  // Then it works again.
  ASSERT_TPDP_OK(comm_shm_create(w, 4096, &seg.s));
  ASSERT_NE(seg.s, nullptr);
  CheckAllreduce<float>(w, seg.s, 0, 1000, TPDP_F32, TPDP_OP_AVG);
}

TEST(Shm, AnExchangeShortOfMemoryLeavesNoFile) {
  // The n-th allocation fails on every rank alike, for every n until the
  // call gets through: the exchanges after rank 0 made the file allocate
  // too, and whichever fails, the file is gone.
  tpdp_comm *w = tpdp_test::World();
  int failures = 0;
  for (long n = 1; n < 50; n++) {
    Segment seg;
    core_alloc_fail_at(n, 0);
    tpdp_status st = comm_shm_create(w, 4096, &seg.s);
    core_alloc_fail_at(0, 0);
    ASSERT_TPDP_OK(tpdp_barrier(w));
    if (tpdp_comm_rank(w) == 0) {
      EXPECT_EQ(LeftInDevShm(), std::vector<std::string>{}) << "n = " << n;
    }
    if (st == TPDP_SUCCESS && seg.s != nullptr) break;
    if (st != TPDP_SUCCESS) {
      failures++;
      EXPECT_EQ(st, TPDP_ERR_OUT_OF_MEMORY) << tpdp_last_error();
      EXPECT_EQ(seg.s, nullptr);
    }
  }
  EXPECT_GE(failures, 2) << "the exchanges after the file's creation";
}

TEST(Shm, DiscardedPagesReadAsZeros) {
  tpdp_comm *w = tpdp_test::World();
  Segment seg;
  ASSERT_TPDP_OK(comm_shm_create(w, 4 * 4096, &seg.s));
  ASSERT_NE(seg.s, nullptr);
  char *region = static_cast<char *>(comm_shm_region(seg.s));
  memset(region, 0x5a, 4 * 4096);
  // [100, 3 pages + 100): only pages 1 and 2 lie wholly inside.
  comm_shm_discard(seg.s, region + 100, 3 * 4096);
  for (size_t b = 0; b < 4 * 4096; b++) {
    bool gone = b >= 4096 && b < 3 * 4096;
    ASSERT_EQ(region[b], gone ? 0 : 0x5a) << b;
  }
}

}  // namespace
