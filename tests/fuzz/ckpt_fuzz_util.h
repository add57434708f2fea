// SPDX-License-Identifier: BSD-3-Clause
/* Shared by the checkpoint fuzz targets: a small checkpoint saved by the
 * library itself into a scratch directory (its index.json and its one data
 * file are the seeds of tests/fuzz/corpus/ckpt_*_fuzz/), and everything a
 * tool or a training script does with an opened checkpoint. */
#ifndef TPDP_TESTS_FUZZ_CKPT_FUZZ_UTIL_H
#define TPDP_TESTS_FUZZ_CKPT_FUZZ_UTIL_H

#include "tests/fuzz/fuzz_util.h"
#include "tpdp/tpdp.h"

/* Reads larger than this are skipped (an index may claim any size). */
#define CKPT_FUZZ_MAX_BYTES ((uint64_t)1 << 20)
/* Slices verified per tensor and tensors looked at, at most. */
#define CKPT_FUZZ_MAX_ITEMS 16

/* The data file of the first save into an empty directory by one rank. */
#define CKPT_FUZZ_DATA "model-g000001-00001-of-00001.safetensors"

/* Save the fixed checkpoint into a new scratch directory (once); returns
 * the directory. Tensors: w f32 [4, 3], h bf16 [5], n i64 [2], e f32
 * [0, 3], s f64 scalar; metadata step = 7. */
static inline const char *ckpt_fuzz_dir(void) {
  static const char *dir;
  if (dir != NULL) return dir;
  const char *d = fuzz_tmpdir();
  FUZZ_ASSERT(d != NULL, "no scratch directory");
  static float w[12];
  static uint16_t h[5];
  static int64_t n[2] = {-3, 1LL << 40};
  static double s = 2.5;
  for (int i = 0; i < 12; i++) w[i] = 0.5f * (float)i - 1;
  for (int i = 0; i < 5; i++) h[i] = tpdp_f32_to_bf16((float)i * 1.25f);
  tpdp_device cpu = {TPDP_DEVICE_CPU, 0};
  struct {
    const char *name;
    void *data;
    tpdp_dtype dtype;
    int ndim;
    int64_t shape[2];
  } t[5] = {{"w", w, TPDP_F32, 2, {4, 3}},
            {"h", h, TPDP_BF16, 1, {5}},
            {"n", n, TPDP_I64, 1, {2}},
            {"e", NULL, TPDP_F32, 2, {0, 3}},
            {"s", &s, TPDP_F64, 0, {0}}};
  tpdp_state_dict *sd = NULL;
  FUZZ_ASSERT(tpdp_state_dict_create(&sd) == TPDP_SUCCESS, "%s",
              tpdp_last_error());
  for (int i = 0; i < 5; i++) {
    tpdp_tensor v;
    FUZZ_ASSERT(
        tpdp_tensor_init(&v, t[i].data, t[i].dtype, cpu, t[i].ndim,
                         t[i].shape) == TPDP_SUCCESS &&
            tpdp_state_dict_add(sd, t[i].name, &v, NULL) == TPDP_SUCCESS,
        "%s", tpdp_last_error());
  }
  FUZZ_ASSERT(tpdp_state_dict_set_meta(sd, "step", "7") == TPDP_SUCCESS &&
                  tpdp_checkpoint_save(sd, d, NULL, NULL) == TPDP_SUCCESS,
              "%s", tpdp_last_error());
  tpdp_state_dict_destroy(sd);
  dir = d;
  return dir;
}

/* "dir/name" into buf. */
static inline void ckpt_fuzz_path(const char *name, char *buf, size_t len) {
  snprintf(buf, len, "%s/%s", ckpt_fuzz_dir(), name);
}

/* Every accessor, every read a tool makes, and a load into a state dict
 * of whole tensors, on an opened checkpoint of `dir`. Errors are expected
 * (missing or corrupt files); crashes, leaks and wrong sizes are not. */
