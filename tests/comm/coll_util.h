// SPDX-License-Identifier: BSD-3-Clause
// Helpers for the collective tests: typed host buffers whose values are
// written and read through encoders written here (independent of tpdp's
// own f16/bf16 helpers), and the input pattern every test uses.
#ifndef TPDP_TESTS_COMM_COLL_UTIL_H
#define TPDP_TESTS_COMM_COLL_UTIL_H

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "tests/test_util.h"

namespace coll {

// Input of group rank g at element i: small integers so that sums over up
// to 4 ranks are exact in every dtype (u8 and bf16 included).
inline double In(int g, int64_t i) {
  return static_cast<double>((g * 7 + i) % 11);
}

// Exact encoders for values representable in the target format (the tests
// only use small integers and quarters).
inline uint16_t EncodeF16(double v) {
  if (v == 0) return std::signbit(v) ? 0x8000 : 0;
  uint16_t sign = v < 0 ? 0x8000 : 0;
  int e = 0;
  double m = std::frexp(std::fabs(v), &e);  // v = m * 2^e, m in [0.5, 1)
  int field = e - 1 + 15;                   // normal numbers only
  uint16_t mant = static_cast<uint16_t>((m * 2 - 1) * 1024);
  return static_cast<uint16_t>(sign | (field << 10) | mant);
}
inline double DecodeF16(uint16_t h) {
  int field = (h >> 10) & 0x1f, mant = h & 0x3ff;
  double mag =
      field == 0 ? std::ldexp(mant, -24) : std::ldexp(1024 + mant, field - 25);
  if (field == 0x1f) mag = mant ? NAN : INFINITY;
  return (h & 0x8000) ? -mag : mag;
}
inline uint16_t EncodeBF16(double v) {
  float f = static_cast<float>(v);
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return static_cast<uint16_t>(b >> 16);  // exact for the values used
}
inline double DecodeBF16(uint16_t h) {
  uint32_t b = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

class HostBuf {
 public:
  HostBuf(tpdp_dtype dt, int64_t n)
      : dt_(dt),
        n_(n),
        es_(tpdp_dtype_size(dt)),
        bytes_(static_cast<size_t>((n > 0 ? n : 1)) * es_, 0) {}
  tpdp_dtype dtype() const { return dt_; }
  int64_t size() const { return n_; }
  void *data() { return bytes_.data(); }
  char *at(int64_t i) {
    return reinterpret_cast<char *>(bytes_.data()) + i * es_;
  }
  const char *at(int64_t i) const {
    return reinterpret_cast<const char *>(bytes_.data()) + i * es_;
  }

  void Set(int64_t i, double v) {
    char *p = at(i);
    switch (dt_) {
      case TPDP_F32: {
        float x = static_cast<float>(v);
        std::memcpy(p, &x, 4);
        break;
      }
      case TPDP_F64:
        std::memcpy(p, &v, 8);
        break;
      case TPDP_F16: {
        uint16_t x = EncodeF16(v);
        std::memcpy(p, &x, 2);
        break;
      }
      case TPDP_BF16: {
        uint16_t x = EncodeBF16(v);
        std::memcpy(p, &x, 2);
        break;
      }
      case TPDP_I32: {
        int32_t x = static_cast<int32_t>(v);
        std::memcpy(p, &x, 4);
        break;
      }
      case TPDP_I64: {
        int64_t x = static_cast<int64_t>(v);
        std::memcpy(p, &x, 8);
        break;
      }
      case TPDP_U8: {
        uint8_t x = static_cast<uint8_t>(v);
        std::memcpy(p, &x, 1);
        break;
      }
      default:
        break;
    }
  }
  double Get(int64_t i) const {
    const char *p = at(i);
    switch (dt_) {
      case TPDP_F32: {
        float x;
        std::memcpy(&x, p, 4);
        return x;
      }
      case TPDP_F64: {
        double x;
        std::memcpy(&x, p, 8);
        return x;
      }
      case TPDP_F16: {
        uint16_t x;
        std::memcpy(&x, p, 2);
        return DecodeF16(x);
      }
      case TPDP_BF16: {
        uint16_t x;
        std::memcpy(&x, p, 2);
        return DecodeBF16(x);
      }
      case TPDP_I32: {
        int32_t x;
        std::memcpy(&x, p, 4);
        return x;
      }
      case TPDP_I64: {
        int64_t x;
        std::memcpy(&x, p, 8);
        return static_cast<double>(x);
      }
      case TPDP_U8: {
        uint8_t x;
        std::memcpy(&x, p, 1);
        return x;
      }
      default:
        return NAN;
    }
  }
  void Fill(double v) {
    for (int64_t i = 0; i < n_; i++) Set(i, v);
  }
  // Contiguous 1-D view of [off, off + count).
  tpdp_tensor View(int64_t off, int64_t count) {
    return tpdp_tensor_1d(at(off), dt_, count);
  }
  tpdp_tensor View() { return View(0, n_); }

 private:
  tpdp_dtype dt_;
  int64_t n_;
  size_t es_;
  std::vector<unsigned char> bytes_;
};

// Compares buf[off + i] with want(i) for i < count; one failure per call
// with the first differing index, so a million elements stay readable.
template <typename F>
::testing::AssertionResult Matches(const HostBuf &buf, int64_t off,
                                   int64_t count, F want) {
  int64_t bad = 0, first = -1;
  double got0 = 0, want0 = 0;
  for (int64_t i = 0; i < count; i++) {
    double w = want(i), g = buf.Get(off + i);
    if (g != w) {
      if (bad++ == 0) {
        first = i;
        got0 = g;
        want0 = w;
      }
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << count << " elements differ; first at " << first
         << ": got " << got0 << ", want " << want0;
}

// Expected result of reducing In(r, i) over ranks r < p with `op`.
inline double Reduce(tpdp_reduce_op op, tpdp_dtype dt, int p, int64_t i) {
  double acc = In(0, i);
  for (int r = 1; r < p; r++) {
    double x = In(r, i);
    if (op == TPDP_OP_SUM || op == TPDP_OP_AVG) acc += x;
    if (op == TPDP_OP_MAX) acc = x > acc ? x : acc;
    if (op == TPDP_OP_MIN) acc = x < acc ? x : acc;
  }
  if (op == TPDP_OP_AVG) {
    if (tpdp_dtype_is_float(dt))
      acc = acc / p;  // multiples of 1/p below 11: exact in every float type
    else
      acc = std::trunc(acc / p);  // integer division
  }
  return acc;
}

// Completes async work: polls tpdp_work_test until done (bounded), then
// waits. Returns the first failing status.
inline tpdp_status Finish(tpdp_work *work, int *polled_done) {
  int done = 0;
  tpdp_status st = TPDP_SUCCESS;
  for (long spins = 0; spins < 20000000 && !done; spins++) {
    st = tpdp_work_test(work, &done);
    if (st != TPDP_SUCCESS) break;
  }
  if (polled_done) *polled_done = done;
  tpdp_status st2 = tpdp_work_wait(work);
  return st != TPDP_SUCCESS ? st : st2;
}

inline const tpdp_dtype kDtypes[] = {TPDP_F32, TPDP_F64, TPDP_F16, TPDP_BF16,
                                     TPDP_I32, TPDP_I64, TPDP_U8};
inline const tpdp_reduce_op kOps[] = {TPDP_OP_SUM, TPDP_OP_AVG, TPDP_OP_MAX,
                                      TPDP_OP_MIN};

}  // namespace coll

#endif  // TPDP_TESTS_COMM_COLL_UTIL_H
