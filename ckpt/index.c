// SPDX-License-Identifier: BSD-3-Clause
/* index.json: its format and checked parser, the opened checkpoint's
 * accessors, and reading or verifying single slices and whole tensors. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt_internal.h"

#define INDEX_FORMAT "tpdp-checkpoint"
#define INDEX_VERSION 1
/* Slices of one tensor checked pairwise for overlap up to this count. */
#define MAX_PAIRWISE 4096

/* -------------------------------------------------------- data files */

void ckpt_data_file_name(int64_t gen, int rank, int nranks, char *buf,
                         size_t len) {
  snprintf(buf, len, "model-g%06lld-%05d-of-%05d.safetensors", (long long)gen,
           rank + 1, nranks);
}

int ckpt_is_data_file(const char *name, int64_t *gen, int *tmp) {
  long long g;
  int r, n, end = 0;
  if (sscanf(name, "model-g%lld-%d-of-%d.safetensors%n", &g, &r, &n, &end) !=
          3 ||
      end == 0 || strncmp(name, "model-g", 7) != 0)
    return 0;
  if (strcmp(name + end, "") == 0)
    *tmp = 0;
  else if (strcmp(name + end, ".tmp") == 0)
    *tmp = 1;
  else
    return 0;
  *gen = g;
  return 1;
}

/* ------------------------------------------------------------- parsing */

typedef struct {
  const char *path; /* dir/index.json, for messages */
  tpdp_checkpoint *ck;
} parser;

static tpdp_status get_uint(const parser *p, const cJSON *obj,
                            const char *field, const char *what,
                            uint64_t *out) {
  if (ckpt_json_uint(cJSON_GetObjectItemCaseSensitive(obj, field), out) != 0)
    return TPDP_ERR(TPDP_ERR_PARSE,
                    "index '%s': %s\"%s\" missing or not an integer in [0, "
                    "2^53]",
                    p->path, what, field);
  return TPDP_SUCCESS;
}

static tpdp_status get_dims(const parser *p, const cJSON *obj,
                            const char *field, const char *what, int ndim,
                            int64_t *out, int *nout) {
  const cJSON *a = cJSON_GetObjectItemCaseSensitive(obj, field);
  int n = cJSON_IsArray(a) ? cJSON_GetArraySize(a) : -1;
  if (n < 0 || n > TPDP_MAX_DIMS || (ndim >= 0 && n != ndim))
    return TPDP_ERR(TPDP_ERR_PARSE,
                    "index '%s': %s\"%s\" missing or not an array of %s%d "
                    "integers",
                    p->path, what, field, ndim >= 0 ? "" : "at most ",
                    ndim >= 0 ? ndim : TPDP_MAX_DIMS);
  int bad = ckpt_json_dims(a, n, out);
  if (bad >= 0)
    return TPDP_ERR(TPDP_ERR_PARSE,
                    "index '%s': %s\"%s\"[%d] is not an integer in [0, 2^53]",
                    p->path, what, field, bad);
  if (nout) *nout = n;
  return TPDP_SUCCESS;
}

static tpdp_status get_string(const parser *p, const cJSON *obj,
                              const char *field, const char *what,
                              const char **out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, field);
  if (!cJSON_IsString(v) || v->valuestring == NULL)
    return TPDP_ERR(TPDP_ERR_PARSE,
                    "index '%s': %s\"%s\" missing or not a string", p->path,
                    what, field);
  *out = v->valuestring;
  return TPDP_SUCCESS;
}

/* Index of file name `name` in the checkpoint's list (added if new). A
 * data file name is a plain name inside the directory. */
