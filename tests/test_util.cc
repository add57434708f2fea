// SPDX-License-Identifier: BSD-3-Clause
#include "tests/test_util.h"

#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace tpdp_test {

tpdp_comm *World() {
  tpdp_comm *w = nullptr;
  if (tpdp_comm_world(&w) != TPDP_SUCCESS) return nullptr;
  return w;
}

int WorldRank() { return tpdp_comm_rank(World()); }
int WorldSize() { return tpdp_comm_size(World()); }

std::vector<int> HostOfRanks() {
  char mine[64] = {0};
  gethostname(mine, sizeof mine - 1);
  const int p = WorldSize();
  std::vector<char> all((size_t)p * 64);
  tpdp_tensor s = tpdp_tensor_1d(mine, TPDP_U8, 64);
  tpdp_tensor r = tpdp_tensor_1d(all.data(), TPDP_U8, (int64_t)all.size());
  EXPECT_TPDP_OK(tpdp_allgather(World(), &s, &r));
  std::vector<int> host(p);
  std::vector<std::string> names;
  for (int q = 0; q < p; q++) {
    std::string n(&all[(size_t)q * 64]);
    size_t k = 0;
    while (k < names.size() && names[k] != n) k++;
    if (k == names.size()) names.push_back(n);
    host[q] = (int)k;
  }
  return host;
}

std::string DataPath(const std::string &file) {
  const char *srcdir = std::getenv("TEST_SRCDIR");
  const char *ws = std::getenv("TEST_WORKSPACE");
  if (srcdir && ws)
    return std::string(srcdir) + "/" + ws + "/tests/data/" + file;
  return "tests/data/" + file;
}

bool FreedMemoryChecked() {
#if defined(__SANITIZE_ADDRESS__)
  return true;
#else
  // valgrind preloads its vgpreload_*.so into the program it runs.
  const char *pre = std::getenv("LD_PRELOAD");
  return pre != nullptr &&
         std::string(pre).find("vgpreload") != std::string::npos;
#endif
}

}  // namespace tpdp_test
