// SPDX-License-Identifier: BSD-3-Clause
/* Collective save: one writer per distinct slice, spread over the ranks;
 * each writer's file under a temporary name, fsync'ed and renamed to a name
 * of the new generation; index.json last, whose rename commits. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "ckpt/ckpt_internal.h"

/* Distinct slices of one tensor checked pairwise for overlap up to this
 * count (torch.chunk layouts never overlap; this catches bogus specs). */
#define MAX_PAIRWISE 4096

/* One distinct non-empty slice of an entry and who writes it. */
typedef struct {
  int entry;
  const int64_t *box; /* offsets then shape, in the gathered table */
  int writer;
  uint64_t nbytes;
} plan_slice;

typedef struct {
  int64_t *table; /* every rank's boxes (ckpt_gather_boxes) */
  int n, size;
  plan_slice *s;
  int ns;
  uint64_t *load; /* bytes each rank writes */
} plan;

static void plan_free(plan *p) {
  free(p->table);
  free(p->s);
  free(p->load);
}

static const int64_t *box_of(const plan *p, int rank, int entry) {
  return p->table + ((int64_t)rank * p->n + entry) * CKPT_BOX;
}

static int box_equal(const int64_t *a, const int64_t *b) {
  return memcmp(a, b, sizeof(int64_t) * CKPT_BOX) == 0;
}

static int64_t box_numel(int nd, const int64_t *box) {
  int64_t n = 1;
  for (int d = 0; d < nd; d++) n *= box[TPDP_MAX_DIMS + d];
  return n;
}

/* qsort context: the boxes of the entry being planned. */
static _Thread_local const plan *sort_plan;
static _Thread_local int sort_entry;

static int by_box(const void *a, const void *b) {
  int ra = *(const int *)a, rb = *(const int *)b;
  int c = memcmp(box_of(sort_plan, ra, sort_entry),
                 box_of(sort_plan, rb, sort_entry), sizeof(int64_t) * CKPT_BOX);
  return c ? c : (ra > rb) - (ra < rb);
}

/* Distinct slices of entry i, each written by its least-loaded holder. */
static tpdp_status plan_entry(plan *p, const ckpt_entry *e, int i, int *ranks) {
  int nd = e->local.ndim, nr = 0;
  for (int r = 0; r < p->size; r++)
    if (box_numel(nd, box_of(p, r, i)) > 0) ranks[nr++] = r;
  sort_plan = p;
  sort_entry = i;
  qsort(ranks, (size_t)nr, sizeof *ranks, by_box);
  int first = p->ns;
  int64_t covered = 0;
  size_t es = tpdp_dtype_size(e->local.dtype);
  for (int a = 0; a < nr;) {
    const int64_t *box = box_of(p, ranks[a], i);
    int b = a, writer = ranks[a];
    for (; b < nr && box_equal(box_of(p, ranks[b], i), box); b++)
      if (p->load[ranks[b]] < p->load[writer]) writer = ranks[b];
    int64_t numel = box_numel(nd, box);
    plan_slice *s = &p->s[p->ns++];
    *s = (plan_slice){i, box, writer, (uint64_t)numel * es};
    p->load[writer] += s->nbytes;
    covered += numel;
    a = b;
  }
  int64_t global;
  ckpt_shape_numel(nd, ckpt_global_shape(e), &global);
  int overlap = 0;
  for (int a = first; a < p->ns && p->ns - first <= MAX_PAIRWISE; a++)
    for (int b = first; b < a && !overlap; b++) {
      int64_t o[TPDP_MAX_DIMS], sh[TPDP_MAX_DIMS];
      const int64_t *x = p->s[a].box, *y = p->s[b].box;
      overlap = ckpt_box_intersect(nd, x, x + TPDP_MAX_DIMS, y,
                                   y + TPDP_MAX_DIMS, o, sh) > 0;
    }
  if (overlap || covered != global)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "tensor '%s': the ranks' local tensors cover %lld of its "
                    "%lld elements%s: every element must be held by some "
                    "rank, and distinct slices must not overlap (is the "
                    "spec's mesh over other ranks than the communicator?)",
                    e->fqn, (long long)covered, (long long)global,
                    overlap ? ", with overlapping slices" : "");
  return TPDP_SUCCESS;
}

