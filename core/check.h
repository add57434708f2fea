// SPDX-License-Identifier: BSD-3-Clause
/*
 * Internal to the library (core/, comm/, topo/, tp/, dp/, ckpt/): the error
 * convention and the CHECK macros. Not installed.
 *
 * One mechanism reports every error:
 *  - TPDP_ERR(status, fmt, ...) records the message where the fault is
 *    found (in any function, static helpers included) and returns status.
 *  - Every public function that returns tpdp_status starts with
 *    TPDP_API_ENTRY. A message recorded while it runs is prefixed with its
 *    name: "tpdp_mesh_create: dim 'tp' has size 0". When public functions
 *    nest (tpdp_parallelize calls tpdp_spec_create), the outermost one, the
 *    function the caller called, names the error. With no public function
 *    running (a thread of the library's own), the prefix is "tpdp".
 *  - CHECK / CHECK_GOTO propagate a failed status (as NCCL's checks.h); at
 *    TPDP_DEBUG=TRACE each propagation logs "file:line -> STATUS", and
 *    TPDP_ERR logs where the error was first recorded, so a failure deep in
 *    a stack can be followed.
 *  - To wrap an inner error in a message of one's own, use
 *    core_error_detail() (the message without its function prefix).
 */
#ifndef TPDP_CORE_CHECK_H
#define TPDP_CORE_CHECK_H

#include "tpdp/core.h"

