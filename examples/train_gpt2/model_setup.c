// SPDX-License-Identifier: BSD-3-Clause
/* examples/train_gpt2: the module tree with Hugging Face's GPT2LMHeadModel
 * names, the safetensors file checked against the model, and the TP
 * layouts from tp/ with each rank reading only its slices (see train.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "examples/common/tree.h"
#include "examples/train_gpt2/train.h"

/* The tensors of the file against the model: every parameter present with
 * its shape and a readable dtype; nothing else but the attention mask
 * buffers and a tied lm_head.weight. Checked whole by every rank, so the
 * error is the same everywhere. */
/* The tensor `name` of the model file: its index, -1 if absent. */
static int find_tensor(const trainer *t, const char *name) {
  int i = -1;
  return tpdp_safetensors_find(t->st, name, &i) == TPDP_SUCCESS ? i : -1;
}

/* Tensor k's description (the file is open and k in range). */
static tpdp_safetensors_tensor tensor_at(const trainer *t, int k) {
  tpdp_safetensors_tensor d;
  memset(&d, 0, sizeof d);
  tpdp_safetensors_tensor_at(t->st, k, &d);
  return d;
}

int check_file(trainer *t) {
  const char *path = t->model_path;
  t->prefix =
      find_tensor(t, "transformer.wte.weight") >= 0 ? "transformer." : "";
  char name[160], want[96], have[96], cfg[256];
  const gpt2_config *c = &t->c;
  snprintf(cfg, sizeof cfg,
           "%s/config.json: n_layer %d, n_embd %d, n_head %d, vocab_size %d, "
           "n_positions %d, n_inner %d",
           t->o.model_dir, c->n_layer, c->n_embd, c->n_head, c->vocab,
           c->n_positions, c->n_inner);
  for (int i = 0; i < t->np; i++) {
    const gpt2_param_info *in = &t->info[i];
    snprintf(name, sizeof name, "%s%s", t->prefix, in->name);
    int k = find_tensor(t, name);
    if (k < 0)
      return ex_fail(&t->err, "%s: tensor '%s' is missing (%s)", path, name,
                     cfg);
    tpdp_safetensors_tensor s = tensor_at(t, k);
    tpdp_shape_format(in->ndim, in->shape, want, sizeof want);
    tpdp_shape_format(s.ndim, s.shape, have, sizeof have);
    if (strcmp(want, have) != 0)
      return ex_fail(&t->err, "%s: tensor '%s' has shape %s; %s needs %s", path,
                     name, have, cfg, want);
    if (s.dtype != TPDP_F32 && s.dtype != TPDP_F16 && s.dtype != TPDP_BF16 &&
        s.dtype != TPDP_F64)
      return ex_fail(&t->err,
                     "%s: tensor '%s' is %s; only F32, F16, BF16 and F64 are "
                     "read",
                     path, name, s.dtype_name);
  }
  const int n = tpdp_safetensors_count(t->st);
  for (int k = 0; k < n; k++) {
    tpdp_safetensors_tensor s = tensor_at(t, k);
    size_t pl = strlen(t->prefix);
    int known = 0;
    if (strcmp(s.name, "lm_head.weight") == 0) {
      snprintf(name, sizeof name, "%swte.weight", t->prefix);
      tpdp_safetensors_tensor w = tensor_at(t, find_tensor(t, name));
      tpdp_shape_format(w.ndim, w.shape, want, sizeof want);
      tpdp_shape_format(s.ndim, s.shape, have, sizeof have);
      if (strcmp(want, have) != 0)
        return ex_fail(&t->err,
                       "%s: tensor 'lm_head.weight' has shape %s; tied to "
                       "'%s' it needs %s",
                       path, have, name, want);
      continue;
    }
    if (strncmp(s.name, t->prefix, pl) == 0) {
      const char *rest = s.name + pl;
      for (int i = 0; i < t->np && !known; i++)
        known = strcmp(rest, t->info[i].name) == 0;
      int l, used = 0;
      if (!known && sscanf(rest, "h.%d.attn.%n", &l, &used) == 1 && used > 0 &&
          l >= 0 && l < c->n_layer &&
          (strcmp(rest + used, "bias") == 0 ||
           strcmp(rest + used, "masked_bias") == 0))
        known = 1; /* the causal-mask buffers: the model builds its own */
    }
    if (!known)
      return ex_fail(&t->err,
                     "%s: tensor '%s' is not part of the GPT-2 that %s "
                     "describes",
                     path, s.name, cfg);
  }
  return 0;
}

/* The box [offset, offset + local) of the file's tensor k seen in `view`,
 * as f32, into out (tpdp's safetensors reader: only the box's bytes). */
