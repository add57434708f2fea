// SPDX-License-Identifier: BSD-3-Clause
/* `tpdp partition`: split a model into pipeline stages
 * (tools/planning/partition.h): the optimal min-max split of the leaves, or
 * PyTorch's fx shard_model's greedy split of the calls. */
#include <cjson/cJSON.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/cli/cli.h"
#include "tools/cli/commands.h"
#include "tools/planning/model_json.h"
#include "tools/planning/partition.h"
#include "tpdp/core.h"

static void cmd_partition_usage(void) {
  printf(
      "usage: tpdp partition --model M.json --stages K [--method M] "
      "[--edges E.json]\n"
      "                      [--json]\n\n"
      "Split a model into K consecutive pipeline stages.\n\n"
      "  --model M.json   model description (docs/model-format.md)\n"
      "  --stages K       number of stages\n"
      "  --method M       optimal (default) or greedy\n"
      "  --edges E.json   skip connections [[\"a\", \"c\"], ...] (module "
      "FQNs): the\n"
      "                   output of a feeds c. A non-leaf module means its "
      "last leaf\n"
      "                   as a source, its first leaf as a destination.\n"
      "  --json           print {\"stages\":[{\"modules\":[...],\"params\":N},"
      "...],\n"
      "                   \"max_stage_params\":N} (greedy adds \"method\", "
      "\"threshold\"\n"
      "                   and each stage's \"nodes\")\n\n"
      "optimal: the leaf modules, each once in pre-order, into exactly K "
      "non-empty\n"
      "  stages (1 <= K <= leaves) whose largest parameter count is as small "
      "as\n"
      "  possible (exact). Each parameter counts once: a tied one at its "
      "first FQN,\n"
      "  one declared on a module with children at that module's first "
      "leaf.\n"
      "  No stage lies wholly between the ends of an edge. Among equally "
      "good\n"
      "  splits, earlier stages take as many modules as they can (so "
      "zero-parameter\n"
      "  modules end a stage).\n"
      "greedy: PyTorch's torch.fx shard_model split, step for step, over the "
      "model's\n"
      "  calls (\"calls\" in the model, else each leaf once): a call counts "
      "its\n"
      "  module's parameters (tied ones included; a repeated call l1_1 "
      "counts l1\n"
      "  again; parameters declared on a module with children count "
      "nowhere), a\n"
      "  stage ends right after the call that takes it above total // K (so "
      "the\n"
      "  next call, zero-parameter or not, opens a stage), and a call fed by "
      "an\n"
      "  earlier stage other than through the preceding call pulls every "
      "call\n"
      "  after its input back into the input's stage. The stage count can "
      "differ\n"
      "  from K either way; any K >= 1 is accepted.\n\n"
      "Exit status: 0 done, 1 impossible request or bad input, 2 usage "
      "error.\n");
}

static const char *module_name(const planning_model_module *m) {
  return m->fqn[0] ? m->fqn : "(root)";
}

/* Both methods' JSON ends the same: "max_stage_params", printed on one
 * line. `ok` is 0 when building `root` ran out of memory. Frees root. */
static int print_stages_json(cJSON *root, int ok, int64_t max_stage) {
  ok = ok && cJSON_AddNumberToObject(root, "max_stage_params",
                                     (double)max_stage) != NULL;
  char *text = ok ? cJSON_PrintUnformatted(root) : NULL;
  cJSON_Delete(root);
  if (text == NULL) {
    fprintf(stderr, "tpdp partition: out of memory\n");
    return 1;
  }
  printf("%s\n", text);
  free(text);
  return 0;
}

static int print_json(const planning_model_desc *m, const int *bounds, int k,
                      int64_t max_stage) {
  cJSON *root = cJSON_CreateObject();
  cJSON *stages = cJSON_AddArrayToObject(root, "stages");
  int ok = root != NULL && stages != NULL;
  for (int s = 0; ok && s < k; s++) {
    cJSON *st = cJSON_CreateObject();
    cJSON *mods = cJSON_AddArrayToObject(st, "modules");
    int64_t sum = 0;
    ok = st != NULL && mods != NULL;
    for (int i = bounds[s]; ok && i < bounds[s + 1]; i++) {
      cJSON *name = cJSON_CreateString(m->leaves[i].module->fqn);
      ok = name != NULL;
      if (ok) cJSON_AddItemToArray(mods, name);
      sum += m->leaves[i].params;
    }
    ok = ok && cJSON_AddNumberToObject(st, "params", (double)sum) != NULL;
    if (st != NULL) cJSON_AddItemToArray(stages, st);
  }
  return print_stages_json(root, ok, max_stage);
}

