// SPDX-License-Identifier: BSD-3-Clause
/* Module tree: modules, parameters, buffers, traversal, training states,
 * management marks, forward hook registry, extensions. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/module_internal.h"
#include "core/util.h"

/* ------------------------------------------------------------ helpers */

/* Writes m's FQN from its root; returns the full length. */
size_t tpdp_module_fqn(const tpdp_module *m, char *buf, size_t len) {
  if (buf && len) buf[0] = '\0';
  if (m == NULL) return 0;
  /* Collect the chain root..m (names of all but the root). */
  const tpdp_module *chain[256];
  int depth = 0;
  size_t total = 0;
  for (const tpdp_module *x = m; x && x->parent; x = x->parent) {
    total += strlen(x->name) + (depth ? 1 : 0);
    if (depth < 256) chain[depth] = x;
    depth++;
  }
  if (buf == NULL || len == 0) return total;
  if (depth > 256) { /* absurdly deep: give the name only */
    snprintf(buf, len, "...%s", m->name);
    return total;
  }
  size_t pos = 0;
  for (int i = depth - 1; i >= 0; i--) {
    const char *nm = chain[i]->name;
    int w = snprintf(buf + pos, len - pos, "%s%s", nm, i ? "." : "");
    if (w < 0 || (size_t)w >= len - pos) break;
    pos += (size_t)w;
  }
  return total;
}

void tpdp_module_label(const tpdp_module *m, char *buf, size_t len) {
  if (buf == NULL || len == 0) return;
  size_t n = tpdp_module_fqn(m, buf, len);
  if (n >= len) n = strlen(buf);
  snprintf(buf + n, len - n, "[%s]", m ? m->class_name : "?");
}

#define LABEL(m, var) \
  char var[256];      \
  tpdp_module_label((m), var, sizeof var)

/* See tpdp_module_tree_generation: bumped by every change that can bring a
 * DTensor parameter into a tree. Relaxed: readers only compare it. */
static _Atomic uint64_t tree_generation = 1;

static void tree_changed(void) {
  atomic_fetch_add_explicit(&tree_generation, 1, memory_order_relaxed);
}

uint64_t tpdp_module_tree_generation(void) {
  return atomic_load_explicit(&tree_generation, memory_order_relaxed);
}

static tpdp_status check_name(const tpdp_module *m, const char *name,
                              const char *what) {
  if (name == NULL)
    return TPDP_ERR(TPDP_ERR_NULL_POINTER, "%s name is NULL", what);
  LABEL(m, lbl);
  if (name[0] == '\0')
    return TPDP_ERR(TPDP_ERR_EMPTY_NAME, "empty %s name in module '%s'", what,
                    lbl);
  if (strchr(name, '.'))
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "%s name '%s' in module '%s' contains '.'", what, name,
                    lbl);
  const char *kind = NULL;
  for (int i = 0; i < m->nchildren && !kind; i++)
    if (strcmp(m->children[i].name, name) == 0) kind = "child";
  for (int i = 0; i < m->nparams && !kind; i++)
    if (strcmp(m->params[i].name, name) == 0) kind = "parameter";
  for (int i = 0; i < m->nbuffers && !kind; i++)
    if (strcmp(m->buffers[i].name, name) == 0) kind = "buffer";
  if (kind)
    return TPDP_ERR(TPDP_ERR_DUPLICATE,
                    "module '%s' already has a %s named '%s' (adding %s)", lbl,
                    kind, name, what);
  return TPDP_SUCCESS;
}

/* Room for one more entry in a module's list of children, parameters or
 * buffers (`n` entries of `elem` bytes in *items) and a copy of the
 * entry's name into *copy; on failure nothing changed. */
static tpdp_status reserve_entry(void **items, int *cap, int n, size_t elem,
                                 const char *name, char **copy) {
  CHECK(core_grow(items, cap, n + 1, elem));
  *copy = core_strdup(name);
  if (*copy == NULL) return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
  return TPDP_SUCCESS;
}

/* ------------------------------------------------------------ modules */

tpdp_status tpdp_module_create(const char *class_name, tpdp_module **out) {
  TPDP_API_ENTRY;
  CHECK_PTR(out);
  *out = NULL;
  CHECK_PTR(class_name);
  if (class_name[0] == '\0')
    return TPDP_ERR(TPDP_ERR_EMPTY_NAME, "empty class name");
  tpdp_module *m = NULL;
  CHECK(TPDP_CALLOC(m, 1));
  m->class_name = core_strdup(class_name);
  if (m->class_name == NULL) {
    free(m);
    return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
  }
  m->next_hook_id = 1;
  m->magic = CORE_MODULE_MAGIC;
  *out = m;
  return TPDP_SUCCESS;
}

