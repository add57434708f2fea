// SPDX-License-Identifier: BSD-3-Clause
/* What the layers above keep on a module (as torch's
 * distributed/_composable_state.py and FSDP's training states): the
 * module's training state, the management marks and managed units, and
 * state attached under a key by a layer (tp/'s styles and DP transform,
 * dp/'s fully sharded units), freed with the module. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/module_internal.h"
#include "core/util.h"

/* -------------------------------------------------------- state checks */

tpdp_status core_find_state(const core_state_kind *kind, const void *allowed,
                            int n, int state, int *in, char *set, size_t len) {
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

static int training_at(const void *list, int i) {
  return (int)((const tpdp_training_state *)list)[i];
}
static const char *training_name_int(int s) {
  return tpdp_training_state_name((tpdp_training_state)s);
}
static const core_state_kind training_states = {training_at, training_name_int};

tpdp_status tpdp_module_check_state(const tpdp_module *m,
                                    const tpdp_training_state *allowed, int n) {
  TPDP_API_ENTRY;
  CHECK(core_module_check(m, "m"));
  int in;
  char set[256];
  CHECK(core_find_state(&training_states, allowed, n, (int)m->state, &in, set,
                        sizeof set));
  if (in) return TPDP_SUCCESS;
  MODULE_LABEL(m, lbl);
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
    MODULE_LABEL(m, lbl);
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
    MODULE_LABEL(m, lbl);
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

/* ------------------------------------------------------- attached state */

tpdp_status tpdp_module_attach_state(tpdp_module *m, const char *key,
                                     void *state, void (*free_fn)(void *)) {
  TPDP_API_ENTRY;
  CHECK(core_module_check(m, "m"));
  CHECK_PTR(key);
  for (int i = 0; i < m->nattached; i++) {
    core_attached_state *e = &m->attached[i];
    if (strcmp(e->key, key) != 0) continue;
    void *old = e->state;
    void (*old_free)(void *) = e->free_fn;
    if (state == NULL) {
      free(e->key);
      m->attached[i] = m->attached[--m->nattached];
    } else {
      e->state = state;
      e->free_fn = free_fn;
    }
    if (old_free && old != state) old_free(old);
    return TPDP_SUCCESS;
  }
  if (state == NULL) return TPDP_SUCCESS;
  char *k = core_strdup(key);
  if (k == NULL) return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
  core_attached_state *ne =
      realloc(m->attached, sizeof *ne * (size_t)(m->nattached + 1));
  if (ne == NULL) {
    free(k);
    return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
  }
  m->attached = ne;
  m->attached[m->nattached].key = k;
  m->attached[m->nattached].state = state;
  m->attached[m->nattached].free_fn = free_fn;
  m->nattached++;
  return TPDP_SUCCESS;
}

void *tpdp_module_attached_state(const tpdp_module *m, const char *key) {
  if (m == NULL || key == NULL) return NULL;
  for (int i = 0; i < m->nattached; i++)
    if (strcmp(m->attached[i].key, key) == 0) return m->attached[i].state;
  return NULL;
}

void core_module_state_free(tpdp_module *m) {
  for (int i = 0; i < m->nattached; i++) {
    if (m->attached[i].free_fn) m->attached[i].free_fn(m->attached[i].state);
    free(m->attached[i].key);
  }
  free(m->attached);
  free(m->unit_kind);
  free(m->unit_suffix);
}
