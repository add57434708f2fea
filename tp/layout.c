// SPDX-License-Identifier: BSD-3-Clause
/* Transformer layouts (tpdp/tp.h): the two-phase machinery that turns
 * a module's parameters into DTensors whose global shape is a row-major
 * view of the full tensor, and linear modules in either orientation.
 * tp/head_shard.c and tp/vocab_parallel.c build on it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tp/layout_internal.h"

#define TP_LAYOUT_KEY "tp.layout"

void tpdp_chunk_range(int64_t n, int64_t k, int64_t i, int64_t *start,
                      int64_t *len) {
  int64_t s = n > 0 ? n : 0, l = 0;
  if (n > 0 && k >= 1 && i >= 0 && i < k) tp_chunk(n, k, i, &l, &s);
  if (start) *start = s;
  if (len) *len = l;
}

void tp_layout_release_unused(tpdp_module *m, int64_t *freed) {
  tp_layout_state *st = tpdp_module_attached_state(m, TP_LAYOUT_KEY);
  if (st == NULL) return;
  for (int i = 0; i < st->n; i++) {
    tp_layout_entry *e = &st->entries[i];
    const tpdp_tensor *t = tpdp_param_tensor(e->param);
    const tpdp_tensor *g = tpdp_param_grad(e->param);
    if (e->data && t->data != e->data) {
      free(e->data);
      e->data = NULL;
      (*freed)++;
    }
    if (e->grad && (g == NULL || g->data != e->grad)) {
      free(e->grad);
      e->grad = NULL;
      (*freed)++;
    }
  }
}

void tp_layout_state_free(void *ptr) {
  tp_layout_state *st = ptr;
  if (st == NULL) return;
  for (int i = 0; i < st->n; i++) {
    tpdp_spec_destroy(st->entries[i].spec);
    free(st->entries[i].data);
    free(st->entries[i].grad);
  }
  free(st->entries);
  free(st);
}

tpdp_status tp_layout_resolve(const tpdp_mesh *mesh, const char *tp_dim,
                              int *dim, tpdp_comm **comm) {
  tpdp_comm *c = NULL; /* by name: an unknown name lists the mesh's dims */
  CHECK(tpdp_mesh_dim_comm_by_name(mesh, tp_dim, &c));
  *dim = tpdp_mesh_dim_index(mesh, tp_dim);
  *comm = c;
  return TPDP_SUCCESS;
}

tpdp_param *tp_layout_find(const tpdp_module *m, const char *name) {
  for (int i = 0; i < tpdp_module_num_params(m); i++) {
    const char *pname = NULL;
    tpdp_param *p = tpdp_module_param(m, i, &pname);
    if (strcmp(pname, name) == 0) return p;
  }
  return NULL;
}

void tp_layout_param_fqn(const tpdp_module *m, const char *name, char *buf,
                         size_t len) {
  size_t n = tpdp_module_fqn(m, buf, len);
  if (n >= len) n = strlen(buf);
  snprintf(buf + n, len - n, "%s%s", n > 0 ? "." : "", name);
}

static const char *kind_name(tp_layout_kind kind) {
  switch (kind) {
    case TP_LAYOUT_HEADS:
      return "attention heads";
    case TP_LAYOUT_VOCAB:
      return "vocab-parallel";
    default:
      return "linear";
  }
}

/* This rank's local shard of the full tensor `full` seen as `req`'s view:
 * a strided sub-view copied into `local` (Replicate -> Shard is a local
 * slice; no communication). */
static tpdp_status slice_full(const tpdp_tensor *full, const tp_layout_req *req,
                              const int64_t *lshape, const int64_t *loff,
                              tpdp_tensor *local) {
  if (tpdp_tensor_numel(local) == 0) return TPDP_SUCCESS;
  tpdp_tensor view;
  CHECK(tpdp_tensor_init(&view, full->data, full->dtype, full->device,
                         req->ndim, req->shape));
  for (int d = 0; d < req->ndim; d++)
    if (lshape[d] != req->shape[d])
      CHECK(tpdp_tensor_narrow(&view, d, loff[d], lshape[d], &view));
  return tpdp_tensor_copy(local, &view);
}

