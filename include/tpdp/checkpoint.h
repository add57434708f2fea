// SPDX-License-Identifier: BSD-3-Clause
/*
 * tpdp checkpoint (ckpt/): sharded checkpoints in the safetensors format,
 * saved and loaded collectively, resharded on load.
 *
 * A state dict names the tensors to save or to fill: FQN -> this rank's
 * local tensor, with the DTensor spec that places it in its global tensor
 * (tpdp/dtensor.h), or no spec for a tensor every rank holds whole and
 * identical (plain or replicated). The FQNs are the caller's names and are
 * kept exactly: a GPT-2 model whose tree uses Hugging Face's names saves
 * under those names.
 *
 * On disk a checkpoint is a directory:
 *   model-g<generation>-<rank+1>-of-<ranks>.safetensors
 *       one file per rank that writes: 8-byte little-endian header length
 *       N, N bytes of JSON header ({"<fqn>":{"dtype":"F32","shape":[..],
 *       "data_offsets":[begin,end]},...,"__metadata__":{"<fqn>":"<JSON:
 *       name, global_shape, offsets, spec>"}}), then the data. Each tensor
 *       of such a file is one slice (a box of the global tensor) under the
 *       global tensor's name.
 *   index.json
 *       Hugging Face's model.safetensors.index.json ("metadata":
 *       {"total_size"}, "weight_map": name -> file of its first slice)
 *       extended under "tpdp" with the generation, the saving world size,
 *       the caller's metadata and per tensor its dtype, global shape, spec
 *       and slices (file, offsets, shape, bytes, xxhash64 of the slice's
 *       bytes, writer rank).
 *
 * Saving writes each distinct slice once: replicas (e.g. over dp) hold the
 * same slice and one of them, chosen so that the bytes spread evenly over
 * the ranks, writes it. Saving is atomic per directory: files are written
 * under temporary names, fsync'ed, renamed to names of a new generation
 * (never to names the current index uses), the directory fsync'ed, and
 * index.json written last the same way: its rename commits the checkpoint.
 * A crash at any point leaves the previous checkpoint of the directory
 * loadable; files of older generations are removed after the commit.
 *
 * Loading fills the state dict's tensors, whose specs describe the
 * destination layout: another mesh, another number of processes, other
 * placements or another floating dtype than at save time. Each rank reads
 * (pread) only the byte ranges of the slices that intersect its local
 * tensors, verifies the xxhash64 of every slice it reads whole (a slice no
 * rank reads whole is read whole by one rank that needs part of it), and
 * converts f32/f16/bf16/f64 elements as needed.
 *
 * Collectives: save, load and open take a host-memory communicator (MPI,
 * e.g. tpdp_comm_world) over every rank holding the state; NULL means this
 * process alone (no communication: never pass NULL from several ranks
 * saving one checkpoint). Each spec's mesh must span the same ranks (its
 * own communicator may be another one, e.g. NCCL: only the layout is used).
 * Every rank must pass the same FQNs, in the same order, with the same
 * dtypes, global shapes and placements. Errors found on any rank are
 * agreed: every rank returns the same status and the same message, naming
 * the tensor (and file) at fault and the rank that found it; no rank
 * hangs or succeeds while another fails.
 *
 * Memory: local tensors may be host or CUDA device memory (device memory
 * needs a --config=cuda build; it is staged through host memory with
 * tpdp_tensor_copy), contiguous or strided.
 *
 * Thread-safety: a state dict is not synchronised; one thread at a time.
 * Save and load follow the communicator's rule (one thread at a time).
 */
#ifndef TPDP_CHECKPOINT_H
#define TPDP_CHECKPOINT_H

#include "tpdp/comm.h"
#include "tpdp/core.h"
#include "tpdp/dtensor.h"
#include "tpdp/module.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ----------------------------------------------------------- state dict */

typedef struct tpdp_state_dict tpdp_state_dict; /* opaque */

/* An empty state dict. Free with tpdp_state_dict_destroy. */
TPDP_API tpdp_status tpdp_state_dict_create(tpdp_state_dict **out);
/* Frees the dict (not the tensors or specs it borrows). NULL is a no-op. */
TPDP_API tpdp_status tpdp_state_dict_destroy(tpdp_state_dict *sd);

