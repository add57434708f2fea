/*
 * A small, hardened reader of safetensors files for the examples: the
 * header is checked whole before anything is read (length bounds, JSON
 * shape, dtype names, shapes whose element count overflows, data offsets
 * inside the file, matching the dtype and shape, and not overlapping), and
 * tensor data is read by byte range with pread, so a rank reads only the
 * slices it owns. f32, f16 and bf16 data convert to f32.
 *
 * Format (https://github.com/huggingface/safetensors): 8-byte little-endian
 * header length N, N bytes of JSON {"name": {"dtype": "F32", "shape": [..],
 * "data_offsets": [begin, end]}, ..., "__metadata__": {..}}, then the data;
 * offsets are relative to the end of the header. Little-endian data.
 *
 * The checkpoint layer (ckpt/) has its own full reader; this one stays in
 * examples/common until the examples switch to it.
 */
#ifndef TPDP_EXAMPLES_COMMON_SAFETENSORS_H
#define TPDP_EXAMPLES_COMMON_SAFETENSORS_H

#include <stdint.h>

#include "examples/common/util.h"

#define ST_MAX_DIMS 8

typedef struct {
  char *name;
  char dtype[12]; /* as in the file: "F32", "BF16", ... */
  int elsize;     /* bytes per element */
  int ndim;
  int64_t shape[ST_MAX_DIMS];
  int64_t numel;
  uint64_t begin, end; /* data_offsets (relative to the data section) */
} st_tensor;

typedef struct {
  char *path;
  int fd;
  uint64_t file_size, data_start;
  int n;
  st_tensor *t; /* sorted by name */
} st_file;

/* Open and validate `path`. On failure e names the file and the fault and
 * *f is left closed (st_close is still safe). */
int st_open(const char *path, st_file *f, ex_error *e);
void st_close(st_file *f);

/* The tensor called `name`, or NULL. */
const st_tensor *st_find(const st_file *f, const char *name);

/* 1 if the dtype converts to f32 here (F32, F16, BF16). */
int st_dtype_readable(const char *dtype);

/* Read the box [offset, offset + local) of tensor t seen in the row-major
 * view `view` (ndim dims with t's element count) into out (contiguous,
 * local's shape), converting to f32. Only the box's bytes are read. */
int st_read_box_f32(const st_file *f, const st_tensor *t, int ndim,
                    const int64_t *view, const int64_t *offset,
                    const int64_t *local, float *out, ex_error *e);

/* The whole tensor as f32 (t->numel floats). */
int st_read_f32(const st_file *f, const st_tensor *t, float *out, ex_error *e);

#endif
