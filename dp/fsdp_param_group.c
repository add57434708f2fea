// SPDX-License-Identifier: BSD-3-Clause
/* A fully sharded unit's state machine (FSDP2's _fsdp_param_group.py for
 * the unit, _fsdp_state.py for its module's hooks and the root's end of
 * backward): unshard (start the all-gather), wait_for_unshard (the
 * parameters view the full tensors), reshard (they view the shard again),
 * the hooks around forward and backward that run them, and finalize over
 * the group. Each hook checks the state it expects, then does its verbs in
 * order; the transitions are tpdp/fsdp.h's life cycle. */
#include <string.h>

#include "dp/fsdp_internal.h"

tpdp_status fsdp_expect_state(const tpdp_fsdp_unit *u,
                              const tpdp_handle_state *allowed, int n,
                              const char *call) {
  for (int i = 0; i < n; i++)
    if (u->state == allowed[i]) return TPDP_SUCCESS;
  char want[128] = "";
  for (int i = 0; i < n; i++) {
    strncat(want, i ? " or " : "", sizeof want - strlen(want) - 1);
    strncat(want, tpdp_handle_state_name(allowed[i]),
            sizeof want - strlen(want) - 1);
  }
  return TPDP_ERR(TPDP_ERR_STATE,
                  "fully sharded unit %s on rank %d: %s expects state %s, "
                  "the unit is in %s",
                  u->label, u->rank, call, want,
                  tpdp_handle_state_name(u->state));
}

/* ------------------------------------------------------------ verbs */

tpdp_status fsdp_unshard(tpdp_fsdp_unit *u) { return fsdp_all_gather_start(u); }

tpdp_status fsdp_wait_for_unshard(tpdp_fsdp_unit *u) {
  if (u->gather == GATHER_DONE) return TPDP_SUCCESS;
  CHECK(fsdp_all_gather_wait(u));
  return fsdp_params_to_unsharded(u, u->full, u->pdt);
}

tpdp_status fsdp_reshard(tpdp_fsdp_unit *u) {
  CHECK(fsdp_params_to_sharded(u));
  if (!fsdp_full_is_persistent(u))
    fsdp_free(u, &u->full, u->full_elems, u->pdt, 1);
  u->gather = GATHER_NONE;
  return TPDP_SUCCESS;
}

static int reshards_after_forward(const tpdp_fsdp_unit *u) {
  if (u->reshard_option >= 0) return u->reshard_option;
  return u->level == 3 && u->parent != NULL;
}

/* The full gradients the framework adds into, zeroed unless they hold an
 * accumulation. */
static tpdp_status zeroed_full_grads(tpdp_fsdp_unit *u) {
  if (u->full_grad == NULL)
    return fsdp_alloc(u, "full gradients", u->full_elems, u->pdt,
                      !fsdp_grad_is_persistent(u), 1, &u->full_grad);
  if (!u->grads_pending)
    return fsdp_zero(u, u->full_grad, u->pdt, u->full_elems);
  return TPDP_SUCCESS;
}

/* Reduce this step's gradients (FSDP2's post_backward reduce). */
static tpdp_status reduce_grads(tpdp_fsdp_unit *u) {
  u->grads_pending = 0;
  u->reduced = 1;
  CHECK(fsdp_reduce_scatter_start(u));
  /* HSDP: the previous unit's all-reduce over replicate starts now, behind
   * this unit's reduce-scatter, and runs during the rest of backward. Its
   * place is fixed by the order of the units' backward, not by when its
   * reduce-scatter happened to finish, so the replicas issue their
   * all-reduces in the same order. */
  fsdp_group *g = u->group;
  tpdp_fsdp_unit *prev = g->rep_next;
  g->rep_next = u->rep_size > 1 ? u : NULL;
  if (prev) CHECK(fsdp_replicate_start(prev));
  return TPDP_SUCCESS;
}

/* MPI advances a non-blocking collective only inside MPI calls: each hook
 * tests the group's collectives in flight (prefetched all-gathers,
 * reduce-scatters of units whose backward ended), so that they move on
 * between the blocks' compute instead of all at the next wait. */
static tpdp_status progress(fsdp_group *g) {
  for (int i = 0; i < g->nunits; i++) {
    tpdp_fsdp_unit *v = g->units[i];
    int done = 0;
    if (v->gather_work)
      AS_UNIT(v, "all-gather", tpdp_work_test(v->gather_work, &done));
    done = 0;
    if (v->rs_work)
      AS_UNIT(v, "reduce-scatter", tpdp_work_test(v->rs_work, &done));
    /* done: its full gradients can go now */
    if (done && v->rs_pieces) CHECK(fsdp_reduce_scatter_wait(v));
    done = 0;
    if (v->rep_work)
      AS_UNIT(v, "replicate all-reduce", tpdp_work_test(v->rep_work, &done));
  }
  return TPDP_SUCCESS;
}

/* The group's forward order, which backward prefetches by (room reserved
 * at creation: one place per unit). */
static tpdp_status record_forward_order(tpdp_fsdp_unit *u) {
  if (u->forwarded) return TPDP_SUCCESS;
  fsdp_group *g = u->group;
  tpdp_status st = core_grow((void **)&g->order, &g->cap_order, g->norder + 1,
                             sizeof *g->order);
  if (st != TPDP_SUCCESS)
    return TPDP_ERR(st,
                    "unit %s on rank %d: its place in the forward order: %s",
                    u->label, u->rank, core_error_detail());
  g->order[g->norder++] = u;
  u->forwarded = 1;
  return TPDP_SUCCESS;
}

/* Unshard the unit that ran before u in forward: its backward comes
 * next. */
