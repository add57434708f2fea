// SPDX-License-Identifier: BSD-3-Clause
/* The TP+DP transform (tpdp_pre_dp_transform; PyTorch's TP-inside-DDP
 * composition): localize DTensor parameters for DP and reconstruct them
 * around forward with module hooks on the transformed module, keeping the
 * training states of PyTorch FSDP live.
 *
 * The hooks run on every forward, so they do no per-call discovery: the
 * DTensor parameters are resolved once, at transform time, into flat
 * arrays (parameter, spec, FQN), and a hook call is two passes over those
 * arrays (check everything, then change everything in one core call): no
 * traversal, allocation or string work (bench/hooks.sh measures it
 * against walking the tree and building the names on every call). The
 * tree is resolved again only when tpdp_module_tree_generation() says some
 * tree changed, to refuse a DTensor parameter the transform does not
 * know. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "tpdp/module.h"
#include "tpdp/tp.h"

#define DP_TRANSFORM_KEY "tpdp.pre_dp_transform"

typedef struct {
  tpdp_module *root; /* the transformed module (hooks live on it) */
  int n;
  tpdp_param **params;     /* [n] */
  const tpdp_spec **specs; /* [n], captured at transform time */
  const char **fqns;       /* [n], from the tree's root, into one pool */
  char *pool;
  uint64_t generation; /* tpdp_module_tree_generation() last checked */
  tpdp_hook_handle pre, post;
} dp_transform;

static void transform_arrays_free(dp_transform *t) {
  free(t->params);
  free(t->specs);
  free(t->fqns);
  free(t->pool);
}

static void transform_free(void *vp) {
  dp_transform *t = vp;
  if (t == NULL) return;
  transform_arrays_free(t);
  free(t);
}

/* ------------------------------------------------------------ resolving */

/* 1 if the FQN (from the tree root) lies in the subtree whose FQN prefix
 * ("block.inner.", "" for the tree root) is `prefix`. */
static int in_subtree(const char *fqn, const char *prefix, size_t plen) {
  return plen == 0 || strncmp(fqn, prefix, plen) == 0;
}

/* The DTensor parameter registered inside root's subtree as `inside` is
 * also registered outside it as `outside`: refuse, naming the closest
 * ancestor of root whose subtree holds both. */
static tpdp_status tied_outside(const tpdp_module *root, const char *inside,
                                const char *outside) {
  char rl[256], al[256], fqn[256];
  tpdp_module_label(root, rl, sizeof rl);
  const tpdp_module *a = tpdp_module_parent(root);
  for (; tpdp_module_parent(a) != NULL; a = tpdp_module_parent(a)) {
    size_t n = tpdp_module_fqn(a, fqn, sizeof fqn);
    if (n < sizeof fqn && strncmp(outside, fqn, n) == 0 && outside[n] == '.')
      break;
  }
  tpdp_module_label(a, al, sizeof al);
  return TPDP_ERR(TPDP_ERR_STATE,
                  "DTensor parameter '%s' is also registered outside '%s', as "
                  "'%s': DP over that subtree needs it local between "
                  "forwards while the modules outside use it as a DTensor; "
                  "apply the transform to '%s', whose subtree holds every "
                  "registration",
                  inside, rl, outside, al);
}

/* The DTensor parameters of root's subtree, in pre-order (a parameter
 * registered several times once, under its first FQN), into t's arrays
 * (freed by the caller on failure too). FQNs are from the tree's root.
 * TPDP_ERR_STATE if one of them is also registered outside the subtree. */
