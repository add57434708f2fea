// SPDX-License-Identifier: BSD-3-Clause
// tpdp_bucket_assign against hand-worked cases (DDP's
// compute_bucket_assignment_by_size rules).
#include <cstdlib>
#include <cstring>
#include <vector>

#include "tests/test_util.h"

namespace {

tpdp_tensor T(tpdp_dtype dt, int64_t numel,
              tpdp_device dev = {TPDP_DEVICE_CPU, 0}) {
  tpdp_tensor t;
  int64_t shape[1] = {numel};
  tpdp_tensor_init(&t, nullptr, dt, dev, 1, shape);
  return t;
}

struct Bucket {
  std::vector<int64_t> params;
  size_t bytes, limit;
  bool operator==(const Bucket &o) const {
    return params == o.params && bytes == o.bytes && limit == o.limit;
  }
};

std::ostream &operator<<(std::ostream &os, const Bucket &b) {
  os << "{[";
  for (size_t i = 0; i < b.params.size(); i++)
    os << (i ? "," : "") << b.params[i];
  return os << "] " << b.bytes << "B lim " << b.limit << "}";
}

std::vector<Bucket> Read(const tpdp_bucket_assignment &a) {
  std::vector<Bucket> out;
  for (int64_t b = 0; b < a.nbuckets; b++) {
    Bucket x;
    for (int64_t k = a.offsets[b]; k < a.offsets[b + 1]; k++)
      x.params.push_back(a.indices[k]);
    x.bytes = a.bytes[b];
    x.limit = a.limits[b];
    out.push_back(x);
  }
  return out;
}

std::vector<Bucket> Assign(const std::vector<tpdp_tensor> &ts,
                           const std::vector<size_t> &limits,
                           const int64_t *order = nullptr) {
  tpdp_bucket_assignment a;
  tpdp_status st =
      tpdp_bucket_assign(ts.data(), (int64_t)ts.size(), limits.data(),
                         (int64_t)limits.size(), order, &a);
  EXPECT_EQ(st, TPDP_SUCCESS) << tpdp_last_error();
  if (st != TPDP_SUCCESS) return {};
  std::vector<Bucket> out = Read(a);
  tpdp_bucket_assignment_free(&a);
  return out;
}

const tpdp_device kCpu = {TPDP_DEVICE_CPU, 0};
const tpdp_device kGpu0 = {TPDP_DEVICE_CUDA, 0};
const tpdp_device kGpu1 = {TPDP_DEVICE_CUDA, 1};

}  // namespace

// f32:1000 = 4000 B, f16:300 = 600 B, f32:100 = 400 B: nothing reaches 1 MiB,
// so one leftover bucket per dtype; sorted by smallest index.
TEST(BucketAssign, DtypeSeparation) {
  auto got = Assign({T(TPDP_F32, 1000), T(TPDP_F16, 300), T(TPDP_F32, 100)},
                    {1048576, 26214400});
  std::vector<Bucket> want = {{{0, 2}, 4400, 1048576}, {{1}, 600, 1048576}};
  EXPECT_EQ(got, want);
}

// limit 1000: 800 B then 400 B -> 1200 >= 1000 closes (overshoot by one
// tensor); the last 40 B stay open and are appended.
TEST(BucketAssign, OvershootByOneTensor) {
  auto got =
      Assign({T(TPDP_F32, 200), T(TPDP_F32, 100), T(TPDP_F32, 10)}, {1000});
  std::vector<Bucket> want = {{{0, 1}, 1200, 1000}, {{2}, 40, 1000}};
  EXPECT_EQ(got, want);
}

// Exactly reaching the limit closes the bucket (>=).
TEST(BucketAssign, ExactLimitCloses) {
  // 500 B < 1000, then 1000 B == 1000 closes.
  auto got =
      Assign({T(TPDP_F32, 125), T(TPDP_F32, 125), T(TPDP_F32, 1)}, {1000});
  std::vector<Bucket> want = {{{0, 1}, 1000, 1000}, {{2}, 4, 1000}};
  EXPECT_EQ(got, want);
}

// limits [100, 1000]: t0 120 B closes at 100 and the key moves to 1000;
// t1 400 + t2 600 = 1000 closes; the key stays on 1000 (the last);
// t3 1200 closes alone; t4 4 B is left over with limit 1000.
TEST(BucketAssign, LimitListAdvancesAndStaysOnLast) {
  auto got = Assign({T(TPDP_F32, 30), T(TPDP_F32, 100), T(TPDP_F32, 150),
                     T(TPDP_F32, 300), T(TPDP_F32, 1)},
                    {100, 1000});
  std::vector<Bucket> want = {
      {{0}, 120, 100}, {{1, 2}, 1000, 1000}, {{3}, 1200, 1000}, {{4}, 4, 1000}};
  EXPECT_EQ(got, want);
}

