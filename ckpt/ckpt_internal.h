// SPDX-License-Identifier: BSD-3-Clause
/* Internal to ckpt/: the state dict's layout, the parsed index, the
 * safetensors reader's handle, file I/O, collectives over an optional
 * communicator, and the box copy that moves bytes from a slice in a file
 * into a tensor. Not installed. */
#ifndef TPDP_CKPT_INTERNAL_H
#define TPDP_CKPT_INTERNAL_H

#include <stdint.h>

#include "core/check.h"
#include "tpdp/checkpoint.h"

/* Largest safetensors header accepted (the reference implementation's). */
#define CKPT_MAX_HEADER_BYTES ((uint64_t)100 << 20)
/* JSON numbers are doubles: integers above 2^53 are not exact. */
#define CKPT_MAX_JSON_INT 9007199254740992.0
/* Bytes per read/write/hash step. */
#define CKPT_CHUNK_BYTES ((size_t)16 << 20)

/* ------------------------------------------------------------ state dict */

typedef struct {
  char *fqn;
  tpdp_tensor local;
  const tpdp_spec *spec;
  /* tpdp_state_dict_add_box: local is the box at box_offset of a tensor
   * of box_global (no spec) */
  int boxed;
  int64_t box_offset[TPDP_MAX_DIMS], box_global[TPDP_MAX_DIMS];
} ckpt_entry;

/* A string -> string metadata item. */
typedef struct {
  char *key, *val;
} ckpt_kv;

/* Set key (copied) to val (copied), replacing an existing value. */
tpdp_status ckpt_kv_set(ckpt_kv **items, int *n, int *cap, const char *key,
                        const char *val);
/* Value of key or NULL. */
const char *ckpt_kv_get(const ckpt_kv *items, int n, const char *key);
void ckpt_kv_free(ckpt_kv *items, int n);

struct tpdp_state_dict {
  ckpt_entry *e;
  int n, cap;
  ckpt_kv *meta;
  int nmeta, meta_cap;
};

/* Check one entry (name, view, spec vs view); messages name the FQN. */
tpdp_status ckpt_check_entry(const char *fqn, const tpdp_tensor *local,
                             const tpdp_spec *spec);
/* Replace sd's metadata by copies of items[0..n). */
tpdp_status ckpt_sd_replace_meta(tpdp_state_dict *sd, const ckpt_kv *items,
                                 int n);

/* ------------------------------------------------------------- options */

/* opts (NULL = defaults) checked against its size and copied into *out. */
tpdp_status ckpt_options(const tpdp_checkpoint_options *opts,
                         tpdp_checkpoint_options *out);

/* ----------------------------------------------------------- dtype names */

/* safetensors name ("F32") of a tpdp dtype. */
const char *ckpt_st_dtype_name(tpdp_dtype dt);
/* 0 and *out for a name tpdp reads; -1 for a valid safetensors dtype tpdp
 * does not support; -2 for an unknown name. */
int ckpt_st_dtype_parse(const char *name, tpdp_dtype *out);
/* For a valid safetensors dtype of whole bytes that tpdp has no type for
 * (BOOL, I8, I16, U16, U32, U64, F8_*, C64): its element size, and its
 * name (static) in *canonical; 0 for any other name. */
int ckpt_st_opaque_size(const char *name, const char **canonical);
/* 1 if elements of `from` can be converted into `to` (equal, or both
 * floating). */
int ckpt_dtype_convertible(tpdp_dtype from, tpdp_dtype to);
/* A stored tensor `name` (dtype dt, shape) can be read into dst: the same
 * shape (TPDP_ERR_SHAPE_MISMATCH) and a convertible dtype
 * (TPDP_ERR_DTYPE_MISMATCH, ckpt_check_convert). Messages start "file
 * 'FILE': tensor ..." and say "shape"; with file NULL, "tensor ..." and
 * "global shape". */
tpdp_status ckpt_check_read(const char *file, const char *name, tpdp_dtype dt,
                            int ndim, const int64_t *shape,
                            const tpdp_tensor *dst);
/* Elements of dtype dt (of tensor `name`, in `file` or NULL) convert into
 * dst's dtype, else TPDP_ERR_DTYPE_MISMATCH naming both. */
tpdp_status ckpt_check_convert(const char *file, const char *name,
                               tpdp_dtype dt, const tpdp_tensor *dst);
