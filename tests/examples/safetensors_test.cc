// examples/common/safetensors.c: the header checks (each fault a message
// naming the file and tensor, never a crash or an out-of-bounds read) and
// sliced reads of f32, f16 and bf16 data against hand-written values.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern "C" {
#include "examples/common/safetensors.h"
}

namespace {

std::string TmpPath(const std::string &name) {
  const char *d = std::getenv("TEST_TMPDIR");
  return std::string(d ? d : "/tmp") + "/" + name;
}

// A file of an 8-byte header length, the header and the data.
std::string WriteFile(const std::string &name, const std::string &header,
                      const std::string &data, long long length = -1) {
  std::string path = TmpPath(name);
  FILE *f = std::fopen(path.c_str(), "wb");
  unsigned long long n =
      length >= 0 ? (unsigned long long)length : header.size();
  unsigned char len8[8];
  for (int i = 0; i < 8; i++) len8[i] = (unsigned char)(n >> (8 * i));
  std::fwrite(len8, 1, 8, f);
  std::fwrite(header.data(), 1, header.size(), f);
  std::fwrite(data.data(), 1, data.size(), f);
  std::fclose(f);
  return path;
}

std::string Bytes(const void *p, size_t n) {
  return std::string((const char *)p, n);
}

// Opening must fail with a message holding every needle.
void ExpectOpenError(const std::string &path,
                     std::initializer_list<const char *> needles) {
  st_file f;
  ex_error e;
  e.msg[0] = '\0';
  EXPECT_EQ(st_open(path.c_str(), &f, &e), -1) << path;
  for (const char *n : needles)
    EXPECT_NE(std::string(e.msg).find(n), std::string::npos)
        << "message '" << e.msg << "' lacks '" << n << "'";
  st_close(&f);
}

TEST(Safetensors, ReadsSlicesAndConverts) {
  const float w[6] = {0, 1, 2, 3, 4, 5};                   // F32 [2, 3]
  const uint16_t bf[3] = {0x3FC0, 0xC010, 0x0000};         // 1.5, -2.25, 0
  const uint16_t h[4] = {0x3C00, 0xC000, 0x3800, 0x7BFF};  // 1, -2, 0.5, 65504
  std::string data = Bytes(w, 24) + Bytes(bf, 6) + Bytes(h, 8);
  std::string header =
      "{\"__metadata__\":{\"format\":\"pt\"},"
      "\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
      "\"b\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[24,30]},"
      "\"h\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[30,38]}}";
  std::string path = WriteFile("good.safetensors", header, data);
  st_file f;
  ex_error e;
  ASSERT_EQ(st_open(path.c_str(), &f, &e), 0) << e.msg;
  EXPECT_EQ(f.n, 3);
  const st_tensor *t = st_find(&f, "w");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->numel, 6);
  EXPECT_EQ(st_find(&f, "__metadata__"), nullptr);
  EXPECT_EQ(st_find(&f, "x"), nullptr);
  // Columns 1..2 of both rows: two runs.
  int64_t view[2] = {2, 3}, off[2] = {0, 1}, loc[2] = {2, 2};
  float out[4];
  ASSERT_EQ(st_read_box_f32(&f, t, 2, view, off, loc, out, &e), 0) << e.msg;
  EXPECT_EQ(out[0], 1);
  EXPECT_EQ(out[1], 2);
  EXPECT_EQ(out[2], 4);
  EXPECT_EQ(out[3], 5);
  // The same bytes seen as [3, 2]: row 1 only.
  int64_t v2[2] = {3, 2}, o2[2] = {1, 0}, l2[2] = {1, 2};
  ASSERT_EQ(st_read_box_f32(&f, t, 2, v2, o2, l2, out, &e), 0) << e.msg;
  EXPECT_EQ(out[0], 2);
  EXPECT_EQ(out[1], 3);
  float b[3], hv[4];
  ASSERT_EQ(st_read_f32(&f, st_find(&f, "b"), b, &e), 0) << e.msg;
  EXPECT_EQ(b[0], 1.5f);
  EXPECT_EQ(b[1], -2.25f);
  EXPECT_EQ(b[2], 0.0f);
  ASSERT_EQ(st_read_f32(&f, st_find(&f, "h"), hv, &e), 0) << e.msg;
  EXPECT_EQ(hv[0], 1.0f);
  EXPECT_EQ(hv[1], -2.0f);
  EXPECT_EQ(hv[2], 0.5f);
  EXPECT_EQ(hv[3], 65504.0f);
  // A view that does not have the tensor's elements.
  int64_t v3[1] = {5}, o3[1] = {0};
  EXPECT_EQ(st_read_box_f32(&f, t, 1, v3, o3, v3, out, &e), -1);
  EXPECT_NE(std::string(e.msg).find("tensor 'w'"), std::string::npos) << e.msg;
  st_close(&f);
}

