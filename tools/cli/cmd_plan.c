// SPDX-License-Identifier: BSD-3-Clause
/* `tpdp plan`: show how a model will be sharded by TP and DP
 * (tools/planning/plan.h): the sharded tree report (PyTorch FSDP's tree report), the unit ->
 * parameter map, placements and local shapes, bytes per rank and the DP
 * buckets. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/cli/cli.h"
#include "tools/cli/commands.h"
#include "tools/planning/model_json.h"
#include "tools/planning/plan.h"
#include "tpdp/tp.h"

static void cmd_plan_usage(void) {
  printf(
      "usage: tpdp plan --model M.json --plan P.json [--limits-bytes "
      "L1,L2,...] [--json]\n\n"
      "Show how a model will be sharded, without running it:\n"
      "  1. the sharded module tree (PyTorch FSDP's debug format: one line per "
      "module,\n"
      "     fqn[Class], 4 spaces per level, a suffix after managed units)\n"
      "  2. unit -> the parameter FQNs it manages (as a Python dict)\n"
      "  3. each parameter's placements (one per mesh dim) and local shape "
      "per\n"
      "     tp rank\n"
      "  4. bytes of local parameters per tp rank (shared ones once)\n"
      "  5. the DP buckets of each tp rank, as the reducer starts them\n\n"
      "  --model M.json        model description (docs/model-format.md)\n"
      "  --plan P.json         {\"mesh\": {\"dp\": 2, \"tp\": 2}, \"units\": "
      "[\"\", \"u1\"],\n"
      "                         \"tp\": {\"u1.l1\": \"colwise\", \"u1.l2\": "
      "\"rowwise\"}}\n"
      "  --limits-bytes L,...  bucket size limits (default "
      "1048576,26214400)\n"
      "  --json                everything as one JSON object\n\n"
      "Modules listed in \"units\" print \" FULLY SHARDED\"; modules a "
      "\"tp\" pattern\n"
      "matches (and not listed) print \" TP <STYLE>\". DP replicates "
      "parameters, so\n"
      "ranks with the same tp coordinate hold the same local parameters.\n"
      "Exit status: 0 done, 1 bad model or plan, 2 usage error.\n");
}

/* ----------------------------------------------------------- text */

static void shape_str(int ndim, const int64_t *shape, char *buf, size_t len) {
  tpdp_shape_format(ndim, shape, buf, len);
}

static void placements_str(const planning_plan *plan,
                           const planning_plan_param *pp, char *buf,
                           size_t len) {
  size_t used = 0;
  buf[0] = '\0';
  for (int d = 0; d < plan->mesh_ndim && used < len; d++) {
    char one[24];
    planning_plan_placement_format(pp->placements[d], one, sizeof one);
    int w = snprintf(buf + used, len - used, "%s%s%s", d ? ", " : "[", one,
                     d == plan->mesh_ndim - 1 ? "]" : "");
    if (w > 0) used += (size_t)w;
  }
}

/* The i-th (0-based) mesh rank whose tp coordinate is t. Row-major: rank
 * = outer * (tp_size * inner) + t * inner + j, increasing in (outer, j). */
static int64_t rank_with_tp(const planning_plan *plan, int64_t t, int64_t i) {
  if (plan->tp_dim < 0) return i;
  int64_t inner = 1;
  for (int d = plan->tp_dim + 1; d < plan->mesh_ndim; d++)
    inner *= plan->mesh_sizes[d];
  return (i / inner) * plan->tp_size * inner + t * inner + i % inner;
}

/* Mesh ranks whose tp coordinate is t: "0, 2" (shortened when many), in
 * time independent of the mesh size. */
static void ranks_str(const planning_plan *plan, int64_t t, char *buf,
                      size_t len) {
  const int64_t count = plan->world / plan->tp_size;
  size_t used = 0;
  buf[0] = '\0';
  for (int64_t i = 0; i < count && i < 4 && used < len; i++) {
    int w = snprintf(buf + used, len - used, "%s%lld", i ? ", " : "",
                     (long long)rank_with_tp(plan, t, i));
    if (w > 0) used += (size_t)w;
  }
  if (count > 5 && used < len)
    snprintf(buf + used, len - used, ", ..., %lld (%lld ranks)",
             (long long)rank_with_tp(plan, t, count - 1), (long long)count);
  else if (count == 5 && used < len)
    snprintf(buf + used, len - used, ", %lld",
             (long long)rank_with_tp(plan, t, 4));
}

