// SPDX-License-Identifier: BSD-3-Clause
/* Module tree: FQN cleaning, the parameter -> FQNs map, the sharded tree
 * report, and the small containers they use. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/module_internal.h"

/* -------------------------------------------------------------- FQNs */

static const char *const default_prefixes[] = {
    "_fsdp_wrapped_module.",
    "_checkpoint_wrapped_module.",
};

const char *const *tpdp_fqn_default_prefixes(int *n) {
  if (n) *n = (int)(sizeof default_prefixes / sizeof default_prefixes[0]);
  return default_prefixes;
}

/* Remove every occurrence of each prefix from s, in place. */
static size_t clean_in_place(char *s, const char *const *prefixes, int n) {
  size_t len = strlen(s);
  for (int k = 0; k < n; k++) {
    const char *p = prefixes[k];
    size_t pl = p ? strlen(p) : 0;
    if (pl == 0 || pl > len) continue;
    size_t r = 0, w = 0;
    while (r < len) {
      if (r + pl <= len && memcmp(s + r, p, pl) == 0) {
        r += pl;
      } else {
        s[w++] = s[r++];
      }
    }
    s[w] = '\0';
    len = w;
  }
  return len;
}

size_t tpdp_fqn_clean(const char *name, const char *const *prefixes, int n,
                      char *buf, size_t len) {
  if (prefixes == NULL) prefixes = tpdp_fqn_default_prefixes(&n);
  if (n < 0) n = 0;
  if (name == NULL) name = "";
  size_t nl = strlen(name);
  if (buf != NULL && nl < len) {
    memmove(buf, name, nl + 1);
    return clean_in_place(buf, prefixes, n);
  }
  char *tmp = malloc(nl + 1);
  if (tmp == NULL) {
    if (buf && len) buf[0] = '\0';
    return (size_t)-1;
  }
  memcpy(tmp, name, nl + 1);
  size_t out = clean_in_place(tmp, prefixes, n);
  if (buf && len) {
    size_t c = out < len - 1 ? out : len - 1;
    memcpy(buf, tmp, c);
    buf[c] = '\0';
  }
  free(tmp);
  return out;
}

/* prefix + name, cleaned; malloc'd (NULL when out of memory). */
static char *make_fqn(const char *prefix, const char *name,
                      const char *const *prefixes, int nprefixes) {
  size_t a = strlen(prefix), b = strlen(name);
  char *s = malloc(a + b + 1);
  if (s == NULL) return NULL;
  memcpy(s, prefix, a);
  memcpy(s + a, name, b + 1);
  tpdp_fqn_clean(s, prefixes, nprefixes, s, a + b + 1);
  return s;
}

/* The pointer map of core/util.h, failures reported. */
static tpdp_status map_init(core_ptrmap *m, size_t expected) {
  if (core_ptrmap_init(m, expected) != 0)
    return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "out of memory (pointer map)");
  return TPDP_SUCCESS;
}

static tpdp_status map_put(core_ptrmap *m, const void *key, int val) {
  if (core_ptrmap_put(m, key, val) != 0)
    return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "out of memory (pointer map)");
  return TPDP_SUCCESS;
}

/* A list of owned strings. */
typedef struct {
  char **items;
  int n, cap;
} str_list;

static tpdp_status str_list_push(str_list *l, char *s) {
  if (s == NULL) return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
  tpdp_status st =
      core_grow((void **)&l->items, &l->cap, l->n + 1, sizeof *l->items);
  if (st != TPDP_SUCCESS) {
    free(s);
    return st;
  }
  l->items[l->n++] = s;
  return TPDP_SUCCESS;
}

static void str_list_free(str_list *l) {
  for (int i = 0; i < l->n; i++) free(l->items[i]);
  free(l->items);
  memset(l, 0, sizeof *l);
}

/* The public accessors' view of a list: its length and item j (0 and NULL
 * for a NULL list or j out of range). */
static int str_list_len(const str_list *l) { return l ? l->n : 0; }
static const char *str_list_get(const str_list *l, int j) {
  return (l && j >= 0 && j < l->n) ? l->items[j] : NULL;
}

/* ---------------------------------------------------- param -> FQNs */

typedef struct {
  tpdp_param *param;
  str_list fqns;
  const tpdp_module *last; /* the module of the last FQN added */
} pf_entry;

