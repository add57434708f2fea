// SPDX-License-Identifier: BSD-3-Clause
/*
 * tpdp module tree (core/): modules, parameters, buffers, FQNs, pre-order
 * traversal, training states, managed units, forward and backward hooks,
 * state attached by the layers above, and the sharded tree report.
 *
 * A framework backend mirrors its model here: one tpdp_module per module
 * (class name, ordered named children, ordered named parameters and
 * buffers). FQNs are dotted paths from the root ("u1.seq.1.weight").
 * Traversal is always pre-order in registration order.
 *
 * Ownership:
 *   - A module created with tpdp_module_create is owned by its creator until
 *     it is added as a child; from then on its parent owns it. Destroying a
 *     module destroys its whole subtree. Destroying a module that has a
 *     parent is an error (TPDP_ERR_STATE): destroy the root.
 *   - A module has at most one parent (a module cannot appear twice in a
 *     tree); parameters, not modules, are what can be shared.
 *   - Parameters are reference-counted. tpdp_param_create returns one
 *     reference owned by the caller; every registration (add_param) holds
 *     one more. Release yours with tpdp_param_release once registered; the
 *     parameter is freed when its last reference goes (at the latest when
 *     the last module that registers it is destroyed).
 *   - Tensor views (data, grad, buffers) are borrowed: tpdp never frees or
 *     copies their memory. Specs are borrowed too and must outlive the
 *     parameter (core never dereferences them; tp/ interprets them).
 *
 * Names: child, parameter and buffer names must be non-empty
 * (TPDP_ERR_EMPTY_NAME) and contain no '.' (TPDP_ERR_INVALID_ARGUMENT).
 * Names are unique per module across children, parameters and buffers
 * (TPDP_ERR_DUPLICATE), like attribute names of a Python module.
 *
 * In messages a module is written as in the tree report: "fqn[Class]",
 * the root as "[Class]".
 *
 * Thread-safety: a tree is not internally synchronised; one thread at a time
 * per tree. Distinct trees are independent.
 */
#ifndef TPDP_MODULE_H
#define TPDP_MODULE_H

#include "tpdp/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpdp_module tpdp_module; /* opaque */
typedef struct tpdp_param tpdp_param;   /* opaque, reference-counted */
struct tpdp_spec;                       /* tp/'s DTensor spec, opaque here */

/* ------------------------------------------------------------- modules */

/* Create a module with no parent. Errors: NULL/empty class name. */
TPDP_API tpdp_status tpdp_module_create(const char *class_name,
                                        tpdp_module **out);

/* Destroy a root module and its subtree (releasing every parameter
 * registration, running the destructors of attached state: tp/'s free the
 * specs of a parallelized module, which hold their mesh, so destroy
 * modules before their mesh). NULL is a no-op.
 * Errors: TPDP_ERR_STATE if `m` has a parent. A module already destroyed
 * (or in a destroyed tree), passed to this or to the module calls that
 * return a status, gives TPDP_ERR_INVALID_ARGUMENT ("has been destroyed"),
 * as far as that goes: the check reads a magic field cleared by destroy in
 * freed memory, which is undefined behaviour and may miss (never rely on
 * it). */
TPDP_API tpdp_status tpdp_module_destroy(tpdp_module *m);

/* Append `child` (a parentless module) to `parent` under `name`; `parent`
 * takes ownership. Errors: TPDP_ERR_CYCLE if child is parent or one of its
 * ancestors; TPDP_ERR_DUPLICATE if `name` is taken in parent; TPDP_ERR_STATE
 * if child already has a parent; name errors as above. On failure nothing
 * changes and the caller keeps ownership of child. */
TPDP_API tpdp_status tpdp_module_add_child(tpdp_module *parent,
                                           const char *name,
                                           tpdp_module *child);

/* Register `p` under `name` (appended; one more reference to p). The same
 * parameter may be registered in several modules or under several names
 * (shared weights). Errors: TPDP_ERR_DUPLICATE, name errors. */
TPDP_API tpdp_status tpdp_module_add_param(tpdp_module *m, const char *name,
                                           tpdp_param *p);

/* Register a buffer (a borrowed tensor view, copied by value) under name.
 * Errors: TPDP_ERR_DUPLICATE, name errors. */