/* 0 <= i < n, else TPDP_ERR_INVALID_ARGUMENT "WHAT i outside [0, n) of
 * OF'NAME'" (of: "checkpoint ", "tensor ", ""). */
tpdp_status ckpt_check_at(const char *what, int i, int n, const char *of,
                          const char *name);
/* The end of a public find: *index = i when the lookup found `tensor`
 * (i >= 0), else TPDP_ERR_NOT_FOUND "OF'NAME' has no tensor 'TENSOR'" (of:
 * "checkpoint ", "file "). */
tpdp_status ckpt_check_found(int i, const char *of, const char *name,
                             const char *tensor, int *index);
/* dst[0..n) = src[0..n) converted (same dtype: a copy). */
void ckpt_convert(void *dst, tpdp_dtype to, const void *src, tpdp_dtype from,
                  int64_t n);

/* Checked element and byte counts of a shape; -1 for a negative size or
 * on overflow (core_shape_size's rule: the product of the non-zero sizes,
 * times the element size for nbytes, must fit in int64, so that strides
 * and offsets computed from the shape fit too). */
int ckpt_shape_numel(int ndim, const int64_t *shape, int64_t *numel);
int ckpt_shape_nbytes(int ndim, const int64_t *shape, tpdp_dtype dt,
                      uint64_t *nbytes);

/* 0 and *out for a JSON integer in [0, 2^53] (exact in a double: index.json
 * and safetensors headers), else -1. */
struct cJSON;
int ckpt_json_uint(const struct cJSON *v, uint64_t *out);
/* out[0..n) = the elements of JSON array a, each a ckpt_json_uint; -1, or
 * the position of the first element that is not one (out is filled up to
 * it). */
int ckpt_json_dims(const struct cJSON *a, int n, int64_t *out);

/* Names sorted for lookup. */
typedef struct {
  const char *name;
  int index;
} ckpt_name_ix;
/* Sort by name; returns the position of a duplicate name, or -1. */
int ckpt_names_sort(ckpt_name_ix *names, int n);
/* index of name in sorted names, -1 if absent. */
int ckpt_names_find(const ckpt_name_ix *names, int n, const char *name);

/* ------------------------------------------------------------------ I/O */

/* "dir/name" (malloc'd) into *out. */
tpdp_status ckpt_join(const char *dir, const char *name, char **out);
/* Write all n bytes (TPDP_ERR_IO naming path and errno). */
tpdp_status ckpt_write_all(int fd, const void *buf, size_t n, const char *path);
/* Read exactly n bytes at off; a short read is TPDP_ERR_IO ("ends at"). */
tpdp_status ckpt_pread_all(int fd, void *buf, size_t n, uint64_t off,
                           const char *path);
/* fsync of a file descriptor / a directory. */
tpdp_status ckpt_fsync(int fd, const char *path);
tpdp_status ckpt_fsync_dir(const char *dir);
/* mkdir -p. */
tpdp_status ckpt_mkdirs(const char *dir);
/* Whole file into a malloc'd NUL-terminated buffer. */
tpdp_status ckpt_read_file(const char *path, char **out, size_t *len);
/* A file written under a temporary name (path.tmp) and renamed into place
 * once complete and durable. */
typedef struct {
  char *path, *tmp;
  int fd;
} ckpt_atomic_file;
/* Create path.tmp for writing (f->fd). */
tpdp_status ckpt_atomic_open(ckpt_atomic_file *f, const char *path);
/* fsync, close, rename to path, fsync of the directory `dir`; on failure
 * the temporary is removed. Frees f's names either way. */
tpdp_status ckpt_atomic_commit(ckpt_atomic_file *f, const char *dir);
/* Close and remove the temporary; free f's names. */
void ckpt_atomic_abort(ckpt_atomic_file *f);

/* Test hook (TPDP_CKPT_TEST_KILL="<rank>:<point>"): raise SIGKILL on that
 * rank at that point of a save. Points: "data" (half of its file's data
 * written), "file" (its file renamed, before the index), "index" (rank 0:
 * index.json.tmp written, before its rename). */
void ckpt_test_kill_point(int rank, const char *point);

/* ---------------------------------------------------------- collectives */

/* The ranks of a save/load: comm NULL is this process alone. */
typedef struct {
  tpdp_comm *comm;
  int rank, size;
} ckpt_group;

tpdp_status ckpt_group_init(ckpt_group *g, tpdp_comm *comm);
/* tpdp_comm_agree over the group (this process alone: `mine`). On failure
 * every rank returns the status and message of the lowest failing rank
 * ("... (rank r of NAME)"): identical everywhere. */