static tpdp_status file_index(const parser *p, const char *name,
                              const char *what, int *out) {
  if (name[0] == '\0' || name[0] == '.' || strchr(name, '/') != NULL)
    return TPDP_ERR(TPDP_ERR_PARSE,
                    "index '%s': %sfile '%s' is not a plain file name in the "
                    "checkpoint's directory",
                    p->path, what, name);
  tpdp_checkpoint *ck = p->ck;
  for (int i = 0; i < ck->nfiles; i++)
    if (strcmp(ck->files[i], name) == 0) {
      *out = i;
      return TPDP_SUCCESS;
    }
  int cap = ck->nfiles;
  CHECK(core_grow((void **)&ck->files, &cap, ck->nfiles + 1, sizeof(char *)));
  ck->files[ck->nfiles] = core_strdup(name);
  if (ck->files[ck->nfiles] == NULL)
    return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
  *out = ck->nfiles++;
  return TPDP_SUCCESS;
}

static tpdp_status parse_slice(const parser *p, const cJSON *js, ckpt_tensor *t,
                               int j, ckpt_slice *s) {
  char what[320];
  snprintf(what, sizeof what, "tensor '%s': slices[%d]: ", t->name, j);
  if (!cJSON_IsObject(js))
    return TPDP_ERR(TPDP_ERR_PARSE, "index '%s': %sis not an object", p->path,
                    what);
  const char *file = NULL, *hex = NULL;
  CHECK(get_string(p, js, "file", what, &file));
  CHECK(file_index(p, file, what, &s->file));
  CHECK(get_dims(p, js, "offsets", what, t->ndim, s->off, NULL));
  CHECK(get_dims(p, js, "shape", what, t->ndim, s->shape, NULL));
  for (int d = 0; d < t->ndim; d++)
    if (s->off[d] > t->shape[d] || s->shape[d] > t->shape[d] - s->off[d]) {
      char o[160], sh[160], g[160];
      tpdp_shape_format(t->ndim, s->off, o, sizeof o);
      tpdp_shape_format(t->ndim, s->shape, sh, sizeof sh);
      tpdp_shape_format(t->ndim, t->shape, g, sizeof g);
      return TPDP_ERR(TPDP_ERR_PARSE,
                      "index '%s': %sshape %s at offsets %s lies outside the "
                      "global shape %s",
                      p->path, what, sh, o, g);
    }
  uint64_t nb = 0;
  CHECK(get_uint(p, js, "nbytes", what, &nb));
  uint64_t need;
  ckpt_shape_nbytes(t->ndim, s->shape, t->dtype, &need); /* <= the tensor's */
  if (nb != need)
    return TPDP_ERR(TPDP_ERR_PARSE,
                    "index '%s': %s\"nbytes\" is %llu but its shape of %s "
                    "needs %llu",
                    p->path, what, (unsigned long long)nb,
                    ckpt_st_dtype_name(t->dtype), (unsigned long long)need);
  s->nbytes = nb;
  CHECK(get_string(p, js, "xxh64", what, &hex));
  char *end = NULL;
  s->xxh64 = strtoull(hex, &end, 16);
  if (strlen(hex) != 16 || *end != '\0')
    return TPDP_ERR(TPDP_ERR_PARSE,
                    "index '%s': %s\"xxh64\" '%s' is not 16 hex digits",
                    p->path, what, hex);
  uint64_t r = 0;
  CHECK(get_uint(p, js, "rank", what, &r));
  s->rank = (int)(r < 1u << 30 ? r : 1u << 30);
  return TPDP_SUCCESS;
}

/* 1 if boxes a and b share an element. */
static int boxes_overlap(int nd, const int64_t *ao, const int64_t *as,
                         const int64_t *bo, const int64_t *bs) {
  for (int d = 0; d < nd; d++)
    if (ao[d] + as[d] <= bo[d] || bo[d] + bs[d] <= ao[d]) return 0;
  return 1;
}

