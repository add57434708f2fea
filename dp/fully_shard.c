// SPDX-License-Identifier: BSD-3-Clause
/* The fully sharded units' entry points (tpdp/fsdp.h; FSDP2's
 * _fully_shard.py): every public function is here, each checking its
 * arguments and then calling the files that do the work. A unit is dim-0
 * chunk sharding of a module's local parameters over a dp communicator,
 * one flat all-gather and one flat reduce-scatter per unit and step,
 * driven by the module's forward and backward hooks. Host memory over
 * MPI; CUDA memory over NCCL, every copy and buffer ordered on the
 * framework's stream (options.stream), the collectives on the
 * communicator's stream after it and it after them. The map of the other
 * files is dp/fsdp_internal.h. */
#include <stddef.h>
#include <string.h>

#include "dp/fsdp_internal.h"
#include "tpdp/fsdp.h"

/* --------------------------------------------------------- options */

tpdp_fully_shard_options tpdp_fully_shard_options_default(void) {
  tpdp_fully_shard_options o;
  memset(&o, 0, sizeof o);
  o.size = sizeof o;
  o.version = TPDP_FULLY_SHARD_OPTIONS_VERSION;
  o.zero_level = 3;
  o.reshard_after_forward = -1;
  o.param_dtype = TPDP_F32;
  o.reduce_dtype = TPDP_F32;
  o.stream = NULL;
  o.replicate = NULL;
  return o;
}

/* The struct as version 2 laid it out: everything before `replicate`. */
#define OPTIONS_V2_SIZE offsetof(tpdp_fully_shard_options, replicate)

/* *o = the caller's options over the defaults. A caller built against
 * version 2 passes that version's size: only those bytes are its (reading
 * the whole struct would read past it), and replicate stays NULL. */
static tpdp_status read_options(const tpdp_fully_shard_options *in,
                                tpdp_fully_shard_options *o) {
  *o = tpdp_fully_shard_options_default();
  if (in == NULL) return TPDP_SUCCESS;
  const int v3 =
      in->size == sizeof *in && in->version == TPDP_FULLY_SHARD_OPTIONS_VERSION;
  const int v2 = in->size == OPTIONS_V2_SIZE && in->version == 2;
  if (!v3 && !v2)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "tpdp_fully_shard_options: size %zu version %u, this "
                    "library expects size %zu version %d or size %zu version "
                    "2 (use tpdp_fully_shard_options_default())",
                    in->size, in->version, sizeof *in,
                    TPDP_FULLY_SHARD_OPTIONS_VERSION, OPTIONS_V2_SIZE);
  memcpy(o, in, in->size);
  o->size = sizeof *o;
  o->version = TPDP_FULLY_SHARD_OPTIONS_VERSION;
  return TPDP_SUCCESS;
}

static tpdp_status check_options(const tpdp_fully_shard_options *o) {
  if (o->zero_level < 1 || o->zero_level > 3)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "zero_level is %d; expected 1, 2 or 3 (level 0 is the "
                    "DDP reducer, tpdp/reducer.h)",
                    o->zero_level);
  if (o->reshard_after_forward < -1 || o->reshard_after_forward > 1)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "reshard_after_forward is %d; expected -1, 0 or 1",
                    o->reshard_after_forward);
  const tpdp_dtype dts[2] = {o->param_dtype, o->reduce_dtype};
  for (int k = 0; k < 2; k++)
    if (dts[k] != TPDP_F32 && dts[k] != TPDP_BF16 && dts[k] != TPDP_F16)
      return TPDP_ERR(
          TPDP_ERR_DTYPE_MISMATCH, "%s is %s; expected f32, bf16 or f16",
          k ? "reduce_dtype" : "param_dtype", tpdp_dtype_name(dts[k]));
  return TPDP_SUCCESS;
}

/* ------------------------------------------------------- creation */

