// SPDX-License-Identifier: BSD-3-Clause
// examples/common/tokens.c: llm.c token files (header checks) and the
// loader's positions (advance by B*T, wrap when B*T+1 would pass the end),
// against hand-worked positions.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

extern "C" {
#include "examples/common/tokens.h"
}

namespace {

std::string WriteTokens(const std::string &name, std::vector<uint16_t> toks,
                        int magic = 20240520, int version = 1, int count = -1) {
  const char *d = std::getenv("TEST_TMPDIR");
  std::string path = std::string(d ? d : "/tmp") + "/" + name;
  int32_t h[256] = {0};
  h[0] = magic;
  h[1] = version;
  h[2] = count >= 0 ? count : (int)toks.size();
  FILE *f = std::fopen(path.c_str(), "wb");
  std::fwrite(h, 4, 256, f);
  std::fwrite(toks.data(), 2, toks.size(), f);
  std::fclose(f);
  return path;
}

TEST(Tokens, LoaderPositionsWrap) {
  std::vector<uint16_t> toks;
  for (int i = 0; i < 10; i++) toks.push_back((uint16_t)(100 + i));
  std::string path = WriteTokens("ten.bin", toks);
  tok_file f;
  ex_error e;
  ASSERT_EQ(tok_open(path.c_str(), &f, &e), 0) << e.msg;
  EXPECT_EQ(f.count, 10);
  // B*T = 4: batches at 0 and 4; then 8 + 5 > 10 wraps to 0, then 4, 0.
  const int starts[5] = {0, 4, 0, 4, 0};
  int32_t b[5];
  for (int s = 0; s < 5; s++) {
    ASSERT_EQ(tok_next_batch(&f, 4, 256, b, &e), 0) << e.msg;
    for (int k = 0; k < 5; k++) EXPECT_EQ(b[k], 100 + starts[s] + k) << s;
  }
  // A token >= vocab, named with its position.
  EXPECT_EQ(tok_next_batch(&f, 4, 106, b, &e), -1);
  EXPECT_NE(std::string(e.msg).find("token 106 at position 6"),
            std::string::npos)
      << e.msg;
  EXPECT_EQ(tok_next_batch(&f, 10, 256, b, &e), -1);
  EXPECT_NE(std::string(e.msg).find("a batch needs B*T+1 = 11"),
            std::string::npos)
      << e.msg;
  tok_close(&f);
}

TEST(Tokens, HeaderChecks) {
  tok_file f;
  ex_error e;
  struct Case {
    std::string path;
    const char *needle;
  } cases[] = {
      {WriteTokens("magic.bin", {1, 2}, 1234), "magic 1234 version 1"},
      {WriteTokens("version.bin", {1, 2}, 20240520, 2), "version 2"},
      {WriteTokens("count.bin", {1, 2}, 20240520, 1, 3),
       "header says 3 tokens but the file holds 2"},
  };
  for (const Case &c : cases) {
    EXPECT_EQ(tok_open(c.path.c_str(), &f, &e), -1) << c.path;
    EXPECT_NE(std::string(e.msg).find(c.needle), std::string::npos) << e.msg;
    EXPECT_NE(std::string(e.msg).find(c.path), std::string::npos) << e.msg;
  }
  const char *d = std::getenv("TEST_TMPDIR");
  std::string shortp = std::string(d ? d : "/tmp") + "/short.bin";
  FILE *fp = std::fopen(shortp.c_str(), "wb");
  std::fwrite("xy", 1, 2, fp);
  std::fclose(fp);
  EXPECT_EQ(tok_open(shortp.c_str(), &f, &e), -1);
  EXPECT_NE(std::string(e.msg).find("shorter than its 1024-byte header"),
            std::string::npos)
      << e.msg;
}

}  // namespace