/* Add an entry. fqn: copied; non-empty, not "__metadata__". local: this
 * rank's tensor (the view is copied, its memory borrowed: it must stay
 * valid until the save or load that uses it returns). spec: borrowed, or
 * NULL for a tensor that is whole and identical on every rank. With a spec
 * the local tensor must have the shape the spec gives this rank, the
 * spec's dtype and device type; Partial placements cannot be saved or
 * loaded (redistribute to Replicate or Shard first).
 * Errors: TPDP_ERR_NULL_POINTER, TPDP_ERR_EMPTY_NAME,
 * TPDP_ERR_INVALID_ARGUMENT (reserved name, bad tensor view),
 * TPDP_ERR_DUPLICATE (the FQN is taken), TPDP_ERR_SHAPE_MISMATCH /
 * TPDP_ERR_DTYPE_MISMATCH / TPDP_ERR_DEVICE_MISMATCH (local vs spec),
 * TPDP_ERR_UNSUPPORTED (a Partial placement); each naming the FQN. */
TPDP_API tpdp_status tpdp_state_dict_add(tpdp_state_dict *sd, const char *fqn,
                                         const tpdp_tensor *local,
                                         const tpdp_spec *spec);

/* Add an entry whose local tensor is the box [offset, offset + its shape)
 * of a global tensor of global_shape (local->ndim entries each), for
 * layouts no spec describes: fully sharded units' dp rows inside a tp
 * chunk (tpdp_param_global_box gives the box). Ranks passing the same box
 * hold the same values (saved once); distinct boxes must not overlap and
 * must together cover the tensor (checked by save, as for specs). Load
 * fills each rank's box from whatever layout was saved. Errors: as
 * tpdp_state_dict_add, and TPDP_ERR_SHAPE_MISMATCH for a box outside the
 * global shape (naming the FQN). */
TPDP_API tpdp_status tpdp_state_dict_add_box(tpdp_state_dict *sd,
                                             const char *fqn,
                                             const tpdp_tensor *local,
                                             const int64_t *global_shape,
                                             const int64_t *offset);

/* Add every parameter and buffer of root's subtree, in pre-order (a
 * module's parameters, then its buffers, then its children): FQNs from
 * root, cleaned of the default wrapper prefixes (tpdp_fqn_clean), with
 * `prefix` (may be NULL) prepended; a parameter registered in several
 * places (shared weights) once, under its first FQN; its current tensor
 * view (the local tensor) and spec (tpdp_param_spec). Nothing is added
 * when an error is returned. Errors: as tpdp_state_dict_add, naming the
 * FQN. */
TPDP_API tpdp_status tpdp_state_dict_add_module(tpdp_state_dict *sd,
                                                tpdp_module *root,
                                                const char *prefix);

/* Number of entries (0 for NULL). */
TPDP_API int tpdp_state_dict_count(const tpdp_state_dict *sd);

/* Entry i, valid until the dict changes or is destroyed. */
typedef struct {
  const char *fqn;
  tpdp_tensor local;
  const tpdp_spec *spec; /* NULL: whole on every rank */
} tpdp_state_dict_entry;
TPDP_API tpdp_status tpdp_state_dict_entry_at(const tpdp_state_dict *sd, int i,
                                              tpdp_state_dict_entry *out);
/* Index of an FQN; TPDP_ERR_NOT_FOUND naming it if absent. */
TPDP_API tpdp_status tpdp_state_dict_find(const tpdp_state_dict *sd,
                                          const char *fqn, int *index);

/* Small string metadata saved in the index (step, data position, model
 * configuration as JSON, ...): key and value copied; setting a key again
 * replaces its value. Load replaces the dict's metadata with the
 * checkpoint's. Errors: NULL pointers, TPDP_ERR_EMPTY_NAME. */
TPDP_API tpdp_status tpdp_state_dict_set_meta(tpdp_state_dict *sd,
                                              const char *key,
                                              const char *value);
/* The value of key, or NULL. Valid until the dict's metadata changes. */
TPDP_API const char *tpdp_state_dict_get_meta(const tpdp_state_dict *sd,
                                              const char *key);

/* -------------------------------------------------------------- options */

#define TPDP_CHECKPOINT_OPTIONS_VERSION 1

