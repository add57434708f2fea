// SPDX-License-Identifier: BSD-3-Clause
/* The state dict (FQN -> local tensor + spec, plus string metadata), its
 * construction from a module tree, and the options' size check. */
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt_internal.h"

/* ------------------------------------------------------------- options */

tpdp_status ckpt_options(const tpdp_checkpoint_options *opts,
                         tpdp_checkpoint_options *out) {
  tpdp_checkpoint_options dflt = TPDP_CHECKPOINT_OPTIONS_INIT;
  *out = dflt;
  if (opts == NULL) return TPDP_SUCCESS;
  /* The smallest struct is the first version's: size, version, verify. */
  size_t min = offsetof(tpdp_checkpoint_options, verify) + sizeof(int);
  if (opts->size < min || opts->size > sizeof *out)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "options.size is %zu: expected between %zu and %zu (this "
                    "library's tpdp_checkpoint_options, version %u); "
                    "initialise with TPDP_CHECKPOINT_OPTIONS_INIT",
                    opts->size, min, sizeof *out,
                    TPDP_CHECKPOINT_OPTIONS_VERSION);
  if (opts->version == 0 || opts->version > TPDP_CHECKPOINT_OPTIONS_VERSION)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "options.version is %u but this library knows versions "
                    "1 to %u of tpdp_checkpoint_options; initialise with "
                    "TPDP_CHECKPOINT_OPTIONS_INIT",
                    opts->version, TPDP_CHECKPOINT_OPTIONS_VERSION);
  /* An older, smaller struct: its known prefix over the defaults. */
  memcpy(out, opts, opts->size);
  out->size = sizeof *out;
  out->version = TPDP_CHECKPOINT_OPTIONS_VERSION;
  return TPDP_SUCCESS;
}

/* ------------------------------------------------------------ entries */

tpdp_status ckpt_check_entry(const char *fqn, const tpdp_tensor *local,
                             const tpdp_spec *spec) {
  if (fqn[0] == '\0')
    return TPDP_ERR(TPDP_ERR_EMPTY_NAME, "state dict FQNs must be non-empty");
  if (strcmp(fqn, "__metadata__") == 0)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "'__metadata__' is reserved by the safetensors format "
                    "and cannot name a tensor");
  if (local->ndim < 0 || local->ndim > TPDP_MAX_DIMS)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "tensor '%s' has ndim %d outside [0, %d]", fqn, local->ndim,
                    TPDP_MAX_DIMS);
  if (tpdp_dtype_size(local->dtype) == 0)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT, "tensor '%s' has dtype %d", fqn,
                    (int)local->dtype);
  for (int d = 0; d < local->ndim; d++)
    if (local->shape[d] < 0)
      return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                      "tensor '%s' has size %lld in dim %d", fqn,
                      (long long)local->shape[d], d);
  /* A view written by hand can hold what tpdp_tensor_init refuses. */
  if (core_shape_size(local->ndim, local->shape, tpdp_dtype_size(local->dtype),
                      NULL) != 0) {
    char sh[160];
    tpdp_shape_format(local->ndim, local->shape, sh, sizeof sh);
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "tensor '%s' has shape %s of %s, which overflows: its "
                    "byte size is above INT64_MAX",
                    fqn, sh, tpdp_dtype_name(local->dtype));
  }
  if (tpdp_tensor_numel(local) > 0 && local->data == NULL)
    return TPDP_ERR(TPDP_ERR_NULL_POINTER,
                    "tensor '%s' has %lld elements but NULL data", fqn,
                    (long long)tpdp_tensor_numel(local));
  if (spec == NULL) return TPDP_SUCCESS;
  const tpdp_mesh *mesh = tpdp_spec_mesh(spec);
  const tpdp_placement *pl = tpdp_spec_placements(spec);
  for (int m = 0; m < tpdp_mesh_ndim(mesh); m++)
    if (pl[m].kind == TPDP_PLACEMENT_PARTIAL)
      return TPDP_ERR(TPDP_ERR_UNSUPPORTED,
                      "tensor '%s' is Partial(%s) on mesh dim '%s': a "
                      "checkpoint holds global values; redistribute it to "
                      "Replicate or Shard first",
                      fqn, tpdp_reduce_op_name(pl[m].op),
                      tpdp_mesh_dim_name(mesh, m));
  tpdp_dtensor dt;
  tpdp_status st = tpdp_dtensor_unflatten(local, spec, &dt);
  if (st != TPDP_SUCCESS)
    return TPDP_ERR(st, "tensor '%s': %s", fqn, core_error_detail());
  return TPDP_SUCCESS;
}

