// SPDX-License-Identifier: BSD-3-Clause
// Tensor views: init, numel/nbytes, contiguity, narrow, strided copy, and
// DLPack interop. Expected values are worked out by hand in each test.
#include <cstring>
#include <string>
#include <vector>

#include "tests/test_util.h"

namespace {

const tpdp_device kCpu = {TPDP_DEVICE_CPU, 0};

TEST(Dtype, SizesNamesAndParse) {
  const struct {
    tpdp_dtype dt;
    size_t size;
    const char *name;
    int is_float;
  } k[] = {{TPDP_F32, 4, "f32", 1}, {TPDP_F64, 8, "f64", 1},
           {TPDP_F16, 2, "f16", 1}, {TPDP_BF16, 2, "bf16", 1},
           {TPDP_I32, 4, "i32", 0}, {TPDP_I64, 8, "i64", 0},
           {TPDP_U8, 1, "u8", 0}};
  for (const auto &e : k) {
    EXPECT_EQ(tpdp_dtype_size(e.dt), e.size) << e.name;
    EXPECT_STREQ(tpdp_dtype_name(e.dt), e.name);
    EXPECT_EQ(tpdp_dtype_is_float(e.dt), e.is_float) << e.name;
    tpdp_dtype parsed = TPDP_DTYPE_COUNT;
    ASSERT_TPDP_OK(tpdp_dtype_parse(e.name, &parsed));
    EXPECT_EQ(parsed, e.dt);
  }
  EXPECT_EQ(tpdp_dtype_size(TPDP_DTYPE_COUNT), 0u);
  EXPECT_EQ(tpdp_dtype_size(static_cast<tpdp_dtype>(-1)), 0u);
  EXPECT_STREQ(tpdp_dtype_name(static_cast<tpdp_dtype>(42)), "?");
  tpdp_dtype d;
  EXPECT_TPDP_ERROR(tpdp_dtype_parse("f8", &d), TPDP_ERR_PARSE, "'f8'");
  EXPECT_TPDP_ERROR(tpdp_dtype_parse(nullptr, &d), TPDP_ERR_NULL_POINTER,
                    "name");
  EXPECT_TPDP_ERROR(tpdp_dtype_parse("f32", nullptr), TPDP_ERR_NULL_POINTER,
                    "out");
}

TEST(Device, FormatAndEqual) {
  char buf[32];
  tpdp_device_format(kCpu, buf, sizeof buf);
  EXPECT_STREQ(buf, "cpu");
  tpdp_device g3 = {TPDP_DEVICE_CUDA, 3};
  tpdp_device_format(g3, buf, sizeof buf);
  EXPECT_STREQ(buf, "cuda:3");
  tpdp_device_format(g3, buf, 4);  // truncated, still terminated
  EXPECT_STREQ(buf, "cud");
  tpdp_device g0 = {TPDP_DEVICE_CUDA, 0};
  tpdp_device cpu7 = {TPDP_DEVICE_CPU, 7};  // the index means nothing on cpu
  EXPECT_TRUE(tpdp_device_equal(kCpu, cpu7));
  EXPECT_FALSE(tpdp_device_equal(g0, g3));
  EXPECT_FALSE(tpdp_device_equal(kCpu, g0));
  EXPECT_TRUE(tpdp_device_equal(g3, g3));
}

TEST(Tensor, InitContiguousStridesNumelBytes) {
  float buf[24];
  int64_t shape[3] = {2, 3, 4};
  tpdp_tensor t;
  ASSERT_TPDP_OK(tpdp_tensor_init(&t, buf, TPDP_F32, kCpu, 3, shape));
  EXPECT_EQ(t.data, buf);
  EXPECT_EQ(t.ndim, 3);
  EXPECT_EQ(t.strides[0], 12);
  EXPECT_EQ(t.strides[1], 4);
  EXPECT_EQ(t.strides[2], 1);
  EXPECT_EQ(tpdp_tensor_numel(&t), 24);
  EXPECT_EQ(tpdp_tensor_nbytes(&t), 96u);
  EXPECT_TRUE(tpdp_tensor_is_contiguous(&t));

  tpdp_tensor s;  // scalar
  ASSERT_TPDP_OK(tpdp_tensor_init(&s, buf, TPDP_F64, kCpu, 0, nullptr));
  EXPECT_EQ(tpdp_tensor_numel(&s), 1);
  EXPECT_EQ(tpdp_tensor_nbytes(&s), 8u);
  EXPECT_TRUE(tpdp_tensor_is_contiguous(&s));

  int64_t empty[3] = {3, 0, 2};
  tpdp_tensor e;
  ASSERT_TPDP_OK(tpdp_tensor_init(&e, nullptr, TPDP_I64, kCpu, 3, empty));
  EXPECT_EQ(tpdp_tensor_numel(&e), 0);
  EXPECT_EQ(tpdp_tensor_nbytes(&e), 0u);
  EXPECT_TRUE(tpdp_tensor_is_contiguous(&e));

  tpdp_tensor one = tpdp_tensor_1d(buf, TPDP_U8, 17);
  EXPECT_EQ(one.ndim, 1);
  EXPECT_EQ(one.shape[0], 17);
  EXPECT_EQ(one.strides[0], 1);
  EXPECT_EQ(one.device.type, TPDP_DEVICE_CPU);
  EXPECT_EQ(tpdp_tensor_nbytes(&one), 17u);

  // Eight dims is the maximum.
  int64_t eight[8] = {1, 2, 1, 2, 1, 2, 1, 3};
  tpdp_tensor t8;
  ASSERT_TPDP_OK(tpdp_tensor_init(&t8, nullptr, TPDP_BF16, kCpu, 8, eight));
  EXPECT_EQ(tpdp_tensor_numel(&t8), 24);
  EXPECT_EQ(tpdp_tensor_nbytes(&t8), 48u);
  EXPECT_EQ(t8.strides[0], 24);
  EXPECT_EQ(t8.strides[6], 3);

  EXPECT_EQ(tpdp_tensor_numel(nullptr), 0);
  EXPECT_EQ(tpdp_tensor_nbytes(nullptr), 0u);
  EXPECT_FALSE(tpdp_tensor_is_contiguous(nullptr));
}

TEST(Tensor, InitRejectsBadInput) {
  int64_t shape[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  tpdp_tensor t;
  EXPECT_TPDP_ERROR(
      tpdp_tensor_init(nullptr, nullptr, TPDP_F32, kCpu, 1, shape),
      TPDP_ERR_NULL_POINTER, "tpdp_tensor_init", "'out'");
  EXPECT_TPDP_ERROR(tpdp_tensor_init(&t, nullptr, TPDP_F32, kCpu, 9, shape),
                    TPDP_ERR_TOO_MANY_DIMS, "ndim 9");
  EXPECT_TPDP_ERROR(tpdp_tensor_init(&t, nullptr, TPDP_F32, kCpu, -1, shape),
                    TPDP_ERR_TOO_MANY_DIMS, "ndim -1");
  EXPECT_TPDP_ERROR(tpdp_tensor_init(&t, nullptr, TPDP_F32, kCpu, 2, nullptr),
                    TPDP_ERR_NULL_POINTER, "'shape'");
  EXPECT_TPDP_ERROR(
      tpdp_tensor_init(&t, nullptr, static_cast<tpdp_dtype>(7), kCpu, 1, shape),
      TPDP_ERR_DTYPE_MISMATCH, "dtype 7");
  int64_t neg[2] = {4, -2};
  EXPECT_TPDP_ERROR(tpdp_tensor_init(&t, nullptr, TPDP_F32, kCpu, 2, neg),
                    TPDP_ERR_BAD_DIM_SIZE, "shape[1]", "-2");
}

// Sizes that overflow are refused at init, never wrapped: the product of
// the non-zero sizes times the element size must fit in int64 (a zero size
// empties the tensor but leaves the others' strides to compute).
TEST(Tensor, InitRefusesShapesWhoseSizeOverflows) {
  tpdp_tensor t;
  int64_t two_max[2] = {INT64_MAX, 2};
  EXPECT_TPDP_ERROR(tpdp_tensor_init(&t, nullptr, TPDP_F32, kCpu, 2, two_max),
                    TPDP_ERR_INVALID_ARGUMENT, "tpdp_tensor_init",
                    "shape [9223372036854775807, 2] of f32 overflows");
  // 2^61 f32 elements are 2^63 bytes: one byte past INT64_MAX.
  int64_t bytes_over[1] = {int64_t{1} << 61};
  EXPECT_TPDP_ERROR(
      tpdp_tensor_init(&t, nullptr, TPDP_F32, kCpu, 1, bytes_over),
      TPDP_ERR_INVALID_ARGUMENT,
      "shape [2305843009213693952] of f32 overflows");
  int64_t empty_but_huge[3] = {0, int64_t{1} << 40, int64_t{1} << 40};
  EXPECT_TPDP_ERROR(
      tpdp_tensor_init(&t, nullptr, TPDP_U8, kCpu, 3, empty_but_huge),
      TPDP_ERR_INVALID_ARGUMENT, "[0, 1099511627776, 1099511627776] of u8",
      "overflows");
  // The largest that fits: (2^61 - 1) * 4 bytes; INT64_MAX one-byte items.
  int64_t f32_max[1] = {(int64_t{1} << 61) - 1};
  ASSERT_TPDP_OK(tpdp_tensor_init(&t, nullptr, TPDP_F32, kCpu, 1, f32_max));
  EXPECT_EQ(tpdp_tensor_numel(&t), (int64_t{1} << 61) - 1);
  EXPECT_EQ(tpdp_tensor_nbytes(&t), (size_t{1} << 63) - 4);
  int64_t u8_max[2] = {INT64_MAX, 0};
  ASSERT_TPDP_OK(tpdp_tensor_init(&t, nullptr, TPDP_U8, kCpu, 2, u8_max));
  EXPECT_EQ(t.strides[0], 1);
  EXPECT_EQ(tpdp_tensor_numel(&t), 0);
  // A view written by hand that init would refuse has no element count.
  tpdp_tensor hand = tpdp_tensor_1d(nullptr, TPDP_F64, INT64_MAX);
  EXPECT_EQ(tpdp_tensor_numel(&hand), INT64_MAX);
  EXPECT_EQ(tpdp_tensor_nbytes(&hand), 0u);  // 8 * INT64_MAX bytes overflow
  hand.ndim = 2;
  hand.shape[1] = 3;
  EXPECT_EQ(tpdp_tensor_numel(&hand), -1);
  hand.shape[1] = -1;
  EXPECT_EQ(tpdp_tensor_numel(&hand), -1);
  EXPECT_EQ(tpdp_tensor_nbytes(&hand), 0u);
}

TEST(Tensor, Contiguity) {
  float buf[6];
  // A transposed [2, 3]: shape [3, 2], strides [1, 3].
  tpdp_tensor tr = tpdp_tensor_1d(buf, TPDP_F32, 0);
  tr.ndim = 2;
  tr.shape[0] = 3;
  tr.shape[1] = 2;
  tr.strides[0] = 1;
  tr.strides[1] = 3;
  EXPECT_FALSE(tpdp_tensor_is_contiguous(&tr));
  // Every other element: shape [3], stride 2.
  tpdp_tensor every2 = tpdp_tensor_1d(buf, TPDP_F32, 3);
  every2.strides[0] = 2;
  EXPECT_FALSE(tpdp_tensor_is_contiguous(&every2));
  // Size-1 dims may carry any stride.
  tpdp_tensor ones = tpdp_tensor_1d(buf, TPDP_F32, 0);
  ones.ndim = 3;
  ones.shape[0] = 1;
  ones.shape[1] = 6;
  ones.shape[2] = 1;
  ones.strides[0] = 99;
  ones.strides[1] = 1;
  ones.strides[2] = 42;
  EXPECT_TRUE(tpdp_tensor_is_contiguous(&ones));
  // Empty tensors are contiguous whatever their strides.
  tpdp_tensor empty = every2;
  empty.shape[0] = 0;
  EXPECT_TRUE(tpdp_tensor_is_contiguous(&empty));
  // A corrupt ndim is neither contiguous nor has elements.
  tpdp_tensor bad = every2;
  bad.ndim = 12;
  EXPECT_FALSE(tpdp_tensor_is_contiguous(&bad));
  EXPECT_EQ(tpdp_tensor_numel(&bad), 0);
}

TEST(Tensor, SameShapeAndFormat) {
  int64_t a[2] = {5, 7}, b[2] = {5, 8};
  tpdp_tensor ta, tb, tc;
  ASSERT_TPDP_OK(tpdp_tensor_init(&ta, nullptr, TPDP_F32, kCpu, 2, a));
  ASSERT_TPDP_OK(tpdp_tensor_init(&tb, nullptr, TPDP_I32, kCpu, 2, b));
  ASSERT_TPDP_OK(tpdp_tensor_init(&tc, nullptr, TPDP_U8, kCpu, 1, a));
  EXPECT_TRUE(tpdp_tensor_same_shape(&ta, &ta));
  EXPECT_FALSE(tpdp_tensor_same_shape(&ta, &tb));
  EXPECT_FALSE(tpdp_tensor_same_shape(&ta, &tc));
  EXPECT_FALSE(tpdp_tensor_same_shape(&ta, nullptr));
  char buf[64];
  tpdp_shape_format(2, a, buf, sizeof buf);
  EXPECT_STREQ(buf, "[5, 7]");
  tpdp_shape_format(0, a, buf, sizeof buf);
  EXPECT_STREQ(buf, "[]");
  tpdp_shape_format(2, a, buf, 4);
  EXPECT_STREQ(buf, "[5,");
}

TEST(Tensor, NarrowAlongEachDim) {
  int32_t buf[20];
  for (int i = 0; i < 20; i++) buf[i] = i;  // [4, 5], element (r, c) = 5r + c
  int64_t shape[2] = {4, 5};
  tpdp_tensor t, v;
  ASSERT_TPDP_OK(tpdp_tensor_init(&t, buf, TPDP_I32, kCpu, 2, shape));

  ASSERT_TPDP_OK(tpdp_tensor_narrow(&t, 0, 1, 2, &v));  // rows 1..2
  EXPECT_EQ(v.data, static_cast<void *>(buf + 5));
  EXPECT_EQ(v.shape[0], 2);
  EXPECT_EQ(v.shape[1], 5);
  EXPECT_TRUE(tpdp_tensor_is_contiguous(&v));

  ASSERT_TPDP_OK(tpdp_tensor_narrow(&t, 1, 2, 3, &v));  // cols 2..4
  EXPECT_EQ(v.data, static_cast<void *>(buf + 2));
  EXPECT_EQ(v.shape[0], 4);
  EXPECT_EQ(v.shape[1], 3);
  EXPECT_EQ(v.strides[0], 5);
  EXPECT_FALSE(tpdp_tensor_is_contiguous(&v));
  int32_t out[12];
  int64_t oshape[2] = {4, 3};
  tpdp_tensor o;
  ASSERT_TPDP_OK(tpdp_tensor_init(&o, out, TPDP_I32, kCpu, 2, oshape));
  ASSERT_TPDP_OK(tpdp_tensor_copy(&o, &v));
  const int32_t want[12] = {2, 3, 4, 7, 8, 9, 12, 13, 14, 17, 18, 19};
  for (int i = 0; i < 12; i++) EXPECT_EQ(out[i], want[i]) << i;

  // Narrowing a [1, 5] along dim 1 stays contiguous (dims before have size 1).
  tpdp_tensor row;
  ASSERT_TPDP_OK(tpdp_tensor_narrow(&t, 0, 3, 1, &row));
  ASSERT_TPDP_OK(tpdp_tensor_narrow(&row, 1, 1, 3, &v));
  EXPECT_EQ(v.data, static_cast<void *>(buf + 16));
  EXPECT_TRUE(tpdp_tensor_is_contiguous(&v));

  // An empty range at the very end is allowed.
  ASSERT_TPDP_OK(tpdp_tensor_narrow(&t, 1, 5, 0, &v));
  EXPECT_EQ(tpdp_tensor_numel(&v), 0);

  EXPECT_TPDP_ERROR(tpdp_tensor_narrow(&t, 2, 0, 1, &v),
                    TPDP_ERR_INVALID_ARGUMENT, "tpdp_tensor_narrow", "dim 2");
  EXPECT_TPDP_ERROR(tpdp_tensor_narrow(&t, -1, 0, 1, &v),
                    TPDP_ERR_INVALID_ARGUMENT, "dim -1");
  EXPECT_TPDP_ERROR(tpdp_tensor_narrow(&t, 0, -1, 1, &v),
                    TPDP_ERR_INVALID_ARGUMENT, "start -1");
  EXPECT_TPDP_ERROR(tpdp_tensor_narrow(&t, 0, 3, 2, &v),
                    TPDP_ERR_INVALID_ARGUMENT, "start 3 length 2", "dim 0");
  EXPECT_TPDP_ERROR(tpdp_tensor_narrow(&t, 1, 0, -1, &v),
                    TPDP_ERR_INVALID_ARGUMENT, "dim 1");
  EXPECT_TPDP_ERROR(tpdp_tensor_narrow(&t, 0, INT64_MAX, 2, &v),
                    TPDP_ERR_INVALID_ARGUMENT, "dim 0");
  // A hand-made stride whose byte offset overflows: refused, not wrapped.
  tpdp_tensor wide = t;
  wide.strides[0] = int64_t{1} << 61;
  EXPECT_TPDP_ERROR(tpdp_tensor_narrow(&wide, 0, 2, 1, &v),
                    TPDP_ERR_INVALID_ARGUMENT,
                    "start 2 times stride 2305843009213693952 of dim 0 "
                    "overflows");
  EXPECT_TPDP_ERROR(tpdp_tensor_narrow(nullptr, 0, 0, 1, &v),
                    TPDP_ERR_NULL_POINTER, "'t'");
  EXPECT_TPDP_ERROR(tpdp_tensor_narrow(&t, 0, 0, 1, nullptr),
                    TPDP_ERR_NULL_POINTER, "'out'");
}

TEST(Tensor, CopyStridedBothWays) {
  // src: contiguous [2, 3, 4] with value(i, j, k) = 12i + 4j + k.
  double src_buf[24];
  for (int i = 0; i < 24; i++) src_buf[i] = i;
  int64_t shape[3] = {2, 3, 4};
  tpdp_tensor src;
  ASSERT_TPDP_OK(tpdp_tensor_init(&src, src_buf, TPDP_F64, kCpu, 3, shape));
  // dst: the same logical shape stored "fully transposed": (i, j, k) lives
  // at k*6 + j*2 + i.
  double dst_buf[24];
  for (double &x : dst_buf) x = -1;
  tpdp_tensor dst = src;
  dst.data = dst_buf;
  dst.strides[0] = 1;
  dst.strides[1] = 2;
  dst.strides[2] = 6;
  ASSERT_TPDP_OK(tpdp_tensor_copy(&dst, &src));
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++)
      for (int k = 0; k < 4; k++)
        EXPECT_EQ(dst_buf[k * 6 + j * 2 + i], 12 * i + 4 * j + k);
  // And back into a fresh contiguous buffer.
  double back_buf[24] = {0};
  tpdp_tensor back = src;
  back.data = back_buf;
  ASSERT_TPDP_OK(tpdp_tensor_copy(&back, &dst));
  for (int i = 0; i < 24; i++) EXPECT_EQ(back_buf[i], i);

  // Writing one column of a [3, 3] u8 matrix; the rest untouched.
  uint8_t mat[9] = {0};
  uint8_t col[3] = {7, 8, 9};
  tpdp_tensor mcol = tpdp_tensor_1d(mat + 1, TPDP_U8, 3);
  mcol.strides[0] = 3;
  tpdp_tensor vcol = tpdp_tensor_1d(col, TPDP_U8, 3);
  ASSERT_TPDP_OK(tpdp_tensor_copy(&mcol, &vcol));
  const uint8_t want[9] = {0, 7, 0, 0, 8, 0, 0, 9, 0};
  EXPECT_EQ(std::memcmp(mat, want, 9), 0);

  // Scalar copy.
  int64_t a = 5, b = 0;
  tpdp_tensor sa, sb;
  ASSERT_TPDP_OK(tpdp_tensor_init(&sa, &a, TPDP_I64, kCpu, 0, nullptr));
  ASSERT_TPDP_OK(tpdp_tensor_init(&sb, &b, TPDP_I64, kCpu, 0, nullptr));
  ASSERT_TPDP_OK(tpdp_tensor_copy(&sb, &sa));
  EXPECT_EQ(b, 5);
}

TEST(Tensor, CopyRejectsMismatches) {
  float a[6], b[6];
  int64_t s23[2] = {2, 3}, s32[2] = {3, 2};
  tpdp_tensor ta, tb;
  ASSERT_TPDP_OK(tpdp_tensor_init(&ta, a, TPDP_F32, kCpu, 2, s23));
  ASSERT_TPDP_OK(tpdp_tensor_init(&tb, b, TPDP_F32, kCpu, 2, s32));
  EXPECT_TPDP_ERROR(tpdp_tensor_copy(&ta, &tb), TPDP_ERR_SHAPE_MISMATCH,
                    "tpdp_tensor_copy", "[2, 3]", "[3, 2]");
  tb = ta;
  tb.data = b;
  tb.dtype = TPDP_I32;
  EXPECT_TPDP_ERROR(tpdp_tensor_copy(&ta, &tb), TPDP_ERR_DTYPE_MISMATCH, "f32",
                    "i32");
  tb.dtype = TPDP_F32;
  tb.device.type = TPDP_DEVICE_CUDA;
#ifndef TPDP_WITH_CUDA
  // Without CUDA built in, device memory cannot be copied at all.
  EXPECT_TPDP_ERROR(tpdp_tensor_copy(&ta, &tb), TPDP_ERR_DEVICE_MISMATCH,
                    "tpdp_tensor_copy", "cuda");
#endif
  tb.device = kCpu;
  tb.data = nullptr;
  EXPECT_TPDP_ERROR(tpdp_tensor_copy(&ta, &tb), TPDP_ERR_NULL_POINTER, "src");
  EXPECT_TPDP_ERROR(tpdp_tensor_copy(nullptr, &tb), TPDP_ERR_NULL_POINTER,
                    "dst");
  tb.data = b;
  tb.ndim = 9;
  EXPECT_TPDP_ERROR(tpdp_tensor_copy(&ta, &tb), TPDP_ERR_TOO_MANY_DIMS, "9");
}

// ------------------------------------------------------------ DLPack

TEST(DLPack, RoundTripEveryDtype) {
  const struct {
    tpdp_dtype dt;
    uint8_t code;
    uint8_t bits;
  } k[] = {{TPDP_F32, kDLFloat, 32}, {TPDP_F64, kDLFloat, 64},
           {TPDP_F16, kDLFloat, 16}, {TPDP_BF16, kDLBfloat, 16},
           {TPDP_I32, kDLInt, 32},   {TPDP_I64, kDLInt, 64},
           {TPDP_U8, kDLUInt, 8}};
  alignas(8) char buf[256];
  int64_t shape[3] = {2, 3, 4};
  for (const auto &e : k) {
    SCOPED_TRACE(tpdp_dtype_name(e.dt));
    tpdp_tensor t;
    ASSERT_TPDP_OK(tpdp_tensor_init(&t, buf, e.dt, kCpu, 3, shape));
    t.strides[0] = 1;  // a non-contiguous layout survives the trip
    DLTensor dl;
    ASSERT_TPDP_OK(tpdp_tensor_to_dlpack(&t, &dl));
    EXPECT_EQ(dl.data, buf);
    EXPECT_EQ(dl.device.device_type, kDLCPU);
    EXPECT_EQ(dl.device.device_id, 0);
    EXPECT_EQ(dl.ndim, 3);
    EXPECT_EQ(dl.dtype.code, e.code);
    EXPECT_EQ(dl.dtype.bits, e.bits);
    EXPECT_EQ(dl.dtype.lanes, 1);
    EXPECT_EQ(dl.byte_offset, 0u);
    EXPECT_EQ(dl.shape[0], 2);
    EXPECT_EQ(dl.shape[2], 4);
    EXPECT_EQ(dl.strides[0], 1);
    EXPECT_EQ(dl.strides[1], 4);
    EXPECT_EQ(dl.strides[2], 1);
    tpdp_tensor back;
    ASSERT_TPDP_OK(tpdp_tensor_from_dlpack(&dl, &back));
    EXPECT_EQ(back.data, t.data);
    EXPECT_EQ(back.dtype, e.dt);
    EXPECT_EQ(back.device.type, TPDP_DEVICE_CPU);
    EXPECT_EQ(back.ndim, 3);
    for (int d = 0; d < 3; d++) {
      EXPECT_EQ(back.shape[d], t.shape[d]);
      EXPECT_EQ(back.strides[d], t.strides[d]);
    }
  }
}

TEST(DLPack, CudaDeviceOffsetAndNullStrides) {
  int64_t shape[2] = {3, 5};
  DLTensor dl;
  std::memset(&dl, 0, sizeof dl);
  float buf[32];
  dl.data = buf;
  dl.device.device_type = kDLCUDA;
  dl.device.device_id = 2;
  dl.ndim = 2;
  dl.dtype.code = kDLFloat;
  dl.dtype.bits = 32;
  dl.dtype.lanes = 1;
  dl.shape = shape;
  dl.strides = nullptr;  // contiguous by definition
  dl.byte_offset = 8;    // two floats in
  tpdp_tensor t;
  ASSERT_TPDP_OK(tpdp_tensor_from_dlpack(&dl, &t));
  EXPECT_EQ(t.data, static_cast<void *>(buf + 2));
  EXPECT_EQ(t.device.type, TPDP_DEVICE_CUDA);
  EXPECT_EQ(t.device.index, 2);
  EXPECT_EQ(t.strides[0], 5);
  EXPECT_EQ(t.strides[1], 1);
  DLTensor again;
  ASSERT_TPDP_OK(tpdp_tensor_to_dlpack(&t, &again));
  EXPECT_EQ(again.device.device_type, kDLCUDA);
  EXPECT_EQ(again.device.device_id, 2);
  EXPECT_EQ(again.data, static_cast<void *>(buf + 2));

  // Scalars have ndim 0 and may have NULL shape.
  dl.ndim = 0;
  dl.shape = nullptr;
  dl.byte_offset = 0;
  ASSERT_TPDP_OK(tpdp_tensor_from_dlpack(&dl, &t));
  EXPECT_EQ(t.ndim, 0);
  EXPECT_EQ(tpdp_tensor_numel(&t), 1);
}

TEST(DLPack, RejectsWhatTpdpCannotRepresent) {
  int64_t shape[9] = {2, 1, 1, 1, 1, 1, 1, 1, 1};
  DLTensor base;
  std::memset(&base, 0, sizeof base);
  float buf[4];
  base.data = buf;
  base.device.device_type = kDLCPU;
  base.ndim = 1;
  base.dtype.code = kDLFloat;
  base.dtype.bits = 32;
  base.dtype.lanes = 1;
  base.shape = shape;
  tpdp_tensor t;

  const struct {
    uint8_t code;
    uint8_t bits;
  } bad_dtypes[] = {{kDLComplex, 64},      {kDLFloat, 8},    {kDLInt, 16},
                    {kDLInt, 8},           {kDLUInt, 32},    {kDLBfloat, 32},
                    {kDLOpaqueHandle, 64}, {6 /* bool */, 8}};
  for (const auto &b : bad_dtypes) {
    DLTensor dl = base;
    dl.dtype.code = b.code;
    dl.dtype.bits = b.bits;
    std::string code = "code " + std::to_string(b.code);
    std::string bits = "bits " + std::to_string(b.bits);
    EXPECT_TPDP_ERROR(tpdp_tensor_from_dlpack(&dl, &t), TPDP_ERR_DTYPE_MISMATCH,
                      "tpdp_tensor_from_dlpack", code.c_str(), bits.c_str());
  }
  DLTensor lanes = base;
  lanes.dtype.lanes = 4;
  EXPECT_TPDP_ERROR(tpdp_tensor_from_dlpack(&lanes, &t),
                    TPDP_ERR_DTYPE_MISMATCH, "4 lanes");
  const DLDeviceType bad_devices[] = {kDLCUDAHost, kDLOpenCL, kDLVulkan,
                                      kDLMetal,    kDLROCM,   kDLCUDAManaged};
  for (DLDeviceType d : bad_devices) {
    DLTensor dl = base;
    dl.device.device_type = d;
    std::string what = "device type " + std::to_string(static_cast<int>(d));
    EXPECT_TPDP_ERROR(tpdp_tensor_from_dlpack(&dl, &t),
                      TPDP_ERR_DEVICE_MISMATCH, what.c_str());
  }
  // Strides that put an element past int64 bytes: 2 rows 2^62 elements
  // apart are 2^64 bytes apart as f32.
  DLTensor far = base;
  int64_t far_strides[1] = {int64_t{1} << 62};
  far.strides = far_strides;
  EXPECT_TPDP_ERROR(tpdp_tensor_from_dlpack(&far, &t),
                    TPDP_ERR_INVALID_ARGUMENT,
                    "strides [4611686018427387904] of shape [2] overflow");
  int64_t back_strides[1] = {INT64_MIN};
  far.strides = back_strides;
  EXPECT_TPDP_ERROR(tpdp_tensor_from_dlpack(&far, &t),
                    TPDP_ERR_INVALID_ARGUMENT, "overflow");
  // Negative strides that stay in range are views like any other.
  int64_t rev_strides[1] = {-1};
  far.strides = rev_strides;
  EXPECT_TPDP_OK(tpdp_tensor_from_dlpack(&far, &t));
  DLTensor huge = base;
  int64_t huge_shape[2] = {INT64_MAX, 2};
  huge.ndim = 2;
  huge.shape = huge_shape;
  EXPECT_TPDP_ERROR(tpdp_tensor_from_dlpack(&huge, &t),
                    TPDP_ERR_INVALID_ARGUMENT, "overflows");
  DLTensor nine = base;
  nine.ndim = 9;
  EXPECT_TPDP_ERROR(tpdp_tensor_from_dlpack(&nine, &t), TPDP_ERR_TOO_MANY_DIMS,
                    "ndim 9");
  DLTensor noshape = base;
  noshape.shape = nullptr;
  EXPECT_TPDP_ERROR(tpdp_tensor_from_dlpack(&noshape, &t),
                    TPDP_ERR_NULL_POINTER, "shape");
  DLTensor odd = base;
  odd.byte_offset = 6;
  EXPECT_TPDP_ERROR(tpdp_tensor_from_dlpack(&odd, &t),
                    TPDP_ERR_INVALID_ARGUMENT, "byte_offset 6");
  EXPECT_TPDP_ERROR(tpdp_tensor_from_dlpack(nullptr, &t), TPDP_ERR_NULL_POINTER,
                    "'in'");
  EXPECT_TPDP_ERROR(tpdp_tensor_from_dlpack(&base, nullptr),
                    TPDP_ERR_NULL_POINTER, "'out'");
  DLTensor dl;
  EXPECT_TPDP_ERROR(tpdp_tensor_to_dlpack(nullptr, &dl), TPDP_ERR_NULL_POINTER,
                    "'t'");
  tpdp_tensor bad = tpdp_tensor_1d(buf, static_cast<tpdp_dtype>(11), 4);
  EXPECT_TPDP_ERROR(tpdp_tensor_to_dlpack(&bad, &dl), TPDP_ERR_DTYPE_MISMATCH,
                    "dtype 11");
}

}  // namespace
