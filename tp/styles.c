// SPDX-License-Identifier: BSD-3-Clause
/* Parallel styles: tpdp_parallelize turns the parameters of the modules a
 * TP plan names into DTensors over the mesh's TP dim, and the functional
 * collectives move activations in and out of the styles' regions. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "tp/tp_internal.h"
#include "tpdp/module.h"
#include "tpdp/tp.h"

#define TP_STYLE_STATE_KEY "tp.style"

/* What tpdp_parallelize attaches to each module it parallelizes: the style,
 * the mesh, and the storage/specs of the module's parameters. */
typedef struct {
  tpdp_tp_style style;
  const tpdp_mesh *mesh;
  int tp_dim;
  tpdp_comm *tp_comm;
  int nparams;
  tpdp_spec **specs;
  void **storage; /* local parameter data, then local gradient data */
} tp_module_state;

/* Free one storage block unless `in_use` points into it. */
static void release_if_unused(void **block, const tpdp_tensor *in_use,
                              int64_t *freed) {
  if (*block == NULL || (in_use && in_use->data == *block)) return;
  free(*block);
  *block = NULL;
  (*freed)++;
}

void tp_styles_release_unused(tpdp_module *m, int64_t *freed) {
  tp_module_state *st = tpdp_module_attached_state(m, TP_STYLE_STATE_KEY);
  if (st == NULL) return;
  for (int i = 0; i < st->nparams; i++) {
    tpdp_param *p = tpdp_module_param(m, i, NULL);
    release_if_unused(&st->storage[2 * i], tpdp_param_tensor(p), freed);
    release_if_unused(&st->storage[2 * i + 1], tpdp_param_grad(p), freed);
  }
}

static void tp_state_free(void *ptr) {
  tp_module_state *st = ptr;
  if (st == NULL) return;
  for (int i = 0; i < st->nparams; i++) {
    tpdp_spec_destroy(st->specs[i]);
    free(st->storage[2 * i]);
    free(st->storage[2 * i + 1]);
  }
  free(st->specs);
  free(st->storage);
  free(st);
}

static const char *const style_names[TPDP_STYLE_COUNT] = {
    "colwise", "rowwise", "sequence_parallel", "replicate"};

const char *tpdp_tp_style_name(tpdp_tp_style style) {
  return core_name_at(style_names, TPDP_STYLE_COUNT, (int)style);
}

tpdp_status tpdp_tp_style_parse(const char *text, tpdp_tp_style *out) {
  TPDP_API_ENTRY;
  CHECK_PTR(text);
  CHECK_PTR(out);
  int s = 0;
  CHECK(core_name_parse(style_names, TPDP_STYLE_COUNT, text, "TP style", &s));
  *out = (tpdp_tp_style)s;
  return TPDP_SUCCESS;
}

int tpdp_fqn_match(const char *pattern, const char *fqn) {
  if (pattern == NULL || fqn == NULL) return 0;
  const char *p = pattern, *f = fqn;
  for (;;) {
    size_t plen = strcspn(p, "."), flen = strcspn(f, ".");
    int star = plen == 1 && p[0] == '*';
    if (!star && (plen != flen || strncmp(p, f, plen) != 0)) return 0;
    if (star && flen == 0) return 0;
    p += plen;
    f += flen;
    if (*p == '\0' || *f == '\0') return *p == '\0' && *f == '\0';
    p++;
    f++;
  }
}

/* ----------------------------------------------- matching the TP plan */

typedef struct {
  tpdp_module *module;
  char fqn[256];
  tpdp_tp_style style;
} tp_match;

typedef struct {
  const tpdp_tp_plan_entry *plan;
  int nplan;
  int *hits; /* per TP plan entry */
  tp_match *matches;
  int nmatches, cap;
} match_ctx;