/* The slices cover the tensor exactly once. */
static tpdp_status check_cover(const parser *p, const ckpt_tensor *t) {
  int64_t numel = 0, total = 0, n;
  ckpt_shape_numel(t->ndim, t->shape, &numel);
  for (int j = 0; j < t->nslices; j++) {
    ckpt_shape_numel(t->ndim, t->slices[j].shape, &n); /* <= the tensor's */
    /* Past MAX_PAIRWISE slices overlaps are not looked for: the sum of
     * many slices can then pass int64. */
    if (__builtin_add_overflow(total, n, &total))
      return TPDP_ERR(TPDP_ERR_PARSE,
                      "index '%s': tensor '%s': its slices hold more elements "
                      "than int64 counts (slices overlap: the tensor has "
                      "%lld)",
                      p->path, t->name, (long long)numel);
    if (n == 0 || t->nslices > MAX_PAIRWISE) continue;
    for (int k = 0; k < j; k++)
      if (boxes_overlap(t->ndim, t->slices[j].off, t->slices[j].shape,
                        t->slices[k].off, t->slices[k].shape))
        return TPDP_ERR(TPDP_ERR_PARSE,
                        "index '%s': tensor '%s': slices %d and %d overlap",
                        p->path, t->name, k, j);
  }
  if (total != numel)
    return TPDP_ERR(TPDP_ERR_PARSE,
                    "index '%s': tensor '%s': its slices hold %lld of its "
                    "%lld elements",
                    p->path, t->name, (long long)total, (long long)numel);
  return TPDP_SUCCESS;
}

static tpdp_status parse_tensor(const parser *p, const cJSON *jt, int i,
                                ckpt_tensor *t) {
  char what[64];
  snprintf(what, sizeof what, "tensors[%d]: ", i);
  if (!cJSON_IsObject(jt))
    return TPDP_ERR(TPDP_ERR_PARSE, "index '%s': %sis not an object", p->path,
                    what);
  const char *name = NULL, *dt = NULL;
  CHECK(get_string(p, jt, "name", what, &name));
  if (name[0] == '\0')
    return TPDP_ERR(TPDP_ERR_PARSE, "index '%s': %s\"name\" is empty", p->path,
                    what);
  /* No data file could hold it (a state dict refuses it too). */
  if (strcmp(name, "__metadata__") == 0)
    return TPDP_ERR(TPDP_ERR_PARSE,
                    "index '%s': %s\"name\" '__metadata__' is reserved by the "
                    "safetensors format and cannot name a tensor",
                    p->path, what);
  t->name = core_strdup(name);
  if (t->name == NULL) return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
  char twhat[320];
  snprintf(twhat, sizeof twhat, "tensor '%s': ", name);
  CHECK(get_string(p, jt, "dtype", twhat, &dt));
  if (ckpt_st_dtype_parse(dt, &t->dtype) != 0)
    return TPDP_ERR(TPDP_ERR_PARSE,
                    "index '%s': %sunknown or unsupported dtype '%s'", p->path,
                    twhat, dt);
  CHECK(get_dims(p, jt, "shape", twhat, -1, t->shape, &t->ndim));
  uint64_t nb = 0;
  if (ckpt_shape_nbytes(t->ndim, t->shape, t->dtype, &nb) != 0) {
    char sh[160];
    tpdp_shape_format(t->ndim, t->shape, sh, sizeof sh);
    return TPDP_ERR(TPDP_ERR_PARSE,
                    "index '%s': %sshape %s of %s overflows: its byte size "
                    "(non-zero sizes times the element size) is above "
                    "INT64_MAX",
                    p->path, twhat, sh, dt);
  }
  const cJSON *spec = cJSON_GetObjectItemCaseSensitive(jt, "spec");
  if (spec != NULL && !cJSON_IsNull(spec)) {
    if (!cJSON_IsObject(spec))
      return TPDP_ERR(TPDP_ERR_PARSE,
                      "index '%s': %s\"spec\" is neither null nor an object",
                      p->path, twhat);
    t->spec_json = cJSON_PrintUnformatted(spec);
    if (t->spec_json == NULL)
      return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
  }
  const cJSON *sl = cJSON_GetObjectItemCaseSensitive(jt, "slices");
  if (!cJSON_IsArray(sl))
    return TPDP_ERR(TPDP_ERR_PARSE,
                    "index '%s': %s\"slices\" missing or not an array", p->path,
                    twhat);
  int ns = cJSON_GetArraySize(sl);
  CHECK(TPDP_CALLOC(t->slices, (size_t)ns));
  const cJSON *js;
  cJSON_ArrayForEach(js, sl) {
    CHECK(parse_slice(p, js, t, t->nslices, &t->slices[t->nslices]));
    t->nslices++;
  }
  return check_cover(p, t);
}

