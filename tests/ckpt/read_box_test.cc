// SPDX-License-Identifier: BSD-3-Clause
// tpdp_safetensors_read_box: boxes of tensors seen in row-major views, read
// from a file this test writes byte by byte (its own header, its own f16
// and bf16 encodings), so that every expected value comes from the test's
// formulas and not from the library's reader. Then the misuse cases
// (bad views and boxes, unknown names, dtypes that do not convert, NULLs),
// each asserting the status and the message.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tests/ckpt/st_craft.h"
#include "tests/test_util.h"
#include "tpdp/checkpoint.h"

namespace {

const tpdp_device kCpu = {TPDP_DEVICE_CPU, 0};

// Element k of each tensor (all exact in its dtype).
float F32At(int64_t k) { return 0.5f * (float)k - 3.0f; }    // w32 [4, 6]
float F16At(int64_t k) { return (float)k - 10.0f; }          // w16 [2, 3, 4]
float Bf16At(int64_t k) { return 0.25f * (float)k - 2.0f; }  // wbf [6, 4]

// IEEE half of a float that is exactly representable as a normal half (or
// zero): sign, rebiased exponent, top 10 mantissa bits.
uint16_t Half(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  uint16_t sign = (uint16_t)((b >> 16) & 0x8000);
  if ((b & 0x7fffffff) == 0) return sign;
  int e = (int)((b >> 23) & 0xff) - 127 + 15;
  return (uint16_t)(sign | (e << 10) | ((b >> 13) & 0x3ff));
}

// bfloat16: the top half of the float (exact for these values).
uint16_t Bf16(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return (uint16_t)(b >> 16);
}

void Put16(std::vector<unsigned char> *d, uint16_t v) {
  d->push_back((unsigned char)(v & 0xff));
  d->push_back((unsigned char)(v >> 8));
}

// The file: w32 F32 [4, 6], w16 F16 [2, 3, 4], wbf BF16 [6, 4], ids I32
// [3], one F32 [1].
std::string WriteFile() {
  std::vector<unsigned char> data;
  auto put = [&data](const void *p, size_t n) {
    data.insert(data.end(), (const unsigned char *)p,
                (const unsigned char *)p + n);
  };
  for (int k = 0; k < 24; k++) {
    float v = F32At(k);
    put(&v, 4);
  }
  for (int k = 0; k < 24; k++) Put16(&data, Half(F16At(k)));
  for (int k = 0; k < 24; k++) Put16(&data, Bf16(Bf16At(k)));
  for (int32_t k : {7, 8, 9}) put(&k, 4);
  float one = 42.0f;
  put(&one, 4);
  return tpdp_test::Craft(
      "read_box",
      R"({"w32":{"dtype":"F32","shape":[4,6],"data_offsets":[0,96]},)"
      R"("w16":{"dtype":"F16","shape":[2,3,4],"data_offsets":[96,144]},)"
      R"("wbf":{"dtype":"BF16","shape":[6,4],"data_offsets":[144,192]},)"
      R"("ids":{"dtype":"I32","shape":[3],"data_offsets":[192,204]},)"
      R"("one":{"dtype":"F32","shape":[1],"data_offsets":[204,208]}})",
      data);
}

class ReadBox : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = WriteFile();
    ASSERT_TPDP_OK(tpdp_safetensors_open(path_.c_str(), &f_));
  }
  void TearDown() override { EXPECT_TPDP_OK(tpdp_safetensors_close(f_)); }
  int Index(const char *name) {
    int i = -1;
    EXPECT_TPDP_OK(tpdp_safetensors_find(f_, name, &i));
    return i;
  }
  std::string path_;
  tpdp_safetensors *f_ = nullptr;
};

// A host tensor of `shape` over `v` (resized, filled with a sentinel).
tpdp_tensor Dst(std::vector<float> *v, std::vector<int64_t> shape,
                tpdp_dtype dtype = TPDP_F32) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  v->assign((size_t)(n > 0 ? n : 1), -99.0f);
  tpdp_tensor t;
  EXPECT_TPDP_OK(tpdp_tensor_init(&t, v->data(), dtype, kCpu, (int)shape.size(),
                                  shape.data()));
  return t;
}

TEST_F(ReadBox, WholeTensorsInTheirOwnShapeConvertToF32) {
  std::vector<float> v;
  int64_t zero[3] = {0, 0, 0};
  const struct {
    const char *name;
    std::vector<int64_t> shape;
    float (*at)(int64_t);
  } cases[] = {{"w32", {4, 6}, F32At},
               {"w16", {2, 3, 4}, F16At},
               {"wbf", {6, 4}, Bf16At}};
  for (const auto &c : cases) {
    tpdp_tensor d = Dst(&v, c.shape);
    ASSERT_TPDP_OK(tpdp_safetensors_read_box(
        f_, Index(c.name), (int)c.shape.size(), c.shape.data(), zero, &d));
    for (int64_t k = 0; k < 24; k++) EXPECT_EQ(v[k], c.at(k)) << c.name << k;
  }
}

