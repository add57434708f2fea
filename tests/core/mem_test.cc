// SPDX-License-Identifier: BSD-3-Clause
// core/mem.h on the host (the CUDA path is exercised by the GPU checks):
// zeroed allocation, strided copies and zero fills against values worked
// by hand, the first failure kept by core_mem_free_keep, the reused
// scratch buffer, the cache of host buffers by size class, the refusal of
// device memory in a build without CUDA; and the allocation fault
// injection of core/util.h that the reducer's tests rely on.
#include "core/mem.h"

#include <cstring>
#include <string>
#include <vector>

#include "core/check.h"
#include "tests/test_util.h"

namespace {
const tpdp_device kCpu = {TPDP_DEVICE_CPU, 0};

// A [rows, cols] f32 view with the given row stride over `data`.
tpdp_tensor Strided(float *data, int64_t rows, int64_t cols, int64_t stride) {
  tpdp_tensor t;
  int64_t shape[2] = {rows, cols};
  tpdp_tensor_init(&t, data, TPDP_F32, kCpu, 2, shape);
  t.strides[0] = stride;
  return t;
}
}  // namespace

TEST(Mem, ZeroedAllocationIsZero) {
  void *p = nullptr;
  ASSERT_TPDP_OK(core_mem_alloc_zeroed(kCpu, 3 << 20, &p));
  const unsigned char *b = (const unsigned char *)p;
  size_t nonzero = 0;
  for (size_t i = 0; i < (3u << 20); i++) nonzero += b[i] != 0;
  EXPECT_EQ(nonzero, 0u);
  EXPECT_TPDP_OK(core_mem_free(kCpu, p));
  // 0 bytes: still a pointer to free.
  ASSERT_TPDP_OK(core_mem_alloc(kCpu, 0, &p));
  EXPECT_NE(p, nullptr);
  EXPECT_TPDP_OK(core_mem_free(kCpu, p));
  EXPECT_TPDP_OK(core_mem_free(kCpu, nullptr));
}

// dst[2x3] with row stride 5 = src[2x3] with row stride 4; the padding of
// dst is untouched; then dst's view zeroed, padding still untouched.
TEST(Mem, StridedCopyAndZero) {
  std::vector<float> src = {1, 2, 3, -1, 4, 5, 6, -1};
  std::vector<float> dst(10, 9.f);
  tpdp_tensor s = Strided(src.data(), 2, 3, 4);
  tpdp_tensor d = Strided(dst.data(), 2, 3, 5);
  ASSERT_TPDP_OK(core_mem_copy(&d, &s));
  EXPECT_EQ(dst, (std::vector<float>{1, 2, 3, 9, 9, 4, 5, 6, 9, 9}));
  std::vector<float> again(10, 9.f);
  tpdp_tensor a = Strided(again.data(), 2, 3, 5);
  ASSERT_TPDP_OK(core_mem_copy_async(&a, &s, nullptr));  // host: done now
  EXPECT_EQ(again, dst);
  ASSERT_TPDP_OK(core_mem_zero(&d));
  EXPECT_EQ(dst, (std::vector<float>{0, 0, 0, 9, 9, 0, 0, 0, 9, 9}));
  ASSERT_TPDP_OK(core_mem_zero_async(&a, nullptr));
  EXPECT_EQ(again, dst);
  EXPECT_TPDP_OK(core_mem_sync(kCpu, nullptr));
  tpdp_tensor wrong = Strided(dst.data(), 3, 2, 2);
  EXPECT_TPDP_ERROR(core_mem_copy(&wrong, &s), TPDP_ERR_SHAPE_MISMATCH,
                    "[3, 2]", "[2, 3]");
}

TEST(Mem, FreeKeepReturnsTheFirstFailure) {
  void *p = nullptr;
  ASSERT_TPDP_OK(core_mem_alloc(kCpu, 64, &p));
  EXPECT_EQ(core_mem_free_keep(kCpu, p, TPDP_ERR_MPI), TPDP_ERR_MPI);
  EXPECT_EQ(core_mem_free_keep(kCpu, nullptr, TPDP_SUCCESS), TPDP_SUCCESS);
}