TPDP_API tpdp_status tpdp_module_add_buffer(tpdp_module *m, const char *name,
                                            const tpdp_tensor *buffer);

TPDP_API const char *tpdp_module_class_name(const tpdp_module *m);
/* Name under the parent; "" for a root. */
TPDP_API const char *tpdp_module_name(const tpdp_module *m);
TPDP_API tpdp_module *tpdp_module_parent(
    const tpdp_module *m);                              /* NULL for a root */
TPDP_API tpdp_module *tpdp_module_root(tpdp_module *m); /* top ancestor */
TPDP_API int tpdp_module_num_children(const tpdp_module *m);
/* i-th child in registration order (NULL out of range); name optional. */
TPDP_API tpdp_module *tpdp_module_child(const tpdp_module *m, int i,
                                        const char **name);
TPDP_API int tpdp_module_num_params(const tpdp_module *m);
TPDP_API tpdp_param *tpdp_module_param(const tpdp_module *m, int i,
                                       const char **name);
TPDP_API int tpdp_module_num_buffers(const tpdp_module *m);
TPDP_API const tpdp_tensor *tpdp_module_buffer(const tpdp_module *m, int i,
                                               const char **name);

/* Resolve a dotted path ("u1.seq.1", "" = m itself) below m.
 * Errors: TPDP_ERR_NOT_FOUND naming the first missing component. */
TPDP_API tpdp_status tpdp_module_get_submodule(tpdp_module *m, const char *path,
                                               tpdp_module **out);

/* Writes the module's FQN from its root ("u1.seq"; "" for a root) into buf
 * (always NUL-terminated, truncated to len). Returns the full length. */
TPDP_API size_t tpdp_module_fqn(const tpdp_module *m, char *buf, size_t len);

/* Writes the module as every tpdp message names it, "fqn[Class]" (the root
 * "[Class]"), into buf (always NUL-terminated, truncated to len). Upper
 * layers use it so that a module reads the same in all messages. */
TPDP_API void tpdp_module_label(const tpdp_module *m, char *buf, size_t len);

/* A process-wide counter that changes whenever any tree may have gained a
 * DTensor parameter: a child added (tpdp_module_add_child), a parameter
 * registered (tpdp_module_add_param) or a spec set or cleared
 * (tpdp_param_set_spec). Layers that resolve a tree once and cache the
 * result (tp/'s DP transform) compare it on each use, one relaxed atomic
 * load, to know when to check the tree again. Thread-safe. */
TPDP_API uint64_t tpdp_module_tree_generation(void);

/* ----------------------------------------------------------- parameters */

typedef enum {
  TPDP_PARAM_PLAIN = 0,    /* no spec: an ordinary tensor */
  TPDP_PARAM_DTENSOR = 1,  /* spec set, exposed as a DTensor */
  TPDP_PARAM_LOCALIZED = 2 /* spec set but stashed: exposed as local tensor */
} tpdp_param_form;

/* Parameter handle training state (PyTorch FSDP's HandleTrainingState). */
typedef enum {
  TPDP_HANDLE_IDLE = 0,
  TPDP_HANDLE_FORWARD = 1,
  TPDP_HANDLE_BACKWARD_PRE = 2,
  TPDP_HANDLE_BACKWARD_POST = 3,
  TPDP_HANDLE_SUMMON_FULL_PARAMS = 4
} tpdp_handle_state;

/* Create a plain parameter viewing `tensor` (copied by value; memory
 * borrowed), no gradient, state IDLE, one reference owned by the caller.
 * Errors: NULL pointers, ndim out of range. */
TPDP_API tpdp_status tpdp_param_create(const tpdp_tensor *tensor,
                                       tpdp_param **out);
/* One more reference (for callers that keep a parameter beyond its tree). */
TPDP_API void tpdp_param_retain(tpdp_param *p);
/* Drop one reference; frees at zero. NULL is a no-op. */
TPDP_API void tpdp_param_release(tpdp_param *p);
TPDP_API int tpdp_param_refcount(const tpdp_param *p);

/* The current tensor view: the local tensor in every form (a DTensor's
 * local part is its `local` view, see tp/). Never NULL for a valid p. */
