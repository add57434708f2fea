// SPDX-License-Identifier: BSD-3-Clause
/*
 * Errors of the planning library (//tools/planning:planning: model JSON,
 * plans, the stage partitioner). The library is a user of libtpdp, not a
 * part of it: its names start with planning_ (PLANNING_ for macros), never
 * with libtpdp's tpdp_, and it keeps a last error of its own: a
 * thread-local message read with planning_last_error(). tpdp_last_error()
 * is libtpdp's and is not touched by planning functions (except through
 * the libtpdp calls they make).
 *
 * Contract of every planning function returning tpdp_status: on failure
 * the status says what kind of error it is and planning_last_error() says
 * what is at fault, named after the planning function the caller called
 * ("planning_model_desc_load: m.json: children.u1: missing \"class\"").
 * When the fault is a failed libtpdp call, the message carries that call's
 * tpdp_last_error() text. On success the last error is left as it was.
 *
 * Thread-safety: the message and the running-function record are
 * thread-local; threads never see each other's errors.
 */
#ifndef TPDP_TOOLS_PLANNING_ERROR_H
#define TPDP_TOOLS_PLANNING_ERROR_H

#include "tpdp/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------ for callers */

/* The calling thread's last planning error ("" when none). Valid until the
 * thread's next planning call. */
const char *planning_last_error(void);

/* Empty the calling thread's last planning error. */
void planning_clear_error(void);

/* ------------------------------------ for the planning library's own code */

/* First statement of every public planning function returning tpdp_status:
 * names the errors recorded while it runs after it (the outermost one when
 * planning functions call each other). The frame is left on every return
 * path (cleanup attribute). */
#define PLANNING_ENTRY                                                   \
  int planning_frame_ __attribute__((cleanup(planning_leave), unused)) = \
      planning_enter(__func__)
int planning_enter(const char *func);
void planning_leave(int *unused);

/* Record a message ("<running function>: <message>") where the fault is
 * found and return `status`. The arguments may include
 * planning_last_error() or planning_error_detail() (wrapping). */
tpdp_status planning_error(tpdp_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The last error without its "<function>: " prefix, for a message that
 * wraps it (e.g. prefixing the file path). */
const char *planning_error_detail(void);

/* Wrap the result of a libtpdp call: on failure record tpdp_last_error()'s
 * text (which names the libtpdp function) as the planning error. Returns
 * `status`. */
tpdp_status planning_error_tpdp(tpdp_status status);

/* Wrap a failed `status` in `source` (the file a *_load function read, or
 * a caller's own name for the text): the last error is recorded again as
 * "<source>: <message>". Success, or a NULL source, leaves it as it was.
 * Returns `status`. */
tpdp_status planning_error_in(const char *source, tpdp_status status);

/* calloc of count * size bytes (at least 1) into *out; on failure
 * TPDP_ERR_OUT_OF_MEMORY naming the sizes (*out untouched). */
tpdp_status planning_calloc(void **out, size_t count, size_t size);
#define PLANNING_CALLOC(ptr, count) \
  planning_calloc((void **)&(ptr), (count), sizeof(*(ptr)))

/* Propagate a failed planning status (the message is already recorded). */
#define PLANNING_CHECK(call)                               \
  do {                                                     \
    tpdp_status planning_st_ = (call);                     \
    if (planning_st_ != TPDP_SUCCESS) return planning_st_; \
  } while (0)

#define PLANNING_CHECK_GOTO(call, res, label) \
  do {                                        \
    (res) = (call);                           \
    if ((res) != TPDP_SUCCESS) goto label;    \
  } while (0)

/* A NULL argument: TPDP_ERR_NULL_POINTER naming it. */
#define PLANNING_CHECK_PTR(p)                                               \
  do {                                                                      \
    if ((p) == NULL)                                                        \
      return planning_error(TPDP_ERR_NULL_POINTER, "argument '%s' is NULL", \
                            #p);                                            \
  } while (0)

#ifdef __cplusplus
}
#endif
#endif /* TPDP_TOOLS_PLANNING_ERROR_H */
