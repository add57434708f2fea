// SPDX-License-Identifier: BSD-3-Clause
/* NCCL backend checks at world size 1, shared by the GoogleTest suite
 * (nccl_test.cc, Bazel --config=cuda) and the plain C program nccl_check.c
 * (scripts/gpu-check, no GoogleTest there). Needs a GPU. */
#ifndef TPDP_TESTS_GPU_NCCL_CHECKS_H
#define TPDP_TESTS_GPU_NCCL_CHECKS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  const char *name;
  /* 0 on success; else a message in msg. */
  int (*run)(char *msg, size_t len);
} tpdp_gpu_check;

extern const tpdp_gpu_check tpdp_gpu_checks[];
extern const int tpdp_gpu_check_count;

/* 1 if cudaGetDeviceCount finds a GPU; else 0 with CUDA's reason in msg. */
int tpdp_gpu_present(char *msg, size_t len);

/* Device-memory paths of tp/ and dp/ (device_checks.c), listed in
 * tpdp_gpu_checks too: redistribute / full_tensor of CUDA tensors on a
 * 1-rank NCCL mesh, the reducer over CUDA parameters. */
int tpdp_gpu_check_redistribute(char *msg, size_t len);
int tpdp_gpu_check_full_tensor(char *msg, size_t len);
int tpdp_gpu_check_reducer_view(char *msg, size_t len);
int tpdp_gpu_check_reducer_copy(char *msg, size_t len);
int tpdp_gpu_check_reducer_bf16_view(char *msg, size_t len);
int tpdp_gpu_check_reducer_bf16_copy(char *msg, size_t len);
int tpdp_gpu_check_reducer_f16_view(char *msg, size_t len);
int tpdp_gpu_check_reducer_host_params(char *msg, size_t len);
/* Fully sharded units over CUDA parameters (levels 1-3), and host
 * parameters refused on an NCCL communicator. */
int tpdp_gpu_check_fsdp_level1(char *msg, size_t len);
int tpdp_gpu_check_fsdp_level2(char *msg, size_t len);
int tpdp_gpu_check_fsdp_level3(char *msg, size_t len);
int tpdp_gpu_check_fsdp_host_params(char *msg, size_t len);

#ifdef __cplusplus
}
#endif
#endif
