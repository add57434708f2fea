// SPDX-License-Identifier: BSD-3-Clause
// f16 / bf16 conversions checked against bit patterns worked out by hand
// from the IEEE 754 binary16 and bfloat16 layouts.
#include <cmath>
#include <cstring>
#include <vector>

#include "tests/test_util.h"

namespace {

float FromBits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

struct Case {
  float value;
  uint16_t bits;
};

TEST(F16, ExactValuesBothWays) {
  const Case k[] = {
      {0.0f, 0x0000},
      {1.0f, 0x3C00},
      {-2.0f, 0xC000},
      {0.5f, 0x3800},
      {1.5f, 0x3E00},
      {3.0f, 0x4200},
      {10.0f, 0x4900},
      {0.333251953125f, 0x3555},  // nearest f16 to 1/3
      {65504.0f, 0x7BFF},         // largest finite
      {-65504.0f, 0xFBFF},
      {std::ldexp(1.0f, -14), 0x0400},     // smallest normal
      {std::ldexp(1.0f, -24), 0x0001},     // smallest subnormal
      {std::ldexp(1.0f, -15), 0x0200},     // a subnormal
      {std::ldexp(1023.0f, -24), 0x03FF},  // largest subnormal
      {-std::ldexp(1.0f, -24), 0x8001},
      {INFINITY, 0x7C00},
      {-INFINITY, 0xFC00},
  };
  for (const Case &c : k) {
    EXPECT_EQ(tpdp_f32_to_f16(c.value), c.bits) << c.value;
    EXPECT_EQ(tpdp_f16_to_f32(c.bits), c.value) << std::hex << c.bits;
  }
  // Negative zero keeps its sign.
  EXPECT_EQ(tpdp_f32_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(Bits(tpdp_f16_to_f32(0x8000)), 0x80000000u);
}

TEST(F16, RoundToNearestEven) {
  // Between 1.0 (0x3C00) and 1 + 2^-10 (0x3C01) the midpoint is 1 + 2^-11.
  EXPECT_EQ(tpdp_f32_to_f16(1.0f + std::ldexp(1.0f, -11)),
            0x3C00);  // tie -> even
  EXPECT_EQ(tpdp_f32_to_f16(1.0f + std::ldexp(3.0f, -11)),
            0x3C02);  // tie -> even
  EXPECT_EQ(
      tpdp_f32_to_f16(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)),
      0x3C01);  // just above the midpoint
  EXPECT_EQ(tpdp_f32_to_f16(1.0f + std::ldexp(1.0f, -12)), 0x3C00);  // below
  EXPECT_EQ(tpdp_f32_to_f16(0.1f), 0x2E66);
  // Rounding up into the next binade: 2 - 2^-12 is above the midpoint of
  // 0x3FFF (2 - 2^-10) and 2.0.
  EXPECT_EQ(tpdp_f32_to_f16(2.0f - std::ldexp(1.0f, -12)), 0x4000);
  // Overflow: 65504 + 15 stays, the midpoint 65520 rounds (to even) to inf.
  EXPECT_EQ(tpdp_f32_to_f16(65519.0f), 0x7BFF);
  EXPECT_EQ(tpdp_f32_to_f16(65520.0f), 0x7C00);
  EXPECT_EQ(tpdp_f32_to_f16(1e6f), 0x7C00);
  EXPECT_EQ(tpdp_f32_to_f16(-1e6f), 0xFC00);
}

TEST(F16, SubnormalRounding) {
  // 2^-25 is halfway between 0 and 2^-24: ties to even gives 0.
  EXPECT_EQ(tpdp_f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(tpdp_f32_to_f16(-std::ldexp(1.0f, -25)), 0x8000);
  EXPECT_EQ(tpdp_f32_to_f16(std::ldexp(1.0f, -25) + std::ldexp(1.0f, -35)),
            0x0001);
  // 3 * 2^-25 is halfway between 0x0001 and 0x0002: even wins.
  EXPECT_EQ(tpdp_f32_to_f16(std::ldexp(3.0f, -25)), 0x0002);
  // 5 * 2^-25 is halfway between 0x0002 and 0x0003: even wins.
  EXPECT_EQ(tpdp_f32_to_f16(std::ldexp(5.0f, -25)), 0x0002);
  EXPECT_EQ(tpdp_f32_to_f16(std::ldexp(1.0f, -26)), 0x0000);
  EXPECT_EQ(tpdp_f32_to_f16(1e-8f), 0x0000);
  // An f32 subnormal is far below f16's range.
  EXPECT_EQ(tpdp_f32_to_f16(FromBits(0x00000001)), 0x0000);
  // 1023.5 * 2^-24 is halfway between 0x03FF (odd) and 0x0400: rounds up
  // into the smallest normal.
  EXPECT_EQ(tpdp_f32_to_f16(std::ldexp(2047.0f, -25)), 0x0400);
}

TEST(F16, NanStaysNan) {
  EXPECT_EQ(tpdp_f32_to_f16(NAN) & 0x7C00, 0x7C00);
  EXPECT_NE(tpdp_f32_to_f16(NAN) & 0x03FF, 0);
  // A signalling nan whose payload lives only in the low bits must not
  // become inf.
  uint16_t h = tpdp_f32_to_f16(FromBits(0x7F800001));
  EXPECT_EQ(h & 0x7C00, 0x7C00);
  EXPECT_NE(h & 0x03FF, 0);
  EXPECT_TRUE(std::isnan(tpdp_f16_to_f32(0x7E00)));
  EXPECT_TRUE(std::isnan(tpdp_f16_to_f32(0x7C01)));
  EXPECT_TRUE(std::isnan(tpdp_f16_to_f32(0xFE00)));
}

TEST(F16, EveryHalfSurvivesARoundTrip) {
  // Each of the 2^16 patterns (nan aside) converts to f32 and back exactly.
  int bad = 0;
  for (uint32_t h = 0; h < 0x10000; h++) {
    if ((h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0) continue;
    if (tpdp_f32_to_f16(tpdp_f16_to_f32(static_cast<uint16_t>(h))) != h) bad++;
  }
  EXPECT_EQ(bad, 0);
}

TEST(BF16, ExactValuesBothWays) {
  const Case k[] = {
      {0.0f, 0x0000},
      {1.0f, 0x3F80},
      {-2.0f, 0xC000},
      {0.5f, 0x3F00},
      {3.140625f, 0x4049},
      {10.0f, 0x4120},
      {INFINITY, 0x7F80},
      {-INFINITY, 0xFF80},
      {FromBits(0x7F7F0000), 0x7F7F},    // largest finite bf16
      {std::ldexp(1.0f, -126), 0x0080},  // smallest normal
      {std::ldexp(1.0f, -133), 0x0001},  // smallest subnormal
  };
  for (const Case &c : k) {
    EXPECT_EQ(tpdp_f32_to_bf16(c.value), c.bits) << c.value;
    EXPECT_EQ(tpdp_bf16_to_f32(c.bits), c.value) << std::hex << c.bits;
  }
  EXPECT_EQ(tpdp_f32_to_bf16(-0.0f), 0x8000);
}

TEST(BF16, RoundToNearestEven) {
  // Between 1.0 (0x3F80) and 1 + 2^-7 (0x3F81) the midpoint is 1 + 2^-8.
  EXPECT_EQ(tpdp_f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);
  EXPECT_EQ(tpdp_f32_to_bf16(1.0f + std::ldexp(3.0f, -8)), 0x3F82);
  EXPECT_EQ(
      tpdp_f32_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)),
      0x3F81);
  EXPECT_EQ(tpdp_f32_to_bf16(FromBits(0x3F80FFFF)), 0x3F81);
  EXPECT_EQ(tpdp_f32_to_bf16(FromBits(0x3F807FFF)), 0x3F80);
  // Largest f32 rounds up to inf; f32 subnormals round like the rest.
  EXPECT_EQ(tpdp_f32_to_bf16(FromBits(0x7F7FFFFF)), 0x7F80);
  EXPECT_EQ(tpdp_f32_to_bf16(FromBits(0x00008000)), 0x0000);  // tie -> even 0
  EXPECT_EQ(tpdp_f32_to_bf16(FromBits(0x00018000)), 0x0002);  // tie -> even 2
  EXPECT_EQ(tpdp_f32_to_bf16(FromBits(0x00000001)), 0x0000);
  EXPECT_EQ(tpdp_f32_to_bf16(FromBits(0x80008001)), 0x8001);
}

TEST(BF16, NanStaysQuietNan) {
  EXPECT_EQ(tpdp_f32_to_bf16(FromBits(0x7FC00000)), 0x7FC0);
  // Signalling nan with payload only in the low half: must stay nan.
  uint16_t b = tpdp_f32_to_bf16(FromBits(0x7F800001));
  EXPECT_EQ(b & 0x7F80, 0x7F80);
  EXPECT_NE(b & 0x007F, 0);
  // A nan whose rounding would carry must not turn into inf or wrap.
  b = tpdp_f32_to_bf16(FromBits(0x7FFFFFFF));
  EXPECT_TRUE(std::isnan(tpdp_bf16_to_f32(b)));
  EXPECT_TRUE(std::isnan(tpdp_bf16_to_f32(0xFFC1)));
}

// The bulk conversion rounds every element as the scalar functions (whose
// bit patterns the tests above check): all 65536 16-bit patterns widened,
// and floats around every rounding boundary (each half-way point and its
// neighbours, inf, nan, subnormals) narrowed, in both directions and
// between bf16 and f16; the same dtype copies; bad input refused.
TEST(Bulk, ConvertFloatsMatchesTheScalarConversions) {
  std::vector<uint16_t> all(65536);
  for (uint32_t b = 0; b < 65536; b++) all[b] = (uint16_t)b;
  std::vector<float> wide(65536);
  for (tpdp_dtype dt : {TPDP_BF16, TPDP_F16}) {
    ASSERT_TPDP_OK(
        tpdp_convert_floats(wide.data(), TPDP_F32, all.data(), dt, 65536));
    for (uint32_t b = 0; b < 65536; b++) {
      float want = dt == TPDP_BF16 ? tpdp_bf16_to_f32((uint16_t)b)
                                   : tpdp_f16_to_f32((uint16_t)b);
      ASSERT_EQ(Bits(wide[b]), Bits(want)) << tpdp_dtype_name(dt) << " " << b;
    }
  }
  std::vector<float> f;
  for (uint32_t b = 0; b < 65536; b += 7) {
    uint32_t mid = (uint32_t)b << 16 | 0x8000u;  // a bf16 half-way point
    for (uint32_t d : {0u, 1u, 0xffffffffu}) f.push_back(FromBits(mid + d));
    f.push_back(tpdp_f16_to_f32((uint16_t)b) * (1.0f + 1.0f / 4096));
  }
  f.push_back(INFINITY);
  f.push_back(-INFINITY);
  f.push_back(NAN);
  f.push_back(std::ldexp(1.0f, -140));
  std::vector<uint16_t> narrow(f.size()), cross(f.size());
  for (tpdp_dtype dt : {TPDP_BF16, TPDP_F16}) {
    ASSERT_TPDP_OK(tpdp_convert_floats(narrow.data(), dt, f.data(), TPDP_F32,
                                       (int64_t)f.size()));
    for (size_t k = 0; k < f.size(); k++) {
      uint16_t want =
          dt == TPDP_BF16 ? tpdp_f32_to_bf16(f[k]) : tpdp_f32_to_f16(f[k]);
      ASSERT_EQ(narrow[k], want) << tpdp_dtype_name(dt) << " " << k;
    }
    tpdp_dtype other = dt == TPDP_BF16 ? TPDP_F16 : TPDP_BF16;
    ASSERT_TPDP_OK(tpdp_convert_floats(cross.data(), other, narrow.data(), dt,
                                       (int64_t)f.size()));
    for (size_t k = 0; k < f.size(); k++) {
      float x = dt == TPDP_BF16 ? tpdp_bf16_to_f32(narrow[k])
                                : tpdp_f16_to_f32(narrow[k]);
      uint16_t want =
          other == TPDP_BF16 ? tpdp_f32_to_bf16(x) : tpdp_f32_to_f16(x);
      ASSERT_EQ(cross[k], want) << tpdp_dtype_name(dt) << " to other " << k;
    }
  }
  std::vector<float> copy(f.size());
  ASSERT_TPDP_OK(tpdp_convert_floats(copy.data(), TPDP_F32, f.data(), TPDP_F32,
                                     (int64_t)f.size()));
  EXPECT_EQ(std::memcmp(copy.data(), f.data(), f.size() * sizeof(float)), 0);
  double d = 0;
  EXPECT_TPDP_ERROR(tpdp_convert_floats(&d, TPDP_F64, f.data(), TPDP_F32, 1),
                    TPDP_ERR_DTYPE_MISMATCH, "not f32 to f64");
  EXPECT_TPDP_ERROR(
      tpdp_convert_floats(nullptr, TPDP_F32, f.data(), TPDP_F32, 1),
      TPDP_ERR_NULL_POINTER, "dst");
  EXPECT_TPDP_ERROR(
      tpdp_convert_floats(copy.data(), TPDP_F32, f.data(), TPDP_F32, -1),
      TPDP_ERR_INVALID_ARGUMENT, "negative count -1");
  EXPECT_TPDP_OK(tpdp_convert_floats(nullptr, TPDP_F32, nullptr, TPDP_F32, 0));
}

}  // namespace