tpdp_status ckpt_agree(const ckpt_group *g, tpdp_status mine);
/* all[r * n + i] = rank r's mine[i]. */
tpdp_status ckpt_allgather_i64(const ckpt_group *g, const int64_t *mine,
                               int64_t n, int64_t *all);
/* In place sum over ranks. */
tpdp_status ckpt_allreduce_sum_i64(const ckpt_group *g, int64_t *v, int64_t n);
/* Root's *buf and *len to every rank (others receive a malloc'd copy). A
 * negative *len on root sends no bytes. */
tpdp_status ckpt_bcast_bytes(const ckpt_group *g, char **buf, int64_t *len,
                             int root);

/* ---------------------------------------------------------------- index */

typedef struct {
  int file; /* index into the checkpoint's file list */
  int64_t off[TPDP_MAX_DIMS], shape[TPDP_MAX_DIMS];
  uint64_t nbytes, xxh64;
  int rank;
} ckpt_slice;

typedef struct {
  char *name;
  tpdp_dtype dtype;
  int ndim;
  int64_t shape[TPDP_MAX_DIMS];
  char *spec_json; /* NULL if saved without a spec */
  int nslices;
  ckpt_slice *slices;
} ckpt_tensor;

struct tpdp_checkpoint {
  char *dir;
  int64_t generation;
  int world_size;
  int nfiles;
  char **files;
  int nt;
  ckpt_tensor *t;
  ckpt_name_ix *sorted; /* tensor names in order, for lookup */
  int nmeta, meta_cap;
  ckpt_kv *meta;
};

/* Parse index.json text (len bytes) of `dir` into *out. Every message
 * starts with `path`, the index's path (ckpt_join(dir, "index.json")),
 * which the callers have already built to read the text. */
tpdp_status ckpt_index_parse(const char *dir, const char *path,
                             const char *text, size_t len,
                             tpdp_checkpoint **out);
/* Rank 0 reads dir/index.json and broadcasts it; every rank parses it. */
tpdp_status ckpt_index_read(const ckpt_group *g, const char *dir,
                            tpdp_checkpoint **out);
/* JSON text of an index (tensors' slices and files must be set). */
tpdp_status ckpt_index_format(const tpdp_checkpoint *ck, core_strbuf *out);
void ckpt_index_free(tpdp_checkpoint *ck);
/* Index of a tensor name, -1 if absent. */
int ckpt_index_find(const tpdp_checkpoint *ck, const char *name);

/* Name of a data file of generation gen written by rank of nranks, and the
 * inverse: 1 if `name` is such a file (*tmp = 0) or its temporary name
 * (*tmp = 1), with its generation. */
void ckpt_data_file_name(int64_t gen, int rank, int nranks, char *buf,
                         size_t len);
int ckpt_is_data_file(const char *name, int64_t *gen, int *tmp);
/* Locate slice s of tensor t in its opened file f (*index): the file's
 * tensor must have the slice's dtype and shape (TPDP_ERR_IO naming file
 * and tensor otherwise). */
tpdp_status ckpt_open_slice(const tpdp_checkpoint *ck, const ckpt_tensor *t,
                            const ckpt_slice *s, tpdp_safetensors *f,
                            int *index);

/* ----------------------------------------------------------------- plan */

/* Values per entry in the table of boxes: offsets then shape. */
#define CKPT_BOX (2 * TPDP_MAX_DIMS)

/* The entry's box on this rank in global coordinates: the spec's local
 * shape and offset (an empty shard: offset 0), or the whole tensor. */
void ckpt_local_box(const ckpt_entry *e, int64_t *box);
/* The entry's global shape (ndim entries). */
const int64_t *ckpt_global_shape(const ckpt_entry *e);
/* Every rank's box of every entry: (*all)[(r * n + i) * CKPT_BOX + ...],
 * malloc'd. */
tpdp_status ckpt_gather_boxes(const ckpt_group *g, const tpdp_state_dict *sd,
                              int64_t **all);
/* Every rank has the same entries (names, dtypes, global shapes,
 * placements), else the same error on all naming the first that differs
 * and what two ranks hold there. */
tpdp_status ckpt_check_same_entries(const ckpt_group *g,
                                    const tpdp_state_dict *sd);