static void print_text(const char *model_path, const planning_model_desc *m,
                       const int *bounds, int k, int64_t max_stage,
                       int nedges) {
  printf("model %s: %d leaf modules, %lld parameters; %d stages", model_path,
         m->nleaves, (long long)m->total_params, k);
  if (nedges > 0) printf(", %d skip edges", nedges);
  printf("\n");
  int width = 6;
  for (int i = 0; i < m->nleaves; i++) {
    int len = (int)strlen(module_name(m->leaves[i].module));
    if (len > width) width = len;
  }
  for (int s = 0; s < k; s++) {
    int64_t sum = 0;
    for (int i = bounds[s]; i < bounds[s + 1]; i++) sum += m->leaves[i].params;
    printf("stage %d: %lld params, %d modules\n", s, (long long)sum,
           bounds[s + 1] - bounds[s]);
    for (int i = bounds[s]; i < bounds[s + 1]; i++)
      printf("  %-*s %12lld  %s\n", width, module_name(m->leaves[i].module),
             (long long)m->leaves[i].params, m->leaves[i].module->class_name);
  }
  printf("max stage params: %lld\n", (long long)max_stage);
}

/* Greedy stages as JSON: the optimal form plus "method", "threshold" and
 * each stage's node names. */
static int print_greedy_json(const planning_model_desc *m,
                             const planning_partition_greedy_result *g,
                             int64_t max_stage) {
  cJSON *root = cJSON_CreateObject();
  int ok =
      root != NULL &&
      cJSON_AddStringToObject(root, "method", "greedy") != NULL &&
      cJSON_AddNumberToObject(root, "threshold", (double)g->threshold) != NULL;
  cJSON *stages = ok ? cJSON_AddArrayToObject(root, "stages") : NULL;
  ok = ok && stages != NULL;
  for (int s = 0; ok && s < g->nstages; s++) {
    cJSON *st = cJSON_CreateObject();
    cJSON *mods = cJSON_AddArrayToObject(st, "modules");
    cJSON *nodes = cJSON_AddArrayToObject(st, "nodes");
    ok = st != NULL && mods != NULL && nodes != NULL;
    for (int c = g->bounds[s]; ok && c < g->bounds[s + 1]; c++) {
      cJSON *fqn = cJSON_CreateString(m->calls[c]->fqn);
      cJSON *node = cJSON_CreateString(g->node_names[c]);
      if (fqn != NULL) cJSON_AddItemToArray(mods, fqn);
      if (node != NULL) cJSON_AddItemToArray(nodes, node);
      ok = fqn != NULL && node != NULL;
    }
    ok = ok && cJSON_AddNumberToObject(st, "params",
                                       (double)g->stage_params[s]) != NULL;
    if (st != NULL) cJSON_AddItemToArray(stages, st);
  }
  return print_stages_json(root, ok, max_stage);
}

static void print_greedy_text(const char *model_path,
                              const planning_model_desc *m,
                              const planning_partition_greedy_result *g, int k,
                              int64_t max_stage, int nedges) {
  printf(
      "model %s: %d calls of %d leaf modules, %lld parameters; greedy "
      "(torch.fx shard_model), --stages %d: %d stage%s, threshold %lld",
      model_path, m->ncalls, m->nleaves, (long long)m->total_params, k,
      g->nstages, g->nstages == 1 ? "" : "s", (long long)g->threshold);
  if (nedges > 0) printf(", %d skip edges", nedges);
  printf("\n");
  int wf = 6, wn = 4;
  for (int c = 0; c < m->ncalls; c++) {
    int lf = (int)strlen(module_name(m->calls[c]));
    int ln = (int)strlen(g->node_names[c]);
    if (lf > wf) wf = lf;
    if (ln > wn) wn = ln;
  }
  for (int s = 0; s < g->nstages; s++) {
    printf("stage %d: %lld params, %d calls\n", s,
           (long long)g->stage_params[s], g->bounds[s + 1] - g->bounds[s]);
    for (int c = g->bounds[s]; c < g->bounds[s + 1]; c++) {
      char count[32] = "-";
      if (g->call_params[c] >= 0)
        snprintf(count, sizeof count, "%lld", (long long)g->call_params[c]);
      printf("  %-*s %-*s %12s  %s\n", wf, module_name(m->calls[c]), wn,
             g->node_names[c], count, m->calls[c]->class_name);
    }
  }
  printf("max stage params: %lld\n", (long long)max_stage);
}

