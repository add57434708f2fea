// SPDX-License-Identifier: BSD-3-Clause
/* Shared by the libFuzzer targets: the input as a NUL-terminated string or
 * as a file, a scratch directory, and a check that stops the run. */
#ifndef TPDP_TESTS_FUZZ_UTIL_H
#define TPDP_TESTS_FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* malloc'ed copy of data[0..size) with a NUL after it (NULL if memory is
 * short). Embedded NULs stay: parsers see the text up to the first one. */
static inline char *fuzz_text(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  if (text == NULL) return NULL;
  memcpy(text, data, size);
  text[size] = '\0';
  return text;
}

/* An invariant the target checks failed: say which, with the library's
 * last message, and abort (libFuzzer keeps the input as a crash). */
#define FUZZ_ASSERT(cond, ...)                                                \
  do {                                                                        \
    if (!(cond)) {                                                            \
      fprintf(stderr, "fuzz: %s:%d: %s failed: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                           \
      fprintf(stderr, "\n");                                                  \
      abort();                                                                \
    }                                                                         \
  } while (0)

/* Write data[0..size) to path (replacing it); 0 or -1. */
static inline int fuzz_write_file(const char *path, const void *data,
                                  size_t size) {
  FILE *f = fopen(path, "wb");
  if (f == NULL) return -1;
  size_t n = size ? fwrite(data, 1, size, f) : 0;
  return fclose(f) == 0 && n == size ? 0 : -1;
}

/* A directory of this process's own, made on first use under
 * $TEST_TMPDIR, $TMPDIR or /tmp (it stays: the targets run until killed).
 * NULL if it cannot be made. */
static inline const char *fuzz_tmpdir(void) {
  static char dir[4096];
  if (dir[0] != '\0') return dir;
  const char *base = getenv("TEST_TMPDIR");
  if (base == NULL) base = getenv("TMPDIR");
  if (base == NULL) base = "/tmp";
  char tmpl[sizeof dir];
  snprintf(tmpl, sizeof tmpl, "%s/tpdp-fuzz-XXXXXX", base);
  if (mkdtemp(tmpl) == NULL) return NULL;
  memcpy(dir, tmpl, sizeof dir);
  return dir;
}

#endif /* TPDP_TESTS_FUZZ_UTIL_H */
