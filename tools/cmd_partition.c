/* `tpdp partition`: split a model's leaf modules into balanced pipeline
 * stages (tools/partition.h). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/commands.h"
#include "tools/model_json.h"
#include "tools/partition.h"
#include "tpdp/core.h"

void cmd_partition_usage(void) {
  printf(
      "usage: tpdp partition --model M.json --stages K [--edges E.json] "
      "[--json]\n\n"
      "Split the model's leaf modules, in pre-order, into K consecutive "
      "non-empty\n"
      "stages so that the largest stage holds as few parameters as "
      "possible\n"
      "(exact, not greedy). Shared parameters count once, at their first "
      "owner.\n\n"
      "  --model M.json   model description (docs/model-format.md)\n"
      "  --stages K       number of stages, 1 <= K <= number of leaves\n"
      "  --edges E.json   skip connections [[\"a\", \"c\"], ...] (module "
      "FQNs); the\n"
      "                   cut never puts a whole stage between a and c. A "
      "non-leaf\n"
      "                   module means its last leaf as a source, its first "
      "leaf\n"
      "                   as a destination.\n"
      "  --json           print {\"stages\":[{\"modules\":[...],\"params\":N},"
      "...],\n"
      "                   \"max_stage_params\":N}\n\n"
      "Among equally good splits, earlier stages take as many modules as "
      "they can.\n"
      "Exit status: 0 done, 1 impossible request or bad input, 2 usage "
      "error.\n");
}

static const char *leaf_name(const tpdp_model_leaf *l) {
  return l->module->fqn[0] ? l->module->fqn : "(root)";
}

static int print_json(const tpdp_model_desc *m, const int *bounds, int k,
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

static void print_text(const char *model_path, const tpdp_model_desc *m,
                       const int *bounds, int k, int64_t max_stage,
                       int nedges) {
  printf("model %s: %d leaf modules, %lld parameters; %d stages", model_path,
         m->nleaves, (long long)m->total_params, k);
  if (nedges > 0) printf(", %d skip edges", nedges);
  printf("\n");
  int width = 6;
  for (int i = 0; i < m->nleaves; i++) {
    int len = (int)strlen(leaf_name(&m->leaves[i]));
    if (len > width) width = len;
  }
  for (int s = 0; s < k; s++) {
    int64_t sum = 0;
    for (int i = bounds[s]; i < bounds[s + 1]; i++) sum += m->leaves[i].params;
    printf("stage %d: %lld params, %d modules\n", s, (long long)sum,
           bounds[s + 1] - bounds[s]);
    for (int i = bounds[s]; i < bounds[s + 1]; i++)
      printf("  %-*s %12lld  %s\n", width, leaf_name(&m->leaves[i]),
             (long long)m->leaves[i].params, m->leaves[i].module->class_name);
  }
  printf("max stage params: %lld\n", (long long)max_stage);
}

int cmd_partition(int argc, char **argv) {
  const char *model_path = NULL, *edges_path = NULL, *stages_s = NULL;
  int as_json = 0;
  for (int i = 1; i < argc; i++) {
    int missing = 0;
    const char *v;
    if ((v = tpdp_cli_opt_value(argc, argv, &i, "--model", &missing)) != NULL)
      model_path = v;
    else if ((v = tpdp_cli_opt_value(argc, argv, &i, "--stages", &missing)) !=
             NULL)
      stages_s = v;
    else if ((v = tpdp_cli_opt_value(argc, argv, &i, "--edges", &missing)) !=
             NULL)
      edges_path = v;
    else if (missing)
      return tpdp_cli_usage_error("partition", "option %s needs a value",
                                  argv[i]);
    else if (strcmp(argv[i], "--json") == 0)
      as_json = 1;
    else
      return tpdp_cli_usage_error("partition", "unknown argument '%s'",
                                  argv[i]);
  }
  if (model_path == NULL)
    return tpdp_cli_usage_error("partition", "%s", "--model is required");
  if (stages_s == NULL)
    return tpdp_cli_usage_error("partition", "%s", "--stages is required");
  char *end = NULL;
  errno = 0;
  long k = strtol(stages_s, &end, 10);
  if (errno != 0 || end == stages_s || *end != '\0' || k < INT_MIN ||
      k > INT_MAX)
    return tpdp_cli_usage_error("partition", "--stages '%s' is not an integer",
                                stages_s);

  tpdp_model_desc *m = NULL;
  tpdp_partition_edge *edges = NULL;
  int nedges = 0, rc = 1;
  int *bounds = NULL;
  int64_t *weights = NULL;
  if (tpdp_model_desc_load(model_path, &m) != TPDP_SUCCESS) goto fail;
  if (edges_path != NULL &&
      tpdp_partition_edges_load(m, edges_path, &edges, &nedges) != TPDP_SUCCESS)
    goto fail;
  if (k < 1 || k > m->nleaves) {
    fprintf(stderr,
            "tpdp partition: cannot split %d leaf modules into %ld "
            "non-empty stages (--stages must be 1..%d)\n",
            m->nleaves, k, m->nleaves);
    goto done;
  }
  bounds = calloc((size_t)k + 1, sizeof *bounds);
  weights = calloc((size_t)m->nleaves, sizeof *weights);
  if (bounds == NULL || weights == NULL) {
    fprintf(stderr, "tpdp partition: out of memory\n");
    goto done;
  }
  for (int i = 0; i < m->nleaves; i++) weights[i] = m->leaves[i].params;
  int64_t max_stage = 0;
  if (tpdp_partition_solve(weights, m->nleaves, (int)k, edges, nedges, bounds,
                           &max_stage) != TPDP_SUCCESS)
    goto fail;
  if (as_json)
    rc = print_json(m, bounds, (int)k, max_stage);
  else {
    print_text(model_path, m, bounds, (int)k, max_stage, nedges);
    rc = 0;
  }
  goto done;
fail:
  fprintf(stderr, "tpdp partition: %s\n", tpdp_last_error());
done:
  free(bounds);
  free(weights);
  tpdp_partition_edges_free(edges, nedges);
  tpdp_model_desc_destroy(m);
  return rc;
}