/* ---------------------------------------------------------- state dict */

tpdp_status tpdp_state_dict_create(tpdp_state_dict **out) {
  TPDP_API_ENTRY;
  CHECK_PTR(out);
  *out = NULL;
  tpdp_state_dict *sd = NULL;
  CHECK(TPDP_CALLOC(sd, 1));
  *out = sd;
  return TPDP_SUCCESS;
}

/* ------------------------------------------------------------ metadata */

void ckpt_kv_free(ckpt_kv *items, int n) {
  for (int i = 0; i < n; i++) {
    free(items[i].key);
    free(items[i].val);
  }
  free(items);
}

const char *ckpt_kv_get(const ckpt_kv *items, int n, const char *key) {
  for (int i = 0; i < n; i++)
    if (strcmp(items[i].key, key) == 0) return items[i].val;
  return NULL;
}

tpdp_status ckpt_kv_set(ckpt_kv **items, int *n, int *cap, const char *key,
                        const char *val) {
  char *v = core_strdup(val);
  if (v == NULL)
    return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "out of memory copying '%s'", key);
  for (int i = 0; i < *n; i++)
    if (strcmp((*items)[i].key, key) == 0) {
      free((*items)[i].val);
      (*items)[i].val = v;
      return TPDP_SUCCESS;
    }
  char *k = core_strdup(key);
  tpdp_status st =
      k ? core_grow((void **)items, cap, *n + 1, sizeof **items)
        : TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "out of memory copying '%s'", key);
  if (st != TPDP_SUCCESS) {
    free(k);
    free(v);
    return st;
  }
  (*items)[(*n)++] = (ckpt_kv){k, v};
  return TPDP_SUCCESS;
}

tpdp_status tpdp_state_dict_destroy(tpdp_state_dict *sd) {
  TPDP_API_ENTRY;
  if (sd == NULL) return TPDP_SUCCESS;
  for (int i = 0; i < sd->n; i++) free(sd->e[i].fqn);
  free(sd->e);
  ckpt_kv_free(sd->meta, sd->nmeta);
  free(sd);
  return TPDP_SUCCESS;
}

static int find_entry(const tpdp_state_dict *sd, const char *fqn) {
  for (int i = 0; i < sd->n; i++)
    if (strcmp(sd->e[i].fqn, fqn) == 0) return i;
  return -1;
}

tpdp_status tpdp_state_dict_add(tpdp_state_dict *sd, const char *fqn,
                                const tpdp_tensor *local,
                                const tpdp_spec *spec) {
  TPDP_API_ENTRY;
  CHECK_PTR(sd);
  CHECK_PTR(fqn);
  CHECK_PTR(local);
  CHECK(ckpt_check_entry(fqn, local, spec));
  if (find_entry(sd, fqn) >= 0)
    return TPDP_ERR(TPDP_ERR_DUPLICATE, "the state dict already has '%s'", fqn);
  CHECK(core_grow((void **)&sd->e, &sd->cap, sd->n + 1, sizeof *sd->e));
  char *name = core_strdup(fqn);
  if (name == NULL)
    return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "out of memory copying '%s'", fqn);
  sd->e[sd->n] = (ckpt_entry){name, *local, spec, 0, {0}, {0}};
  sd->n++;
  return TPDP_SUCCESS;
}