static tpdp_status resolve(tpdp_module *root, dp_transform *t) {
  static const char *const no_cleaning[1] = {""};
  tpdp_module *top = tpdp_module_root(root);
  tpdp_param_fqns *map = NULL;
  char *prefix = NULL;
  tpdp_status st = TPDP_SUCCESS;
  /* Every registration in the whole tree (no dedup): a parameter of the
   * subtree that has one outside it is tied across the boundary. */
  CHECK(tpdp_param_fqns_create(top, 0, no_cleaning, 0, &map));
  size_t plen = tpdp_module_fqn(root, NULL, 0);
  CHECK_GOTO(TPDP_CALLOC(prefix, plen + 2), st, done);
  tpdp_module_fqn(root, prefix, plen + 1);
  if (plen > 0) prefix[plen++] = '.';
  int total = tpdp_param_fqns_count(map);
  size_t pool_len = 0;
  t->n = 0;
  for (int i = 0; i < total; i++) {
    if (tpdp_param_spec(tpdp_param_fqns_param(map, i)) == NULL) continue;
    const char *inside = NULL, *outside = NULL;
    for (int j = 0; j < tpdp_param_fqns_num(map, i); j++) {
      const char *f = tpdp_param_fqns_get(map, i, j);
      if (in_subtree(f, prefix, plen)) {
        if (inside == NULL) inside = f;
      } else if (outside == NULL) {
        outside = f;
      }
    }
    if (inside == NULL) continue;
    if (outside != NULL) {
      st = tied_outside(root, inside, outside);
      goto done;
    }
    t->n++;
    pool_len += strlen(inside) + 1;
  }
  CHECK_GOTO(TPDP_CALLOC(t->params, t->n), st, done);
  CHECK_GOTO(TPDP_CALLOC(t->specs, t->n), st, done);
  CHECK_GOTO(TPDP_CALLOC(t->fqns, t->n), st, done);
  CHECK_GOTO(TPDP_CALLOC(t->pool, pool_len), st, done);
  int k = 0;
  size_t off = 0;
  for (int i = 0; i < total; i++) {
    tpdp_param *p = tpdp_param_fqns_param(map, i);
    const struct tpdp_spec *spec = tpdp_param_spec(p);
    if (spec == NULL) continue;
    const char *fqn = tpdp_param_fqns_get(map, i, 0);
    if (!in_subtree(fqn, prefix, plen)) continue; /* all outside: not ours */
    size_t len = strlen(fqn) + 1;
    memcpy(t->pool + off, fqn, len);
    t->params[k] = p;
    t->specs[k] = spec;
    t->fqns[k] = t->pool + off;
    off += len;
    k++;
  }
done:
  free(prefix);
  tpdp_param_fqns_destroy(map);
  return st;
}

/* The tree changed somewhere since t last looked: resolve root's subtree
 * again and refuse what the transform (and the DP reducer built over its
 * local parameters) does not know, naming the parameter. */
static tpdp_status recheck(dp_transform *t) {
  uint64_t gen = tpdp_module_tree_generation();
  char rl[256];
  tpdp_module_label(t->root, rl, sizeof rl);
  for (int i = 0; i < t->n; i++) {
    if (tpdp_param_spec(t->params[i]) == t->specs[i]) continue;
    return TPDP_ERR(TPDP_ERR_STATE,
                    "parameter '%s' %s its spec after the pre-DP transform "
                    "of '%s': undo the transform before changing specs",
                    t->fqns[i],
                    tpdp_param_spec(t->params[i]) ? "changed" : "lost", rl);
  }
  dp_transform now;
  memset(&now, 0, sizeof now);
  core_ptrmap known = {0};
  tpdp_status st = TPDP_SUCCESS;
  CHECK_GOTO(resolve(t->root, &now), st, done);
  if (core_ptrmap_init(&known, (size_t)t->n) != 0) {
    st = TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "out of memory (pointer map)");
    goto done;
  }
  for (int i = 0; i < t->n; i++) {
    if (core_ptrmap_put(&known, t->params[i], i) != 0) {
      st = TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "out of memory (pointer map)");
      goto done;
    }
  }
  for (int k = 0; k < now.n; k++) {
    if (core_ptrmap_get(&known, now.params[k]) >= 0) continue;
    st = TPDP_ERR(TPDP_ERR_STATE,
                  "DTensor parameter '%s' joined '%s' after its pre-DP "
                  "transform, which (like the DP reducer built over the "
                  "localized parameters) does not handle it: undo the "
                  "transform and apply it again, then rebuild the reducer",
                  now.fqns[k], rl);
    goto done;
  }
  t->generation = gen;
done:
  core_ptrmap_free(&known);
  transform_arrays_free(&now);
  return st;
}

/* ---------------------------------------------------------- module hooks */

