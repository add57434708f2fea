// SPDX-License-Identifier: BSD-3-Clause
/* examples/common/tokens.h: llm.c token files. */
#include "examples/common/tokens.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int pread_all(int fd, void *buf, size_t len, off_t off) {
  char *p = buf;
  while (len > 0) {
    ssize_t r = pread(fd, p, len, off);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    p += r;
    len -= (size_t)r;
    off += r;
  }
  return 0;
}

void tok_close(tok_file *f) {
  if (f->fd >= 0) close(f->fd);
  free(f->path);
  memset(f, 0, sizeof *f);
  f->fd = -1;
}

int tok_open(const char *path, tok_file *f, ex_error *e) {
  memset(f, 0, sizeof *f);
  f->fd = open(path, O_RDONLY | O_CLOEXEC);
  if (f->fd < 0)
    return ex_fail(e, "%s: cannot open: %s", path, strerror(errno));
  f->path = strdup(path);
  int32_t h[TOK_HEADER_INTS];
  struct stat sb;
  if (f->path == NULL || fstat(f->fd, &sb) != 0) {
    ex_fail(e, "%s: cannot stat", path);
    goto fail;
  }
  if ((size_t)sb.st_size < sizeof h || pread_all(f->fd, h, sizeof h, 0) != 0) {
    ex_fail(e,
            "%s: not a token file: %lld bytes, shorter than its %zu-byte "
            "header",
            path, (long long)sb.st_size, sizeof h);
    goto fail;
  }
  if (h[0] != TOK_MAGIC || h[1] != TOK_VERSION) {
    ex_fail(e,
            "%s: not an llm.c token file: magic %d version %d (expected %d "
            "and %d; scripts/make-tokens writes one)",
            path, h[0], h[1], TOK_MAGIC, TOK_VERSION);
    goto fail;
  }
  int64_t have = ((int64_t)sb.st_size - (int64_t)sizeof h) / 2;
  if (h[2] < 0 || h[2] > have) {
    ex_fail(e, "%s: header says %d tokens but the file holds %lld", path, h[2],
            (long long)have);
    goto fail;
  }
  f->count = h[2];
  f->pos = 0;
  return 0;
fail:
  tok_close(f);
  return -1;
}

int tok_next_batch(tok_file *f, int64_t n, int vocab, int32_t *tokens,
                   ex_error *e) {
  if (n + 1 > f->count)
    return ex_fail(e,
                   "%s: %lld tokens, but a batch needs B*T+1 = %lld (use a "
                   "longer file or a smaller --batch / --seq)",
                   f->path, (long long)f->count, (long long)(n + 1));
  if (f->pos + n + 1 > f->count) f->pos = 0;
  uint16_t *raw = (uint16_t *)tokens; /* widened in place, from the end */
  if (pread_all(f->fd, raw, (size_t)(n + 1) * 2,
                (off_t)(TOK_HEADER_INTS * 4 + f->pos * 2)) != 0)
    return ex_fail(e, "%s: short read of %lld tokens at token %lld", f->path,
                   (long long)(n + 1), (long long)f->pos);
  for (int64_t i = n; i >= 0; i--) tokens[i] = raw[i];
  for (int64_t i = 0; i <= n; i++)
    if (tokens[i] >= vocab)
      return ex_fail(e,
                     "%s: token %d at position %lld is >= the vocabulary size "
                     "%d (rows of wte.weight)",
                     f->path, tokens[i], (long long)(f->pos + i), vocab);
  f->pos += n;
  return 0;
}