static int read_box(trainer *t, int k, int ndim, const int64_t *view,
                    const int64_t *offset, const int64_t *local, float *out) {
  tpdp_tensor dst;
  tpdp_device cpu = {TPDP_DEVICE_CPU, 0};
  TRY(tpdp_tensor_init(&dst, out, TPDP_F32, cpu, ndim, local));
  TRY(tpdp_safetensors_read_box(t->st, k, ndim, view, offset, &dst));
  return 0;
}

/* Parameter index of a Hugging Face FQN ("transformer.h.0.ln_1.bias"). */
static int param_index(const trainer *t, const char *fqn) {
  const char *name = strncmp(fqn, "transformer.", 12) == 0 ? fqn + 12 : fqn;
  for (int i = 0; i < t->np; i++)
    if (strcmp(t->info[i].name, name) == 0) return i;
  return -1;
}

/* Writes the box [offset, offset + local) of parameter i (seen in `view`):
 * from the file, or GPT-2's initialisation. */
static int load_box(trainer *t, int i, int ndim, const int64_t *view,
                    const int64_t *offset, const int64_t *local, float *out) {
  if (t->o.load_dir != NULL) return 0; /* the checkpoint fills it */
  if (t->o.model_dir == NULL) {
    gpt2_init_box(&t->c, i, t->o.seed, ndim, view, offset, local, out);
    return 0;
  }
  char name[160];
  snprintf(name, sizeof name, "%s%s", t->prefix, t->info[i].name);
  if (read_box(t, find_tensor(t, name), ndim, view, offset, local, out) != 0)
    return -1;
  int head_k = find_tensor(t, "lm_head.weight");
  if (i != GPT2_WTE || head_k < 0) return 0;
  /* A tied head's copy must hold the same values: compare this rank's rows
   * (never the whole tensor). */
  int64_t n = 1;
  for (int d = 0; d < ndim; d++) n *= local[d];
  float *head = malloc(sizeof(float) * (size_t)n + 1);
  if (head == NULL) return ex_fail(&t->err, "out of memory");
  int rc = read_box(t, head_k, ndim, view, offset, local, head);
  for (int64_t k = 0; k < n && rc == 0; k++)
    if (head[k] != out[k])
      rc = ex_fail(&t->err,
                   "%s: tensor 'lm_head.weight' differs from '%s' (row %lld): "
                   "only a head tied to the token embedding is supported",
                   t->model_path, name,
                   (long long)(offset[0] + k / (ndim > 1 ? local[1] : 1)));
  free(head);
  return rc;
}

/* tp/'s fill callback: this rank's shard of a sharded parameter. */
static tpdp_status fill_shard(void *ctx, const char *fqn, const tpdp_spec *spec,
                              const int64_t *offset, tpdp_tensor *local) {
  trainer *t = ctx;
  int i = param_index(t, fqn);
  if (i < 0) {
    ex_fail(&t->err, "internal: no parameter named '%s'", fqn);
    t->fill_failed = 1;
    return TPDP_ERR_NOT_FOUND;
  }
  if (load_box(t, i, tpdp_spec_ndim(spec), tpdp_spec_global_shape(spec), offset,
               local->shape, local->data) != 0) {
    t->fill_failed = 1;
    return TPDP_ERR_IO;
  }
  return TPDP_SUCCESS;
}

/* The class of a module of GPT2LMHeadModel, by its path. */
static const char *class_of(const char *path) {
  static const struct {
    const char *suffix, *cls;
  } k[] = {{"transformer", "GPT2Model"}, {"wte", "Embedding"},
           {"wpe", "Embedding"},         {"h", "ModuleList"},
           {"ln_1", "LayerNorm"},        {"ln_2", "LayerNorm"},
           {"ln_f", "LayerNorm"},        {"attn", "GPT2Attention"},
           {"mlp", "GPT2MLP"},           {"lm_head", "Linear"}};
  const char *last = strrchr(path, '.');
  last = last ? last + 1 : path;
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
    if (strcmp(last, k[i].suffix) == 0) return k[i].cls;
  if (last[0] >= '0' && last[0] <= '9') return "GPT2Block";
  return "Conv1D"; /* c_attn, c_proj, c_fc */
}

/* The module tree with Hugging Face's GPT2LMHeadModel names; replicated
 * parameters filled here, sharded ones as metadata for tp/ to fill. */