static tpdp_status collect_matches(tpdp_module *m, const char *prefix,
                                   int level, void *vctx) {
  (void)level;
  match_ctx *ctx = vctx;
  char fqn[256];
  size_t n = strlen(prefix);
  if (n >= sizeof fqn) n = sizeof fqn - 1;
  memcpy(fqn, prefix, n);
  fqn[n > 0 ? n - 1 : 0] = '\0'; /* drop the trailing '.' */
  for (int i = 0; i < ctx->nplan; i++) {
    if (!tpdp_fqn_match(ctx->plan[i].pattern, fqn)) continue;
    ctx->hits[i]++;
    if (ctx->nmatches == ctx->cap) {
      int cap = ctx->cap ? 2 * ctx->cap : 16;
      tp_match *grown = realloc(ctx->matches, sizeof *grown * (size_t)cap);
      if (grown == NULL)
        return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "collecting plan matches");
      ctx->matches = grown;
      ctx->cap = cap;
    }
    tp_match *mt = &ctx->matches[ctx->nmatches++];
    mt->module = m;
    strcpy(mt->fqn, fqn);
    mt->style = ctx->plan[i].style;
    break; /* first matching entry wins */
  }
  return TPDP_SUCCESS;
}

tpdp_status tpdp_tp_style_placement(tpdp_tp_style style, const char *fqn,
                                    const char *name, int ndim, int64_t size0,
                                    int64_t out_size, tpdp_placement *out) {
  TPDP_API_ENTRY;
  CHECK_PTR(fqn);
  CHECK_PTR(name);
  CHECK_PTR(out);
  if (style != TPDP_STYLE_COLWISE && style != TPDP_STYLE_ROWWISE) {
    *out = tpdp_replicate();
    return TPDP_SUCCESS;
  }
  int is_weight = strcmp(name, "weight") == 0;
  if (is_weight && ndim != 2)
    return TPDP_ERR(TPDP_ERR_SHAPE_MISMATCH,
                    "%s style: parameter '%s' must be a 2-D Linear weight "
                    "[out, in], got %d dims",
                    tpdp_tp_style_name(style), fqn, ndim);
  if (!is_weight && (ndim != 1 || (out_size >= 0 && size0 != out_size)))
    return TPDP_ERR(TPDP_ERR_SHAPE_MISMATCH,
                    "%s style: parameter '%s' must be a 1-D bias of the "
                    "weight's out size %lld, got %d dims (size %lld)",
                    tpdp_tp_style_name(style), fqn, (long long)out_size, ndim,
                    (long long)(ndim ? size0 : 0));
  if (style == TPDP_STYLE_COLWISE)
    *out = tpdp_shard(0);
  else
    *out = is_weight ? tpdp_shard(1) : tpdp_replicate();
  return TPDP_SUCCESS;
}

/* Placement of a module's parameter `pname` under its matched style. */
static tpdp_status style_placement(const tp_match *mt, const char *pname,
                                   const tpdp_tensor *t, int64_t out_size,
                                   tpdp_placement *out) {
  char fqn[320];
  snprintf(fqn, sizeof fqn, "%s%s%s", mt->fqn, mt->fqn[0] ? "." : "", pname);
  /* Its error is named after tpdp_parallelize, the outermost public call. */
  return tpdp_tp_style_placement(mt->style, fqn, pname, t->ndim,
                                 t->ndim ? t->shape[0] : 0, out_size, out);
}

/* Prepare one module: build specs and slice local shards into new storage.
 * Changes nothing in the tree; *out receives the state (freed on failure). */