struct tpdp_param_fqns {
  pf_entry *entries;
  int n, cap;
  core_ptrmap index; /* param -> entry index */
};

typedef struct {
  tpdp_param_fqns *map;
  int dedup;
  const char *const *prefixes;
  int nprefixes;
} pf_ctx;

static tpdp_status pf_visit(tpdp_module *m, const char *prefix, int level,
                            void *ctx) {
  (void)level;
  pf_ctx *c = ctx;
  tpdp_param_fqns *map = c->map;
  for (int i = 0; i < m->nparams; i++) {
    tpdp_param *p = m->params[i].param;
    int at = core_ptrmap_get(&map->index, p);
    if (at >= 0 && c->dedup) continue;
    /* One FQN per module even without dedup: a module lists a parameter
     * it registers under two names once, under the first (PyTorch's
     * named_parameters(recurse=False) skips the same object). A module's
     * registrations are consecutive in the traversal, so comparing with
     * the last module that added an FQN finds them. */
    if (at >= 0 && map->entries[at].last == m) continue;
    char *fqn = make_fqn(prefix, m->params[i].name, c->prefixes, c->nprefixes);
    if (at < 0) {
      tpdp_status st = core_grow((void **)&map->entries, &map->cap, map->n + 1,
                                 sizeof *map->entries);
      if (st != TPDP_SUCCESS) {
        free(fqn);
        return st;
      }
      at = map->n++;
      memset(&map->entries[at], 0, sizeof map->entries[at]);
      map->entries[at].param = p;
      st = map_put(&map->index, p, at);
      if (st != TPDP_SUCCESS) {
        free(fqn);
        return st;
      }
    }
    CHECK(str_list_push(&map->entries[at].fqns, fqn));
    map->entries[at].last = m;
  }
  return TPDP_SUCCESS;
}

static void fqns_free(tpdp_param_fqns *map) {
  if (map == NULL) return;
  for (int i = 0; i < map->n; i++) str_list_free(&map->entries[i].fqns);
  free(map->entries);
  core_ptrmap_free(&map->index);
  free(map);
}

tpdp_status tpdp_param_fqns_destroy(tpdp_param_fqns *map) {
  TPDP_API_ENTRY;
  fqns_free(map);
  return TPDP_SUCCESS;
}

/* NULL prefixes: the defaults (tpdp_fqn_default_prefixes). */
static tpdp_status resolve_prefixes(const char *const **prefixes,
                                    int *nprefixes) {
  if (*prefixes == NULL) *prefixes = tpdp_fqn_default_prefixes(nprefixes);
  if (*nprefixes < 0)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT, "nprefixes = %d < 0",
                    *nprefixes);
  return TPDP_SUCCESS;
}

tpdp_status tpdp_param_fqns_create(tpdp_module *root, int dedup_shared,
                                   const char *const *prefixes, int nprefixes,
                                   tpdp_param_fqns **out) {
  TPDP_API_ENTRY;
  CHECK_PTR(out);
  *out = NULL;
  CHECK(core_module_check(root, "root"));
  CHECK(resolve_prefixes(&prefixes, &nprefixes));
  tpdp_param_fqns *map = NULL;
  CHECK(TPDP_CALLOC(map, 1));
  tpdp_status st = map_init(&map->index, 64);
  if (st != TPDP_SUCCESS) {
    free(map);
    return st;
  }
  pf_ctx c = {map, dedup_shared, prefixes, nprefixes};
  st = tpdp_module_apply(root, pf_visit, &c);
  if (st != TPDP_SUCCESS) {
    fqns_free(map);
    return st;
  }
  *out = map;
  return TPDP_SUCCESS;
}

int tpdp_param_fqns_count(const tpdp_param_fqns *map) {
  return map ? map->n : 0;
}
tpdp_param *tpdp_param_fqns_param(const tpdp_param_fqns *map, int i) {
  return (map && i >= 0 && i < map->n) ? map->entries[i].param : NULL;
}
/* Entry i's FQNs, NULL for a NULL map or i out of range. */
static const str_list *entry_fqns(const tpdp_param_fqns *map, int i) {
  return (map && i >= 0 && i < map->n) ? &map->entries[i].fqns : NULL;
}
int tpdp_param_fqns_num(const tpdp_param_fqns *map, int i) {
  return str_list_len(entry_fqns(map, i));
}
const char *tpdp_param_fqns_get(const tpdp_param_fqns *map, int i, int j) {
  return str_list_get(entry_fqns(map, i), j);
}
tpdp_status tpdp_param_fqns_find(const tpdp_param_fqns *map,
                                 const tpdp_param *p, int *index) {
  TPDP_API_ENTRY;
  CHECK_PTR(map);
  CHECK_PTR(p);
  CHECK_PTR(index);
  int at = core_ptrmap_get(&map->index, p);
  if (at < 0)
    return TPDP_ERR(TPDP_ERR_NOT_FOUND,
                    "parameter %p is not registered in the tree", (void *)p);
  *index = at;
  return TPDP_SUCCESS;
}

