/* TP+DP composition (PyTorch's TP-inside-DDP): localize DTensor parameters for DP and
 * reconstruct them around forward with hooks on the root module.
 *
 * Unlike the seed, which walks named_parameters() and rebuilds parameter
 * objects on every call, the DTensor parameters are resolved once at
 * transform time into flat arrays (parameter, spec, FQN), so a hook call is
 * one pass over those arrays: no traversal, allocation or string work. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "tpdp/dtensor.h"
#include "tpdp/module.h"

#define DP_TRANSFORM_KEY "tpdp.pre_dp_transform"

typedef struct {
  int n;
  tpdp_param **params;     /* [n] */
  const tpdp_spec **specs; /* [n], captured at transform time */
  const char **fqns;       /* [n], into one pool */
  char *pool;
  tpdp_hook_handle pre, post;
} dp_transform;

static void transform_free(void *vp) {
  dp_transform *t = vp;
  if (t == NULL) return;
  free(t->params);
  free(t->specs);
  free(t->fqns);
  free(t->pool);
  free(t);
}

/* "fqn[Class]" (root "[Class]") for messages. */
static void label(const tpdp_module *m, char *buf, size_t len) {
  size_t n = tpdp_module_fqn(m, buf, len);
  if (n >= len) n = strlen(buf);
  snprintf(buf + n, len - n, "[%s]", tpdp_module_class_name(m));
}

/* Localize (flatten): the local view is stored in the parameter in both
 * forms and the spec stays with it, stashed, so splitting a DTensor into
 * (local, spec) is exactly tpdp_dtensor_flatten's copy of what is already
 * there: only the form changes. */
static inline void localize_one(tpdp_param *p) {
  tpdp_param_set_form(p, TPDP_PARAM_LOCALIZED);
}

/* Pre-forward: local tensors -> DTensors, each validated by unflatten
 * against its spec (shape, dtype, device for this rank). */
static tpdp_status reconstruct_hook(tpdp_module *m, void *ctx) {
  (void)m;
  dp_transform *t = ctx;
  tpdp_param **params = t->params;
  const tpdp_spec **specs = t->specs;
  const int n = t->n;
  for (int i = 0; i < n; i++) {
    tpdp_param *p = params[i];
    tpdp_dtensor dt;
    tpdp_status st =
        tpdp_dtensor_unflatten(tpdp_param_tensor(p), specs[i], &dt);
    if (st != TPDP_SUCCESS) {
      for (int k = 0; k < i; k++) localize_one(params[k]);
      return TPDP_ERR(st, "pre-forward reconstruct of parameter '%s': %s",
                      t->fqns[i], tpdp_last_error());
    }
    /* dt.local is the stored view itself: nothing to write back. */
    tpdp_param_set_form(p, TPDP_PARAM_DTENSOR);
  }
  return TPDP_SUCCESS;
}

/* Post-forward: DTensors -> local tensors. */
static tpdp_status localize_hook(tpdp_module *m, void *ctx) {
  (void)m;
  dp_transform *t = ctx;
  tpdp_param **params = t->params;
  const int n = t->n;
  for (int i = 0; i < n; i++) localize_one(params[i]);
  return TPDP_SUCCESS;
}

/* Validate every parameter of t against its spec; error names the FQN. */
static tpdp_status validate_all(const dp_transform *t) {
  for (int i = 0; i < t->n; i++) {
    tpdp_dtensor dt;
    tpdp_status st = tpdp_dtensor_unflatten(tpdp_param_tensor(t->params[i]),
                                            t->specs[i], &dt);
    if (st != TPDP_SUCCESS)
      return TPDP_ERR(st, "parameter '%s': %s", t->fqns[i], tpdp_last_error());
  }
  return TPDP_SUCCESS;
}