/* Options of save and load. Initialise with TPDP_CHECKPOINT_OPTIONS_INIT
 * (or pass NULL for the defaults): `size` lets the library accept structs
 * of older, smaller versions (fields past their end take the defaults) and
 * refuse larger unknown ones. Fields are only ever added at the end. */
typedef struct {
  size_t size;      /* sizeof(tpdp_checkpoint_options) */
  unsigned version; /* TPDP_CHECKPOINT_OPTIONS_VERSION */
  /* load: check the xxhash64 of the slices read (default 1) */
  int verify;
  /* load: 1 makes a tensor of the checkpoint that the state dict lacks an
   * error; 0 (default) ignores it */
  int strict;
  /* load: 1 (default) converts between f32, f64, f16 and bf16 when the
   * checkpoint's dtype differs from the destination's; 0 makes that a
   * TPDP_ERR_DTYPE_MISMATCH. Integer dtypes never convert. */
  int convert_dtype;
} tpdp_checkpoint_options;

#define TPDP_CHECKPOINT_OPTIONS_INIT \
  { sizeof(tpdp_checkpoint_options), TPDP_CHECKPOINT_OPTIONS_VERSION, 1, 0, 1 }

/* ---------------------------------------------------------- save / load */

/* Save sd (with its metadata) into directory `dir` (created if missing,
 * parents included, by rank 0; on a file system every rank sees).
 * Collective over comm (see above). Returns once index.json is committed
 * and durable (files and directory fsync'ed) on every rank.
 * Errors (identical on every rank): NULL pointers; the entry errors of
 * tpdp_state_dict_add; TPDP_ERR_SHAPE_MISMATCH / TPDP_ERR_DTYPE_MISMATCH
 * when ranks disagree on the entries (naming the tensor and ranks);
 * TPDP_ERR_INVALID_ARGUMENT when the ranks' slices of a tensor do not
 * cover it exactly once; TPDP_ERR_IO naming the file and the failed call;
 * TPDP_ERR_INVALID_ARGUMENT for options of an unknown size; communicator
 * errors. */
TPDP_API tpdp_status
tpdp_checkpoint_save(const tpdp_state_dict *sd, const char *dir,
                     tpdp_comm *comm, const tpdp_checkpoint_options *options);

/* Load the checkpoint in `dir` into sd's tensors (each rank's local part
 * of each entry) and replace sd's metadata with the checkpoint's.
 * Collective over comm. On failure the tensors may be partly written.
 * Errors (identical on every rank, naming the tensor and, for file
 * problems, the file): TPDP_ERR_IO (no index.json, unreadable or
 * truncated file, checksum mismatch); TPDP_ERR_PARSE (malformed index or
 * safetensors header); TPDP_ERR_NOT_FOUND (a tensor the checkpoint lacks;
 * with strict, TPDP_ERR_INVALID_ARGUMENT for one the dict lacks);
 * TPDP_ERR_SHAPE_MISMATCH (global shapes differ); TPDP_ERR_DTYPE_MISMATCH
 * (dtypes differ and cannot or may not convert); the entry and agreement
 * errors of save; communicator errors. */
TPDP_API tpdp_status
tpdp_checkpoint_load(tpdp_state_dict *sd, const char *dir, tpdp_comm *comm,
                     const tpdp_checkpoint_options *options);

/* ------------------------------------------------------ reading an index
 *
 * An opened checkpoint: its index, parsed and checked (every tensor's
 * slices lie inside it and cover it exactly once), for tools and for
 * reading metadata before building a model. Opening is collective over
 * comm (rank 0 reads index.json and broadcasts it; NULL: this process
 * alone). Strings returned live as long as the handle. */
typedef struct tpdp_checkpoint tpdp_checkpoint; /* opaque */

TPDP_API tpdp_status tpdp_checkpoint_open(const char *dir, tpdp_comm *comm,
                                          tpdp_checkpoint **out);
/* NULL is a no-op. */
TPDP_API tpdp_status tpdp_checkpoint_close(tpdp_checkpoint *ck);

/* Generation (1 for the first save into a directory, then +1 per save) and
 * the number of ranks that saved it (-1 / 0 for NULL). */
TPDP_API int64_t tpdp_checkpoint_generation(const tpdp_checkpoint *ck);
TPDP_API int tpdp_checkpoint_world_size(const tpdp_checkpoint *ck);

