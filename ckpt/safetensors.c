// SPDX-License-Identifier: BSD-3-Clause
/* The safetensors format: a checked reader (every length, offset, shape and
 * name in a header is validated before a byte of data is read), the header
 * writer, and the box copy that moves a slice's bytes from a file into a
 * tensor, reading only what is needed and verifying checksums. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* xxHash (libxxhash) as a header-only library: no run-time dependency. */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "ckpt/ckpt_internal.h"

/* Nearby byte ranges closer than this are read with one pread. */
#define GAP_BYTES ((uint64_t)256 << 10)

/* ------------------------------------------------------------- reader */

static void st_free(tpdp_safetensors *f) {
  if (f == NULL) return;
  if (f->fd >= 0) close(f->fd);
  for (int i = 0; i < f->n; i++) free(f->t[i].name);
  free(f->t);
  free(f->sorted);
  ckpt_kv_free(f->meta, f->nmeta);
  free(f->path);
  free(f);
}

static tpdp_status parse_meta(tpdp_safetensors *f, const cJSON *m) {
  if (!cJSON_IsObject(m))
    return TPDP_ERR(TPDP_ERR_PARSE,
                    "file '%s': \"__metadata__\" is not an object", f->path);
  const cJSON *kv;
  cJSON_ArrayForEach(kv, m) {
    if (!cJSON_IsString(kv) || kv->valuestring == NULL)
      return TPDP_ERR(TPDP_ERR_PARSE,
                      "file '%s': \"__metadata__\" value of '%s' is not a "
                      "string",
                      f->path, kv->string);
    CHECK(ckpt_kv_set(&f->meta, &f->nmeta, &f->meta_cap, kv->string,
                      kv->valuestring));
  }
  return TPDP_SUCCESS;
}

