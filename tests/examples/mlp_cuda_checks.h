// SPDX-License-Identifier: BSD-3-Clause
/* The CUDA model of examples/train_mlp (mlp_cuda.cu) against the CPU model
 * (mlp.c): one forward + backward on the same parameters and batch, and
 * AdamW steps. Shared by the GoogleTest mlp_cuda_test.cc (Bazel,
 * --config=cuda) and the plain C runner mlp_cuda_check.c
 * (scripts/gpu-check). Needs a GPU. */
#ifndef TPDP_TESTS_EXAMPLES_MLP_CUDA_CHECKS_H
#define TPDP_TESTS_EXAMPLES_MLP_CUDA_CHECKS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  const char *name;
  /* 0 on success; else a message in msg. */
  int (*run)(char *msg, size_t len);
} mlp_cuda_check;

extern const mlp_cuda_check mlp_cuda_checks[];
extern const int mlp_cuda_check_count;

/* 1 if a GPU is found; else 0 with the reason in msg. */
int mlp_cuda_gpu_present(char *msg, size_t len);

#ifdef __cplusplus
}
#endif
#endif
