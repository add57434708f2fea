// SPDX-License-Identifier: BSD-3-Clause
// The safetensors reader (ckpt/safetensors.c) on hand-crafted files: a
// valid file read and converted, then every malformed header refused with
// a message naming the file and the tensor, never a crash or a read
// outside the file (run under ASan in CI).
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tests/ckpt/st_craft.h"
#include "tests/test_util.h"
#include "tpdp/checkpoint.h"

namespace {

using tpdp_test::Craft;

const tpdp_device kCpu = {TPDP_DEVICE_CPU, 0};

std::vector<unsigned char> Floats(std::vector<float> v) {
  std::vector<unsigned char> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

const char *kA = R"("a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]})";

TEST(Safetensors, ReadsAValidFileAndConverts) {
  std::string p = Craft(
      "valid",
      std::string("{\"__metadata__\":{\"format\":\"pt\"},") + kA +
          R"(,"b":{"dtype":"BF16","shape":[3],"data_offsets":[16,22]}}   )",
      [] {
        std::vector<unsigned char> d = Floats({1.5f, -2, 0.25f, 8});
        for (uint16_t h : {0x3F80, 0xC000, 0x4040}) {  // 1, -2, 3 in bf16
          d.push_back((unsigned char)(h & 0xFF));
          d.push_back((unsigned char)(h >> 8));
        }
        return d;
      }());
  tpdp_safetensors *f = nullptr;
  ASSERT_TPDP_OK(tpdp_safetensors_open(p.c_str(), &f));
  EXPECT_EQ(tpdp_safetensors_count(f), 2);
  EXPECT_STREQ(tpdp_safetensors_meta(f, "format"), "pt");
  EXPECT_EQ(tpdp_safetensors_meta(f, "nope"), nullptr);
  int i = -1;
  ASSERT_TPDP_OK(tpdp_safetensors_find(f, "b", &i));
  tpdp_safetensors_tensor t;
  ASSERT_TPDP_OK(tpdp_safetensors_tensor_at(f, i, &t));
  EXPECT_EQ(t.dtype, TPDP_BF16);
  EXPECT_EQ(t.ndim, 1);
  EXPECT_EQ(t.shape[0], 3);
  EXPECT_EQ(t.nbytes, 6u);
  // The data starts after the 8-byte length and the header.
  size_t hl =
      std::string("{\"__metadata__\":{\"format\":\"pt\"},").size() +
      std::strlen(kA) +
      std::string(
          R"(,"b":{"dtype":"BF16","shape":[3],"data_offsets":[16,22]}}   )")
          .size();
  EXPECT_EQ(t.offset, 8 + hl + 16);
  float b[3];
  tpdp_tensor tb = tpdp_tensor_1d(b, TPDP_F32, 3);
  ASSERT_TPDP_OK(tpdp_safetensors_read(f, i, &tb));
  EXPECT_EQ(b[0], 1.0f);
  EXPECT_EQ(b[1], -2.0f);
  EXPECT_EQ(b[2], 3.0f);
  // a (F32 [2, 2]) into a strided f64 view: every other element of 8.
  double a[8] = {0};
  tpdp_tensor ta;
  int64_t shape[2] = {2, 2};
  ASSERT_TPDP_OK(tpdp_tensor_init(&ta, a, TPDP_F64, kCpu, 2, shape));
  ta.strides[0] = 4;
  ta.strides[1] = 2;
  ASSERT_TPDP_OK(tpdp_safetensors_find(f, "a", &i));
  ASSERT_TPDP_OK(tpdp_safetensors_read(f, i, &ta));
  EXPECT_EQ(a[0], 1.5);
  EXPECT_EQ(a[2], -2.0);
  EXPECT_EQ(a[4], 0.25);
  EXPECT_EQ(a[6], 8.0);
  EXPECT_EQ(a[1], 0.0);
  int32_t ints[4];
  tpdp_tensor ti;
  ASSERT_TPDP_OK(tpdp_tensor_init(&ti, ints, TPDP_I32, kCpu, 2, shape));
  EXPECT_TPDP_ERROR(tpdp_safetensors_read(f, i, &ti), TPDP_ERR_DTYPE_MISMATCH,
                    "valid.safetensors", "'a'", "F32", "i32");
  EXPECT_TPDP_ERROR(tpdp_safetensors_find(f, "c", &i), TPDP_ERR_NOT_FOUND,
                    "'c'");
  tpdp_safetensors_close(f);
}

struct Bad {
  const char *name;
  std::string header;
  std::vector<unsigned char> data;
  tpdp_status status;
  std::vector<const char *> needles;
  long long len = -1;
};

