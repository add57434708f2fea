// SPDX-License-Identifier: BSD-3-Clause
/* Stage partitioner: see partition.h for the problem and the guarantees. */
#include "tools/planning/partition.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "tools/planning/error.h"
#include "tools/planning/json.h"

/* "\"a\" -> \"c\"" with the user's names, or leaf indices without them. */
static void edge_text(const planning_partition_edge *e, char *buf, size_t len) {
  if (e->src_name != NULL && e->dst_name != NULL)
    snprintf(buf, len, "[\"%s\", \"%s\"]", e->src_name, e->dst_name);
  else
    snprintf(buf, len, "leaf %d -> leaf %d", e->src, e->dst);
}

static tpdp_status check_edges(int n, const planning_partition_edge *edges,
                               int nedges) {
  if (nedges < 0)
    return planning_error(TPDP_ERR_INVALID_ARGUMENT,
                          "nedges is %d (must be >= 0)", nedges);
  if (nedges > 0 && edges == NULL)
    return planning_error(TPDP_ERR_NULL_POINTER,
                          "argument 'edges' is NULL with nedges = %d", nedges);
  for (int e = 0; e < nedges; e++) {
    const planning_partition_edge *x = &edges[e];
    if (x->src < 0 || x->dst >= n || x->src >= x->dst) {
      char t[512];
      edge_text(x, t, sizeof t);
      return planning_error(
          TPDP_ERR_INVALID_ARGUMENT,
          "edges[%d] %s: needs 0 <= src < dst < %d (got src %d, dst %d)", e, t,
          n, x->src, x->dst);
    }
  }
  return TPDP_SUCCESS;
}

/* reach[i] (i = 0..n) = the largest dst over edges with src < i, or -1.
 * A stage [i, j) with 0 < i and j < n (both of its ends are cuts) breaks
 * some edge exactly when reach[i] >= j: that edge's src lies before the
 * stage and its dst at or after the stage's end. */
static int *make_reach(int n, const planning_partition_edge *edges,
                       int nedges) {
  int *from = malloc(sizeof(int) * (size_t)(n + 1));
  int *reach = malloc(sizeof(int) * (size_t)(n + 1));
  if (from == NULL || reach == NULL) {
    free(from);
    free(reach);
    return NULL;
  }
  for (int i = 0; i <= n; i++) from[i] = -1;
  for (int e = 0; e < nedges; e++)
    if (edges[e].dst > from[edges[e].src]) from[edges[e].src] = edges[e].dst;
  reach[0] = -1;
  for (int i = 1; i <= n; i++)
    reach[i] = from[i - 1] > reach[i - 1] ? from[i - 1] : reach[i - 1];
  free(from);
  return reach;
}

static int stage_ok(const int *reach, int n, int i, int j) {
  return i == 0 || j == n || reach[i] < j;
}

/* Max stage count under edges[0..nedges), or -1 when out of memory. */
static int max_stages_impl(int n, const planning_partition_edge *edges,
                           int nedges) {
  int *reach = make_reach(n, edges, nedges);
  int *best = malloc(sizeof(int) * (size_t)(n + 1));
  if (reach == NULL || best == NULL) {
    free(reach);
    free(best);
    return -1;
  }
  /* best[j]: most stages for leaves [0, j) (-1: impossible; never for j >
   * 0 since one stage [0, j) is always fine). */
  best[0] = 0;
  for (int j = 1; j <= n; j++) {
    best[j] = -1;
    for (int i = 0; i < j; i++)
      if (best[i] >= 0 && stage_ok(reach, n, i, j) && best[i] + 1 > best[j])
        best[j] = best[i] + 1;
  }
  int r = best[n];
  free(reach);
  free(best);
  return r;
}