static tpdp_status plan_build(const ckpt_group *g, const tpdp_state_dict *sd,
                              plan *p) {
  memset(p, 0, sizeof *p);
  p->n = sd->n;
  p->size = g->size;
  CHECK(ckpt_gather_boxes(g, sd, &p->table));
  int *ranks = NULL;
  tpdp_status st = TPDP_CALLOC(ranks, (size_t)g->size);
  if (st == TPDP_SUCCESS)
    st = TPDP_CALLOC(p->s, (size_t)sd->n * (size_t)g->size);
  if (st == TPDP_SUCCESS) st = TPDP_CALLOC(p->load, (size_t)g->size);
  for (int i = 0; i < sd->n && st == TPDP_SUCCESS; i++)
    st = plan_entry(p, &sd->e[i], i, ranks);
  free(ranks);
  return st;
}

/* ------------------------------------------------------------ writing */

/* "__metadata__" value of a slice: where it lies in its global tensor. */
static tpdp_status slice_meta(const ckpt_entry *e, const plan_slice *s,
                              core_strbuf *b) {
  int nd = e->local.ndim;
  const int64_t *g = ckpt_global_shape(e);
  core_sb_puts(b, "{\"name\":");
  core_sb_json_string(b, e->fqn);
  core_sb_puts(b, ",\"global_shape\":[");
  for (int d = 0; d < nd; d++)
    core_sb_printf(b, d ? ",%lld" : "%lld", (long long)g[d]);
  core_sb_puts(b, "],\"offsets\":[");
  for (int d = 0; d < nd; d++)
    core_sb_printf(b, d ? ",%lld" : "%lld", (long long)s->box[d]);
  core_sb_puts(b, "],\"spec\":");
  if (e->spec) {
    char *js = NULL;
    CHECK(tpdp_spec_to_json_alloc(e->spec, &js));
    core_sb_puts(b, js);
    free(js);
  } else {
    core_sb_puts(b, "null");
  }
  core_sb_puts(b, "}");
  return TPDP_SUCCESS;
}

/* This rank's slices (data in plan order) after their header. Each
 * slice's hash into hash[slice index]. */
static tpdp_status write_data(int fd, const char *path,
                              const tpdp_state_dict *sd, const plan *p, int me,
                              int64_t *hash) {
  int killed_point = 0;
  for (int k = 0; k < p->ns; k++) {
    const plan_slice *s = &p->s[k];
    if (s->writer != me) continue;
    const ckpt_entry *e = &sd->e[s->entry];
    void *data = NULL;
    int owned = 0;
    CHECK(ckpt_stage_begin(&e->local, 1, &data, &owned));
    XXH64_state_t h;
    XXH64_reset(&h, 0);
    tpdp_status st = TPDP_SUCCESS;
    /* Hash each chunk just before writing it, while it is in cache. */
    for (uint64_t at = 0; at < s->nbytes && st == TPDP_SUCCESS;
         at += CKPT_CHUNK_BYTES) {
      size_t n = (size_t)(s->nbytes - at < CKPT_CHUNK_BYTES ? s->nbytes - at
                                                            : CKPT_CHUNK_BYTES);
      XXH64_update(&h, (const char *)data + at, n);
      st = ckpt_write_all(fd, (const char *)data + at, n, path);
      if (st == TPDP_SUCCESS && !killed_point++)
        ckpt_test_kill_point(me, "data");
    }
    hash[k] = (int64_t)XXH64_digest(&h);
    if (owned) free(data);
    CHECK(st);
  }
  return TPDP_SUCCESS;
}

