/* libFuzzer target: the placement list and mesh spec parsers. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tpdp/tpdp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  if (text == NULL) return 0;
  memcpy(text, data, size);
  text[size] = '\0';
  tpdp_placement p[TPDP_MAX_DIMS];
  int n = 0;
  tpdp_placements_parse(text, p, TPDP_MAX_DIMS, &n);
  tpdp_mesh *mesh = NULL;
  if (tpdp_mesh_create_from_string(NULL, text, &mesh) == TPDP_SUCCESS)
    tpdp_mesh_destroy(mesh);
  free(text);
  return 0;
}
