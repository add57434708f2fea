// SPDX-License-Identifier: BSD-3-Clause
// Safetensors files written byte by byte for the reader's tests (the
// header text and data bytes as the test gives them, nothing from tpdp).
#ifndef TPDP_TESTS_CKPT_ST_CRAFT_H
#define TPDP_TESTS_CKPT_ST_CRAFT_H

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/test_util.h"

namespace tpdp_test {

// Where the files go: $TEST_TMPDIR (else /tmp).
inline std::string CraftDir() {
  const char *dir = std::getenv("TEST_TMPDIR");
  return dir ? dir : "/tmp";
}

// CraftDir()/<name>.safetensors: the 8-byte little-endian length
// (header's size unless len_override >= 0), the header, then `data`.
// Returns its path.
inline std::string Craft(const std::string &name, const std::string &header,
                         const std::vector<unsigned char> &data,
                         long long len_override = -1) {
  std::string path = CraftDir() + "/" + name + ".safetensors";
  FILE *f = std::fopen(path.c_str(), "wb");
  EXPECT_NE(f, nullptr);
  unsigned long long n =
      len_override >= 0 ? (unsigned long long)len_override : header.size();
  unsigned char len[8];
  for (int i = 0; i < 8; i++) len[i] = (unsigned char)(n >> (8 * i));
  std::fwrite(len, 1, 8, f);
  std::fwrite(header.data(), 1, header.size(), f);
  if (!data.empty()) std::fwrite(data.data(), 1, data.size(), f);
  std::fclose(f);
  return path;
}

}  // namespace tpdp_test

#endif  // TPDP_TESTS_CKPT_ST_CRAFT_H
