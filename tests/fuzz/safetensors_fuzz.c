/* libFuzzer target: the safetensors reader of ckpt/ (tpdp_safetensors_open
 * on a file holding the input, tools' view of it, and reading each tensor
 * of at most 1 MiB). What opens must be consistent: names found again,
 * offsets inside the file, and every tensor readable into a view of its
 * shape - as stored, and converted to f64 for floating dtypes. */
#include <sys/mman.h>
#include <unistd.h>

#include "tests/fuzz/fuzz_util.h"
#include "tpdp/tpdp.h"

#define MAX_READ_BYTES ((uint64_t)1 << 20)

static void read_as(const tpdp_safetensors *f, int i,
                    const tpdp_safetensors_tensor *t, tpdp_dtype dtype) {
  tpdp_device cpu = {TPDP_DEVICE_CPU, 0};
  tpdp_tensor dst;
  FUZZ_ASSERT(tpdp_tensor_init(&dst, NULL, dtype, cpu, t->ndim, t->shape) ==
                  TPDP_SUCCESS,
              "tensor '%s': its shape is refused: %s", t->name,
              tpdp_last_error());
  dst.data = malloc(tpdp_tensor_nbytes(&dst) + 1);
  FUZZ_ASSERT(dst.data != NULL, "out of memory");
  FUZZ_ASSERT(tpdp_safetensors_read(f, i, &dst) == TPDP_SUCCESS,
              "tensor '%s' as %s: %s", t->name, tpdp_dtype_name(dtype),
              tpdp_last_error());
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
      read_as(f, i, &t, t.dtype);
      if (tpdp_dtype_is_float(t.dtype)) read_as(f, i, &t, TPDP_F64);
    }
    tpdp_safetensors_close(f);
  }
  close(fd);
  return 0;
}