static tpdp_status prepare_style(const tp_match *mt, const tpdp_mesh *mesh,
                                 int tp_dim, tpdp_comm *tp_comm,
                                 tp_module_state **out) {
  tpdp_module *m = mt->module;
  int np = tpdp_module_num_params(m);
  tp_module_state *st = NULL;
  tpdp_status res = TPDP_SUCCESS;
  CHECK(TPDP_CALLOC(st, 1));
  st->style = mt->style;
  st->mesh = mesh;
  st->tp_dim = tp_dim;
  st->tp_comm = tp_comm;
  CHECK_GOTO(TPDP_CALLOC(st->specs, (size_t)np), res, fail);
  CHECK_GOTO(TPDP_CALLOC(st->storage, 2 * (size_t)np), res, fail);
  st->nparams = np;

  int64_t out_size = -1;
  for (int i = 0; i < np; i++) {
    const char *pname = NULL;
    tpdp_param *p = tpdp_module_param(m, i, &pname);
    const tpdp_tensor *t = tpdp_param_tensor(p);
    if (strcmp(pname, "weight") == 0 && t->ndim == 2) out_size = t->shape[0];
  }
  int nd = tpdp_mesh_ndim(mesh);
  for (int i = 0; i < np; i++) {
    const char *pname = NULL;
    tpdp_param *p = tpdp_module_param(m, i, &pname);
    const tpdp_tensor *full = tpdp_param_tensor(p);
    if (tpdp_param_spec(p) != NULL) {
      res = TPDP_ERR(TPDP_ERR_ALREADY,
                     "parameter '%s.%s' is already a DTensor (module "
                     "parallelized twice?)",
                     mt->fqn, pname);
      goto fail;
    }
    if (full->device.type != TPDP_DEVICE_CPU) {
      res = TPDP_ERR(TPDP_ERR_UNSUPPORTED,
                     "parameter '%s.%s' is in device memory; this build "
                     "parallelizes host tensors only",
                     mt->fqn, pname);
      goto fail;
    }
    tpdp_placement tp_pl;
    CHECK_GOTO(style_placement(mt, pname, full, out_size, &tp_pl), res, fail);
    tpdp_placement replicated[TPDP_MAX_DIMS], placed[TPDP_MAX_DIMS];
    for (int d = 0; d < nd; d++) replicated[d] = placed[d] = tpdp_replicate();
    placed[tp_dim] = tp_pl;
    tpdp_spec *full_spec = NULL;
    CHECK_GOTO(tpdp_spec_create(mesh, replicated, nd, full->ndim, full->shape,
                                full->dtype, full->device, &full_spec),
               res, fail);
    res = tpdp_spec_create(mesh, placed, nd, full->ndim, full->shape,
                           full->dtype, full->device, &st->specs[i]);
    if (res != TPDP_SUCCESS) {
      tpdp_spec_destroy(full_spec);
      goto fail;
    }
    int64_t lshape[TPDP_MAX_DIMS], loff[TPDP_MAX_DIMS];
    res =
        tpdp_spec_local_shape(st->specs[i], tpdp_mesh_rank(mesh), lshape, loff);
    tpdp_tensor local;
    if (res == TPDP_SUCCESS)
      res = tpdp_tensor_init(&local, NULL, full->dtype, full->device,
                             full->ndim, lshape);
    if (res == TPDP_SUCCESS) {
      size_t bytes = tpdp_tensor_nbytes(&local);
      /* +1: a valid pointer even for an empty shard */
      st->storage[2 * i] = calloc(1, bytes + 1);
      st->storage[2 * i + 1] = calloc(1, bytes + 1);
      if (!st->storage[2 * i] || !st->storage[2 * i + 1])
        res = TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "local shard of '%s.%s'",
                       mt->fqn, pname);
    }
    if (res == TPDP_SUCCESS) {
      /* Replicate -> Shard is a local slice: no communication. */
      local.data = st->storage[2 * i];
      tpdp_dtensor src = {*full, full_spec};
      res = tpdp_redistribute(&src, st->specs[i], &local);
    }
    tpdp_spec_destroy(full_spec);
    if (res != TPDP_SUCCESS) goto fail;
  }
  *out = st;
  return TPDP_SUCCESS;
fail:
  tp_state_free(st);
  return res;
}

/* Re-point a prepared module's parameters at their local shards (tensor,
 * grad, spec). Cannot fail for valid handles. */
static void commit_params(const tp_match *mt, const tpdp_mesh *mesh,
                          const tp_module_state *st) {
  tpdp_module *m = mt->module;
  int np = st->nparams;
  for (int i = 0; i < np; i++) {
    tpdp_param *p = tpdp_module_param(m, i, NULL);
    const tpdp_spec *spec = st->specs[i];
    int64_t lshape[TPDP_MAX_DIMS], loff[TPDP_MAX_DIMS];
    tpdp_spec_local_shape(spec, tpdp_mesh_rank(mesh), lshape, loff);
    tpdp_tensor local, grad;
    tpdp_tensor_init(&local, st->storage[2 * i], tpdp_spec_dtype(spec),
                     tpdp_spec_device(spec), tpdp_spec_ndim(spec), lshape);
    grad = local;
    grad.data = st->storage[2 * i + 1];
    tpdp_param_set_tensor(p, &local);
    tpdp_param_set_grad(p, &grad);
    tpdp_param_set_spec(p, (const struct tpdp_spec *)spec);
  }
}

