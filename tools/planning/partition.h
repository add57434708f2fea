// SPDX-License-Identifier: BSD-3-Clause
/*
 * The stage partitioners behind `tpdp partition` (after PyTorch's fx shard_model), two
 * methods (docs/model-format.md compares them):
 *  - optimal (planning_partition_solve): split a model's leaf modules, in
 *    pre-order, into K consecutive non-empty stages that minimise the
 *    largest stage's parameter count, subject to skip connections that may
 *    not jump over a whole stage;
 *  - greedy (planning_partition_greedy): PyTorch's fx shard_model's _split_nodes, step for
 *    step, over the model's calls.
 *
 * Not part of libtpdp: the CLI's planning library (//tools/planning).
 * Errors as tools/planning/error.h: a status and planning_last_error().
 *
 * Definitions. Leaves are numbered 0..n-1 in pre-order; a partition into K
 * stages is given by bounds[0] = 0 < bounds[1] < ... < bounds[K] = n, stage
 * s holding leaves [bounds[s], bounds[s+1]). An edge (src, dst), src < dst,
 * is a skip connection from leaf src to leaf dst; it is respected when
 * stage(dst) - stage(src) <= 1, i.e. no stage lies entirely strictly
 * between src and dst (equivalently: at most one cut among the boundaries
 * src+1 .. dst).
 *
 * Optimality and tie-break. planning_partition_solve finds the least possible
 * largest-stage sum over all respecting partitions (exact dynamic
 * programming over cut points, O(K n^2) time, O(K n) memory). Among the
 * partitions reaching it, it returns the one whose stages, read from the
 * first, are each as long as possible (the lexicographically largest
 * bounds vector).
 */
#ifndef TPDP_TOOLS_PLANNING_PARTITION_H
#define TPDP_TOOLS_PLANNING_PARTITION_H

#include <stdint.h>

#include "tools/planning/model_json.h"
#include "tpdp/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A skip connection between two leaves (indices into the leaf order). */
typedef struct {
  int src;              /* leaf the connection leaves from */
  int dst;              /* leaf it enters; src < dst */
  const char *src_name; /* names as the user wrote them, for messages; */
  const char *dst_name; /* may be NULL (then leaf indices are shown) */
} planning_partition_edge;

/* Largest number of stages the n leaves can be split into while respecting
 * every edge (every count from 1 to it is then possible too: merging two
 * stages never breaks an edge). Stored in *out.
 * Errors: n < 1, an edge out of range or with src >= dst
 * (TPDP_ERR_INVALID_ARGUMENT); NULL pointers; out of memory. */
tpdp_status planning_partition_max_stages(int n,
                                          const planning_partition_edge *edges,
                                          int nedges, int *out);

/* Optimal partition of leaves with parameter counts weights[0..n-1] (each
 * >= 0) into k stages. On success bounds[0..k] (caller-provided, k+1 ints)
 * and *max_stage_params hold the result; on failure they are unchanged.
 * Errors: TPDP_ERR_INVALID_ARGUMENT for k < 1, k > n, a negative weight, a
 * bad edge, or a total that overflows int64; TPDP_ERR_UNSUPPORTED when the
 * edges make k stages impossible: the message names the edge that does it
 * (the first edge, in list order, after which fewer than k stages remain
 * possible) and how many stages the edges allow. */
tpdp_status planning_partition_solve(const int64_t *weights, int n, int k,
                                     const planning_partition_edge *edges,
                                     int nedges, int *bounds,
                                     int64_t *max_stage_params);