tpdp_status tp_layout_prepare(tpdp_module *m, tp_layout_kind kind,
                              const tp_layout_req *req, int nreq,
                              const tpdp_mesh *mesh, int tp_dim,
                              tpdp_comm *tp_comm, tpdp_tp_fill_fn fill,
                              void *fill_ctx, tp_layout_state **out) {
  char fqn[320];
  for (int i = 0; i < tpdp_module_num_params(m); i++) {
    const char *pname = NULL;
    tpdp_module_param(m, i, &pname);
    int covered = 0;
    for (int j = 0; j < nreq; j++) covered |= strcmp(req[j].name, pname) == 0;
    if (!covered) {
      tp_layout_param_fqn(m, pname, fqn, sizeof fqn);
      return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                      "parameter '%s' is not part of the %s layout (its "
                      "module may hold only 'weight' and 'bias')",
                      fqn, kind_name(kind));
    }
  }
  tp_layout_state *st = NULL;
  tpdp_status res = TPDP_SUCCESS;
  CHECK(TPDP_CALLOC(st, 1));
  st->kind = kind;
  st->mesh = mesh;
  st->tp_dim = tp_dim;
  st->tp_comm = tp_comm;
  CHECK_GOTO(TPDP_CALLOC(st->entries, (size_t)nreq), res, fail);
  st->n = nreq;
  int nd = tpdp_mesh_ndim(mesh);
  for (int i = 0; i < nreq; i++) {
    tp_layout_entry *e = &st->entries[i];
    tp_layout_param_fqn(m, req[i].name, fqn, sizeof fqn);
    tpdp_param *p = tp_layout_find(m, req[i].name);
    if (p == NULL) {
      res = TPDP_ERR(TPDP_ERR_NOT_FOUND, "module has no parameter '%s'", fqn);
      goto fail;
    }
    const tpdp_tensor *full = tpdp_param_tensor(p);
    char have[96], want[96];
    tpdp_shape_format(full->ndim, full->shape, have, sizeof have);
    tpdp_shape_format(req[i].ndim, req[i].shape, want, sizeof want);
    if (tpdp_param_spec(p) != NULL) {
      res = TPDP_ERR(TPDP_ERR_ALREADY,
                     "parameter '%s' is already a DTensor (parallelized "
                     "twice?)",
                     fqn);
      goto fail;
    }
    if (full->device.type != TPDP_DEVICE_CPU) {
      res = TPDP_ERR(TPDP_ERR_UNSUPPORTED,
                     "parameter '%s' is in device memory; the transformer "
                     "layouts shard host tensors only",
                     fqn);
      goto fail;
    }
    int64_t vn = 1;
    for (int d = 0; d < req[i].ndim; d++) vn *= req[i].shape[d];
    if (vn != tpdp_tensor_numel(full)) {
      res = TPDP_ERR(TPDP_ERR_SHAPE_MISMATCH,
                     "parameter '%s' %s does not have the elements of its "
                     "view %s",
                     fqn, have, want);
      goto fail;
    }
    if (fill == NULL &&
        ((full->data == NULL && vn > 0) || !tpdp_tensor_is_contiguous(full))) {
      res = TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                     "parameter '%s' %s holds no contiguous full tensor to "
                     "shard: pass it, or a fill callback",
                     fqn, have);
      goto fail;
    }
    tpdp_placement pl[TPDP_MAX_DIMS];
    for (int d = 0; d < nd; d++) pl[d] = tpdp_replicate();
    pl[tp_dim] = req[i].tp;
    CHECK_GOTO(tpdp_spec_create(mesh, pl, nd, req[i].ndim, req[i].shape,
                                full->dtype, full->device, &e->spec),
               res, fail);
    int64_t lshape[TPDP_MAX_DIMS], loff[TPDP_MAX_DIMS];
    CHECK_GOTO(
        tpdp_spec_local_shape(e->spec, tpdp_mesh_rank(mesh), lshape, loff), res,
        fail);
    tpdp_tensor local;
    CHECK_GOTO(tpdp_tensor_init(&local, NULL, full->dtype, full->device,
                                req[i].ndim, lshape),
               res, fail);
    size_t bytes = tpdp_tensor_nbytes(&local);
    /* +1: a valid pointer even for an empty shard */
    e->data = calloc(1, bytes + 1);
    e->grad = calloc(1, bytes + 1);
    if (e->data == NULL || e->grad == NULL) {
      res = TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY,
                     "%zu bytes for the local shard of '%s'", bytes, fqn);
      goto fail;
    }
    local.data = e->data;
    if (fill != NULL) {
      tpdp_status fs = fill(fill_ctx, fqn, e->spec, loff, &local);
      if (fs != TPDP_SUCCESS) {
        res = TPDP_ERR(fs, "the fill callback failed for parameter '%s' (%s)",
                       fqn, tpdp_status_string(fs));
        goto fail;
      }
    } else {
      CHECK_GOTO(slice_full(full, &req[i], lshape, loff, &local), res, fail);
    }
    e->param = p;
  }
  *out = st;
  return TPDP_SUCCESS;
