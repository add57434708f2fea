// SPDX-License-Identifier: BSD-3-Clause
/*
 * Internal: small helpers shared by the library and by tools/ (one copy of
 * each): string duplication, a monotonic clock, integer environment
 * variables, a growable string with JSON escaping, a pointer map, the
 * formatting of a last-error message. Not installed. Nothing here records
 * errors: allocation failures come back as NULL / -1 / a `failed` flag,
 * and the caller reports them in its own way.
 */
#ifndef TPDP_CORE_UTIL_H
#define TPDP_CORE_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* malloc'ed copy of s; NULL if s is NULL or memory is short. */
char *core_strdup(const char *s);

/* Test-only fault injection into the library's allocations (core_calloc,
 * core_grow, core_strdup and core_mem_alloc's host path count; each asks
 * core_alloc_fail_now first). core_alloc_fail_at(n, 0) makes the n-th
 * allocation from now on of the calling thread fail as if memory were
 * short; core_alloc_fail_at(n, 1) the n-th of any thread (for failures on
 * a thread of the library's own). n <= 0 disarms that counter. Cheap when
 * disarmed: one thread-local and one global load per allocation. */
void core_alloc_fail_at(long n, int any_thread);
/* Allocations left before the calling thread's counter fires (0: disarmed
 * or fired): a test arms a large n, runs a call, and reads how many
 * allocations the call made. */
long core_alloc_fail_left(void);
/* 1 if this allocation must fail (counts it); for the allocators above. */
int core_alloc_fail_now(void);

/* The formatting of a last-error recorder (core/status.c's core_error, the
 * planning library's planning_error): "func: " and then fmt's message into
 * msg (len bytes, truncated). The text is formatted into a buffer of its
 * own first (up to CORE_ERROR_FORMAT_MAX bytes) and then copied, so that
 * the arguments may point into msg itself (wrapping the previous message).
 * Returns where the message starts, after "func: " (0 when the prefix
 * alone does not fit). */
#define CORE_ERROR_FORMAT_MAX 4096
size_t core_error_vformat(char *msg, size_t len, const char *func,
                          const char *fmt, va_list ap);

/* Enum names in a table: names[i] for 0 <= i < n, else "?"; and the
 * position of `name` in names[0..n), -1 if absent. */
const char *core_name_at(const char *const *names, int n, int i);
int core_name_find(const char *const *names, int n, const char *name);

/* Seconds on CLOCK_MONOTONIC. */
double core_now_s(void);

/* An integer environment variable; `dflt` when unset, or (with a WARN log
 * naming the variable) when it is not an integer. */
long core_env_long(const char *name, long dflt);

/* Growable NUL-terminated string. Zero-initialise; `failed` is set (and
 * further appends ignored) once an allocation fails. */
typedef struct {
  char *s;
  size_t len, cap;
  int failed;
} core_strbuf;
void core_sb_append(core_strbuf *b, const char *s, size_t n);
void core_sb_puts(core_strbuf *b, const char *s);
void core_sb_printf(core_strbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void core_sb_free(core_strbuf *b);
/* Append s as a JSON string literal: quotes, backslash, control characters
 * escaped; valid UTF-8 copied as is; each byte of invalid UTF-8 written as
 * \u00XX (its Latin-1 reading), so the output is always valid JSON. */
void core_sb_json_string(core_strbuf *b, const char *s);

/* Open-addressing map from non-NULL pointers to ints. */
typedef struct {
  const void **keys;
  int *vals;
  size_t cap; /* power of two */
  size_t n;
} core_ptrmap;
/* 0, or -1 when memory is short (the map is then empty). */
int core_ptrmap_init(core_ptrmap *m, size_t expected);
void core_ptrmap_free(core_ptrmap *m);
/* Value of key, or -1 if absent. */
int core_ptrmap_get(const core_ptrmap *m, const void *key);
/* 0, or -1 when memory is short or key is NULL (the map is unchanged). */
int core_ptrmap_put(core_ptrmap *m, const void *key, int val);

#ifdef __cplusplus
}
#endif
#endif /* TPDP_CORE_UTIL_H */
