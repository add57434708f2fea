// SPDX-License-Identifier: BSD-3-Clause
/*
 * Sharding plans for `tpdp plan` (docs/model-format.md, "tpdp plan"): how a
 * model description (tools/planning/model_json.h) will be sharded over a
 * device mesh by tensor parallelism (the styles of tpdp/tp.h over the
 * mesh dim "tp") and data parallelism (managed units, the reducer's DDP
 * buckets), computed without a communicator.
 *
 * A plan file is JSON:
 *   {"mesh": {"dp": 2, "tp": 2},            mesh dims in order (required)
 *    "units": ["", "u1"],                   module FQNs marked as DP units
 *    "tp": {"u1.l1": "colwise", ...}}       FQN pattern -> style
 *
 * Not part of libtpdp: the CLI's planning library (//tools/planning).
 * Errors as tools/planning/error.h: a status and planning_last_error(), a
 * message naming the thing at fault (the JSON key, the pattern, the unit
 * FQN, the parameter FQN); a failed libtpdp call's own message is carried
 * in it.
 *
 * Thread-safety: a computed plan is immutable; computing has no global
 * state.
 */
#ifndef TPDP_TOOLS_PLANNING_PLAN_H
#define TPDP_TOOLS_PLANNING_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "tools/planning/model_json.h"
#include "tpdp/dtensor.h"
#include "tpdp/module.h"
#include "tpdp/reducer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The most ranks a plan's mesh may have, as for every mesh the `tpdp`
 * subcommands take (`tpdp mesh` prints one line per rank): a plan holds
 * per-tp-rank shapes and buckets, and its JSON form one entry per rank. */
#define PLANNING_PLAN_MAX_RANKS (1 << 20)

/* Unit marks of a module (planning_plan.module_unit). */
#define PLANNING_PLAN_NOT_UNIT 0
#define PLANNING_PLAN_DP_UNIT 1 /* listed in "units": suffix " FULLY SHARDED" */
#define PLANNING_PLAN_TP_UNIT \
  2 /* matched by a "tp" pattern only: " TP <STYLE>" */

/* One distinct parameter (shared FQNs fold into their canonical one). */
typedef struct {
  const planning_model_param *param; /* the canonical declaration */
  int nshared;                       /* other FQNs naming the same parameter */
  const planning_model_param **shared; /* those declarations, pre-order */
  /* The module whose TP style shards it (NULL when none) and that style
   * (-1 when none). */
  const planning_model_module *tp_module;
  int style;
  tpdp_placement placements[TPDP_MAX_DIMS]; /* one per mesh dim */
  /* Local shape on tp rank t: local_shapes[t * param->ndim + d],
   * d < param->ndim; local_bytes[t] its size in bytes. */
  int64_t *local_shapes;
  size_t *local_bytes;
} planning_plan_param;

typedef struct planning_plan {
  const planning_model_desc *model; /* borrowed */
  int mesh_ndim;
  int64_t mesh_sizes[TPDP_MAX_DIMS];
  const char *mesh_names[TPDP_MAX_DIMS];
  int64_t world;   /* product of mesh_sizes */
  int tp_dim;      /* index of the mesh dim "tp", -1 when absent */
  int64_t tp_size; /* its size, 1 when absent */
  /* Per module (index as planning_model_module.index): PLANNING_PLAN_*_UNIT
   * and the TP style applied to its parameters (-1 when none). */
  int *module_unit;
  int *module_style;
  /* The mirror of the model as a core module tree with the units set, and
   * its sharded tree report (PyTorch FSDP's tree report: text and unit -> FQN map). */
  tpdp_module *tree;
  tpdp_tree_report *report;
  /* Distinct parameters in registration order (pre-order). */
  int nparams;
  planning_plan_param *params;
  /* Bucket limits used (copied). */
  int64_t nlimits;
  size_t *limits;
  /* Per tp rank t: bytes of its local parameters (each distinct parameter
   * once) and the reducer's initial buckets over them: tpdp_bucket_assign
   * in registration order, then the bucket list reversed (launch order);
   * indices are into params. nbuckets is 0 for a model without
   * parameters. */
  size_t *tp_bytes;
  tpdp_bucket_assignment *buckets;
} planning_plan;

/* Compute the plan of `model` for the plan JSON text `plan_json`, with
 * bucket limits limits[0..nlimits) (NULL/0: DDP's defaults). `model` must
 * outlive the plan. On success *out is freed with planning_plan_destroy; on
 * failure *out = NULL.
 * Errors: TPDP_ERR_NULL_POINTER; TPDP_ERR_PARSE (not JSON, wrong JSON type,
 * unknown key, missing "mesh", unknown style); TPDP_ERR_BAD_DIM_SIZE (a mesh
 * size that is not a positive integer, or more than PLANNING_PLAN_MAX_RANKS
 * ranks: "too large (max 1048576)"); TPDP_ERR_TOO_MANY_DIMS;
 * TPDP_ERR_EMPTY_NAME / TPDP_ERR_DUPLICATE (mesh dim names);
 * TPDP_ERR_NOT_FOUND (units naming unknown modules, all listed; a "tp"
 * pattern that matches no module; "tp" entries without a mesh dim "tp");
 * TPDP_ERR_DUPLICATE (a unit listed twice); TPDP_ERR_SHAPE_MISMATCH (a
 * colwise/rowwise module whose "weight" is not 2-D or whose other
 * parameters are not 1-D biases of the weight's out size);
 * TPDP_ERR_ALREADY (a shared parameter sharded by two TP modules);
 * TPDP_ERR_INVALID_ARGUMENT (a limit of 0); TPDP_ERR_OUT_OF_MEMORY. */
tpdp_status planning_plan_compute(const planning_model_desc *model,
                                  const char *plan_json, const size_t *limits,
                                  int64_t nlimits, planning_plan **out);

/* Read the plan file at `path` and compute (messages name the path after
 * the function: "planning_plan_load: p.json: ..."). Errors: as
 * planning_plan_compute, plus TPDP_ERR_IO. */
tpdp_status planning_plan_load(const planning_model_desc *model,
                               const char *path, const size_t *limits,
                               int64_t nlimits, planning_plan **out);

/* NULL is a no-op. */
void planning_plan_destroy(planning_plan *plan);

/* The tp rank (coordinate on the "tp" dim; 0 without one) of mesh rank r. */
int64_t planning_plan_tp_rank(const planning_plan *plan, int64_t rank);

/* Placement text as PyTorch prints it: "R", "S(0)", "P(sum)". */
void planning_plan_placement_format(tpdp_placement p, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* TPDP_TOOLS_PLANNING_PLAN_H */
