// SPDX-License-Identifier: BSD-3-Clause
/* libFuzzer target: tpdp_spec_from_json on a layout-only 2x3 mesh. A text
 * that parses must print back (tpdp_spec_to_json) to a spec equal to it. */
#include <stdio.h>

#include "tests/fuzz/fuzz_util.h"
#include "tpdp/tpdp.h"

static tpdp_mesh *mesh;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (mesh == NULL &&
      tpdp_mesh_create_from_string(NULL, "dp=2,tp=3", &mesh) != TPDP_SUCCESS)
    abort();
  char *text = fuzz_text(data, size);
  if (text == NULL) return 0;
  tpdp_spec *spec = NULL;
  if (tpdp_spec_from_json(mesh, text, &spec) == TPDP_SUCCESS) {
    char *again = NULL;
    tpdp_spec *back = NULL;
    if (tpdp_spec_to_json_alloc(spec, &again) != TPDP_SUCCESS ||
        tpdp_spec_from_json(mesh, again, &back) != TPDP_SUCCESS ||
        !tpdp_spec_equal(spec, back)) {
      fprintf(stderr, "round trip failed for '%s' -> '%s': %s\n", text,
              again ? again : "(none)", tpdp_last_error());
      abort();
    }
    free(again);
    tpdp_spec_destroy(back);
    tpdp_spec_destroy(spec);
  }
  free(text);
  return 0;
}