static void free_subtree(tpdp_module *m) {
  for (int i = 0; i < m->nchildren; i++) {
    free_subtree(m->children[i].module);
    free(m->children[i].name);
  }
  for (int i = 0; i < m->nparams; i++) {
    tpdp_param_release(m->params[i].param);
    free(m->params[i].name);
  }
  for (int i = 0; i < m->nbuffers; i++) free(m->buffers[i].name);
  for (int i = 0; i < m->nexts; i++) {
    if (m->exts[i].free_fn) m->exts[i].free_fn(m->exts[i].ptr);
    free(m->exts[i].key);
  }
  free(m->exts);
  free(m->children);
  free(m->params);
  free(m->buffers);
  free(m->pre_hooks.items);
  free(m->post_hooks.items);
  free(m->backward_pre_hooks.items);
  free(m->backward_post_hooks.items);
  free(m->unit_kind);
  free(m->unit_suffix);
  free(m->class_name);
  free(m->name);
  m->magic = 0;
  free(m);
}

tpdp_status core_module_check(const tpdp_module *m, const char *arg) {
  return core_check_handle(m, m ? m->magic : 0, CORE_MODULE_MAGIC, arg,
                           "module", "tpdp_module_destroy of its root");
}

tpdp_status tpdp_module_destroy(tpdp_module *m) {
  TPDP_API_ENTRY;
  if (m == NULL) return TPDP_SUCCESS;
  CHECK(core_module_check(m, "m"));
  if (m->parent) {
    LABEL(m, lbl);
    return TPDP_ERR(TPDP_ERR_STATE,
                    "module '%s' is owned by its parent; destroy the root",
                    lbl);
  }
  free_subtree(m);
  return TPDP_SUCCESS;
}

tpdp_status tpdp_module_add_child(tpdp_module *parent, const char *name,
                                  tpdp_module *child) {
  TPDP_API_ENTRY;
  CHECK(core_module_check(parent, "parent"));
  CHECK(core_module_check(child, "child"));
  for (const tpdp_module *a = parent; a; a = a->parent) {
    if (a == child) {
      LABEL(parent, pl);
      LABEL(child, cl);
      return TPDP_ERR(
          TPDP_ERR_CYCLE,
          "adding module '%s' as child '%s' of '%s' would make a "
          "cycle: it is %s",
          cl, name ? name : "?", pl,
          child == parent ? "the parent itself" : "an ancestor of the parent");
    }
  }
  CHECK(check_name(parent, name, "child"));
  if (child->parent) {
    LABEL(parent, pl);
    LABEL(child, cl);
    return TPDP_ERR(TPDP_ERR_STATE,
                    "module '%s' already has a parent; cannot add it as "
                    "child '%s' of '%s'",
                    cl, name, pl);
  }
  char *nm = NULL;
  CHECK(reserve_entry((void **)&parent->children, &parent->cap_children,
                      parent->nchildren, sizeof *parent->children, name, &nm));
  parent->children[parent->nchildren++] = (tpdp_child_entry){nm, child};
  child->parent = parent;
  child->name = core_strdup(name);
  if (child->name == NULL) {
    parent->nchildren--;
    child->parent = NULL;
    free(nm);
    return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
  }
  tree_changed();
  return TPDP_SUCCESS;
}

tpdp_status tpdp_module_add_param(tpdp_module *m, const char *name,
                                  tpdp_param *p) {
  TPDP_API_ENTRY;
  CHECK(core_module_check(m, "m"));
  CHECK_PTR(p);
  CHECK(check_name(m, name, "parameter"));
  char *nm = NULL;
  CHECK(reserve_entry((void **)&m->params, &m->cap_params, m->nparams,
                      sizeof *m->params, name, &nm));
  m->params[m->nparams++] = (tpdp_param_entry){nm, p};
  p->refcount++;
  tree_changed();
  return TPDP_SUCCESS;
}

tpdp_status tpdp_module_add_buffer(tpdp_module *m, const char *name,
                                   const tpdp_tensor *buffer) {
  TPDP_API_ENTRY;
  CHECK(core_module_check(m, "m"));
  CHECK_PTR(buffer);
  CHECK(check_name(m, name, "buffer"));
  char *nm = NULL;
  CHECK(reserve_entry((void **)&m->buffers, &m->cap_buffers, m->nbuffers,
                      sizeof *m->buffers, name, &nm));
  m->buffers[m->nbuffers++] = (tpdp_buffer_entry){nm, *buffer};
  return TPDP_SUCCESS;
}

