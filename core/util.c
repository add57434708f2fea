// SPDX-License-Identifier: BSD-3-Clause
/* Small helpers shared by the library and tools/ (core/util.h). */
#include "core/util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tpdp/core.h"

/* ------------------------------------------------------ fault injection */

static _Thread_local long fail_thread; /* countdown of this thread */
static long fail_any;                  /* countdown of every thread */

void core_alloc_fail_at(long n, int any_thread) {
  if (any_thread)
    __atomic_store_n(&fail_any, n > 0 ? n : 0, __ATOMIC_RELAXED);
  else
    fail_thread = n > 0 ? n : 0;
}

long core_alloc_fail_left(void) { return fail_thread; }

int core_alloc_fail_now(void) {
  if (fail_thread > 0 && --fail_thread == 0) return 1;
  /* Only the thread that takes the count from 1 to 0 fails. */
  return __atomic_load_n(&fail_any, __ATOMIC_RELAXED) > 0 &&
         __atomic_sub_fetch(&fail_any, 1, __ATOMIC_RELAXED) == 0;
}

/* ------------------------------------------------------------ strings */

char *core_strdup(const char *s) {
  if (s == NULL) return NULL;
  if (core_alloc_fail_now()) return NULL;
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

size_t core_error_vformat(char *msg, size_t len, const char *func,
                          const char *fmt, va_list ap) {
  char buf[CORE_ERROR_FORMAT_MAX];
  if (len == 0) return 0;
  if (len > sizeof buf) len = sizeof buf;
  int n = snprintf(buf, len, "%s: ", func);
  if (n < 0 || (size_t)n >= len) n = 0;
  vsnprintf(buf + n, len - (size_t)n, fmt, ap);
  memcpy(msg, buf, len);
  return (size_t)n;
}

double core_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

const char *core_name_at(const char *const *names, int n, int i) {
  return i >= 0 && i < n ? names[i] : "?";
}

int core_name_find(const char *const *names, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (strcmp(name, names[i]) == 0) return i;
  return -1;
}

long core_env_long(const char *name, long dflt) {
  const char *v = getenv(name);
  if (v == NULL || *v == '\0') return dflt;
  char *end = NULL;
  long x = strtol(v, &end, 10);
  if (end == v || *end != '\0') {
    tpdp_log(TPDP_LOG_WARN, "ignoring %s=%s: not an integer, using %ld", name,
             v, dflt);
    return dflt;
  }
  return x;
}

/* ------------------------------------------------------------ strbuf */

void core_sb_append(core_strbuf *b, const char *s, size_t n) {
  if (b->failed) return;
  if (b->len + n + 1 > b->cap) {
    size_t ncap = b->cap ? b->cap * 2 : 256;
    while (b->len + n + 1 > ncap) ncap *= 2;
    char *p = realloc(b->s, ncap);
    if (p == NULL) {
      b->failed = 1;
      return;
    }
    b->s = p;
    b->cap = ncap;
  }
  memcpy(b->s + b->len, s, n);
  b->len += n;
  b->s[b->len] = '\0';
}

void core_sb_puts(core_strbuf *b, const char *s) {
  core_sb_append(b, s, strlen(s));
}

void core_sb_printf(core_strbuf *b, const char *fmt, ...) {
  char small[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) {
    b->failed = 1;
    return;
  }
  if ((size_t)n < sizeof small) {
    core_sb_append(b, small, (size_t)n);
    return;
  }
  char *big = malloc((size_t)n + 1);
  if (big == NULL) {
    b->failed = 1;
    return;
  }
  va_start(ap, fmt);
  vsnprintf(big, (size_t)n + 1, fmt, ap);
  va_end(ap);
  core_sb_append(b, big, (size_t)n);
  free(big);
}

void core_sb_free(core_strbuf *b) {
  free(b->s);
  memset(b, 0, sizeof *b);
}

/* Length of the valid UTF-8 sequence starting at s (1-4), or 0. */
static int utf8_length(const unsigned char *s) {
  unsigned char c = s[0];
  int n;
  unsigned min;
  unsigned cp;
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2, min = 0x80, cp = c & 0x1f;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3, min = 0x800, cp = c & 0x0f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4, min = 0x10000, cp = c & 0x07;
  } else {
    return 0;
  }
  for (int i = 1; i < n; i++) {
    if ((s[i] & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (s[i] & 0x3f);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return n;
}

void core_sb_json_string(core_strbuf *b, const char *s) {
  core_sb_append(b, "\"", 1);
  const unsigned char *p = (const unsigned char *)s;
  while (*p) {
    unsigned char ch = *p;
    if (ch == '"' || ch == '\\') {
      char e[2] = {'\\', (char)ch};
      core_sb_append(b, e, 2);
      p++;
    } else if (ch < 0x20 || ch == 0x7f) {
      core_sb_printf(b, "\\u%04x", ch);
      p++;
    } else if (ch < 0x80) {
      core_sb_append(b, (const char *)p, 1);
      p++;
    } else {
      int n = utf8_length(p);
      if (n > 0) {
        core_sb_append(b, (const char *)p, (size_t)n);
        p += n;
      } else {
        core_sb_printf(b, "\\u%04x", ch);
        p++;
      }
    }
  }
  core_sb_append(b, "\"", 1);
}

/* ------------------------------------------------------------ ptrmap */

static size_t ptr_hash(const void *p, size_t mask) {
  uint64_t x = (uint64_t)(uintptr_t)p;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return (size_t)x & mask;
}

int core_ptrmap_init(core_ptrmap *m, size_t expected) {
  size_t cap = 16;
  while (cap < expected * 2) cap *= 2;
  m->keys = calloc(cap, sizeof *m->keys);
  m->vals = calloc(cap, sizeof *m->vals);
  m->cap = cap;
  m->n = 0;
  if (m->keys == NULL || m->vals == NULL) {
    core_ptrmap_free(m);
    return -1;
  }
  return 0;
}

void core_ptrmap_free(core_ptrmap *m) {
  free(m->keys);
  free(m->vals);
  m->keys = NULL;
  m->vals = NULL;
  m->cap = m->n = 0;
}

int core_ptrmap_get(const core_ptrmap *m, const void *key) {
  if (m->cap == 0 || key == NULL) return -1;
  size_t mask = m->cap - 1;
  for (size_t i = ptr_hash(key, mask);; i = (i + 1) & mask) {
    if (m->keys[i] == NULL) return -1;
    if (m->keys[i] == key) return m->vals[i];
  }
}

int core_ptrmap_put(core_ptrmap *m, const void *key, int val) {
  if (key == NULL) return -1;
  if ((m->n + 1) * 2 > m->cap) {
    core_ptrmap big;
    if (core_ptrmap_init(&big, m->cap) != 0) return -1;
    for (size_t i = 0; i < m->cap; i++)
      if (m->keys[i]) {
        size_t mask = big.cap - 1;
        size_t j = ptr_hash(m->keys[i], mask);
        while (big.keys[j]) j = (j + 1) & mask;
        big.keys[j] = m->keys[i];
        big.vals[j] = m->vals[i];
        big.n++;
      }
    core_ptrmap_free(m);
    *m = big;
  }
  size_t mask = m->cap - 1;
  size_t i = ptr_hash(key, mask);
  while (m->keys[i] && m->keys[i] != key) i = (i + 1) & mask;
  if (m->keys[i] == NULL) m->n++;
  m->keys[i] = key;
  m->vals[i] = val;
  return 0;
}
