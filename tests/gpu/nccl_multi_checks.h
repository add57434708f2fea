// SPDX-License-Identifier: BSD-3-Clause
/* Multi-rank NCCL backend checks (one GPU per rank), shared by the
 * GoogleTest suite nccl_multi_test.cc (Bazel, tpdp_mpi_test at np 2 and 4,
 * --config=cuda) and the plain C MPI program nccl_multi_check.c
 * (scripts/gpu-check on a machine with >= 2 GPUs, mpicc and mpirun).
 *
 * Every function here is collective over the MPI world: all ranks call the
 * same ones in the same order. A check that finds a wrong value goes on
 * with its remaining collectives (so that no rank is left waiting on the
 * others) and reports the first mismatch; only an API error ends it early.
 * Built only with --config=cuda (the default build has no source for it). */
#ifndef TPDP_TESTS_GPU_NCCL_MULTI_CHECKS_H
#define TPDP_TESTS_GPU_NCCL_MULTI_CHECKS_H

#include <stddef.h>

#include "tpdp/tpdp.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  tpdp_comm *world; /* the MPI world (host memory) */
  tpdp_comm *nccl;  /* tpdp_comm_create_nccl(world, -1, ...) */
} tpdp_gpu_multi_ctx;

typedef struct {
  const char *name;
  /* 0: runs at every world size >= 2; else only at this world size. */
  int world_size;
  /* 0 on success; else a message in msg. */
  int (*run)(const tpdp_gpu_multi_ctx *ctx, char *msg, size_t len);
} tpdp_gpu_multi_check;

extern const tpdp_gpu_multi_check tpdp_gpu_multi_checks[];
extern const int tpdp_gpu_multi_check_count;

/* 1 on every rank when every rank can have a GPU of its own: world size
 * >= 2, and on each host tpdp_cuda_device_count succeeds and reports at
 * least as many GPUs as the ranks on that host. Else 0 on every rank, with
 * the same reason in msg on every rank (that of the lowest failing rank,
 * e.g. "rank 1: needs one GPU per rank: 1 GPUs for 2 ranks on host h"). */
int tpdp_gpu_multi_ready(tpdp_comm *world, char *msg, size_t len);

/* Create ctx->nccl over the world (device -1). TPDP_TIMEOUT_S defaults to
 * 120 here (unless set) so a rank left behind fails instead of hanging.
 * 0 on every rank if it worked on every rank; else 1 on every rank (the
 * communicator, if any, destroyed) with a message in msg. */
int tpdp_gpu_multi_open(tpdp_gpu_multi_ctx *ctx, tpdp_comm *world, char *msg,
                        size_t len);

/* 1 on every rank when `ok` is nonzero on every rank of `world`, else 0
 * (also 0 if the allreduce itself failed). */
int tpdp_gpu_multi_all(tpdp_comm *world, int ok);

#ifdef __cplusplus
}
#endif
#endif
