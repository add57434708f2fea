// SPDX-License-Identifier: BSD-3-Clause
/* examples/train_mlp: the module tree, its modules named as a PyTorch
 * ResidualMLP's, holding the model's full tensors (see train.h). */
#include <stdlib.h>
#include <string.h>

#include "examples/common/tree.h"
#include "examples/train_mlp/train.h"

static const char *class_of(const char *path) {
  const char *last = strrchr(path, '.');
  last = last ? last + 1 : path;
  if (strcmp(path, "layers") == 0) return "ModuleList";
  if (strncmp(path, "layers.", 7) == 0 && strchr(path + 7, '.') == NULL)
    return "Block";
  if (strcmp(last, "norm") == 0) return "LayerNorm";
  return "Linear";
}

tpdp_status build_tree(const mlp_shape *s, uint64_t seed, model_tree *t) {
  memset(t, 0, sizeof *t);
  t->shape = *s;
  t->nparams = mlp_num_params(s);
  t->params = calloc((size_t)t->nparams, sizeof *t->params);
  t->names = calloc((size_t)t->nparams, sizeof *t->names);
  t->full = calloc((size_t)t->nparams, sizeof *t->full);
  t->full_grad = calloc((size_t)t->nparams, sizeof *t->full_grad);
  if (!t->params || !t->names || !t->full || !t->full_grad)
    return TPDP_ERR_OUT_OF_MEMORY;
  tpdp_status st = tpdp_module_create("ResidualMLP", &t->root);
  if (st != TPDP_SUCCESS) return st;
  tpdp_device cpu = {TPDP_DEVICE_CPU, 0};
  for (int i = 0; i < t->nparams; i++) {
    int ndim;
    int64_t shape[2];
    mlp_param_info(s, i, t->names[i], sizeof t->names[i], &ndim, shape);
    int64_t n = ndim == 2 ? shape[0] * shape[1] : shape[0];
    t->full[i] = calloc((size_t)n, sizeof(float));
    t->full_grad[i] = calloc((size_t)n, sizeof(float));
    if (!t->full[i] || !t->full_grad[i]) return TPDP_ERR_OUT_OF_MEMORY;
    mlp_init_param(s, i, seed, t->full[i]);
    char path[64];
    snprintf(path, sizeof path, "%s", t->names[i]);
    char *dot = strrchr(path, '.');
    *dot = '\0';
    tpdp_module *m = NULL;
    if ((st = ex_module_at(t->root, path, class_of, &m)) != TPDP_SUCCESS)
      return st;
    tpdp_tensor tensor, grad;
    tpdp_tensor_init(&tensor, t->full[i], TPDP_F32, cpu, ndim, shape);
    tpdp_tensor_init(&grad, t->full_grad[i], TPDP_F32, cpu, ndim, shape);
    tpdp_param *p = NULL;
    if ((st = tpdp_param_create(&tensor, &p)) != TPDP_SUCCESS) return st;
    tpdp_param_set_grad(p, &grad);
    st = tpdp_module_add_param(m, dot + 1, p);
    tpdp_param_release(p); /* the module holds its reference */
    if (st != TPDP_SUCCESS) return st;
    t->params[i] = p;
  }
  return TPDP_SUCCESS;
}

void free_tree(model_tree *t) {
  tpdp_module_destroy(t->root);
  for (int i = 0; i < t->nparams && t->full; i++) {
    free(t->full[i]);
    free(t->full_grad[i]);
  }
  free(t->full);
  free(t->full_grad);
  free(t->params);
  free(t->names);
}

int64_t full_numel(const mlp_shape *s, int i) {
  int ndim;
  int64_t shape[2];
  char name[64];
  mlp_param_info(s, i, name, sizeof name, &ndim, shape);
  return ndim == 2 ? shape[0] * shape[1] : shape[0];
}