TEST(Safetensors, HeaderBounds) {
  ExpectOpenError(TmpPath("missing.safetensors"),
                  {"missing.safetensors", "cannot open"});
  std::string path = TmpPath("short.safetensors");
  FILE *fp = std::fopen(path.c_str(), "wb");
  std::fwrite("abc", 1, 3, fp);
  std::fclose(fp);
  ExpectOpenError(path, {"short.safetensors", "not a safetensors file"});
  ExpectOpenError(WriteFile("long.safetensors", "{}", "", 1000),
                  {"long.safetensors", "header length 1000"});
  ExpectOpenError(WriteFile("huge.safetensors", "{}", "", 1LL << 40),
                  {"header length 1099511627776"});
  ExpectOpenError(WriteFile("text.safetensors", "[1, 2]", ""),
                  {"text.safetensors", "not a JSON object"});
  ExpectOpenError(WriteFile("trunc.safetensors", "{\"a\":{\"dtype\"", ""),
                  {"not a JSON object"});
}

TEST(Safetensors, EntriesAreChecked) {
  std::string z(64, '\0');
  struct Case {
    const char *header, *needle;
  } cases[] = {
      {"{\"a\":7}", "tensor 'a': header entry is not an object"},
      {"{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", "needs \"dtype\""},
      {"{\"a\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}",
       "unknown dtype \"F33\""},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}",
       "shape[0] is not a size"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}",
       "shape[0] is not a size"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],"
       "\"data_offsets\":[0,4]}}",
       "shape overflows"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],"
       "\"data_offsets\":[0,4]}}",
       "9 dims"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}",
       "begin <= end"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}",
       "begin <= end"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[100],\"data_offsets\":[0,400]}}",
       "run past the 64 bytes"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}",
       "hold 8 bytes; F32 [3] needs 12"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
       "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
       "'a' and 'b' overlap"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
       "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
       "tensor 'a' appears twice"},
      {"{\"__metadata__\":[1]}", "__metadata__ is not an object"},
  };
  int i = 0;
  for (const Case &c : cases) {
    SCOPED_TRACE(c.header);
    ExpectOpenError(
        WriteFile("bad" + std::to_string(i++) + ".safetensors", c.header, z),
        {".safetensors", c.needle});
  }
}

TEST(Safetensors, UnreadableDtypeIsNamedOnRead) {
  std::string header =
      "{\"i\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
  std::string path = WriteFile("i32.safetensors", header, std::string(8, 'x'));
  st_file f;
  ex_error e;
  ASSERT_EQ(st_open(path.c_str(), &f, &e), 0) << e.msg;
  EXPECT_EQ(st_dtype_readable("I32"), 0);
  float out[2];
  EXPECT_EQ(st_read_f32(&f, st_find(&f, "i"), out, &e), -1);
  EXPECT_NE(std::string(e.msg).find("tensor 'i' is I32"), std::string::npos)
      << e.msg;
  st_close(&f);
}

}  // namespace