#ifdef __cplusplus
extern "C" {
/* __thread, not thread_local: C++'s thread_local reaches an extern
 * variable through an init wrapper that the C definition does not have. */
#define CORE_THREAD_LOCAL __thread
#else
#define CORE_THREAD_LOCAL _Thread_local
#endif

/* Record a message for tpdp_last_error() (prefixed with the running public
 * function's name) and return `status`. `file`/`line` are for the TRACE
 * log. Arguments may include tpdp_last_error() or core_error_detail(). */
tpdp_status core_error(tpdp_status status, const char *file, int line,
                       const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Fail with a formatted message (see above). */
#define TPDP_ERR(status, ...) \
  core_error((status), __FILE__, __LINE__, __VA_ARGS__)

/* The last error's message without the "tpdp_xxx: " prefix. */
const char *core_error_detail(void);

/* Size of the last-error message buffer (tpdp_last_error()). */
#define CORE_ERROR_MAX 1024

/* The first failure among steps that must all run (destroy and cleanup
 * paths free everything, then report the first fault):
 *   core_first_error f;
 *   core_first_error_init(&f);
 *   core_first_error_add(&f, step1()); core_first_error_add(&f, step2());
 *   return f.status;
 * A step failing after an earlier one is logged at WARN and the earlier
 * message is put back, so f.status and tpdp_last_error() describe the same
 * (first) fault. The message is copied only when a step fails. */
typedef struct {
  tpdp_status status;
  size_t detail_at;
  char message[CORE_ERROR_MAX];
} core_first_error;
static inline void core_first_error_init(core_first_error *f) {
  f->status = TPDP_SUCCESS;
}
void core_first_error_add(core_first_error *f, tpdp_status st);

/* The public function running on this thread: the outermost one's name and
 * the nesting depth. initial-exec: one instruction to reach it, also in
 * libtpdp.so (it is small enough for the static TLS surplus a dlopen uses). */
typedef struct {
  const char *func;
  int depth;
} core_api_frame;
extern CORE_THREAD_LOCAL core_api_frame core_api
    __attribute__((tls_model("initial-exec"), visibility("hidden")));

static inline int core_api_enter(const char *func) {
  if (core_api.depth++ == 0) core_api.func = func;
  return 0;
}
static inline void core_api_leave(int *unused) {
  (void)unused;
  core_api.depth--;
}

/* First statement of every public function returning tpdp_status. The
 * cleanup attribute leaves the frame on every return path. */
#define TPDP_API_ENTRY TPDP_API_ENTRY_AS(__func__)
/* The same for an internal entry point that messages and the watchdog
 * should name as public function `name` (comm_allreduce_shm is
 * tpdp_allreduce to the user). */
#define TPDP_API_ENTRY_AS(name)                                          \
  int core_api_frame_ __attribute__((cleanup(core_api_leave), unused)) = \
      core_api_enter(name)

/* Log "file:line -> STATUS" at TRACE (called by CHECK on failure). */
void core_trace_propagate(const char *file, int line, tpdp_status status);

/* Evaluate a tpdp call; on failure return its status (message kept). */
#define CHECK(call)                                        \
  do {                                                     \
    tpdp_status check_st_ = (call);                        \
    if (check_st_ != TPDP_SUCCESS) {                       \
      core_trace_propagate(__FILE__, __LINE__, check_st_); \
      return check_st_;                                    \
    }                                                      \
  } while (0)

/* Evaluate a tpdp call; on failure store its status in `res` and jump. */
#define CHECK_GOTO(call, res, label)                   \
  do {                                                 \
    (res) = (call);                                    \
    if ((res) != TPDP_SUCCESS) {                       \
      core_trace_propagate(__FILE__, __LINE__, (res)); \
      goto label;                                      \
    }                                                  \
  } while (0)

/* Argument check that returns a NULL-pointer error naming the argument. */
#define CHECK_PTR(p)                                                       \
  do {                                                                     \
    if ((p) == NULL)                                                       \
      return TPDP_ERR(TPDP_ERR_NULL_POINTER, "argument '%s' is NULL", #p); \
  } while (0)

/* The check of a handle argument `arg` (its name in the messages) whose
 * magic field, read by the caller (h ? h->magic : 0), is `magic`:
 * TPDP_ERR_NULL_POINTER "argument 'm' is NULL" for NULL;
 * TPDP_ERR_INVALID_ARGUMENT "argument 'm' (0x...) is a KIND that has been
 * destroyed (DESTROYED_BY), or not a KIND" when magic is not `want`. */
tpdp_status core_check_handle(const void *h, unsigned magic, unsigned want,
                              const char *arg, const char *kind,
                              const char *destroyed_by);

/* Internal logging helpers. */
#define TPDP_WARN(...) tpdp_log(TPDP_LOG_WARN, __VA_ARGS__)
#define TPDP_INFO(...) tpdp_log(TPDP_LOG_INFO, __VA_ARGS__)
#define TPDP_TRACE(...) tpdp_log(TPDP_LOG_TRACE, __VA_ARGS__)

/* calloc of count * size bytes (at least 1) into *out; on failure
 * TPDP_ERR_OUT_OF_MEMORY naming the sizes (*out untouched). */
tpdp_status core_calloc(void **out, size_t count, size_t size);
#define TPDP_CALLOC(ptr, count) \
  core_calloc((void **)&(ptr), (count), sizeof(*(ptr)))

/* Grow *items (of elem bytes each) so that it has room for need entries
 * (capacity doubles). TPDP_ERR_OUT_OF_MEMORY leaves *items as it was. */
tpdp_status core_grow(void **items, int *cap, int need, size_t elem);

/* Checked size of a row-major shape of elements of elem_size bytes: 0 with
 * *numel (the element count; numel may be NULL) when every size is >= 0
 * and the product of the non-zero sizes times elem_size fits in int64, so
 * that every row-major stride, byte size and byte offset of the shape fits
 * too (a size of 0 does not excuse the others: their strides would still
 * wrap). -1 for a negative size, -2 when that product overflows. */
int core_shape_size(int ndim, const int64_t *shape, size_t elem_size,
                    int64_t *numel);

/* The checks of a shape entering the library: TPDP_ERR_INVALID_ARGUMENT
 * when its size in bytes as `dtype` (core_shape_size) overflows int64,
 * naming it as `what` ("shape", "global shape"). Sizes are >= 0. */
tpdp_status core_check_shape_bytes(int ndim, const int64_t *shape,
                                   tpdp_dtype dtype, const char *what);

/* 1 when shapes a and b differ, with both formatted ("[2, 3]") into a_s
 * and b_s of len bytes each, for the caller's message; else 0. */
int core_shapes_differ(int ndim_a, const int64_t *a, int ndim_b,
                       const int64_t *b, char *a_s, char *b_s, size_t len);
/* The same for the kinds of memory of devices a and b (cpu, cuda; the
 * index aside), formatted as "cuda:1". */
int core_device_types_differ(tpdp_device a, tpdp_device b, char *a_s, char *b_s,
                             size_t len);
/* *out = the index of `text` (non-NULL) in names[0..n), else
 * TPDP_ERR_PARSE "unknown WHAT 'text' (expected a, b or c)". */
tpdp_status core_name_parse(const char *const *names, int n, const char *text,
                            const char *what, int *out);

/* Same shape and dtype, else TPDP_ERR_SHAPE_MISMATCH / DTYPE_MISMATCH
 * naming both. Used by the host and CUDA copies. */
tpdp_status core_check_copy_pair(const tpdp_tensor *dst,
                                 const tpdp_tensor *src);

#ifdef __cplusplus
}
#endif

#include "core/util.h"

#endif /* TPDP_CORE_CHECK_H */
