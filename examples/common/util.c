// SPDX-License-Identifier: BSD-3-Clause
/* examples/common/util.h: error buffer, clock, boxes as runs. */
#include "examples/common/util.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

int ex_fail(ex_error *e, const char *fmt, ...) {
  if (e != NULL) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
  }
  return -1;
}

double ex_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int ex_box_runs(int ndim, const int64_t *global, const int64_t *offset,
                const int64_t *local, ex_run_fn fn, void *ctx) {
  int64_t total = 1;
  for (int d = 0; d < ndim; d++) total *= local[d];
  if (total == 0) return 0;
  /* Trailing dims the box covers whole merge into one run; the first
   * partial dim (from the end) is included too. */
  int inner = ndim; /* dims [inner, ndim) form one run */
  int64_t run = 1;
  while (inner > 0) {
    run *= local[inner - 1];
    inner--;
    if (local[inner] != global[inner]) break;
  }
  int64_t idx[16] = {0}; /* position in the outer dims [0, inner) */
  for (int64_t lflat = 0; lflat < total; lflat += run) {
    int64_t g = 0;
    for (int d = 0; d < ndim; d++) {
      int64_t i = d < inner ? idx[d] + offset[d] : (d == inner ? offset[d] : 0);
      g = g * global[d] + i;
    }
    int rc = fn(ctx, g, lflat, run);
    if (rc != 0) return rc;
    for (int d = inner - 1; d >= 0; d--) {
      if (++idx[d] < local[d]) break;
      idx[d] = 0;
    }
  }
  return 0;
}