/* Python repr of a str (single quotes), as PyTorch FSDP's tree report's dict prints. */
static void print_pystr(const char *s) {
  putchar('\'');
  for (; *s; s++) {
    if (*s == '\'' || *s == '\\') putchar('\\');
    putchar(*s);
  }
  putchar('\'');
}

static const char *style_name(int style) {
  return style < 0 ? "-" : tpdp_tp_style_name((tpdp_tp_style)style);
}

static void print_text(const char *model_path, const planning_plan *plan) {
  const planning_model_desc *m = plan->model;
  const tpdp_tree_report *rep = plan->report;
  printf("model %s: %d modules, %lld parameters; mesh", model_path, m->nmodules,
         (long long)m->total_params);
  for (int d = 0; d < plan->mesh_ndim; d++)
    printf("%s%s=%lld", d ? ", " : " ", plan->mesh_names[d],
           (long long)plan->mesh_sizes[d]);
  printf(" (%lld ranks)\n\n", (long long)plan->world);

  printf("sharded module tree:\n%s\n", tpdp_tree_report_text(rep));

  printf("managed parameters per unit:\n");
  int nu = tpdp_tree_report_num_units(rep);
  if (nu == 0) printf("{}\n");
  for (int u = 0; u < nu; u++) {
    printf("%s", u == 0 ? "{" : "");
    print_pystr(tpdp_tree_report_unit(rep, u));
    printf(": [");
    for (int j = 0; j < tpdp_tree_report_num_fqns(rep, u); j++) {
      printf("%s", j ? ", " : "");
      print_pystr(tpdp_tree_report_fqn(rep, u, j));
    }
    printf("]%s\n", u + 1 < nu ? "," : "");
  }
  if (nu > 0) printf("}\n");
  for (int i = 0; i < m->nmodules; i++) {
    if (plan->module_unit[i] == PLANNING_PLAN_NOT_UNIT) continue;
    char key[512];
    snprintf(key, sizeof key, "%s[%s]", m->modules[i]->fqn,
             m->modules[i]->class_name);
    int found = 0;
    for (int u = 0; u < nu && !found; u++)
      found = strcmp(tpdp_tree_report_unit(rep, u), key) == 0;
    if (!found)
      printf("note: unit %s manages no parameter (no suffix, no entry)\n", key);
  }

  /* Parameter table. */
  printf("\nparameters (placements over mesh dims [");
  for (int d = 0; d < plan->mesh_ndim; d++)
    printf("%s%s", d ? ", " : "", plan->mesh_names[d]);
  printf("]; local shape per tp rank):\n");
  int wf = 3, ws = 5, wst = 5, wp = 10, wl = 5;
  char buf[256];
  for (int k = 0; k < plan->nparams; k++) {
    const planning_plan_param *pp = &plan->params[k];
    int n = (int)strlen(pp->param->fqn);
    if (n > wf) wf = n;
    shape_str(pp->param->ndim, pp->param->shape, buf, sizeof buf);
    if ((int)strlen(buf) > ws) ws = (int)strlen(buf);
    if ((int)strlen(style_name(pp->style)) > wst)
      wst = (int)strlen(style_name(pp->style));
    placements_str(plan, pp, buf, sizeof buf);
    if ((int)strlen(buf) > wp) wp = (int)strlen(buf);
    for (int64_t t = 0; t < plan->tp_size; t++) {
      shape_str(pp->param->ndim, &pp->local_shapes[t * pp->param->ndim], buf,
                sizeof buf);
      if ((int)strlen(buf) > wl) wl = (int)strlen(buf);
    }
  }
  printf("  %-*s  %-5s  %-*s  %-*s  %-*s", wf, "fqn", "dtype", ws, "shape", wst,
         "style", wp, "placements");
  for (int64_t t = 0; t < plan->tp_size; t++) {
    snprintf(buf, sizeof buf, plan->tp_dim >= 0 ? "tp=%lld" : "local",
             (long long)t);
    printf("  %-*s", t + 1 < plan->tp_size ? wl : 0, buf);
  }
  printf("\n");
  for (int k = 0; k < plan->nparams; k++) {
    const planning_plan_param *pp = &plan->params[k];
    printf("  %-*s  %-5s  ", wf, pp->param->fqn,
           tpdp_dtype_name(pp->param->dtype));
    shape_str(pp->param->ndim, pp->param->shape, buf, sizeof buf);
    printf("%-*s  %-*s  ", ws, buf, wst, style_name(pp->style));
    placements_str(plan, pp, buf, sizeof buf);
    printf("%-*s", wp, buf);
    for (int64_t t = 0; t < plan->tp_size; t++) {
      shape_str(pp->param->ndim, &pp->local_shapes[t * pp->param->ndim], buf,
                sizeof buf);
      printf("  %-*s", t + 1 < plan->tp_size || pp->nshared ? wl : 0, buf);
    }
    for (int j = 0; j < pp->nshared; j++)
      printf("%s%s", j ? ", " : "  (also ", pp->shared[j]->fqn);
    printf("%s\n", pp->nshared ? ")" : "");
  }

  printf("\nbytes per rank (local parameters, shared ones once):\n");
  for (int64_t t = 0; t < plan->tp_size; t++) {
    ranks_str(plan, t, buf, sizeof buf);
    if (plan->tp_dim >= 0)
      printf("  tp=%lld (ranks %s): %zu bytes\n", (long long)t, buf,
             plan->tp_bytes[t]);
    else
      printf("  every rank: %zu bytes\n", plan->tp_bytes[t]);
  }

  printf("\nDP buckets per rank (launch order; limits");
  for (int64_t k = 0; k < plan->nlimits; k++)
    printf("%s%zu", k ? "," : " ", plan->limits[k]);
  printf(" bytes):\n");
  for (int64_t t = 0; t < plan->tp_size; t++) {
    const tpdp_bucket_assignment *a = &plan->buckets[t];
    ranks_str(plan, t, buf, sizeof buf);
    if (plan->tp_dim >= 0)
      printf("  tp=%lld (ranks %s): %lld bucket%s\n", (long long)t, buf,
             (long long)a->nbuckets, a->nbuckets == 1 ? "" : "s");
    else
      printf("  every rank: %lld bucket%s\n", (long long)a->nbuckets,
             a->nbuckets == 1 ? "" : "s");
    for (int64_t b = 0; b < a->nbuckets; b++) {
      const planning_model_param *first =
          plan->params[a->indices[a->offsets[b]]].param;
      printf("    bucket %lld: %s, %zu bytes (limit %zu):", (long long)b,
             tpdp_dtype_name(first->dtype), a->bytes[b], a->limits[b]);
      for (int64_t k = a->offsets[b]; k < a->offsets[b + 1]; k++)
        printf(" %s", plan->params[a->indices[k]].param->fqn);
      printf("\n");
    }
  }
}

