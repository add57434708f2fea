// SPDX-License-Identifier: BSD-3-Clause
/* mlp_cuda_checks for a build without --config=cuda: no GPU model to
 * check; the runner reports why and skips. */
#include <stdio.h>

#include "tests/examples/mlp_cuda_checks.h"

int mlp_cuda_gpu_present(char *msg, size_t len) {
  snprintf(msg, len, "built without --config=cuda");
  return 0;
}

static int no_check(char *msg, size_t len) {
  snprintf(msg, len, "built without --config=cuda");
  return 1;
}

const mlp_cuda_check mlp_cuda_checks[] = {{"NeedsCudaBuild", no_check}};
const int mlp_cuda_check_count = 0;
