// SPDX-License-Identifier: BSD-3-Clause
/* Failure macros of the plain C GPU checks (nccl_checks.c,
 * nccl_multi_checks.c, device_checks.c). A check function has parameters
 * `char *msg, size_t len` and an `out:` label that frees what it holds:
 *   FAILF(fmt, ...)  write the message and jump to out
 *   TOK(call)        a tpdp call that must succeed (status + last error)
 *   COK(call)        a CUDA runtime call that must succeed */
#ifndef TPDP_TESTS_GPU_CHECK_MACROS_H
#define TPDP_TESTS_GPU_CHECK_MACROS_H

#include <stdio.h>

#define FAILF(...)                   \
  do {                               \
    snprintf(msg, len, __VA_ARGS__); \
    goto out;                        \
  } while (0)

#define TOK(call)                                                             \
  do {                                                                        \
    tpdp_status st_ = (call);                                                 \
    if (st_ != TPDP_SUCCESS)                                                  \
      FAILF("%s: %s: %s", #call, tpdp_status_string(st_), tpdp_last_error()); \
  } while (0)

#define COK(call)                                                          \
  do {                                                                     \
    cudaError_t e_ = (call);                                               \
    if (e_ != cudaSuccess) FAILF("%s: %s", #call, cudaGetErrorString(e_)); \
  } while (0)

#endif