/* ----------------------------------------------------------- JSON */

static cJSON *shape_json(int ndim, const int64_t *shape) {
  cJSON *a = cJSON_CreateArray();
  for (int d = 0; a != NULL && d < ndim; d++)
    cJSON_AddItemToArray(a, cJSON_CreateNumber((double)shape[d]));
  return a;
}

/* One entry of "ranks": its coordinates, tp rank, bytes and buckets. */
static cJSON *rank_json(const planning_plan *plan, int64_t r) {
  int64_t t = planning_plan_tp_rank(plan, r);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "rank", (double)r);
  cJSON *coords = cJSON_AddObjectToObject(o, "coords");
  int64_t rest = r;
  int64_t c[TPDP_MAX_DIMS];
  for (int d = plan->mesh_ndim - 1; d >= 0; d--) {
    c[d] = rest % plan->mesh_sizes[d];
    rest /= plan->mesh_sizes[d];
  }
  for (int d = 0; d < plan->mesh_ndim; d++)
    cJSON_AddNumberToObject(coords, plan->mesh_names[d], (double)c[d]);
  cJSON_AddNumberToObject(o, "tp_rank", (double)t);
  cJSON_AddNumberToObject(o, "bytes", (double)plan->tp_bytes[t]);
  cJSON *bs = cJSON_AddArrayToObject(o, "buckets");
  const tpdp_bucket_assignment *a = &plan->buckets[t];
  for (int64_t b = 0; b < a->nbuckets; b++) {
    cJSON *bo = cJSON_CreateObject();
    cJSON_AddItemToArray(bs, bo);
    cJSON *names = cJSON_AddArrayToObject(bo, "params");
    for (int64_t k = a->offsets[b]; k < a->offsets[b + 1]; k++)
      cJSON_AddItemToArray(
          names, cJSON_CreateString(plan->params[a->indices[k]].param->fqn));
    cJSON_AddStringToObject(
        bo, "dtype",
        tpdp_dtype_name(plan->params[a->indices[a->offsets[b]]].param->dtype));
    cJSON_AddNumberToObject(bo, "bytes", (double)a->bytes[b]);
    cJSON_AddNumberToObject(bo, "limit", (double)a->limits[b]);
  }
  return o;
}