/* One tensor entry: dtype, shape, data_offsets, checked against data_len. */
static tpdp_status parse_tensor(tpdp_safetensors *f, const cJSON *e,
                                uint64_t data_len, ckpt_st_tensor *t) {
  const char *p = f->path, *n = e->string;
  if (!cJSON_IsObject(e))
    return TPDP_ERR(TPDP_ERR_PARSE, "file '%s': tensor '%s' is not an object",
                    p, n);
  const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
  if (!cJSON_IsString(dt) || dt->valuestring == NULL)
    return TPDP_ERR(TPDP_ERR_PARSE,
                    "file '%s': tensor '%s': \"dtype\" missing or not a "
                    "string",
                    p, n);
  int rc = ckpt_st_dtype_parse(dt->valuestring, &t->dtype);
  /* A valid dtype tpdp cannot read (a model file's BOOL mask buffer): kept,
   * sized by its element size, refused only when read. */
  int opaque_size =
      rc == -1 ? ckpt_st_opaque_size(dt->valuestring, &t->opaque) : 0;
  if (opaque_size > 0) t->dtype = TPDP_DTYPE_COUNT;
  if (rc != 0 && opaque_size == 0)
    return TPDP_ERR(TPDP_ERR_PARSE,
                    "file '%s': tensor '%s': %s dtype '%s' (tpdp reads F64, "
                    "F32, F16, BF16, I64, I32, U8)",
                    p, n, rc == -1 ? "unsupported" : "unknown",
                    dt->valuestring);
  const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
  if (!cJSON_IsArray(sh))
    return TPDP_ERR(TPDP_ERR_PARSE,
                    "file '%s': tensor '%s': \"shape\" missing or not an "
                    "array",
                    p, n);
  int nd = cJSON_GetArraySize(sh);
  if (nd > TPDP_MAX_DIMS)
    return TPDP_ERR(TPDP_ERR_PARSE,
                    "file '%s': tensor '%s' has %d dims (tpdp supports at "
                    "most %d)",
                    p, n, nd, TPDP_MAX_DIMS);
  t->ndim = nd;
  int bad = ckpt_json_dims(sh, nd, t->shape);
  if (bad >= 0)
    return TPDP_ERR(TPDP_ERR_PARSE,
                    "file '%s': tensor '%s': shape[%d] is not an integer in "
                    "[0, 2^53]",
                    p, n, bad);
  char shape[160];
  tpdp_shape_format(nd, t->shape, shape, sizeof shape);
  uint64_t need;
  int64_t opaque_numel = 0;
  if (opaque_size > 0 ? core_shape_size(nd, t->shape, (size_t)opaque_size,
                                        &opaque_numel) != 0
                      : ckpt_shape_nbytes(nd, t->shape, t->dtype, &need) != 0)
    return TPDP_ERR(TPDP_ERR_PARSE,
                    "file '%s': tensor '%s': shape %s of %s overflows (more "
                    "bytes than a 64-bit size holds)",
                    p, n, shape, dt->valuestring);
  if (opaque_size > 0) need = (uint64_t)opaque_numel * (uint64_t)opaque_size;
  const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
  int64_t pair[2]; /* two ckpt_json_uint values (at most 2^53) */
  if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 ||
      ckpt_json_dims(off, 2, pair) >= 0)
    return TPDP_ERR(TPDP_ERR_PARSE,
                    "file '%s': tensor '%s': \"data_offsets\" is not a pair "
                    "of integers in [0, 2^53]",
                    p, n);
  uint64_t b = (uint64_t)pair[0], en = (uint64_t)pair[1];
  if (b > en)
    return TPDP_ERR(TPDP_ERR_PARSE,
                    "file '%s': tensor '%s': data_offsets [%llu, %llu] end "
                    "before they begin",
                    p, n, (unsigned long long)b, (unsigned long long)en);
  if (en > data_len)
    return TPDP_ERR(TPDP_ERR_IO,
                    "file '%s': tensor '%s': data_offsets [%llu, %llu] reach "
                    "past the data area of %llu bytes (truncated file, or a "
                    "header lying about offsets)",
                    p, n, (unsigned long long)b, (unsigned long long)en,
                    (unsigned long long)data_len);
  if (en - b != need)
    return TPDP_ERR(TPDP_ERR_PARSE,
                    "file '%s': tensor '%s': data_offsets [%llu, %llu] hold "
                    "%llu bytes but shape %s of %s needs %llu",
                    p, n, (unsigned long long)b, (unsigned long long)en,
                    (unsigned long long)(en - b), shape, dt->valuestring,
                    (unsigned long long)need);
  t->begin = b;
  t->end = en;
  t->name = core_strdup(n);
  if (t->name == NULL) return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
  return TPDP_SUCCESS;
}

typedef struct {
  uint64_t begin, end;
  int index;
} data_range;

static int by_offset(const void *a, const void *b) {
  const data_range *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return 0;
}

/* Names unique; data area covered exactly once, without holes. Leaves
 * f->sorted for lookup. */
static tpdp_status check_layout(tpdp_safetensors *f, uint64_t data_len) {
  int n = f->n;
  CHECK(TPDP_CALLOC(f->sorted, (size_t)n));
  data_range *order = NULL;
  CHECK(TPDP_CALLOC(order, (size_t)n));
  for (int i = 0; i < n; i++) {
    f->sorted[i] = (ckpt_name_ix){f->t[i].name, i};
    order[i] = (data_range){f->t[i].begin, f->t[i].end, i};
  }
  tpdp_status st = TPDP_SUCCESS;
  int dup = ckpt_names_sort(f->sorted, n);
  if (dup >= 0) {
    st = TPDP_ERR(TPDP_ERR_PARSE, "file '%s': tensor '%s' appears twice",
                  f->path, f->sorted[dup].name);
    goto done;
  }
  qsort(order, (size_t)n, sizeof *order, by_offset);
  uint64_t at = 0;
  const char *prev = NULL;
  for (int i = 0; i < n; i++) {
    const ckpt_st_tensor *t = &f->t[order[i].index];
    if (t->begin < at) {
      st = TPDP_ERR(TPDP_ERR_PARSE,
                    "file '%s': tensor '%s' (data_offsets [%llu, %llu]) "
                    "overlaps tensor '%s' (ending at %llu)",
                    f->path, t->name, (unsigned long long)t->begin,
                    (unsigned long long)t->end, prev, (unsigned long long)at);
      goto done;
    }
    if (t->begin > at) {
      st = TPDP_ERR(TPDP_ERR_PARSE,
                    "file '%s': bytes [%llu, %llu) of the data area belong to "
                    "no tensor (a hole before tensor '%s')",
                    f->path, (unsigned long long)at,
                    (unsigned long long)t->begin, t->name);
      goto done;
    }
    at = t->end;
    prev = t->name;
  }
  if (at != data_len)
    st = TPDP_ERR(TPDP_ERR_PARSE,
                  "file '%s': the data area has %llu bytes but its tensors "
                  "end at byte %llu%s%s%s (trailing bytes)",
                  f->path, (unsigned long long)data_len, (unsigned long long)at,
                  prev ? " (tensor '" : "", prev ? prev : "", prev ? "')" : "");
done:
  free(order);
  return st;
}

