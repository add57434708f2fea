// SPDX-License-Identifier: BSD-3-Clause
/* nccl_checks for a build without --config=cuda: no checks, no GPU. */
#include <stdio.h>

#include "tests/gpu/nccl_checks.h"

int tpdp_gpu_present(char *msg, size_t len) {
  snprintf(msg, len, "built without --config=cuda");
  return 0;
}

const tpdp_gpu_check tpdp_gpu_checks[1] = {{"none", NULL}};
const int tpdp_gpu_check_count = 0;
