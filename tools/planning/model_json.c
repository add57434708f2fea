// SPDX-License-Identifier: BSD-3-Clause
/* Model descriptions in JSON -> a plain C tree (see model_json.h and
 * docs/model-format.md). */
#include "tools/planning/model_json.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "tools/planning/error.h"
#include "tools/planning/json.h"

/* malloc'd printf; NULL on failure. */
static char *fmt_alloc(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
static char *fmt_alloc(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *s = NULL;
  int n = vasprintf(&s, fmt, ap);
  va_end(ap);
  return n < 0 ? NULL : s;
}

/* JSON path of key `key` inside the object at `path` ("" = the root). */
static char *path_key(const char *path, const char *key) {
  return path[0] ? fmt_alloc("%s.%s", path, key) : fmt_alloc("%s", key);
}

/* How a module's own path reads in messages. */
static const char *path_show(const char *path) {
  return path[0] ? path : "root";
}

static void module_free(planning_model_module *m) {
  if (m == NULL) return;
  for (int i = 0; i < m->nchildren; i++) module_free(m->children[i]);
  free(m->children);
  for (int i = 0; i < m->nparams; i++) {
    free((void *)m->params[i].name);
    free((void *)m->params[i].fqn);
  }
  free(m->params);
  free((void *)m->name);
  free((void *)m->fqn);
  free((void *)m->class_name);
  free(m);
}

void planning_model_desc_destroy(planning_model_desc *desc) {
  if (desc == NULL) return;
  module_free(desc->root);
  free(desc->modules);
  free(desc->params);
  free(desc->leaves);
  free(desc->calls);
  free(desc);
}

/* A child or parameter name: non-empty, no '.', unique within the module
 * (children and parameters share one namespace, as FQNs do). `kind` is
 * "child" or "parameter"; `where` is the JSON path of the container. */
static tpdp_status check_name(const char *where, const char *kind,
                              const cJSON *item,
                              const planning_model_module *m) {
  const char *name = item->string;
  if (name == NULL || name[0] == '\0')
    return planning_error(TPDP_ERR_EMPTY_NAME, "%s: a %s has an empty name",
                          where, kind);
  if (strchr(name, '.') != NULL)
    return planning_error(TPDP_ERR_INVALID_ARGUMENT,
                          "%s: %s name \"%s\" contains '.'", where, kind, name);
  for (int i = 0; i < m->nparams; i++)
    if (strcmp(m->params[i].name, name) == 0)
      return planning_error(
          TPDP_ERR_DUPLICATE,
          "%s.%s: name \"%s\" is already used by a parameter of %s", where,
          name, name, m->fqn[0] ? m->fqn : "the root");
  for (int i = 0; i < m->nchildren; i++)
    if (strcmp(m->children[i]->name, name) == 0)
      return planning_error(
          TPDP_ERR_DUPLICATE,
          "%s.%s: name \"%s\" is already used by a child of %s", where, name,
          name, m->fqn[0] ? m->fqn : "the root");
  return TPDP_SUCCESS;
}

/* Fill *p from {"shape": [...], "dtype": "f32"} at JSON path `path`. */
static tpdp_status parse_param(const cJSON *obj, const char *path,
                               planning_model_param *p) {
  if (!cJSON_IsObject(obj))
    return planning_error(
        TPDP_ERR_PARSE, "%s must be an object like {\"shape\": [8, 8]}", path);
  const cJSON *shape = NULL, *dtype = NULL;
  for (const cJSON *k = obj->child; k != NULL; k = k->next) {
    const cJSON **slot = NULL;
    if (strcmp(k->string, "shape") == 0)
      slot = &shape;
    else if (strcmp(k->string, "dtype") == 0)
      slot = &dtype;
    else
      return planning_error(
          TPDP_ERR_PARSE,
          "%s: unknown key \"%s\" (expected \"shape\", \"dtype\")", path,
          k->string);
    if (*slot != NULL)
      return planning_error(TPDP_ERR_DUPLICATE, "%s: key \"%s\" appears twice",
                            path, k->string);
    *slot = k;
  }
  if (shape == NULL)
    return planning_error(TPDP_ERR_PARSE, "%s: missing \"shape\"", path);
  if (!cJSON_IsArray(shape))
    return planning_error(TPDP_ERR_PARSE,
                          "%s.shape must be an array of integers", path);
  int nd = cJSON_GetArraySize(shape);
  if (nd > TPDP_MAX_DIMS)
    return planning_error(TPDP_ERR_TOO_MANY_DIMS,
                          "%s.shape has %d dims (at most %d)", path, nd,
                          TPDP_MAX_DIMS);
  p->ndim = nd;
  p->numel = 1;
  int d = 0;
  for (const cJSON *e = shape->child; e != NULL; e = e->next, d++) {
    char what[600];
    snprintf(what, sizeof what, "%s.shape[%d]", path, d);
    PLANNING_CHECK(planning_json_int(e, what, 1, PLANNING_JSON_INT_MAX,
                                     TPDP_ERR_BAD_DIM_SIZE, &p->shape[d]));
    if (p->numel > INT64_MAX / p->shape[d])
      return planning_error(TPDP_ERR_INVALID_ARGUMENT,
                            "%s.shape: element count overflows int64", path);
    p->numel *= p->shape[d];
  }
  p->dtype = TPDP_F32;
  if (dtype != NULL) {
    if (!cJSON_IsString(dtype) ||
        tpdp_dtype_parse(dtype->valuestring, &p->dtype) != TPDP_SUCCESS)
      return planning_error(
          TPDP_ERR_PARSE,
          "%s.dtype must be one of f32, f64, f16, bf16, i32, i64, u8 "
          "(got %s%s%s)",
          path, cJSON_IsString(dtype) ? "\"" : "",
          cJSON_IsString(dtype) ? dtype->valuestring : "a non-string",
          cJSON_IsString(dtype) ? "\"" : "");
  }
  /* Plans add up bytes (size_t) and make tensor views of the shape, which
   * need its byte size in int64. */
  if (p->numel > INT64_MAX / (int64_t)tpdp_dtype_size(p->dtype))
    return planning_error(TPDP_ERR_INVALID_ARGUMENT,
                          "%s.shape: %lld elements of %s overflow: the byte "
                          "size is above INT64_MAX",
                          path, (long long)p->numel, tpdp_dtype_name(p->dtype));
  return TPDP_SUCCESS;
}

/* Start reading member `key` ("params" or "children") of the module at
 * JSON path `path`, whose value `obj` must be an object (of `what`): *sub =
 * the member's JSON path (free()), *items = a zeroed array of one `size`
 * byte item per entry. On failure *sub may be set: the caller frees it. */
static tpdp_status open_member(const cJSON *obj, const char *path,
                               const char *key, const char *what, size_t size,
                               char **sub, void **items) {
  *sub = path_key(path, key);
  if (*sub == NULL)
    return planning_error(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
  if (!cJSON_IsObject(obj))
    return planning_error(TPDP_ERR_PARSE, "%s must be an object (%s)", *sub,
                          what);
  int n = cJSON_GetArraySize(obj);
  *items = calloc(n ? (size_t)n : 1, size);
  if (*items == NULL)
    return planning_error(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
  return TPDP_SUCCESS;
}

/* Parse the module object `obj` found at JSON path `path` ("" = root). */
static tpdp_status parse_module(const cJSON *obj, const char *path,
                                const char *name, const char *fqn,
                                const planning_model_module *parent,
                                planning_model_module **out) {
  tpdp_status st = TPDP_SUCCESS;
  char *sub = NULL;
  *out = NULL;
  if (!cJSON_IsObject(obj))
    return planning_error(TPDP_ERR_PARSE, "%s must be an object (a module)",
                          path_show(path));
  const cJSON *cls = NULL, *params = NULL, *children = NULL, *shared = NULL,
              *calls = NULL;
  for (const cJSON *k = obj->child; k != NULL; k = k->next) {
    const cJSON **slot = NULL;
    int root_only =
        strcmp(k->string, "shared") == 0 || strcmp(k->string, "calls") == 0;
    if (strcmp(k->string, "class") == 0)
      slot = &cls;
    else if (strcmp(k->string, "params") == 0)
      slot = &params;
    else if (strcmp(k->string, "children") == 0)
      slot = &children;
    else if (root_only && parent != NULL)
      return planning_error(TPDP_ERR_PARSE,
                            "%s: \"%s\" is only allowed on the root module",
                            path_show(path), k->string);
    else if (root_only)
      slot = strcmp(k->string, "shared") == 0 ? &shared : &calls;
    else
      return planning_error(
          TPDP_ERR_PARSE,
          "%s: unknown key \"%s\" (expected \"class\", \"params\", "
          "\"children\"%s)",
          path_show(path), k->string,
          parent == NULL ? ", \"shared\", \"calls\"" : "");
    if (*slot != NULL)
      return planning_error(TPDP_ERR_DUPLICATE, "%s: key \"%s\" appears twice",
                            path_show(path), k->string);
    *slot = k;
  }
  /* "shared" and "calls" are applied once the whole tree exists. */
  (void)shared;
  (void)calls;
  if (cls == NULL)
    return planning_error(TPDP_ERR_PARSE, "%s: missing \"class\"",
                          path_show(path));
  if (!cJSON_IsString(cls) || cls->valuestring[0] == '\0')
    return planning_error(TPDP_ERR_PARSE,
                          "%s%sclass must be a non-empty string", path,
                          path[0] ? "." : "");

  planning_model_module *m = calloc(1, sizeof *m);
  if (m == NULL) return planning_error(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
  m->parent = parent;
  m->name = core_strdup(name);
  m->fqn = core_strdup(fqn);
  m->class_name = core_strdup(cls->valuestring);
  if (!m->name || !m->fqn || !m->class_name) goto nomem;

  if (params != NULL) {
    PLANNING_CHECK_GOTO(
        open_member(params, path, "params",
                    "parameter name -> {\"shape\": ...}", sizeof *m->params,
                    &sub, (void **)&m->params),
        st, fail);
    for (const cJSON *e = params->child; e != NULL; e = e->next) {
      PLANNING_CHECK_GOTO(check_name(sub, "parameter", e, m), st, fail);
      planning_model_param *p = &m->params[m->nparams];
      char *ppath = fmt_alloc("%s.%s", sub, e->string);
      if (ppath == NULL) goto nomem;
      st = parse_param(e, ppath, p);
      free(ppath);
      if (st != TPDP_SUCCESS) goto fail;
      p->name = core_strdup(e->string);
      p->fqn =
          fqn[0] ? fmt_alloc("%s.%s", fqn, e->string) : core_strdup(e->string);
      p->module = m;
      m->nparams++; /* counted now so that module_free frees the names */
      if (!p->name || !p->fqn) goto nomem;
    }
    free(sub);
    sub = NULL;
  }

  if (children != NULL) {
    PLANNING_CHECK_GOTO(
        open_member(children, path, "children", "child name -> module",
                    sizeof *m->children, &sub, (void **)&m->children),
        st, fail);
    for (const cJSON *e = children->child; e != NULL; e = e->next) {
      PLANNING_CHECK_GOTO(check_name(sub, "child", e, m), st, fail);
      char *cpath = fmt_alloc("%s.%s", sub, e->string);
      char *cfqn =
          fqn[0] ? fmt_alloc("%s.%s", fqn, e->string) : core_strdup(e->string);
      if (cpath == NULL || cfqn == NULL) {
        free(cpath);
        free(cfqn);
        goto nomem;
      }
      planning_model_module *child = NULL;
      st = parse_module(e, cpath, e->string, cfqn, m, &child);
      free(cpath);
      free(cfqn);
      if (st != TPDP_SUCCESS) goto fail;
      m->children[m->nchildren++] = child;
    }
    free(sub);
    sub = NULL;
  }
  *out = m;
  return TPDP_SUCCESS;

nomem:
  st = planning_error(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
fail:
  free(sub);
  module_free(m);
  return st;
}

static int count_modules(const planning_model_module *m, int *nparams,
                         int *nleaves) {
  int n = 1;
  *nparams += m->nparams;
  if (m->nchildren == 0) ++*nleaves;
  for (int i = 0; i < m->nchildren; i++)
    n += count_modules(m->children[i], nparams, nleaves);
  return n;
}

/* Pre-order numbering of modules, parameters and leaves. */
static void number(planning_model_desc *d, planning_model_module *m) {
  m->index = d->nmodules;
  d->modules[d->nmodules++] = m;
  for (int i = 0; i < m->nparams; i++) {
    m->params[i].index = d->nparams;
    m->params[i].canonical = &m->params[i];
    d->params[d->nparams++] = &m->params[i];
  }
  if (m->nchildren == 0) {
    m->first_leaf = m->last_leaf = d->nleaves;
    d->leaves[d->nleaves].module = m;
    d->leaves[d->nleaves].params = 0;
    d->nleaves++;
    return;
  }
  for (int i = 0; i < m->nchildren; i++) number(d, m->children[i]);
  m->first_leaf = m->children[0]->first_leaf;
  m->last_leaf = m->children[m->nchildren - 1]->last_leaf;
}

static int uf_find(int *up, int i) {
  while (up[i] != i) {
    up[i] = up[up[i]];
    i = up[i];
  }
  return i;
}

/* Apply the root's "shared" list: tie parameters into groups whose
 * canonical member is the first in pre-order. */
static tpdp_status apply_shared(planning_model_desc *d, const cJSON *shared) {
  if (!cJSON_IsArray(shared))
    return planning_error(
        TPDP_ERR_PARSE,
        "shared must be an array of [\"a.weight\", \"b.weight\"] "
        "pairs");
  int *up = NULL;
  tpdp_status st = TPDP_SUCCESS;
  up = calloc((size_t)d->nparams + 1, sizeof *up);
  if (up == NULL)
    return planning_error(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
  for (int i = 0; i < d->nparams; i++) up[i] = i;
  int idx = 0;
  for (const cJSON *pair = shared->child; pair != NULL;
       pair = pair->next, idx++) {
    if (!cJSON_IsArray(pair) || cJSON_GetArraySize(pair) != 2 ||
        !cJSON_IsString(pair->child) || !cJSON_IsString(pair->child->next)) {
      st = planning_error(TPDP_ERR_PARSE,
                          "shared[%d] must be an array of two parameter FQNs",
                          idx);
      goto done;
    }
    const planning_model_param *p[2];
    const cJSON *e = pair->child;
    for (int k = 0; k < 2; k++, e = e->next) {
      p[k] = planning_model_desc_find_param(d, e->valuestring);
      if (p[k] == NULL) {
        const planning_model_module *mod =
            planning_model_desc_find_module(d, e->valuestring);
        st = planning_error(
            TPDP_ERR_NOT_FOUND, "shared[%d][%d]: no parameter named \"%s\"%s",
            idx, k, e->valuestring,
            mod ? " (that is a module; name one of its parameters)" : "");
        goto done;
      }
    }
    if (p[0] == p[1]) {
      st = planning_error(TPDP_ERR_INVALID_ARGUMENT,
                          "shared[%d]: \"%s\" is paired with itself", idx,
                          p[0]->fqn);
      goto done;
    }
    if (p[0]->ndim != p[1]->ndim ||
        memcmp(p[0]->shape, p[1]->shape,
               sizeof(int64_t) * (size_t)p[0]->ndim) != 0) {
      char s0[128], s1[128];
      tpdp_shape_format(p[0]->ndim, p[0]->shape, s0, sizeof s0);
      tpdp_shape_format(p[1]->ndim, p[1]->shape, s1, sizeof s1);
      st = planning_error(
          TPDP_ERR_SHAPE_MISMATCH,
          "shared[%d]: \"%s\" has shape %s but \"%s\" has shape %s", idx,
          p[0]->fqn, s0, p[1]->fqn, s1);
      goto done;
    }
    if (p[0]->dtype != p[1]->dtype) {
      st = planning_error(
          TPDP_ERR_DTYPE_MISMATCH,
          "shared[%d]: \"%s\" has dtype %s but \"%s\" has dtype %s", idx,
          p[0]->fqn, tpdp_dtype_name(p[0]->dtype), p[1]->fqn,
          tpdp_dtype_name(p[1]->dtype));
      goto done;
    }
    int a = uf_find(up, p[0]->index), b = uf_find(up, p[1]->index);
    /* Keep the smaller (earlier in pre-order) index as the group root. */
    if (a < b)
      up[b] = a;
    else if (b < a)
      up[a] = b;
  }
  for (int i = 0; i < d->nparams; i++)
    d->params[i]->canonical = d->params[uf_find(up, i)];
done:
  free(up);
  return st;
}

/* Apply the root's "calls" list: the leaf modules in the order forward
 * calls them (repeats allowed). Without it, each leaf once, in pre-order. */
static tpdp_status apply_calls(planning_model_desc *d, const cJSON *calls) {
  if (calls != NULL && !cJSON_IsArray(calls))
    return planning_error(TPDP_ERR_PARSE,
                          "calls must be an array of leaf module FQNs");
  int n = calls != NULL ? cJSON_GetArraySize(calls) : d->nleaves;
  d->calls = calloc(n ? (size_t)n : 1, sizeof *d->calls);
  if (d->calls == NULL)
    return planning_error(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
  if (calls == NULL) {
    for (int i = 0; i < d->nleaves; i++) d->calls[i] = d->leaves[i].module;
    d->ncalls = d->nleaves;
    return TPDP_SUCCESS;
  }
  int i = 0;
  for (const cJSON *c = calls->child; c != NULL; c = c->next, i++) {
    if (!cJSON_IsString(c))
      return planning_error(
          TPDP_ERR_PARSE, "calls[%d] must be a string (a leaf module FQN)", i);
    const planning_model_module *m =
        planning_model_desc_find_module(d, c->valuestring);
    if (m == NULL)
      return planning_error(
          TPDP_ERR_NOT_FOUND, "calls[%d]: no module named \"%s\"%s", i,
          c->valuestring,
          planning_model_desc_find_param(d, c->valuestring) != NULL
              ? " (that is a parameter; name its module)"
              : "");
    if (m->nchildren > 0)
      return planning_error(
          TPDP_ERR_INVALID_ARGUMENT,
          "calls[%d]: \"%s\" is not a leaf module (it has %d children; "
          "name the leaves it calls)",
          i, c->valuestring, m->nchildren);
    d->calls[i] = m;
  }
  if (i == 0)
    return planning_error(TPDP_ERR_INVALID_ARGUMENT,
                          "calls is empty (omit it to call every leaf once)");
  d->ncalls = i;
  return TPDP_SUCCESS;
}

static tpdp_status parse_impl(const char *json, planning_model_desc **out) {
  cJSON *doc = NULL;
  PLANNING_CHECK(planning_json_parse(json, &doc));
  tpdp_status st = TPDP_SUCCESS;
  planning_model_desc *d = calloc(1, sizeof *d);
  if (d == NULL) {
    cJSON_Delete(doc);
    return planning_error(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
  }
  PLANNING_CHECK_GOTO(parse_module(doc, "", "", "", NULL, &d->root), st, fail);
  int np = 0, nl = 0;
  int nm = count_modules(d->root, &np, &nl);
  d->modules = calloc((size_t)nm, sizeof *d->modules);
  d->params = calloc(np ? (size_t)np : 1, sizeof *d->params);
  d->leaves = calloc((size_t)nl, sizeof *d->leaves);
  if (!d->modules || !d->params || !d->leaves) {
    st = planning_error(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
    goto fail;
  }
  number(d, d->root);
  const cJSON *shared = cJSON_GetObjectItemCaseSensitive(doc, "shared");
  if (shared != NULL) PLANNING_CHECK_GOTO(apply_shared(d, shared), st, fail);
  PLANNING_CHECK_GOTO(
      apply_calls(d, cJSON_GetObjectItemCaseSensitive(doc, "calls")), st, fail);

  /* Charge each counted parameter to its module's first leaf. */
  for (int i = 0; i < d->nparams; i++) {
    const planning_model_param *p = d->params[i];
    if (p->canonical != p) continue;
    int64_t *slot = &d->leaves[p->module->first_leaf].params;
    if (__builtin_add_overflow(*slot, p->numel, slot) ||
        __builtin_add_overflow(d->total_params, p->numel, &d->total_params)) {
      st = planning_error(TPDP_ERR_INVALID_ARGUMENT,
                          "parameter count overflows int64 at \"%s\"", p->fqn);
      goto fail;
    }
  }
  cJSON_Delete(doc);
  *out = d;
  return TPDP_SUCCESS;
fail:
  cJSON_Delete(doc);
  planning_model_desc_destroy(d);
  return st;
}

tpdp_status planning_model_desc_parse(const char *json,
                                      planning_model_desc **out) {
  PLANNING_ENTRY;
  PLANNING_CHECK_PTR(out);
  *out = NULL;
  PLANNING_CHECK_PTR(json);
  return parse_impl(json, out);
}

tpdp_status planning_read_file(const char *path, char **out) {
  PLANNING_ENTRY;
  PLANNING_CHECK_PTR(out);
  *out = NULL;
  PLANNING_CHECK_PTR(path);
  FILE *f = fopen(path, "rb");
  if (f == NULL)
    return planning_error(TPDP_ERR_IO, "cannot open '%s': %s", path,
                          strerror(errno));
  size_t cap = 4096, len = 0;
  char *buf = malloc(cap);
  while (buf != NULL) {
    if (len + 1 >= cap) {
      char *nb = realloc(buf, cap * 2);
      if (nb == NULL) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = nb;
      cap *= 2;
    }
    size_t got = fread(buf + len, 1, cap - len - 1, f);
    len += got;
    if (got == 0) break;
  }
  int rerr = ferror(f);
  fclose(f);
  if (buf == NULL)
    return planning_error(TPDP_ERR_OUT_OF_MEMORY, "out of memory reading '%s'",
                          path);
  if (rerr) {
    free(buf);
    return planning_error(TPDP_ERR_IO, "error reading '%s'", path);
  }
  buf[len] = '\0';
  if (strlen(buf) != len) {
    free(buf);
    return planning_error(TPDP_ERR_PARSE, "'%s' contains a NUL byte", path);
  }
  *out = buf;
  return TPDP_SUCCESS;
}

tpdp_status planning_model_desc_load(const char *path,
                                     planning_model_desc **out) {
  PLANNING_ENTRY;
  PLANNING_CHECK_PTR(out);
  *out = NULL;
  PLANNING_CHECK_PTR(path);
  char *text = NULL;
  PLANNING_CHECK(planning_read_file(path, &text));
  tpdp_status st = parse_impl(text, out);
  free(text);
  return planning_error_in(path, st);
}

const planning_model_module *planning_model_desc_find_module(
    const planning_model_desc *desc, const char *fqn) {
  if (desc == NULL || fqn == NULL) return NULL;
  for (int i = 0; i < desc->nmodules; i++)
    if (strcmp(desc->modules[i]->fqn, fqn) == 0) return desc->modules[i];
  return NULL;
}

const planning_model_param *planning_model_desc_find_param(
    const planning_model_desc *desc, const char *fqn) {
  if (desc == NULL || fqn == NULL) return NULL;
  for (int i = 0; i < desc->nparams; i++)
    if (strcmp(desc->params[i]->fqn, fqn) == 0) return desc->params[i];
  return NULL;
}