static tpdp_status parse_header(tpdp_safetensors *f, const char *buf,
                                size_t len, uint64_t data_len) {
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(buf, len, &end, 0);
  if (root == NULL) {
    size_t at = end && end >= buf ? (size_t)(end - buf) : 0;
    return TPDP_ERR(TPDP_ERR_PARSE,
                    "file '%s': the header is not valid JSON (near byte %zu "
                    "of %zu)",
                    f->path, at, len);
  }
  tpdp_status st = TPDP_SUCCESS;
  for (const char *q = end; q < buf + len; q++)
    if (*q != ' ' && *q != '\t' && *q != '\n' && *q != '\r') {
      st = TPDP_ERR(TPDP_ERR_PARSE,
                    "file '%s': the header has bytes after its JSON object "
                    "that are not padding spaces (at byte %zu)",
                    f->path, (size_t)(q - buf));
      goto done;
    }
  if (!cJSON_IsObject(root)) {
    st = TPDP_ERR(TPDP_ERR_PARSE, "file '%s': the header is not a JSON object",
                  f->path);
    goto done;
  }
  int count = cJSON_GetArraySize(root), seen_meta = 0;
  CHECK_GOTO(TPDP_CALLOC(f->t, (size_t)count), st, done);
  const cJSON *e;
  cJSON_ArrayForEach(e, root) {
    if (strcmp(e->string, "__metadata__") == 0) {
      if (seen_meta++) {
        st = TPDP_ERR(TPDP_ERR_PARSE,
                      "file '%s': \"__metadata__\" appears twice", f->path);
        goto done;
      }
      CHECK_GOTO(parse_meta(f, e), st, done);
      continue;
    }
    CHECK_GOTO(parse_tensor(f, e, data_len, &f->t[f->n]), st, done);
    f->n++;
  }
  st = check_layout(f, data_len);
done:
  cJSON_Delete(root);
  return st;
}

tpdp_status tpdp_safetensors_open(const char *path, tpdp_safetensors **out) {
  TPDP_API_ENTRY;
  CHECK_PTR(out);
  *out = NULL;
  CHECK_PTR(path);
  tpdp_safetensors *f = NULL;
  char *buf = NULL;
  CHECK(TPDP_CALLOC(f, 1));
  f->fd = -1;
  tpdp_status st = TPDP_SUCCESS;
  f->path = core_strdup(path);
  if (f->path == NULL) {
    st = TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
    goto fail;
  }
  f->fd = open(path, O_RDONLY | O_CLOEXEC);
  struct stat sb;
  if (f->fd < 0 || fstat(f->fd, &sb) != 0) {
    st = TPDP_ERR(TPDP_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    goto fail;
  }
  f->file_size = (uint64_t)sb.st_size;
  if (f->file_size < 8) {
    st = TPDP_ERR(TPDP_ERR_IO,
                  "file '%s' has %llu bytes: too short for a safetensors "
                  "file (its 8-byte header length comes first)",
                  path, (unsigned long long)f->file_size);
    goto fail;
  }
  unsigned char lenb[8];
  CHECK_GOTO(ckpt_pread_all(f->fd, lenb, 8, 0, path), st, fail);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | lenb[i];
  if (hlen > f->file_size - 8) {
    st = TPDP_ERR(TPDP_ERR_IO,
                  "file '%s': header length %llu is past the end of the file "
                  "(%llu bytes follow the length field; truncated file?)",
                  path, (unsigned long long)hlen,
                  (unsigned long long)(f->file_size - 8));
    goto fail;
  }
  if (hlen < 2 || hlen > CKPT_MAX_HEADER_BYTES) {
    st = TPDP_ERR(TPDP_ERR_PARSE,
                  "file '%s': header length %llu is outside [2, %llu] bytes",
                  path, (unsigned long long)hlen,
                  (unsigned long long)CKPT_MAX_HEADER_BYTES);
    goto fail;
  }
  buf = malloc((size_t)hlen + 1);
  if (buf == NULL) {
    st = TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "out of memory reading '%s'", path);
    goto fail;
  }
  CHECK_GOTO(ckpt_pread_all(f->fd, buf, (size_t)hlen, 8, path), st, fail);
  buf[hlen] = '\0';
  f->data_start = 8 + hlen;
  CHECK_GOTO(parse_header(f, buf, (size_t)hlen, f->file_size - f->data_start),
             st, fail);
  free(buf);
  *out = f;
  return TPDP_SUCCESS;
fail:
  free(buf);
  st_free(f);
  return st;
}