const char *tpdp_module_class_name(const tpdp_module *m) {
  return m ? m->class_name : "";
}
const char *tpdp_module_name(const tpdp_module *m) {
  return (m && m->name) ? m->name : "";
}
tpdp_module *tpdp_module_parent(const tpdp_module *m) {
  return m ? m->parent : NULL;
}
tpdp_module *tpdp_module_root(tpdp_module *m) {
  while (m && m->parent) m = m->parent;
  return m;
}
int tpdp_module_num_children(const tpdp_module *m) {
  return m ? m->nchildren : 0;
}
tpdp_module *tpdp_module_child(const tpdp_module *m, int i, const char **name) {
  if (m == NULL || i < 0 || i >= m->nchildren) return NULL;
  if (name) *name = m->children[i].name;
  return m->children[i].module;
}
int tpdp_module_num_params(const tpdp_module *m) { return m ? m->nparams : 0; }
tpdp_param *tpdp_module_param(const tpdp_module *m, int i, const char **name) {
  if (m == NULL || i < 0 || i >= m->nparams) return NULL;
  if (name) *name = m->params[i].name;
  return m->params[i].param;
}
int tpdp_module_num_buffers(const tpdp_module *m) {
  return m ? m->nbuffers : 0;
}
const tpdp_tensor *tpdp_module_buffer(const tpdp_module *m, int i,
                                      const char **name) {
  if (m == NULL || i < 0 || i >= m->nbuffers) return NULL;
  if (name) *name = m->buffers[i].name;
  return &m->buffers[i].tensor;
}

tpdp_status tpdp_module_get_submodule(tpdp_module *m, const char *path,
                                      tpdp_module **out) {
  TPDP_API_ENTRY;
  CHECK_PTR(out);
  *out = NULL;
  CHECK(core_module_check(m, "m"));
  CHECK_PTR(path);
  tpdp_module *cur = m;
  const char *s = path;
  while (*s) {
    const char *dot = strchr(s, '.');
    size_t n = dot ? (size_t)(dot - s) : strlen(s);
    tpdp_module *next = NULL;
    for (int i = 0; i < cur->nchildren; i++) {
      const char *cn = cur->children[i].name;
      if (strlen(cn) == n && memcmp(cn, s, n) == 0) {
        next = cur->children[i].module;
        break;
      }
    }
    if (next == NULL) {
      LABEL(cur, lbl);
      return TPDP_ERR(TPDP_ERR_NOT_FOUND,
                      "path '%s': module '%s' has no child '%.*s'", path, lbl,
                      (int)n, s);
    }
    cur = next;
    s += n;
    if (*s == '.') s++;
  }
  *out = cur;
  return TPDP_SUCCESS;
}

/* ----------------------------------------------------------- parameters */

static tpdp_status check_tensor(const tpdp_tensor *t) {
  if (t->ndim < 0 || t->ndim > TPDP_MAX_DIMS)
    return TPDP_ERR(TPDP_ERR_TOO_MANY_DIMS, "tensor ndim %d outside [0, %d]",
                    t->ndim, TPDP_MAX_DIMS);
  return TPDP_SUCCESS;
}

tpdp_status tpdp_param_create(const tpdp_tensor *tensor, tpdp_param **out) {
  TPDP_API_ENTRY;
  CHECK_PTR(out);
  *out = NULL;
  CHECK_PTR(tensor);
  CHECK(check_tensor(tensor));
  tpdp_param *p = NULL;
  CHECK(TPDP_CALLOC(p, 1));
  p->refcount = 1;
  p->tensor = *tensor;
  p->form = TPDP_PARAM_PLAIN;
  p->state = TPDP_HANDLE_IDLE;
  p->total_rows = -1;
  *out = p;
  return TPDP_SUCCESS;
}

void tpdp_param_retain(tpdp_param *p) {
  if (p) p->refcount++;
}

void tpdp_param_release(tpdp_param *p) {
  if (p && --p->refcount <= 0) free(p);
}

int tpdp_param_refcount(const tpdp_param *p) { return p ? p->refcount : 0; }

const tpdp_tensor *tpdp_param_tensor(const tpdp_param *p) {
  return p ? &p->tensor : NULL;
}

tpdp_status tpdp_param_set_tensor(tpdp_param *p, const tpdp_tensor *t) {
  TPDP_API_ENTRY;
  CHECK_PTR(p);
  CHECK_PTR(t);
  CHECK(check_tensor(t));
  p->tensor = *t;
  return TPDP_SUCCESS;
}

tpdp_status tpdp_param_set_row_shard(tpdp_param *p, int64_t row0,
                                     int64_t total_rows) {
  TPDP_API_ENTRY;
  CHECK_PTR(p);
  if (total_rows >= 0 && (p->tensor.ndim < 1 || row0 < 0 ||
                          row0 + p->tensor.shape[0] > total_rows))
    return TPDP_ERR(
        TPDP_ERR_SHAPE_MISMATCH,
        "rows [%lld, %lld) of a %lld-row local tensor: the "
        "parameter's view has %lld rows%s",
        (long long)row0,
        (long long)(row0 + (p->tensor.ndim ? p->tensor.shape[0] : 0)),
        (long long)total_rows,
        (long long)(p->tensor.ndim ? p->tensor.shape[0] : 0),
        p->tensor.ndim ? "" : " (it is a scalar)");
  p->row0 = total_rows >= 0 ? row0 : 0;
  p->total_rows = total_rows >= 0 ? total_rows : -1;
  return TPDP_SUCCESS;
}