// The scratch buffer is kept while requests fit, replaced when one does
// not, empty after a failed growth (usable again) and after its free.
TEST(Mem, ScratchGrowsAndIsReused) {
  core_scratch s = {};
  void *a = nullptr, *b = nullptr;
  ASSERT_TPDP_OK(core_scratch_get(&s, kCpu, 1000, &a));
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(s.bytes, 1000u);
  memset(a, 7, 1000);  // all of it is ours to write
  ASSERT_TPDP_OK(core_scratch_get(&s, kCpu, 10, &b));
  EXPECT_EQ(b, a);  // smaller request: the same buffer, no allocation
  ASSERT_TPDP_OK(core_scratch_get(&s, kCpu, 1000, &b));
  EXPECT_EQ(b, a);
  core_alloc_fail_at(1000, 0);  // count the allocations of a reuse
  ASSERT_TPDP_OK(core_scratch_get(&s, kCpu, 500, &b));
  EXPECT_EQ(core_alloc_fail_left(), 1000);
  core_alloc_fail_at(0, 0);
  ASSERT_TPDP_OK(core_scratch_get(&s, kCpu, 5000, &b));
  EXPECT_EQ(s.bytes, 5000u);
  memset(b, 1, 5000);
  // Growth that fails leaves the scratch empty, not dangling.
  core_alloc_fail_at(1, 0);
  void *c = &s;
  EXPECT_TPDP_ERROR(core_scratch_get(&s, kCpu, 1 << 20, &c),
                    TPDP_ERR_OUT_OF_MEMORY, "out of memory allocating");
  EXPECT_EQ(s.data, nullptr);
  EXPECT_EQ(s.bytes, 0u);
  ASSERT_TPDP_OK(core_scratch_get(&s, kCpu, 64, &c));
  EXPECT_NE(c, nullptr);
  EXPECT_TPDP_OK(core_scratch_free(&s));
  EXPECT_EQ(s.data, nullptr);
  EXPECT_TPDP_OK(core_scratch_free(&s));  // empty: no-op
}

// The cache of host buffers: a request of a size class takes back the
// buffer given back for its class (zeroed when asked), another class or a
// small request gets memory of its own, every request counts for the
// fault injection (a failed one leaves the cache as it was), at most
// CORE_MEM_CACHE_SLOTS buffers are kept, and release frees them.
TEST(Mem, CacheReusesBuffersBySizeClass) {
  core_mem_cache c = {};
  const size_t mb = CORE_MEM_CACHE_MIN_BYTES;  // 1 MiB: classes of 128 KiB
  void *a = nullptr, *b = nullptr;
  ASSERT_TPDP_OK(core_mem_cache_get(&c, 3 * mb, 1, &a));
  const unsigned char *x = static_cast<const unsigned char *>(a);
  size_t nonzero = 0;
  for (size_t i = 0; i < 3 * mb; i++) nonzero += x[i] != 0;
  EXPECT_EQ(nonzero, 0u);
  memset(a, 7, 3 * mb);
  core_mem_cache_put(&c, a, 3 * mb);
  EXPECT_EQ(c.n, 1);
  // 3 MiB - 1000 bytes is in the same class (3 MiB), zeroed on request.
  ASSERT_TPDP_OK(core_mem_cache_get(&c, 3 * mb - 1000, 1, &b));
  EXPECT_EQ(b, a);
  EXPECT_EQ(c.n, 0);
  nonzero = 0;
  for (size_t i = 0; i < 3 * mb - 1000; i++) nonzero += x[i] != 0;
  EXPECT_EQ(nonzero, 0u);
  core_mem_cache_put(&c, b, 3 * mb - 1000);
  // Without zeroing the old bytes stay; 3 MiB + 1 is the next class.
  memset(a, 7, 3 * mb);
  ASSERT_TPDP_OK(core_mem_cache_get(&c, 3 * mb, 0, &b));
  EXPECT_EQ(b, a);
  EXPECT_EQ(x[3 * mb - 1], 7);
  core_mem_cache_put(&c, b, 3 * mb);
  void *d = nullptr;
  ASSERT_TPDP_OK(core_mem_cache_get(&c, 3 * mb + 1, 0, &d));
  EXPECT_NE(d, a);
  EXPECT_EQ(c.n, 1);
  core_mem_cache_put(&c, d, 3 * mb + 1);
  EXPECT_EQ(c.n, 2);
  // A small request neither takes nor keeps a buffer.
  void *s = nullptr;
  ASSERT_TPDP_OK(core_mem_cache_get(&c, 1000, 1, &s));
  core_mem_cache_put(&c, s, 1000);
  EXPECT_EQ(c.n, 2);
  // A request served from the cache counts as an allocation: failed, it
  // leaves the kept buffer there for the next one.
  core_alloc_fail_at(1, 0);
  void *e = &c;
  EXPECT_TPDP_ERROR(core_mem_cache_get(&c, 3 * mb, 0, &e),
                    TPDP_ERR_OUT_OF_MEMORY, "out of memory allocating");
  EXPECT_EQ(e, &c);
  EXPECT_EQ(c.n, 2);
  ASSERT_TPDP_OK(core_mem_cache_get(&c, 3 * mb, 0, &e));
  EXPECT_EQ(e, a);
  core_mem_cache_put(&c, e, 3 * mb);
  // Past CORE_MEM_CACHE_SLOTS buffers given back are freed (valgrind and
  // ASan see any that is not).
  std::vector<void *> many(CORE_MEM_CACHE_SLOTS);
  for (void *&p : many) ASSERT_TPDP_OK(core_mem_cache_get(&c, 2 * mb, 0, &p));
  for (void *p : many) core_mem_cache_put(&c, p, 2 * mb);
  EXPECT_EQ(c.n, CORE_MEM_CACHE_SLOTS);
  core_mem_cache_release(&c);
  EXPECT_EQ(c.n, 0);
  core_mem_cache_release(&c);  // empty: no-op
}

