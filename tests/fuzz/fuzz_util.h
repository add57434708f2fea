/* Shared by the libFuzzer targets: the input as a NUL-terminated string. */
#ifndef TPDP_TESTS_FUZZ_UTIL_H
#define TPDP_TESTS_FUZZ_UTIL_H

#include <stdint.h>
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

#endif /* TPDP_TESTS_FUZZ_UTIL_H */