int tpdp_param_row_shard(const tpdp_param *p, int64_t *row0,
                         int64_t *total_rows) {
  if (p == NULL || p->total_rows < 0) return 0;
  if (row0) *row0 = p->row0;
  if (total_rows) *total_rows = p->total_rows;
  return 1;
}

const tpdp_tensor *tpdp_param_grad(const tpdp_param *p) {
  return (p && p->has_grad) ? &p->grad : NULL;
}

tpdp_status tpdp_param_set_grad(tpdp_param *p, const tpdp_tensor *grad) {
  TPDP_API_ENTRY;
  CHECK_PTR(p);
  if (grad == NULL) {
    p->has_grad = 0;
    return TPDP_SUCCESS;
  }
  CHECK(check_tensor(grad));
  p->grad = *grad;
  p->has_grad = 1;
  return TPDP_SUCCESS;
}

const struct tpdp_spec *tpdp_param_spec(const tpdp_param *p) {
  return p ? p->spec : NULL;
}

tpdp_status tpdp_param_set_spec(tpdp_param *p, const struct tpdp_spec *spec) {
  TPDP_API_ENTRY;
  CHECK_PTR(p);
  p->spec = spec;
  p->form = spec ? TPDP_PARAM_DTENSOR : TPDP_PARAM_PLAIN;
  tree_changed();
  return TPDP_SUCCESS;
}

tpdp_param_form tpdp_param_get_form(const tpdp_param *p) {
  return p ? p->form : TPDP_PARAM_PLAIN;
}

tpdp_status tpdp_param_set_form(tpdp_param *p, tpdp_param_form form) {
  TPDP_API_ENTRY;
  CHECK_PTR(p);
  if (form != TPDP_PARAM_DTENSOR && form != TPDP_PARAM_LOCALIZED)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "form %d is not DTENSOR (1) or LOCALIZED (2); use "
                    "tpdp_param_set_spec(p, NULL) for a plain parameter",
                    (int)form);
  if (p->spec == NULL)
    return TPDP_ERR(TPDP_ERR_STATE,
                    "parameter has no spec: it cannot become %s",
                    form == TPDP_PARAM_DTENSOR ? "DTENSOR" : "LOCALIZED");
  p->form = form;
  return TPDP_SUCCESS;
}

tpdp_handle_state tpdp_param_get_state(const tpdp_param *p) {
  return p ? p->state : TPDP_HANDLE_IDLE;
}

/* Indexed by tpdp_handle_state. */
static const char *const handle_state_names[] = {
    "IDLE", "FORWARD", "BACKWARD_PRE", "BACKWARD_POST", "SUMMON_FULL_PARAMS"};
_Static_assert(sizeof handle_state_names / sizeof *handle_state_names ==
                   TPDP_HANDLE_SUMMON_FULL_PARAMS + 1,
               "one name per handle state");

const char *tpdp_handle_state_name(tpdp_handle_state s) {
  return core_name_at(handle_state_names, TPDP_HANDLE_SUMMON_FULL_PARAMS + 1,
                      (int)s);
}

/* TPDP_ERR_INVALID_ARGUMENT unless s is a tpdp_handle_state. */
static tpdp_status check_handle_state(tpdp_handle_state s) {
  if ((int)s >= 0 && s <= TPDP_HANDLE_SUMMON_FULL_PARAMS) return TPDP_SUCCESS;
  return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT, "handle state %d outside [0, %d]",
                  (int)s, (int)TPDP_HANDLE_SUMMON_FULL_PARAMS);
}

tpdp_status tpdp_param_set_state(tpdp_param *p, tpdp_handle_state state) {
  TPDP_API_ENTRY;
  CHECK_PTR(p);
  CHECK(check_handle_state(state));
  p->state = state;
  return TPDP_SUCCESS;
}

tpdp_status tpdp_params_set_form_state(tpdp_param *const *params, int n,
                                       tpdp_param_form form,
                                       tpdp_handle_state state) {
  TPDP_API_ENTRY;
  if (n < 0)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "parameter count n = %d is negative", n);
  if (n > 0) CHECK_PTR(params);
  if (form != TPDP_PARAM_DTENSOR && form != TPDP_PARAM_LOCALIZED)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "form %d is not DTENSOR (1) or LOCALIZED (2)", (int)form);
  CHECK(check_handle_state(state));
  for (int i = 0; i < n; i++) {
    if (params[i] == NULL)
      return TPDP_ERR(TPDP_ERR_NULL_POINTER, "params[%d] is NULL", i);
    if (params[i]->spec == NULL)
      return TPDP_ERR(TPDP_ERR_STATE,
                      "params[%d] has no spec: it cannot become %s", i,
                      form == TPDP_PARAM_DTENSOR ? "DTENSOR" : "LOCALIZED");
  }
  for (int i = 0; i < n; i++) {
    params[i]->form = form;
    params[i]->state = state;
  }
  return TPDP_SUCCESS;
}

