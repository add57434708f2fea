// SPDX-License-Identifier: BSD-3-Clause
/*
 * Internal to the module tree's files of core/, what they share: the
 * structs, and the few functions one file offers the others. Not
 * installed, not used by tp/ (which goes through tpdp/module.h).
 *
 *   module.c         the tree: modules, children, parameter registrations,
 *                    buffers, names, FQNs, pre-order traversal
 *   param.c          parameters: views, spec and form, row shard, handle
 *                    states
 *   module_hooks.c   forward and backward hooks and their runs
 *   module_state.c   training states, management marks and units, state
 *                    attached by the layers above
 *   module_report.c  FQN cleaning, the parameter -> FQNs map, the sharded
 *                    tree report
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

/* State a layer attached to a module (tpdp_module_attach_state). */
typedef struct {
  char *key;
  void *state;
  void (*free_fn)(void *);
} core_attached_state;

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
  /* state attached by the layers above, one per key */
  core_attached_state *attached;
  int nattached;
};

/* TPDP_ERR_NULL_POINTER naming `arg` for NULL; TPDP_ERR_INVALID_ARGUMENT
 * for a module that was destroyed, as far as its freed memory still shows
 * the cleared magic (reading it is undefined behaviour: a best-effort
 * check). */
tpdp_status core_module_check(const tpdp_module *m, const char *arg);

/* Declares `char var[256]` holding m's label, "fqn[Class]"
 * (tpdp_module_label), as every message names a module. */
#define MODULE_LABEL(m, var) \
  char var[256];             \
  tpdp_module_label((m), var, sizeof var)

/* Bumps tpdp_module_tree_generation (module.c): called by every change
 * that can bring a DTensor parameter into a tree. */
void core_module_tree_changed(void);

/* What a module holds besides its tree, freed by tpdp_module_destroy with
 * the module: its hook lists (module_hooks.c), and its attached states
 * (their destructors run here) and unit names (module_state.c). */
void core_module_hooks_free(tpdp_module *m);
void core_module_state_free(tpdp_module *m);

/* A state enum for core_find_state: the i-th value of an array of it, and
 * the name of a value. */
typedef struct {
  int (*at)(const void *list, int i);
  const char *(*name)(int state);
} core_state_kind;

/* The part of tpdp_param_check_state and tpdp_module_check_state before
 * their messages (module_state.c): *in = 1 when `state` is one of the n
 * states of `allowed` (an array of kind's enum); else *in = 0 and the
 * first 16 of them named "{A, B}" into set. TPDP_ERR_INVALID_ARGUMENT for
 * a bad list. */
tpdp_status core_find_state(const core_state_kind *kind, const void *allowed,
                            int n, int state, int *in, char *set, size_t len);

#endif /* TPDP_CORE_MODULE_INTERNAL_H */