tpdp_status planning_partition_max_stages(int n,
                                          const planning_partition_edge *edges,
                                          int nedges, int *out) {
  PLANNING_ENTRY;
  PLANNING_CHECK_PTR(out);
  if (n < 1)
    return planning_error(TPDP_ERR_INVALID_ARGUMENT,
                          "n is %d: there must be at least one leaf", n);
  PLANNING_CHECK(check_edges(n, edges, nedges));
  int r = max_stages_impl(n, edges, nedges);
  if (r < 0) return planning_error(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
  *out = r;
  return TPDP_SUCCESS;
}

/* k stages are impossible under the edges: name the edge responsible. */
static tpdp_status blame_edge(int n, int k,
                              const planning_partition_edge *edges, int nedges,
                              int max_all) {
  /* Smallest prefix length L with max_stages(edges[0..L)) < k; the count
   * only falls as edges are added, so binary search. */
  int lo = 1, hi = nedges;
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    int m = max_stages_impl(n, edges, mid);
    if (m < 0) return planning_error(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
    if (m < k)
      hi = mid;
    else
      lo = mid + 1;
  }
  int e = lo - 1;
  int alone = max_stages_impl(n, &edges[e], 1);
  int upto = max_stages_impl(n, edges, lo);
  if (alone < 0 || upto < 0)
    return planning_error(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
  char t[512];
  edge_text(&edges[e], t, sizeof t);
  if (alone < k)
    return planning_error(
        TPDP_ERR_UNSUPPORTED,
        "cannot split %d leaf modules into %d stages: skip edge edges[%d] %s "
        "spans %d leaves, so some stage would lie entirely inside it; with "
        "this edge at most %d stages are possible",
        n, k, e, t, edges[e].dst - edges[e].src - 1, alone);
  char given[64];
  if (e == 1)
    snprintf(given, sizeof given, "edges[0]");
  else
    snprintf(given, sizeof given, "edges[0..%d]", e - 1);
  return planning_error(
      TPDP_ERR_UNSUPPORTED,
      "cannot split %d leaf modules into %d stages: skip edge edges[%d] %s "
      "would jump over a whole stage given %s; together they allow at most "
      "%d stages (with all %d edges, %d)",
      n, k, e, t, given, upto, nedges, max_all);
}

tpdp_status planning_partition_solve(const int64_t *weights, int n, int k,
                                     const planning_partition_edge *edges,
                                     int nedges, int *bounds,
                                     int64_t *max_stage_params) {
  PLANNING_ENTRY;
  PLANNING_CHECK_PTR(weights);
  PLANNING_CHECK_PTR(bounds);
  PLANNING_CHECK_PTR(max_stage_params);
  if (n < 1)
    return planning_error(TPDP_ERR_INVALID_ARGUMENT,
                          "there are no leaf modules to partition (n = %d)", n);
  if (k < 1)
    return planning_error(TPDP_ERR_INVALID_ARGUMENT,
                          "the number of stages is %d (must be >= 1)", k);
  if (k > n)
    return planning_error(
        TPDP_ERR_INVALID_ARGUMENT,
        "cannot split %d leaf modules into %d non-empty stages "
        "(at most %d stages)",
        n, k, n);
  PLANNING_CHECK(check_edges(n, edges, nedges));
  tpdp_status st = TPDP_SUCCESS;
  int64_t *pre = NULL, *f = NULL;
  int *reach = NULL;
  unsigned char *h = NULL;
  PLANNING_CHECK_GOTO(PLANNING_CALLOC(pre, (size_t)n + 1), st, done);
  for (int i = 0; i < n; i++) {
    if (weights[i] < 0) {
      st = planning_error(TPDP_ERR_INVALID_ARGUMENT,
                          "weights[%d] is %lld (must be >= 0)", i,
                          (long long)weights[i]);
      goto done;
    }
    if (__builtin_add_overflow(pre[i], weights[i], &pre[i + 1])) {
      st = planning_error(TPDP_ERR_INVALID_ARGUMENT,
                          "the parameter total overflows int64 at weights[%d]",
                          i);
      goto done;
    }
  }
  int max_all = max_stages_impl(n, edges, nedges);
  if (max_all < 0) {
    st = planning_error(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
    goto done;
  }
  if (max_all < k) {
    st = blame_edge(n, k, edges, nedges, max_all);
    goto done;
  }
  reach = make_reach(n, edges, nedges);
  if (reach == NULL) {
    st = planning_error(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
    goto done;
  }
  const size_t w = (size_t)n + 1;
  if ((size_t)k + 1 > SIZE_MAX / w / sizeof(int64_t)) {
    st = planning_error(TPDP_ERR_OUT_OF_MEMORY,
                        "%d stages x %d leaves is too big", k, n);
    goto done;
  }
  PLANNING_CHECK_GOTO(PLANNING_CALLOC(f, ((size_t)k + 1) * w), st, done);
  PLANNING_CHECK_GOTO(PLANNING_CALLOC(h, ((size_t)k + 1) * w), st, done);

  /* f[s][j]: least largest-stage sum splitting leaves [0, j) into s
   * respecting stages (INT64_MAX: impossible). */
  const int64_t inf = INT64_MAX;
  for (size_t x = 0; x < ((size_t)k + 1) * w; x++) f[x] = inf;
  f[0] = 0; /* f[0][0] */
  for (int s = 1; s <= k; s++) {
    for (int j = s; j <= n; j++) {
      int64_t best = inf;
      for (int i = s - 1; i < j; i++) {
        int64_t prev = f[(size_t)(s - 1) * w + (size_t)i];
        if (prev == inf || !stage_ok(reach, n, i, j)) continue;
        int64_t seg = pre[j] - pre[i];
        int64_t cand = prev > seg ? prev : seg;
        if (cand < best) best = cand;
      }
      f[(size_t)s * w + (size_t)j] = best;
    }
  }
  const int64_t opt = f[(size_t)k * w + (size_t)n];
  if (opt == inf) {
    st =
        planning_error(TPDP_ERR_INTERNAL,
                       "no partition found although %d stages are possible", k);
    goto done;
  }
  /* h[r][i]: leaves [i, n) split into r respecting stages, each <= opt. */
  h[(size_t)0 * w + (size_t)n] = 1;
  for (int r = 1; r <= k; r++)
    for (int i = n - 1; i >= 0; i--)
      for (int j = i + 1; j <= n; j++)
        if (h[(size_t)(r - 1) * w + (size_t)j] && pre[j] - pre[i] <= opt &&
            stage_ok(reach, n, i, j)) {
          h[(size_t)r * w + (size_t)i] = 1;
          break;
        }
  /* From the front, each stage as long as the rest still allows. */
  int pos = 0;
  bounds[0] = 0;
  for (int s = 0; s < k; s++) {
    int rest = k - s - 1, next = -1;
    for (int j = n; j > pos; j--)
      if (h[(size_t)rest * w + (size_t)j] && pre[j] - pre[pos] <= opt &&
          stage_ok(reach, n, pos, j)) {
        next = j;
        break;
      }
    if (next < 0) {
      st = planning_error(TPDP_ERR_INTERNAL,
                          "reconstruction failed at stage %d of %d", s, k);
      goto done;
    }
    bounds[s + 1] = next;
    pos = next;
  }
  *max_stage_params = opt;
done:
  free(pre);
  free(f);
  free(h);
  free(reach);
  return st;
}

void planning_partition_edges_free(planning_partition_edge *edges, int nedges) {
  if (edges == NULL) return;
  for (int i = 0; i < nedges; i++) {
    free((void *)edges[i].src_name);
    free((void *)edges[i].dst_name);
  }
  free(edges);
}

static tpdp_status edges_parse_impl(const planning_model_desc *model,
                                    const char *json,
                                    planning_partition_edge **edges_out,
                                    int *nedges_out) {
  cJSON *doc = NULL;
  PLANNING_CHECK(planning_json_parse(json, &doc));
  tpdp_status st = TPDP_SUCCESS;
  planning_partition_edge *edges = NULL;
  int n = 0;
  if (!cJSON_IsArray(doc)) {
    st = planning_error(TPDP_ERR_PARSE,
                        "edges must be a JSON array of [\"from\", \"to\"] "
                        "pairs");
    goto fail;
  }
  PLANNING_CHECK_GOTO(PLANNING_CALLOC(edges, (size_t)cJSON_GetArraySize(doc)),
                      st, fail);
  for (const cJSON *pair = doc->child; pair != NULL; pair = pair->next) {
    if (!cJSON_IsArray(pair) || cJSON_GetArraySize(pair) != 2 ||
        !cJSON_IsString(pair->child) || !cJSON_IsString(pair->child->next)) {
      st = planning_error(TPDP_ERR_PARSE,
                          "edges[%d] must be an array of two module FQNs", n);
      goto fail;
    }
    const char *a = pair->child->valuestring;
    const char *c = pair->child->next->valuestring;
    planning_partition_edge *e = &edges[n++];
    e->src_name = core_strdup(a);
    e->dst_name = core_strdup(c);
    if (e->src_name == NULL || e->dst_name == NULL) {
      st = planning_error(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
      goto fail;
    }
    const planning_model_module *ma = planning_model_desc_find_module(model, a);
    const planning_model_module *mc = planning_model_desc_find_module(model, c);
    if (ma == NULL || mc == NULL) {
      const char *bad = ma == NULL ? a : c;
      int is_param = planning_model_desc_find_param(model, bad) != NULL;
      st = planning_error(
          TPDP_ERR_NOT_FOUND,
          "edges[%d][%d]: no module named \"%s\" in the model%s", n - 1,
          ma == NULL ? 0 : 1, bad,
          is_param ? " (that is a parameter; name its module)" : "");
      goto fail;
    }
    e->src = ma->last_leaf;
    e->dst = mc->first_leaf;
    if (e->src >= e->dst) {
      st = planning_error(
          TPDP_ERR_INVALID_ARGUMENT,
          "edges[%d] [\"%s\", \"%s\"]: the edge must go forward, but \"%s\" "
          "(leaf %d, %s) does not come after \"%s\" (leaf %d, %s) in "
          "pre-order",
          n - 1, a, c, c, e->dst, model->leaves[e->dst].module->fqn, a, e->src,
          model->leaves[e->src].module->fqn);
      goto fail;
    }
  }
  cJSON_Delete(doc);
  *edges_out = edges;
  *nedges_out = n;
  return TPDP_SUCCESS;
fail:
  cJSON_Delete(doc);
  planning_partition_edges_free(edges, n);
  return st;
}

/* The arguments both edge readers check first, in this order: the outputs
 * (then emptied) and the model. */
static tpdp_status edges_check_args(const planning_model_desc *model,
                                    planning_partition_edge **edges,
                                    int *nedges) {
  PLANNING_CHECK_PTR(edges);
  PLANNING_CHECK_PTR(nedges);
  *edges = NULL;
  *nedges = 0;
  PLANNING_CHECK_PTR(model);
  return TPDP_SUCCESS;
}

tpdp_status planning_partition_edges_parse(const planning_model_desc *model,
                                           const char *json, const char *source,
                                           planning_partition_edge **edges,
                                           int *nedges) {
  PLANNING_ENTRY;
  PLANNING_CHECK(edges_check_args(model, edges, nedges));
  PLANNING_CHECK_PTR(json);
  return planning_error_in(source,
                           edges_parse_impl(model, json, edges, nedges));
}

tpdp_status planning_partition_edges_load(const planning_model_desc *model,
                                          const char *path,
                                          planning_partition_edge **edges,
                                          int *nedges) {
  PLANNING_ENTRY;
  PLANNING_CHECK(edges_check_args(model, edges, nedges));
  PLANNING_CHECK_PTR(path);
  char *text = NULL;
  PLANNING_CHECK(planning_read_file(path, &text));
  tpdp_status st = edges_parse_impl(model, text, edges, nedges);
  free(text);
  return planning_error_in(path, st);
}

/* ------------------------------------------------ greedy (PyTorch's fx shard_model) */

void planning_partition_greedy_free(planning_partition_greedy_result *r) {
  if (r == NULL) return;
  for (int c = 0; r->node_names != NULL && c < r->ncalls; c++)
    free(r->node_names[c]);
  free(r->node_names);
  free(r->call_params);
  free(r->bounds);
  free(r->stage_params);
  memset(r, 0, sizeof *r);
}

/* The key 003 gives a module in its count table: the FQN with '.' -> '_'
 * (named_modules() names, as fx names a call_module node). */
static char *fx_name(const char *fqn) {
  char *s = core_strdup(fqn);
  for (char *p = s; p != NULL && *p; p++)
    if (*p == '.') *p = '_';
  return s;
}

/* counts[i]: elements of the distinct parameters in the subtree of module
 * i, as 003 counts module.parameters() (a parameter tied into the subtree
 * counts there even when declared first elsewhere). stamp[] marks the
 * parameter objects already counted for module `owner`. */
static int64_t subtree_params(const planning_model_module *m, int owner,
                              int *stamp) {
  int64_t sum = 0;
  for (int j = 0; j < m->nparams; j++) {
    const planning_model_param *p = m->params[j].canonical;
    if (stamp[p->index] == owner) continue;
    stamp[p->index] = owner;
    sum += p->numel; /* <= the model's total: no overflow */
  }
  for (int j = 0; j < m->nchildren; j++)
    sum += subtree_params(m->children[j], owner, stamp);
  return sum;
}

/* 003's _get_count: the count of the module whose key is the node name,
 * else of the module whose key is the name's text before its first '_'
 * (so the repeated call "l1_1" counts toward "l1"), else -1 (003 skips the
 * node). When two modules share a key the later one in pre-order holds it,
 * as in 003's dict. */
static int64_t get_count(const planning_model_desc *m, char *const *keys,
                         const int64_t *counts, const char *name) {
  for (int pass = 0; pass < 2; pass++) {
    size_t len = pass == 0 ? strlen(name) : strcspn(name, "_");
    for (int i = m->nmodules - 1; i >= 0; i--)
      if (strlen(keys[i]) == len && strncmp(keys[i], name, len) == 0)
        return counts[i];
  }
  return -1;
}

/* Node names and counts of the calls: the r-th repeated call (r >= 1) of a
 * module is named "<key>_<r>", as fx names a module's later calls. */
static tpdp_status name_calls(const planning_model_desc *m,
                              planning_partition_greedy_result *r) {
  tpdp_status st = TPDP_SUCCESS;
  char **keys = NULL;
  int64_t *counts = NULL;
  int *stamp = NULL, *seen = NULL;
  PLANNING_CHECK_GOTO(PLANNING_CALLOC(keys, (size_t)m->nmodules), st, done);
  PLANNING_CHECK_GOTO(PLANNING_CALLOC(counts, (size_t)m->nmodules), st, done);
  PLANNING_CHECK_GOTO(PLANNING_CALLOC(stamp, (size_t)m->nparams), st, done);
  PLANNING_CHECK_GOTO(PLANNING_CALLOC(seen, (size_t)m->nmodules), st, done);
  for (int j = 0; j < m->nparams; j++) stamp[j] = -1;
  for (int i = 0; i < m->nmodules; i++) {
    keys[i] = fx_name(m->modules[i]->fqn);
    if (keys[i] == NULL) {
      st = planning_error(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
      goto done;
    }
    counts[i] = subtree_params(m->modules[i], i, stamp);
  }
  for (int c = 0; c < r->ncalls; c++) {
    int i = m->calls[c]->index, rep = seen[i]++;
    char suffix[16] = "";
    if (rep > 0) snprintf(suffix, sizeof suffix, "_%d", rep);
    size_t len = strlen(keys[i]) + strlen(suffix) + 1;
    r->node_names[c] = malloc(len);
    if (r->node_names[c] == NULL) {
      st = planning_error(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
      goto done;
    }
    snprintf(r->node_names[c], len, "%s%s", keys[i], suffix);
    r->call_params[c] = get_count(m, keys, counts, r->node_names[c]);
  }
done:
  for (int i = 0; keys != NULL && i < m->nmodules; i++) free(keys[i]);
  free(keys);
  free(counts);
  free(stamp);
  free(seen);
  return st;
}

/* Edges over leaves -> inputs over calls: an edge feeds the first call of
 * its destination leaf from the last call of its source leaf before it.
 * src[e] / dst[e] are call indices. */
static tpdp_status edges_to_calls(const planning_model_desc *m,
                                  const planning_partition_edge *edges,
                                  int nedges, int *src, int *dst) {
  for (int e = 0; e < nedges; e++) {
    const planning_model_module *a = m->leaves[edges[e].src].module;
    const planning_model_module *c = m->leaves[edges[e].dst].module;
    char t[512];
    edge_text(&edges[e], t, sizeof t);
    dst[e] = -1;
    for (int k = 0; k < m->ncalls && dst[e] < 0; k++)
      if (m->calls[k] == c) dst[e] = k;
    if (dst[e] < 0)
      return planning_error(TPDP_ERR_INVALID_ARGUMENT,
                            "edges[%d] %s: leaf \"%s\" is never called "
                            "(not in the model's \"calls\")",
                            e, t, c->fqn);
    src[e] = -1;
    for (int k = 0; k < dst[e]; k++)
      if (m->calls[k] == a) src[e] = k;
    if (src[e] < 0)
      return planning_error(TPDP_ERR_INVALID_ARGUMENT,
                            "edges[%d] %s: leaf \"%s\" is not called before "
                            "the first call of \"%s\" (calls[%d])",
                            e, t, a->fqn, c->fqn, dst[e]);
  }
  return TPDP_SUCCESS;
}

tpdp_status planning_partition_greedy(const planning_model_desc *model, int k,
                                      const planning_partition_edge *edges,
                                      int nedges,
                                      planning_partition_greedy_result *out) {
  PLANNING_ENTRY;
  PLANNING_CHECK_PTR(out);
  memset(out, 0, sizeof *out);
  PLANNING_CHECK_PTR(model);
  if (k < 1)
    return planning_error(TPDP_ERR_INVALID_ARGUMENT,
                          "the number of stages is %d (must be >= 1)", k);
  PLANNING_CHECK(check_edges(model->nleaves, edges, nedges));
  const int n = model->ncalls;
  tpdp_status st = TPDP_SUCCESS;
  planning_partition_greedy_result r = {0};
  int *src = NULL, *dst = NULL, *shard = NULL;
  int64_t *sums = NULL;
  r.ncalls = n;
  PLANNING_CHECK_GOTO(PLANNING_CALLOC(r.node_names, (size_t)n), st, fail);
  PLANNING_CHECK_GOTO(PLANNING_CALLOC(r.call_params, (size_t)n), st, fail);
  PLANNING_CHECK_GOTO(PLANNING_CALLOC(r.bounds, (size_t)n + 1), st, fail);
  PLANNING_CHECK_GOTO(PLANNING_CALLOC(r.stage_params, (size_t)n), st, fail);
  PLANNING_CHECK_GOTO(PLANNING_CALLOC(src, (size_t)nedges), st, fail);
  PLANNING_CHECK_GOTO(PLANNING_CALLOC(dst, (size_t)nedges), st, fail);
  PLANNING_CHECK_GOTO(PLANNING_CALLOC(shard, (size_t)n), st, fail);
  PLANNING_CHECK_GOTO(PLANNING_CALLOC(sums, (size_t)n + 1), st, fail);
  PLANNING_CHECK_GOTO(name_calls(model, &r), st, fail);
  PLANNING_CHECK_GOTO(edges_to_calls(model, edges, nedges, src, dst), st, fail);

  /* 003's _split_nodes over the calls (the model input, a placeholder, is
   * in stage 0 and feeds call 0). sums[s] is 003's shard_to_param_count[s]:
   * the counts of the calls now in stage s (-1 counts nothing). */
  r.threshold = model->total_params / k; /* per_shard_param */
  int sid = 0;
  for (int c = 0; c < n; c++) {
    /* An input from an earlier stage that is not the preceding call pulls
     * every call after it back into its stage. */
    int min_sid = sid, min_call = -1;
    for (int e = 0; e < nedges; e++)
      if (dst[e] == c && src[e] != c - 1 && shard[src[e]] < min_sid) {
        min_sid = shard[src[e]];
        min_call = src[e];
      }
    if (min_sid < sid) {
      for (int j = c - 1; j > min_call; j--) {
        if (r.call_params[j] > 0) sums[shard[j]] -= r.call_params[j];
        if (r.call_params[j] > 0 &&
            __builtin_add_overflow(sums[min_sid], r.call_params[j],
                                   &sums[min_sid]))
          goto overflow;
        shard[j] = min_sid;
      }
      sid = min_sid;
    }
    shard[c] = sid;
    if (r.call_params[c] > 0 &&
        __builtin_add_overflow(sums[sid], r.call_params[c], &sums[sid]))
      goto overflow;
    /* The cut goes right after the call that takes the stage above the
     * threshold: the next call, zero-parameter or not, opens a stage. */
    if (sums[sid] > r.threshold) sid++;
  }
  /* Stage ids never decrease along the calls and leave no gap. */
  r.nstages = n > 0 ? shard[n - 1] + 1 : 0;
  for (int c = 0, s = 0; c < n; c++)
    if (c == 0 || shard[c] != shard[c - 1]) r.bounds[s++] = c;
  r.bounds[r.nstages] = n;
  for (int s = 0; s < r.nstages; s++) r.stage_params[s] = sums[s];
  *out = r;
  goto done;
overflow:
  st = planning_error(TPDP_ERR_INVALID_ARGUMENT,
                      "a stage's parameter count overflows int64 (repeated "
                      "calls count their module again)");
fail:
  planning_partition_greedy_free(&r);
done:
  free(src);
  free(dst);
  free(shard);
  free(sums);
  return st;
}