tpdp_status tpdp_state_dict_add_box(tpdp_state_dict *sd, const char *fqn,
                                    const tpdp_tensor *local,
                                    const int64_t *global_shape,
                                    const int64_t *offset) {
  TPDP_API_ENTRY;
  CHECK_PTR(sd);
  CHECK_PTR(fqn);
  CHECK_PTR(local);
  CHECK_PTR(global_shape);
  CHECK_PTR(offset);
  CHECK(ckpt_check_entry(fqn, local, NULL));
  for (int d = 0; d < local->ndim; d++)
    if (offset[d] < 0 || global_shape[d] < 0 ||
        (local->shape[d] > 0 &&
         offset[d] + local->shape[d] > global_shape[d])) {
      char gs[160], ls[160];
      tpdp_shape_format(local->ndim, global_shape, gs, sizeof gs);
      tpdp_shape_format(local->ndim, local->shape, ls, sizeof ls);
      return TPDP_ERR(TPDP_ERR_SHAPE_MISMATCH,
                      "tensor '%s': a box of shape %s at offset %lld in dim "
                      "%d does not fit the global shape %s",
                      fqn, ls, (long long)offset[d], d, gs);
    }
  CHECK(tpdp_state_dict_add(sd, fqn, local, NULL));
  ckpt_entry *e = &sd->e[sd->n - 1];
  e->boxed = 1;
  for (int d = 0; d < local->ndim; d++) {
    e->box_offset[d] = offset[d];
    e->box_global[d] = global_shape[d];
  }
  return TPDP_SUCCESS;
}

typedef struct {
  tpdp_state_dict *sd;
  const char *prefix;
  core_ptrmap seen; /* parameters and buffer data already added */
  tpdp_status st;
} module_ctx;

/* prefix + raw cleaned of the default wrapper prefixes (the cleaned name
 * is never longer than raw, so it is cleaned in place). */
static tpdp_status add_named(module_ctx *c, const char *raw,
                             const tpdp_tensor *t, const tpdp_spec *spec) {
  size_t plen = c->prefix ? strlen(c->prefix) : 0, rlen = strlen(raw);
  char *fqn = malloc(plen + rlen + 1);
  if (fqn == NULL)
    return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "out of memory naming '%s'", raw);
  if (plen) memcpy(fqn, c->prefix, plen);
  memcpy(fqn + plen, raw, rlen + 1);
  tpdp_fqn_clean(fqn + plen, NULL, 0, fqn + plen, rlen + 1);
  tpdp_status st = tpdp_state_dict_add(c->sd, fqn, t, spec);
  free(fqn);
  return st;
}

/* prefix + name (the module visitor's dotted prefix and a member). */
static tpdp_status add_member(module_ctx *c, const char *prefix,
                              const char *name, const tpdp_tensor *t,
                              const tpdp_spec *spec) {
  core_strbuf raw = {0};
  core_sb_puts(&raw, prefix);
  core_sb_puts(&raw, name);
  tpdp_status st = raw.failed ? TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY,
                                         "out of memory naming '%s'", name)
                              : add_named(c, raw.s, t, spec);
  core_sb_free(&raw);
  return st;
}

static tpdp_status visit(tpdp_module *m, const char *prefix, int level,
                         void *vctx) {
  (void)level;
  module_ctx *c = vctx;
  for (int i = 0; i < tpdp_module_num_params(m); i++) {
    const char *pn = NULL;
    tpdp_param *p = tpdp_module_param(m, i, &pn);
    if (core_ptrmap_get(&c->seen, p) >= 0) continue; /* shared: once */
    if (core_ptrmap_put(&c->seen, p, 1) != 0)
      return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
    CHECK(add_member(c, prefix, pn, tpdp_param_tensor(p), tpdp_param_spec(p)));
  }
  for (int i = 0; i < tpdp_module_num_buffers(m); i++) {
    const char *bn = NULL;
    const tpdp_tensor *b = tpdp_module_buffer(m, i, &bn);
    /* A buffer registered twice views the same memory: once. */
    if (b->data != NULL) {
      if (core_ptrmap_get(&c->seen, b->data) >= 0) continue;
      if (core_ptrmap_put(&c->seen, b->data, 1) != 0)
        return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
    }
    CHECK(add_member(c, prefix, bn, b, NULL));
  }
  return TPDP_SUCCESS;
}

