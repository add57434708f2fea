// SPDX-License-Identifier: BSD-3-Clause
/* One unsharded safetensors file from a sharded checkpoint: every global
 * tensor under its saved name, assembled from its verified slices, one
 * tensor in memory at a time; the saver's consolidation metadata may give
 * a tensor another row-major shape or leave training state out. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt_internal.h"

/* The directory part of a path ("." for a bare name), for its fsync. */
static char *dir_of(const char *path) {
  const char *slash = strrchr(path, '/');
  if (slash == NULL) return core_strdup(".");
  if (slash == path) return core_strdup("/");
  char *d = core_strdup(path);
  if (d) d[slash - path] = '\0';
  return d;
}

/* The saver's consolidation rules (both optional metadata, JSON):
 * "consolidate_exclude" (name prefixes to leave out) and
 * "consolidate_shapes" (name -> the shape to write it under, the same
 * element count: a row-major view of the saved global tensor). Sets
 * keep[i] and shapes[i] (the saved shape when no rule applies). */
static tpdp_status consolidation_rules(const tpdp_checkpoint *ck, int *keep,
                                       int64_t (*shapes)[TPDP_MAX_DIMS],
                                       int *ndims) {
  const char *ex = ckpt_kv_get(ck->meta, ck->nmeta, "consolidate_exclude");
  const char *sh = ckpt_kv_get(ck->meta, ck->nmeta, "consolidate_shapes");
  cJSON *jex = ex ? cJSON_Parse(ex) : NULL, *jsh = sh ? cJSON_Parse(sh) : NULL;
  tpdp_status st = TPDP_SUCCESS;
  if ((ex && !cJSON_IsArray(jex)) || (sh && !cJSON_IsObject(jsh))) {
    st = TPDP_ERR(TPDP_ERR_PARSE, "%s: metadata \"%s\" must be a JSON %s",
                  ck->dir,
                  ex && !cJSON_IsArray(jex) ? "consolidate_exclude"
                                            : "consolidate_shapes",
                  ex && !cJSON_IsArray(jex) ? "array of name prefixes"
                                            : "object name -> shape");
    goto done;
  }
  for (int i = 0; i < ck->nt; i++) {
    const ckpt_tensor *t = &ck->t[i];
    keep[i] = 1;
    const cJSON *p;
    cJSON_ArrayForEach(p, jex) {
      if (!cJSON_IsString(p)) {
        st = TPDP_ERR(TPDP_ERR_PARSE,
                      "%s: metadata \"consolidate_exclude\" holds a "
                      "non-string",
                      ck->dir);
        goto done;
      }
      if (strncmp(t->name, p->valuestring, strlen(p->valuestring)) == 0)
        keep[i] = 0;
    }
    ndims[i] = t->ndim;
    memcpy(shapes[i], t->shape, sizeof(int64_t) * (size_t)t->ndim);
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(jsh, t->name);
    if (js == NULL) continue;
    int n = cJSON_GetArraySize(js);
    int64_t numel = 1, saved = 1;
    int ok = cJSON_IsArray(js) && n <= TPDP_MAX_DIMS;
    for (int d = 0; d < n && ok; d++) {
      const cJSON *v = cJSON_GetArrayItem(js, d);
      ok = cJSON_IsNumber(v) && v->valuedouble >= 0 &&
           v->valuedouble < CKPT_MAX_JSON_INT &&
           v->valuedouble == (double)(int64_t)v->valuedouble;
      if (ok) shapes[i][d] = (int64_t)v->valuedouble;
    }
    if (ok) ok = ckpt_shape_numel(n, shapes[i], &numel) == 0;
    ckpt_shape_numel(t->ndim, t->shape, &saved);
    if (!ok || numel != saved) {
      char have[160];
      tpdp_shape_format(t->ndim, t->shape, have, sizeof have);
      st = TPDP_ERR(TPDP_ERR_PARSE,
                    "%s: metadata \"consolidate_shapes\" gives tensor '%s' "
                    "a shape that is not a list of at most %d sizes with the "
                    "%lld elements of its saved shape %s",
                    ck->dir, t->name, TPDP_MAX_DIMS, (long long)saved, have);
      goto done;
    }
    ndims[i] = n;
  }
done:
  cJSON_Delete(jex);
  cJSON_Delete(jsh);
  return st;
}