/* What tpdp_fully_shard did to the module before the agreement, taken
 * back when it fails on some rank. */
typedef struct {
  int sharded, unit_set, ext_set;
} attached;

/* The module's records of the unit: its unit mark, the unit as its
 * extension (from here the module owns the unit and frees it with
 * itself), the hooks. Their messages do not name the unit. */
static tpdp_status mark_module(tpdp_fsdp_unit *u, attached *a) {
  CHECK(tpdp_module_set_unit(u->module, "FSDP", " FULLY SHARDED"));
  a->unit_set = 1;
  CHECK(tpdp_module_attach_state(u->module, FSDP_EXT_KEY, u, fsdp_unit_free));
  a->ext_set = 1;
  return fsdp_register_hooks(u);
}

/* Everything that can fail on one rank and not another runs before the
 * agreement (the walk, the checks, every allocation, the hooks), so that a
 * failure on any rank fails every rank and leaves each module as it was;
 * after it, nested units join the new root in memory already reserved. */
static tpdp_status attach(tpdp_fsdp_unit *u, attached *a) {
  CHECK(fsdp_collect_params(u));
  CHECK(fsdp_build_shard(u));
  CHECK(fsdp_reserve_nested(u));
  a->sharded = 1;
  CHECK(fsdp_params_to_sharded(u));
  tpdp_status st = mark_module(u, a);
  if (st != TPDP_SUCCESS)
    return TPDP_ERR(st, "fully_shard of %s on rank %d: marking the module: %s",
                    u->label, u->rank, core_error_detail());
  return TPDP_SUCCESS;
}

static void detach(tpdp_fsdp_unit *u, const attached *a) {
  fsdp_remove_hooks(u);
  if (a->sharded) fsdp_restore_params(u); /* the caller's memory again */
  if (a->unit_set) (void)tpdp_module_clear_unit(u->module);
  if (a->ext_set) /* frees the unit */
    (void)tpdp_module_attach_state(u->module, FSDP_EXT_KEY, NULL, NULL);
  else
    fsdp_unit_free(u);
}

tpdp_status tpdp_fully_shard(tpdp_module *module, tpdp_comm *dp,
                             const tpdp_fully_shard_options *options,
                             tpdp_fsdp_unit **out) {
  TPDP_API_ENTRY;
  CHECK_PTR(out);
  *out = NULL;
  CHECK_PTR(module);
  CHECK_PTR(dp);
  tpdp_fully_shard_options o;
  tpdp_status local = read_options(options, &o);
  if (local == TPDP_SUCCESS) local = check_options(&o);
  if (local == TPDP_SUCCESS && tpdp_module_unit_kind(module) != NULL) {
    char label[256];
    tpdp_module_label(module, label, sizeof label);
    local = TPDP_ERR(TPDP_ERR_ALREADY,
                     "fully_shard of %s on rank %d: the module is a %s unit "
                     "already",
                     label, tpdp_comm_rank(dp), tpdp_module_unit_kind(module));
  }
  tpdp_fsdp_unit *u = NULL;
  if (local == TPDP_SUCCESS) local = fsdp_unit_create(module, dp, &o, &u);
  attached a = {0, 0, 0};
  if (local == TPDP_SUCCESS) local = attach(u, &a);
  tpdp_status st =
      fsdp_agree(dp, o.replicate, u, local); /* o: defaults if unread */
  if (st == TPDP_SUCCESS) st = fsdp_adopt_nested(u);
  if (st != TPDP_SUCCESS) {
    if (u) detach(u, &a);
    return st;
  }
  *out = u;
  return TPDP_SUCCESS;
}

/* ------------------------------------------------------- accessors */

static tpdp_status check_unit(const tpdp_fsdp_unit *u, const char *arg) {
  return core_check_handle(u, u ? u->magic : 0, FSDP_MAGIC, arg,
                           "fully sharded unit", "its module was destroyed");
}

