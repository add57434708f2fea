/* Errors of the planning library (model JSON, plans): the public entry point
 * that reports them and, for files, the path that prefixes the message. */
#ifndef TPDP_TOOLS_PLANNING_ERROR_H
#define TPDP_TOOLS_PLANNING_ERROR_H

#include "tpdp/core.h"

typedef struct {
  const char *func;   /* the public function named in tpdp_last_error() */
  const char *source; /* file path prefixed to messages, or NULL */
} planning_ctx;

/* Set the last error ("func: source: message") and return `st`. */
tpdp_status planning_error(const planning_ctx *c, tpdp_status st,
                           const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
tpdp_status planning_oom(const planning_ctx *c);

#endif