fail:
  tp_layout_state_free(st);
  return res;
}

/* Re-point a prepared module's parameters at their shards (cannot fail for
 * valid handles). */
static void commit_params(const tp_layout_state *st) {
  for (int i = 0; i < st->n; i++) {
    const tp_layout_entry *e = &st->entries[i];
    int64_t lshape[TPDP_MAX_DIMS], loff[TPDP_MAX_DIMS];
    tpdp_spec_local_shape(e->spec, tpdp_mesh_rank(st->mesh), lshape, loff);
    tpdp_tensor local, grad;
    tpdp_tensor_init(&local, e->data, tpdp_spec_dtype(e->spec),
                     tpdp_spec_device(e->spec), tpdp_spec_ndim(e->spec),
                     lshape);
    grad = local;
    grad.data = e->grad;
    tpdp_param_set_tensor(e->param, &local);
    tpdp_param_set_grad(e->param, &grad);
    tpdp_param_set_spec(e->param, (const struct tpdp_spec *)e->spec);
  }
}

tpdp_status tp_layout_commit(tpdp_module *const *mods,
                             tp_layout_state *const *states,
                             const char *const *suffix, int n) {
  tpdp_status res = TPDP_SUCCESS;
  int nunits = 0, nattached = 0;
  for (; nunits < n; nunits++)
    CHECK_GOTO(tpdp_module_set_unit(mods[nunits], "TP", suffix[nunits]), res,
               undo);
  for (; nattached < n; nattached++)
    CHECK_GOTO(
        tpdp_module_attach_state(mods[nattached], TP_LAYOUT_KEY,
                                 states[nattached], tp_layout_state_free),
        res, undo);
  for (int i = 0; i < n; i++) commit_params(states[i]);
  return TPDP_SUCCESS;
undo:
  for (int i = 0; i < n; i++) {
    if (i < nattached) /* owned by the module now: removing frees it */
      tpdp_module_attach_state(mods[i], TP_LAYOUT_KEY, NULL, NULL);
    else
      tp_layout_state_free(states[i]);
    if (i < nunits) tpdp_module_clear_unit(mods[i]);
  }
  return res;
}

tpdp_status tp_layout_get(const tpdp_module *m, tp_layout_kind kind,
                          const char *what, tp_layout_state **out) {
  CHECK_PTR(m);
  tp_layout_state *st = tpdp_module_attached_state(m, TP_LAYOUT_KEY);
  if (st == NULL || st->kind != kind) return tp_not_parallelized(m, what);
  *out = st;
  return TPDP_SUCCESS;
}

/* A module about to be laid out must not be managed already. */
static tpdp_status check_free_module(const tpdp_module *m) {
  const char *kind = tpdp_module_unit_kind(m);
  if (kind == NULL) return TPDP_SUCCESS;
  char label[320];
  tpdp_module_label(m, label, sizeof label);
  return TPDP_ERR(TPDP_ERR_ALREADY,
                  "module '%s' is already a managed unit of kind '%s'", label,
                  kind);
}

tpdp_status tp_layout_check_modules(tpdp_module *const *mods, int n) {
  for (int i = 0; i < n; i++) CHECK(check_free_module(mods[i]));
  return TPDP_SUCCESS;
}

tpdp_status tpdp_tp_layout_comm(const tpdp_module *m, tpdp_comm **out) {
  TPDP_API_ENTRY;
  CHECK_PTR(m);
  CHECK_PTR(out);
  tp_layout_state *st = tpdp_module_attached_state(m, TP_LAYOUT_KEY);
  if (st == NULL)
    return tp_not_parallelized(m,
                               "a transformer layout "
                               "(tpdp_tp_parallelize_linear, _attention or "
                               "_vocab)");
  *out = st->tp_comm;
  return TPDP_SUCCESS;
}