/* The saved metadata: value of key (NULL if absent), or entry i. */
TPDP_API const char *tpdp_checkpoint_meta(const tpdp_checkpoint *ck,
                                          const char *key);
TPDP_API int tpdp_checkpoint_num_meta(const tpdp_checkpoint *ck);
TPDP_API tpdp_status tpdp_checkpoint_meta_at(const tpdp_checkpoint *ck, int i,
                                             const char **key,
                                             const char **value);

typedef struct {
  const char *name;
  tpdp_dtype dtype;
  int ndim;
  int64_t shape[TPDP_MAX_DIMS]; /* global shape */
  const char *spec_json;        /* the spec at save time, NULL if none */
  int nslices;
  uint64_t nbytes; /* bytes of all slices */
} tpdp_checkpoint_tensor_info;

typedef struct {
  const char *file; /* file name inside the directory */
  int64_t offsets[TPDP_MAX_DIMS];
  int64_t shape[TPDP_MAX_DIMS];
  uint64_t nbytes;
  uint64_t xxh64; /* of the slice's bytes, as saved */
  int rank;       /* the rank that wrote it */
} tpdp_checkpoint_slice_info;

TPDP_API int tpdp_checkpoint_num_tensors(const tpdp_checkpoint *ck);
TPDP_API tpdp_status tpdp_checkpoint_tensor_at(
    const tpdp_checkpoint *ck, int i, tpdp_checkpoint_tensor_info *out);
/* Index of a tensor; TPDP_ERR_NOT_FOUND naming it. */
TPDP_API tpdp_status tpdp_checkpoint_find(const tpdp_checkpoint *ck,
                                          const char *name, int *index);
TPDP_API tpdp_status tpdp_checkpoint_slice_at(const tpdp_checkpoint *ck,
                                              int tensor, int slice,
                                              tpdp_checkpoint_slice_info *out);

/* Re-read slice `slice` of tensor `tensor` (validating its file's header
 * against the index) and re-hash it. Not collective. Errors: TPDP_ERR_IO
 * naming file and tensor on a checksum mismatch or read failure,
 * TPDP_ERR_PARSE for a malformed file header. */
TPDP_API tpdp_status tpdp_checkpoint_verify_slice(const tpdp_checkpoint *ck,
                                                  int tensor, int slice);

/* The whole global tensor `tensor` into dst (the global shape; host or
 * device memory, any strides; f32/f64/f16/bf16 converted), every slice
 * verified. Not collective. */
TPDP_API tpdp_status tpdp_checkpoint_read_tensor(const tpdp_checkpoint *ck,
                                                 int tensor, tpdp_tensor *dst);

/* Write the checkpoint in `dir` as one unsharded safetensors file
 * `out_path`: every global tensor under its saved name, in index order, in
 * its saved dtype; "__metadata__" holds {"format":"pt"} and the saved
 * metadata. Written to a temporary name, fsync'ed and renamed. One tensor
 * at a time in memory; not collective.
 * Two optional metadata keys of the saver shape the file (and are not
 * copied into it): "consolidate_exclude", a JSON array of name prefixes
 * left out (training state such as "optim."), and "consolidate_shapes", a
 * JSON object name -> shape to write that tensor under instead of its
 * saved global shape, with the same element count (a row-major view: e.g.
 * a head-sharded [C, 3, H, C/H] saved as Hugging Face's [C, 3C]). A
 * malformed rule is TPDP_ERR_PARSE naming the key and tensor. */
TPDP_API tpdp_status tpdp_checkpoint_consolidate(const char *dir,
                                                 const char *out_path);

/* ---------------------------------------------------------- safetensors
 *
 * A checked reader of one safetensors file. Opening reads the header and
 * refuses, each with TPDP_ERR_IO or TPDP_ERR_PARSE naming the file and the
 * tensor: a file shorter than its header length or its data; a header
 * length of 0, past the file or above 100 MiB; a header that is not a JSON
 * object, or a tensor entry without a string "dtype", an array "shape" of
 * at most TPDP_MAX_DIMS integers or a pair "data_offsets"; unknown dtype
 * names and the sub-byte ones (F4, F6_*) (tpdp reads F64, F32, F16, BF16,
 * I64, I32, U8; other whole-byte dtypes open but do not read, see
 * tpdp_safetensors_tensor);
 * shapes whose element or byte count overflows; offsets outside the data
 * area, overlapping, leaving holes or not matching numel * dtype size;
 * duplicate names; a "__metadata__" that is not a string -> string map. */