tpdp_status tpdp_parallelize(tpdp_module *root, const tpdp_mesh *mesh,
                             const char *tp_dim, const tpdp_tp_plan_entry *plan,
                             int nplan) {
  TPDP_API_ENTRY;
  CHECK_PTR(root);
  CHECK_PTR(mesh);
  CHECK_PTR(tp_dim);
  if (nplan < 0)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT, "nplan = %d is negative", nplan);
  if (nplan > 0 && plan == NULL)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT, "plan of %d entries is NULL",
                    nplan);
  tpdp_comm *tp_comm = NULL; /* by name: an unknown name lists the dims */
  CHECK(tpdp_mesh_dim_comm_by_name(mesh, tp_dim, &tp_comm));
  int dim = tpdp_mesh_dim_index(mesh, tp_dim);
  for (int i = 0; i < nplan; i++) {
    if (plan[i].pattern == NULL)
      return TPDP_ERR(TPDP_ERR_NULL_POINTER, "plan entry %d has a NULL pattern",
                      i);
    if ((int)plan[i].style < 0 || plan[i].style >= TPDP_STYLE_COUNT)
      return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                      "plan entry '%s' has invalid style %d", plan[i].pattern,
                      (int)plan[i].style);
  }
  match_ctx ctx = {plan, nplan, NULL, NULL, 0, 0};
  tp_module_state **states = NULL;
  tpdp_status res = TPDP_SUCCESS;
  CHECK(TPDP_CALLOC(ctx.hits, (size_t)(nplan > 0 ? nplan : 1)));
  CHECK_GOTO(tpdp_module_apply(root, collect_matches, &ctx), res, done);
  for (int i = 0; i < nplan; i++) {
    if (ctx.hits[i] == 0) {
      res = TPDP_ERR(TPDP_ERR_NOT_FOUND,
                     "plan pattern '%s' (%s) matches no module under the root",
                     plan[i].pattern, tpdp_tp_style_name(plan[i].style));
      goto done;
    }
  }
  for (int i = 0; i < ctx.nmatches; i++) {
    char lbl[256];
    tpdp_module_label(ctx.matches[i].module, lbl, sizeof lbl);
    if (tpdp_module_attached_state(ctx.matches[i].module, TP_STYLE_STATE_KEY)) {
      res = TPDP_ERR(TPDP_ERR_ALREADY, "module '%s' is already parallelized",
                     lbl);
      goto done;
    }
    const char *kind = tpdp_module_unit_kind(ctx.matches[i].module);
    if (kind != NULL) {
      res = TPDP_ERR(TPDP_ERR_ALREADY,
                     "module '%s' is already a managed unit of kind '%s'", lbl,
                     kind);
      goto done;
    }
  }
  /* A parameter object registered in two matched modules would get two
   * shards; refuse rather than let the last one win silently. */
  for (int i = 0; i < ctx.nmatches; i++) {
    tpdp_module *mi = ctx.matches[i].module;
    for (int a = 0; a < tpdp_module_num_params(mi); a++) {
      const char *na = NULL;
      tpdp_param *pa = tpdp_module_param(mi, a, &na);
      for (int j = i + 1; j < ctx.nmatches; j++) {
        tpdp_module *mj = ctx.matches[j].module;
        for (int b = 0; b < tpdp_module_num_params(mj); b++) {
          const char *nb = NULL;
          if (tpdp_module_param(mj, b, &nb) != pa) continue;
          res = TPDP_ERR(TPDP_ERR_DUPLICATE,
                         "parameter '%s.%s' is shared with '%s.%s': both "
                         "modules are matched by the plan (%s and %s), so "
                         "the parameter would be sharded twice",
                         ctx.matches[i].fqn, na, ctx.matches[j].fqn, nb,
                         tpdp_tp_style_name(ctx.matches[i].style),
                         tpdp_tp_style_name(ctx.matches[j].style));
          goto done;
        }
      }
    }
  }
  /* Two phases, so that an error leaves the tree unchanged: prepare every
   * module (specs, local shards: all the checks and allocations of tp/),
   * then attach units and states (undone on failure), and only then
   * re-point the parameters, which cannot fail. */
  int nunits = 0, nattached = 0;
  if (ctx.nmatches > 0)
    CHECK_GOTO(TPDP_CALLOC(states, (size_t)ctx.nmatches), res, done);
  for (int i = 0; i < ctx.nmatches; i++)
    CHECK_GOTO(prepare_style(&ctx.matches[i], mesh, dim, tp_comm, &states[i]),
               res, undo);
  for (; nunits < ctx.nmatches; nunits++) {
    char suffix[48];
    snprintf(suffix, sizeof suffix, " TP %s",
             tpdp_tp_style_name(ctx.matches[nunits].style));
    for (char *c = suffix; *c; c++)
      if (*c >= 'a' && *c <= 'z') *c = (char)(*c - 'a' + 'A');
    CHECK_GOTO(tpdp_module_set_unit(ctx.matches[nunits].module, "TP", suffix),
               res, undo);
  }
  for (; nattached < ctx.nmatches; nattached++)
    CHECK_GOTO(tpdp_module_attach_state(ctx.matches[nattached].module,
                                        TP_STYLE_STATE_KEY, states[nattached],
                                        tp_state_free),
               res, undo);
  for (int i = 0; i < ctx.nmatches; i++)
    commit_params(&ctx.matches[i], mesh, states[i]);
  goto done;
