// SPDX-License-Identifier: BSD-3-Clause
/* Plain C runner of the NCCL backend checks (tests/gpu/nccl_checks.c) for
 * scripts/gpu-check: no GoogleTest needed. Prints one line per check and
 * "gpu-check: N passed, M failed". Exit: 0 all passed, 1 a failure, 77 no
 * GPU (skipped: cudaGetDeviceCount found none; the reason is printed). */
#include <stdio.h>

#include "tests/gpu/nccl_checks.h"

int main(void) {
  char msg[1024];
  if (!tpdp_gpu_present(msg, sizeof msg)) {
    printf("gpu-check: skipped, no GPU: %s\n", msg);
    printf("gpu-check: 0 passed, 0 failed, %d skipped\n", tpdp_gpu_check_count);
    return 77;
  }
  int passed = 0, failed = 0;
  for (int i = 0; i < tpdp_gpu_check_count; i++) {
    msg[0] = '\0';
    int rc = tpdp_gpu_checks[i].run(msg, sizeof msg);
    printf("%-6s %s%s%s\n", rc == 0 ? "PASS" : "FAIL", tpdp_gpu_checks[i].name,
           rc == 0 ? "" : ": ", rc == 0 ? "" : msg);
    fflush(stdout);
    if (rc == 0)
      passed++;
    else
      failed++;
  }
  printf("gpu-check: %d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