tpdp_status tpdp_fsdp_release(tpdp_fsdp_unit *u) {
  TPDP_API_ENTRY;
  CHECK(check_unit(u, "unit"));
  if (u->state != TPDP_HANDLE_IDLE)
    return TPDP_ERR(TPDP_ERR_STATE,
                    "release of unit %s on rank %d: the unit is in state %s: "
                    "release it between steps",
                    u->label, u->rank, tpdp_handle_state_name(u->state));
  fsdp_remove_hooks(u);
  (void)tpdp_module_clear_unit(u->module);
  /* the module owns the unit: removing its state frees it */
  return tpdp_module_attach_state(u->module, FSDP_EXT_KEY, NULL, NULL);
}

tpdp_fsdp_unit *tpdp_fsdp_unit_of(const tpdp_module *module) {
  return module ? tpdp_module_attached_state(module, FSDP_EXT_KEY) : NULL;
}

tpdp_module *tpdp_fsdp_unit_module(const tpdp_fsdp_unit *u) {
  return u && u->magic == FSDP_MAGIC ? u->module : NULL;
}

tpdp_handle_state tpdp_fsdp_unit_state(const tpdp_fsdp_unit *u) {
  return u && u->magic == FSDP_MAGIC ? u->state : TPDP_HANDLE_IDLE;
}

int tpdp_fsdp_num_params(const tpdp_fsdp_unit *u) {
  return u && u->magic == FSDP_MAGIC ? u->np : 0;
}

tpdp_param *tpdp_fsdp_param(const tpdp_fsdp_unit *u, int i, const char **fqn) {
  if (u == NULL || u->magic != FSDP_MAGIC || i < 0 || i >= u->np) return NULL;
  if (fqn) *fqn = u->p[i].fqn;
  return u->p[i].param;
}

tpdp_status tpdp_fsdp_param_rows(const tpdp_fsdp_unit *u, int i, int64_t *row0,
                                 int64_t *rows) {
  TPDP_API_ENTRY;
  CHECK(check_unit(u, "unit"));
  CHECK_PTR(row0);
  CHECK_PTR(rows);
  if (i < 0 || i >= u->np)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "unit %s has %d parameters; index %d is out of range",
                    u->label, u->np, i);
  *rows = fsdp_rows_of(&u->p[i], u->rank);
  *row0 = *rows ? (int64_t)u->rank * u->p[i].chunk : u->p[i].shape[0];
  return TPDP_SUCCESS;
}

static tpdp_status check_root(const tpdp_fsdp_unit *u) {
  CHECK(check_unit(u, "root"));
  if (u->parent != NULL)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "unit %s is nested in unit %s; call it on the root unit",
                    u->label, u->parent->label);
  return TPDP_SUCCESS;
}

/* ------------------------------------------------------------ step */

tpdp_status tpdp_fsdp_finalize(tpdp_fsdp_unit *root) {
  TPDP_API_ENTRY;
  CHECK(check_root(root));
  fsdp_group *g = root->group;
  if (!g->sync)
    return TPDP_ERR(TPDP_ERR_STATE,
                    "%s: gradient sync is off "
                    "(accumulating); turn it on for the last micro-batch "
                    "first",
                    root->label);
  for (int i = 0; i < g->nunits; i++) {
    tpdp_fsdp_unit *u = g->units[i];
    if (u->state == TPDP_HANDLE_BACKWARD_PRE ||
        (u->state == TPDP_HANDLE_FORWARD && u->forwarded))
      return TPDP_ERR(TPDP_ERR_STATE,
                      "fully sharded unit %s on rank %d "
                      "is in state %s; expected BACKWARD_POST (its backward "
                      "has not finished)",
                      u->label, u->rank, tpdp_handle_state_name(u->state));
    if (u->state == TPDP_HANDLE_SUMMON_FULL_PARAMS)
      return TPDP_ERR(TPDP_ERR_STATE,
                      "unit %s on rank %d is in state "
                      "SUMMON_FULL_PARAMS; call tpdp_fsdp_summon_end first",
                      u->label, u->rank);
  }
  return fsdp_group_finalize(g);
}

