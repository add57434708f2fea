#include "tools/planning_error.h"

#include <stdarg.h>
#include <stdio.h>

#include "core/check.h"

tpdp_status planning_error(const planning_ctx *c, tpdp_status st,
                           const char *fmt, ...) {
  char msg[1200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  /* TODO(tools error helper): interim, until tools/ has its own. */
  int frame __attribute__((cleanup(core_api_leave))) = core_api_enter(c->func);
  (void)frame;
  if (c->source != NULL) return TPDP_ERR(st, "%s: %s", c->source, msg);
  return TPDP_ERR(st, "%s", msg);
}

tpdp_status planning_oom(const planning_ctx *c) {
  return planning_error(c, TPDP_ERR_OUT_OF_MEMORY, "out of memory");
}