static tpdp_status parse_root(const parser *p, const cJSON *root) {
  tpdp_checkpoint *ck = p->ck;
  if (!cJSON_IsObject(root))
    return TPDP_ERR(TPDP_ERR_PARSE, "index '%s' is not a JSON object", p->path);
  const cJSON *tp = cJSON_GetObjectItemCaseSensitive(root, "tpdp");
  if (!cJSON_IsObject(tp))
    return TPDP_ERR(TPDP_ERR_PARSE,
                    "index '%s': no \"tpdp\" object (not a tpdp checkpoint "
                    "index)",
                    p->path);
  const char *fmt = NULL;
  CHECK(get_string(p, tp, "format", "tpdp.", &fmt));
  uint64_t v = 0, gen = 0, ws = 0;
  CHECK(get_uint(p, tp, "version", "tpdp.", &v));
  if (strcmp(fmt, INDEX_FORMAT) != 0 || v != INDEX_VERSION)
    return TPDP_ERR(TPDP_ERR_PARSE,
                    "index '%s' is format '%s' version %llu; this tpdp reads "
                    "'%s' version %d",
                    p->path, fmt, (unsigned long long)v, INDEX_FORMAT,
                    INDEX_VERSION);
  CHECK(get_uint(p, tp, "generation", "tpdp.", &gen));
  CHECK(get_uint(p, tp, "world_size", "tpdp.", &ws));
  if (ws < 1 || ws > 1u << 30)
    return TPDP_ERR(TPDP_ERR_PARSE, "index '%s': world_size %llu", p->path,
                    (unsigned long long)ws);
  ck->generation = (int64_t)gen;
  ck->world_size = (int)ws;
  const cJSON *meta = cJSON_GetObjectItemCaseSensitive(tp, "metadata");
  if (meta != NULL) {
    if (!cJSON_IsObject(meta))
      return TPDP_ERR(TPDP_ERR_PARSE,
                      "index '%s': \"tpdp.metadata\" is not an object",
                      p->path);
    const cJSON *kv;
    cJSON_ArrayForEach(kv, meta) {
      if (!cJSON_IsString(kv))
        return TPDP_ERR(TPDP_ERR_PARSE,
                        "index '%s': metadata '%s' is not a string", p->path,
                        kv->string);
      CHECK(ckpt_kv_set(&ck->meta, &ck->nmeta, &ck->meta_cap, kv->string,
                        kv->valuestring));
    }
  }
  const cJSON *ts = cJSON_GetObjectItemCaseSensitive(tp, "tensors");
  if (!cJSON_IsArray(ts))
    return TPDP_ERR(TPDP_ERR_PARSE,
                    "index '%s': \"tpdp.tensors\" missing or not an array",
                    p->path);
  int n = cJSON_GetArraySize(ts);
  CHECK(TPDP_CALLOC(ck->t, (size_t)n));
  const cJSON *jt;
  cJSON_ArrayForEach(jt, ts) {
    /* Counted first, so that ckpt_index_free frees a tensor that fails
     * half-parsed (its name, its slices) too (found by
     * tests/fuzz/ckpt_index_fuzz). */
    ck->nt++;
    CHECK(parse_tensor(p, jt, ck->nt - 1, &ck->t[ck->nt - 1]));
  }
  CHECK(TPDP_CALLOC(ck->sorted, (size_t)ck->nt));
  for (int i = 0; i < ck->nt; i++)
    ck->sorted[i] = (ckpt_name_ix){ck->t[i].name, i};
  int dup = ckpt_names_sort(ck->sorted, ck->nt);
  if (dup >= 0)
    return TPDP_ERR(TPDP_ERR_PARSE, "index '%s': tensor '%s' appears twice",
                    p->path, ck->sorted[dup].name);
  return TPDP_SUCCESS;
}