TPDP_API const tpdp_tensor *tpdp_param_tensor(const tpdp_param *p);
/* Replace the view (e.g. after the framework reallocated). */
TPDP_API tpdp_status tpdp_param_set_tensor(tpdp_param *p, const tpdp_tensor *t);
/* Dim-0 sharding of the parameter's local tensor by an upper layer (dp/'s
 * fully sharded units): the view (set first) holds rows
 * [row0, row0 + shape[0]) of a local tensor of total_rows rows, so that
 * checks against the local shape (tp/'s hooks) know the whole. total_rows
 * -1 clears it (the view is the whole local tensor again).
 * Errors: TPDP_ERR_SHAPE_MISMATCH when the rows do not fit. */
TPDP_API tpdp_status tpdp_param_set_row_shard(tpdp_param *p, int64_t row0,
                                              int64_t total_rows);
/* 1 and the range when set, else 0 (outputs untouched; may be NULL). */
TPDP_API int tpdp_param_row_shard(const tpdp_param *p, int64_t *row0,
                                  int64_t *total_rows);
/* Gradient view, NULL when none. Hooks and transforms never touch it. */
TPDP_API const tpdp_tensor *tpdp_param_grad(const tpdp_param *p);
/* Set (copied by value) or clear (NULL) the gradient view. */
TPDP_API tpdp_status tpdp_param_set_grad(tpdp_param *p,
                                         const tpdp_tensor *grad);

/* The spec however the parameter is exposed (NULL for a plain one). */
TPDP_API const struct tpdp_spec *tpdp_param_spec(const tpdp_param *p);
/* Attach a spec (borrowed): the parameter becomes a DTensor parameter in
 * form TPDP_PARAM_DTENSOR; NULL detaches it (form PLAIN). Core does not
 * check that the tensor matches the spec: tp/'s unflatten does. */
TPDP_API tpdp_status tpdp_param_set_spec(tpdp_param *p,
                                         const struct tpdp_spec *spec);
TPDP_API tpdp_param_form tpdp_param_get_form(const tpdp_param *p);
/* Switch between DTENSOR and LOCALIZED (used by tp/'s hooks).
 * Errors: TPDP_ERR_STATE for a parameter without spec or for PLAIN. */
TPDP_API tpdp_status tpdp_param_set_form(tpdp_param *p, tpdp_param_form form);

TPDP_API tpdp_handle_state tpdp_param_get_state(const tpdp_param *p);
TPDP_API tpdp_status tpdp_param_set_state(tpdp_param *p,
                                          tpdp_handle_state state);
/* Set the form (DTENSOR or LOCALIZED) and the handle state of params[0..n)
 * in one call: what tp/'s DP transform does to all its parameters on every
 * forward, at the cost of one call instead of two per parameter.
 * Allocation-free. Errors (nothing changed): NULL params with n > 0 or a
 * NULL entry (naming its index), a bad form or state, TPDP_ERR_STATE for a
 * parameter without spec (naming its index). */
TPDP_API tpdp_status tpdp_params_set_form_state(tpdp_param *const *params,
                                                int n, tpdp_param_form form,
                                                tpdp_handle_state state);
/* TPDP_ERR_STATE unless p's state is one of allowed[0..n): the message names
 * `what` (e.g. the parameter's FQN), the expected and the actual states. */
TPDP_API tpdp_status tpdp_param_check_state(const tpdp_param *p,
                                            const tpdp_handle_state *allowed,
                                            int n, const char *what);
/* "IDLE", "FORWARD", ... ("?" if out of range). */
TPDP_API const char *tpdp_handle_state_name(tpdp_handle_state s);

/* ------------------------------------------------------------ traversal */

/* Visitor: `prefix` is the dotted prefix of m's FQN ("" for the root,
 * "u1.seq." below), `level` its depth (root 0). Returning non-success stops
 * the traversal and that status is returned. The visitor must not add or
 * remove children of the tree during the traversal. */
typedef tpdp_status (*tpdp_module_visit_fn)(tpdp_module *m, const char *prefix,
                                            int level, void *ctx);

/* Pre-order traversal of root's subtree (PyTorch FSDP's _apply_to_modules); the
 * root's prefix is "" even if it has a parent. Errors: NULL pointers,
 * TPDP_ERR_OUT_OF_MEMORY, or the visitor's status. */
