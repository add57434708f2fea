/* One unsharded safetensors file from a sharded checkpoint: every global
 * tensor under its saved name, assembled from its verified slices, one
 * tensor in memory at a time. */
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

tpdp_status tpdp_checkpoint_consolidate(const char *dir, const char *out_path) {
  TPDP_API_ENTRY;
  CHECK_PTR(dir);
  CHECK_PTR(out_path);
  tpdp_checkpoint *ck = NULL;
  CHECK(tpdp_checkpoint_open(dir, NULL, &ck));
  ckpt_st_out *outs = NULL;
  ckpt_kv *meta = NULL;
  int nmeta = 0, meta_cap = 0;
  ckpt_atomic_file out = {NULL, NULL, -1};
  char *parent = NULL;
  void *buf = NULL;
  core_strbuf header = {0};
  tpdp_status st = TPDP_CALLOC(outs, (size_t)ck->nt + 1);
  if (st != TPDP_SUCCESS) goto done;
  /* PyTorch's safetensors loaders look for format "pt". */
  CHECK_GOTO(ckpt_kv_set(&meta, &nmeta, &meta_cap, "format", "pt"), st, done);
  for (int i = 0; i < ck->nmeta; i++)
    if (strcmp(ck->meta[i].key, "format") != 0)
      CHECK_GOTO(ckpt_kv_set(&meta, &nmeta, &meta_cap, ck->meta[i].key,
                             ck->meta[i].val),
                 st, done);
  for (int i = 0; i < ck->nt; i++) {
    const ckpt_tensor *t = &ck->t[i];
    ckpt_shape_nbytes(t->ndim, t->shape, t->dtype, &outs[i].nbytes);
    outs[i].name = t->name;
    outs[i].dtype = t->dtype;
    outs[i].ndim = t->ndim;
    outs[i].shape = t->shape;
  }
  CHECK_GOTO(ckpt_st_header(outs, ck->nt, meta, nmeta, &header), st, done);
  parent = dir_of(out_path);
  if (parent == NULL) {
    st = TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
    goto done;
  }
  CHECK_GOTO(ckpt_atomic_open(&out, out_path), st, done);
  CHECK_GOTO(ckpt_write_all(out.fd, header.s, header.len, out.tmp), st, done);
  tpdp_device cpu = {TPDP_DEVICE_CPU, 0};
  for (int i = 0; i < ck->nt; i++) {
    const ckpt_tensor *t = &ck->t[i];
    free(buf);
    buf = malloc(outs[i].nbytes ? (size_t)outs[i].nbytes : 1);
    if (buf == NULL) {
      st = TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY,
                    "out of memory for tensor '%s' (%llu bytes)", t->name,
                    (unsigned long long)outs[i].nbytes);
      goto done;
    }
    tpdp_tensor whole;
    CHECK_GOTO(tpdp_tensor_init(&whole, buf, t->dtype, cpu, t->ndim, t->shape),
               st, done);
    CHECK_GOTO(tpdp_checkpoint_read_tensor(ck, i, &whole), st, done);
    CHECK_GOTO(ckpt_write_all(out.fd, buf, (size_t)outs[i].nbytes, out.tmp), st,
               done);
  }
  st = ckpt_atomic_commit(&out, parent);
done:
  ckpt_atomic_abort(&out);
  free(buf);
  free(parent);
  free(outs);
  ckpt_kv_free(meta, nmeta);
  core_sb_free(&header);
  tpdp_checkpoint_close(ck);
  return st;
}