undo:
  for (int i = 0; i < ctx.nmatches; i++) {
    if (i < nattached) /* owned by the module now: removing frees it */
      tpdp_module_attach_state(ctx.matches[i].module, TP_STYLE_STATE_KEY, NULL,
                               NULL);
    else
      tp_state_free(states[i]);
    if (i < nunits) tpdp_module_clear_unit(ctx.matches[i].module);
  }
done:
  free(states);
  free(ctx.hits);
  free(ctx.matches);
  return res;
}

tpdp_status tp_not_parallelized(const tpdp_module *m, const char *by) {
  char label[320];
  tpdp_module_label(m, label, sizeof label);
  return TPDP_ERR(TPDP_ERR_NOT_FOUND, "module '%s' was not parallelized by %s",
                  label, by);
}

static tpdp_status module_state(const tpdp_module *m, tp_module_state **out) {
  CHECK_PTR(m);
  tp_module_state *st = tpdp_module_attached_state(m, TP_STYLE_STATE_KEY);
  if (st == NULL) return tp_not_parallelized(m, "a TP plan");
  *out = st;
  return TPDP_SUCCESS;
}

tpdp_status tpdp_tp_module_style(const tpdp_module *m, tpdp_tp_style *out) {
  TPDP_API_ENTRY;
  CHECK_PTR(out);
  tp_module_state *st = NULL;
  CHECK(module_state(m, &st));
  *out = st->style;
  return TPDP_SUCCESS;
}

tpdp_status tpdp_tp_module_comm(const tpdp_module *m, tpdp_comm **out) {
  TPDP_API_ENTRY;
  CHECK_PTR(out);
  tp_module_state *st = NULL;
  CHECK(module_state(m, &st));
  *out = st->tp_comm;
  return TPDP_SUCCESS;
}

/* ------------------------------------------------- functional collectives */

/* t summed in place over m's TP group. */
static tpdp_status allreduce_sum(const tpdp_module *m, tpdp_tensor *t) {
  tp_module_state *st = NULL;
  CHECK(module_state(m, &st));
  return tpdp_allreduce(st->tp_comm, t, t, TPDP_OP_SUM);
}

tpdp_status tpdp_tp_colwise_input_backward(const tpdp_module *m,
                                           tpdp_tensor *grad_input) {
  TPDP_API_ENTRY;
  CHECK_PTR(grad_input);
  return allreduce_sum(m, grad_input);
}

tpdp_status tpdp_tp_rowwise_output_forward(const tpdp_module *m,
                                           tpdp_tensor *partial_output) {
  TPDP_API_ENTRY;
  CHECK_PTR(partial_output);
  return allreduce_sum(m, partial_output);
}

/* Redistribute an activation between two placements on the TP dim
 * (Replicate on the others: activations differ across DP ranks but never
 * move along those dims). `global` gives the global activation shape. */