/* ------------------------------------------------------- tree report */

typedef struct {
  char *key;     /* "fqn[Class]" */
  str_list fqns; /* managed parameter FQNs */
} unit_entry;

typedef struct {
  char *label; /* "fqn[Class]" */
  int level;
  int unit; /* index into units when the module is a unit, else -1 */
  const char *suffix;
} line_entry;

struct tpdp_tree_report {
  char *text;
  char *json;
  unit_entry *units; /* only units with >= 1 parameter */
  int nunits;
};

typedef struct {
  tpdp_module *root;
  const char *const *prefixes;
  int nprefixes;
  line_entry *lines;
  int nlines, cap_lines;
  unit_entry *units;
  int nunits, cap_units;
  core_ptrmap unit_of; /* unit module -> index into units */
  core_ptrmap seen;    /* parameters already assigned */
} rep_ctx;

static tpdp_status rep_visit(tpdp_module *m, const char *prefix, int level,
                             void *vctx) {
  rep_ctx *c = vctx;
  size_t pl = strlen(prefix);
  if (pl > 0 && prefix[pl - 1] == '.') pl--;
  size_t cl = strlen(m->class_name);
  char *label = malloc(pl + cl + 3);
  if (label == NULL) return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
  memcpy(label, prefix, pl);
  label[pl] = '[';
  memcpy(label + pl + 1, m->class_name, cl);
  label[pl + 1 + cl] = ']';
  label[pl + 2 + cl] = '\0';
  tpdp_status st = core_grow((void **)&c->lines, &c->cap_lines, c->nlines + 1,
                             sizeof *c->lines);
  if (st != TPDP_SUCCESS) {
    free(label);
    return st;
  }
  line_entry *ln = &c->lines[c->nlines++];
  ln->label = label;
  ln->level = level;
  ln->unit = -1;
  ln->suffix = m->unit_suffix;
  if (m->unit_kind) {
    CHECK(core_grow((void **)&c->units, &c->cap_units, c->nunits + 1,
                    sizeof *c->units));
    unit_entry *u = &c->units[c->nunits];
    memset(u, 0, sizeof *u);
    u->key = malloc(strlen(label) + 1);
    if (u->key == NULL)
      return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
    strcpy(u->key, label);
    ln->unit = c->nunits++;
    CHECK(map_put(&c->unit_of, m, ln->unit));
  }
  if (m->nparams == 0) return TPDP_SUCCESS;
  /* The managing unit: nearest unit among m and its ancestors up to the
   * report's root (all visited already: pre-order). */
  int unit = -1;
  for (tpdp_module *a = m; a; a = a->parent) {
    unit = core_ptrmap_get(&c->unit_of, a);
    if (unit >= 0 || a == c->root) break;
  }
  if (unit < 0) return TPDP_SUCCESS;
  for (int i = 0; i < m->nparams; i++) {
    tpdp_param *p = m->params[i].param;
    if (core_ptrmap_get(&c->seen, p) >= 0) continue;
    CHECK(map_put(&c->seen, p, unit));
    CHECK(str_list_push(
        &c->units[unit].fqns,
        make_fqn(prefix, m->params[i].name, c->prefixes, c->nprefixes)));
  }
  return TPDP_SUCCESS;
}

static void report_free(tpdp_tree_report *r) {
  if (r == NULL) return;
  for (int i = 0; i < r->nunits; i++) {
    free(r->units[i].key);
    str_list_free(&r->units[i].fqns);
  }
  free(r->units);
  free(r->text);
  free(r->json);
  free(r);
}

tpdp_status tpdp_tree_report_destroy(tpdp_tree_report *r) {
  TPDP_API_ENTRY;
  report_free(r);
  return TPDP_SUCCESS;
}