/* A state enum for find_state: the i-th value of an array of it, and the
 * name of a value. */
typedef struct {
  int (*at)(const void *list, int i);
  const char *(*name)(int state);
} state_kind;

static int handle_at(const void *list, int i) {
  return (int)((const tpdp_handle_state *)list)[i];
}
static const char *handle_name_int(int s) {
  return tpdp_handle_state_name((tpdp_handle_state)s);
}
static const state_kind handle_states = {handle_at, handle_name_int};

static int training_at(const void *list, int i) {
  return (int)((const tpdp_training_state *)list)[i];
}
static const char *training_name_int(int s) {
  return tpdp_training_state_name((tpdp_training_state)s);
}
static const state_kind training_states = {training_at, training_name_int};

/* The part of tpdp_param_check_state and tpdp_module_check_state before
 * their messages: *in = 1 when `state` is one of the n states of `allowed`
 * (an array of kind's enum); else *in = 0 and the first 16 of them named
 * "{A, B}" into set. TPDP_ERR_INVALID_ARGUMENT for a bad list. */
static tpdp_status find_state(const state_kind *kind, const void *allowed,
                              int n, int state, int *in, char *set,
                              size_t len) {
  if (n < 0 || (n > 0 && allowed == NULL))
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT, "bad allowed list (n = %d)", n);
  *in = 1;
  for (int i = 0; i < n; i++)
    if (kind->at(allowed, i) == state) return TPDP_SUCCESS;
  *in = 0;
  size_t pos = 0;
  set[0] = '\0';
  int w = snprintf(set, len, "{");
  if (w > 0) pos = (size_t)w;
  for (int i = 0; i < n && i < 16 && pos < len; i++) {
    w = snprintf(set + pos, len - pos, "%s%s", i ? ", " : "",
                 kind->name(kind->at(allowed, i)));
    if (w < 0) break;
    pos += (size_t)w;
  }
  if (pos < len) snprintf(set + pos, len - pos, "}");
  return TPDP_SUCCESS;
}

tpdp_status tpdp_param_check_state(const tpdp_param *p,
                                   const tpdp_handle_state *allowed, int n,
                                   const char *what) {
  TPDP_API_ENTRY;
  CHECK_PTR(p);
  int in;
  char set[256];
  CHECK(find_state(&handle_states, allowed, n, (int)p->state, &in, set,
                   sizeof set));
  if (in) return TPDP_SUCCESS;
  return TPDP_ERR(TPDP_ERR_STATE,
                  "parameter '%s': expected to be in states %s but current "
                  "state is %s",
                  what ? what : "?", set, tpdp_handle_state_name(p->state));
}

/* ------------------------------------------------------------ traversal */

typedef struct {
  char *buf;
  size_t len, cap;
  tpdp_module_visit_fn fn;
  void *ctx;
} walk_ctx;

static tpdp_status walk(tpdp_module *m, int level, walk_ctx *w) {
  CHECK(w->fn(m, w->buf, level, w->ctx));
  for (int i = 0; i < m->nchildren; i++) {
    const char *nm = m->children[i].name;
    size_t n = strlen(nm);
    size_t save = w->len;
    if (save + n + 2 > w->cap) {
      size_t ncap = w->cap * 2;
      while (save + n + 2 > ncap) ncap *= 2;
      char *nb = realloc(w->buf, ncap);
      if (nb == NULL)
        return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "out of memory (prefix)");
      w->buf = nb;
      w->cap = ncap;
    }
    memcpy(w->buf + save, nm, n);
    w->buf[save + n] = '.';
    w->buf[save + n + 1] = '\0';
    w->len = save + n + 1;
    tpdp_status st = walk(m->children[i].module, level + 1, w);
    w->len = save;
    w->buf[save] = '\0';
    if (st != TPDP_SUCCESS) return st;
  }
  return TPDP_SUCCESS;
}

tpdp_status tpdp_module_apply(tpdp_module *root, tpdp_module_visit_fn fn,
                              void *ctx) {
  TPDP_API_ENTRY;
  CHECK(core_module_check(root, "root"));
  CHECK_PTR(fn);
  walk_ctx w = {NULL, 0, 128, fn, ctx};
  w.buf = malloc(w.cap);
  if (w.buf == NULL) return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
  w.buf[0] = '\0';
  tpdp_status st = walk(root, 0, &w);
  free(w.buf);
  return st;
}