tpdp_status tpdp_safetensors_close(tpdp_safetensors *f) {
  TPDP_API_ENTRY;
  st_free(f);
  return TPDP_SUCCESS;
}

int tpdp_safetensors_count(const tpdp_safetensors *f) { return f ? f->n : 0; }

tpdp_status tpdp_safetensors_tensor_at(const tpdp_safetensors *f, int i,
                                       tpdp_safetensors_tensor *out) {
  TPDP_API_ENTRY;
  CHECK_PTR(f);
  CHECK_PTR(out);
  CHECK(ckpt_check_at("tensor", i, f->n, "", f->path));
  const ckpt_st_tensor *t = &f->t[i];
  *out = (tpdp_safetensors_tensor){
      .name = t->name,
      .dtype = t->dtype,
      .ndim = t->ndim,
      .offset = f->data_start + t->begin,
      .nbytes = t->end - t->begin,
      .dtype_name = t->opaque ? t->opaque : ckpt_st_dtype_name(t->dtype)};
  memcpy(out->shape, t->shape, sizeof t->shape);
  return TPDP_SUCCESS;
}

int ckpt_st_find(const tpdp_safetensors *f, const char *name) {
  return ckpt_names_find(f->sorted, f->n, name);
}

tpdp_status tpdp_safetensors_find(const tpdp_safetensors *f, const char *name,
                                  int *index) {
  TPDP_API_ENTRY;
  CHECK_PTR(f);
  CHECK_PTR(name);
  CHECK_PTR(index);
  return ckpt_check_found(ckpt_st_find(f, name), "file ", f->path, name, index);
}

const char *tpdp_safetensors_meta(const tpdp_safetensors *f, const char *key) {
  if (f == NULL || key == NULL) return NULL;
  return ckpt_kv_get(f->meta, f->nmeta, key);
}

/* A tensor of a dtype tpdp has no type for cannot be read. */
static tpdp_status check_readable(const tpdp_safetensors *f,
                                  const ckpt_st_tensor *t) {
  if (t->opaque == NULL) return TPDP_SUCCESS;
  return TPDP_ERR(TPDP_ERR_DTYPE_MISMATCH,
                  "file '%s': tensor '%s' is %s, a dtype tpdp cannot read "
                  "(it reads F64, F32, F16, BF16, I64, I32, U8)",
                  f->path, t->name, t->opaque);
}

