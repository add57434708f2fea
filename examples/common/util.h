// SPDX-License-Identifier: BSD-3-Clause
/*
 * Small helpers shared by the example programs (examples/common): an error
 * message buffer that loaders fill where the fault is found, a monotonic
 * clock, and row-major boxes as contiguous runs (how a rank's shard of a
 * tensor lies in the full tensor's bytes).
 */
#ifndef TPDP_EXAMPLES_COMMON_UTIL_H
#define TPDP_EXAMPLES_COMMON_UTIL_H

#include <stdint.h>

/* What went wrong, for the user: names the file and tensor at fault. */
typedef struct {
  char msg[1024];
} ex_error;

/* Format the message into e (if not NULL) and return -1. */
int ex_fail(ex_error *e, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Seconds on CLOCK_MONOTONIC. */
double ex_now(void);

/* The box [offset, offset + local) of a row-major tensor of shape `global`
 * as maximal contiguous runs: fn(ctx, global_flat, local_flat, len) for
 * each, in order, where global_flat is the run's first element in the full
 * tensor and local_flat in the box (row-major of `local`). Stops at, and
 * returns, the first nonzero fn result; 0 when all ran (an empty box runs
 * nothing). */
typedef int (*ex_run_fn)(void *ctx, int64_t global_flat, int64_t local_flat,
                         int64_t len);
int ex_box_runs(int ndim, const int64_t *global, const int64_t *offset,
                const int64_t *local, ex_run_fn fn, void *ctx);

#endif
