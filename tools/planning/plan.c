// SPDX-License-Identifier: BSD-3-Clause
/* Sharding plans for `tpdp plan` (see plan.h and docs/model-format.md). */
#include "tools/planning/plan.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "tools/planning/error.h"
#include "tools/planning/json.h"
#include "tpdp/comm.h"
#include "tpdp/tp.h"

/* The parsed plan file. Strings point into the cJSON tree. */
typedef struct {
  int ntp;
  const char **patterns;
  tpdp_tp_style *styles;
  int nunits;
  const char **units;
} plan_input;

void planning_plan_destroy(planning_plan *plan) {
  if (plan == NULL) return;
  for (int d = 0; d < plan->mesh_ndim; d++) free((void *)plan->mesh_names[d]);
  free(plan->module_unit);
  free(plan->module_style);
  tpdp_tree_report_destroy(plan->report);
  tpdp_module_destroy(plan->tree);
  for (int i = 0; plan->params != NULL && i < plan->nparams; i++) {
    free(plan->params[i].shared);
    free(plan->params[i].local_shapes);
    free(plan->params[i].local_bytes);
  }
  free(plan->params);
  free(plan->limits);
  free(plan->tp_bytes);
  if (plan->buckets != NULL)
    for (int64_t t = 0; t < plan->tp_size; t++)
      tpdp_bucket_assignment_free(&plan->buckets[t]);
  free(plan->buckets);
  free(plan);
}

int64_t planning_plan_tp_rank(const planning_plan *plan, int64_t rank) {
  if (plan == NULL || plan->tp_dim < 0) return 0;
  int64_t inner = 1;
  for (int d = plan->tp_dim + 1; d < plan->mesh_ndim; d++)
    inner *= plan->mesh_sizes[d];
  return (rank / inner) % plan->tp_size;
}

void planning_plan_placement_format(tpdp_placement p, char *buf, size_t len) {
  if (buf == NULL || len == 0) return;
  switch (p.kind) {
    case TPDP_PLACEMENT_REPLICATE:
      snprintf(buf, len, "R");
      break;
    case TPDP_PLACEMENT_SHARD:
      snprintf(buf, len, "S(%d)", p.dim);
      break;
    default:
      snprintf(buf, len, "P(%s)", tpdp_reduce_op_name(p.op));
      break;
  }
}

/* ------------------------------------------------------- plan file */