int build_tree(trainer *t) {
  TRY(tpdp_module_create("GPT2LMHeadModel", &t->root));
  tpdp_device cpu = {TPDP_DEVICE_CPU, 0};
  for (int i = 0; i < t->np; i++) {
    const gpt2_param_info *in = &t->info[i];
    snprintf(t->fqn[i], sizeof t->fqn[i], "transformer.%s", in->name);
    char path[96];
    snprintf(path, sizeof path, "%s", t->fqn[i]);
    char *dot = strrchr(path, '.');
    *dot = '\0';
    tpdp_module *m = NULL;
    TRY(ex_module_at(t->root, path, class_of, &m));
    int64_t n = in->ndim == 2 ? in->shape[0] * in->shape[1] : in->shape[0];
    float *data = NULL;
    if (in->tp == GPT2_TP_REPLICATE) {
      t->storage[i] = calloc((size_t)n + 1, sizeof(float));
      t->grad_storage[i] = calloc((size_t)n + 1, sizeof(float));
      if (!t->storage[i] || !t->grad_storage[i])
        return ex_fail(&t->err, "out of memory for '%s'", t->fqn[i]);
      int64_t zero[2] = {0, 0};
      if (load_box(t, i, in->ndim, in->shape, zero, in->shape, t->storage[i]) !=
          0)
        return -1;
      data = t->storage[i];
    }
    tpdp_tensor tensor;
    TRY(tpdp_tensor_init(&tensor, data, TPDP_F32, cpu, in->ndim, in->shape));
    tpdp_param *p = NULL;
    TRY(tpdp_param_create(&tensor, &p));
    if (data != NULL) {
      tpdp_tensor grad = tensor;
      grad.data = t->grad_storage[i];
      tpdp_param_set_grad(p, &grad);
    }
    tpdp_status st = tpdp_module_add_param(m, dot + 1, p);
    tpdp_param_release(p); /* the module holds its reference */
    TRY(st);
    t->params[i] = p;
  }
  /* The LM head is tied: the same parameter object as wte's. */
  tpdp_module *head = NULL;
  TRY(ex_module_at(t->root, "lm_head", class_of, &head));
  TRY(tpdp_module_add_param(head, "weight", t->params[GPT2_WTE]));
  TRY(tpdp_module_get_submodule(t->root, "transformer.wte", &t->wte));
  return 0;
}

/* A tp/ call that runs fill_shard: when the callback failed, its own
 * message (naming the file and tensor) is the one to report. */
#define TRY_FILL(call)                                       \
  do {                                                       \
    t->fill_failed = 0;                                      \
    tpdp_status st_ = (call);                                \
    if (st_ != TPDP_SUCCESS)                                 \
      return t->fill_failed ? -1 : tpdp_fail(t, #call, st_); \
  } while (0)

/* TP: tp/'s layouts for the sharded modules (each rank filling only its
 * slices), and sequence parallelism's LayerNorms. */
int parallelize(trainer *t) {
  char path[96];
  TRY_FILL(tpdp_tp_parallelize_vocab(t->wte, t->mesh, "tp", fill_shard, t));
  for (int l = 0; l < t->c.n_layer; l++) {
    tpdp_module *qkv, *out, *fc, *proj;
    snprintf(path, sizeof path, "transformer.h.%d.attn.c_attn", l);
    TRY(tpdp_module_get_submodule(t->root, path, &qkv));
    snprintf(path, sizeof path, "transformer.h.%d.attn.c_proj", l);
    TRY(tpdp_module_get_submodule(t->root, path, &out));
    snprintf(path, sizeof path, "transformer.h.%d.mlp.c_fc", l);
    TRY(tpdp_module_get_submodule(t->root, path, &fc));
    snprintf(path, sizeof path, "transformer.h.%d.mlp.c_proj", l);
    TRY(tpdp_module_get_submodule(t->root, path, &proj));
    TRY_FILL(tpdp_tp_parallelize_attention(qkv, out, t->c.n_head,
                                           TPDP_LINEAR_IN_OUT, t->mesh, "tp",
                                           fill_shard, t));
    TRY_FILL(tpdp_tp_parallelize_linear(fc, TPDP_STYLE_COLWISE,
                                        TPDP_LINEAR_IN_OUT, t->mesh, "tp",
                                        fill_shard, t));
    TRY_FILL(tpdp_tp_parallelize_linear(proj, TPDP_STYLE_ROWWISE,
                                        TPDP_LINEAR_IN_OUT, t->mesh, "tp",
                                        fill_shard, t));
  }
  if (t->o.sp) {
    tpdp_tp_plan_entry plan[3] = {
        {"transformer.h.*.ln_1", TPDP_STYLE_SEQUENCE_PARALLEL},
        {"transformer.h.*.ln_2", TPDP_STYLE_SEQUENCE_PARALLEL},
        {"transformer.ln_f", TPDP_STYLE_SEQUENCE_PARALLEL}};
    TRY(tpdp_parallelize(t->root, t->mesh, "tp", plan, 3));
    TRY(tpdp_module_get_submodule(t->root, "transformer.ln_f", &t->sp_module));
  }
  return 0;
}