void ckpt_index_free(tpdp_checkpoint *ck) {
  if (ck == NULL) return;
  for (int i = 0; i < ck->nt; i++) {
    free(ck->t[i].name);
    free(ck->t[i].spec_json);
    free(ck->t[i].slices);
  }
  free(ck->t);
  free(ck->sorted);
  for (int i = 0; i < ck->nfiles; i++) free(ck->files[i]);
  free(ck->files);
  ckpt_kv_free(ck->meta, ck->nmeta);
  free(ck->dir);
  free(ck);
}

tpdp_status ckpt_index_parse(const char *dir, const char *path,
                             const char *text, size_t len,
                             tpdp_checkpoint **out) {
  tpdp_checkpoint *ck = NULL;
  tpdp_status st = TPDP_CALLOC(ck, 1);
  cJSON *root = NULL;
  if (st != TPDP_SUCCESS) goto done;
  ck->dir = core_strdup(dir);
  if (ck->dir == NULL) {
    st = TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
    goto done;
  }
  const char *end = NULL;
  root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
  if (root == NULL) {
    st = TPDP_ERR(TPDP_ERR_PARSE,
                  "index '%s' is not valid JSON (near byte %zu of %zu)", path,
                  end && end >= text ? (size_t)(end - text) : (size_t)0, len);
    goto done;
  }
  parser p = {path, ck};
  CHECK_GOTO(parse_root(&p, root), st, done);
  *out = ck;
  ck = NULL;
done:
  cJSON_Delete(root);
  ckpt_index_free(ck);
  return st;
}

tpdp_status ckpt_index_read(const ckpt_group *g, const char *dir,
                            tpdp_checkpoint **out) {
  char *text = NULL, *path = NULL;
  int64_t len = -1;
  /* Every rank names the path in the parser's messages; rank 0 reads it. */
  tpdp_status st = ckpt_join(dir, "index.json", &path);
  if (st == TPDP_SUCCESS && g->rank == 0) {
    size_t n = 0;
    st = ckpt_read_file(path, &text, &n);
    if (st == TPDP_SUCCESS) len = (int64_t)n;
  }
  /* Rank 0's failure to read reaches every rank before the broadcast. */
  CHECK_GOTO(ckpt_agree(g, st), st, done);
  CHECK_GOTO(ckpt_bcast_bytes(g, &text, &len, 0), st, done);
  st = ckpt_index_parse(dir, path, text, (size_t)len, out);
done:
  free(text);
  free(path);
  return st;
}

int ckpt_index_find(const tpdp_checkpoint *ck, const char *name) {
  return ckpt_names_find(ck->sorted, ck->nt, name);
}

/* ------------------------------------------------------------ writing */

static void put_dims(core_strbuf *b, int nd, const int64_t *v) {
  core_sb_puts(b, "[");
  for (int d = 0; d < nd; d++)
    core_sb_printf(b, d ? ",%lld" : "%lld", (long long)v[d]);
  core_sb_puts(b, "]");
}

