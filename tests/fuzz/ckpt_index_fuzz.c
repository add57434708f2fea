// SPDX-License-Identifier: BSD-3-Clause
/* libFuzzer target: the checkpoint index reader of ckpt/ (index.json of a
 * directory holds the input; tpdp_checkpoint_open, then the accessors,
 * slice verification, whole-tensor reads, a load and a consolidation). The
 * directory also holds the data file of the fixed checkpoint
 * (ckpt_fuzz_util.h), so that indexes placing slices in it reach the box
 * copies with fuzzed offsets and shapes. */
#include "tests/fuzz/ckpt_fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *dir = ckpt_fuzz_dir();
  char path[4200];
  ckpt_fuzz_path("index.json", path, sizeof path);
  if (fuzz_write_file(path, data, size) != 0) return 0;
  tpdp_checkpoint *ck = NULL;
  if (tpdp_checkpoint_open(dir, NULL, &ck) == TPDP_SUCCESS) {
    ckpt_fuzz_use(ck, dir);
    tpdp_checkpoint_close(ck);
  }
  return 0;
}
