// SPDX-License-Identifier: BSD-3-Clause
/* Collective load into the destination layout of a state dict: match the
 * entries with the index, intersect each rank's local box with the saved
 * slices, decide who verifies which slice, then read and convert. */
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt_internal.h"

/* Open files kept at most (file descriptors). */
#define MAX_OPEN_FILES 256

/* Each entry's tensor in the checkpoint, checked for shape and dtype. */
static tpdp_status match(const tpdp_state_dict *sd, const tpdp_checkpoint *ck,
                         const tpdp_checkpoint_options *o, int *tensor_of) {
  for (int i = 0; i < sd->n; i++) {
    const ckpt_entry *e = &sd->e[i];
    int t = ckpt_index_find(ck, e->fqn);
    if (t < 0)
      return TPDP_ERR(TPDP_ERR_NOT_FOUND,
                      "tensor '%s' is not in checkpoint '%s' (%d tensors, "
                      "generation %lld)",
                      e->fqn, ck->dir, ck->nt, (long long)ck->generation);
    const ckpt_tensor *ct = &ck->t[t];
    const int64_t *g = ckpt_global_shape(e);
    int same = ct->ndim == e->local.ndim;
    for (int d = 0; same && d < ct->ndim; d++) same = ct->shape[d] == g[d];
    if (!same) {
      char a[160], b[160];
      tpdp_shape_format(ct->ndim, ct->shape, a, sizeof a);
      tpdp_shape_format(e->local.ndim, g, b, sizeof b);
      return TPDP_ERR(TPDP_ERR_SHAPE_MISMATCH,
                      "tensor '%s' has global shape %s in checkpoint '%s' but "
                      "%s in the state dict",
                      e->fqn, a, ck->dir, b);
    }
    tpdp_dtype want = e->local.dtype;
    if (ct->dtype != want &&
        (!o->convert_dtype || !ckpt_dtype_convertible(ct->dtype, want)))
      return TPDP_ERR(TPDP_ERR_DTYPE_MISMATCH,
                      "tensor '%s' is %s in checkpoint '%s' but %s in the "
                      "state dict (%s)",
                      e->fqn, ckpt_st_dtype_name(ct->dtype), ck->dir,
                      tpdp_dtype_name(want),
                      o->convert_dtype ? "only floating dtypes convert"
                                       : "options.convert_dtype is 0");
    tensor_of[i] = t;
  }
  if (o->strict)
    for (int t = 0; t < ck->nt; t++) {
      int found = 0;
      for (int i = 0; i < sd->n && !found; i++) found = tensor_of[i] == t;
      if (!found)
        return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                        "checkpoint '%s' has tensor '%s', which the state "
                        "dict lacks (strict load)",
                        ck->dir, ck->t[t].name);
    }
  return TPDP_SUCCESS;
}

/* One read of this rank: the part of a slice inside its local box. */
typedef struct {
  int entry, slice;
  int64_t off[TPDP_MAX_DIMS], shape[TPDP_MAX_DIMS]; /* global coordinates */
  int verify;
} job;

typedef struct {
  job *j;
  int n, cap;
} job_list;

static const int64_t *box_of(const int64_t *table, int n, int rank, int i) {
  return table + ((int64_t)rank * n + i) * CKPT_BOX;
}

/* This rank's reads. A slice that some rank reads whole is verified by
 * those ranks; one that no rank reads whole is read whole, and verified, by
 * the rank that needs most of it (the least burdened on ties). */
static tpdp_status plan_jobs(const ckpt_group *g, const tpdp_state_dict *sd,
                             const tpdp_checkpoint *ck, const int *tensor_of,
                             const int64_t *table, int verify, job_list *out) {
  uint64_t *extra = NULL;
  CHECK(TPDP_CALLOC(extra, (size_t)g->size));
  tpdp_status st = TPDP_SUCCESS;
  for (int i = 0; i < sd->n && st == TPDP_SUCCESS; i++) {
    const ckpt_tensor *t = &ck->t[tensor_of[i]];
    int nd = t->ndim;
    for (int j = 0; j < t->nslices && st == TPDP_SUCCESS; j++) {
      const ckpt_slice *s = &t->slices[j];
      int64_t snumel, o[TPDP_MAX_DIMS], sh[TPDP_MAX_DIMS], mine = 0;
      ckpt_shape_numel(nd, s->shape, &snumel);
      int whole = 0, best = -1;
      int64_t best_n = 0;
      for (int r = 0; r < g->size; r++) {
        const int64_t *b = box_of(table, sd->n, r, i);
        int64_t n = ckpt_box_intersect(nd, b, b + TPDP_MAX_DIMS, s->off,
                                       s->shape, o, sh);
        if (r == g->rank) mine = n;
        whole |= n > 0 && n == snumel;
        if (n > best_n || (n == best_n && n > 0 && extra[r] < extra[best])) {
          best = r;
          best_n = n;
        }
      }
      if (mine == 0) {
        if (!whole && best >= 0 && verify) extra[best] += s->nbytes;
        continue;
      }
      const int64_t *b = box_of(table, sd->n, g->rank, i);
      CHECK_GOTO(
          core_grow((void **)&out->j, &out->cap, out->n + 1, sizeof *out->j),
          st, done);
      job *jb = &out->j[out->n++];
      memset(jb, 0, sizeof *jb);
      jb->entry = i;
      jb->slice = j;
      ckpt_box_intersect(nd, b, b + TPDP_MAX_DIMS, s->off, s->shape, jb->off,
                         jb->shape);
      if (verify && whole)
        jb->verify = mine == snumel;
      else if (verify) {
        jb->verify = best == g->rank;
        extra[best] += s->nbytes;
      }
    }
  }
done:
  free(extra);
  return st;
}