tpdp_status tpdp_safetensors_read(const tpdp_safetensors *f, int i,
                                  tpdp_tensor *dst) {
  TPDP_API_ENTRY;
  CHECK_PTR(f);
  CHECK_PTR(dst);
  CHECK(ckpt_check_at("tensor", i, f->n, "", f->path));
  const ckpt_st_tensor *t = &f->t[i];
  CHECK(check_readable(f, t));
  CHECK(ckpt_check_read(f->path, t->name, t->dtype, t->ndim, t->shape, dst));
  void *stage = NULL;
  int owned = 0;
  CHECK(ckpt_stage_begin(dst, 0, &stage, &owned));
  int64_t zero[TPDP_MAX_DIMS] = {0};
  ckpt_src src = {f, i, 0, 0, 0, NULL};
  ckpt_dst d = {stage, dst->dtype, dst->shape};
  tpdp_status st = ckpt_copy_box(&src, zero, t->shape, &d, zero, NULL);
  return ckpt_stage_end(dst, stage, owned, st);
}

/* The checks of tpdp_safetensors_read_box's view and box against tensor
 * t of f and the destination. */
static tpdp_status check_box(const tpdp_safetensors *f, const ckpt_st_tensor *t,
                             int view_ndim, const int64_t *view_shape,
                             const int64_t *offset, const tpdp_tensor *dst) {
  CHECK(check_readable(f, t));
  if (view_ndim < 0 || view_ndim > TPDP_MAX_DIMS)
    return TPDP_ERR(TPDP_ERR_TOO_MANY_DIMS,
                    "file '%s': tensor '%s': view_ndim %d outside [0, %d]",
                    f->path, t->name, view_ndim, TPDP_MAX_DIMS);
  if (view_ndim > 0) {
    CHECK_PTR(view_shape);
    CHECK_PTR(offset);
  }
  char view[160], have[160], box[160];
  tpdp_shape_format(view_ndim, view_shape, view, sizeof view);
  tpdp_shape_format(t->ndim, t->shape, have, sizeof have);
  int64_t vn = 0, tn = 0;
  if (ckpt_shape_numel(view_ndim, view_shape, &vn) != 0)
    return TPDP_ERR(TPDP_ERR_BAD_DIM_SIZE,
                    "file '%s': tensor '%s': view %s has a negative size or "
                    "overflows",
                    f->path, t->name, view);
  (void)ckpt_shape_numel(t->ndim, t->shape, &tn); /* checked at open */
  if (vn != tn)
    return TPDP_ERR(TPDP_ERR_SHAPE_MISMATCH,
                    "file '%s': tensor '%s' has shape %s (%lld elements) but "
                    "the view %s has %lld",
                    f->path, t->name, have, (long long)tn, view, (long long)vn);
  if (dst->ndim != view_ndim)
    return TPDP_ERR(TPDP_ERR_SHAPE_MISMATCH,
                    "file '%s': tensor '%s': the destination has %d dims but "
                    "the view %s has %d",
                    f->path, t->name, dst->ndim, view, view_ndim);
  for (int d = 0; d < view_ndim; d++)
    if (offset[d] < 0 || dst->shape[d] < 0 || offset[d] > view_shape[d] ||
        dst->shape[d] > view_shape[d] - offset[d]) {
      tpdp_shape_format(view_ndim, offset, box, sizeof box);
      tpdp_shape_format(view_ndim, dst->shape, have, sizeof have);
      return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                      "file '%s': tensor '%s': the box of shape %s (the "
                      "destination's) at offset %s leaves the view %s in dim "
                      "%d",
                      f->path, t->name, have, box, view, d);
    }
  CHECK(ckpt_check_convert(f->path, t->name, t->dtype, dst));
  if (dst->data == NULL && tpdp_tensor_numel(dst) > 0)
    return TPDP_ERR(TPDP_ERR_NULL_POINTER,
                    "file '%s': tensor '%s': the destination has NULL data "
                    "and %lld elements",
                    f->path, t->name, (long long)tpdp_tensor_numel(dst));
  return TPDP_SUCCESS;
}

