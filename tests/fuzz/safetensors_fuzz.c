// SPDX-License-Identifier: BSD-3-Clause
/* libFuzzer target: the safetensors reader of ckpt/ (tpdp_safetensors_open
 * on a file holding the input, tools' view of it, and reading each tensor
 * of at most 1 MiB). What opens must be consistent: names found again,
 * a tensor of a dtype tpdp cannot read named and refused on read,
 * offsets inside the file, and every tensor readable into a view of its
 * shape - as stored, and converted to f64 for floating dtypes - and in
 * boxes (tpdp_safetensors_read_box) that hold what the whole read holds
 * there: the upper half of each dim in the stored shape, the second half
 * of the tensor seen flat; a view of another element count is refused. */
#include <sys/mman.h>
#include <unistd.h>

#include "tests/fuzz/fuzz_util.h"
#include "tpdp/tpdp.h"

#define MAX_READ_BYTES ((uint64_t)1 << 20)

/* A malloc'd host tensor of `shape` (ndim dims) and dtype. */
static tpdp_tensor host(const tpdp_safetensors_tensor *t, int ndim,
                        const int64_t *shape, tpdp_dtype dtype) {
  tpdp_device cpu = {TPDP_DEVICE_CPU, 0};
  tpdp_tensor dst;
  FUZZ_ASSERT(
      tpdp_tensor_init(&dst, NULL, dtype, cpu, ndim, shape) == TPDP_SUCCESS,
      "tensor '%s': its shape is refused: %s", t->name, tpdp_last_error());
  dst.data = malloc(tpdp_tensor_nbytes(&dst) + 1);
  FUZZ_ASSERT(dst.data != NULL, "out of memory");
  return dst;
}

/* Tensor i whole as dtype (malloc'd; the caller frees it). */
static void *read_as(const tpdp_safetensors *f, int i,
                     const tpdp_safetensors_tensor *t, tpdp_dtype dtype) {
  tpdp_tensor dst = host(t, t->ndim, t->shape, dtype);
  FUZZ_ASSERT(tpdp_safetensors_read(f, i, &dst) == TPDP_SUCCESS,
              "tensor '%s' as %s: %s", t->name, tpdp_dtype_name(dtype),
              tpdp_last_error());
  return dst.data;
}

/* Boxes of tensor i, read as stored, against `whole` (the whole read). */
static void read_boxes(const tpdp_safetensors *f, int i,
                       const tpdp_safetensors_tensor *t, const char *whole) {
  size_t es = tpdp_dtype_size(t->dtype);
  int64_t off[TPDP_MAX_DIMS], box[TPDP_MAX_DIMS], numel = 1;
  for (int d = 0; d < t->ndim; d++) {
    off[d] = t->shape[d] / 2;
    box[d] = t->shape[d] - off[d];
    numel *= t->shape[d];
  }
  /* The upper half of every dim: element (off + k) of the stored shape. */
  tpdp_tensor dst = host(t, t->ndim, box, t->dtype);
  FUZZ_ASSERT(tpdp_safetensors_read_box(f, i, t->ndim, t->shape, off, &dst) ==
                  TPDP_SUCCESS,
              "tensor '%s': box: %s", t->name, tpdp_last_error());
  int64_t n = tpdp_tensor_numel(&dst), idx[TPDP_MAX_DIMS] = {0};
  for (int64_t k = 0; k < n; k++) {
    int64_t at = 0;
    for (int d = 0; d < t->ndim; d++) at = at * t->shape[d] + off[d] + idx[d];
    FUZZ_ASSERT(memcmp((char *)dst.data + k * es, whole + at * es, es) == 0,
                "tensor '%s': box element %lld differs from element %lld",
                t->name, (long long)k, (long long)at);
    for (int d = t->ndim - 1; d >= 0 && ++idx[d] == box[d]; d--) idx[d] = 0;
  }
  free(dst.data);
  /* Seen flat: the second half. */
  int64_t flat = numel, half = numel / 2, rest = numel - numel / 2;
  dst = host(t, 1, &rest, t->dtype);
  FUZZ_ASSERT(
      tpdp_safetensors_read_box(f, i, 1, &flat, &half, &dst) == TPDP_SUCCESS,
      "tensor '%s': flat box: %s", t->name, tpdp_last_error());
  FUZZ_ASSERT(memcmp(dst.data, whole + half * es, (size_t)rest * es) == 0,
              "tensor '%s': the flat box differs from the whole read", t->name);
  /* A view of one element more is refused, and nothing is read. */
  int64_t more = numel + 1, zero = 0, none = 0;
  tpdp_tensor empty = host(t, 1, &none, t->dtype);
  FUZZ_ASSERT(tpdp_safetensors_read_box(f, i, 1, &more, &zero, &empty) ==
                  TPDP_ERR_SHAPE_MISMATCH,
              "tensor '%s': a view of %lld elements: %s", t->name,
              (long long)more, tpdp_last_error());
  free(empty.data);
  free(dst.data);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int fd = memfd_create("st", 0);
  if (fd < 0) return 0;
  if (size > 0 && write(fd, data, size) != (ssize_t)size) {
    close(fd);
    return 0;
  }
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  tpdp_safetensors *f = NULL;
  if (tpdp_safetensors_open(path, &f) == TPDP_SUCCESS) {
    tpdp_safetensors_meta(f, "format");
    for (int i = 0; i < tpdp_safetensors_count(f); i++) {
      tpdp_safetensors_tensor t;
      FUZZ_ASSERT(tpdp_safetensors_tensor_at(f, i, &t) == TPDP_SUCCESS, "%s",
                  tpdp_last_error());
      int j = -1;
      FUZZ_ASSERT(
          tpdp_safetensors_find(f, t.name, &j) == TPDP_SUCCESS && j == i,
          "tensor %d '%s' found at %d", i, t.name, j);
      FUZZ_ASSERT(
          t.offset >= 8 && t.offset <= size && t.nbytes <= size - t.offset,
          "tensor '%s' bytes [%llu, +%llu) outside the %zu-byte file", t.name,
          (unsigned long long)t.offset, (unsigned long long)t.nbytes, size);
      if (t.nbytes > MAX_READ_BYTES) continue;
      if (t.dtype == TPDP_DTYPE_COUNT) {
        /* a dtype tpdp has no type for: listed, named, refused on read */
        FUZZ_ASSERT(t.dtype_name != NULL && t.dtype_name[0] != '\0',
                    "tensor '%s' has no dtype name", t.name);
        uint8_t byte;
        int64_t one = 1;
        tpdp_tensor dst = tpdp_tensor_1d(&byte, TPDP_U8, 1);
        FUZZ_ASSERT(tpdp_safetensors_read_box(f, i, 1, &one, &one, &dst) ==
                        TPDP_ERR_DTYPE_MISMATCH,
                    "tensor '%s' of dtype %s: %s", t.name, t.dtype_name,
                    tpdp_last_error());
        continue;
      }
      void *whole = read_as(f, i, &t, t.dtype);
      read_boxes(f, i, &t, whole);
      free(whole);
      if (tpdp_dtype_is_float(t.dtype)) free(read_as(f, i, &t, TPDP_F64));
    }
    tpdp_safetensors_close(f);
  }
  close(fd);
  return 0;
}
