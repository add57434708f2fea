// SPDX-License-Identifier: BSD-3-Clause
/* Parameters (as torch's nn/parameter.py, with FSDP's per-parameter handle
 * state): the reference-counted object a module registers, its tensor and
 * gradient views, its spec and form (plain, DTensor, localized), the rows
 * of a dim-0 shard, and its handle training state. */
#include <stdio.h>
#include <stdlib.h>

#include "core/module_internal.h"
#include "core/util.h"

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
  core_module_tree_changed();
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

static int handle_at(const void *list, int i) {
  return (int)((const tpdp_handle_state *)list)[i];
}
static const char *handle_name_int(int s) {
  return tpdp_handle_state_name((tpdp_handle_state)s);
}
static const core_state_kind handle_states = {handle_at, handle_name_int};

tpdp_status tpdp_param_check_state(const tpdp_param *p,
                                   const tpdp_handle_state *allowed, int n,
                                   const char *what) {
  TPDP_API_ENTRY;
  CHECK_PTR(p);
  int in;
  char set[256];
  CHECK(core_find_state(&handle_states, allowed, n, (int)p->state, &in, set,
                        sizeof set));
  if (in) return TPDP_SUCCESS;
  return TPDP_ERR(TPDP_ERR_STATE,
                  "parameter '%s': expected to be in states %s but current "
                  "state is %s",
                  what ? what : "?", set, tpdp_handle_state_name(p->state));
}