tpdp_status ckpt_index_format(const tpdp_checkpoint *ck, core_strbuf *b) {
  uint64_t total = 0;
  for (int i = 0; i < ck->nt; i++)
    for (int j = 0; j < ck->t[i].nslices; j++)
      total += ck->t[i].slices[j].nbytes;
  core_sb_printf(b, "{\n  \"metadata\": {\"total_size\": %llu},\n",
                 (unsigned long long)total);
  core_sb_puts(b, "  \"weight_map\": {");
  int first = 1;
  for (int i = 0; i < ck->nt; i++) {
    const ckpt_tensor *t = &ck->t[i];
    if (t->nslices == 0) continue;
    core_sb_puts(b, first ? "\n    " : ",\n    ");
    first = 0;
    core_sb_json_string(b, t->name);
    core_sb_puts(b, ": ");
    core_sb_json_string(b, ck->files[t->slices[0].file]);
  }
  core_sb_printf(b,
                 "\n  },\n  \"tpdp\": {\n    \"format\": \"%s\",\n"
                 "    \"version\": %d,\n    \"generation\": %lld,\n"
                 "    \"world_size\": %d,\n    \"metadata\": {",
                 INDEX_FORMAT, INDEX_VERSION, (long long)ck->generation,
                 ck->world_size);
  for (int i = 0; i < ck->nmeta; i++) {
    core_sb_puts(b, i ? ", " : "");
    core_sb_json_string(b, ck->meta[i].key);
    core_sb_puts(b, ": ");
    core_sb_json_string(b, ck->meta[i].val);
  }
  core_sb_puts(b, "},\n    \"tensors\": [");
  for (int i = 0; i < ck->nt; i++) {
    const ckpt_tensor *t = &ck->t[i];
    core_sb_puts(b, i ? ",\n      {\"name\": " : "\n      {\"name\": ");
    core_sb_json_string(b, t->name);
    core_sb_printf(
        b, ", \"dtype\": \"%s\", \"shape\": ", ckpt_st_dtype_name(t->dtype));
    put_dims(b, t->ndim, t->shape);
    core_sb_puts(b, ", \"spec\": ");
    core_sb_puts(b, t->spec_json ? t->spec_json : "null");
    core_sb_puts(b, ", \"slices\": [");
    for (int j = 0; j < t->nslices; j++) {
      const ckpt_slice *s = &t->slices[j];
      core_sb_puts(b, j ? ",\n        {\"file\": " : "\n        {\"file\": ");
      core_sb_json_string(b, ck->files[s->file]);
      core_sb_puts(b, ", \"offsets\": ");
      put_dims(b, t->ndim, s->off);
      core_sb_puts(b, ", \"shape\": ");
      put_dims(b, t->ndim, s->shape);
      core_sb_printf(b,
                     ", \"nbytes\": %llu, \"xxh64\": \"%016llx\", \"rank\": "
                     "%d}",
                     (unsigned long long)s->nbytes,
                     (unsigned long long)s->xxh64, s->rank);
    }
    core_sb_puts(b, "]}");
  }
  core_sb_puts(b, "\n    ]\n  }\n}\n");
  if (b->failed)
    return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "out of memory writing the index");
  return TPDP_SUCCESS;
}

/* ------------------------------------------------------------- public */

tpdp_status tpdp_checkpoint_open(const char *dir, tpdp_comm *comm,
                                 tpdp_checkpoint **out) {
  TPDP_API_ENTRY;
  CHECK_PTR(out);
  *out = NULL;
  CHECK_PTR(dir);
  ckpt_group g;
  CHECK(ckpt_group_init(&g, comm));
  tpdp_checkpoint *ck = NULL;
  tpdp_status st = ckpt_index_read(&g, dir, &ck);
  /* Every rank parsed the same bytes; agree in case memory ran short. */
  st = ckpt_agree(&g, st);
  if (st != TPDP_SUCCESS) {
    ckpt_index_free(ck);
    return st;
  }
  *out = ck;
  return TPDP_SUCCESS;
}

tpdp_status tpdp_checkpoint_close(tpdp_checkpoint *ck) {
  TPDP_API_ENTRY;
  ckpt_index_free(ck);
  return TPDP_SUCCESS;
}