TEST(Safetensors, RefusesMalformedFilesNamingFileAndTensor) {
  std::vector<unsigned char> d16(16, 0), d24(24, 0), d20(20, 0);
  const std::string o = "{", c = "}";
  std::vector<Bad> cases = {
      {"pastend",
       o + kA + c,
       d16,
       TPDP_ERR_IO,
       {"pastend", "past the end"},
       1000},
      {"tinylen", "{", d16, TPDP_ERR_PARSE, {"tinylen", "outside [2,"}, 1},
      {"notjson",
       "{\"a\":",
       d16,
       TPDP_ERR_PARSE,
       {"notjson", "not valid JSON"}},
      {"array", "[1, 2]", {}, TPDP_ERR_PARSE, {"array", "not a JSON object"}},
      {"trailing",
       o + kA + c + " x",
       d16,
       TPDP_ERR_PARSE,
       {"trailing", "not padding"}},
      {"nodtype",
       R"({"a":{"shape":[2],"data_offsets":[0,8]}})",
       d16,
       TPDP_ERR_PARSE,
       {"nodtype", "'a'", "\"dtype\" missing"}},
      {"unknown",
       R"({"a":{"dtype":"F33","shape":[4],"data_offsets":[0,16]}})",
       d16,
       TPDP_ERR_PARSE,
       {"unknown.safetensors", "'a'", "unknown dtype 'F33'"}},
      {"subbyte",
       R"({"q":{"dtype":"F4","shape":[16],"data_offsets":[0,8]}})",
       d16,
       TPDP_ERR_PARSE,
       {"subbyte.safetensors", "'q'", "unsupported dtype 'F4'"}},
      {"ninedims",
       R"({"a":{"dtype":"U8","shape":[1,1,1,1,1,1,1,1,16],"data_offsets":[0,16]}})",
       d16,
       TPDP_ERR_PARSE,
       {"ninedims", "'a'", "9 dims"}},
      {"negdim",
       R"({"a":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})",
       d16,
       TPDP_ERR_PARSE,
       {"negdim", "'a'", "shape[0]"}},
      {"fracdim",
       R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,16]}})",
       d16,
       TPDP_ERR_PARSE,
       {"fracdim", "'a'", "shape[0]"}},
      {"overflow",
       R"({"big":{"dtype":"F32","shape":[4294967296,4294967296,8],"data_offsets":[0,16]}})",
       d16,
       TPDP_ERR_PARSE,
       {"overflow", "'big'", "shape [4294967296, 4294967296, 8] of F32",
        "overflows"}},
      // A zero size does not excuse the others: the strides of [0, 2^40,
      // 2^40] overflow (found by tests/fuzz/safetensors_fuzz).
      {"emptyhuge",
       R"({"e":{"dtype":"F32","shape":[0,1099511627776,1099511627776],"data_offsets":[0,0]}})",
       {},
       TPDP_ERR_PARSE,
       {"emptyhuge", "'e'", "shape [0, 1099511627776, 1099511627776] of F32",
        "overflows"}},
      {"hugedim",
       R"({"big":{"dtype":"F32","shape":[1e300],"data_offsets":[0,16]}})",
       d16,
       TPDP_ERR_PARSE,
       {"hugedim", "'big'", "shape[0]"}},
      {"liar",
       R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
       d16,
       TPDP_ERR_IO,
       {"liar", "'a'", "past the data area"}},
      {"truncated",
       o + kA + c,
       {1, 2, 3, 4, 5, 6, 7, 8, 9, 10},
       TPDP_ERR_IO,
       {"truncated.safetensors", "'a'", "truncated"}},
      {"wrongsize",
       R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}})",
       d16,
       TPDP_ERR_PARSE,
       {"wrongsize", "'a'", "hold 12 bytes", "needs 16"}},
      {"backwards",
       R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[9,8]}})",
       d16,
       TPDP_ERR_PARSE,
       {"backwards", "'a'", "end before"}},
      {"offsets3",
       R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,8,16]}})",
       d16,
       TPDP_ERR_PARSE,
       {"offsets3", "'a'", "not a pair"}},
      {"overlap",
       std::string("{") + kA +
           R"(,"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
       d16,
       TPDP_ERR_PARSE,
       {"overlap", "'b'", "overlaps tensor 'a'"}},
      {"hole",
       R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[16,24]}})",
       d24,
       TPDP_ERR_PARSE,
       {"hole", "hole before tensor 'b'"}},
      {"extra",
       o + kA + c,
       d20,
       TPDP_ERR_PARSE,
       {"extra", "'a'", "trailing bytes"}},
      {"twice",
       std::string("{") + kA + "," + kA + "}",
       d16,
       TPDP_ERR_PARSE,
       {"twice", "'a' appears twice"}},
      {"badmeta",
       std::string("{\"__metadata__\":{\"k\":3},") + kA + "}",
       d16,
       TPDP_ERR_PARSE,
       {"badmeta", "'k'", "not a string"}},
      {"notensor",
       R"({"a":[1,2]})",
       d16,
       TPDP_ERR_PARSE,
       {"notensor", "'a'", "not an object"}},
  };
  for (const Bad &b : cases) {
    SCOPED_TRACE(b.name);
    std::string p = Craft(b.name, b.header, b.data, b.len);
    tpdp_safetensors *f = reinterpret_cast<tpdp_safetensors *>(0x1);
    tpdp_clear_error();
    tpdp_status st = tpdp_safetensors_open(p.c_str(), &f);
    EXPECT_STREQ(tpdp_status_string(st), tpdp_status_string(b.status))
        << tpdp_last_error();
    EXPECT_EQ(f, nullptr);
    for (const char *n : b.needles)
      EXPECT_NE(std::string(tpdp_last_error()).find(n), std::string::npos)
          << "'" << tpdp_last_error() << "' lacks '" << n << "'";
  }
}