tpdp_status tpdp_module_root_modules(tpdp_module *const *set, int n,
                                     tpdp_module **out, int *nout) {
  TPDP_API_ENTRY;
  CHECK_PTR(nout);
  *nout = 0;
  if (n < 0)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "module count n = %d is negative", n);
  if (n == 0) return TPDP_SUCCESS;
  CHECK_PTR(set);
  CHECK_PTR(out);
  for (int i = 0; i < n; i++)
    if (set[i] == NULL)
      return TPDP_ERR(TPDP_ERR_NULL_POINTER, "set[%d] is NULL", i);
  core_ptrmap members;
  CHECK(core_ptrmap_init(&members, (size_t)n));
  tpdp_status st = TPDP_SUCCESS;
  for (int i = 0; i < n; i++)
    CHECK_GOTO(core_ptrmap_put(&members, set[i], 0), st, done);
  for (int i = 0; i < n; i++) {
    tpdp_module *c = set[i];
    if (core_ptrmap_get(&members, c) == 1) continue; /* already output */
    int is_root = 1;
    for (tpdp_module *a = c->parent; a; a = a->parent)
      if (core_ptrmap_get(&members, a) >= 0) {
        is_root = 0;
        break;
      }
    if (is_root) {
      out[(*nout)++] = c;
      CHECK_GOTO(core_ptrmap_put(&members, c, 1), st, done);
    }
  }
done:
  core_ptrmap_free(&members);
  return st;
}

/* ------------------------------------------------------ training states */

/* Indexed by tpdp_training_state. */
static const char *const training_state_names[] = {"IDLE", "FORWARD_BACKWARD",
                                                   "SUMMON_FULL_PARAMS"};
_Static_assert(sizeof training_state_names / sizeof *training_state_names ==
                   TPDP_STATE_SUMMON_FULL_PARAMS + 1,
               "one name per training state");

const char *tpdp_training_state_name(tpdp_training_state s) {
  return core_name_at(training_state_names, TPDP_STATE_SUMMON_FULL_PARAMS + 1,
                      (int)s);
}

tpdp_training_state tpdp_module_get_state(const tpdp_module *m) {
  return m ? m->state : TPDP_STATE_IDLE;
}

tpdp_status tpdp_module_set_state(tpdp_module *m, tpdp_training_state s) {
  TPDP_API_ENTRY;
  CHECK(core_module_check(m, "m"));
  if ((int)s < 0 || s > TPDP_STATE_SUMMON_FULL_PARAMS)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "training state %d outside [0, %d]", (int)s,
                    (int)TPDP_STATE_SUMMON_FULL_PARAMS);
  m->state = s;
  return TPDP_SUCCESS;
}

tpdp_status tpdp_module_check_state(const tpdp_module *m,
                                    const tpdp_training_state *allowed, int n) {
  TPDP_API_ENTRY;
  CHECK(core_module_check(m, "m"));
  int in;
  char set[256];
  CHECK(find_state(&training_states, allowed, n, (int)m->state, &in, set,
                   sizeof set));
  if (in) return TPDP_SUCCESS;
  LABEL(m, lbl);
  return TPDP_ERR(TPDP_ERR_STATE,
                  "module '%s': expected to be in states %s but current "
                  "state is %s",
                  lbl, set, tpdp_training_state_name(m->state));
}

/* ------------------------------------------------------------ management */

typedef struct {
  core_ptrmap *ignored;
  int setting;
} mark_ctx;

static tpdp_status mark_visit(tpdp_module *m, const char *prefix, int level,
                              void *ctx) {
  (void)prefix;
  (void)level;
  mark_ctx *c = ctx;
  if (core_ptrmap_get(c->ignored, m) >= 0) return TPDP_SUCCESS;
  m->managed = 1;
  m->managed_setting = c->setting;
  return TPDP_SUCCESS;
}

tpdp_status tpdp_module_mark_managed(tpdp_module *root,
                                     tpdp_module *const *ignored, int nignored,
                                     int setting) {
  TPDP_API_ENTRY;
  CHECK(core_module_check(root, "root"));
  if (nignored < 0)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT, "nignored = %d < 0", nignored);
  if (nignored > 0) CHECK_PTR(ignored);
  core_ptrmap set;
  CHECK(core_ptrmap_init(&set, (size_t)nignored));
  tpdp_status st = TPDP_SUCCESS;
  for (int i = 0; i < nignored; i++)
    CHECK_GOTO(core_ptrmap_put(&set, ignored[i], 0), st, done);
  mark_ctx c = {&set, setting};
  st = tpdp_module_apply(root, mark_visit, &c);
done:
  core_ptrmap_free(&set);
  return st;
}

int tpdp_module_is_managed(const tpdp_module *m) { return m ? m->managed : 0; }
int tpdp_module_managed_setting(const tpdp_module *m) {
  return (m && m->managed) ? m->managed_setting : 0;
}