tpdp_status tpdp_safetensors_read_box(const tpdp_safetensors *f, int i,
                                      int view_ndim, const int64_t *view_shape,
                                      const int64_t *offset, tpdp_tensor *dst) {
  TPDP_API_ENTRY;
  CHECK_PTR(f);
  CHECK_PTR(dst);
  CHECK(ckpt_check_at("tensor", i, f->n, "", f->path));
  CHECK(check_box(f, &f->t[i], view_ndim, view_shape, offset, dst));
  void *stage = NULL;
  int owned = 0;
  CHECK(ckpt_stage_begin(dst, 0, &stage, &owned));
  /* A 0-dim view may come without shape and offset. */
  int64_t zero[TPDP_MAX_DIMS] = {0};
  ckpt_src src = {f, i, 0, 0, view_ndim, view_ndim > 0 ? view_shape : zero};
  ckpt_dst d = {stage, dst->dtype, dst->shape};
  tpdp_status st = ckpt_copy_box(&src, view_ndim > 0 ? offset : zero,
                                 dst->shape, &d, zero, NULL);
  return ckpt_stage_end(dst, stage, owned, st);
}

/* ------------------------------------------------------------- writer */

tpdp_status ckpt_st_header(const ckpt_st_out *tensors, int n,
                           const ckpt_kv *meta, int nmeta, core_strbuf *out) {
  core_strbuf j = {0};
  core_sb_puts(&j, "{");
  if (nmeta > 0) {
    core_sb_puts(&j, "\"__metadata__\":{");
    for (int i = 0; i < nmeta; i++) {
      if (i) core_sb_puts(&j, ",");
      core_sb_json_string(&j, meta[i].key);
      core_sb_puts(&j, ":");
      core_sb_json_string(&j, meta[i].val);
    }
    core_sb_puts(&j, "}");
  }
  uint64_t at = 0;
  for (int i = 0; i < n; i++) {
    const ckpt_st_out *t = &tensors[i];
    if (i || nmeta > 0) core_sb_puts(&j, ",");
    core_sb_json_string(&j, t->name);
    core_sb_printf(&j, ":{\"dtype\":\"%s\",\"shape\":[",
                   ckpt_st_dtype_name(t->dtype));
    for (int d = 0; d < t->ndim; d++)
      core_sb_printf(&j, d ? ",%lld" : "%lld", (long long)t->shape[d]);
    core_sb_printf(&j, "],\"data_offsets\":[%llu,%llu]}",
                   (unsigned long long)at,
                   (unsigned long long)(at + t->nbytes));
    at += t->nbytes;
  }
  core_sb_puts(&j, "}");
  /* Spaces up to a multiple of 8, so the data starts aligned. */
  while (!j.failed && (j.len % 8) != 0) core_sb_puts(&j, " ");
  if (j.failed) {
    core_sb_free(&j);
    return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "out of memory writing a header");
  }
  unsigned char lenb[8];
  uint64_t hl = j.len;
  for (int i = 0; i < 8; i++) lenb[i] = (unsigned char)(hl >> (8 * i));
  core_sb_append(out, (const char *)lenb, 8);
  core_sb_append(out, j.s, j.len);
  core_sb_free(&j);
  if (out->failed)
    return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "out of memory writing a header");
  return TPDP_SUCCESS;
}

/* ------------------------------------------------------------ box copy */

static void row_major(int nd, const int64_t *shape, int64_t *strides) {
  int64_t s = 1;
  for (int d = nd - 1; d >= 0; d--) {
    strides[d] = s;
    s *= shape[d];
  }
}

/* Runs of a box: the box's elements in row-major order, grouped into
 * maximal runs contiguous in the slice (and, for `both`, in the
 * destination), enumerated by an odometer over the dims before the run. */
typedef struct {
  int nd, k;   /* dims 0..k-1 are stepped; the run spans k..nd-1 */
  int64_t len; /* elements per run */
  int64_t idx[TPDP_MAX_DIMS];
  int64_t s_lin, d_lin; /* linear element index of the run's start */
  int done;             /* every run enumerated */
  const int64_t *bs, *bshape, *bd, *sstr, *dstr;
} runs;

static void runs_at(runs *r) {
  r->s_lin = r->d_lin = 0;
  for (int d = 0; d < r->nd; d++) {
    int64_t i = d < r->k ? r->idx[d] : 0;
    r->s_lin += (r->bs[d] + i) * r->sstr[d];
    if (r->dstr) r->d_lin += (r->bd[d] + i) * r->dstr[d];
  }
}

