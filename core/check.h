/*
 * Internal: setting the last error and the CHECK macros used across tpdp.
 * Not installed. Pattern (as in NCCL): every fallible call is wrapped in
 * CHECK (return on failure) or CHECK_GOTO (jump to the function's single
 * `fail:` label that frees partial state).
 */
#ifndef TPDP_CORE_CHECK_H
#define TPDP_CORE_CHECK_H

#include "tpdp/core.h"

/* Record a message for tpdp_last_error() and return `status`. The message
 * is prefixed with the function name: "tpdp_mesh_create: ...". */
tpdp_status tpdp_set_error(tpdp_status status, const char *func,
                           const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Fail from the current function with a formatted message. */
#define TPDP_ERR(status, ...) tpdp_set_error((status), __func__, __VA_ARGS__)

/* Evaluate a tpdp call; on failure return its status (message kept). */
#define CHECK(call)                                  \
  do {                                               \
    tpdp_status check_st_ = (call);                  \
    if (check_st_ != TPDP_SUCCESS) return check_st_; \
  } while (0)

/* Evaluate a tpdp call; on failure store its status in `res` and jump. */
#define CHECK_GOTO(call, res, label)       \
  do {                                     \
    (res) = (call);                        \
    if ((res) != TPDP_SUCCESS) goto label; \
  } while (0)

/* Argument checks that return a NULL-pointer error naming the argument. */
#define CHECK_PTR(p)                                                       \
  do {                                                                     \
    if ((p) == NULL)                                                       \
      return TPDP_ERR(TPDP_ERR_NULL_POINTER, "argument '%s' is NULL", #p); \
  } while (0)

/* malloc/calloc wrappers that set TPDP_ERR_OUT_OF_MEMORY on failure. */
tpdp_status tpdp_calloc_impl(void **out, size_t count, size_t size,
                             const char *func);
#define TPDP_CALLOC(ptr, count) \
  tpdp_calloc_impl((void **)&(ptr), (count), sizeof(*(ptr)), __func__)

/* Internal logging helpers. */
#define TPDP_WARN(...) tpdp_log(TPDP_LOG_WARN, __VA_ARGS__)
#define TPDP_INFO(...) tpdp_log(TPDP_LOG_INFO, __VA_ARGS__)
#define TPDP_TRACE(...) tpdp_log(TPDP_LOG_TRACE, __VA_ARGS__)

/* Same shape and dtype, else TPDP_ERR_SHAPE_MISMATCH / DTYPE_MISMATCH
 * naming both (reported as `func`). Used by the host and CUDA copies. */
tpdp_status tpdp_check_copy_pair(const tpdp_tensor *dst, const tpdp_tensor *src,
                                 const char *func);

/* Read an integer environment variable; `dflt` when unset or malformed. */
long tpdp_env_long(const char *name, long dflt);

#endif /* TPDP_CORE_CHECK_H */