TPDP_API tpdp_status tpdp_module_apply(tpdp_module *root,
                                       tpdp_module_visit_fn fn, void *ctx);

/* Modules of set[0..n) that have no proper ancestor in the set (PyTorch FSDP's
 * _get_root_modules), in input order, duplicates once. `out` has room for n.
 * Errors: NULL pointers, n < 0, a NULL entry. */
TPDP_API tpdp_status tpdp_module_root_modules(tpdp_module *const *set, int n,
                                              tpdp_module **out, int *nout);

/* ----------------------------------------------------------------- FQNs */

/* The default wrapper prefixes stripped by FQN cleaning:
 * "_fsdp_wrapped_module." and "_checkpoint_wrapped_module." (PyTorch
 * FSDP's defaults); *n receives the count. */
TPDP_API const char *const *tpdp_fqn_default_prefixes(int *n);

/* Clean an FQN (PyTorch FSDP's clean_tensor_name): for each prefix in order,
 * remove every occurrence of it anywhere in the name (str.replace
 * semantics, left to right, non-overlapping). prefixes == NULL uses the
 * defaults; pass a non-NULL list with n = 0 to disable. Writes into buf
 * (NUL-terminated) and returns the cleaned length; if that is >= len the
 * result was truncated. Empty prefixes are skipped. */
TPDP_API size_t tpdp_fqn_clean(const char *name, const char *const *prefixes,
                               int n, char *buf, size_t len);

/* Parameter -> FQNs map (PyTorch FSDP's _get_param_to_fqns). Parameters
 * appear in order of first encounter in the pre-order traversal (a module's
 * own parameters in registration order, then its children), each parameter
 * object once. With dedup_shared != 0 a parameter's list holds only the FQN
 * of its first encounter; with dedup_shared == 0 it holds the FQNs of its
 * registrations in traversal order, one per module that registers it: a
 * parameter registered under two names in ONE module is listed once for
 * that module, under its first name (as PyTorch's
 * named_parameters(recurse=False) yields it), and under each distinct FQN
 * across modules. FQNs are from `root` and cleaned with `prefixes` (as
 * tpdp_fqn_clean). The map holds borrowed param pointers and must not
 * outlive the tree. */
typedef struct tpdp_param_fqns tpdp_param_fqns;
TPDP_API tpdp_status tpdp_param_fqns_create(tpdp_module *root, int dedup_shared,
                                            const char *const *prefixes,
                                            int nprefixes,
                                            tpdp_param_fqns **out);
/* NULL is a no-op; always TPDP_SUCCESS. */
TPDP_API tpdp_status tpdp_param_fqns_destroy(tpdp_param_fqns *map);
TPDP_API int tpdp_param_fqns_count(const tpdp_param_fqns *map);
TPDP_API tpdp_param *tpdp_param_fqns_param(const tpdp_param_fqns *map, int i);
TPDP_API int tpdp_param_fqns_num(const tpdp_param_fqns *map, int i);
TPDP_API const char *tpdp_param_fqns_get(const tpdp_param_fqns *map, int i,
                                         int j);
/* Index of p in the map; TPDP_ERR_NOT_FOUND if absent. */
TPDP_API tpdp_status tpdp_param_fqns_find(const tpdp_param_fqns *map,
                                          const tpdp_param *p, int *index);

/* ------------------------------------------------------ training states */

/* Training state of a module / managed unit (PyTorch FSDP's TrainingState).
 * Kept live around forward by tp/'s DP transform (tpdp/tp.h: its
 * pre-forward hook requires IDLE or FORWARD_BACKWARD and sets
 * FORWARD_BACKWARD; the DP reducer sets IDLE again when it finalizes). */
typedef enum {
  TPDP_STATE_IDLE = 0,
  TPDP_STATE_FORWARD_BACKWARD = 1,
  TPDP_STATE_SUMMON_FULL_PARAMS = 2
} tpdp_training_state;

TPDP_API const char *tpdp_training_state_name(tpdp_training_state s);
TPDP_API tpdp_training_state tpdp_module_get_state(const tpdp_module *m);
TPDP_API tpdp_status tpdp_module_set_state(tpdp_module *m,
                                           tpdp_training_state s);
/* TPDP_ERR_STATE unless m's state is one of allowed[0..n); the message names
 * the module, the expected states and the actual one. */