TEST_F(ReadBox, ABoxOfTheStoredShape) {
  // Rows 1-2, columns 2-4 of w32 [4, 6].
  std::vector<float> v;
  int64_t view[2] = {4, 6}, off[2] = {1, 2};
  tpdp_tensor d = Dst(&v, {2, 3});
  ASSERT_TPDP_OK(tpdp_safetensors_read_box(f_, Index("w32"), 2, view, off, &d));
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++)
      EXPECT_EQ(v[i * 3 + j], F32At((1 + i) * 6 + 2 + j)) << i << "," << j;
}

TEST_F(ReadBox, ABoxOfAView) {
  // w32 [4, 6] seen as [4, 2, 3] (as a [C, 3C] weight is seen as [C, 3, C]
  // per head): the second of the two blocks of every row.
  std::vector<float> v;
  int64_t view[3] = {4, 2, 3}, off[3] = {0, 1, 0};
  tpdp_tensor d = Dst(&v, {4, 1, 3});
  ASSERT_TPDP_OK(tpdp_safetensors_read_box(f_, Index("w32"), 3, view, off, &d));
  for (int a = 0; a < 4; a++)
    for (int c = 0; c < 3; c++)
      EXPECT_EQ(v[a * 3 + c], F32At(a * 6 + 3 + c)) << a << "," << c;
  // w16 [2, 3, 4] seen as [6, 4]: rows 2-5, columns 1-2.
  int64_t view2[2] = {6, 4}, off2[2] = {2, 1};
  d = Dst(&v, {4, 2});
  ASSERT_TPDP_OK(
      tpdp_safetensors_read_box(f_, Index("w16"), 2, view2, off2, &d));
  for (int r = 0; r < 4; r++)
    for (int c = 0; c < 2; c++)
      EXPECT_EQ(v[r * 2 + c], F16At((2 + r) * 4 + 1 + c)) << r << "," << c;
}

TEST_F(ReadBox, IntoF64AndIntoAStridedDestination) {
  // wbf [6, 4] rows 3-5 into f64.
  std::vector<double> v64(3 * 4, -1.0);
  int64_t view[2] = {6, 4}, off[2] = {3, 0}, shape[2] = {3, 4};
  tpdp_tensor d;
  ASSERT_TPDP_OK(tpdp_tensor_init(&d, v64.data(), TPDP_F64, kCpu, 2, shape));
  ASSERT_TPDP_OK(tpdp_safetensors_read_box(f_, Index("wbf"), 2, view, off, &d));
  for (int k = 0; k < 12; k++) EXPECT_EQ(v64[k], (double)Bf16At(12 + k)) << k;
  // Columns 1-2 of wbf into the first two columns of a 6 x 5 buffer.
  std::vector<float> big(30, -7.0f);
  int64_t bs[2] = {6, 5}, off2[2] = {0, 1};
  tpdp_tensor b;
  ASSERT_TPDP_OK(tpdp_tensor_init(&b, big.data(), TPDP_F32, kCpu, 2, bs));
  b.shape[1] = 2;  // strides stay {5, 1}
  ASSERT_TPDP_OK(
      tpdp_safetensors_read_box(f_, Index("wbf"), 2, view, off2, &b));
  for (int r = 0; r < 6; r++)
    for (int c = 0; c < 5; c++)
      EXPECT_EQ(big[r * 5 + c], c < 2 ? Bf16At(r * 4 + 1 + c) : -7.0f)
          << r << "," << c;
}

TEST_F(ReadBox, EmptyBoxesAndAScalarView) {
  std::vector<float> v;
  int64_t view[2] = {4, 6}, off[2] = {4, 0};
  tpdp_tensor d = Dst(&v, {0, 6});
  EXPECT_TPDP_OK(tpdp_safetensors_read_box(f_, Index("w32"), 2, view, off, &d));
  EXPECT_EQ(v[0], -99.0f);
  // "one" [1] seen as a 0-dim scalar; shape and offset may be NULL.
  d = Dst(&v, {});
  ASSERT_TPDP_OK(
      tpdp_safetensors_read_box(f_, Index("one"), 0, nullptr, nullptr, &d));
  EXPECT_EQ(v[0], 42.0f);
}

// ------------------------------------------------------------------ misuse

