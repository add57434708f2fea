// SPDX-License-Identifier: BSD-3-Clause
/* nccl_multi_checks for a build without --config=cuda: no checks; every
 * rank is told the same reason, with no collective needed. */
#include <stdio.h>

#include "tests/gpu/nccl_multi_checks.h"

int tpdp_gpu_multi_ready(tpdp_comm *world, char *msg, size_t len) {
  (void)world;
  snprintf(msg, len, "built without --config=cuda");
  return 0;
}

int tpdp_gpu_multi_open(tpdp_gpu_multi_ctx *ctx, tpdp_comm *world, char *msg,
                        size_t len) {
  ctx->world = world;
  ctx->nccl = NULL;
  snprintf(msg, len, "built without --config=cuda");
  return 1;
}

int tpdp_gpu_multi_all(tpdp_comm *world, int ok) {
  int32_t v = ok ? 1 : 0, r = 0;
  tpdp_tensor s = tpdp_tensor_1d(&v, TPDP_I32, 1);
  tpdp_tensor t = tpdp_tensor_1d(&r, TPDP_I32, 1);
  if (tpdp_allreduce(world, &s, &t, TPDP_OP_MIN) != TPDP_SUCCESS) return 0;
  return r == 1;
}

const tpdp_gpu_multi_check tpdp_gpu_multi_checks[1] = {{"none", 0, NULL}};
const int tpdp_gpu_multi_check_count = 0;
