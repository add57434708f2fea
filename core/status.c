/* Status strings, the thread-local last error, and small shared helpers. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"

static _Thread_local char last_error[1024];

int tpdp_version(void) { return TPDP_VERSION; }

const char *tpdp_status_string(tpdp_status status) {
  switch (status) {
    case TPDP_SUCCESS:
      return "TPDP_SUCCESS";
    case TPDP_ERR_INVALID_ARGUMENT:
      return "TPDP_ERR_INVALID_ARGUMENT";
    case TPDP_ERR_NULL_POINTER:
      return "TPDP_ERR_NULL_POINTER";
    case TPDP_ERR_OUT_OF_MEMORY:
      return "TPDP_ERR_OUT_OF_MEMORY";
    case TPDP_ERR_SHAPE_MISMATCH:
      return "TPDP_ERR_SHAPE_MISMATCH";
    case TPDP_ERR_DTYPE_MISMATCH:
      return "TPDP_ERR_DTYPE_MISMATCH";
    case TPDP_ERR_DEVICE_MISMATCH:
      return "TPDP_ERR_DEVICE_MISMATCH";
    case TPDP_ERR_MPI:
      return "TPDP_ERR_MPI";
    case TPDP_ERR_NCCL:
      return "TPDP_ERR_NCCL";
    case TPDP_ERR_CUDA:
      return "TPDP_ERR_CUDA";
    case TPDP_ERR_TIMEOUT:
      return "TPDP_ERR_TIMEOUT";
    case TPDP_ERR_NOT_INITIALIZED:
      return "TPDP_ERR_NOT_INITIALIZED";
    case TPDP_ERR_UNSUPPORTED:
      return "TPDP_ERR_UNSUPPORTED";
    case TPDP_ERR_MESH_SIZE:
      return "TPDP_ERR_MESH_SIZE";
    case TPDP_ERR_DUPLICATE:
      return "TPDP_ERR_DUPLICATE";
    case TPDP_ERR_STATE:
      return "TPDP_ERR_STATE";
    case TPDP_ERR_NOT_FOUND:
      return "TPDP_ERR_NOT_FOUND";
    case TPDP_ERR_INTERNAL:
      return "TPDP_ERR_INTERNAL";
    case TPDP_ERR_EMPTY_NAME:
      return "TPDP_ERR_EMPTY_NAME";
    case TPDP_ERR_TOO_MANY_DIMS:
      return "TPDP_ERR_TOO_MANY_DIMS";
    case TPDP_ERR_BAD_DIM_SIZE:
      return "TPDP_ERR_BAD_DIM_SIZE";
    case TPDP_ERR_PARSE:
      return "TPDP_ERR_PARSE";
    case TPDP_ERR_IO:
      return "TPDP_ERR_IO";
    case TPDP_ERR_CYCLE:
      return "TPDP_ERR_CYCLE";
    case TPDP_ERR_MESH_MISMATCH:
      return "TPDP_ERR_MESH_MISMATCH";
    case TPDP_ERR_OP_DTYPE:
      return "TPDP_ERR_OP_DTYPE";
    case TPDP_ERR_ALREADY:
      return "TPDP_ERR_ALREADY";
    case TPDP_STATUS_COUNT:
      break;
  }
  return "TPDP_ERR_UNKNOWN_STATUS";
}

const char *tpdp_last_error(void) { return last_error; }

void tpdp_clear_error(void) { last_error[0] = '\0'; }

tpdp_status tpdp_set_error(tpdp_status status, const char *func,
                           const char *fmt, ...) {
  /* Format into a local buffer first: callers may pass tpdp_last_error()
   * itself as an argument (wrapping an inner error), which must not overlap
   * the destination. */
  char buf[sizeof last_error];
  int n = snprintf(buf, sizeof buf, "%s: ", func ? func : "tpdp");
  if (n < 0 || (size_t)n >= sizeof buf) n = 0;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
  va_end(ap);
  memcpy(last_error, buf, sizeof last_error);
  TPDP_TRACE("error %s: %s", tpdp_status_string(status), last_error);
  return status;
}

tpdp_status tpdp_calloc_impl(void **out, size_t count, size_t size,
                             const char *func) {
  void *p = calloc(count ? count : 1, size ? size : 1);
  if (p == NULL) {
    return tpdp_set_error(TPDP_ERR_OUT_OF_MEMORY, func,
                          "out of memory allocating %zu x %zu bytes", count,
                          size);
  }
  *out = p;
  return TPDP_SUCCESS;
}

long tpdp_env_long(const char *name, long dflt) {
  const char *v = getenv(name);
  if (v == NULL || *v == '\0') return dflt;
  char *end = NULL;
  long x = strtol(v, &end, 10);
  if (end == v || *end != '\0') {
    TPDP_WARN("ignoring %s=%s: not an integer, using %ld", name, v, dflt);
    return dflt;
  }
  return x;
}
