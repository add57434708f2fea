// SPDX-License-Identifier: BSD-3-Clause
/*
 * Module trees of the example programs: modules created on demand from
 * dotted paths, as a framework mirrors its model in tpdp's tree.
 */
#ifndef TPDP_EXAMPLES_COMMON_TREE_H
#define TPDP_EXAMPLES_COMMON_TREE_H

#include "tpdp/module.h"

/* The class name of the module at a dotted path ("layers.0.fc1"). */
typedef const char *(*ex_class_fn)(const char *path);

/* The module at dotted `path` under root ("" = root), created with its
 * missing parents (each named by class_of). */
tpdp_status ex_module_at(tpdp_module *root, const char *path,
                         ex_class_fn class_of, tpdp_module **out);

#endif
