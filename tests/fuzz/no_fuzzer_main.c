// SPDX-License-Identifier: BSD-3-Clause
/* Without --config=fuzz (no libFuzzer), a fuzz target still links with
 * this main: it runs the target once on each file named on the command
 * line, which replays a corpus or a crash. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    FILE *f = fopen(argv[i], "rb");
    if (f == NULL) {
      perror(argv[i]);
      return 1;
    }
    uint8_t *buf = NULL;
    size_t n = 0, cap = 0, got;
    do {
      if (n == cap) {
        cap = cap ? 2 * cap : 4096;
        uint8_t *p = realloc(buf, cap);
        if (p == NULL) return 1;
        buf = p;
      }
      got = fread(buf + n, 1, cap - n, f);
      n += got;
    } while (got > 0);
    fclose(f);
    LLVMFuzzerTestOneInput(buf, n);
    free(buf);
  }
  return 0;
}
