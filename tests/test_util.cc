// SPDX-License-Identifier: BSD-3-Clause
#include "tests/test_util.h"

#include <cstdlib>

namespace tpdp_test {

tpdp_comm *World() {
  tpdp_comm *w = nullptr;
  if (tpdp_comm_world(&w) != TPDP_SUCCESS) return nullptr;
  return w;
}

int WorldRank() { return tpdp_comm_rank(World()); }
int WorldSize() { return tpdp_comm_size(World()); }

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