tpdp_status tpdp_module_set_unit(tpdp_module *m, const char *kind,
                                 const char *suffix) {
  TPDP_API_ENTRY;
  CHECK(core_module_check(m, "m"));
  CHECK_PTR(kind);
  if (kind[0] == '\0') return TPDP_ERR(TPDP_ERR_EMPTY_NAME, "empty unit kind");
  if (m->unit_kind) {
    LABEL(m, lbl);
    return TPDP_ERR(TPDP_ERR_ALREADY,
                    "module '%s' is already a managed unit (kind '%s')", lbl,
                    m->unit_kind);
  }
  char *k = core_strdup(kind);
  char *s = NULL;
  if (suffix) {
    s = core_strdup(suffix);
  } else if (k) {
    s = malloc(strlen(kind) + 2);
    if (s) {
      s[0] = ' ';
      memcpy(s + 1, kind, strlen(kind) + 1);
    }
  }
  if (k == NULL || s == NULL) {
    free(k);
    free(s);
    return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
  }
  m->unit_kind = k;
  m->unit_suffix = s;
  return TPDP_SUCCESS;
}

tpdp_status tpdp_module_clear_unit(tpdp_module *m) {
  TPDP_API_ENTRY;
  CHECK(core_module_check(m, "m"));
  if (m->unit_kind == NULL) {
    LABEL(m, lbl);
    return TPDP_ERR(TPDP_ERR_NOT_FOUND, "module '%s' is not a managed unit",
                    lbl);
  }
  free(m->unit_kind);
  free(m->unit_suffix);
  m->unit_kind = NULL;
  m->unit_suffix = NULL;
  return TPDP_SUCCESS;
}

const char *tpdp_module_unit_kind(const tpdp_module *m) {
  return m ? m->unit_kind : NULL;
}

/* ---------------------------------------------------------------- hooks */

static tpdp_status register_hook(tpdp_module *m, tpdp_hook_list *l,
                                 tpdp_forward_hook_fn fn, void *ctx,
                                 tpdp_hook_handle *out) {
  CHECK_PTR(out);
  out->module = NULL;
  out->id = 0;
  CHECK(core_module_check(m, "m"));
  CHECK_PTR(fn);
  CHECK(core_grow((void **)&l->items, &l->cap, l->n + 1, sizeof *l->items));
  tpdp_hook_entry *e = &l->items[l->n++];
  e->id = m->next_hook_id++;
  e->fn = fn;
  e->ctx = ctx;
  e->live = 1;
  out->module = m;
  out->id = e->id;
  return TPDP_SUCCESS;
}

tpdp_status tpdp_module_register_forward_pre_hook(tpdp_module *m,
                                                  tpdp_forward_hook_fn fn,
                                                  void *ctx,
                                                  tpdp_hook_handle *out) {
  TPDP_API_ENTRY;
  return register_hook(m, m ? &m->pre_hooks : NULL, fn, ctx, out);
}

tpdp_status tpdp_module_register_forward_hook(tpdp_module *m,
                                              tpdp_forward_hook_fn fn,
                                              void *ctx,
                                              tpdp_hook_handle *out) {
  TPDP_API_ENTRY;
  return register_hook(m, m ? &m->post_hooks : NULL, fn, ctx, out);
}

tpdp_status tpdp_module_register_backward_pre_hook(tpdp_module *m,
                                                   tpdp_forward_hook_fn fn,
                                                   void *ctx,
                                                   tpdp_hook_handle *out) {
  TPDP_API_ENTRY;
  return register_hook(m, m ? &m->backward_pre_hooks : NULL, fn, ctx, out);
}

tpdp_status tpdp_module_register_backward_hook(tpdp_module *m,
                                               tpdp_forward_hook_fn fn,
                                               void *ctx,
                                               tpdp_hook_handle *out) {
  TPDP_API_ENTRY;
  return register_hook(m, m ? &m->backward_post_hooks : NULL, fn, ctx, out);
}

static void compact(tpdp_hook_list *l) {
  int k = 0;
  for (int i = 0; i < l->n; i++)
    if (l->items[i].live) l->items[k++] = l->items[i];
  l->n = k;
}

tpdp_status tpdp_hook_remove(tpdp_hook_handle h) {
  TPDP_API_ENTRY;
  tpdp_module *m = h.module;
  if (m == NULL)
    return TPDP_ERR(TPDP_ERR_NULL_POINTER, "hook handle has no module");
  CHECK(core_module_check(m, "h.module"));
  tpdp_hook_list *lists[4] = {&m->pre_hooks, &m->post_hooks,
                              &m->backward_pre_hooks, &m->backward_post_hooks};
  for (int k = 0; k < 4; k++) {
    tpdp_hook_list *l = lists[k];
    for (int i = 0; i < l->n; i++) {
      if (l->items[i].id != h.id || !l->items[i].live) continue;
      l->items[i].live = 0;
      if (m->running)
        m->needs_compact = 1;
      else
        compact(l);
      return TPDP_SUCCESS;
    }
  }
  LABEL(m, lbl);
  if (h.id > 0 && h.id < m->next_hook_id)
    return TPDP_ERR(TPDP_ERR_ALREADY,
                    "hook %llu of module '%s' was already removed",
                    (unsigned long long)h.id, lbl);
  return TPDP_ERR(TPDP_ERR_NOT_FOUND,
                  "module '%s' never registered a hook with id %llu", lbl,
                  (unsigned long long)h.id);
}