static void runs_init(runs *r, int nd, const int64_t *sshape,
                      const int64_t *dshape, const int64_t *bs,
                      const int64_t *bshape, const int64_t *bd,
                      const int64_t *sstr, const int64_t *dstr) {
  memset(r, 0, sizeof *r);
  r->nd = nd;
  r->bs = bs;
  r->bshape = bshape;
  r->bd = bd;
  r->sstr = sstr;
  r->dstr = dstr;
  r->k = nd > 0 ? nd - 1 : 0;
  r->len = nd > 0 ? bshape[nd - 1] : 1;
  while (r->k > 0 && bshape[r->k] == sshape[r->k] &&
         (dshape == NULL || bshape[r->k] == dshape[r->k])) {
    r->k--;
    r->len *= bshape[r->k];
  }
  int64_t numel = 1;
  for (int d = 0; d < nd; d++) numel *= bshape[d];
  r->done = numel == 0;
  runs_at(r);
}

static void runs_next(runs *r) {
  int d = r->k - 1;
  for (; d >= 0; d--) {
    if (++r->idx[d] < r->bshape[d]) break;
    r->idx[d] = 0;
  }
  if (d < 0)
    r->done = 1;
  else
    runs_at(r);
}

typedef struct {
  const ckpt_src *src;
  const ckpt_st_tensor *t;
  const ckpt_dst *dst;
  size_t es, des;
  char *scratch;
  XXH64_state_t *hash;
  runs fine;    /* runs contiguous in the slice and the destination */
  int64_t used; /* elements of the current fine run already copied */
} box_copy;

/* Read slice bytes [b, e) chunk by chunk: hash them (verify) and copy the
 * elements of the box they hold into the destination. */
static tpdp_status copy_segment(box_copy *c, uint64_t b, uint64_t e) {
  const tpdp_safetensors *f = c->src->f;
  uint64_t chunk = CKPT_CHUNK_BYTES - CKPT_CHUNK_BYTES % c->es;
  for (uint64_t at = b; at < e; at += chunk) {
    uint64_t n = e - at < chunk ? e - at : chunk;
    CHECK(ckpt_pread_all(f->fd, c->scratch, (size_t)n,
                         f->data_start + c->t->begin + at, f->path));
    if (c->hash) XXH64_update(c->hash, c->scratch, (size_t)n);
    runs *r = &c->fine;
    while (!r->done) {
      uint64_t rb = (uint64_t)(r->s_lin + c->used) * c->es;
      if (rb >= at + n) break;
      uint64_t re = (uint64_t)(r->s_lin + r->len) * c->es;
      uint64_t stop = re < at + n ? re : at + n;
      int64_t cnt = (int64_t)((stop - rb) / c->es);
      ckpt_convert((char *)c->dst->data + (size_t)(r->d_lin + c->used) * c->des,
                   c->dst->dtype, c->scratch + (rb - at), c->t->dtype, cnt);
      c->used += cnt;
      if (c->used < r->len) break;
      c->used = 0;
      runs_next(r);
    }
  }
  return TPDP_SUCCESS;
}

static tpdp_status check_hash(const box_copy *c, uint64_t got) {
  if (got == c->src->xxh) return TPDP_SUCCESS;
  return TPDP_ERR(TPDP_ERR_IO,
                  "file '%s': tensor '%s': its %llu bytes hash to xxhash64 "
                  "%016llx but the index records %016llx (corrupt file)",
                  c->src->f->path, c->t->name,
                  (unsigned long long)(c->t->end - c->t->begin),
                  (unsigned long long)got, (unsigned long long)c->src->xxh);
}

/* Same dtype and one run in both: read straight into the destination. */
static tpdp_status copy_direct(box_copy *c, const runs *r) {
  const tpdp_safetensors *f = c->src->f;
  uint64_t b = (uint64_t)r->s_lin * c->es, n = (uint64_t)r->len * c->es;
  char *d = (char *)c->dst->data + (size_t)r->d_lin * c->des;
  uint64_t chunk = CKPT_CHUNK_BYTES;
  for (uint64_t at = 0; at < n; at += chunk) {
    uint64_t k = n - at < chunk ? n - at : chunk;
    CHECK(ckpt_pread_all(f->fd, d + at, (size_t)k,
                         f->data_start + c->t->begin + b + at, f->path));
    if (c->hash) XXH64_update(c->hash, d + at, (size_t)k);
  }
  return TPDP_SUCCESS;
}