// Each (dtype, device) key has its own position in the limit list:
// f32 t0 (120 B) closes at 100 -> f32 on 1000; f16 t1 80 + t2 20 = 100
// closes at 100 -> f16 on 1000; f32 t3 100 B and f16 t4 200 B stay open
// under 1000.
TEST(BucketAssign, PerKeyLimitPositions) {
  auto got = Assign({T(TPDP_F32, 30), T(TPDP_F16, 40), T(TPDP_F16, 10),
                     T(TPDP_F32, 25), T(TPDP_F16, 100)},
                    {100, 1000});
  std::vector<Bucket> want = {
      {{0}, 120, 100}, {{1, 2}, 100, 100}, {{3}, 100, 1000}, {{4}, 200, 1000}};
  EXPECT_EQ(got, want);
}

// Same dtype on different devices never shares a bucket.
TEST(BucketAssign, DeviceSeparation) {
  auto got = Assign(
      {T(TPDP_F32, 100, kCpu), T(TPDP_F32, 100, kGpu0), T(TPDP_F32, 100, kCpu),
       T(TPDP_F32, 100, kGpu1), T(TPDP_F32, 100, kGpu0)},
      {800});
  std::vector<Bucket> want = {
      {{0, 2}, 800, 800}, {{1, 4}, 800, 800}, {{3}, 400, 800}};
  EXPECT_EQ(got, want);
}

// Without an order, buckets are sorted by smallest index: the f32 bucket
// closes first but the open f16 bucket holds index 0.
TEST(BucketAssign, SortedBySmallestIndex) {
  auto got = Assign({T(TPDP_F16, 10), T(TPDP_F32, 300)}, {1000});
  std::vector<Bucket> want = {{{0}, 20, 1000}, {{1}, 1200, 1000}};
  EXPECT_EQ(got, want);
}

// With an explicit order the tensors are walked in it and the buckets stay
// in closing order (leftovers last), not sorted.
TEST(BucketAssign, ExplicitOrderIsNotSorted) {
  std::vector<tpdp_tensor> ts = {T(TPDP_F32, 100), T(TPDP_F32, 100),
                                 T(TPDP_F32, 100)};
  int64_t order[3] = {2, 0, 1};
  auto got = Assign(ts, {800}, order);
  std::vector<Bucket> want = {{{2, 0}, 800, 800}, {{1}, 400, 800}};
  EXPECT_EQ(got, want);
  // f16 index 0 stays open while f32 closes: closing order kept.
  std::vector<tpdp_tensor> ts2 = {T(TPDP_F16, 10), T(TPDP_F32, 300)};
  int64_t order2[2] = {0, 1};
  auto got2 = Assign(ts2, {1000}, order2);
  std::vector<Bucket> want2 = {{{1}, 1200, 1000}, {{0}, 20, 1000}};
  EXPECT_EQ(got2, want2);
}

// The bench/DDP layout: 100 x 250k f32 (1,000,000 B each), [1 MiB, 25 MiB]:
// 2 tensors reach 1 MiB; then 27 tensors (27,000,000 >= 26,214,400) per
// bucket; 17 left over.
TEST(BucketAssign, DdpDefaultLayout) {
  std::vector<tpdp_tensor> ts(100, T(TPDP_F32, 250000));
  auto got = Assign(ts, {TPDP_BUCKET_FIRST_BYTES, TPDP_BUCKET_CAP_BYTES});
  ASSERT_EQ(got.size(), 5u);
  int64_t starts[6] = {0, 2, 29, 56, 83, 100};
  for (int b = 0; b < 5; b++) {
    std::vector<int64_t> want;
    for (int64_t i = starts[b]; i < starts[b + 1]; i++) want.push_back(i);
    EXPECT_EQ(got[b].params, want) << "bucket " << b;
    EXPECT_EQ(got[b].bytes, (size_t)(starts[b + 1] - starts[b]) * 1000000u);
    EXPECT_EQ(got[b].limit,
              b == 0 ? TPDP_BUCKET_FIRST_BYTES : TPDP_BUCKET_CAP_BYTES);
  }
}

TEST(BucketAssign, ZeroSizeTensorsAreAssigned) {
  auto got = Assign({T(TPDP_F32, 0), T(TPDP_F32, 1)}, {4});
  std::vector<Bucket> want = {{{0, 1}, 4, 4}};
  EXPECT_EQ(got, want);
}

TEST(BucketAssign, Errors) {
  tpdp_bucket_assignment a;
  std::vector<tpdp_tensor> ts = {T(TPDP_F32, 1), T(TPDP_F32, 2)};
  size_t lim[2] = {100, 0};
  EXPECT_TPDP_ERROR(tpdp_bucket_assign(ts.data(), 0, lim, 1, nullptr, &a),
                    TPDP_ERR_INVALID_ARGUMENT, "empty tensor list");
  EXPECT_TPDP_ERROR(tpdp_bucket_assign(ts.data(), 2, lim, 0, nullptr, &a),
                    TPDP_ERR_INVALID_ARGUMENT, "empty limit list");
  EXPECT_TPDP_ERROR(tpdp_bucket_assign(ts.data(), 2, lim, 2, nullptr, &a),
                    TPDP_ERR_INVALID_ARGUMENT, "limit 1 is 0 bytes");
  int64_t bad_order[2] = {1, 1};
  EXPECT_TPDP_ERROR(tpdp_bucket_assign(ts.data(), 2, lim, 1, bad_order, &a),
                    TPDP_ERR_INVALID_ARGUMENT, "order[1] = 1", "permutation");
  EXPECT_TPDP_ERROR(tpdp_bucket_assign(ts.data(), 2, lim, 1, nullptr, nullptr),
                    TPDP_ERR_NULL_POINTER, "'out'");
  ts[1].dtype = (tpdp_dtype)99;
  EXPECT_TPDP_ERROR(tpdp_bucket_assign(ts.data(), 2, lim, 1, nullptr, &a),
                    TPDP_ERR_DTYPE_MISMATCH, "tensor 1");
}