tpdp_status tpdp_tree_report_create(tpdp_module *root,
                                    const char *const *prefixes, int nprefixes,
                                    tpdp_tree_report **out) {
  TPDP_API_ENTRY;
  CHECK_PTR(out);
  *out = NULL;
  CHECK(core_module_check(root, "root"));
  CHECK(resolve_prefixes(&prefixes, &nprefixes));
  rep_ctx c;
  memset(&c, 0, sizeof c);
  c.root = root;
  c.prefixes = prefixes;
  c.nprefixes = nprefixes;
  core_strbuf text = {0}, json = {0};
  tpdp_tree_report *r = NULL;
  tpdp_status st = TPDP_SUCCESS;
  CHECK_GOTO(map_init(&c.unit_of, 16), st, fail);
  CHECK_GOTO(map_init(&c.seen, 64), st, fail);
  CHECK_GOTO(tpdp_module_apply(root, rep_visit, &c), st, fail);
  CHECK_GOTO(TPDP_CALLOC(r, 1), st, fail);

  /* Text: a unit's suffix only when it manages a parameter (as PyTorch
   * FSDP's debug report). */
  core_sb_append(&text, "", 0);
  for (int i = 0; i < c.nlines; i++) {
    const line_entry *ln = &c.lines[i];
    for (int k = 0; k < ln->level; k++) core_sb_append(&text, "    ", 4);
    core_sb_puts(&text, ln->label);
    if (ln->unit >= 0 && c.units[ln->unit].fqns.n > 0)
      core_sb_puts(&text, ln->suffix);
    core_sb_append(&text, "\n", 1);
  }
  /* Keep only units with parameters, in pre-order. */
  CHECK_GOTO(TPDP_CALLOC(r->units, c.nunits ? c.nunits : 1), st, fail);
  for (int i = 0; i < c.nunits; i++) {
    if (c.units[i].fqns.n == 0) {
      free(c.units[i].key);
      str_list_free(&c.units[i].fqns);
      continue;
    }
    r->units[r->nunits++] = c.units[i];
  }
  c.nunits = 0; /* moved or freed */
  core_sb_append(&json, "{", 1);
  for (int i = 0; i < r->nunits; i++) {
    if (i) core_sb_append(&json, ",", 1);
    core_sb_json_string(&json, r->units[i].key);
    core_sb_append(&json, ":[", 2);
    for (int j = 0; j < r->units[i].fqns.n; j++) {
      if (j) core_sb_append(&json, ",", 1);
      core_sb_json_string(&json, r->units[i].fqns.items[j]);
    }
    core_sb_append(&json, "]", 1);
  }
  core_sb_append(&json, "}", 1);
  if (text.failed || json.failed) {
    st = TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "out of memory building the report");
    goto fail;
  }
  r->text = text.s;
  r->json = json.s;
  text.s = json.s = NULL;
  *out = r;
  r = NULL;

fail:
  for (int i = 0; i < c.nlines; i++) free(c.lines[i].label);
  free(c.lines);
  for (int i = 0; i < c.nunits; i++) {
    free(c.units[i].key);
    str_list_free(&c.units[i].fqns);
  }
  free(c.units);
  core_ptrmap_free(&c.unit_of);
  core_ptrmap_free(&c.seen);
  core_sb_free(&text);
  core_sb_free(&json);
  report_free(r);
  return st;
}

const char *tpdp_tree_report_text(const tpdp_tree_report *r) {
  return r ? r->text : "";
}
int tpdp_tree_report_num_units(const tpdp_tree_report *r) {
  return r ? r->nunits : 0;
}
const char *tpdp_tree_report_unit(const tpdp_tree_report *r, int i) {
  return (r && i >= 0 && i < r->nunits) ? r->units[i].key : NULL;
}
/* Unit i's FQNs, NULL for a NULL report or i out of range. */
static const str_list *unit_fqns(const tpdp_tree_report *r, int i) {
  return (r && i >= 0 && i < r->nunits) ? &r->units[i].fqns : NULL;
}
int tpdp_tree_report_num_fqns(const tpdp_tree_report *r, int i) {
  return str_list_len(unit_fqns(r, i));
}
const char *tpdp_tree_report_fqn(const tpdp_tree_report *r, int i, int j) {
  return str_list_get(unit_fqns(r, i), j);
}
const char *tpdp_tree_report_json(const tpdp_tree_report *r) {
  return r ? r->json : "";
}