tpdp_status ckpt_copy_box(const ckpt_src *src, const int64_t *box_src,
                          const int64_t *box_shape, const ckpt_dst *dst,
                          const int64_t *box_dst, void *scratch) {
  const ckpt_st_tensor *t = &src->f->t[src->index];
  /* The slice's coordinates: its own shape, or the view it is seen in. */
  int nd = src->view ? src->view_ndim : t->ndim;
  const int64_t *sshape = src->view ? src->view : t->shape;
  int64_t sstr[TPDP_MAX_DIMS], dstr[TPDP_MAX_DIMS], bnumel = 1, snumel = 1;
  /* No box: only verify (a 0-dim tensor has no empty box shape). */
  int64_t none[TPDP_MAX_DIMS] = {0};
  if (box_shape == NULL) {
    box_src = box_dst = box_shape = none;
    bnumel = 0;
  }
  row_major(nd, sshape, sstr);
  row_major(nd, dst->shape, dstr);
  for (int d = 0; d < nd; d++) {
    bnumel *= box_shape[d];
    snumel *= sshape[d];
  }
  if (bnumel == 0 && !src->verify) return TPDP_SUCCESS;
  box_copy c = {src,
                t,
                dst,
                tpdp_dtype_size(t->dtype),
                tpdp_dtype_size(dst->dtype),
                scratch,
                NULL,
                {0},
                0};
  XXH64_state_t hs;
  if (src->verify) {
    XXH64_reset(&hs, 0);
    c.hash = &hs;
  }
  runs_init(&c.fine, nd, sshape, dst->shape, box_src, box_shape, box_dst, sstr,
            dstr);
  c.fine.done |= bnumel == 0;
  uint64_t slice_bytes = t->end - t->begin;
  /* One run, same dtype, and (to verify) the whole slice: no staging. */
  int single = c.fine.done || c.fine.len == bnumel;
  if (single && t->dtype == dst->dtype && (!src->verify || bnumel == snumel)) {
    if (!c.fine.done) CHECK(copy_direct(&c, &c.fine));
    return src->verify ? check_hash(&c, XXH64_digest(&hs)) : TPDP_SUCCESS;
  }
  tpdp_status st = TPDP_SUCCESS;
  if (c.scratch == NULL) {
    /* Reads stay inside the slice: a small slice needs no full chunk
     * (16 MiB for every small slice verified is what made fuzzing slow). */
    c.scratch = malloc(slice_bytes < CKPT_CHUNK_BYTES ? (size_t)slice_bytes + 1
                                                      : CKPT_CHUNK_BYTES);
    if (c.scratch == NULL)
      return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "out of memory (read buffer)");
  }
  if (src->verify) {
    CHECK_GOTO(copy_segment(&c, 0, slice_bytes), st, done);
  } else {
    /* Ranges of the box contiguous in the slice, merged across small gaps
     * into fewer, larger reads. */
    runs coarse;
    runs_init(&coarse, nd, sshape, NULL, box_src, box_shape, box_dst, sstr,
              NULL);
    uint64_t sb = 0, se = 0;
    int open = 0;
    for (; !coarse.done; runs_next(&coarse)) {
      uint64_t b = (uint64_t)coarse.s_lin * c.es;
      uint64_t e = b + (uint64_t)coarse.len * c.es;
      if (open && b - se <= GAP_BYTES) {
        se = e;
        continue;
      }
      if (open) CHECK_GOTO(copy_segment(&c, sb, se), st, done);
      sb = b;
      se = e;
      open = 1;
    }
    if (open) CHECK_GOTO(copy_segment(&c, sb, se), st, done);
  }
  if (src->verify) st = check_hash(&c, XXH64_digest(&hs));
done:
  if (c.scratch != scratch) free(c.scratch);
  return st;
}
