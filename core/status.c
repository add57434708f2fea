// SPDX-License-Identifier: BSD-3-Clause
/* Status strings, the thread-local last error (the mechanism of
 * core/check.h), allocation helpers. */
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"

static _Thread_local char last_error[CORE_ERROR_MAX];
/* Where the message proper starts, after "tpdp_xxx: ". */
static _Thread_local size_t detail_at;

_Thread_local core_api_frame core_api
    __attribute__((tls_model("initial-exec")));

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

void tpdp_clear_error(void) {
  last_error[0] = '\0';
  detail_at = 0;
}

const char *core_error_detail(void) { return last_error + detail_at; }

tpdp_status core_error(tpdp_status status, const char *file, int line,
                       const char *fmt, ...) {
  /* The arguments may include tpdp_last_error() itself (wrapping an inner
   * error): core_error_vformat formats into a buffer of its own first. */
  va_list ap;
  va_start(ap, fmt);
  const char *func = core_api.depth > 0 ? core_api.func : "tpdp";
  detail_at = core_error_vformat(last_error, sizeof last_error, func, fmt, ap);
  va_end(ap);
  if (tpdp_log_get_level() >= TPDP_LOG_TRACE)
    tpdp_log(TPDP_LOG_TRACE, "%s:%d: %s: %s", file, line,
             tpdp_status_string(status), last_error);
  return status;
}

void core_first_error_add(core_first_error *f, tpdp_status st) {
  if (st == TPDP_SUCCESS) return;
  if (f->status == TPDP_SUCCESS) {
    f->status = st;
    memcpy(f->message, last_error, sizeof f->message);
    f->detail_at = detail_at;
    return;
  }
  TPDP_WARN("after an earlier failure (%s), also %s: %s",
            tpdp_status_string(f->status), tpdp_status_string(st), last_error);
  memcpy(last_error, f->message, sizeof last_error);
  detail_at = f->detail_at;
}

void core_trace_propagate(const char *file, int line, tpdp_status status) {
  if (tpdp_log_get_level() >= TPDP_LOG_TRACE)
    tpdp_log(TPDP_LOG_TRACE, "%s:%d -> %s", file, line,
             tpdp_status_string(status));
}

tpdp_status core_check_handle(const void *h, unsigned magic, unsigned want,
                              const char *arg, const char *kind,
                              const char *destroyed_by) {
  if (h == NULL)
    return TPDP_ERR(TPDP_ERR_NULL_POINTER, "argument '%s' is NULL", arg);
  if (magic != want)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "argument '%s' (%p) is a %s that has been destroyed "
                    "(%s), or not a %s",
                    arg, h, kind, destroyed_by, kind);
  return TPDP_SUCCESS;
}

tpdp_status core_calloc(void **out, size_t count, size_t size) {
  // Refused before calloc: sanitizers treat an overflowing count * size as
  // a fault rather than returning NULL.
  void *p = NULL;
  if (!core_alloc_fail_now() && (size == 0 || count <= SIZE_MAX / size))
    p = calloc(count ? count : 1, size ? size : 1);
  if (p == NULL)
    return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY,
                    "out of memory allocating %zu x %zu bytes", count, size);
  *out = p;
  return TPDP_SUCCESS;
}

tpdp_status core_grow(void **items, int *cap, int need, size_t elem) {
  if (need <= *cap) return TPDP_SUCCESS;
  int ncap = *cap ? *cap * 2 : 4;
  while (ncap < need) ncap *= 2;
  void *p = core_alloc_fail_now() ? NULL : realloc(*items, (size_t)ncap * elem);
  if (p == NULL)
    return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY,
                    "out of memory growing a list to %d entries", ncap);
  *items = p;
  *cap = ncap;
  return TPDP_SUCCESS;
}
