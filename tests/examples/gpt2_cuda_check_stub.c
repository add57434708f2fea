// SPDX-License-Identifier: BSD-3-Clause
/* gpt2_cuda_check in a build without --config=cuda: nothing to check. */
#include <stdio.h>

int main(void) {
  printf(
      "gpt2-cuda-check: skipped, built without --config=cuda (the CUDA "
      "model is not compiled)\n");
  return 77;
}
