// SPDX-License-Identifier: BSD-3-Clause
/* Plain C runner of the CUDA-vs-CPU model checks (mlp_cuda_checks.c) for
 * scripts/gpu-check: no GoogleTest needed. Prints one line per check.
 * Exit: 0 all passed, 1 a failure, 77 no GPU (the reason is printed). */
#include <stdio.h>

#include "tests/examples/mlp_cuda_checks.h"

int main(void) {
  char msg[1024];
  if (!mlp_cuda_gpu_present(msg, sizeof msg)) {
    printf("mlp-cuda-check: skipped, no GPU: %s\n", msg);
    return 77;
  }
  int passed = 0, failed = 0;
  for (int i = 0; i < mlp_cuda_check_count; i++) {
    msg[0] = '\0';
    int rc = mlp_cuda_checks[i].run(msg, sizeof msg);
    printf("%-6s MlpCuda.%s%s%s\n", rc == 0 ? "PASS" : "FAIL",
           mlp_cuda_checks[i].name, rc == 0 ? "" : ": ", rc == 0 ? "" : msg);
    fflush(stdout);
    if (rc == 0)
      passed++;
    else
      failed++;
  }
  printf("mlp-cuda-check: %d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
