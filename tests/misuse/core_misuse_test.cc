// SPDX-License-Identifier: BSD-3-Clause
// Misuse of include/tpdp/core.h: each case asserts the status and that the
// message names the function, the argument at fault and the values.
// Cases:
//  - tpdp_dtype_parse: unknown name (lists the known ones), NULL name
//  - tpdp_tensor_init: NULL out, ndim 9 and -1, NULL shape, invalid dtype,
//    negative size, int64 overflow of the byte size (also with a 0 dim),
//    empty shape accepted (no false error)
//  - tpdp_tensor_narrow: dim out of range, start/length past the end,
//    byte offset overflow of a hand-made stride
//  - tpdp_tensor_copy: shape, dtype and device mismatches, NULL data
//  - DLPack: NULL out, unsupported dtype and device, ndim > 8, unaligned
//    byte_offset, negative size
#include <cstdint>
#include <cstring>
#include <limits>

#include "tests/test_util.h"

namespace {

const tpdp_device kCpu = {TPDP_DEVICE_CPU, 0};
const tpdp_device kCuda0 = {TPDP_DEVICE_CUDA, 0};

TEST(CoreMisuse, DtypeParseUnknownNameListsTheKnownOnes) {
  tpdp_dtype d;
  EXPECT_TPDP_ERROR(tpdp_dtype_parse("float32", &d), TPDP_ERR_PARSE,
                    "tpdp_dtype_parse: ", "unknown dtype 'float32'",
                    "expected f32, f64, f16, bf16, i32, i64 or u8");
}

TEST(CoreMisuse, DtypeParseNullName) {
  tpdp_dtype d;
  EXPECT_TPDP_ERROR(tpdp_dtype_parse(nullptr, &d), TPDP_ERR_NULL_POINTER,
                    "tpdp_dtype_parse: ", "'name' is NULL");
}

TEST(CoreMisuse, TensorInitNullOut) {
  int64_t shape[1] = {4};
  EXPECT_TPDP_ERROR(
      tpdp_tensor_init(nullptr, nullptr, TPDP_F32, kCpu, 1, shape),
      TPDP_ERR_NULL_POINTER, "tpdp_tensor_init: ", "'out' is NULL");
}

TEST(CoreMisuse, TensorInitTooManyAndNegativeDims) {
  tpdp_tensor t;
  int64_t shape[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  EXPECT_TPDP_ERROR(tpdp_tensor_init(&t, nullptr, TPDP_F32, kCpu, 9, shape),
                    TPDP_ERR_TOO_MANY_DIMS, "ndim 9 outside [0, 8]");
  EXPECT_TPDP_ERROR(tpdp_tensor_init(&t, nullptr, TPDP_F32, kCpu, -1, shape),
                    TPDP_ERR_TOO_MANY_DIMS, "ndim -1 outside [0, 8]");
}

TEST(CoreMisuse, TensorInitNullShape) {
  tpdp_tensor t;
  EXPECT_TPDP_ERROR(tpdp_tensor_init(&t, nullptr, TPDP_F32, kCpu, 2, nullptr),
                    TPDP_ERR_NULL_POINTER, "'shape' is NULL");
}

TEST(CoreMisuse, TensorInitInvalidDtype) {
  tpdp_tensor t;
  int64_t shape[1] = {4};
  EXPECT_TPDP_ERROR(
      tpdp_tensor_init(&t, nullptr, (tpdp_dtype)42, kCpu, 1, shape),
      TPDP_ERR_DTYPE_MISMATCH, "invalid dtype 42");
}

TEST(CoreMisuse, TensorInitNegativeSizeNamesTheDim) {
  tpdp_tensor t;
  int64_t shape[2] = {3, -2};
  EXPECT_TPDP_ERROR(tpdp_tensor_init(&t, nullptr, TPDP_F32, kCpu, 2, shape),
                    TPDP_ERR_BAD_DIM_SIZE, "shape[1] = -2 is negative");
}

TEST(CoreMisuse, TensorInitHugeShapeOverflowsInsteadOfWrapping) {
  tpdp_tensor t;
  const int64_t big = std::numeric_limits<int64_t>::max();
  int64_t shape[2] = {big, big};
  EXPECT_TPDP_ERROR(tpdp_tensor_init(&t, nullptr, TPDP_F32, kCpu, 2, shape),
                    TPDP_ERR_INVALID_ARGUMENT,
                    "shape [9223372036854775807, 9223372036854775807] of f32 "
                    "overflows",
                    "above INT64_MAX");
  // 2^62 f32 elements: 2^64 bytes, the element count alone would fit.
  int64_t shape2[1] = {(int64_t)1 << 62};
  EXPECT_TPDP_ERROR(tpdp_tensor_init(&t, nullptr, TPDP_F32, kCpu, 1, shape2),
                    TPDP_ERR_INVALID_ARGUMENT, "of f32 overflows");
  // An empty dim does not make the other dims' strides fit.
  int64_t shape3[3] = {0, big, big};
  EXPECT_TPDP_ERROR(tpdp_tensor_init(&t, nullptr, TPDP_U8, kCpu, 3, shape3),
                    TPDP_ERR_INVALID_ARGUMENT, "of u8 overflows");
}

TEST(CoreMisuse, TensorInitEmptyShapeIsNotAnError) {
  tpdp_tensor t;
  int64_t shape[2] = {0, 5};
  ASSERT_TPDP_OK(tpdp_tensor_init(&t, nullptr, TPDP_F32, kCpu, 2, shape));
  EXPECT_EQ(tpdp_tensor_numel(&t), 0);
  EXPECT_EQ(tpdp_tensor_nbytes(&t), 0u);
}

TEST(CoreMisuse, NarrowDimOutOfRange) {
  float buf[6];
  int64_t shape[2] = {2, 3};
  tpdp_tensor t, v;
  ASSERT_TPDP_OK(tpdp_tensor_init(&t, buf, TPDP_F32, kCpu, 2, shape));
  EXPECT_TPDP_ERROR(
      tpdp_tensor_narrow(&t, 2, 0, 1, &v), TPDP_ERR_INVALID_ARGUMENT,
      "tpdp_tensor_narrow: ", "dim 2 outside [0, 2) of a 2-d tensor");
}

TEST(CoreMisuse, NarrowPastTheEnd) {
  float buf[6];
  int64_t shape[2] = {2, 3};
  tpdp_tensor t, v;
  ASSERT_TPDP_OK(tpdp_tensor_init(&t, buf, TPDP_F32, kCpu, 2, shape));
  EXPECT_TPDP_ERROR(tpdp_tensor_narrow(&t, 1, 2, 2, &v),
                    TPDP_ERR_INVALID_ARGUMENT,
                    "start 2 length 2 outside [0, 3] of dim 1");
  EXPECT_TPDP_ERROR(tpdp_tensor_narrow(&t, 0, -1, 1, &v),
                    TPDP_ERR_INVALID_ARGUMENT, "start -1 length 1");
}

TEST(CoreMisuse, NarrowByteOffsetOverflowOfHandMadeStride) {
  float buf[1];
  int64_t shape[1] = {4};
  tpdp_tensor t, v;
  ASSERT_TPDP_OK(tpdp_tensor_init(&t, buf, TPDP_F32, kCpu, 1, shape));
  t.strides[0] = std::numeric_limits<int64_t>::max() / 2;
  EXPECT_TPDP_ERROR(tpdp_tensor_narrow(&t, 0, 3, 1, &v),
                    TPDP_ERR_INVALID_ARGUMENT, "overflows",
                    "byte offset is outside int64");
}

TEST(CoreMisuse, CopyShapeMismatchNamesBothShapes) {
  float a[6], b[6];
  int64_t sa[2] = {2, 3}, sb[2] = {3, 2};
  tpdp_tensor ta, tb;
  ASSERT_TPDP_OK(tpdp_tensor_init(&ta, a, TPDP_F32, kCpu, 2, sa));
  ASSERT_TPDP_OK(tpdp_tensor_init(&tb, b, TPDP_F32, kCpu, 2, sb));
  EXPECT_TPDP_ERROR(
      tpdp_tensor_copy(&ta, &tb), TPDP_ERR_SHAPE_MISMATCH,
      "tpdp_tensor_copy: ", "dst shape [2, 3] != src shape [3, 2]");
}

TEST(CoreMisuse, CopyDtypeMismatchNamesBothDtypes) {
  float a[4];
  double b[4];
  int64_t s[1] = {4};
  tpdp_tensor ta, tb;
  ASSERT_TPDP_OK(tpdp_tensor_init(&ta, a, TPDP_F32, kCpu, 1, s));
  ASSERT_TPDP_OK(tpdp_tensor_init(&tb, b, TPDP_F64, kCpu, 1, s));
  EXPECT_TPDP_ERROR(tpdp_tensor_copy(&ta, &tb), TPDP_ERR_DTYPE_MISMATCH,
                    "dst dtype f32 != src dtype f64");
}

TEST(CoreMisuse, CopyDeviceMemoryWithoutCuda) {
  if (tpdp_nccl_available()) GTEST_SKIP() << "a --config=cuda build";
  float a[4], b[4];
  int64_t s[1] = {4};
  tpdp_tensor ta, tb;
  ASSERT_TPDP_OK(tpdp_tensor_init(&ta, a, TPDP_F32, kCuda0, 1, s));
  ASSERT_TPDP_OK(tpdp_tensor_init(&tb, b, TPDP_F32, kCpu, 1, s));
  EXPECT_TPDP_ERROR(tpdp_tensor_copy(&ta, &tb), TPDP_ERR_DEVICE_MISMATCH,
                    "device memory needs a build with --config=cuda");
}

TEST(CoreMisuse, CopyNullDataWithElements) {
  float b[4];
  int64_t s[1] = {4};
  tpdp_tensor ta, tb;
  ASSERT_TPDP_OK(tpdp_tensor_init(&ta, nullptr, TPDP_F32, kCpu, 1, s));
  ASSERT_TPDP_OK(tpdp_tensor_init(&tb, b, TPDP_F32, kCpu, 1, s));
  EXPECT_TPDP_ERROR(tpdp_tensor_copy(&ta, &tb), TPDP_ERR_NULL_POINTER,
                    "dst data is NULL with 4 elements");
}

TEST(CoreMisuse, ToDlpackNullOut) {
  float a[4];
  tpdp_tensor t = tpdp_tensor_1d(a, TPDP_F32, 4);
  EXPECT_TPDP_ERROR(tpdp_tensor_to_dlpack(&t, nullptr), TPDP_ERR_NULL_POINTER,
                    "tpdp_tensor_to_dlpack: ", "'out' is NULL");
}

// A DLTensor of one f32 dim of 4 elements on the CPU.
DLTensor Dl(float *data, int64_t *shape) {
  DLTensor d;
  std::memset(&d, 0, sizeof d);
  d.data = data;
  d.device.device_type = kDLCPU;
  d.ndim = 1;
  d.dtype.code = kDLFloat;
  d.dtype.bits = 32;
  d.dtype.lanes = 1;
  d.shape = shape;
  return d;
}

TEST(CoreMisuse, FromDlpackUnsupportedDtype) {
  float a[4];
  int64_t shape[1] = {4};
  DLTensor d = Dl(a, shape);
  d.dtype.code = kDLComplex;
  d.dtype.bits = 64;
  tpdp_tensor t;
  EXPECT_TPDP_ERROR(tpdp_tensor_from_dlpack(&d, &t), TPDP_ERR_DTYPE_MISMATCH,
                    "tpdp_tensor_from_dlpack: ");
  d = Dl(a, shape);
  d.dtype.lanes = 4;
  EXPECT_TPDP_ERROR(tpdp_tensor_from_dlpack(&d, &t), TPDP_ERR_DTYPE_MISMATCH,
                    "lanes");
}

TEST(CoreMisuse, FromDlpackUnsupportedDevice) {
  float a[4];
  int64_t shape[1] = {4};
  DLTensor d = Dl(a, shape);
  d.device.device_type = kDLMetal;
  tpdp_tensor t;
  EXPECT_TPDP_ERROR(tpdp_tensor_from_dlpack(&d, &t), TPDP_ERR_DEVICE_MISMATCH,
                    "device");
}

TEST(CoreMisuse, FromDlpackTooManyDims) {
  float a[1];
  int64_t shape[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  DLTensor d = Dl(a, shape);
  d.ndim = 9;
  tpdp_tensor t;
  EXPECT_TPDP_ERROR(tpdp_tensor_from_dlpack(&d, &t), TPDP_ERR_TOO_MANY_DIMS,
                    "DLPack ndim 9 outside [0, 8]");
}

TEST(CoreMisuse, FromDlpackUnalignedByteOffset) {
  float a[4];
  int64_t shape[1] = {3};
  DLTensor d = Dl(a, shape);
  d.byte_offset = 2;
  tpdp_tensor t;
  EXPECT_TPDP_ERROR(tpdp_tensor_from_dlpack(&d, &t), TPDP_ERR_INVALID_ARGUMENT,
                    "byte_offset 2");
}

TEST(CoreMisuse, FromDlpackNegativeSize) {
  float a[4];
  int64_t shape[1] = {-4};
  DLTensor d = Dl(a, shape);
  tpdp_tensor t;
  EXPECT_TPDP_ERROR(tpdp_tensor_from_dlpack(&d, &t), TPDP_ERR_BAD_DIM_SIZE,
                    "shape[0] = -4 is negative");
}

}  // namespace