static inline void ckpt_fuzz_use(tpdp_checkpoint *ck, const char *dir) {
  tpdp_checkpoint_generation(ck);
  tpdp_checkpoint_world_size(ck);
  tpdp_checkpoint_meta(ck, "step");
  for (int i = 0; i < tpdp_checkpoint_num_meta(ck); i++) {
    const char *k, *v;
    FUZZ_ASSERT(tpdp_checkpoint_meta_at(ck, i, &k, &v) == TPDP_SUCCESS, "%s",
                tpdp_last_error());
  }
  int nt = tpdp_checkpoint_num_tensors(ck);
  if (nt > CKPT_FUZZ_MAX_ITEMS) nt = CKPT_FUZZ_MAX_ITEMS;
  tpdp_device cpu = {TPDP_DEVICE_CPU, 0};
  tpdp_state_dict *sd = NULL;
  FUZZ_ASSERT(tpdp_state_dict_create(&sd) == TPDP_SUCCESS, "%s",
              tpdp_last_error());
  void *bufs[CKPT_FUZZ_MAX_ITEMS] = {NULL};
  uint64_t total = 0;
  for (int i = 0; i < nt; i++) {
    tpdp_checkpoint_tensor_info t;
    FUZZ_ASSERT(tpdp_checkpoint_tensor_at(ck, i, &t) == TPDP_SUCCESS, "%s",
                tpdp_last_error());
    int j = -1;
    FUZZ_ASSERT(tpdp_checkpoint_find(ck, t.name, &j) == TPDP_SUCCESS && j == i,
                "tensor %d '%s' found at %d", i, t.name, j);
    for (int s = 0; s < t.nslices && s < CKPT_FUZZ_MAX_ITEMS; s++) {
      tpdp_checkpoint_slice_info si;
      FUZZ_ASSERT(tpdp_checkpoint_slice_at(ck, i, s, &si) == TPDP_SUCCESS, "%s",
                  tpdp_last_error());
      if (si.nbytes <= CKPT_FUZZ_MAX_BYTES)
        tpdp_checkpoint_verify_slice(ck, i, s);
    }
    /* The index checked the shape: a view of it must be possible. */
    tpdp_tensor v;
    FUZZ_ASSERT(tpdp_tensor_init(&v, NULL, t.dtype, cpu, t.ndim, t.shape) ==
                    TPDP_SUCCESS,
                "tensor '%s': %s", t.name, tpdp_last_error());
    FUZZ_ASSERT(tpdp_tensor_nbytes(&v) == t.nbytes,
                "tensor '%s': %zu bytes but its slices hold %llu", t.name,
                tpdp_tensor_nbytes(&v), (unsigned long long)t.nbytes);
    total += t.nbytes;
    if (t.nbytes > CKPT_FUZZ_MAX_BYTES) continue;
    bufs[i] = malloc(t.nbytes + 1);
    FUZZ_ASSERT(bufs[i] != NULL, "out of memory");
    v.data = bufs[i];
    tpdp_checkpoint_read_tensor(ck, i, &v);
    FUZZ_ASSERT(tpdp_state_dict_add(sd, t.name, &v, NULL) == TPDP_SUCCESS,
                "tensor '%s': %s", t.name, tpdp_last_error());
  }
  /* Without checksums too, so the copies run on bytes that do not match. */
  tpdp_checkpoint_options o = TPDP_CHECKPOINT_OPTIONS_INIT;
  tpdp_checkpoint_load(sd, dir, NULL, &o);
  o.verify = 0;
  tpdp_checkpoint_load(sd, dir, NULL, &o);
  tpdp_state_dict_destroy(sd);
  for (int i = 0; i < nt; i++) free(bufs[i]);
  if (tpdp_checkpoint_num_tensors(ck) <= CKPT_FUZZ_MAX_ITEMS &&
      total <= CKPT_FUZZ_MAX_BYTES) {
    char out[4200];
    snprintf(out, sizeof out, "%s/consolidated.safetensors", dir);
    if (tpdp_checkpoint_consolidate(dir, out) == TPDP_SUCCESS) {
      tpdp_safetensors *f = NULL;
      FUZZ_ASSERT(tpdp_safetensors_open(out, &f) == TPDP_SUCCESS,
                  "a consolidated file does not open: %s", tpdp_last_error());
      tpdp_safetensors_close(f);
    }
  }
}

#endif /* TPDP_TESTS_FUZZ_CKPT_FUZZ_UTIL_H */
