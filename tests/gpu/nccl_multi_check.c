// SPDX-License-Identifier: BSD-3-Clause
/* Plain C MPI runner of the multi-rank NCCL checks
 * (tests/gpu/nccl_multi_checks.c) for scripts/gpu-check: no GoogleTest.
 * Run it as `mpirun -np <GPUs> nccl_multi_check`. Rank 0 prints one line
 * per check (a check fails when it fails on any rank; each failing rank
 * prints its own message) and "gpu-check: multi-rank: N passed, M failed,
 * K skipped". Exit: 0 all passed, 1 a failure, 2 tpdp_init failed, 77
 * skipped on every rank (the reason is printed: no GPU, or fewer GPUs than
 * ranks on a host). */
#include <stdio.h>

#include "tests/gpu/nccl_multi_checks.h"

int main(int argc, char **argv) {
  char msg[1024] = "";
  tpdp_comm *world = NULL;
  if (tpdp_init(&argc, &argv) != TPDP_SUCCESS ||
      tpdp_comm_world(&world) != TPDP_SUCCESS) {
    fprintf(stderr, "gpu-check: multi-rank: tpdp_init: %s\n",
            tpdp_last_error());
    return 2;
  }
  int rank = tpdp_comm_rank(world), size = tpdp_comm_size(world);
  if (!tpdp_gpu_multi_ready(world, msg, sizeof msg)) {
    if (rank == 0) {
      printf("gpu-check: multi-rank: skipped at %d ranks: %s\n", size, msg);
      printf("gpu-check: multi-rank: 0 passed, 0 failed, %d skipped\n",
             tpdp_gpu_multi_check_count);
    }
    tpdp_finalize();
    return 77;
  }
  tpdp_gpu_multi_ctx ctx;
  if (tpdp_gpu_multi_open(&ctx, world, msg, sizeof msg) != 0) {
    fprintf(stderr, "gpu-check: multi-rank: rank %d: %s\n", rank, msg);
    tpdp_finalize();
    return 1;
  }
  int passed = 0, failed = 0, skipped = 0;
  for (int i = 0; i < tpdp_gpu_multi_check_count; i++) {
    const tpdp_gpu_multi_check *c = &tpdp_gpu_multi_checks[i];
    if (c->world_size != 0 && c->world_size != size) {
      if (rank == 0)
        printf("SKIP   %s (needs %d ranks)\n", c->name, c->world_size);
      skipped++;
      continue;
    }
    msg[0] = '\0';
    int rc = c->run(&ctx, msg, sizeof msg);
    if (rc != 0) {
      fprintf(stderr, "FAIL   %s: rank %d: %s\n", c->name, rank, msg);
      fflush(stderr);
    }
    int ok = tpdp_gpu_multi_all(world, rc == 0);
    if (rank == 0) {
      printf("%-6s %s (%d ranks)\n", ok ? "PASS" : "FAIL", c->name, size);
      fflush(stdout);
    }
    if (ok)
      passed++;
    else
      failed++;
  }
  if (rank == 0)
    printf("gpu-check: multi-rank: %d passed, %d failed, %d skipped\n", passed,
           failed, skipped);
  tpdp_comm_destroy(ctx.nccl);
  tpdp_finalize();
  return failed == 0 ? 0 : 1;
}