int64_t tpdp_checkpoint_generation(const tpdp_checkpoint *ck) {
  return ck ? ck->generation : -1;
}
int tpdp_checkpoint_world_size(const tpdp_checkpoint *ck) {
  return ck ? ck->world_size : 0;
}
const char *tpdp_checkpoint_meta(const tpdp_checkpoint *ck, const char *key) {
  if (ck == NULL || key == NULL) return NULL;
  return ckpt_kv_get(ck->meta, ck->nmeta, key);
}
int tpdp_checkpoint_num_meta(const tpdp_checkpoint *ck) {
  return ck ? ck->nmeta : 0;
}

tpdp_status tpdp_checkpoint_meta_at(const tpdp_checkpoint *ck, int i,
                                    const char **key, const char **value) {
  TPDP_API_ENTRY;
  CHECK_PTR(ck);
  CHECK_PTR(key);
  CHECK_PTR(value);
  if (i < 0 || i >= ck->nmeta)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "metadata entry %d outside [0, %d)", i, ck->nmeta);
  *key = ck->meta[i].key;
  *value = ck->meta[i].val;
  return TPDP_SUCCESS;
}

int tpdp_checkpoint_num_tensors(const tpdp_checkpoint *ck) {
  return ck ? ck->nt : 0;
}

static tpdp_status check_tensor(const tpdp_checkpoint *ck, int i) {
  return ckpt_check_at("tensor", i, ck->nt, "checkpoint ", ck->dir);
}

static tpdp_status check_slice(const tpdp_checkpoint *ck, int i, int j) {
  CHECK(check_tensor(ck, i));
  return ckpt_check_at("slice", j, ck->t[i].nslices, "tensor ", ck->t[i].name);
}

tpdp_status tpdp_checkpoint_tensor_at(const tpdp_checkpoint *ck, int i,
                                      tpdp_checkpoint_tensor_info *out) {
  TPDP_API_ENTRY;
  CHECK_PTR(ck);
  CHECK_PTR(out);
  CHECK(check_tensor(ck, i));
  const ckpt_tensor *t = &ck->t[i];
  *out = (tpdp_checkpoint_tensor_info){.name = t->name,
                                       .dtype = t->dtype,
                                       .ndim = t->ndim,
                                       .spec_json = t->spec_json,
                                       .nslices = t->nslices};
  memcpy(out->shape, t->shape, sizeof t->shape);
  for (int j = 0; j < t->nslices; j++) out->nbytes += t->slices[j].nbytes;
  return TPDP_SUCCESS;
}

tpdp_status tpdp_checkpoint_find(const tpdp_checkpoint *ck, const char *name,
                                 int *index) {
  TPDP_API_ENTRY;
  CHECK_PTR(ck);
  CHECK_PTR(name);
  CHECK_PTR(index);
  return ckpt_check_found(ckpt_index_find(ck, name), "checkpoint ", ck->dir,
                          name, index);
}

tpdp_status tpdp_checkpoint_slice_at(const tpdp_checkpoint *ck, int i, int j,
                                     tpdp_checkpoint_slice_info *out) {
  TPDP_API_ENTRY;
  CHECK_PTR(ck);
  CHECK_PTR(out);
  CHECK(check_slice(ck, i, j));
  const ckpt_slice *s = &ck->t[i].slices[j];
  memset(out, 0, sizeof *out);
  out->file = ck->files[s->file];
  memcpy(out->offsets, s->off, sizeof s->off);
  memcpy(out->shape, s->shape, sizeof s->shape);
  out->nbytes = s->nbytes;
  out->xxh64 = s->xxh64;
  out->rank = s->rank;
  return TPDP_SUCCESS;
}