static tpdp_status prefetch_for_backward(tpdp_fsdp_unit *u) {
  fsdp_group *g = u->group;
  for (int i = 1; i < g->norder; i++)
    if (g->order[i] == u) return fsdp_unshard(g->order[i - 1]);
  return TPDP_SUCCESS;
}

/* ------------------------------------------------------------ hooks */

static tpdp_status pre_forward(tpdp_module *m, void *ctx) {
  (void)m;
  tpdp_fsdp_unit *u = ctx;
  CHECK(progress(u->group));
  /* BACKWARD_POST: the next micro-batch of an accumulation. */
  static const tpdp_handle_state ok[] = {TPDP_HANDLE_IDLE, TPDP_HANDLE_FORWARD,
                                         TPDP_HANDLE_BACKWARD_POST};
  CHECK(fsdp_expect_state(u, ok, 3,
                          "forward (a second forward during backward, "
                          "e.g. activation recomputation, is not "
                          "supported)"));
  if (u->reduced)
    return TPDP_ERR(TPDP_ERR_STATE,
                    "fully sharded unit %s on rank %d: forward after a synced "
                    "backward; call tpdp_fsdp_finalize first",
                    u->label, u->rank);
  CHECK(fsdp_unshard(u));
  CHECK(fsdp_wait_for_unshard(u));
  CHECK(record_forward_order(u));
  u->state = TPDP_HANDLE_FORWARD;
  return TPDP_SUCCESS;
}

static tpdp_status post_forward(tpdp_module *m, void *ctx) {
  (void)m;
  tpdp_fsdp_unit *u = ctx;
  CHECK(progress(u->group));
  if (reshards_after_forward(u)) CHECK(fsdp_reshard(u));
  return TPDP_SUCCESS;
}

static tpdp_status pre_backward(tpdp_module *m, void *ctx) {
  (void)m;
  tpdp_fsdp_unit *u = ctx;
  CHECK(progress(u->group));
  static const tpdp_handle_state ok[] = {TPDP_HANDLE_FORWARD};
  CHECK(fsdp_expect_state(u, ok, 1, "backward (backward runs after forward)"));
  CHECK(fsdp_unshard(u));
  CHECK(fsdp_wait_for_unshard(u));
  CHECK(prefetch_for_backward(u));
  CHECK(zeroed_full_grads(u));
  u->grads_pending = 1;
  CHECK(fsdp_params_set_grads(u, 1));
  u->state = TPDP_HANDLE_BACKWARD_PRE;
  return TPDP_SUCCESS;
}

static tpdp_status post_backward(tpdp_module *m, void *ctx) {
  (void)m;
  tpdp_fsdp_unit *u = ctx;
  CHECK(progress(u->group));
  static const tpdp_handle_state ok[] = {TPDP_HANDLE_BACKWARD_PRE};
  CHECK(fsdp_expect_state(u, ok, 1, "the end of backward"));
  u->state = TPDP_HANDLE_BACKWARD_POST;
  if (u->group->sync && u->level >= 2) CHECK(reduce_grads(u));
  if (u->level == 3) CHECK(fsdp_reshard(u));
  return TPDP_SUCCESS;
}

tpdp_status fsdp_register_hooks(tpdp_fsdp_unit *u) {
  tpdp_hook_handle *h = u->hooks;
  CHECK(tpdp_module_register_forward_pre_hook(u->module, pre_forward, u,
                                              &h[u->nhooks]));
  u->nhooks++;
  CHECK(tpdp_module_register_forward_hook(u->module, post_forward, u,
                                          &h[u->nhooks]));
  u->nhooks++;
  CHECK(tpdp_module_register_backward_pre_hook(u->module, pre_backward, u,
                                               &h[u->nhooks]));
  u->nhooks++;
  CHECK(tpdp_module_register_backward_hook(u->module, post_backward, u,
                                           &h[u->nhooks]));
  u->nhooks++;
  return TPDP_SUCCESS;
}

void fsdp_remove_hooks(tpdp_fsdp_unit *u) {
  while (u->nhooks > 0) (void)tpdp_hook_remove(u->hooks[--u->nhooks]);
}

/* ---------------------------------------------------- end of a step */

tpdp_status fsdp_group_finalize(fsdp_group *g) {
  /* Level 1 reduces here; so does a unit unused in this step (zero
   * gradients), so that every rank makes the same collectives. At most two
   * of these are in flight (each holds a packed copy of its gradients). */
  tpdp_fsdp_unit *prev = NULL;
  for (int i = 0; i < g->nunits; i++) {
    tpdp_fsdp_unit *u = g->units[i];
    if (u->reduced) continue;
    CHECK(zeroed_full_grads(u));
    CHECK(reduce_grads(u));
    if (prev) CHECK(fsdp_reduce_scatter_wait(prev));
    prev = u;
  }
  core_first_error f;
  core_first_error_init(&f);
  tpdp_fsdp_unit *last = g->rep_next; /* HSDP: the last all-reduce */
  g->rep_next = NULL;
  if (last) core_first_error_add(&f, fsdp_replicate_start(last));
  for (int i = 0; i < g->nunits; i++) {
    tpdp_fsdp_unit *u = g->units[i];
    core_first_error_add(&f, fsdp_reduce_scatter_wait(u));
    core_first_error_add(&f, fsdp_replicate_wait(u));
    if (u->gather_work) { /* a prefetch nobody used */
      core_first_error_add(&f, fsdp_all_gather_wait(u));
    }
    core_first_error_add(&f, fsdp_reshard(u));
    core_first_error_add(&f, fsdp_params_set_grads(u, 0));
    u->state = TPDP_HANDLE_IDLE;
    u->forwarded = 0;
    u->reduced = 0;
  }
  g->norder = 0;
  g->last = g->cur;
  memset(&g->cur, 0, sizeof g->cur);
  return f.status;
}
