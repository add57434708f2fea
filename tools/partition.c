/* Stage partitioner: see partition.h for the problem and the guarantees. */
#include "tools/partition.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"

/* "\"a\" -> \"c\"" with the user's names, or leaf indices without them. */
static void edge_text(const tpdp_partition_edge *e, char *buf, size_t len) {
  if (e->src_name != NULL && e->dst_name != NULL)
    snprintf(buf, len, "[\"%s\", \"%s\"]", e->src_name, e->dst_name);
  else
    snprintf(buf, len, "leaf %d -> leaf %d", e->src, e->dst);
}

static tpdp_status check_edges(const char *func, int n,
                               const tpdp_partition_edge *edges, int nedges) {
  /* TODO(tools error helper): interim, until tools/ has its own. */
  int frame __attribute__((cleanup(core_api_leave))) = core_api_enter(func);
  (void)frame;
  if (nedges < 0)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT, "nedges is %d (must be >= 0)",
                    nedges);
  if (nedges > 0 && edges == NULL)
    return TPDP_ERR(TPDP_ERR_NULL_POINTER,
                    "argument 'edges' is NULL with nedges = %d", nedges);
  for (int e = 0; e < nedges; e++) {
    const tpdp_partition_edge *x = &edges[e];
    if (x->src < 0 || x->dst >= n || x->src >= x->dst) {
      char t[512];
      edge_text(x, t, sizeof t);
      return TPDP_ERR(
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
static int *make_reach(int n, const tpdp_partition_edge *edges, int nedges) {
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
static int max_stages_impl(int n, const tpdp_partition_edge *edges,
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

tpdp_status tpdp_partition_max_stages(int n, const tpdp_partition_edge *edges,
                                      int nedges, int *out) {
  CHECK_PTR(out);
  if (n < 1)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "n is %d: there must be at least one leaf", n);
  CHECK(check_edges(__func__, n, edges, nedges));
  int r = max_stages_impl(n, edges, nedges);
  if (r < 0) return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
  *out = r;
  return TPDP_SUCCESS;
}

/* k stages are impossible under the edges: name the edge responsible. */
static tpdp_status blame_edge(int n, int k, const tpdp_partition_edge *edges,
                              int nedges, int max_all) {
  /* Smallest prefix length L with max_stages(edges[0..L)) < k; the count
   * only falls as edges are added, so binary search. */
  int lo = 1, hi = nedges;
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    int m = max_stages_impl(n, edges, mid);
    if (m < 0) return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
    if (m < k)
      hi = mid;
    else
      lo = mid + 1;
  }
  int e = lo - 1;
  int alone = max_stages_impl(n, &edges[e], 1);
  int upto = max_stages_impl(n, edges, lo);
  if (alone < 0 || upto < 0)
    return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
  char t[512];
  edge_text(&edges[e], t, sizeof t);
  if (alone < k)
    return TPDP_ERR(
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
  return TPDP_ERR(
      TPDP_ERR_UNSUPPORTED,
      "cannot split %d leaf modules into %d stages: skip edge edges[%d] %s "
      "would jump over a whole stage given %s; together they allow at most "
      "%d stages (with all %d edges, %d)",
      n, k, e, t, given, upto, nedges, max_all);
}

tpdp_status tpdp_partition_solve(const int64_t *weights, int n, int k,
                                 const tpdp_partition_edge *edges, int nedges,
                                 int *bounds, int64_t *max_stage_params) {
  CHECK_PTR(weights);
  CHECK_PTR(bounds);
  CHECK_PTR(max_stage_params);
  if (n < 1)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "there are no leaf modules to partition (n = %d)", n);
  if (k < 1)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "the number of stages is %d (must be >= 1)", k);
  if (k > n)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "cannot split %d leaf modules into %d non-empty stages "
                    "(at most %d stages)",
                    n, k, n);
  CHECK(check_edges(__func__, n, edges, nedges));
  tpdp_status st = TPDP_SUCCESS;
  int64_t *pre = NULL, *f = NULL;
  int *reach = NULL;
  unsigned char *h = NULL;
  CHECK_GOTO(TPDP_CALLOC(pre, (size_t)n + 1), st, done);
  for (int i = 0; i < n; i++) {
    if (weights[i] < 0) {
      st = TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "weights[%d] is %lld (must be >= 0)", i,
                    (long long)weights[i]);
      goto done;
    }
    if (__builtin_add_overflow(pre[i], weights[i], &pre[i + 1])) {
      st = TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "the parameter total overflows int64 at weights[%d]", i);
      goto done;
    }
  }
  int max_all = max_stages_impl(n, edges, nedges);
  if (max_all < 0) {
    st = TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
    goto done;
  }
  if (max_all < k) {
    st = blame_edge(n, k, edges, nedges, max_all);
    goto done;
  }
  reach = make_reach(n, edges, nedges);
  if (reach == NULL) {
    st = TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
    goto done;
  }
  const size_t w = (size_t)n + 1;
  if ((size_t)k + 1 > SIZE_MAX / w / sizeof(int64_t)) {
    st = TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "%d stages x %d leaves is too big", k,
                  n);
    goto done;
  }
  CHECK_GOTO(TPDP_CALLOC(f, ((size_t)k + 1) * w), st, done);
  CHECK_GOTO(TPDP_CALLOC(h, ((size_t)k + 1) * w), st, done);

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
    st = TPDP_ERR(TPDP_ERR_INTERNAL,
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
      st = TPDP_ERR(TPDP_ERR_INTERNAL,
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

void tpdp_partition_edges_free(tpdp_partition_edge *edges, int nedges) {
  if (edges == NULL) return;
  for (int i = 0; i < nedges; i++) {
    free((void *)edges[i].src_name);
    free((void *)edges[i].dst_name);
  }
  free(edges);
}

static char *dup_str(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

static tpdp_status edge_err(const char *func, const char *source,
                            tpdp_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static tpdp_status edge_err(const char *func, const char *source,
                            tpdp_status st, const char *fmt, ...) {
  /* TODO(tools error helper): interim, until tools/ has its own. */
  int frame __attribute__((cleanup(core_api_leave))) = core_api_enter(func);
  (void)frame;
  char msg[900];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (source != NULL) return TPDP_ERR(st, "%s: %s", source, msg);
  return TPDP_ERR(st, "%s", msg);
}

#define EDGE_ERR(st, ...) edge_err(func, source, (st), __VA_ARGS__)

static tpdp_status edges_parse_impl(const char *func,
                                    const tpdp_model_desc *model,
                                    const char *json, const char *source,
                                    tpdp_partition_edge **edges_out,
                                    int *nedges_out) {
  const char *end = NULL;
  cJSON *doc = cJSON_ParseWithOpts(json, &end, 1);
  if (doc == NULL) {
    int line = 1, col = 1;
    for (const char *s = json; end != NULL && s < end && *s; s++) {
      if (*s == '\n') {
        line++;
        col = 1;
      } else {
        col++;
      }
    }
    return EDGE_ERR(TPDP_ERR_PARSE, "not valid JSON (line %d, column %d)", line,
                    col);
  }
  tpdp_status st = TPDP_SUCCESS;
  tpdp_partition_edge *edges = NULL;
  int n = 0;
  if (!cJSON_IsArray(doc)) {
    st = EDGE_ERR(TPDP_ERR_PARSE,
                  "edges must be a JSON array of [\"from\", \"to\"] pairs");
    goto fail;
  }
  int cap = cJSON_GetArraySize(doc);
  edges = calloc(cap ? (size_t)cap : 1, sizeof *edges);
  if (edges == NULL) {
    st = EDGE_ERR(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
    goto fail;
  }
  for (const cJSON *pair = doc->child; pair != NULL; pair = pair->next, n++) {
    if (!cJSON_IsArray(pair) || cJSON_GetArraySize(pair) != 2 ||
        !cJSON_IsString(pair->child) || !cJSON_IsString(pair->child->next)) {
      st = EDGE_ERR(TPDP_ERR_PARSE,
                    "edges[%d] must be an array of two module FQNs", n);
      goto fail;
    }
    const char *a = pair->child->valuestring;
    const char *c = pair->child->next->valuestring;
    tpdp_partition_edge *e = &edges[n];
    e->src_name = dup_str(a);
    e->dst_name = dup_str(c);
    if (e->src_name == NULL || e->dst_name == NULL) {
      n++;
      st = EDGE_ERR(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
      goto fail;
    }
    const tpdp_model_module *ma = tpdp_model_desc_find_module(model, a);
    const tpdp_model_module *mc = tpdp_model_desc_find_module(model, c);
    if (ma == NULL || mc == NULL) {
      const char *bad = ma == NULL ? a : c;
      int is_param = tpdp_model_desc_find_param(model, bad) != NULL;
      n++;
      st = EDGE_ERR(TPDP_ERR_NOT_FOUND,
                    "edges[%d][%d]: no module named \"%s\" in the model%s",
                    n - 1, ma == NULL ? 0 : 1, bad,
                    is_param ? " (that is a parameter; name its module)" : "");
      goto fail;
    }
    e->src = ma->last_leaf;
    e->dst = mc->first_leaf;
    if (e->src >= e->dst) {
      n++;
      st = EDGE_ERR(
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
  tpdp_partition_edges_free(edges, n);
  return st;
}

tpdp_status tpdp_partition_edges_parse(const tpdp_model_desc *model,
                                       const char *json, const char *source,
                                       tpdp_partition_edge **edges,
                                       int *nedges) {
  CHECK_PTR(edges);
  CHECK_PTR(nedges);
  *edges = NULL;
  *nedges = 0;
  CHECK_PTR(model);
  CHECK_PTR(json);
  return edges_parse_impl(__func__, model, json, source, edges, nedges);
}

tpdp_status tpdp_partition_edges_load(const tpdp_model_desc *model,
                                      const char *path,
                                      tpdp_partition_edge **edges,
                                      int *nedges) {
  CHECK_PTR(edges);
  CHECK_PTR(nedges);
  *edges = NULL;
  *nedges = 0;
  CHECK_PTR(model);
  CHECK_PTR(path);
  char *text = NULL;
  CHECK(tpdp_tools_read_file(path, &text));
  tpdp_status st = edges_parse_impl(__func__, model, text, path, edges, nedges);
  free(text);
  return st;
}
