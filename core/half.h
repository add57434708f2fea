// SPDX-License-Identifier: BSD-3-Clause
/*
 * Internal: bf16 <-> f32 conversions inline, for the library's loops over
 * many elements (casts, reductions of 16-bit floats): the same results as
 * tpdp_bf16_to_f32 / tpdp_f32_to_bf16 (round to nearest even, a NaN kept
 * quiet), without a call per element, so that compilers can vectorize the
 * loops. f16 stays out of line (tpdp_f16_to_f32 / tpdp_f32_to_f16).
 * Not installed.
 */
#ifndef TPDP_CORE_HALF_H
#define TPDP_CORE_HALF_H

#include <stdint.h>
#include <string.h>

static inline float core_bf16_to_f32(uint16_t b) {
  uint32_t x = (uint32_t)b << 16;
  float f;
  memcpy(&f, &x, sizeof f);
  return f;
}

static inline uint16_t core_f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  if ((x & 0x7fffffffu) > 0x7f800000u) /* nan: keep it quiet */
    return (uint16_t)((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

#endif /* TPDP_CORE_HALF_H */