// Reversal of a hand-built assignment whose buckets hold several tensors in
// walk order that is not sorted: old buckets [5 1] [0] [4 2 3] (bytes 10 20
// 30, limits 100 200 300, offsets 0 2 3 6) become [4 2 3] [0] [5 1]: offsets
// 0 3 4 6 (sizes 3, 1, 2), each bucket's indices in their old order, bytes
// and limits carried along.
TEST(BucketAssignmentReverse, HandWorked) {
  tpdp_bucket_assignment a;
  a.nbuckets = 3;
  a.offsets = (int64_t *)malloc(4 * sizeof(int64_t));
  a.indices = (int64_t *)malloc(6 * sizeof(int64_t));
  a.bytes = (size_t *)malloc(3 * sizeof(size_t));
  a.limits = (size_t *)malloc(3 * sizeof(size_t));
  const int64_t off[4] = {0, 2, 3, 6}, idx[6] = {5, 1, 0, 4, 2, 3};
  const size_t bytes[3] = {10, 20, 30}, lim[3] = {100, 200, 300};
  memcpy(a.offsets, off, sizeof off);
  memcpy(a.indices, idx, sizeof idx);
  memcpy(a.bytes, bytes, sizeof bytes);
  memcpy(a.limits, lim, sizeof lim);
  ASSERT_TPDP_OK(tpdp_bucket_assignment_reverse(&a));
  EXPECT_EQ(a.nbuckets, 3);
  EXPECT_EQ(std::vector<int64_t>(a.offsets, a.offsets + 4),
            (std::vector<int64_t>{0, 3, 4, 6}));
  std::vector<Bucket> want = {
      {{4, 2, 3}, 30, 300}, {{0}, 20, 200}, {{5, 1}, 10, 100}};
  EXPECT_EQ(Read(a), want);
  // Twice is the identity.
  ASSERT_TPDP_OK(tpdp_bucket_assignment_reverse(&a));
  std::vector<Bucket> orig = {
      {{5, 1}, 10, 100}, {{0}, 20, 200}, {{4, 2, 3}, 30, 300}};
  EXPECT_EQ(Read(a), orig);
  tpdp_bucket_assignment_free(&a);
}

// On tpdp_bucket_assign's result (LimitListAdvancesAndStaysOnLast's case):
// DDP's launch order is the assignment read backwards.
TEST(BucketAssignmentReverse, AfterAssign) {
  std::vector<tpdp_tensor> ts = {T(TPDP_F32, 30), T(TPDP_F32, 100),
                                 T(TPDP_F32, 150), T(TPDP_F32, 300),
                                 T(TPDP_F32, 1)};
  size_t lim[2] = {100, 1000};
  tpdp_bucket_assignment a;
  ASSERT_TPDP_OK(tpdp_bucket_assign(ts.data(), 5, lim, 2, nullptr, &a));
  ASSERT_TPDP_OK(tpdp_bucket_assignment_reverse(&a));
  std::vector<Bucket> want = {
      {{4}, 4, 1000}, {{3}, 1200, 1000}, {{1, 2}, 1000, 1000}, {{0}, 120, 100}};
  EXPECT_EQ(Read(a), want);
  tpdp_bucket_assignment_free(&a);
}

TEST(BucketAssignmentReverse, EmptyAndErrors) {
  tpdp_bucket_assignment a = {0, nullptr, nullptr, nullptr, nullptr};
  ASSERT_TPDP_OK(tpdp_bucket_assignment_reverse(&a));  // nothing to do
  EXPECT_EQ(a.nbuckets, 0);
  EXPECT_TPDP_ERROR(tpdp_bucket_assignment_reverse(nullptr),
                    TPDP_ERR_NULL_POINTER, "tpdp_bucket_assignment_reverse",
                    "'a'");
  a.nbuckets = -1;
  EXPECT_TPDP_ERROR(tpdp_bucket_assignment_reverse(&a),
                    TPDP_ERR_INVALID_ARGUMENT, "nbuckets is -1");
  a.nbuckets = 2;  // arrays missing
  EXPECT_TPDP_ERROR(tpdp_bucket_assignment_reverse(&a), TPDP_ERR_NULL_POINTER,
                    "offsets");
}