/* What save and load start with: the group of comm, the options (NULL =
 * defaults) checked and copied into *o (o NULL: only checked, as save
 * does, every option being a load option), every entry checked and the
 * same on every rank; a failure anywhere fails every rank alike. */
tpdp_status ckpt_prologue(const tpdp_state_dict *sd, const char *dir,
                          tpdp_comm *comm,
                          const tpdp_checkpoint_options *options, ckpt_group *g,
                          tpdp_checkpoint_options *o);
/* Intersection of boxes a and b (offset, shape) into out; returns its
 * element count (0: disjoint). */
int64_t ckpt_box_intersect(int nd, const int64_t *ao, const int64_t *as,
                           const int64_t *bo, const int64_t *bs, int64_t *oo,
                           int64_t *os);

/* ---------------------------------------------------------- safetensors */

typedef struct {
  char *name;
  tpdp_dtype dtype; /* TPDP_DTYPE_COUNT for an opaque one (below) */
  /* A valid safetensors dtype tpdp has no type for (BOOL, U16, ...): its
   * name; the tensor is kept (the file opens) but cannot be read. NULL
   * otherwise. */
  const char *opaque;
  int ndim;
  int64_t shape[TPDP_MAX_DIMS];
  uint64_t begin, end; /* data_offsets, relative to the data area */
} ckpt_st_tensor;

struct tpdp_safetensors {
  char *path;
  int fd;
  uint64_t file_size, data_start;
  int n;
  ckpt_st_tensor *t;
  ckpt_name_ix *sorted; /* names in order, for lookup */
  int nmeta, meta_cap;
  ckpt_kv *meta;
};

/* Index of a tensor name in f, -1 if absent. */
int ckpt_st_find(const tpdp_safetensors *f, const char *name);

/* One tensor of a file being written. */
typedef struct {
  const char *name;
  tpdp_dtype dtype;
  int ndim;
  const int64_t *shape;
  uint64_t nbytes;
} ckpt_st_out;

/* Header bytes of a safetensors file holding tensors[0..n) in order,
 * contiguous from data offset 0, with "__metadata__" meta[0..nmeta)
 * (omitted when nmeta is 0): the 8-byte length, then the JSON padded with
 * spaces to a multiple of 8 bytes. */
tpdp_status ckpt_st_header(const ckpt_st_out *tensors, int n,
                           const ckpt_kv *meta, int nmeta, core_strbuf *out);

/* ------------------------------------------------------------- box copy */

/* Where a slice's bytes are: an open safetensors file and its tensor. */
typedef struct {
  const tpdp_safetensors *f;
  int index;    /* tensor in f */
  int verify;   /* read the whole slice and check its xxhash64 */
  uint64_t xxh; /* expected hash (with verify) */
  /* The row-major shape the tensor's elements are seen in (view_ndim
   * dims, the same element count), or NULL for the tensor's own. */
  int view_ndim;
  const int64_t *view;
} ckpt_src;

/* Host contiguous destination of dtype dt and shape shape[ndim]. */
typedef struct {
  void *data;
  tpdp_dtype dtype;
  const int64_t *shape;
} ckpt_dst;

/* Copy the box (box_shape, at box_src in the slice's coordinates) of the
 * slice into dst at box_dst, converting dtypes; reads only the byte ranges
 * the box needs (coalescing nearby ones), or the whole slice with
 * src->verify (then checking its hash). box_shape NULL: no box, only
 * verify (dst unused). scratch: at least CKPT_CHUNK_BYTES bytes or the
 * slice's bytes, whichever is fewer, or NULL. */
tpdp_status ckpt_copy_box(const ckpt_src *src, const int64_t *box_src,
                          const int64_t *box_shape, const ckpt_dst *dst,
                          const int64_t *box_dst, void *scratch);

/* A host contiguous copy of a tensor view (host/device, any strides):
 * *stage = t's data if t is host contiguous, else a malloc'd buffer of its
 * shape and dtype (*owned = 1), filled from t with copy_in. */
tpdp_status ckpt_stage_begin(const tpdp_tensor *t, int copy_in, void **stage,
                             int *owned);
/* The end of a read into t through its stage: st is how filling the
 * stage went. On success the staged bytes go into t (if staged); the
 * buffer is freed either way. Returns st when it failed, else the status
 * of the copy into t (the one tail every staged read shares). */
tpdp_status ckpt_stage_end(tpdp_tensor *t, void *stage, int owned,
                           tpdp_status st);

#endif /* TPDP_CKPT_INTERNAL_H */
