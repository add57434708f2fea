// SPDX-License-Identifier: BSD-3-Clause
/* What the library sees of a launch, beside what Slurm says
 * (tests/slurm/slurm_test.py): every rank prints one line
 *   launch_check: rank R of N on HOST local_rank L local_size S nodes K
 *   SLURM_PROCID=.. SLURM_LOCALID=.. SLURM_NTASKS_PER_NODE=.. SLURM_NNODES=..
 * where L and S are tpdp_comm_local_rank's over the world and K is the
 * number of hosts the library counts (ranks of local rank 0, summed with
 * tpdp_allreduce); the test compares them with Slurm's variables. When
 * tpdp_init fails it prints "launch_check: STATUS: MESSAGE" and exits 2. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "tpdp/tpdp.h"

static const char *env(const char *name) {
  const char *v = getenv(name);
  return v ? v : "unset";
}

int main(int argc, char **argv) {
  tpdp_status st = tpdp_init(&argc, &argv);
  if (st != TPDP_SUCCESS) {
    printf("launch_check: %s: %s\n", tpdp_status_string(st), tpdp_last_error());
    return 2;
  }
  tpdp_comm *world = NULL;
  int lr = -1, ls = -1;
  int32_t first = 0;
  tpdp_tensor t = tpdp_tensor_1d(&first, TPDP_I32, 1);
  st = tpdp_comm_world(&world);
  if (st == TPDP_SUCCESS) st = tpdp_comm_local_rank(world, &lr, &ls);
  first = lr == 0;
  if (st == TPDP_SUCCESS) st = tpdp_allreduce(world, &t, &t, TPDP_OP_SUM);
  if (st != TPDP_SUCCESS) {
    printf("launch_check: %s: %s\n", tpdp_status_string(st), tpdp_last_error());
    return 1;
  }
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  printf(
      "launch_check: rank %d of %d on %s local_rank %d local_size %d nodes "
      "%d SLURM_PROCID=%s SLURM_LOCALID=%s SLURM_NTASKS_PER_NODE=%s "
      "SLURM_NNODES=%s\n",
      tpdp_comm_rank(world), tpdp_comm_size(world), host, lr, ls, (int)first,
      env("SLURM_PROCID"), env("SLURM_LOCALID"), env("SLURM_NTASKS_PER_NODE"),
      env("SLURM_NNODES"));
  fflush(stdout);
  return tpdp_finalize() == TPDP_SUCCESS ? 0 : 1;
}