tpdp_status tpdp_pre_dp_transform(tpdp_module *root) {
  TPDP_API_ENTRY;
  CHECK_PTR(root);
  if (tpdp_module_get_ext(root, DP_TRANSFORM_KEY)) {
    char lbl[256];
    label(root, lbl, sizeof lbl);
    return TPDP_ERR(TPDP_ERR_ALREADY,
                    "module '%s' already has the pre-DP transform", lbl);
  }
  tpdp_status st = TPDP_SUCCESS;
  tpdp_param_fqns *map = NULL;
  dp_transform *t = NULL;
  static const char *const no_cleaning[1] = {""};
  CHECK_GOTO(tpdp_param_fqns_create(root, 1, no_cleaning, 0, &map), st, fail);
  CHECK_GOTO(TPDP_CALLOC(t, 1), st, fail);
  int total = tpdp_param_fqns_count(map);
  size_t pool_len = 0;
  for (int i = 0; i < total; i++) {
    if (tpdp_param_spec(tpdp_param_fqns_param(map, i)) == NULL) continue;
    t->n++;
    pool_len += strlen(tpdp_param_fqns_get(map, i, 0)) + 1;
  }
  CHECK_GOTO(TPDP_CALLOC(t->params, t->n), st, fail);
  CHECK_GOTO(TPDP_CALLOC(t->specs, t->n), st, fail);
  CHECK_GOTO(TPDP_CALLOC(t->fqns, t->n), st, fail);
  CHECK_GOTO(TPDP_CALLOC(t->pool, pool_len), st, fail);
  {
    int k = 0;
    size_t off = 0;
    for (int i = 0; i < total; i++) {
      tpdp_param *p = tpdp_param_fqns_param(map, i);
      const struct tpdp_spec *spec = tpdp_param_spec(p);
      if (spec == NULL) continue;
      const char *fqn = tpdp_param_fqns_get(map, i, 0);
      size_t len = strlen(fqn) + 1;
      memcpy(t->pool + off, fqn, len);
      t->params[k] = p;
      t->specs[k] = spec;
      t->fqns[k] = t->pool + off;
      off += len;
      k++;
    }
  }
  tpdp_param_fqns_destroy(map);
  map = NULL;
  /* Check everything before changing anything. */
  CHECK_GOTO(validate_all(t), st, fail);
  CHECK_GOTO(
      tpdp_module_register_forward_pre_hook(root, reconstruct_hook, t, &t->pre),
      st, fail);
  st = tpdp_module_register_forward_hook(root, localize_hook, t, &t->post);
  if (st != TPDP_SUCCESS) {
    tpdp_hook_remove(t->pre);
    goto fail;
  }
  st = tpdp_module_set_ext(root, DP_TRANSFORM_KEY, t, transform_free);
  if (st != TPDP_SUCCESS) {
    tpdp_hook_remove(t->post);
    tpdp_hook_remove(t->pre);
    goto fail;
  }
  for (int i = 0; i < t->n; i++) localize_one(t->params[i]);
  return TPDP_SUCCESS;

fail:
  tpdp_param_fqns_destroy(map);
  transform_free(t);
  return st;
}

tpdp_status tpdp_pre_dp_transform_undo(tpdp_module *root) {
  TPDP_API_ENTRY;
  CHECK_PTR(root);
  dp_transform *t = tpdp_module_get_ext(root, DP_TRANSFORM_KEY);
  if (t == NULL) {
    char lbl[256];
    label(root, lbl, sizeof lbl);
    return TPDP_ERR(TPDP_ERR_NOT_FOUND,
                    "module '%s' has no pre-DP transform to undo", lbl);
  }
  CHECK(validate_all(t));
  CHECK(tpdp_hook_remove(t->pre));
  CHECK(tpdp_hook_remove(t->post));
  for (int i = 0; i < t->n; i++)
    tpdp_param_set_form(t->params[i], TPDP_PARAM_DTENSOR);
  /* Frees t through transform_free. */
  return tpdp_module_set_ext(root, DP_TRANSFORM_KEY, NULL, NULL);
}

int tpdp_pre_dp_transform_count(const tpdp_module *root) {
  const dp_transform *t = tpdp_module_get_ext(root, DP_TRANSFORM_KEY);
  return t ? t->n : -1;
}