tpdp_status tpdp_checkpoint_consolidate(const char *dir, const char *out_path) {
  TPDP_API_ENTRY;
  CHECK_PTR(dir);
  CHECK_PTR(out_path);
  tpdp_checkpoint *ck = NULL;
  CHECK(tpdp_checkpoint_open(dir, NULL, &ck));
  ckpt_st_out *outs = NULL;
  int *keep = NULL, *ndims = NULL, *index = NULL, nout = 0;
  int64_t(*shapes)[TPDP_MAX_DIMS] = NULL;
  ckpt_kv *meta = NULL;
  int nmeta = 0, meta_cap = 0;
  ckpt_atomic_file out = {NULL, NULL, -1};
  char *parent = NULL;
  void *buf = NULL;
  core_strbuf header = {0};
  tpdp_status st = TPDP_CALLOC(outs, (size_t)ck->nt + 1);
  if (st == TPDP_SUCCESS) st = TPDP_CALLOC(keep, (size_t)ck->nt + 1);
  if (st == TPDP_SUCCESS) st = TPDP_CALLOC(ndims, (size_t)ck->nt + 1);
  if (st == TPDP_SUCCESS) st = TPDP_CALLOC(index, (size_t)ck->nt + 1);
  if (st == TPDP_SUCCESS) st = TPDP_CALLOC(shapes, (size_t)ck->nt + 1);
  if (st != TPDP_SUCCESS) goto done;
  CHECK_GOTO(consolidation_rules(ck, keep, shapes, ndims), st, done);
  /* PyTorch's safetensors loaders look for format "pt". */
  CHECK_GOTO(ckpt_kv_set(&meta, &nmeta, &meta_cap, "format", "pt"), st, done);
  for (int i = 0; i < ck->nmeta; i++)
    if (strcmp(ck->meta[i].key, "format") != 0 &&
        strncmp(ck->meta[i].key, "consolidate_", 12) != 0)
      CHECK_GOTO(ckpt_kv_set(&meta, &nmeta, &meta_cap, ck->meta[i].key,
                             ck->meta[i].val),
                 st, done);
  for (int i = 0; i < ck->nt; i++) {
    const ckpt_tensor *t = &ck->t[i];
    if (!keep[i]) continue;
    ckpt_st_out *o = &outs[nout];
    index[nout++] = i;
    ckpt_shape_nbytes(t->ndim, t->shape, t->dtype, &o->nbytes);
    o->name = t->name;
    o->dtype = t->dtype;
    o->ndim = ndims[i];
    o->shape = shapes[i];
  }
  CHECK_GOTO(ckpt_st_header(outs, nout, meta, nmeta, &header), st, done);
  parent = dir_of(out_path);
  if (parent == NULL) {
    st = TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
    goto done;
  }
  CHECK_GOTO(ckpt_atomic_open(&out, out_path), st, done);
  CHECK_GOTO(ckpt_write_all(out.fd, header.s, header.len, out.tmp), st, done);
  tpdp_device cpu = {TPDP_DEVICE_CPU, 0};
  for (int k = 0; k < nout; k++) {
    int i = index[k];
    const ckpt_tensor *t = &ck->t[i];
    free(buf);
    buf = malloc(outs[k].nbytes ? (size_t)outs[k].nbytes : 1);
    if (buf == NULL) {
      st = TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY,
                    "out of memory for tensor '%s' (%llu bytes)", t->name,
                    (unsigned long long)outs[k].nbytes);
      goto done;
    }
    tpdp_tensor whole;
    CHECK_GOTO(tpdp_tensor_init(&whole, buf, t->dtype, cpu, t->ndim, t->shape),
               st, done);
    CHECK_GOTO(tpdp_checkpoint_read_tensor(ck, i, &whole), st, done);
    CHECK_GOTO(ckpt_write_all(out.fd, buf, (size_t)outs[k].nbytes, out.tmp), st,
               done);
  }
  st = ckpt_atomic_commit(&out, parent);
done:
  ckpt_atomic_abort(&out);
  free(buf);
  free(parent);
  free(outs);
  free(keep);
  free(ndims);
  free(index);
  free(shapes);
  ckpt_kv_free(meta, nmeta);
  core_sb_free(&header);
  tpdp_checkpoint_close(ck);
  return st;
}