static tpdp_status move_activation(const tp_module_state *st,
                                   const tpdp_tensor *src, tpdp_placement from,
                                   tpdp_placement to, const int64_t *global,
                                   tpdp_tensor *dst) {
  int nd = tpdp_mesh_ndim(st->mesh);
  tpdp_placement pf[TPDP_MAX_DIMS], pt[TPDP_MAX_DIMS];
  for (int d = 0; d < nd; d++) pf[d] = pt[d] = tpdp_replicate();
  pf[st->tp_dim] = from;
  pt[st->tp_dim] = to;
  tpdp_spec *sf = NULL, *stt = NULL;
  tpdp_status res = TPDP_SUCCESS;
  CHECK(tpdp_spec_create(st->mesh, pf, nd, src->ndim, global, src->dtype,
                         src->device, &sf));
  CHECK_GOTO(tpdp_spec_create(st->mesh, pt, nd, src->ndim, global, src->dtype,
                              src->device, &stt),
             res, done);
  tpdp_dtensor in;
  CHECK_GOTO(tpdp_dtensor_unflatten(src, sf, &in), res, done);
  res = tpdp_redistribute(&in, stt, dst);
done:
  tpdp_spec_destroy(sf);
  tpdp_spec_destroy(stt);
  return res;
}

static tpdp_status check_seq_dim(const tpdp_tensor *t, int seq_dim) {
  if (seq_dim < 0 || seq_dim >= t->ndim)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "sequence dim %d outside [0, %d) of the activation",
                    seq_dim, t->ndim);
  return TPDP_SUCCESS;
}

/* A move on the sequence dim `seq_dim` of `full`, the activation in its
 * global shape (src or dst), from placement `from` to `to` on m's TP dim. */
static tpdp_status move_sequence(const tpdp_module *m, const tpdp_tensor *src,
                                 tpdp_placement from, tpdp_placement to,
                                 const tpdp_tensor *full, int seq_dim,
                                 tpdp_tensor *dst) {
  tp_module_state *st = NULL;
  CHECK(module_state(m, &st));
  CHECK(check_seq_dim(full, seq_dim));
  return move_activation(st, src, from, to, full->shape, dst);
}

tpdp_status tpdp_tp_rowwise_output_reduce_scatter(const tpdp_module *m,
                                                  const tpdp_tensor *partial,
                                                  int seq_dim,
                                                  tpdp_tensor *shard) {
  TPDP_API_ENTRY;
  CHECK_PTR(partial);
  CHECK_PTR(shard);
  return move_sequence(m, partial, tpdp_partial(TPDP_OP_SUM),
                       tpdp_shard(seq_dim), partial, seq_dim, shard);
}

tpdp_status tpdp_tp_sequence_scatter_grad(const tpdp_module *m,
                                          const tpdp_tensor *full_grad,
                                          int seq_dim,
                                          tpdp_tensor *shard_grad) {
  TPDP_API_ENTRY;
  return tpdp_tp_rowwise_output_reduce_scatter(m, full_grad, seq_dim,
                                               shard_grad);
}

tpdp_status tpdp_tp_sequence_gather(const tpdp_module *m,
                                    const tpdp_tensor *shard, int seq_dim,
                                    tpdp_tensor *full) {
  TPDP_API_ENTRY;
  CHECK_PTR(shard);
  CHECK_PTR(full);
  return move_sequence(m, shard, tpdp_shard(seq_dim), tpdp_replicate(), full,
                       seq_dim, full);
}

static tpdp_status reduce_sp_grads(tpdp_module *m, const char *prefix,
                                   int level, void *vctx) {
  (void)prefix;
  (void)level;
  (void)vctx;
  tp_module_state *st = tpdp_module_attached_state(m, TP_STYLE_STATE_KEY);
  if (st == NULL || st->style != TPDP_STYLE_SEQUENCE_PARALLEL)
    return TPDP_SUCCESS;
  for (int i = 0; i < tpdp_module_num_params(m); i++) {
    tpdp_param *p = tpdp_module_param(m, i, NULL);
    const tpdp_tensor *g = tpdp_param_grad(p);
    if (g == NULL) continue;
    tpdp_tensor view = *g;
    CHECK(tpdp_allreduce(st->tp_comm, &view, &view, TPDP_OP_SUM));
  }
  return TPDP_SUCCESS;
}

tpdp_status tpdp_tp_reduce_replicated_grads(tpdp_module *root) {
  TPDP_API_ENTRY;
  CHECK_PTR(root);
  return tpdp_module_apply(root, reduce_sp_grads, NULL);
}
