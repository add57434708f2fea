/*
 * The stage partitioner behind `tpdp partition` (issue 6, after seed 003):
 * split a model's leaf modules, in pre-order, into K consecutive non-empty
 * stages that minimise the largest stage's parameter count, subject to skip
 * connections that may not jump over a whole stage.
 *
 * Not part of libtpdp: internal to the CLI's planning library
 * (//tools:planning). Error contract as in include/tpdp/core.h.
 *
 * Definitions. Leaves are numbered 0..n-1 in pre-order; a partition into K
 * stages is given by bounds[0] = 0 < bounds[1] < ... < bounds[K] = n, stage
 * s holding leaves [bounds[s], bounds[s+1]). An edge (src, dst), src < dst,
 * is a skip connection from leaf src to leaf dst; it is respected when
 * stage(dst) - stage(src) <= 1, i.e. no stage lies entirely strictly
 * between src and dst (equivalently: at most one cut among the boundaries
 * src+1 .. dst).
 *
 * Optimality and tie-break. tpdp_partition_solve finds the least possible
 * largest-stage sum over all respecting partitions (exact dynamic
 * programming over cut points, O(K n^2) time, O(K n) memory). Among the
 * partitions reaching it, it returns the one whose stages, read from the
 * first, are each as long as possible (the lexicographically largest
 * bounds vector).
 */
#ifndef TPDP_TOOLS_PARTITION_H
#define TPDP_TOOLS_PARTITION_H

#include <stdint.h>

#include "tools/model_json.h"
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
} tpdp_partition_edge;

/* Largest number of stages the n leaves can be split into while respecting
 * every edge (every count from 1 to it is then possible too: merging two
 * stages never breaks an edge). Stored in *out.
 * Errors: n < 1, an edge out of range or with src >= dst
 * (TPDP_ERR_INVALID_ARGUMENT); NULL pointers; out of memory. */
tpdp_status tpdp_partition_max_stages(int n, const tpdp_partition_edge *edges,
                                      int nedges, int *out);

/* Optimal partition of leaves with parameter counts weights[0..n-1] (each
 * >= 0) into k stages. On success bounds[0..k] (caller-provided, k+1 ints)
 * and *max_stage_params hold the result; on failure they are unchanged.
 * Errors: TPDP_ERR_INVALID_ARGUMENT for k < 1, k > n, a negative weight, a
 * bad edge, or a total that overflows int64; TPDP_ERR_UNSUPPORTED when the
 * edges make k stages impossible: the message names the edge that does it
 * (the first edge, in list order, after which fewer than k stages remain
 * possible) and how many stages the edges allow. */
tpdp_status tpdp_partition_solve(const int64_t *weights, int n, int k,
                                 const tpdp_partition_edge *edges, int nedges,
                                 int *bounds, int64_t *max_stage_params);

/* Edges from JSON text `[["a", "c"], ...]` naming modules of `model` by
 * FQN. A leaf names itself. A non-leaf module stands for its subtree: as
 * the source its last leaf (where its output comes from), as the
 * destination its first leaf (where its input goes). After that mapping
 * the source must come strictly before the destination in pre-order.
 * On success *edges (free with tpdp_partition_edges_free; names are owned
 * copies) and *nedges are set; on failure *edges = NULL, *nedges = 0.
 * Errors: TPDP_ERR_PARSE (not JSON, not an array of pairs of strings),
 * TPDP_ERR_NOT_FOUND (an FQN naming no module; the message names the FQN
 * and the edge), TPDP_ERR_INVALID_ARGUMENT (an edge that does not go
 * forward). `source` (may be NULL) prefixes messages, e.g. the file path. */
tpdp_status tpdp_partition_edges_parse(const tpdp_model_desc *model,
                                       const char *json, const char *source,
                                       tpdp_partition_edge **edges,
                                       int *nedges);

/* As tpdp_partition_edges_parse, reading the file at `path`. */
tpdp_status tpdp_partition_edges_load(const tpdp_model_desc *model,
                                      const char *path,
                                      tpdp_partition_edge **edges, int *nedges);

/* Free edges from tpdp_partition_edges_parse/load. NULL is a no-op. */
void tpdp_partition_edges_free(tpdp_partition_edge *edges, int nedges);

#ifdef __cplusplus
}
#endif
#endif /* TPDP_TOOLS_PARTITION_H */