tpdp_status ckpt_open_slice(const tpdp_checkpoint *ck, const ckpt_tensor *t,
                            const ckpt_slice *s, tpdp_safetensors *f,
                            int *index) {
  const char *path = f->path;
  int k = ckpt_st_find(f, t->name);
  if (k < 0)
    return TPDP_ERR(TPDP_ERR_IO,
                    "file '%s' lacks tensor '%s', which the index of '%s' "
                    "places there",
                    path, t->name, ck->dir);
  const ckpt_st_tensor *ft = &f->t[k];
  char a[160], b[160];
  if (core_shapes_differ(ft->ndim, ft->shape, t->ndim, s->shape, a, b,
                         sizeof a) ||
      ft->dtype != t->dtype) {
    tpdp_shape_format(ft->ndim, ft->shape, a, sizeof a);
    tpdp_shape_format(t->ndim, s->shape, b, sizeof b);
    return TPDP_ERR(TPDP_ERR_IO,
                    "file '%s': tensor '%s' is %s %s but the index records "
                    "the slice as %s %s",
                    path, t->name, ckpt_st_dtype_name(ft->dtype), a,
                    ckpt_st_dtype_name(t->dtype), b);
  }
  *index = k;
  return TPDP_SUCCESS;
}

/* Open the file of slice j of tensor i and locate the slice in it. */
static tpdp_status open_slice(const tpdp_checkpoint *ck, int i, int j,
                              tpdp_safetensors **f, int *index) {
  char *path = NULL;
  CHECK(ckpt_join(ck->dir, ck->files[ck->t[i].slices[j].file], &path));
  tpdp_status st = tpdp_safetensors_open(path, f);
  free(path);
  CHECK(st);
  st = ckpt_open_slice(ck, &ck->t[i], &ck->t[i].slices[j], *f, index);
  if (st != TPDP_SUCCESS) {
    tpdp_safetensors_close(*f);
    *f = NULL;
  }
  return st;
}

tpdp_status tpdp_checkpoint_verify_slice(const tpdp_checkpoint *ck, int i,
                                         int j) {
  TPDP_API_ENTRY;
  CHECK_PTR(ck);
  CHECK(check_slice(ck, i, j));
  tpdp_safetensors *f = NULL;
  int k;
  CHECK(open_slice(ck, i, j, &f, &k));
  ckpt_src src = {f, k, 1, ck->t[i].slices[j].xxh64, 0, NULL};
  ckpt_dst dst = {NULL, ck->t[i].dtype, ck->t[i].slices[j].shape};
  tpdp_status st = ckpt_copy_box(&src, NULL, NULL, &dst, NULL, NULL);
  tpdp_safetensors_close(f);
  return st;
}

tpdp_status tpdp_checkpoint_read_tensor(const tpdp_checkpoint *ck, int i,
                                        tpdp_tensor *dst) {
  TPDP_API_ENTRY;
  CHECK_PTR(ck);
  CHECK_PTR(dst);
  CHECK(check_tensor(ck, i));
  const ckpt_tensor *t = &ck->t[i];
  CHECK(ckpt_check_read(NULL, t->name, t->dtype, t->ndim, t->shape, dst));
  void *stage = NULL;
  int owned = 0;
  CHECK(ckpt_stage_begin(dst, 0, &stage, &owned));
  ckpt_dst d = {stage, dst->dtype, dst->shape};
  int64_t zero[TPDP_MAX_DIMS] = {0};
  tpdp_status st = TPDP_SUCCESS;
  for (int j = 0; j < t->nslices && st == TPDP_SUCCESS; j++) {
    tpdp_safetensors *f = NULL;
    int k;
    st = open_slice(ck, i, j, &f, &k);
    if (st != TPDP_SUCCESS) break;
    ckpt_src src = {f, k, 1, t->slices[j].xxh64, 0, NULL};
    st = ckpt_copy_box(&src, zero, t->slices[j].shape, &d, t->slices[j].off,
                       NULL);
    tpdp_safetensors_close(f);
  }
  return ckpt_stage_end(dst, stage, owned, st);
}