tpdp_status tpdp_fsdp_set_requires_gradient_sync(tpdp_fsdp_unit *root,
                                                 int sync) {
  TPDP_API_ENTRY;
  CHECK(check_root(root));
  root->group->sync = sync != 0;
  return TPDP_SUCCESS;
}

/* ----------------------------------------------------------- summon */

tpdp_status tpdp_fsdp_summon_full_params(tpdp_fsdp_unit *root) {
  TPDP_API_ENTRY;
  CHECK(check_root(root));
  fsdp_group *g = root->group;
  static const tpdp_handle_state ok[] = {TPDP_HANDLE_IDLE};
  for (int i = 0; i < g->nunits; i++)
    CHECK(fsdp_expect_state(g->units[i], ok, 1, "summon_full_params"));
  for (int i = 0; i < g->nunits; i++) {
    tpdp_fsdp_unit *u = g->units[i];
    if (u->pdt == TPDP_F32) {
      CHECK(fsdp_unshard(u));
      CHECK(fsdp_wait_for_unshard(u));
    } else { /* the f32 master, not the param_dtype copy */
      CHECK(fsdp_all_gather_master(u));
      CHECK(fsdp_params_to_unsharded(u, u->summoned, TPDP_F32));
    }
    u->state = TPDP_HANDLE_SUMMON_FULL_PARAMS;
  }
  return TPDP_SUCCESS;
}

tpdp_status tpdp_fsdp_summon_end(tpdp_fsdp_unit *root, int writeback) {
  TPDP_API_ENTRY;
  CHECK(check_root(root));
  fsdp_group *g = root->group;
  static const tpdp_handle_state ok[] = {TPDP_HANDLE_SUMMON_FULL_PARAMS};
  for (int i = 0; i < g->nunits; i++)
    CHECK(fsdp_expect_state(g->units[i], ok, 1, "summon_end"));
  for (int i = 0; i < g->nunits; i++) {
    tpdp_fsdp_unit *u = g->units[i];
    if (writeback && !u->shard_in_full) /* else the rows are the full's */
      for (int k = 0; k < u->np; k++) {
        const fsdp_param *q = &u->p[k];
        CHECK(fsdp_copy(u, u->shard + q->shard_off,
                        (u->summoned ? u->summoned : (float *)u->full) +
                            q->full_off + u->rank * q->chunk * q->row_elems,
                        TPDP_F32, fsdp_rows_of(q, u->rank) * q->row_elems));
      }
    fsdp_free(u, (void **)&u->summoned, u->full_elems, TPDP_F32, 1);
    CHECK(fsdp_reshard(u));
    u->state = TPDP_HANDLE_IDLE;
  }
  return TPDP_SUCCESS;
}

/* ------------------------------------------------------------ stats */

tpdp_status tpdp_fsdp_get_stats(const tpdp_fsdp_unit *root,
                                tpdp_fsdp_stats *out) {
  TPDP_API_ENTRY;
  CHECK(check_root(root));
  CHECK_PTR(out);
  const fsdp_group *g = root->group;
  *out = g->last;
  int64_t persistent = 0;
  for (int i = 0; i < g->nunits; i++) {
    const tpdp_fsdp_unit *u = g->units[i];
    int64_t full = u->full_elems * (int64_t)tpdp_dtype_size(u->pdt);
    if (!u->shard_in_full) persistent += u->shard_elems * 4;
    if (!u->grad_in_full) persistent += u->shard_elems * 4;
    if (fsdp_full_is_persistent(u)) persistent += full;
    if (fsdp_grad_is_persistent(u)) persistent += full;
  }
  out->persistent_bytes = persistent;
  return TPDP_SUCCESS;
}