typedef struct tpdp_safetensors tpdp_safetensors; /* opaque */

typedef struct {
  const char *name;
  /* TPDP_DTYPE_COUNT for a valid safetensors dtype tpdp has no type for
   * (BOOL, I8, I16, U16, U32, U64, F8_*, C64: e.g. the BOOL mask buffers of
   * a Hugging Face GPT-2 file): the file opens, but reading that tensor is
   * TPDP_ERR_DTYPE_MISMATCH naming it and its dtype. */
  tpdp_dtype dtype;
  int ndim;
  int64_t shape[TPDP_MAX_DIMS];
  uint64_t offset; /* of the first byte in the file */
  uint64_t nbytes;
  const char *dtype_name; /* as in the file: "F32", "BOOL", ... */
} tpdp_safetensors_tensor;

TPDP_API tpdp_status tpdp_safetensors_open(const char *path,
                                           tpdp_safetensors **out);
/* NULL is a no-op. */
TPDP_API tpdp_status tpdp_safetensors_close(tpdp_safetensors *f);
TPDP_API int tpdp_safetensors_count(const tpdp_safetensors *f);
/* Tensors in header order; strings live as long as the handle. */
TPDP_API tpdp_status tpdp_safetensors_tensor_at(const tpdp_safetensors *f,
                                                int i,
                                                tpdp_safetensors_tensor *out);
TPDP_API tpdp_status tpdp_safetensors_find(const tpdp_safetensors *f,
                                           const char *name, int *index);
/* "__metadata__" value of key, or NULL. */
TPDP_API const char *tpdp_safetensors_meta(const tpdp_safetensors *f,
                                           const char *key);
/* Tensor i into dst (same shape; host or device memory, any strides;
 * f32/f64/f16/bf16 converted, other dtypes must match). */
TPDP_API tpdp_status tpdp_safetensors_read(const tpdp_safetensors *f, int i,
                                           tpdp_tensor *dst);

/* A box of tensor i into dst: the tensor's elements seen in the row-major
 * shape `view_shape` (view_ndim dims with the tensor's element count, e.g.
 * a [C, 3C] weight seen as [C, 3, H, C/H]; pass the tensor's own ndim and
 * shape from tpdp_safetensors_tensor_at to read it as stored), and the box
 * [offset[d], offset[d] + dst->shape[d]) of that view in every dim d. dst
 * has view_ndim dims and the box's shape; host or device memory, any
 * strides; f32/f64/f16/bf16 elements convert into dst's dtype (other
 * dtypes must match). Only the byte ranges of the box are read (pread,
 * nearby ranges merged), so each rank of a job can read its own shard of a
 * large file. Not collective; no checksum (the file has none).
 * view_shape and offset may be NULL when view_ndim is 0.
 * Errors, each naming the file and the tensor: TPDP_ERR_NULL_POINTER;
 * TPDP_ERR_INVALID_ARGUMENT (i out of range; a box with a negative offset
 * or size, or reaching past the view, naming the dim);
 * TPDP_ERR_TOO_MANY_DIMS (view_ndim outside [0, TPDP_MAX_DIMS]);
 * TPDP_ERR_BAD_DIM_SIZE (a negative view size); TPDP_ERR_SHAPE_MISMATCH
 * (the view's element count differs from the tensor's, or dst->ndim from
 * view_ndim); TPDP_ERR_DTYPE_MISMATCH (no conversion); TPDP_ERR_IO (a
 * failed or short read). dst is partly written on a read failure.
 * Thread-safety: reads of one handle may run from several threads (each
 * pread is positioned; the handle is not changed). */
TPDP_API tpdp_status tpdp_safetensors_read_box(const tpdp_safetensors *f, int i,
                                               int view_ndim,
                                               const int64_t *view_shape,
                                               const int64_t *offset,
                                               tpdp_tensor *dst);

#ifdef __cplusplus
}
#endif
#endif /* TPDP_CHECKPOINT_H */