static int print_json(const planning_plan *plan) {
  const planning_model_desc *m = plan->model;
  const tpdp_tree_report *rep = plan->report;
  cJSON *root = cJSON_CreateObject();
  if (root == NULL) goto oom;

  cJSON *mesh = cJSON_AddObjectToObject(root, "mesh");
  cJSON *dims = cJSON_AddArrayToObject(mesh, "dims");
  cJSON *sizes = cJSON_AddArrayToObject(mesh, "sizes");
  for (int d = 0; d < plan->mesh_ndim; d++) {
    cJSON_AddItemToArray(dims, cJSON_CreateString(plan->mesh_names[d]));
    cJSON_AddItemToArray(sizes,
                         cJSON_CreateNumber((double)plan->mesh_sizes[d]));
  }
  cJSON_AddNumberToObject(mesh, "world", (double)plan->world);
  cJSON_AddNumberToObject(mesh, "tp_size", (double)plan->tp_size);

  cJSON_AddStringToObject(root, "tree", tpdp_tree_report_text(rep));
  cJSON *managed = cJSON_Parse(tpdp_tree_report_json(rep));
  if (managed == NULL) goto oom;
  cJSON_AddItemToObject(root, "managed", managed);

  cJSON *units = cJSON_AddArrayToObject(root, "units");
  for (int i = 0; i < m->nmodules; i++) {
    if (plan->module_unit[i] == PLANNING_PLAN_NOT_UNIT) continue;
    cJSON *u = cJSON_CreateObject();
    cJSON_AddItemToArray(units, u);
    cJSON_AddStringToObject(u, "module", m->modules[i]->fqn);
    cJSON_AddStringToObject(u, "class", m->modules[i]->class_name);
    cJSON_AddStringToObject(
        u, "kind", plan->module_unit[i] == PLANNING_PLAN_DP_UNIT ? "DP" : "TP");
    if (plan->module_style[i] >= 0)
      cJSON_AddStringToObject(
          u, "style", tpdp_tp_style_name((tpdp_tp_style)plan->module_style[i]));
    else
      cJSON_AddNullToObject(u, "style");
  }

  cJSON *params = cJSON_AddArrayToObject(root, "params");
  for (int k = 0; k < plan->nparams; k++) {
    const planning_plan_param *pp = &plan->params[k];
    cJSON *p = cJSON_CreateObject();
    cJSON_AddItemToArray(params, p);
    cJSON_AddStringToObject(p, "fqn", pp->param->fqn);
    cJSON *sh = cJSON_AddArrayToObject(p, "shared");
    for (int j = 0; j < pp->nshared; j++)
      cJSON_AddItemToArray(sh, cJSON_CreateString(pp->shared[j]->fqn));
    cJSON_AddStringToObject(p, "dtype", tpdp_dtype_name(pp->param->dtype));
    cJSON_AddItemToObject(p, "shape",
                          shape_json(pp->param->ndim, pp->param->shape));
    if (pp->style >= 0) {
      cJSON_AddStringToObject(p, "style",
                              tpdp_tp_style_name((tpdp_tp_style)pp->style));
      cJSON_AddStringToObject(p, "tp_module", pp->tp_module->fqn);
    } else {
      cJSON_AddNullToObject(p, "style");
      cJSON_AddNullToObject(p, "tp_module");
    }
    cJSON *pl = cJSON_AddArrayToObject(p, "placements");
    for (int d = 0; d < plan->mesh_ndim; d++) {
      char one[24];
      tpdp_placement_format(pp->placements[d], one, sizeof one);
      cJSON_AddItemToArray(pl, cJSON_CreateString(one));
    }
    cJSON *ls = cJSON_AddArrayToObject(p, "local_shapes");
    cJSON *lb = cJSON_AddArrayToObject(p, "local_bytes");
    for (int64_t t = 0; t < plan->tp_size; t++) {
      cJSON_AddItemToArray(
          ls,
          shape_json(pp->param->ndim, &pp->local_shapes[t * pp->param->ndim]));
      cJSON_AddItemToArray(lb, cJSON_CreateNumber((double)pp->local_bytes[t]));
    }
  }

  cJSON *lim = cJSON_AddArrayToObject(root, "limits");
  for (int64_t k = 0; k < plan->nlimits; k++)
    cJSON_AddItemToArray(lim, cJSON_CreateNumber((double)plan->limits[k]));

  /* "ranks" last, one entry at a time: a mesh of up to 2^20 ranks would
   * not fit one cJSON tree in memory. */
  char *text = cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  root = NULL;
  if (text == NULL) goto oom;
  text[strlen(text) - 1] = '\0'; /* drop the closing '}' */
  printf("%s,\"ranks\":[", text);
  free(text);
  for (int64_t r = 0; r < plan->world; r++) {
    cJSON *o = rank_json(plan, r);
    char *one = o != NULL ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (one == NULL) goto oom;
    printf("%s%s", r ? "," : "", one);
    free(one);
  }
  printf("]}\n");
  return 0;
oom:
  cJSON_Delete(root);
  fprintf(stderr, "tpdp plan: out of memory\n");
  return 1;
}