TEST_F(ReadBox, MisuseBadBoxes) {
  std::vector<float> v;
  int64_t view[2] = {4, 6}, off[2] = {3, 0}, neg[2] = {-1, 0};
  tpdp_tensor d = Dst(&v, {2, 6});
  const std::string file = "file '" + path_ + "': tensor 'w32': ";
  EXPECT_TPDP_ERROR(
      tpdp_safetensors_read_box(f_, Index("w32"), 2, view, off, &d),
      TPDP_ERR_INVALID_ARGUMENT, "tpdp_safetensors_read_box: ", file.c_str(),
      "the box of shape [2, 6] (the destination's) at offset [3, 0] leaves "
      "the view [4, 6] in dim 0");
  EXPECT_TPDP_ERROR(
      tpdp_safetensors_read_box(f_, Index("w32"), 2, view, neg, &d),
      TPDP_ERR_INVALID_ARGUMENT, "at offset [-1, 0] leaves the view [4, 6]");
  int64_t wide[2] = {0, 1};
  d = Dst(&v, {1, 6});
  EXPECT_TPDP_ERROR(
      tpdp_safetensors_read_box(f_, Index("w32"), 2, view, wide, &d),
      TPDP_ERR_INVALID_ARGUMENT,
      "the box of shape [1, 6] (the destination's) at offset [0, 1] leaves "
      "the view [4, 6] in dim 1");
  EXPECT_EQ(v[0], -99.0f);  // nothing read
}

TEST_F(ReadBox, MisuseViews) {
  std::vector<float> v;
  int64_t off[3] = {0, 0, 0};
  tpdp_tensor d = Dst(&v, {1, 1});
  int64_t five[2] = {5, 5};
  EXPECT_TPDP_ERROR(
      tpdp_safetensors_read_box(f_, Index("w32"), 2, five, off, &d),
      TPDP_ERR_SHAPE_MISMATCH,
      "tensor 'w32' has shape [4, 6] (24 elements) but the view [5, 5] has 25");
  int64_t negview[2] = {-4, -6};
  EXPECT_TPDP_ERROR(
      tpdp_safetensors_read_box(f_, Index("w32"), 2, negview, off, &d),
      TPDP_ERR_BAD_DIM_SIZE,
      "tensor 'w32': view [-4, -6] has a negative size or overflows");
  int64_t view3[3] = {4, 2, 3};
  EXPECT_TPDP_ERROR(
      tpdp_safetensors_read_box(f_, Index("w32"), 3, view3, off, &d),
      TPDP_ERR_SHAPE_MISMATCH,
      "tensor 'w32': the destination has 2 dims but the view [4, 2, 3] has 3");
  int64_t nine[9] = {24, 1, 1, 1, 1, 1, 1, 1, 1};
  EXPECT_TPDP_ERROR(
      tpdp_safetensors_read_box(f_, Index("w32"), 9, nine, off, &d),
      TPDP_ERR_TOO_MANY_DIMS, "tensor 'w32': view_ndim 9 outside [0, 8]");
}

TEST_F(ReadBox, MisuseUnknownNamesAndDtypes) {
  int i = 12345;
  const std::string unknown =
      "file '" + path_ + "' has no tensor 'h.0.attn.c_attn.weight'";
  EXPECT_TPDP_ERROR(tpdp_safetensors_find(f_, "h.0.attn.c_attn.weight", &i),
                    TPDP_ERR_NOT_FOUND,
                    "tpdp_safetensors_find: ", unknown.c_str());
  EXPECT_EQ(i, 12345);
  std::vector<float> v;
  int64_t view[1] = {3}, off[1] = {0};
  tpdp_tensor d = Dst(&v, {3});
  const std::string dtype =
      "file '" + path_ +
      "': tensor 'ids' is I32 and cannot convert to the destination's f32";
  EXPECT_TPDP_ERROR(
      tpdp_safetensors_read_box(f_, Index("ids"), 1, view, off, &d),
      TPDP_ERR_DTYPE_MISMATCH, dtype.c_str());
  EXPECT_TPDP_ERROR(tpdp_safetensors_read_box(f_, 5, 1, view, off, &d),
                    TPDP_ERR_INVALID_ARGUMENT, "tensor 5 outside [0, 5) of '",
                    path_.c_str());
}

TEST_F(ReadBox, MisuseNulls) {
  std::vector<float> v;
  int64_t view[2] = {4, 6}, off[2] = {0, 0};
  tpdp_tensor d = Dst(&v, {4, 6});
  EXPECT_TPDP_ERROR(tpdp_safetensors_read_box(nullptr, 0, 2, view, off, &d),
                    TPDP_ERR_NULL_POINTER,
                    "tpdp_safetensors_read_box: argument 'f' is NULL");
  EXPECT_TPDP_ERROR(
      tpdp_safetensors_read_box(f_, Index("w32"), 2, view, off, nullptr),
      TPDP_ERR_NULL_POINTER, "argument 'dst' is NULL");
  EXPECT_TPDP_ERROR(
      tpdp_safetensors_read_box(f_, Index("w32"), 2, nullptr, off, &d),
      TPDP_ERR_NULL_POINTER, "argument 'view_shape' is NULL");
  EXPECT_TPDP_ERROR(
      tpdp_safetensors_read_box(f_, Index("w32"), 2, view, nullptr, &d),
      TPDP_ERR_NULL_POINTER, "argument 'offset' is NULL");
  d.data = nullptr;
  EXPECT_TPDP_ERROR(
      tpdp_safetensors_read_box(f_, Index("w32"), 2, view, off, &d),
      TPDP_ERR_NULL_POINTER,
      "tensor 'w32': the destination has NULL data and 24 elements");
}

}  // namespace
