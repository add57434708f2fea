// SPDX-License-Identifier: BSD-3-Clause
/*
 * Internal to core/module*.c: the module tree's structs. Not installed, not
 * used by tp/ (which goes through tpdp/module.h).
 */
#ifndef TPDP_CORE_MODULE_INTERNAL_H
#define TPDP_CORE_MODULE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "core/check.h"
#include "tpdp/module.h"

struct tpdp_param {
  int refcount;
  tpdp_tensor tensor;
  tpdp_tensor grad;
  int has_grad;
  const struct tpdp_spec *spec;
  tpdp_param_form form;
  tpdp_handle_state state;
  int64_t row0, total_rows; /* dim-0 shard of the local tensor; total -1:
                               none (tpdp_param_set_row_shard) */
};

typedef struct {
  char *name;
  tpdp_module *module;
} tpdp_child_entry;

typedef struct {
  char *name;
  tpdp_param *param;
} tpdp_param_entry;

typedef struct {
  char *name;
  tpdp_tensor tensor;
} tpdp_buffer_entry;

typedef struct {
  uint64_t id;
  tpdp_forward_hook_fn fn;
  void *ctx;
  int live;
} tpdp_hook_entry;

typedef struct {
  tpdp_hook_entry *items;
  int n, cap;
} tpdp_hook_list;

typedef struct {
  char *key;
  void *ptr;
  void (*free_fn)(void *);
} tpdp_ext_entry;

/* tpdp_module.magic while the module is alive; destroy clears it. */
#define CORE_MODULE_MAGIC 0x4d4f4455u

struct tpdp_module {
  unsigned magic;
  char *class_name;
  char *name; /* name under the parent; NULL for a root */
  tpdp_module *parent;
  tpdp_child_entry *children;
  int nchildren, cap_children;
  tpdp_param_entry *params;
  int nparams, cap_params;
  tpdp_buffer_entry *buffers;
  int nbuffers, cap_buffers;
  /* management */
  tpdp_training_state state;
  int managed;
  int managed_setting;
  char *unit_kind; /* non-NULL: a managed unit */
  char *unit_suffix;
  /* hooks */
  tpdp_hook_list pre_hooks, post_hooks;
  tpdp_hook_list backward_pre_hooks, backward_post_hooks;
  uint64_t next_hook_id;
  int running;       /* nesting depth of hook runs */
  int forward_depth; /* forwards begun and not ended (in_forward) */
  int needs_compact; /* hooks removed while running */
  /* extensions */
  tpdp_ext_entry *exts;
  int nexts;
};

/* TPDP_ERR_NULL_POINTER naming `arg` for NULL; TPDP_ERR_INVALID_ARGUMENT
 * for a module that was destroyed, as far as its freed memory still shows
 * the cleared magic (reading it is undefined behaviour: a best-effort
 * check). */
tpdp_status core_module_check(const tpdp_module *m, const char *arg);

#endif /* TPDP_CORE_MODULE_INTERNAL_H */