/* ------------------------------------------------------------ linear */

tpdp_status tpdp_tp_parallelize_linear(tpdp_module *m, tpdp_tp_style style,
                                       tpdp_linear_layout layout,
                                       const tpdp_mesh *mesh,
                                       const char *tp_dim, tpdp_tp_fill_fn fill,
                                       void *fill_ctx) {
  TPDP_API_ENTRY;
  CHECK_PTR(m);
  CHECK_PTR(mesh);
  CHECK_PTR(tp_dim);
  if (style != TPDP_STYLE_COLWISE && style != TPDP_STYLE_ROWWISE)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "style '%s': a linear module is colwise or rowwise",
                    tpdp_tp_style_name(style));
  if (layout != TPDP_LINEAR_OUT_IN && layout != TPDP_LINEAR_IN_OUT)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT, "invalid linear layout %d",
                    (int)layout);
  CHECK(tp_layout_check_modules(&m, 1));
  int dim;
  tpdp_comm *comm;
  CHECK(tp_layout_resolve(mesh, tp_dim, &dim, &comm));
  char fqn[320], shape[96];
  tpdp_param *w = tp_layout_find(m, "weight");
  tp_layout_param_fqn(m, "weight", fqn, sizeof fqn);
  if (w == NULL)
    return TPDP_ERR(TPDP_ERR_NOT_FOUND, "module has no parameter '%s'", fqn);
  const tpdp_tensor *wt = tpdp_param_tensor(w);
  tpdp_shape_format(wt->ndim, wt->shape, shape, sizeof shape);
  const char *orient = layout == TPDP_LINEAR_OUT_IN ? "[out, in]" : "[in, out]";
  if (wt->ndim != 2)
    return TPDP_ERR(TPDP_ERR_SHAPE_MISMATCH,
                    "parameter '%s' must be a 2-D weight %s, got %s", fqn,
                    orient, shape);
  int out_dim = layout == TPDP_LINEAR_OUT_IN ? 0 : 1;
  int64_t out_size = wt->shape[out_dim];
  /* colwise shards the out dim, rowwise the in dim */
  int shard_dim = style == TPDP_STYLE_COLWISE ? out_dim : 1 - out_dim;
  tp_layout_req req[2] = {
      {"weight", 2, {wt->shape[0], wt->shape[1]}, tpdp_shard(shard_dim)}};
  int nreq = 1;
  tpdp_param *b = tp_layout_find(m, "bias");
  if (b != NULL) {
    const tpdp_tensor *bt = tpdp_param_tensor(b);
    tp_layout_param_fqn(m, "bias", fqn, sizeof fqn);
    tpdp_shape_format(bt->ndim, bt->shape, shape, sizeof shape);
    if (bt->ndim != 1 || bt->shape[0] != out_size)
      return TPDP_ERR(TPDP_ERR_SHAPE_MISMATCH,
                      "parameter '%s' must be a bias [%lld] (the weight's out "
                      "size), got %s",
                      fqn, (long long)out_size, shape);
    req[nreq++] = (tp_layout_req){
        "bias",
        1,
        {out_size},
        style == TPDP_STYLE_COLWISE ? tpdp_shard(0) : tpdp_replicate()};
  }
  tp_layout_state *st = NULL;
  CHECK(tp_layout_prepare(m, TP_LAYOUT_LINEAR, req, nreq, mesh, dim, comm, fill,
                          fill_ctx, &st));
  const char *suffix =
      style == TPDP_STYLE_COLWISE ? " TP COLWISE" : " TP ROWWISE";
  return tp_layout_commit(&m, &st, &suffix, 1);
}

/* ------------------------------------------------- unused TP storage */

static tpdp_status release_visit(tpdp_module *m, const char *prefix, int level,
                                 void *ctx) {
  (void)prefix;
  (void)level;
  tp_styles_release_unused(m, ctx);
  tp_layout_release_unused(m, ctx);
  return TPDP_SUCCESS;
}

tpdp_status tpdp_tp_release_unused_storage(tpdp_module *root, int64_t *nfreed) {
  TPDP_API_ENTRY;
  CHECK_PTR(root);
  int64_t freed = 0;
  CHECK(tpdp_module_apply(root, release_visit, &freed));
  if (nfreed) *nfreed = freed;
  return TPDP_SUCCESS;
}