int tpdp_module_num_hooks(const tpdp_module *m) {
  if (m == NULL) return 0;
  int n = 0;
  for (int i = 0; i < m->pre_hooks.n; i++) n += m->pre_hooks.items[i].live;
  for (int i = 0; i < m->post_hooks.n; i++) n += m->post_hooks.items[i].live;
  for (int i = 0; i < m->backward_pre_hooks.n; i++)
    n += m->backward_pre_hooks.items[i].live;
  for (int i = 0; i < m->backward_post_hooks.n; i++)
    n += m->backward_post_hooks.items[i].live;
  return n;
}

static tpdp_status run_hooks(tpdp_module *m, tpdp_hook_list *l) {
  tpdp_status st = TPDP_SUCCESS;
  int n = l->n; /* hooks added during the run wait for the next one */
  m->running++;
  for (int i = 0; i < n; i++) {
    tpdp_hook_entry *e = &l->items[i]; /* re-read: the array may move */
    if (!e->live) continue;
    st = e->fn(m, e->ctx);
    if (st != TPDP_SUCCESS) break;
  }
  if (--m->running == 0 && m->needs_compact) {
    compact(&m->pre_hooks);
    compact(&m->post_hooks);
    compact(&m->backward_pre_hooks);
    compact(&m->backward_post_hooks);
    m->needs_compact = 0;
  }
  return st;
}

tpdp_status tpdp_module_forward_begin(tpdp_module *m) {
  TPDP_API_ENTRY;
  CHECK(core_module_check(m, "m"));
  m->forward_depth++;
  tpdp_status st = run_hooks(m, &m->pre_hooks);
  if (st != TPDP_SUCCESS) m->forward_depth--; /* the forward did not start */
  return st;
}

tpdp_status tpdp_module_forward_end(tpdp_module *m) {
  TPDP_API_ENTRY;
  CHECK(core_module_check(m, "m"));
  tpdp_status st = run_hooks(m, &m->post_hooks);
  if (m->forward_depth > 0) m->forward_depth--;
  return st;
}

tpdp_status tpdp_module_backward_begin(tpdp_module *m) {
  TPDP_API_ENTRY;
  CHECK(core_module_check(m, "m"));
  return run_hooks(m, &m->backward_pre_hooks);
}

tpdp_status tpdp_module_backward_end(tpdp_module *m) {
  TPDP_API_ENTRY;
  CHECK(core_module_check(m, "m"));
  return run_hooks(m, &m->backward_post_hooks);
}

int tpdp_module_in_forward(const tpdp_module *m) {
  return (m && m->forward_depth > 0) ? 1 : 0;
}

/* ----------------------------------------------------------- extensions */

tpdp_status tpdp_module_set_ext(tpdp_module *m, const char *key, void *ptr,
                                void (*free_fn)(void *)) {
  TPDP_API_ENTRY;
  CHECK(core_module_check(m, "m"));
  CHECK_PTR(key);
  for (int i = 0; i < m->nexts; i++) {
    tpdp_ext_entry *e = &m->exts[i];
    if (strcmp(e->key, key) != 0) continue;
    void *old = e->ptr;
    void (*old_free)(void *) = e->free_fn;
    if (ptr == NULL) {
      free(e->key);
      m->exts[i] = m->exts[--m->nexts];
    } else {
      e->ptr = ptr;
      e->free_fn = free_fn;
    }
    if (old_free && old != ptr) old_free(old);
    return TPDP_SUCCESS;
  }
  if (ptr == NULL) return TPDP_SUCCESS;
  char *k = core_strdup(key);
  if (k == NULL) return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
  tpdp_ext_entry *ne = realloc(m->exts, sizeof *ne * (size_t)(m->nexts + 1));
  if (ne == NULL) {
    free(k);
    return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
  }
  m->exts = ne;
  m->exts[m->nexts].key = k;
  m->exts[m->nexts].ptr = ptr;
  m->exts[m->nexts].free_fn = free_fn;
  m->nexts++;
  return TPDP_SUCCESS;
}

void *tpdp_module_get_ext(const tpdp_module *m, const char *key) {
  if (m == NULL || key == NULL) return NULL;
  for (int i = 0; i < m->nexts; i++)
    if (strcmp(m->exts[i].key, key) == 0) return m->exts[i].ptr;
  return NULL;
}
