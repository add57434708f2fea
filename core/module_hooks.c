// SPDX-License-Identifier: BSD-3-Clause
/* Module hooks (as torch's forward and backward hooks on nn.Module): the
 * four lists a module keeps (forward pre-hooks, forward hooks, backward
 * pre-hooks, backward hooks), registration and removal by handle, and the
 * runs that tpdp_module_forward_begin/_end and _backward_begin/_end make.
 * A hook may remove hooks (itself included) while its list runs: removal
 * then only marks the entry, and the list is compacted when the outermost
 * run ends. */
#include <stdlib.h>

#include "core/module_internal.h"
#include "core/util.h"

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
  MODULE_LABEL(m, lbl);
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

void core_module_hooks_free(tpdp_module *m) {
  free(m->pre_hooks.items);
  free(m->post_hooks.items);
  free(m->backward_pre_hooks.items);
  free(m->backward_post_hooks.items);
}
