// SPDX-License-Identifier: BSD-3-Clause
/* The module tree (as torch's nn/modules/module.py): modules, their
 * children, parameter registrations and buffers, names and FQNs, and the
 * pre-order traversal. The rest of a module lives beside it, sharing
 * core/module_internal.h: parameters (core/param.c), hooks
 * (core/module_hooks.c), training states, management marks and attached
 * state (core/module_state.c), the sharded tree report
 * (core/module_report.c). */
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

/* See tpdp_module_tree_generation: bumped by every change that can bring a
 * DTensor parameter into a tree. Relaxed: readers only compare it. */
static _Atomic uint64_t tree_generation = 1;

void core_module_tree_changed(void) {
  atomic_fetch_add_explicit(&tree_generation, 1, memory_order_relaxed);
}

uint64_t tpdp_module_tree_generation(void) {
  return atomic_load_explicit(&tree_generation, memory_order_relaxed);
}

static tpdp_status check_name(const tpdp_module *m, const char *name,
                              const char *what) {
  if (name == NULL)
    return TPDP_ERR(TPDP_ERR_NULL_POINTER, "%s name is NULL", what);
  MODULE_LABEL(m, lbl);
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
  core_module_state_free(m); /* attached states' destructors run here */
  core_module_hooks_free(m);
  free(m->children);
  free(m->params);
  free(m->buffers);
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
    MODULE_LABEL(m, lbl);
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
      MODULE_LABEL(parent, pl);
      MODULE_LABEL(child, cl);
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
    MODULE_LABEL(parent, pl);
    MODULE_LABEL(child, cl);
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
  core_module_tree_changed();
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
  core_module_tree_changed();
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
      MODULE_LABEL(cur, lbl);
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