static const tpdp_training_state forward_ok[2] = {TPDP_STATE_IDLE,
                                                  TPDP_STATE_FORWARD_BACKWARD};
/* IDLE: first forward; BACKWARD_PRE: the next step, an evaluation forward,
 * or a forward recomputed in backward (activation checkpointing). */
static const tpdp_handle_state reconstruct_ok[2] = {TPDP_HANDLE_IDLE,
                                                    TPDP_HANDLE_BACKWARD_PRE};
static const tpdp_handle_state localize_ok[1] = {TPDP_HANDLE_FORWARD};

/* The parameter's local tensor as its spec describes it: a view holding
 * only some rows of it (dp/'s fully sharded units, tpdp_param_set_row_shard)
 * is checked by the whole's shape, written into *tmp (its data pointer is
 * not for reading); otherwise the view itself, without a copy. */
static const tpdp_tensor *whole_local(const tpdp_param *p, tpdp_tensor *tmp) {
  int64_t total = 0;
  if (!tpdp_param_row_shard(p, NULL, &total)) return tpdp_param_tensor(p);
  *tmp = *tpdp_param_tensor(p);
  tmp->shape[0] = total;
  return tmp;
}

/* Pre-forward: local tensors -> DTensors, each validated by unflatten
 * against its spec (shape, dtype, device for this rank); module state
 * FORWARD_BACKWARD, handle states FORWARD. */
static tpdp_status reconstruct_hook(tpdp_module *m, void *ctx) {
  dp_transform *t = ctx;
  tpdp_training_state ms = tpdp_module_get_state(m);
  if (ms != TPDP_STATE_IDLE && ms != TPDP_STATE_FORWARD_BACKWARD)
    return tpdp_module_check_state(m, forward_ok, 2); /* names both */
  if (tpdp_module_tree_generation() != t->generation) CHECK(recheck(t));
  tpdp_param **params = t->params;
  const tpdp_spec **specs = t->specs;
  const int n = t->n;
  /* Check every parameter before changing any. */
  for (int i = 0; i < n; i++) {
    tpdp_param *p = params[i];
    tpdp_handle_state hs = tpdp_param_get_state(p);
    if (hs != TPDP_HANDLE_IDLE && hs != TPDP_HANDLE_BACKWARD_PRE)
      return tpdp_param_check_state(p, reconstruct_ok, 2, t->fqns[i]);
    tpdp_dtensor dt; /* dt.local is the stored view itself: not kept */
    tpdp_tensor tmp;
    tpdp_status st =
        tpdp_dtensor_unflatten(whole_local(p, &tmp), specs[i], &dt);
    if (st != TPDP_SUCCESS)
      return TPDP_ERR(st, "pre-forward reconstruct of parameter '%s': %s",
                      t->fqns[i], core_error_detail());
  }
  CHECK(tpdp_params_set_form_state(params, n, TPDP_PARAM_DTENSOR,
                                   TPDP_HANDLE_FORWARD));
  return tpdp_module_set_state(m, TPDP_STATE_FORWARD_BACKWARD);
}

/* Post-forward: DTensors -> local tensors (the parameter stores its local
 * view in both forms, so flattening changes only the form); handle states
 * BACKWARD_PRE. */
static tpdp_status localize_hook(tpdp_module *m, void *ctx) {
  (void)m;
  dp_transform *t = ctx;
  tpdp_param **params = t->params;
  const int n = t->n;
  for (int i = 0; i < n; i++)
    if (tpdp_param_get_state(params[i]) != TPDP_HANDLE_FORWARD)
      return tpdp_param_check_state(params[i], localize_ok, 1, t->fqns[i]);
  return tpdp_params_set_form_state(params, n, TPDP_PARAM_LOCALIZED,
                                    TPDP_HANDLE_BACKWARD_PRE);
}

/* --------------------------------------------------------- the transform */

/* Validate every parameter of t against its spec; error names the FQN. */
static tpdp_status validate_all(const dp_transform *t) {
  for (int i = 0; i < t->n; i++) {
    tpdp_dtensor dt;
    tpdp_tensor tmp;
    tpdp_status st = tpdp_dtensor_unflatten(whole_local(t->params[i], &tmp),
                                            t->specs[i], &dt);
    if (st != TPDP_SUCCESS)
      return TPDP_ERR(st, "parameter '%s': %s", t->fqns[i],
                      core_error_detail());
  }
  return TPDP_SUCCESS;
}

