// SPDX-License-Identifier: BSD-3-Clause
/* The planning library's last error (error.h). */
#include "tools/planning/error.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/util.h"

static _Thread_local char last_error[2048];
static _Thread_local size_t detail_at; /* where the message follows "f: " */
static _Thread_local struct {
  const char *func;
  int depth;
} running;

const char *planning_last_error(void) { return last_error; }

void planning_clear_error(void) {
  last_error[0] = '\0';
  detail_at = 0;
}

const char *planning_error_detail(void) { return last_error + detail_at; }

int planning_enter(const char *func) {
  if (running.depth++ == 0) running.func = func;
  return 0;
}

void planning_leave(int *unused) {
  (void)unused;
  running.depth--;
}

tpdp_status planning_error(tpdp_status status, const char *fmt, ...) {
  /* The arguments may point into last_error itself (wrapping the previous
   * message): core_error_vformat formats into a buffer of its own first. */
  va_list ap;
  va_start(ap, fmt);
  const char *func = running.depth > 0 ? running.func : "planning";
  detail_at = core_error_vformat(last_error, sizeof last_error, func, fmt, ap);
  va_end(ap);
  return status;
}

tpdp_status planning_error_tpdp(tpdp_status status) {
  if (status == TPDP_SUCCESS) return status;
  return planning_error(status, "%s", tpdp_last_error());
}

tpdp_status planning_error_in(const char *source, tpdp_status status) {
  if (status == TPDP_SUCCESS || source == NULL) return status;
  return planning_error(status, "%s: %s", source, planning_error_detail());
}

tpdp_status planning_calloc(void **out, size_t count, size_t size) {
  // Refused before calloc: sanitizers treat an overflowing count * size as
  // a fault rather than returning NULL.
  void *p = NULL;
  if (size == 0 || count <= SIZE_MAX / size)
    p = calloc(count ? count : 1, size ? size : 1);
  if (p == NULL)
    return planning_error(TPDP_ERR_OUT_OF_MEMORY,
                          "out of memory (%zu x %zu bytes)", count, size);
  *out = p;
  return TPDP_SUCCESS;
}
