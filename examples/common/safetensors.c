/* examples/common/safetensors.h: header validation and sliced reads. */
#include "examples/common/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tpdp/core.h"

/* safetensors' own limit on the header. */
#define ST_MAX_HEADER 100000000ull
/* Integers in JSON are read as doubles: exact up to 2^53. */
#define ST_MAX_INT 9007199254740992.0

static int dtype_size(const char *d) {
  static const struct {
    const char *name;
    int size;
  } k[] = {{"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
           {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
           {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8}};
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
    if (strcmp(k[i].name, d) == 0) return k[i].size;
  return 0;
}

int st_dtype_readable(const char *d) {
  return strcmp(d, "F32") == 0 || strcmp(d, "F16") == 0 ||
         strcmp(d, "BF16") == 0;
}

void st_close(st_file *f) {
  if (f->fd >= 0) close(f->fd);
  for (int i = 0; i < f->n; i++) free(f->t[i].name);
  free(f->t);
  free(f->path);
  memset(f, 0, sizeof *f);
  f->fd = -1;
}

static int cmp_name(const void *a, const void *b) {
  return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}
static int cmp_begin(const void *a, const void *b) {
  const st_tensor *x = *(const st_tensor *const *)a;
  const st_tensor *y = *(const st_tensor *const *)b;
  return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* A JSON integer in [0, 2^53], else -1. */
static int json_uint(const cJSON *j, uint64_t *out) {
  if (!cJSON_IsNumber(j)) return -1;
  double v = j->valuedouble;
  if (!(v >= 0 && v <= ST_MAX_INT) || v != (double)(uint64_t)v) return -1;
  *out = (uint64_t)v;
  return 0;
}

static int parse_entry(const st_file *f, const cJSON *j, st_tensor *t,
                       uint64_t data_size, ex_error *e) {
  const char *p = f->path, *n = t->name;
  if (!cJSON_IsObject(j))
    return ex_fail(e, "%s: tensor '%s': header entry is not an object", p, n);
  const cJSON *dt = cJSON_GetObjectItemCaseSensitive(j, "dtype");
  const cJSON *sh = cJSON_GetObjectItemCaseSensitive(j, "shape");
  const cJSON *off = cJSON_GetObjectItemCaseSensitive(j, "data_offsets");
  if (!cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(off))
    return ex_fail(e,
                   "%s: tensor '%s': header entry needs \"dtype\" (string), "
                   "\"shape\" and \"data_offsets\" (arrays)",
                   p, n);
  if (strlen(dt->valuestring) >= sizeof t->dtype ||
      (t->elsize = dtype_size(dt->valuestring)) == 0)
    return ex_fail(e, "%s: tensor '%s': unknown dtype \"%.32s\"", p, n,
                   dt->valuestring);
  strcpy(t->dtype, dt->valuestring);
  int nd = cJSON_GetArraySize(sh);
  if (nd > ST_MAX_DIMS)
    return ex_fail(e, "%s: tensor '%s': %d dims (at most %d)", p, n, nd,
                   ST_MAX_DIMS);
  t->ndim = nd;
  /* numel * elsize must fit in the file, so bound it by 2^62 on the way */
  uint64_t numel = 1;
  for (int d = 0; d < nd; d++) {
    uint64_t v;
    if (json_uint(cJSON_GetArrayItem(sh, d), &v) != 0)
      return ex_fail(e, "%s: tensor '%s': shape[%d] is not a size", p, n, d);
    t->shape[d] = (int64_t)v;
    if (v != 0 && numel > (1ull << 62) / v / (uint64_t)t->elsize)
      return ex_fail(e, "%s: tensor '%s': shape overflows", p, n);
    numel *= v;
  }
  t->numel = (int64_t)numel;
  uint64_t b, en;
  if (cJSON_GetArraySize(off) != 2 ||
      json_uint(cJSON_GetArrayItem(off, 0), &b) != 0 ||
      json_uint(cJSON_GetArrayItem(off, 1), &en) != 0 || b > en)
    return ex_fail(e,
                   "%s: tensor '%s': data_offsets must be [begin, end] with "
                   "0 <= begin <= end",
                   p, n);
  if (en > data_size)
    return ex_fail(e,
                   "%s: tensor '%s': data_offsets [%llu, %llu] run past the "
                   "%llu bytes of data",
                   p, n, (unsigned long long)b, (unsigned long long)en,
                   (unsigned long long)data_size);
  if (en - b != numel * (uint64_t)t->elsize) {
    char s[160];
    ex_shape_str(nd, t->shape, s, sizeof s);
    return ex_fail(e,
                   "%s: tensor '%s': data_offsets [%llu, %llu] hold %llu "
                   "bytes; %s %s needs %llu",
                   p, n, (unsigned long long)b, (unsigned long long)en,
                   (unsigned long long)(en - b), t->dtype, s,
                   (unsigned long long)(numel * (uint64_t)t->elsize));
  }
  t->begin = b;
  t->end = en;
  return 0;
}

static int read_all(int fd, void *buf, size_t len, uint64_t off) {
  char *p = buf;
  while (len > 0) {
    ssize_t r = pread(fd, p, len, (off_t)off);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    p += r;
    len -= (size_t)r;
    off += (uint64_t)r;
  }
  return 0;
}

int st_open(const char *path, st_file *f, ex_error *e) {
  memset(f, 0, sizeof *f);
  f->fd = -1;
  char *hdr = NULL;
  cJSON *root = NULL;
  const st_tensor **order = NULL;
  f->path = strdup(path);
  if (f->path == NULL) return ex_fail(e, "%s: out of memory", path);
  f->fd = open(path, O_RDONLY | O_CLOEXEC);
  if (f->fd < 0) {
    ex_fail(e, "%s: cannot open: %s", path, strerror(errno));
    goto fail;
  }
  struct stat sb;
  if (fstat(f->fd, &sb) != 0) {
    ex_fail(e, "%s: cannot stat: %s", path, strerror(errno));
    goto fail;
  }
  f->file_size = (uint64_t)sb.st_size;
  unsigned char len8[8];
  if (f->file_size < 8 || read_all(f->fd, len8, 8, 0) != 0) {
    ex_fail(e, "%s: not a safetensors file (%llu bytes, no header length)",
            path, (unsigned long long)f->file_size);
    goto fail;
  }
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | len8[i];
  if (hlen < 2 || hlen > ST_MAX_HEADER || hlen > f->file_size - 8) {
    ex_fail(e,
            "%s: not a safetensors file: header length %llu (file %llu "
            "bytes, limit %llu)",
            path, (unsigned long long)hlen, (unsigned long long)f->file_size,
            ST_MAX_HEADER);
    goto fail;
  }
  f->data_start = 8 + hlen;
  hdr = malloc((size_t)hlen + 1);
  if (hdr == NULL || read_all(f->fd, hdr, (size_t)hlen, 8) != 0) {
    ex_fail(e, "%s: cannot read the %llu-byte header", path,
            (unsigned long long)hlen);
    goto fail;
  }
  hdr[hlen] = '\0';
  root = cJSON_ParseWithLength(hdr, (size_t)hlen);
  if (!cJSON_IsObject(root)) {
    ex_fail(e, "%s: header is not a JSON object", path);
    goto fail;
  }
  int cap = cJSON_GetArraySize(root);
  f->t = calloc((size_t)cap + 1, sizeof *f->t);
  if (f->t == NULL) {
    ex_fail(e, "%s: out of memory", path);
    goto fail;
  }
  uint64_t data_size = f->file_size - f->data_start;
  for (const cJSON *j = root->child; j != NULL; j = j->next) {
    if (strcmp(j->string, "__metadata__") == 0) {
      if (!cJSON_IsObject(j)) {
        ex_fail(e, "%s: __metadata__ is not an object", path);
        goto fail;
      }
      continue;
    }
    st_tensor *t = &f->t[f->n];
    t->name = strdup(j->string);
    if (t->name == NULL) {
      ex_fail(e, "%s: out of memory", path);
      goto fail;
    }
    f->n++;
    if (parse_entry(f, j, t, data_size, e) != 0) goto fail;
  }
  qsort(f->t, (size_t)f->n, sizeof *f->t, cmp_name);
  for (int i = 1; i < f->n; i++)
    if (strcmp(f->t[i - 1].name, f->t[i].name) == 0) {
      ex_fail(e, "%s: tensor '%s' appears twice in the header", path,
              f->t[i].name);
      goto fail;
    }
  order = calloc((size_t)f->n + 1, sizeof *order);
  if (order == NULL) {
    ex_fail(e, "%s: out of memory", path);
    goto fail;
  }
  for (int i = 0; i < f->n; i++) order[i] = &f->t[i];
  qsort(order, (size_t)f->n, sizeof *order, cmp_begin);
  /* Sorted by start, each non-empty tensor must begin at or after the
   * furthest end so far. */
  const st_tensor *reach = NULL;
  for (int i = 0; i < f->n; i++) {
    if (order[i]->begin == order[i]->end) continue;
    if (reach != NULL && order[i]->begin < reach->end) {
      ex_fail(e, "%s: tensors '%s' and '%s' overlap in the data section", path,
              reach->name, order[i]->name);
      goto fail;
    }
    if (reach == NULL || order[i]->end > reach->end) reach = order[i];
  }
  free(order);
  free(hdr);
  cJSON_Delete(root);
  return 0;
fail:
  free(order);
  free(hdr);
  cJSON_Delete(root);
  st_close(f);
  return -1;
}

const st_tensor *st_find(const st_file *f, const char *name) {
  st_tensor key;
  key.name = (char *)name;
  return bsearch(&key, f->t, (size_t)f->n, sizeof *f->t, cmp_name);
}

typedef struct {
  const st_file *f;
  const st_tensor *t;
  float *out;
  ex_error *e;
} read_ctx;

/* Elements converted per read of f16/bf16 data (a bounded buffer). */
#define ST_CHUNK 16384

static int read_run(void *vctx, int64_t g, int64_t l, int64_t len) {
  read_ctx *c = vctx;
  const st_tensor *t = c->t;
  uint64_t off =
      c->f->data_start + t->begin + (uint64_t)g * (uint64_t)t->elsize;
  float *dst = c->out + l;
  if (t->elsize == 4) {
    if (read_all(c->f->fd, dst, (size_t)len * 4, off) != 0)
      return ex_fail(c->e, "%s: tensor '%s': short read of %lld bytes at %llu",
                     c->f->path, t->name, (long long)len * 4,
                     (unsigned long long)off);
    return 0;
  }
  uint16_t buf[ST_CHUNK];
  int bf = strcmp(t->dtype, "BF16") == 0;
  for (int64_t k = 0; k < len; k += ST_CHUNK) {
    int64_t m = len - k < ST_CHUNK ? len - k : ST_CHUNK;
    if (read_all(c->f->fd, buf, (size_t)m * 2, off + (uint64_t)k * 2) != 0)
      return ex_fail(c->e, "%s: tensor '%s': short read at %llu", c->f->path,
                     t->name, (unsigned long long)(off + (uint64_t)k * 2));
    for (int64_t i = 0; i < m; i++)
      dst[k + i] = bf ? tpdp_bf16_to_f32(buf[i]) : tpdp_f16_to_f32(buf[i]);
  }
  return 0;
}

int st_read_box_f32(const st_file *f, const st_tensor *t, int ndim,
                    const int64_t *view, const int64_t *offset,
                    const int64_t *local, float *out, ex_error *e) {
  if (!st_dtype_readable(t->dtype))
    return ex_fail(e, "%s: tensor '%s' is %s; only F32, F16 and BF16 are read",
                   f->path, t->name, t->dtype);
  int64_t n = 1;
  for (int d = 0; d < ndim; d++) {
    n *= view[d];
    if (offset[d] < 0 || local[d] < 0 || offset[d] + local[d] > view[d])
      return ex_fail(e, "%s: tensor '%s': slice outside the tensor", f->path,
                     t->name);
  }
  if (n != t->numel)
    return ex_fail(e, "%s: tensor '%s': a view of %lld elements of %lld",
                   f->path, t->name, (long long)n, (long long)t->numel);
  read_ctx c = {f, t, out, e};
  return ex_box_runs(ndim, view, offset, local, read_run, &c);
}

int st_read_f32(const st_file *f, const st_tensor *t, float *out, ex_error *e) {
  int64_t zero = 0;
  return st_read_box_f32(f, t, 1, &t->numel, &zero, &t->numel, out, e);
}