static int run_greedy(const char *model_path, const planning_model_desc *m,
                      int k, const planning_partition_edge *edges, int nedges,
                      int as_json) {
  planning_partition_greedy_result g;
  if (planning_partition_greedy(m, k, edges, nedges, &g) != TPDP_SUCCESS) {
    fprintf(stderr, "tpdp partition: %s\n", planning_last_error());
    return 1;
  }
  int64_t max_stage = 0;
  for (int s = 0; s < g.nstages; s++)
    if (g.stage_params[s] > max_stage) max_stage = g.stage_params[s];
  int rc = 0;
  if (as_json)
    rc = print_greedy_json(m, &g, max_stage);
  else
    print_greedy_text(model_path, m, &g, k, max_stage, nedges);
  planning_partition_greedy_free(&g);
  return rc;
}

static int run_optimal(const char *model_path, const planning_model_desc *m,
                       int k, const planning_partition_edge *edges, int nedges,
                       int as_json) {
  if (k < 1 || k > m->nleaves) {
    fprintf(stderr,
            "tpdp partition: cannot split %d leaf modules into %d "
            "non-empty stages (--stages must be 1..%d)\n",
            m->nleaves, k, m->nleaves);
    return 1;
  }
  int *bounds = calloc((size_t)k + 1, sizeof *bounds);
  int64_t *weights = calloc((size_t)m->nleaves, sizeof *weights);
  int64_t max_stage = 0;
  int rc = 1;
  if (bounds == NULL || weights == NULL) {
    fprintf(stderr, "tpdp partition: out of memory\n");
    goto done;
  }
  for (int i = 0; i < m->nleaves; i++) weights[i] = m->leaves[i].params;
  if (planning_partition_solve(weights, m->nleaves, k, edges, nedges, bounds,
                               &max_stage) != TPDP_SUCCESS) {
    fprintf(stderr, "tpdp partition: %s\n", planning_last_error());
    goto done;
  }
  if (as_json) {
    rc = print_json(m, bounds, k, max_stage);
  } else {
    print_text(model_path, m, bounds, k, max_stage, nedges);
    rc = 0;
  }
done:
  free(bounds);
  free(weights);
  return rc;
}

static int cmd_partition(int argc, char **argv) {
  const char *model_path = NULL, *edges_path = NULL, *stages_s = NULL,
             *method = "optimal";
  int as_json = 0;
  const cli_option opts[] = {{"--model", &model_path, 1},
                             {"--stages", &stages_s, 1},
                             {"--edges", &edges_path, 0},
                             {"--method", &method, 0}};
  int urc = cli_options("partition", argc, argv, opts,
                        (int)(sizeof opts / sizeof opts[0]), &as_json);
  if (urc != 0) return urc;
  int greedy = strcmp(method, "greedy") == 0;
  if (!greedy && strcmp(method, "optimal") != 0)
    return cli_usage_error("partition",
                           "--method '%s' is not optimal or greedy", method);
  /* Out-of-range counts that fit an int are the partitioner's to refuse. */
  int64_t k = 0;
  urc = cli_int_option("partition", "--stages", stages_s, INT_MIN, INT_MAX, &k);
  if (urc != 0) return urc;

  planning_model_desc *m = NULL;
  planning_partition_edge *edges = NULL;
  int nedges = 0, rc = 1;
  if (planning_model_desc_load(model_path, &m) != TPDP_SUCCESS ||
      (edges_path != NULL &&
       planning_partition_edges_load(m, edges_path, &edges, &nedges) !=
           TPDP_SUCCESS))
    fprintf(stderr, "tpdp partition: %s\n", planning_last_error());
  else if (greedy)
    rc = run_greedy(model_path, m, (int)k, edges, nedges, as_json);
  else
    rc = run_optimal(model_path, m, (int)k, edges, nedges, as_json);
  planning_partition_edges_free(edges, nedges);
  planning_model_desc_destroy(m);
  return rc;
}

const cli_command cli_cmd_partition = {
    "partition", "split a model into balanced pipeline stages", cmd_partition,
    cmd_partition_usage};
