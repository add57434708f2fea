// SPDX-License-Identifier: BSD-3-Clause
/*
 * Model descriptions in JSON (docs/model-format.md), parsed into a plain C
 * tree for the planning tools (`tpdp plan`, `tpdp partition`).
 *
 * Not part of libtpdp: the CLI's planning library (//tools/planning). Errors
 * follow tools/planning/error.h: a tpdp_status plus planning_last_error(),
 * a message that names the JSON path at fault, e.g.
 * "planning_model_desc_parse: children.u1.params.w.shape[1] must be a positive
 * integer (got 0)".
 *
 * Thread-safety: a parsed description is immutable; any number of threads
 * may read it. Parsing has no global state.
 */
#ifndef TPDP_TOOLS_PLANNING_MODEL_JSON_H
#define TPDP_TOOLS_PLANNING_MODEL_JSON_H

#include <stdint.h>

#include "tools/planning/error.h"
#include "tpdp/core.h"

#ifdef __cplusplus
extern "C" {
#endif

struct planning_model_module;

/* One parameter as declared under a module's "params". */
typedef struct planning_model_param {
  const char *name;             /* local name ("weight") */
  const char *fqn;              /* dotted path from the root ("u1.l1.weight") */
  tpdp_dtype dtype;             /* "dtype", default TPDP_F32 */
  int ndim;                     /* 0 .. TPDP_MAX_DIMS; 0 is a scalar */
  int64_t shape[TPDP_MAX_DIMS]; /* each >= 1 */
  int64_t numel;                /* product of shape (1 for a scalar) */
  int index; /* position in planning_model_desc.params (pre-order) */
  /* The parameter object this FQN names: itself, or, when tied through
   * "shared", the first FQN of its group in pre-order. A parameter is
   * counted (in leaf and total counts) only where canonical == itself. */
  const struct planning_model_param *canonical;
  const struct planning_model_module *module; /* the declaring module */
} planning_model_param;

/* One module (a node of the tree). */
typedef struct planning_model_module {
  const char *name;                           /* local name; "" for the root */
  const char *fqn;                            /* dotted path; "" for the root */
  const char *class_name;                     /* "class" */
  const struct planning_model_module *parent; /* NULL for the root */
  int nchildren;
  struct planning_model_module **children; /* in JSON key order */
  int nparams;
  planning_model_param *params; /* in JSON key order */
  int index; /* position in planning_model_desc.modules (pre-order) */
  /* Leaves of this subtree: planning_model_desc.leaves[first_leaf..last_leaf]
   * (a leaf spans only itself). */
  int first_leaf;
  int last_leaf;
} planning_model_module;

/* A leaf (a module without children) and the parameters it is charged. */
typedef struct {
  const planning_model_module *module;
  /* Elements charged to this leaf: its own counted parameters, plus the
   * counted parameters declared directly on every non-leaf module whose
   * first leaf (in pre-order) this is. Shared parameters count once, at
   * their first FQN in pre-order. Summed over all leaves this equals
   * planning_model_desc.total_params. */
  int64_t params;
} planning_model_leaf;

typedef struct planning_model_desc {
  planning_model_module *root;
  int nmodules;
  planning_model_module **modules; /* all modules, pre-order (root first) */
  int nparams;
  planning_model_param **params; /* all parameter FQNs, pre-order by module,
                                  declaration order within one */
  int nleaves;
  planning_model_leaf *leaves; /* leaves in pre-order */
  int64_t total_params;        /* elements of distinct parameters */
  /* The leaf modules in the order forward calls them: the root's "calls"
   * (a leaf may be called several times, or never), else every leaf once
   * in pre-order. */
  int ncalls;
  const planning_model_module **calls;
} planning_model_desc;

/* Parse a model description from NUL-terminated JSON text into a new
 * description, stored in *out (caller destroys it with
 * planning_model_desc_destroy). On failure *out is set to NULL.
 * Errors: TPDP_ERR_NULL_POINTER; TPDP_ERR_PARSE (not JSON, with line and
 * column; wrong JSON type, missing "class", unknown key, bad dtype);
 * TPDP_ERR_BAD_DIM_SIZE (a shape entry that is not a positive integer, or
 * above PLANNING_JSON_INT_MAX: "too large (max 9007199254740991)");
 * TPDP_ERR_TOO_MANY_DIMS; TPDP_ERR_EMPTY_NAME; TPDP_ERR_INVALID_ARGUMENT
 * (a name containing '.', an element count or byte size that overflows
 * int64, a parameter shared with itself);
 * TPDP_ERR_DUPLICATE (a name used twice in one module); TPDP_ERR_NOT_FOUND
 * (a "shared" FQN that names no parameter, a "calls" FQN that names no
 * module); TPDP_ERR_INVALID_ARGUMENT (a "calls" entry that is not a leaf,
 * an empty "calls"); TPDP_ERR_SHAPE_MISMATCH /
 * TPDP_ERR_DTYPE_MISMATCH (a shared pair whose declarations disagree).
 * Every message names the JSON path at fault. */
tpdp_status planning_model_desc_parse(const char *json,
                                      planning_model_desc **out);

/* Read and parse the file at `path` (messages name the path after the
 * function: "planning_model_desc_load: m.json: ...").
 * Errors: as planning_model_desc_parse, plus TPDP_ERR_IO. */
tpdp_status planning_model_desc_load(const char *path,
                                     planning_model_desc **out);

/* Free a description and everything it points to. NULL is a no-op. */
void planning_model_desc_destroy(planning_model_desc *desc);

/* Read a whole text file into a new NUL-terminated string (*out, freed by
 * the caller with free()). Errors: TPDP_ERR_IO (naming the path and the
 * system error), TPDP_ERR_PARSE (the file holds a NUL byte),
 * TPDP_ERR_OUT_OF_MEMORY. */
tpdp_status planning_read_file(const char *path, char **out);

/* Module / parameter with this FQN ("" is the root module), or NULL.
 * These set no error. */
const planning_model_module *planning_model_desc_find_module(
    const planning_model_desc *desc, const char *fqn);
const planning_model_param *planning_model_desc_find_param(
    const planning_model_desc *desc, const char *fqn);

#ifdef __cplusplus
}
#endif
#endif /* TPDP_TOOLS_PLANNING_MODEL_JSON_H */
