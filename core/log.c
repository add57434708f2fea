// SPDX-License-Identifier: BSD-3-Clause
/* Logging with a "[rank r]" prefix; level from TPDP_DEBUG. */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

#include "tpdp/core.h"

/* -1: not read from the environment yet. */
static atomic_int log_level = -1;
static atomic_int log_rank = -1;

static tpdp_log_level level_from_env(void) {
  const char *v = getenv("TPDP_DEBUG");
  if (v == NULL) return TPDP_LOG_WARN;
  if (strcasecmp(v, "NONE") == 0) return TPDP_LOG_NONE;
  if (strcasecmp(v, "INFO") == 0) return TPDP_LOG_INFO;
  if (strcasecmp(v, "TRACE") == 0) return TPDP_LOG_TRACE;
  return TPDP_LOG_WARN;
}

tpdp_log_level tpdp_log_get_level(void) {
  int level = atomic_load(&log_level);
  if (level < 0) {
    level = (int)level_from_env();
    atomic_store(&log_level, level);
  }
  return (tpdp_log_level)level;
}

void tpdp_log_set_level(tpdp_log_level level) {
  if ((int)level < (int)TPDP_LOG_NONE) level = TPDP_LOG_NONE;
  if ((int)level > (int)TPDP_LOG_TRACE) level = TPDP_LOG_TRACE;
  atomic_store(&log_level, (int)level);
}

void tpdp_log_set_rank(int rank) { atomic_store(&log_rank, rank); }

void tpdp_log(tpdp_log_level level, const char *fmt, ...) {
  if ((int)level <= (int)TPDP_LOG_NONE || (int)level > (int)TPDP_LOG_TRACE ||
      level > tpdp_log_get_level())
    return;
  static const char *names[] = {"NONE", "WARN", "INFO", "TRACE"};
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  int rank = atomic_load(&log_rank);
  /* One fprintf call per line so lines from threads do not interleave. */
  if (rank >= 0)
    fprintf(stderr, "[rank %d] tpdp %s: %s\n", rank, names[level], msg);
  else
    fprintf(stderr, "[rank ?] tpdp %s: %s\n", names[level], msg);
}
