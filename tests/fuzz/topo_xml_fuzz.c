// SPDX-License-Identifier: BSD-3-Clause
/* libFuzzer target: the hwloc XML path of `tpdp topo --xml FILE`
 * (tpdp_topo_load on a file holding the input, then everything tpdp reads
 * out of the topology). */
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tests/fuzz/fuzz_util.h"
#include "tpdp/tpdp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int fd = memfd_create("topo.xml", 0);
  if (fd < 0) return 0;
  if (write(fd, data, size) != (ssize_t)size) {
    close(fd);
    return 0;
  }
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  tpdp_topo *topo = NULL;
  if (tpdp_topo_load(path, &topo) == TPDP_SUCCESS) {
    char buf[4096];
    tpdp_topo_format(topo, buf, sizeof buf);
    tpdp_binding b;
    for (int local = 0; local < 3; local++)
      tpdp_topo_binding_for(topo, local, 3, &b);
    tpdp_topo_destroy(topo);
  }
  close(fd);
  return 0;
}
