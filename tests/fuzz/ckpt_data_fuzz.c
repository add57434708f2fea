// SPDX-License-Identifier: BSD-3-Clause
/* libFuzzer target: the data file of a checkpoint (ckpt/): the fixed
 * checkpoint's valid index.json (ckpt_fuzz_util.h) with its one data file
 * replaced by the input, then the accessors, slice verification,
 * whole-tensor reads, loads with and without checksums and a
 * consolidation. */
#include "tests/fuzz/ckpt_fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *dir = ckpt_fuzz_dir();
  char path[4200];
  ckpt_fuzz_path(CKPT_FUZZ_DATA, path, sizeof path);
  if (fuzz_write_file(path, data, size) != 0) return 0;
  tpdp_checkpoint *ck = NULL;
  FUZZ_ASSERT(tpdp_checkpoint_open(dir, NULL, &ck) == TPDP_SUCCESS,
              "the fixed index does not open: %s", tpdp_last_error());
  ckpt_fuzz_use(ck, dir);
  tpdp_checkpoint_close(ck);
  return 0;
}