/* Edges from JSON text `[["a", "c"], ...]` naming modules of `model` by
 * FQN. A leaf names itself. A non-leaf module stands for its subtree: as
 * the source its last leaf (where its output comes from), as the
 * destination its first leaf (where its input goes). After that mapping
 * the source must come strictly before the destination in pre-order.
 * On success *edges (free with planning_partition_edges_free; names are owned
 * copies) and *nedges are set; on failure *edges = NULL, *nedges = 0.
 * Errors: TPDP_ERR_PARSE (not JSON, not an array of pairs of strings),
 * TPDP_ERR_NOT_FOUND (an FQN naming no module; the message names the FQN
 * and the edge), TPDP_ERR_INVALID_ARGUMENT (an edge that does not go
 * forward). `source` (may be NULL) prefixes messages, e.g. the file path. */
tpdp_status planning_partition_edges_parse(const planning_model_desc *model,
                                           const char *json, const char *source,
                                           planning_partition_edge **edges,
                                           int *nedges);

/* As planning_partition_edges_parse, reading the file at `path`. */
tpdp_status planning_partition_edges_load(const planning_model_desc *model,
                                          const char *path,
                                          planning_partition_edge **edges,
                                          int *nedges);

/* Free edges from planning_partition_edges_parse/load. NULL is a no-op. */
void planning_partition_edges_free(planning_partition_edge *edges, int nedges);

/* Result of planning_partition_greedy. Stages are consecutive ranges of the
 * model's calls (planning_model_desc.calls). */
typedef struct {
  int ncalls;
  /* Per call: its node name as 003 sees it (the module FQN with '.' ->
   * '_'; the r-th repeated call of a module, r >= 1, gets "_<r>"), and the
   * count 003's _get_count gives it (-1 where it matches no module: the
   * call counts nothing). */
  char **node_names;
  int64_t *call_params;
  int64_t threshold; /* per_shard_param: the model's total // k */
  int nstages;       /* 1 or more; may differ from k either way */
  int *bounds;       /* nstages + 1: stage s = calls [bounds[s], bounds[s+1]) */
  int64_t *stage_params; /* nstages: the sum of the stage's counts */
} planning_partition_greedy_result;

/* PyTorch's fx shard_model's greedy split (_split_nodes), step for step, with the model's
 * calls as the traced graph's nodes. The model input comes first, in stage
 * 0; each call's inputs are the preceding call and the sources of the
 * edges into it. Walking the calls in order:
 *  - each call's count is _get_count's: the parameters of the module whose
 *    node name it is (module.parameters(): every parameter reachable in its
 *    subtree, tied ones included), else of the module named by the text
 *    before the first '_' (so "l1_1", a repeated call of l1, counts l1's
 *    parameters again), else nothing;
 *  - if an input other than the preceding call lies in an earlier stage,
 *    every call after that input is moved into the input's stage (the
 *    earliest such stage), which becomes the current stage again;
 *  - the call joins the current stage; if the stage's count now exceeds
 *    threshold = total // k, the stage ends right after this call, so the
 *    next call opens a new stage even when it holds no parameters.
 * So the stage count can be below k (the last stage falls short, or a
 * merge joins stages) or above it (repeated calls and tied parameters
 * count more than the total). Edges use the leaves of
 * planning_partition_edges_parse; over calls an edge feeds the first call of
 * its destination leaf from the last call of its source leaf before that.
 * On success *out owns its arrays (free with planning_partition_greedy_free);
 * on failure it is zeroed.
 * Errors: TPDP_ERR_NULL_POINTER; TPDP_ERR_INVALID_ARGUMENT for k < 1, a bad
 * edge, an edge into a leaf never called or from a leaf not called before
 * it, a stage count that overflows int64; TPDP_ERR_OUT_OF_MEMORY. */
tpdp_status planning_partition_greedy(const planning_model_desc *model, int k,
                                      const planning_partition_edge *edges,
                                      int nedges,
                                      planning_partition_greedy_result *out);

/* Free the arrays of a greedy result and zero it. NULL is a no-op. */
void planning_partition_greedy_free(planning_partition_greedy_result *r);

#ifdef __cplusplus
}
#endif
#endif /* TPDP_TOOLS_PLANNING_PARTITION_H */