static tpdp_status write_my_file(const char *dir, const tpdp_state_dict *sd,
                                 const plan *p, int64_t gen, int me, int size,
                                 int64_t *hash) {
  int count = 0;
  for (int k = 0; k < p->ns; k++) count += p->s[k].writer == me;
  if (count == 0) return TPDP_SUCCESS;
  ckpt_st_out *outs = NULL;
  ckpt_kv *meta = NULL;
  char *path = NULL;
  core_strbuf header = {0};
  ckpt_atomic_file out = {NULL, NULL, -1};
  tpdp_status st = TPDP_CALLOC(outs, (size_t)count);
  if (st == TPDP_SUCCESS) st = TPDP_CALLOC(meta, (size_t)count);
  int n = 0;
  for (int k = 0; k < p->ns && st == TPDP_SUCCESS; k++) {
    const plan_slice *s = &p->s[k];
    if (s->writer != me) continue;
    const ckpt_entry *e = &sd->e[s->entry];
    outs[n] = (ckpt_st_out){e->fqn, e->local.dtype, e->local.ndim,
                            s->box + TPDP_MAX_DIMS, s->nbytes};
    core_strbuf v = {0};
    st = slice_meta(e, s, &v);
    if (st == TPDP_SUCCESS && v.failed)
      st = TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
    meta[n++] = (ckpt_kv){e->fqn, v.s};
  }
  if (st != TPDP_SUCCESS) goto done;
  CHECK_GOTO(ckpt_st_header(outs, count, meta, count, &header), st, done);
  char name[96];
  ckpt_data_file_name(gen, me, size, name, sizeof name);
  CHECK_GOTO(ckpt_join(dir, name, &path), st, done);
  CHECK_GOTO(ckpt_atomic_open(&out, path), st, done);
  CHECK_GOTO(ckpt_write_all(out.fd, header.s, header.len, out.tmp), st, done);
  CHECK_GOTO(write_data(out.fd, out.tmp, sd, p, me, hash), st, done);
  CHECK_GOTO(ckpt_atomic_commit(&out, dir), st, done);
  ckpt_test_kill_point(me, "file");
done:
  ckpt_atomic_abort(&out);
  for (int k = 0; meta && k < n; k++) free(meta[k].val);
  free(meta);
  free(outs);
  core_sb_free(&header);
  free(path);
  return st;
}

/* ------------------------------------------------------------ the index */

/* Rank 0: the next generation: above that of the committed index and of
 * every data file (even a crashed save's) in dir. */
static int64_t next_generation(const char *dir) {
  int64_t gen = 0;
  char *path = NULL, *text = NULL;
  size_t len = 0;
  tpdp_checkpoint *ck = NULL;
  if (ckpt_join(dir, "index.json", &path) == TPDP_SUCCESS &&
      ckpt_read_file(path, &text, &len) == TPDP_SUCCESS &&
      ckpt_index_parse(dir, path, text, len, &ck) == TPDP_SUCCESS)
    gen = ck->generation;
  ckpt_index_free(ck);
  free(text);
  free(path);
  tpdp_clear_error(); /* a missing or unreadable index is not an error */
  DIR *dp = opendir(dir);
  for (struct dirent *de = dp ? readdir(dp) : NULL; de; de = readdir(dp)) {
    int64_t g;
    int tmp;
    if (ckpt_is_data_file(de->d_name, &g, &tmp) && g > gen) gen = g;
  }
  if (dp) closedir(dp);
  return gen + 1;
}

/* Rank 0: the index of the new checkpoint (slices' files and hashes). */
static tpdp_status write_index(const char *dir, const tpdp_state_dict *sd,
                               const plan *p, int64_t gen, int size,
                               const int64_t *hash) {
  tpdp_checkpoint ck;
  memset(&ck, 0, sizeof ck);
  ck.generation = gen;
  ck.world_size = size;
  ck.meta = sd->meta;
  ck.nmeta = sd->nmeta;
  core_strbuf text = {0};
  int *file_of = NULL; /* rank -> index in ck.files, -1 if it wrote none */
  char *path = NULL;
  tpdp_status st = TPDP_CALLOC(file_of, (size_t)size);
  if (st == TPDP_SUCCESS) st = TPDP_CALLOC(ck.files, (size_t)size);
  if (st == TPDP_SUCCESS) st = TPDP_CALLOC(ck.t, (size_t)sd->n);
  for (int r = 0; r < size && st == TPDP_SUCCESS; r++) {
    file_of[r] = -1;
    if (p->load[r] == 0) continue; /* it wrote no file */
    char name[96];
    ckpt_data_file_name(gen, r, size, name, sizeof name);
    ck.files[ck.nfiles] = core_strdup(name);
    if (ck.files[ck.nfiles] == NULL)
      st = TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
    file_of[r] = ck.nfiles++;
  }
  for (int i = 0; i < sd->n && st == TPDP_SUCCESS; i++) {
    const ckpt_entry *e = &sd->e[i];
    ckpt_tensor *t = &ck.t[ck.nt++];
    t->name = e->fqn;
    t->dtype = e->local.dtype;
    t->ndim = e->local.ndim;
    memcpy(t->shape, ckpt_global_shape(e), sizeof(int64_t) * (size_t)t->ndim);
    if (e->spec) st = tpdp_spec_to_json_alloc(e->spec, &t->spec_json);
    if (st == TPDP_SUCCESS) st = TPDP_CALLOC(t->slices, (size_t)p->size);
    for (int k = 0; k < p->ns && st == TPDP_SUCCESS; k++) {
      const plan_slice *s = &p->s[k];
      if (s->entry != i) continue;
      ckpt_slice *o = &t->slices[t->nslices++];
      o->file = file_of[s->writer];
      memcpy(o->off, s->box, sizeof o->off);
      memcpy(o->shape, s->box + TPDP_MAX_DIMS, sizeof o->shape);
      o->nbytes = s->nbytes;
      o->xxh64 = (uint64_t)hash[k];
      o->rank = s->writer;
    }
  }
  if (st == TPDP_SUCCESS) st = ckpt_index_format(&ck, &text);
  if (st == TPDP_SUCCESS) st = ckpt_join(dir, "index.json", &path);
  ckpt_atomic_file out = {NULL, NULL, -1};
  if (st == TPDP_SUCCESS) st = ckpt_atomic_open(&out, path);
  if (st == TPDP_SUCCESS)
    st = ckpt_write_all(out.fd, text.s, text.len, out.tmp);
  if (st == TPDP_SUCCESS) {
    ckpt_test_kill_point(0, "index");
    st = ckpt_atomic_commit(&out, dir);
  }
  ckpt_atomic_abort(&out);
  for (int i = 0; i < ck.nt; i++) {
    free(ck.t[i].spec_json);
    free(ck.t[i].slices);
  }
  free(ck.t);
  for (int f = 0; f < ck.nfiles; f++) free(ck.files[f]);
  free(ck.files);
  free(file_of);
  free(path);
  core_sb_free(&text);
  return st;
}

