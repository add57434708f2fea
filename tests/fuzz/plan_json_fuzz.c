// SPDX-License-Identifier: BSD-3-Clause
/* libFuzzer target: sharding plans (planning_plan_compute, tools/planning/
 * plan.h). The input is a plan JSON text for a fixed model, or "MODEL\0PLAN"
 * to fuzz both (the model through planning_model_desc_parse). A plan that
 * computes must be consistent: each parameter's local shapes lie inside
 * its global shape and its bytes add up to the tp rank's total. */
#include <cjson/cJSON.h>

#include "tests/fuzz/fuzz_util.h"
#include "tools/planning/model_json.h"
#include "tools/planning/plan.h"

/* A small model with every kind of parameter the styles look at: a
 * Linear pair for colwise/rowwise, an embedding, a tied weight, a scalar
 * and a bf16 bias. */
static const char kModel[] =
    "{\"class\": \"M\", \"params\": {\"scale\": {\"shape\": []}},"
    " \"children\": {"
    "  \"emb\": {\"class\": \"Embedding\","
    "           \"params\": {\"weight\": {\"shape\": [10, 4]}}},"
    "  \"u1\": {\"class\": \"Block\", \"children\": {"
    "    \"l1\": {\"class\": \"Linear\", \"params\": {"
    "       \"weight\": {\"shape\": [8, 4]}, \"bias\": {\"shape\": [8]}}},"
    "    \"l2\": {\"class\": \"Linear\", \"params\": {"
    "       \"weight\": {\"shape\": [4, 8]},"
    "       \"bias\": {\"shape\": [4], \"dtype\": \"bf16\"}}}}},"
    "  \"head\": {\"class\": \"Linear\", \"params\": {"
    "     \"weight\": {\"shape\": [10, 4]}}}},"
    " \"shared\": [[\"emb.weight\", \"head.weight\"]]}";

/* A plan holds local shapes and buckets per tp rank: its cost is linear
 * in the "tp" mesh dim, up to PLANNING_PLAN_MAX_RANKS (2^20) ranks, a minute
 * per input under the fuzzer's instrumentation, not a hang. Plans with a
 * larger tp dim than this are left to the unit tests (plan_test.cc) so
 * that the fuzzer spends its time on inputs, not on one big plan. */
#define MAX_TP 4096

static int tp_too_large(const char *plan_text) {
  cJSON *root = cJSON_Parse(plan_text);
  const cJSON *mesh = cJSON_GetObjectItemCaseSensitive(root, "mesh");
  int large = 0;
  for (const cJSON *d = mesh ? mesh->child : NULL; d != NULL; d = d->next)
    if (d->string != NULL && strcmp(d->string, "tp") == 0 &&
        cJSON_IsNumber(d) && d->valuedouble > MAX_TP)
      large = 1;
  cJSON_Delete(root);
  return large;
}

static void check_plan(const planning_plan *plan) {
  for (int64_t t = 0; t < plan->tp_size; t++) {
    size_t sum = 0;
    for (int k = 0; k < plan->nparams; k++) {
      const planning_plan_param *pp = &plan->params[k];
      const planning_model_param *p = pp->param;
      for (int d = 0; d < p->ndim; d++) {
        int64_t s = pp->local_shapes[t * p->ndim + d];
        FUZZ_ASSERT(s >= 0 && s <= p->shape[d],
                    "'%s' dim %d: local %lld of global %lld", p->fqn, d,
                    (long long)s, (long long)p->shape[d]);
      }
      sum += pp->local_bytes[t];
    }
    FUZZ_ASSERT(sum == plan->tp_bytes[t], "tp rank %lld: %zu != %zu bytes",
                (long long)t, sum, plan->tp_bytes[t]);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static planning_model_desc *fixed;
  if (fixed == NULL)
    FUZZ_ASSERT(planning_model_desc_parse(kModel, &fixed) == TPDP_SUCCESS, "%s",
                planning_last_error());
  char *text = fuzz_text(data, size);
  if (text == NULL) return 0;
  const planning_model_desc *model = fixed;
  planning_model_desc *own = NULL;
  const char *plan_text = text;
  const char *nul = memchr(text, '\0', size);
  if (nul != NULL) { /* MODEL\0PLAN */
    plan_text = nul + 1;
    if (planning_model_desc_parse(text, &own) != TPDP_SUCCESS) goto done;
    model = own;
  }
  if (tp_too_large(plan_text)) goto done;
  /* Small limits too: more buckets per input. */
  static const size_t limits[2] = {64, 256};
  for (int l = 0; l < 2; l++) {
    planning_plan *plan = NULL;
    if (planning_plan_compute(model, plan_text, l ? limits : NULL, l ? 2 : 0,
                              &plan) == TPDP_SUCCESS) {
      check_plan(plan);
      planning_plan_destroy(plan);
    }
  }
done:
  planning_model_desc_destroy(own);
  free(text);
  return 0;
}
