// SPDX-License-Identifier: BSD-3-Clause
/* Internal to tp/: the state the transformer layouts (tp/layout.c,
 * tp/head_shard.c, tp/vocab_parallel.c) attach to each module they
 * parallelize, and the two-phase prepare / commit they share. Not
 * installed. */
#ifndef TPDP_TP_LAYOUT_INTERNAL_H
#define TPDP_TP_LAYOUT_INTERNAL_H

#include "tp/tp_internal.h"
#include "tpdp/module.h"

/* What made a module's layout (functions check they get the right kind). */
typedef enum {
  TP_LAYOUT_LINEAR = 0,
  TP_LAYOUT_HEADS = 1,
  TP_LAYOUT_VOCAB = 2
} tp_layout_kind;

/* One parameter to lay out: its name in the module, the global view shape
 * (a row-major reshape of its full tensor) and the placement on the TP
 * dim. */
typedef struct {
  const char *name;
  int ndim;
  int64_t shape[TPDP_MAX_DIMS];
  tpdp_placement tp;
} tp_layout_req;

typedef struct {
  tpdp_param *param;
  tpdp_spec *spec;
  void *data, *grad; /* local shard and gradient storage */
} tp_layout_entry;

/* Attached to the module under TP_LAYOUT_KEY; freed with the module. */
typedef struct {
  tp_layout_kind kind;
  const tpdp_mesh *mesh;
  int tp_dim;
  tpdp_comm *tp_comm;
  int n;
  tp_layout_entry *entries;
  /* TP_LAYOUT_HEADS: this rank's heads. TP_LAYOUT_VOCAB: rows of V. */
  int64_t first, count, total;
} tp_layout_state;

/* The mesh dim `tp_dim` (index and communicator); errors name the dim. */
tpdp_status tp_layout_resolve(const tpdp_mesh *mesh, const char *tp_dim,
                              int *dim, tpdp_comm **comm);

/* Parameter `name` of m (NULL if absent). */
tpdp_param *tp_layout_find(const tpdp_module *m, const char *name);

/* Phase one: specs, storage and local shards for every request; checks that
 * the module has no parameter outside `req`. Changes nothing in the tree.
 * *out is freed on failure. */
tpdp_status tp_layout_prepare(tpdp_module *m, tp_layout_kind kind,
                              const tp_layout_req *req, int nreq,
                              const tpdp_mesh *mesh, int tp_dim,
                              tpdp_comm *tp_comm, tpdp_tp_fill_fn fill,
                              void *fill_ctx, tp_layout_state **out);

/* Phase two for n prepared modules: units (with `suffix[i]`), states and
 * parameters, all or nothing. The states belong to the modules on success
 * and are freed on failure. */
tpdp_status tp_layout_commit(tpdp_module *const *mods,
                             tp_layout_state *const *states,
                             const char *const *suffix, int n);

void tp_layout_state_free(void *state);

/* TPDP_ERR_ALREADY naming the first module that is a managed unit already
 * (checked before any work, so nothing is loaded for nothing). */
tpdp_status tp_layout_check_modules(tpdp_module *const *mods, int n);

/* The state of a module made with `kind`, else TPDP_ERR_NOT_FOUND naming
 * the module and `what` (e.g. "tpdp_tp_parallelize_vocab"). */
tpdp_status tp_layout_get(const tpdp_module *m, tp_layout_kind kind,
                          const char *what, tp_layout_state **out);

/* The FQN of parameter `name` of m ("fqn.name", or "name" under a root). */
void tp_layout_param_fqn(const tpdp_module *m, const char *name, char *buf,
                         size_t len);

#endif /* TPDP_TP_LAYOUT_INTERNAL_H */