/* Rank 0, after the commit: files of other generations, temporaries and
 * files of this generation the index does not name (a crashed save's). */
static void remove_stale(const char *dir, int64_t gen, const plan *p,
                         int size) {
  DIR *dp = opendir(dir);
  if (dp == NULL) return;
  for (struct dirent *de = readdir(dp); de; de = readdir(dp)) {
    int64_t g;
    int tmp, keep = 0;
    if (strcmp(de->d_name, "index.json.tmp") != 0) {
      if (!ckpt_is_data_file(de->d_name, &g, &tmp)) continue;
      for (int r = 0; r < size && !keep && !tmp && g == gen; r++) {
        char name[96];
        ckpt_data_file_name(gen, r, size, name, sizeof name);
        keep = strcmp(name, de->d_name) == 0 && p->load[r] > 0;
      }
    }
    if (keep) continue;
    char *path = NULL;
    if (ckpt_join(dir, de->d_name, &path) == TPDP_SUCCESS &&
        unlink(path) != 0 && errno != ENOENT)
      TPDP_WARN("checkpoint: cannot remove stale file '%s': %s", path,
                strerror(errno));
    free(path);
  }
  closedir(dp);
}

tpdp_status tpdp_checkpoint_save(const tpdp_state_dict *sd, const char *dir,
                                 tpdp_comm *comm,
                                 const tpdp_checkpoint_options *options) {
  TPDP_API_ENTRY;
  ckpt_group g;
  CHECK(ckpt_prologue(sd, dir, comm, options, &g, NULL));
  plan p;
  int64_t *hash = NULL, gen = 0;
  tpdp_status st = plan_build(&g, sd, &p);
  if (st == TPDP_SUCCESS) st = TPDP_CALLOC(hash, (size_t)p.ns + 1);
  /* Rank 0 makes the directory and picks the generation. */
  if (st == TPDP_SUCCESS && g.rank == 0) {
    st = ckpt_mkdirs(dir);
    if (st == TPDP_SUCCESS) gen = next_generation(dir);
  }
  CHECK_GOTO(ckpt_agree(&g, st), st, done);
  CHECK_GOTO(ckpt_allreduce_sum_i64(&g, &gen, 1), st, done);
  st = write_my_file(dir, sd, &p, gen, g.rank, g.size, hash);
  CHECK_GOTO(ckpt_agree(&g, st), st, done);
  /* Each hash is nonzero on its writer only. */
  CHECK_GOTO(ckpt_allreduce_sum_i64(&g, hash, p.ns), st, done);
  if (g.rank == 0) st = write_index(dir, sd, &p, gen, g.size, hash);
  CHECK_GOTO(ckpt_agree(&g, st), st, done);
  if (g.rank == 0) remove_stale(dir, gen, &p, g.size);
done:
  free(hash);
  plan_free(&p);
  return st;
}