TPDP_API tpdp_status tpdp_module_check_state(const tpdp_module *m,
                                             const tpdp_training_state *allowed,
                                             int n);

/* ------------------------------------------------------------ management */

/* Mark every module of root's subtree (root included) except those in
 * ignored[0..nignored) as managed, storing `setting` with each (as PyTorch
 * FSDP's dynamo utils: _is_fsdp_managed_module + _fsdp_use_orig_params).
 * Only the listed modules themselves are skipped, not their subtrees.
 * Marks already present are overwritten. */
TPDP_API tpdp_status tpdp_module_mark_managed(tpdp_module *root,
                                              tpdp_module *const *ignored,
                                              int nignored, int setting);
TPDP_API int tpdp_module_is_managed(const tpdp_module *m);
/* The stored setting (0 when not managed). */
TPDP_API int tpdp_module_managed_setting(const tpdp_module *m);

/* Make m a managed unit: `kind` labels the management ("TP", "DP", ...),
 * `suffix` is printed after its name in the tree report (e.g.
 * " FULLY SHARDED"; NULL = " " + kind). Both are copied. A unit manages the
 * parameters of its subtree except those under a nested unit.
 * Errors: TPDP_ERR_ALREADY if m is a unit already (naming its kind). */
TPDP_API tpdp_status tpdp_module_set_unit(tpdp_module *m, const char *kind,
                                          const char *suffix);
/* Errors: TPDP_ERR_NOT_FOUND if m is not a unit. */
TPDP_API tpdp_status tpdp_module_clear_unit(tpdp_module *m);
/* The unit's kind, NULL if m is not a unit. */
TPDP_API const char *tpdp_module_unit_kind(const tpdp_module *m);

/* ---------------------------------------------------------- tree report */

/* Sharded tree report (as PyTorch FSDP's debug utils print it). text: one
 * line per module in pre-order, "fqn[Class]" (root "[Class]"), 4 spaces per
 * level, each line ending with '\n'; a unit that manages at least one
 * parameter gets its suffix after the name. map: for each such unit in
 * pre-order, key "fqn[Class]" -> FQNs (from root, cleaned with prefixes as
 * tpdp_fqn_clean) of the parameters it manages: the registrations in its
 * subtree outside nested units, in traversal order, each parameter object
 * once across the whole report (its first encounter in pre-order wins; as
 * PyTorch FSDP's report and _get_param_to_fqns, a unit with no parameter
 * has no key and no suffix). */
typedef struct tpdp_tree_report tpdp_tree_report;
TPDP_API tpdp_status tpdp_tree_report_create(tpdp_module *root,
                                             const char *const *prefixes,
                                             int nprefixes,
                                             tpdp_tree_report **out);
/* NULL is a no-op; always TPDP_SUCCESS. */
TPDP_API tpdp_status tpdp_tree_report_destroy(tpdp_tree_report *r);
TPDP_API const char *tpdp_tree_report_text(const tpdp_tree_report *r);
TPDP_API int tpdp_tree_report_num_units(const tpdp_tree_report *r);
TPDP_API const char *tpdp_tree_report_unit(const tpdp_tree_report *r, int i);
TPDP_API int tpdp_tree_report_num_fqns(const tpdp_tree_report *r, int i);
TPDP_API const char *tpdp_tree_report_fqn(const tpdp_tree_report *r, int i,
                                          int j);
/* The map as JSON: {"[CompositeModel]":["l1.weight",...],...} in unit
 * order, no whitespace, strings escaped. Owned by the report. */
TPDP_API const char *tpdp_tree_report_json(const tpdp_tree_report *r);

/* ---------------------------------------------------------- module hooks
 *
 * Callbacks on a module around its forward and backward (torch's module
 * hooks). Not the reducer's communication hooks (tpdp/reducer.h), which
 * act on a gradient bucket. */

/* A module hook (forward or backward, pre or post; the type is named for
 * the forward ones). Returning non-success stops the run; the status (and
 * the hook's last-error message) propagates from forward_begin/end or
 * backward_begin/end. */
typedef tpdp_status (*tpdp_forward_hook_fn)(tpdp_module *m, void *ctx);

/* Identifies one registration. Plain value; valid while the module lives. */
typedef struct {
  tpdp_module *module;
  uint64_t id; /* > 0 */
} tpdp_hook_handle;