#ifndef TPDP_WITH_CUDA
TEST(Mem, DeviceMemoryRefusedWithoutCuda) {
  tpdp_device gpu = {TPDP_DEVICE_CUDA, 1};
  void *p = nullptr;
  EXPECT_TPDP_ERROR(core_mem_supported(gpu, "parameter 0 'w'"),
                    TPDP_ERR_UNSUPPORTED, "parameter 0 'w' is on cuda:1",
                    "not built", "host memory only", "--config=cuda");
  EXPECT_TPDP_ERROR(core_mem_alloc(gpu, 16, &p), TPDP_ERR_UNSUPPORTED,
                    "cuda:1");
  EXPECT_EQ(p, nullptr);
}
#endif

// The n-th allocation of this thread fails, once; the count is readable.
TEST(AllocFaults, NthAllocationFailsOnce) {
  void *p = nullptr;
  core_alloc_fail_at(2, 0);
  ASSERT_TPDP_OK(core_mem_alloc(kCpu, 8, &p));  // 1st
  EXPECT_EQ(core_alloc_fail_left(), 1);
  EXPECT_TPDP_ERROR(core_mem_alloc(kCpu, 8, &p), TPDP_ERR_OUT_OF_MEMORY,
                    "out of memory allocating 8 bytes");  // 2nd
  EXPECT_EQ(core_alloc_fail_left(), 0);
  void *q = nullptr;
  EXPECT_TPDP_OK(core_calloc(&q, 1, 8));  // disarmed again
  free(q);
  core_alloc_fail_at(1, 0);
  EXPECT_EQ(core_strdup("x"), nullptr);
  core_alloc_fail_at(1, 0);
  EXPECT_TPDP_ERROR(core_calloc(&q, 2, 4), TPDP_ERR_OUT_OF_MEMORY,
                    "2 x 4 bytes");
  core_alloc_fail_at(1, 1);  // any thread: this one is as good as any
  int *items = nullptr, cap = 0;
  EXPECT_TPDP_ERROR(core_grow((void **)&items, &cap, 3, sizeof *items),
                    TPDP_ERR_OUT_OF_MEMORY, "growing a list");
  EXPECT_EQ(cap, 0);
  core_alloc_fail_at(5, 0);
  core_alloc_fail_at(0, 0);  // disarmed
  EXPECT_EQ(core_alloc_fail_left(), 0);
  EXPECT_TPDP_OK(core_mem_free(kCpu, p));
}
