// SPDX-License-Identifier: BSD-3-Clause
// The hierarchical shared-memory allreduce (comm/shm.c) on 2 simulated
// hosts x 2 ranks: a segment on each host, MPI across. Its sums are, bit for
// bit, (g0 + g1) + (g2 + g3) in the precision of the data (each host's two
// ranks in local-rank order, then the two hosts' partial sums, which add
// alike in either order), worked out here from each rank's formula; and
// they agree within 1e-6 relative (to the sum of the magnitudes) with the
// flat MPI allreduce (tpdp_allreduce without the segment), whose summation
// order MPI chooses.
#include <cmath>
#include <cstring>
#include <vector>

#include "comm/services.h"
#include "tests/test_util.h"

namespace {

using tpdp_test::World;
using tpdp_test::WorldRank;

// Rank r's element i: not integers, so the order of the sum shows.
template <typename T>
T Input(int r, int64_t i) {
  uint64_t x = (uint64_t)(r + 1) * 0x9e3779b97f4a7c15ULL ^ (uint64_t)i * 31;
  x ^= x >> 29;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 32;
  return (T)((double)(x % 2000003) / 1000.0 - 1000.0) / (T)3;
}

template <typename T>
void Check(int64_t n, tpdp_reduce_op op) {
  SCOPED_TRACE(std::to_string(n) + (op == TPDP_OP_AVG ? " avg" : " sum"));
  const tpdp_dtype dt = sizeof(T) == 4 ? TPDP_F32 : TPDP_F64;
  comm_shm *s = nullptr;
  ASSERT_TPDP_OK(comm_shm_create(World(), n * sizeof(T) + 64, &s));
  ASSERT_NE(s, nullptr) << "no segment across the hosts";
  // At an offset of 64 bytes into the region, as a bucket after another.
  T *buf = reinterpret_cast<T *>(static_cast<char *>(comm_shm_region(s)) + 64);
  std::vector<T> flat(n);
  for (int64_t i = 0; i < n; i++) buf[i] = flat[i] = Input<T>(WorldRank(), i);
  tpdp_tensor t = tpdp_tensor_1d(buf, dt, n);
  ASSERT_TPDP_OK(comm_allreduce_shm(World(), s, &t, op));
  tpdp_tensor f = tpdp_tensor_1d(flat.data(), dt, n);
  ASSERT_TPDP_OK(tpdp_allreduce(World(), &f, &f, op));
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++) {
    T want =
        (Input<T>(0, i) + Input<T>(1, i)) + (Input<T>(2, i) + Input<T>(3, i));
    if (op == TPDP_OP_AVG) want *= (T)0.25;
    // Relative to the sum of the magnitudes: the bound any order of a sum
    // keeps (the sum itself may cancel to near zero).
    double mag = 0;
    for (int r = 0; r < 4; r++) mag += std::fabs((double)Input<T>(r, i));
    if (op == TPDP_OP_AVG) mag *= 0.25;
    const double rel =
        std::fabs((double)buf[i] - (double)flat[i]) / std::fmax(mag, 1e-30);
    if (std::memcmp(&buf[i], &want, sizeof(T)) != 0 || rel > 1e-6) {
      if (bad++ < 5)
        ADD_FAILURE() << "element " << i << ": " << buf[i] << ", expected "
                      << want << " (flat MPI " << flat[i] << ")";
    }
  }
  EXPECT_EQ(bad, 0);
  comm_shm_free(s);
}

// Sizes up to 24 MiB, about the reducer's buckets (25 MiB by default).
TEST(HierarchicalShm, F32MatchesTheHostThenAcrossOrder) {
  for (int64_t n : {1, 3, 1000, (1 << 20) + 3, (5 << 20) + 7}) {
    Check<float>(n, TPDP_OP_SUM);
    Check<float>(n, TPDP_OP_AVG);
  }
}

TEST(HierarchicalShm, F64MatchesTheHostThenAcrossOrder) {
  for (int64_t n : {2, 4097, (3 << 20) + 5}) {
    Check<double>(n, TPDP_OP_SUM);
    Check<double>(n, TPDP_OP_AVG);
  }
}

// A communicator with one rank on each host (world ranks 0 and 2): no
// segment, the flat MPI path.
TEST(HierarchicalShm, OneRankPerHostHasNoSegment) {
  tpdp_comm *c = nullptr;
  ASSERT_TPDP_OK(tpdp_comm_split(World(), WorldRank() % 2, WorldRank(), &c));
  comm_shm *s = nullptr;
  ASSERT_TPDP_OK(comm_shm_create(c, 4096, &s));
  EXPECT_EQ(s, nullptr);
  comm_shm_free(s);
  EXPECT_TPDP_OK(tpdp_comm_destroy(c));
}

}  // namespace