static int cmd_plan(int argc, char **argv) {
  const char *model_path = NULL, *plan_path = NULL, *limits_s = NULL;
  int as_json = 0;
  const cli_option opts[] = {{"--model", &model_path, 1},
                             {"--plan", &plan_path, 1},
                             {"--limits-bytes", &limits_s, 0}};
  int urc = cli_options("plan", argc, argv, opts,
                        (int)(sizeof opts / sizeof opts[0]), &as_json);
  if (urc != 0) return urc;
  size_t *limits = NULL;
  int64_t nlimits = 0;
  if (limits_s != NULL) {
    urc = cli_parse_limits("plan", limits_s, &limits, &nlimits);
    if (urc != 0) return urc;
  }

  int rc = 1;
  planning_model_desc *m = NULL;
  planning_plan *plan = NULL;
  if (planning_model_desc_load(model_path, &m) != TPDP_SUCCESS ||
      planning_plan_load(m, plan_path, limits, nlimits, &plan) !=
          TPDP_SUCCESS) {
    fprintf(stderr, "tpdp plan: %s\n", planning_last_error());
    goto done;
  }
  if (as_json) {
    rc = print_json(plan);
  } else {
    print_text(model_path, plan);
    rc = 0;
  }
done:
  planning_plan_destroy(plan);
  planning_model_desc_destroy(m);
  free(limits);
  return rc;
}

const cli_command cli_cmd_plan = {
    "plan", "show how a model will be sharded (tree, params, buckets)",
    cmd_plan, cmd_plan_usage};