static tpdp_status refuse_nested(tpdp_module *m, const char *prefix, int level,
                                 void *ctx) {
  (void)prefix;
  (void)level;
  if (tpdp_module_attached_state(m, DP_TRANSFORM_KEY) == NULL)
    return TPDP_SUCCESS;
  char ml[256], rl[256];
  tpdp_module_label(m, ml, sizeof ml);
  tpdp_module_label(ctx, rl, sizeof rl);
  if (m == ctx)
    return TPDP_ERR(TPDP_ERR_ALREADY,
                    "module '%s' already has the pre-DP transform", ml);
  return TPDP_ERR(TPDP_ERR_ALREADY,
                  "module '%s' is in the subtree of '%s' and already has the "
                  "pre-DP transform: transforms may not nest",
                  ml, rl);
}

/* TPDP_ERR_ALREADY if root, one of its ancestors or descendants has the
 * transform: their hooks would move the same parameters' forms and states
 * inside each other's forward. */
static tpdp_status check_not_nested(tpdp_module *root) {
  for (tpdp_module *a = tpdp_module_parent(root); a; a = tpdp_module_parent(a))
    if (tpdp_module_attached_state(a, DP_TRANSFORM_KEY)) {
      char al[256], rl[256];
      tpdp_module_label(a, al, sizeof al);
      tpdp_module_label(root, rl, sizeof rl);
      return TPDP_ERR(TPDP_ERR_ALREADY,
                      "module '%s' is in the subtree of '%s', which already "
                      "has the pre-DP transform: transforms may not nest",
                      rl, al);
    }
  return tpdp_module_apply(root, refuse_nested, root);
}

tpdp_status tpdp_pre_dp_transform(tpdp_module *root) {
  TPDP_API_ENTRY;
  CHECK_PTR(root);
  CHECK(check_not_nested(root));
  tpdp_status st = TPDP_SUCCESS;
  dp_transform *t = NULL;
  CHECK(TPDP_CALLOC(t, 1));
  t->root = root;
  t->generation = tpdp_module_tree_generation();
  CHECK_GOTO(resolve(root, t), st, fail);
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
  st = tpdp_module_attach_state(root, DP_TRANSFORM_KEY, t, transform_free);
  if (st != TPDP_SUCCESS) {
    tpdp_hook_remove(t->post);
    tpdp_hook_remove(t->pre);
    goto fail;
  }
  for (int i = 0; i < t->n; i++)
    tpdp_param_set_form(t->params[i], TPDP_PARAM_LOCALIZED);
  return TPDP_SUCCESS;

fail:
  transform_free(t);
  return st;
}

tpdp_status tpdp_pre_dp_transform_undo(tpdp_module *root) {
  TPDP_API_ENTRY;
  CHECK_PTR(root);
  dp_transform *t = tpdp_module_attached_state(root, DP_TRANSFORM_KEY);
  char lbl[256];
  tpdp_module_label(root, lbl, sizeof lbl);
  if (t == NULL)
    return TPDP_ERR(TPDP_ERR_NOT_FOUND,
                    "module '%s' has no pre-DP transform to undo", lbl);
  if (tpdp_module_in_forward(root))
    return TPDP_ERR(TPDP_ERR_STATE,
                    "module '%s' is in forward: undo its pre-DP transform "
                    "after tpdp_module_forward_end",
                    lbl);
  CHECK(validate_all(t));
  CHECK(tpdp_params_set_form_state(t->params, t->n, TPDP_PARAM_DTENSOR,
                                   TPDP_HANDLE_IDLE));
  CHECK(tpdp_hook_remove(t->pre));
  CHECK(tpdp_hook_remove(t->post));
  /* Frees t through transform_free. */
  return tpdp_module_attach_state(root, DP_TRANSFORM_KEY, NULL, NULL);
}

int tpdp_pre_dp_transform_count(const tpdp_module *root) {
  const dp_transform *t = tpdp_module_attached_state(root, DP_TRANSFORM_KEY);
  return t ? t->n : -1;
}
