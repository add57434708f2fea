// SPDX-License-Identifier: BSD-3-Clause
/* libFuzzer target: the model description reader of the planning tools
 * (planning_model_desc_parse, tools/planning/model_json.h), then the stage
 * partitioners on what it accepts. A description that parses must be
 * self-consistent: every module and parameter found again by its FQN, the
 * leaves' counts summing to the total, every partition covering the
 * leaves or calls in order. */
#include "tests/fuzz/fuzz_util.h"
#include "tools/planning/model_json.h"
#include "tools/planning/partition.h"

/* Partitions are O(k n^2): bound the work one input may ask for. */
#define MAX_LEAVES 2000

static void check_partitions(const planning_model_desc *d) {
  int n = d->nleaves;
  if (n < 1 || n > MAX_LEAVES) return;
  int64_t *w = calloc((size_t)n, sizeof *w);
  int *bounds = calloc((size_t)n + 1, sizeof *bounds);
  FUZZ_ASSERT(w != NULL && bounds != NULL, "out of memory");
  for (int i = 0; i < n; i++) w[i] = d->leaves[i].params;
  int max = 0;
  FUZZ_ASSERT(planning_partition_max_stages(n, NULL, 0, &max) == TPDP_SUCCESS &&
                  max == n,
              "max stages %d of %d leaves: %s", max, n, planning_last_error());
  int k = n < 3 ? n : 3;
  int64_t largest = -1;
  FUZZ_ASSERT(planning_partition_solve(w, n, k, NULL, 0, bounds, &largest) ==
                  TPDP_SUCCESS,
              "solve k=%d: %s", k, planning_last_error());
  FUZZ_ASSERT(bounds[0] == 0 && bounds[k] == n, "bounds [%d..%d] of %d",
              bounds[0], bounds[k], n);
  for (int s = 0; s < k; s++)
    FUZZ_ASSERT(bounds[s] < bounds[s + 1], "empty stage %d", s);
  planning_partition_greedy_result g;
  if (planning_partition_greedy(d, k, NULL, 0, &g) == TPDP_SUCCESS) {
    FUZZ_ASSERT(
        g.nstages >= 1 && g.bounds[0] == 0 && g.bounds[g.nstages] == g.ncalls,
        "greedy: %d stages over %d calls", g.nstages, g.ncalls);
    planning_partition_greedy_free(&g);
  }
  free(w);
  free(bounds);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzz_text(data, size);
  if (text == NULL) return 0;
  planning_model_desc *d = NULL;
  if (planning_model_desc_parse(text, &d) == TPDP_SUCCESS) {
    for (int i = 0; i < d->nmodules; i++)
      FUZZ_ASSERT(planning_model_desc_find_module(d, d->modules[i]->fqn) ==
                      d->modules[i],
                  "module '%s' not found by its FQN", d->modules[i]->fqn);
    for (int i = 0; i < d->nparams; i++)
      FUZZ_ASSERT(planning_model_desc_find_param(d, d->params[i]->fqn) != NULL,
                  "parameter '%s' not found by its FQN", d->params[i]->fqn);
    int64_t sum = 0;
    for (int i = 0; i < d->nleaves; i++) sum += d->leaves[i].params;
    FUZZ_ASSERT(sum == d->total_params, "leaves hold %lld of %lld",
                (long long)sum, (long long)d->total_params);
    check_partitions(d);
    planning_model_desc_destroy(d);
  }
  free(text);
  return 0;
}