tpdp_status tpdp_state_dict_add_module(tpdp_state_dict *sd, tpdp_module *root,
                                       const char *prefix) {
  TPDP_API_ENTRY;
  CHECK_PTR(sd);
  CHECK_PTR(root);
  module_ctx c = {sd, prefix, {0}, TPDP_SUCCESS};
  if (core_ptrmap_init(&c.seen, 64) != 0)
    return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
  int before = sd->n;
  tpdp_status st = tpdp_module_apply(root, visit, &c);
  core_ptrmap_free(&c.seen);
  if (st != TPDP_SUCCESS) {
    /* Nothing added on failure. */
    for (int i = before; i < sd->n; i++) free(sd->e[i].fqn);
    sd->n = before;
  }
  return st;
}

int tpdp_state_dict_count(const tpdp_state_dict *sd) { return sd ? sd->n : 0; }

tpdp_status tpdp_state_dict_entry_at(const tpdp_state_dict *sd, int i,
                                     tpdp_state_dict_entry *out) {
  TPDP_API_ENTRY;
  CHECK_PTR(sd);
  CHECK_PTR(out);
  if (i < 0 || i >= sd->n)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "entry %d outside [0, %d) of the state dict", i, sd->n);
  out->fqn = sd->e[i].fqn;
  out->local = sd->e[i].local;
  out->spec = sd->e[i].spec;
  return TPDP_SUCCESS;
}

tpdp_status tpdp_state_dict_find(const tpdp_state_dict *sd, const char *fqn,
                                 int *index) {
  TPDP_API_ENTRY;
  CHECK_PTR(sd);
  CHECK_PTR(fqn);
  CHECK_PTR(index);
  int i = find_entry(sd, fqn);
  if (i < 0)
    return TPDP_ERR(TPDP_ERR_NOT_FOUND, "the state dict has no '%s'", fqn);
  *index = i;
  return TPDP_SUCCESS;
}

tpdp_status tpdp_state_dict_set_meta(tpdp_state_dict *sd, const char *key,
                                     const char *value) {
  TPDP_API_ENTRY;
  CHECK_PTR(sd);
  CHECK_PTR(key);
  CHECK_PTR(value);
  if (key[0] == '\0')
    return TPDP_ERR(TPDP_ERR_EMPTY_NAME, "metadata keys must be non-empty");
  return ckpt_kv_set(&sd->meta, &sd->nmeta, &sd->meta_cap, key, value);
}

const char *tpdp_state_dict_get_meta(const tpdp_state_dict *sd,
                                     const char *key) {
  if (sd == NULL || key == NULL) return NULL;
  return ckpt_kv_get(sd->meta, sd->nmeta, key);
}

tpdp_status ckpt_sd_replace_meta(tpdp_state_dict *sd, const ckpt_kv *items,
                                 int n) {
  ckpt_kv *copy = NULL;
  int nc = 0, cap = 0;
  for (int i = 0; i < n; i++) {
    tpdp_status st = ckpt_kv_set(&copy, &nc, &cap, items[i].key, items[i].val);
    if (st != TPDP_SUCCESS) {
      ckpt_kv_free(copy, nc);
      return st;
    }
  }
  ckpt_kv_free(sd->meta, sd->nmeta);
  sd->meta = copy;
  sd->nmeta = nc;
  sd->meta_cap = cap;
  return TPDP_SUCCESS;
}
