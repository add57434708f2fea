// SPDX-License-Identifier: BSD-3-Clause
/* libFuzzer target: the library's text parsers - placement lists, mesh
 * specs (parse and a layout-only mesh), dtype, style and placement names.
 * Whatever the input, each call returns a status: no crash, no leak, no
 * out-of-bounds access (ASan + UBSan). */
#include "tests/fuzz/fuzz_util.h"
#include "tpdp/tpdp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzz_text(data, size);
  if (text == NULL) return 0;
  tpdp_placement p[TPDP_MAX_DIMS];
  int n = 0;
  tpdp_placements_parse(text, p, TPDP_MAX_DIMS, &n);
  tpdp_placement one;
  tpdp_placement_parse(text, &one);
  tpdp_dtype dtype;
  tpdp_dtype_parse(text, &dtype);
  tpdp_tp_style style;
  tpdp_tp_style_parse(text, &style);
  tpdp_mesh *mesh = NULL;
  if (tpdp_mesh_create_from_string(NULL, text, &mesh) == TPDP_SUCCESS)
    tpdp_mesh_destroy(mesh);
  free(text);
  return 0;
}