typedef struct {
  const tpdp_checkpoint *ck;
  tpdp_safetensors **open; /* per file of the index, NULL until needed */
  int nopen;
} file_cache;

static void cache_close(file_cache *c) {
  for (int f = 0; f < c->ck->nfiles; f++) {
    tpdp_safetensors_close(c->open[f]);
    c->open[f] = NULL;
  }
  c->nopen = 0;
}

static tpdp_status cache_get(file_cache *c, int file, tpdp_safetensors **out) {
  if (c->open[file] == NULL) {
    if (c->nopen >= MAX_OPEN_FILES) cache_close(c);
    char *path = NULL;
    CHECK(ckpt_join(c->ck->dir, c->ck->files[file], &path));
    tpdp_status st = tpdp_safetensors_open(path, &c->open[file]);
    free(path);
    CHECK(st);
    c->nopen++;
  }
  *out = c->open[file];
  return TPDP_SUCCESS;
}

/* Entry i's reads into its local tensor (staged when it is not host
 * contiguous). */
static tpdp_status run_entry(tpdp_state_dict *sd, int i, const ckpt_tensor *t,
                             const job_list *jobs, int *next,
                             const int64_t *mybox, file_cache *c,
                             void *scratch) {
  ckpt_entry *e = &sd->e[i];
  if (*next >= jobs->n || jobs->j[*next].entry != i) return TPDP_SUCCESS;
  void *stage = NULL;
  int owned = 0;
  CHECK(ckpt_stage_begin(&e->local, 0, &stage, &owned));
  ckpt_dst dst = {stage, e->local.dtype, e->local.shape};
  tpdp_status st = TPDP_SUCCESS;
  for (; *next < jobs->n && jobs->j[*next].entry == i; (*next)++) {
    const job *jb = &jobs->j[*next];
    const ckpt_slice *s = &t->slices[jb->slice];
    tpdp_safetensors *f = NULL;
    int k;
    CHECK_GOTO(cache_get(c, s->file, &f), st, done);
    CHECK_GOTO(ckpt_open_slice(c->ck, t, s, f, &k), st, done);
    int64_t bs[TPDP_MAX_DIMS], bd[TPDP_MAX_DIMS];
    for (int d = 0; d < t->ndim; d++) {
      bs[d] = jb->off[d] - s->off[d];
      bd[d] = jb->off[d] - mybox[d];
    }
    ckpt_src src = {f, k, jb->verify, s->xxh64, 0, NULL};
    CHECK_GOTO(ckpt_copy_box(&src, bs, jb->shape, &dst, bd, scratch), st, done);
  }
done:
  return ckpt_stage_end(&e->local, stage, owned, st);
}

tpdp_status tpdp_checkpoint_load(tpdp_state_dict *sd, const char *dir,
                                 tpdp_comm *comm,
                                 const tpdp_checkpoint_options *options) {
  TPDP_API_ENTRY;
  ckpt_group g;
  tpdp_checkpoint_options o;
  CHECK(ckpt_prologue(sd, dir, comm, options, &g, &o));
  tpdp_checkpoint *ck = NULL;
  int *tensor_of = NULL;
  int64_t *table = NULL;
  job_list jobs = {NULL, 0, 0};
  file_cache cache = {NULL, NULL, 0};
  void *scratch = NULL;
  CHECK(ckpt_index_read(&g, dir, &ck));
  tpdp_status st = TPDP_CALLOC(tensor_of, (size_t)sd->n);
  if (st == TPDP_SUCCESS) st = match(sd, ck, &o, tensor_of);
  CHECK_GOTO(ckpt_agree(&g, st), st, done);
  CHECK_GOTO(ckpt_gather_boxes(&g, sd, &table), st, done);
  st = plan_jobs(&g, sd, ck, tensor_of, table, o.verify, &jobs);
  cache.ck = ck;
  if (st == TPDP_SUCCESS) st = TPDP_CALLOC(cache.open, (size_t)ck->nfiles);
  if (st == TPDP_SUCCESS && jobs.n > 0) {
    /* Reads stay inside one slice: no more than the largest is needed. */
    uint64_t most = 0;
    for (int t = 0; t < ck->nt; t++)
      for (int j = 0; j < ck->t[t].nslices; j++)
        if (ck->t[t].slices[j].nbytes > most) most = ck->t[t].slices[j].nbytes;
    scratch =
        malloc(most < CKPT_CHUNK_BYTES ? (size_t)most + 1 : CKPT_CHUNK_BYTES);
    if (scratch == NULL)
      st = TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "out of memory (read buffer)");
  }
  int next = 0;
  for (int i = 0; i < sd->n && st == TPDP_SUCCESS; i++)
    st = run_entry(sd, i, &ck->t[tensor_of[i]], &jobs, &next,
                   box_of(table, sd->n, g.rank, i), &cache, scratch);
  if (cache.open) cache_close(&cache);
  if (st == TPDP_SUCCESS) st = ckpt_sd_replace_meta(sd, ck->meta, ck->nmeta);
  st = ckpt_agree(&g, st);
done:
  free(scratch);
  free(cache.open);
  free(jobs.j);
  free(table);
  free(tensor_of);
  ckpt_index_free(ck);
  return st;
}