// A tensor of a whole-byte dtype tpdp has no type for (a Hugging Face
// GPT-2 file's BOOL mask buffers): the file opens, the tensor is listed
// with its dtype's name and size, the others read, and reading it is
// refused naming the file, the tensor and the dtype.
TEST(Safetensors, OpensFilesWithDtypesItCannotReadAndRefusesToReadThem) {
  const std::vector<uint8_t> data = {
      1, 0, 1, 1, 0, 0, 0x00, 0x00, 0x80, 0x3f};  // 6 BOOL, f32 1.0
  std::string p =
      Craft("opaque",
            R"({"mask":{"dtype":"BOOL","shape":[2,3],"data_offsets":[0,6]},)"
            R"("w":{"dtype":"F32","shape":[1],"data_offsets":[6,10]}})",
            data);
  tpdp_safetensors *f = nullptr;
  ASSERT_EQ(tpdp_safetensors_open(p.c_str(), &f), TPDP_SUCCESS)
      << tpdp_last_error();
  int i = -1;
  ASSERT_EQ(tpdp_safetensors_find(f, "mask", &i), TPDP_SUCCESS);
  tpdp_safetensors_tensor t;
  ASSERT_EQ(tpdp_safetensors_tensor_at(f, i, &t), TPDP_SUCCESS);
  EXPECT_EQ(t.dtype, TPDP_DTYPE_COUNT);
  EXPECT_STREQ(t.dtype_name, "BOOL");
  EXPECT_EQ(t.ndim, 2);
  EXPECT_EQ(t.nbytes, 6u);
  uint8_t out[6];
  int64_t shape[2] = {2, 3}, zero[2] = {0, 0};
  tpdp_tensor dst;
  ASSERT_EQ(tpdp_tensor_init(&dst, out, TPDP_U8, kCpu, 2, shape), TPDP_SUCCESS);
  EXPECT_EQ(tpdp_safetensors_read(f, i, &dst), TPDP_ERR_DTYPE_MISMATCH);
  EXPECT_NE(std::string(tpdp_last_error())
                .find("tensor 'mask' is BOOL, a dtype tpdp cannot read"),
            std::string::npos)
      << tpdp_last_error();
  EXPECT_NE(std::string(tpdp_last_error()).find("opaque.safetensors"),
            std::string::npos);
  EXPECT_EQ(tpdp_safetensors_read_box(f, i, 2, shape, zero, &dst),
            TPDP_ERR_DTYPE_MISMATCH);
  /* the other tensor reads */
  float w = 0;
  tpdp_tensor wt = tpdp_tensor_1d(&w, TPDP_F32, 1);
  ASSERT_EQ(tpdp_safetensors_find(f, "w", &i), TPDP_SUCCESS);
  ASSERT_EQ(tpdp_safetensors_tensor_at(f, i, &t), TPDP_SUCCESS);
  EXPECT_STREQ(t.dtype_name, "F32");
  EXPECT_EQ(tpdp_safetensors_read(f, i, &wt), TPDP_SUCCESS)
      << tpdp_last_error();
  EXPECT_EQ(w, 1.0f);
  tpdp_safetensors_close(f);
}

// A file shorter than the length field; a header length above 100 MiB in
// a (sparse) file long enough to hold it.
TEST(Safetensors, RefusesShortFilesAndHeadersAboveTheLimit) {
  std::string p = Craft("hugeheader", "{}", {}, (100LL << 20) + 1);
  ASSERT_EQ(truncate(p.c_str(), (101LL << 20) + 64), 0);
  tpdp_safetensors *f = nullptr;
  EXPECT_TPDP_ERROR(tpdp_safetensors_open(p.c_str(), &f), TPDP_ERR_PARSE,
                    "hugeheader", "outside [2, 104857600]");
  EXPECT_TPDP_ERROR(
      tpdp_safetensors_open((tpdp_test::CraftDir() + "/absent").c_str(), &f),
      TPDP_ERR_IO, "absent", "No such file");
  std::string shorter = tpdp_test::CraftDir() + "/short.safetensors";
  FILE *s = std::fopen(shorter.c_str(), "wb");
  ASSERT_NE(s, nullptr);
  std::fwrite("\x02\0\0\0\0", 1, 5, s);
  std::fclose(s);
  EXPECT_TPDP_ERROR(tpdp_safetensors_open(shorter.c_str(), &f), TPDP_ERR_IO,
                    "short.safetensors", "5 bytes", "too short");
}

}  // namespace