static tpdp_status parse_mesh(const cJSON *mesh, planning_plan *plan) {
  if (!cJSON_IsObject(mesh))
    return planning_error(
        TPDP_ERR_PARSE,
        "\"mesh\" must be an object of dim name -> size, e.g. "
        "{\"dp\": 2, \"tp\": 2}");
  int n = cJSON_GetArraySize(mesh);
  if (n < 1)
    return planning_error(TPDP_ERR_PARSE, "\"mesh\" needs at least one dim");
  if (n > TPDP_MAX_DIMS)
    return planning_error(TPDP_ERR_TOO_MANY_DIMS,
                          "\"mesh\" has %d dims, at most %d allowed", n,
                          TPDP_MAX_DIMS);
  plan->world = 1;
  plan->tp_dim = -1;
  plan->tp_size = 1;
  int d = 0;
  for (const cJSON *it = mesh->child; it != NULL; it = it->next, d++) {
    const char *name = it->string;
    if (name == NULL || name[0] == '\0')
      return planning_error(TPDP_ERR_EMPTY_NAME,
                            "mesh: a dim has an empty name");
    for (int e = 0; e < d; e++)
      if (strcmp(plan->mesh_names[e], name) == 0)
        return planning_error(TPDP_ERR_DUPLICATE,
                              "mesh: dim \"%s\" listed twice", name);
    char what[300];
    snprintf(what, sizeof what, "mesh.%s", name);
    int64_t size = 0;
    PLANNING_CHECK(planning_json_int(it, what, 1, PLANNING_PLAN_MAX_RANKS,
                                     TPDP_ERR_BAD_DIM_SIZE, &size));
    char *copy = core_strdup(name);
    if (copy == NULL)
      return planning_error(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
    plan->mesh_names[d] = copy;
    plan->mesh_ndim = d + 1;
    plan->mesh_sizes[d] = size;
    /* Both factors are at most 2^20: no overflow. */
    plan->world *= size;
    if (plan->world > PLANNING_PLAN_MAX_RANKS)
      return planning_error(TPDP_ERR_BAD_DIM_SIZE,
                            "mesh: %lld ranks up to dim \"%s\" is too large "
                            "(max %d)",
                            (long long)plan->world, name,
                            PLANNING_PLAN_MAX_RANKS);
    if (strcmp(name, "tp") == 0) {
      plan->tp_dim = d;
      plan->tp_size = plan->mesh_sizes[d];
    }
  }
  return TPDP_SUCCESS;
}

static tpdp_status parse_input(const cJSON *root, planning_plan *plan,
                               plan_input *in) {
  if (!cJSON_IsObject(root))
    return planning_error(
        TPDP_ERR_PARSE,
        "a plan must be a JSON object with \"mesh\", \"units\", "
        "\"tp\"");
  for (const cJSON *it = root->child; it != NULL; it = it->next)
    if (strcmp(it->string, "mesh") != 0 && strcmp(it->string, "units") != 0 &&
        strcmp(it->string, "tp") != 0)
      return planning_error(
          TPDP_ERR_PARSE,
          "unknown key \"%s\" (a plan has \"mesh\", \"units\", "
          "\"tp\")",
          it->string);
  const cJSON *mesh = cJSON_GetObjectItemCaseSensitive(root, "mesh");
  if (mesh == NULL)
    return planning_error(
        TPDP_ERR_PARSE,
        "missing \"mesh\" (e.g. \"mesh\": {\"dp\": 2, \"tp\": 2})");
  PLANNING_CHECK(parse_mesh(mesh, plan));

  const cJSON *units = cJSON_GetObjectItemCaseSensitive(root, "units");
  if (units != NULL) {
    if (!cJSON_IsArray(units))
      return planning_error(
          TPDP_ERR_PARSE,
          "\"units\" must be an array of module FQNs (\"\" is the root)");
    int n = cJSON_GetArraySize(units);
    in->units = calloc((size_t)n + 1, sizeof *in->units);
    if (in->units == NULL)
      return planning_error(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
    int i = 0;
    for (const cJSON *it = units->child; it != NULL; it = it->next, i++) {
      if (!cJSON_IsString(it))
        return planning_error(TPDP_ERR_PARSE,
                              "units[%d] must be a string (a module FQN)", i);
      for (int j = 0; j < i; j++)
        if (strcmp(in->units[j], it->valuestring) == 0)
          return planning_error(TPDP_ERR_DUPLICATE,
                                "units: \"%s\" listed twice", it->valuestring);
      in->units[i] = it->valuestring;
      in->nunits = i + 1;
    }
  }

  const cJSON *tp = cJSON_GetObjectItemCaseSensitive(root, "tp");
  if (tp != NULL) {
    if (!cJSON_IsObject(tp))
      return planning_error(TPDP_ERR_PARSE,
                            "\"tp\" must be an object of FQN pattern -> style");
    int n = cJSON_GetArraySize(tp);
    in->patterns = calloc((size_t)n + 1, sizeof *in->patterns);
    in->styles = calloc((size_t)n + 1, sizeof *in->styles);
    if (in->patterns == NULL || in->styles == NULL)
      return planning_error(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
    int i = 0;
    for (const cJSON *it = tp->child; it != NULL; it = it->next, i++) {
      if (!cJSON_IsString(it) ||
          tpdp_tp_style_parse(it->valuestring, &in->styles[i]) != TPDP_SUCCESS)
        return planning_error(
            TPDP_ERR_PARSE,
            "tp.\"%s\": style must be one of \"colwise\", "
            "\"rowwise\", \"sequence_parallel\", \"replicate\"",
            it->string);
      in->patterns[i] = it->string;
      in->ntp = i + 1;
    }
    if (in->ntp > 0 && plan->tp_dim < 0)
      return planning_error(
          TPDP_ERR_NOT_FOUND,
          "\"tp\" has entries but the mesh has no dim named \"tp\"");
  }
  return TPDP_SUCCESS;
}

/* ------------------------------------------------- units and styles */

static tpdp_status mark_units(const planning_model_desc *model,
                              const plan_input *in, planning_plan *plan) {
  /* All unknown names in one message. */
  char bad[900] = "";
  size_t used = 0;
  int nbad = 0;
  for (int i = 0; i < in->nunits; i++) {
    const planning_model_module *m =
        planning_model_desc_find_module(model, in->units[i]);
    if (m != NULL) {
      plan->module_unit[m->index] = PLANNING_PLAN_DP_UNIT;
      continue;
    }
    nbad++;
    if (used < sizeof bad) {
      int w = snprintf(bad + used, sizeof bad - used, "%s\"%s\"",
                       nbad > 1 ? ", " : "", in->units[i]);
      if (w > 0) used += (size_t)w;
    }
  }
  if (nbad > 0)
    return planning_error(TPDP_ERR_NOT_FOUND, "units: no module named %s%s",
                          bad, used >= sizeof bad ? "..." : "");
  return TPDP_SUCCESS;
}

/* As tpdp_parallelize: each module takes the first pattern matching its
 * FQN; a pattern that wins no module is an error. */
static tpdp_status match_styles(const planning_model_desc *model,
                                const plan_input *in, planning_plan *plan) {
  int *hits = calloc((size_t)in->ntp + 1, sizeof *hits);
  if (hits == NULL)
    return planning_error(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
  for (int i = 0; i < model->nmodules; i++) {
    const planning_model_module *m = model->modules[i];
    for (int k = 0; k < in->ntp; k++) {
      if (!tpdp_fqn_match(in->patterns[k], m->fqn)) continue;
      hits[k]++;
      plan->module_style[m->index] = (int)in->styles[k];
      if (plan->module_unit[m->index] == PLANNING_PLAN_NOT_UNIT)
        plan->module_unit[m->index] = PLANNING_PLAN_TP_UNIT;
      break;
    }
  }
  tpdp_status st = TPDP_SUCCESS;
  for (int k = 0; k < in->ntp && st == TPDP_SUCCESS; k++) {
    if (hits[k] > 0) continue;
    int any = 0;
    for (int i = 0; i < model->nmodules && !any; i++)
      any = tpdp_fqn_match(in->patterns[k], model->modules[i]->fqn);
    st = planning_error(
        TPDP_ERR_NOT_FOUND,
        any ? "tp: pattern \"%s\" matches only modules an earlier "
              "pattern already claims"
            : "tp: pattern \"%s\" matches no module",
        in->patterns[k]);
  }
  free(hits);
  return st;
}

/* Placement on the tp dim of parameter `p` of module `m` under `style`
 * (the library's rule, tpdp_tp_style_placement). */
static tpdp_status style_placement(const planning_model_module *m,
                                   const planning_model_param *p, int style,
                                   tpdp_placement *out) {
  int64_t out_size = -1;
  for (int i = 0; i < m->nparams; i++)
    if (strcmp(m->params[i].name, "weight") == 0 && m->params[i].ndim == 2)
      out_size = m->params[i].shape[0];
  tpdp_status st =
      tpdp_tp_style_placement((tpdp_tp_style)style, p->fqn, p->name, p->ndim,
                              p->ndim ? p->shape[0] : 0, out_size, out);
  if (st != TPDP_SUCCESS) return planning_error_tpdp(st);
  return TPDP_SUCCESS;
}

/* ------------------------------------------------------ module tree */

static tpdp_status build_tree(const planning_model_desc *model,
                              planning_plan *plan) {
  tpdp_status st = TPDP_SUCCESS;
  tpdp_module **mods = calloc((size_t)model->nmodules, sizeof *mods);
  tpdp_param **params = calloc((size_t)model->nparams + 1, sizeof *params);
  if (mods == NULL || params == NULL) {
    st = planning_error(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
    goto done;
  }
  for (int i = 0; i < model->nparams; i++) {
    const planning_model_param *p = model->params[i];
    if (p->canonical != p) continue;
    tpdp_tensor t;
    tpdp_device cpu = {TPDP_DEVICE_CPU, 0};
    PLANNING_CHECK_GOTO(planning_error_tpdp(tpdp_tensor_init(
                            &t, NULL, p->dtype, cpu, p->ndim, p->shape)),
                        st, done);
    PLANNING_CHECK_GOTO(planning_error_tpdp(tpdp_param_create(&t, &params[i])),
                        st, done);
  }
  for (int i = 0; i < model->nmodules; i++) {
    const planning_model_module *m = model->modules[i];
    tpdp_module *tm = NULL;
    PLANNING_CHECK_GOTO(
        planning_error_tpdp(tpdp_module_create(m->class_name, &tm)), st, done);
    if (m->parent == NULL) {
      plan->tree = tm;
    } else {
      st = planning_error_tpdp(
          tpdp_module_add_child(mods[m->parent->index], m->name, tm));
      if (st != TPDP_SUCCESS) {
        tpdp_module_destroy(tm);
        goto done;
      }
    }
    mods[i] = tm;
    for (int j = 0; j < m->nparams; j++)
      PLANNING_CHECK_GOTO(
          planning_error_tpdp(tpdp_module_add_param(
              tm, m->params[j].name, params[m->params[j].canonical->index])),
          st, done);
    if (plan->module_unit[i] == PLANNING_PLAN_DP_UNIT) {
      PLANNING_CHECK_GOTO(
          planning_error_tpdp(tpdp_module_set_unit(tm, "DP", " FULLY SHARDED")),
          st, done);
    } else if (plan->module_unit[i] == PLANNING_PLAN_TP_UNIT) {
      char suffix[48];
      snprintf(suffix, sizeof suffix, " TP %s",
               tpdp_tp_style_name((tpdp_tp_style)plan->module_style[i]));
      for (char *s = suffix; *s; s++)
        if (*s >= 'a' && *s <= 'z') *s = (char)(*s - 'a' + 'A');
      PLANNING_CHECK_GOTO(
          planning_error_tpdp(tpdp_module_set_unit(tm, "TP", suffix)), st,
          done);
    }
  }
  PLANNING_CHECK_GOTO(planning_error_tpdp(tpdp_tree_report_create(
                          plan->tree, NULL, 0, &plan->report)),
                      st, done);
done:
  if (params != NULL)
    for (int i = 0; i < model->nparams; i++) tpdp_param_release(params[i]);
  free(params);
  free(mods);
  return st;
}

/* ------------------------------------------------- params, buckets */

static tpdp_status place_params(const planning_model_desc *model,
                                planning_plan *plan) {
  tpdp_status st = TPDP_SUCCESS;
  int *slot = calloc((size_t)model->nparams + 1, sizeof *slot);
  if (slot == NULL)
    return planning_error(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
  int n = 0;
  for (int i = 0; i < model->nparams; i++)
    if (model->params[i]->canonical == model->params[i]) n++;
  plan->params = calloc((size_t)n + 1, sizeof *plan->params);
  if (plan->params == NULL) {
    st = planning_error(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
    goto done;
  }
  plan->nparams = n;
  n = 0;
  for (int i = 0; i < model->nparams; i++) {
    const planning_model_param *p = model->params[i];
    if (p->canonical == p) {
      planning_plan_param *pp = &plan->params[n];
      pp->param = p;
      pp->style = -1;
      for (int d = 0; d < plan->mesh_ndim; d++)
        pp->placements[d] = tpdp_replicate();
      slot[i] = n++;
      continue;
    }
    planning_plan_param *pp = &plan->params[slot[p->canonical->index]];
    const planning_model_param **grown =
        realloc(pp->shared, sizeof *grown * (size_t)(pp->nshared + 1));
    if (grown == NULL) {
      st = planning_error(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
      goto done;
    }
    grown[pp->nshared++] = p;
    pp->shared = grown;
  }
  /* TP styles, per registration (a shared parameter can be reached from
   * several modules). */
  for (int i = 0; i < model->nmodules; i++) {
    const planning_model_module *m = model->modules[i];
    int style = plan->module_style[i];
    if (style < 0) continue;
    for (int j = 0; j < m->nparams; j++) {
      const planning_model_param *p = &m->params[j];
      planning_plan_param *pp = &plan->params[slot[p->canonical->index]];
      if (pp->tp_module != NULL) {
        st = planning_error(
            TPDP_ERR_ALREADY,
            "parameter '%s' is shared with '%s' and sharded by both "
            "'%s' and '%s'",
            p->fqn, pp->param->fqn, pp->tp_module->fqn, m->fqn);
        goto done;
      }
      tpdp_placement pl;
      PLANNING_CHECK_GOTO(style_placement(m, p, style, &pl), st, done);
      pp->tp_module = m;
      pp->style = style;
      pp->placements[plan->tp_dim] = pl;
    }
  }
  /* Local shapes per tp rank, through DTensor specs on a layout-only mesh
   * (the same arithmetic tp/ uses at run time). */
  tpdp_mesh *mesh = NULL;
  PLANNING_CHECK_GOTO(
      planning_error_tpdp(tpdp_mesh_create(
          NULL, plan->mesh_ndim, plan->mesh_sizes, plan->mesh_names, &mesh)),
      st, done);
  for (int k = 0; k < plan->nparams && st == TPDP_SUCCESS; k++) {
    planning_plan_param *pp = &plan->params[k];
    const planning_model_param *p = pp->param;
    pp->local_shapes =
        calloc((size_t)plan->tp_size * (size_t)(p->ndim ? p->ndim : 1),
               sizeof(int64_t));
    pp->local_bytes = calloc((size_t)plan->tp_size, sizeof(size_t));
    if (pp->local_shapes == NULL || pp->local_bytes == NULL) {
      st = planning_error(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
      break;
    }
    tpdp_spec *spec = NULL;
    tpdp_device cpu = {TPDP_DEVICE_CPU, 0};
    st = tpdp_spec_create(mesh, pp->placements, plan->mesh_ndim, p->ndim,
                          p->shape, p->dtype, cpu, &spec);
    for (int64_t t = 0; t < plan->tp_size && st == TPDP_SUCCESS; t++) {
      int64_t coords[TPDP_MAX_DIMS] = {0};
      if (plan->tp_dim >= 0) coords[plan->tp_dim] = t;
      int rank = 0;
      int64_t shape[TPDP_MAX_DIMS];
      st = tpdp_mesh_rank_of(mesh, coords, &rank);
      if (st == TPDP_SUCCESS)
        st = tpdp_spec_local_shape(spec, rank, shape, NULL);
      if (st == TPDP_SUCCESS) {
        memcpy(&pp->local_shapes[t * p->ndim], shape,
               sizeof(int64_t) * (size_t)p->ndim);
        size_t numel = 1;
        for (int d = 0; d < p->ndim; d++) numel *= (size_t)shape[d];
        pp->local_bytes[t] = numel * tpdp_dtype_size(p->dtype);
      }
    }
    tpdp_spec_destroy(spec);
    st = planning_error_tpdp(st);
  }
  (void)tpdp_mesh_destroy(mesh); /* layout-only: nothing can fail */
done:
  free(slot);
  return st;
}

static tpdp_status assign_buckets(planning_plan *plan) {
  tpdp_status st = TPDP_SUCCESS;
  plan->tp_bytes = calloc((size_t)plan->tp_size, sizeof *plan->tp_bytes);
  plan->buckets = calloc((size_t)plan->tp_size, sizeof *plan->buckets);
  tpdp_tensor *ts = calloc((size_t)plan->nparams + 1, sizeof *ts);
  if (plan->tp_bytes == NULL || plan->buckets == NULL || ts == NULL) {
    free(ts);
    return planning_error(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
  }
  for (int64_t t = 0; t < plan->tp_size && st == TPDP_SUCCESS; t++) {
    tpdp_device cpu = {TPDP_DEVICE_CPU, 0};
    for (int k = 0; k < plan->nparams && st == TPDP_SUCCESS; k++) {
      const planning_plan_param *pp = &plan->params[k];
      /* Each parameter's bytes fit in int64 (model_json.c); their sum, the
       * buckets' sizes, must too. */
      if (__builtin_add_overflow(plan->tp_bytes[t], pp->local_bytes[t],
                                 &plan->tp_bytes[t]) ||
          plan->tp_bytes[t] > (size_t)INT64_MAX) {
        free(ts);
        return planning_error(TPDP_ERR_INVALID_ARGUMENT,
                              "the local parameters of tp rank %lld overflow: "
                              "their byte size is above INT64_MAX at '%s'",
                              (long long)t, pp->param->fqn);
      }
      st =
          tpdp_tensor_init(&ts[k], NULL, pp->param->dtype, cpu, pp->param->ndim,
                           &pp->local_shapes[t * pp->param->ndim]);
    }
    if (st != TPDP_SUCCESS || plan->nparams == 0) continue;
    /* The reducer's initial buckets: DDP's assignment in registration
     * order, launched in reverse. */
    st = tpdp_bucket_assign(ts, plan->nparams, plan->limits, plan->nlimits,
                            NULL, &plan->buckets[t]);
    if (st == TPDP_SUCCESS)
      st = tpdp_bucket_assignment_reverse(&plan->buckets[t]);
  }
  free(ts);
  return planning_error_tpdp(st);
}

/* ------------------------------------------------------------ entry */

static tpdp_status compute(const planning_model_desc *model,
                           const char *plan_json, const size_t *limits,
                           int64_t nlimits, planning_plan **out) {
  tpdp_status st = TPDP_SUCCESS;
  plan_input in = {0, NULL, NULL, 0, NULL};
  planning_plan *plan = calloc(1, sizeof *plan);
  cJSON *root = NULL;
  if (plan == NULL)
    return planning_error(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
  plan->model = model;
  if (limits == NULL || nlimits == 0) {
    static const size_t dflt[2] = {TPDP_BUCKET_FIRST_BYTES,
                                   TPDP_BUCKET_CAP_BYTES};
    limits = dflt;
    nlimits = 2;
  }
  for (int64_t k = 0; k < nlimits; k++)
    if (limits[k] == 0) {
      st = planning_error(TPDP_ERR_INVALID_ARGUMENT,
                          "bucket limit %lld is 0 (limits must be > 0)",
                          (long long)k);
      goto fail;
    }
  plan->limits = malloc(sizeof *limits * (size_t)nlimits);
  if (plan->limits == NULL) {
    st = planning_error(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
    goto fail;
  }
  memcpy(plan->limits, limits, sizeof *limits * (size_t)nlimits);
  plan->nlimits = nlimits;

  PLANNING_CHECK_GOTO(planning_json_parse(plan_json, &root), st, fail);
  PLANNING_CHECK_GOTO(parse_input(root, plan, &in), st, fail);
  plan->module_unit = calloc((size_t)model->nmodules, sizeof(int));
  plan->module_style = malloc(sizeof(int) * (size_t)model->nmodules);
  if (plan->module_unit == NULL || plan->module_style == NULL) {
    st = planning_error(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
    goto fail;
  }
  for (int i = 0; i < model->nmodules; i++) plan->module_style[i] = -1;
  PLANNING_CHECK_GOTO(mark_units(model, &in, plan), st, fail);
  PLANNING_CHECK_GOTO(match_styles(model, &in, plan), st, fail);
  PLANNING_CHECK_GOTO(place_params(model, plan), st, fail);
  PLANNING_CHECK_GOTO(build_tree(model, plan), st, fail);
  PLANNING_CHECK_GOTO(assign_buckets(plan), st, fail);
  goto done;
fail:
  planning_plan_destroy(plan);
  plan = NULL;
done:
  free(in.patterns);
  free(in.styles);
  free(in.units);
  cJSON_Delete(root);
  *out = plan;
  return st;
}

tpdp_status planning_plan_compute(const planning_model_desc *model,
                                  const char *plan_json, const size_t *limits,
                                  int64_t nlimits, planning_plan **out) {
  PLANNING_ENTRY;
  PLANNING_CHECK_PTR(out);
  *out = NULL;
  PLANNING_CHECK_PTR(model);
  PLANNING_CHECK_PTR(plan_json);
  return compute(model, plan_json, limits, nlimits, out);
}

tpdp_status planning_plan_load(const planning_model_desc *model,
                               const char *path, const size_t *limits,
                               int64_t nlimits, planning_plan **out) {
  PLANNING_ENTRY;
  PLANNING_CHECK_PTR(out);
  *out = NULL;
  PLANNING_CHECK_PTR(model);
  PLANNING_CHECK_PTR(path);
  char *text = NULL;
  PLANNING_CHECK(planning_read_file(path, &text));
  tpdp_status st = compute(model, text, limits, nlimits, out);
  free(text);
  return planning_error_in(path, st);
}
