// SPDX-License-Identifier: BSD-3-Clause
/*
 * llm.c's token files and its data loader's batch positions.
 *
 * File: a header of 256 little-endian int32 (header[0] = 20240520, the
 * magic; header[1] = 1, the version; header[2] = the token count), then
 * the tokens as uint16. scripts/make-tokens writes one from any text file
 * (byte-level: one token per byte, ids 0..255).
 *
 * Batches (llm.c's loader, one process): step i reads B*T+1 tokens at
 * position p, which starts at 0 and advances by B*T, wrapping to 0 when
 * p + B*T + 1 would pass the end. Inputs are the first B*T tokens, targets
 * the same shifted by one, as B rows of T.
 */
#ifndef TPDP_EXAMPLES_COMMON_TOKENS_H
#define TPDP_EXAMPLES_COMMON_TOKENS_H

#include <stdint.h>

#include "examples/common/util.h"

#define TOK_MAGIC 20240520
#define TOK_VERSION 1
#define TOK_HEADER_INTS 256

typedef struct {
  char *path;
  int fd;
  int64_t count; /* tokens in the file */
  int64_t pos;   /* the next batch's first token */
} tok_file;

/* Open and check the header (magic, version, a count the file holds).
 * e names the file and what is wrong. */
int tok_open(const char *path, tok_file *f, ex_error *e);
void tok_close(tok_file *f);

/* The next batch of n = B*T inputs: tokens[0..n] (n + 1 of them) at the
 * loader's position, which then advances (and wraps). Fails when the file
 * holds fewer than n + 1 tokens or a token is >= vocab (naming the file,
 * the token's position and value). */
int tok_next_batch(tok_file *f, int64_t n, int vocab, int32_t *tokens,
                   ex_error *e);

#endif
