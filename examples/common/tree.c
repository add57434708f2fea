// SPDX-License-Identifier: BSD-3-Clause
/* examples/common/tree.h: module paths created on demand. */
#include "examples/common/tree.h"

#include <stdio.h>
#include <string.h>

tpdp_status ex_module_at(tpdp_module *root, const char *path,
                         ex_class_fn class_of, tpdp_module **out) {
  if (path[0] == '\0') {
    *out = root;
    return TPDP_SUCCESS;
  }
  if (tpdp_module_get_submodule(root, path, out) == TPDP_SUCCESS)
    return TPDP_SUCCESS;
  char parent_path[256];
  snprintf(parent_path, sizeof parent_path, "%s", path);
  char *dot = strrchr(parent_path, '.');
  const char *name = path;
  tpdp_module *parent = root;
  if (dot) {
    *dot = '\0';
    name = path + (dot - parent_path) + 1;
    tpdp_status st = ex_module_at(root, parent_path, class_of, &parent);
    if (st != TPDP_SUCCESS) return st;
  }
  tpdp_module *m = NULL;
  tpdp_status st = tpdp_module_create(class_of(path), &m);
  if (st != TPDP_SUCCESS) return st;
  st = tpdp_module_add_child(parent, name, m);
  if (st != TPDP_SUCCESS) {
    tpdp_module_destroy(m);
    return st;
  }
  *out = m;
  return TPDP_SUCCESS;
}