/* Register hooks run by forward_begin (pre-hooks) / forward_end (forward
 * hooks), each list in registration order. Registering during a run is
 * allowed; the new hook runs from the next run on. */
TPDP_API tpdp_status tpdp_module_register_forward_pre_hook(
    tpdp_module *m, tpdp_forward_hook_fn fn, void *ctx, tpdp_hook_handle *out);
TPDP_API tpdp_status tpdp_module_register_forward_hook(tpdp_module *m,
                                                       tpdp_forward_hook_fn fn,
                                                       void *ctx,
                                                       tpdp_hook_handle *out);
/* Remove a registration (also allowed from inside a hook: a removed hook
 * that has not run yet in the current run is skipped). Errors:
 * TPDP_ERR_ALREADY if it was removed before, TPDP_ERR_NOT_FOUND for an id
 * this module never issued; both name the module. */
TPDP_API tpdp_status tpdp_hook_remove(tpdp_hook_handle h);
TPDP_API int tpdp_module_num_hooks(
    const tpdp_module *m); /* forward and backward ones, live */

/* Run m's pre-hooks / forward hooks in order (the framework calls these
 * around m's forward). Allocation-free.
 * forward_begin marks m as in forward (tpdp_module_in_forward) before its
 * pre-hooks run; if a pre-hook fails the mark is taken back (the forward
 * did not start) and its status returned. forward_end runs the forward
 * hooks with m still in forward, then ends the forward whatever they
 * return. Forwards of one module may nest (a module called again inside
 * its own forward); each forward_end ends the innermost one. */
TPDP_API tpdp_status tpdp_module_forward_begin(tpdp_module *m);
TPDP_API tpdp_status tpdp_module_forward_end(tpdp_module *m);
/* 1 while m is between a successful tpdp_module_forward_begin(m) and the
 * matching tpdp_module_forward_end(m) (pre-hooks and forward hooks of m
 * included); 0 otherwise and for NULL. Only m's own calls count: a child
 * is not in forward because its parent is. */
TPDP_API int tpdp_module_in_forward(const tpdp_module *m);

/* Backward hooks. A C framework runs backward itself, so it calls
 * tpdp_module_backward_begin(m) before m's backward (m's pre-backward
 * hooks run: a fully sharded unit gathers its parameters there and sets
 * up its gradients) and tpdp_module_backward_end(m) after it (post-backward
 * hooks: the unit reduce-scatters its gradients) - what PyTorch's autograd
 * hooks do for FSDP. Same rules as the forward hooks: registration order,
 * removal with tpdp_hook_remove (also during a run), the first failing
 * hook's status returned. Allocation-free. */
TPDP_API tpdp_status tpdp_module_register_backward_pre_hook(
    tpdp_module *m, tpdp_forward_hook_fn fn, void *ctx, tpdp_hook_handle *out);
TPDP_API tpdp_status tpdp_module_register_backward_hook(tpdp_module *m,
                                                        tpdp_forward_hook_fn fn,
                                                        void *ctx,
                                                        tpdp_hook_handle *out);
TPDP_API tpdp_status tpdp_module_backward_begin(tpdp_module *m);
TPDP_API tpdp_status tpdp_module_backward_end(tpdp_module *m);

/* ------------------------------------------------------- attached state */

/* Attach a layer's own state for module m under `key` (as torch's
 * composable APIs keep theirs on the module): tp/ keeps each parallelized
 * module's specs and a DP transform's resolved parameters there, dp/ a
 * fully sharded unit. One state per key: attaching under a key that has
 * one replaces it, and `state` NULL removes it. `key` is copied;
 * `free_fn` (may be NULL) is called on the state when it is replaced or
 * removed, and when the module is destroyed. Errors: NULL m or key, a
 * destroyed module, out of memory (nothing changed). */
TPDP_API tpdp_status tpdp_module_attach_state(tpdp_module *m, const char *key,
                                              void *state,
                                              void (*free_fn)(void *));
/* The state attached to m under `key`, NULL if none (or m or key NULL). */
TPDP_API void *tpdp_module_attached_state(const tpdp_module *m,
                                          const char *key);

#ifdef __cplusplus
}
#endif
#endif /* TPDP_MODULE_H */
