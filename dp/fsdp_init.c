// SPDX-License-Identifier: BSD-3-Clause
/* A fully sharded unit's creation (FSDP2's _fsdp_init.py): the unit and
 * its group, the managed-module walk that collects the parameters of the
 * module's subtree outside nested units and checks each, the agreement of
 * the ranks on what they shard, the shard's storage with this rank's rows
 * copied in, nested units joining their root's group, and the free. The
 * order of these steps is tpdp_fully_shard's (fully_shard.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp/fsdp_internal.h"

tpdp_status fsdp_unit_create(tpdp_module *module, tpdp_comm *dp,
                             const tpdp_fully_shard_options *o,
                             tpdp_fsdp_unit **out) {
  tpdp_fsdp_unit *u = NULL;
  fsdp_group *g = NULL;
  tpdp_status st = TPDP_CALLOC(u, 1);
  if (st == TPDP_SUCCESS) st = TPDP_CALLOC(g, 1);
  if (st == TPDP_SUCCESS)
    st = core_grow((void **)&g->units, &g->cap_units, 1, sizeof *g->units);
  if (st != TPDP_SUCCESS) {
    char label[256];
    tpdp_module_label(module, label, sizeof label);
    if (g) free(g->units);
    free(g);
    free(u);
    return TPDP_ERR(st, "fully_shard of %s on rank %d: the unit's state: %s",
                    label, tpdp_comm_rank(dp), core_error_detail());
  }
  u->magic = FSDP_MAGIC;
  u->module = module;
  u->comm = dp;
  u->rank = tpdp_comm_rank(dp);
  u->nranks = tpdp_comm_size(dp);
  u->level = o->zero_level;
  u->reshard_option = o->reshard_after_forward;
  u->stream = o->stream;
  u->pdt = o->param_dtype;
  u->rdt = o->reduce_dtype;
  u->rep = o->replicate;
  u->rep_size = o->replicate ? tpdp_comm_size(o->replicate) : 0;
  u->state = TPDP_HANDLE_IDLE;
  u->group = g;
  g->refs = 1;
  g->sync = 1;
  g->units[g->nunits++] = u;
  tpdp_module_label(module, u->label, sizeof u->label);
  snprintf(u->watch_label, sizeof u->watch_label, "the fully sharded unit %s",
           u->label);
  *out = u;
  return TPDP_SUCCESS;
}

/* ------------------------------------------------ the managed modules */

/* A parameter a unit can shard: f32, contiguous, on the unit's device
 * (that of its first parameter), the memory the dp communicator moves. */
static tpdp_status check_param(const tpdp_fsdp_unit *u, const fsdp_param *q,
                               const tpdp_tensor *t) {
  char what[320], dev[32], first[32];
  snprintf(what, sizeof what, "fully_shard of %s on rank %d: parameter '%s'",
           u->label, u->rank, q->fqn);
  tpdp_device_format(t->device, dev, sizeof dev);
  tpdp_device_format(u->device, first, sizeof first);
  if (t->dtype != TPDP_F32)
    return TPDP_ERR(TPDP_ERR_DTYPE_MISMATCH,
                    "%s is %s; only f32 parameters can be sharded", what,
                    tpdp_dtype_name(t->dtype));
  if (t->ndim < 1 || !tpdp_tensor_is_contiguous(t))
    return TPDP_ERR(TPDP_ERR_UNSUPPORTED,
                    "%s must be a contiguous tensor of at least one dimension",
                    what);
  CHECK(core_mem_supported(t->device, what));
  if (!tpdp_device_equal(t->device, u->device))
    return TPDP_ERR(TPDP_ERR_DEVICE_MISMATCH,
                    "%s is on %s, the unit's first parameter on %s: a unit's "
                    "parameters share one device",
                    what, dev, first);
  if (t->device.type != tpdp_comm_device_type(u->comm))
    return TPDP_ERR(
        TPDP_ERR_DEVICE_MISMATCH,
        "%s is on %s but the dp communicator %s (%s) moves %s "
        "memory",
        what, dev, tpdp_comm_name(u->comm), tpdp_comm_backend(u->comm),
        tpdp_comm_device_type(u->comm) == TPDP_DEVICE_CUDA ? "GPU" : "host");
  return TPDP_SUCCESS;
}

static int inside_nested_unit(const tpdp_module *m, const tpdp_module *top) {
  for (const tpdp_module *a = m; a && a != top; a = tpdp_module_parent(a))
    if (tpdp_fsdp_unit_of(a) != NULL) return 1;
  return 0;
}

/* One module of the walk: its parameters not seen yet join the unit. */
static tpdp_status collect(tpdp_module *m, const char *prefix, int level,
                           void *vu) {
  (void)level;
  tpdp_fsdp_unit *u = vu;
  if (inside_nested_unit(m, u->module)) return TPDP_SUCCESS;
  for (int k = 0; k < tpdp_module_num_params(m); k++) {
    const char *name;
    tpdp_param *p = tpdp_module_param(m, k, &name);
    int seen = 0;
    for (int i = 0; i < u->np && !seen; i++) seen = u->p[i].param == p;
    if (seen) continue;
    int cap = u->np; /* grown one at a time: creation only */
    CHECK(core_grow((void **)&u->p, &cap, u->np + 1, sizeof *u->p));
    fsdp_param *q = &u->p[u->np];
    memset(q, 0, sizeof *q);
    size_t len = strlen(prefix) + strlen(name) + 1;
    CHECK(TPDP_CALLOC(q->fqn, len));
    snprintf(q->fqn, len, "%s%s", prefix, name);
    tpdp_param_retain(p);
    q->param = p;
    u->np++;
    const tpdp_tensor *t = tpdp_param_tensor(p);
    q->original = *t;
    if (u->np == 1) u->device = t->device; /* the unit's first parameter */
    CHECK(check_param(u, q, t));
    q->ndim = t->ndim;
    memcpy(q->shape, t->shape, sizeof q->shape);
  }
  return TPDP_SUCCESS;
}

tpdp_status fsdp_collect_params(tpdp_fsdp_unit *u) {
  tpdp_status st = tpdp_module_apply(u->module, collect, u);
  if (st == TPDP_ERR_OUT_OF_MEMORY)
    return TPDP_ERR(st, "fully_shard of %s on rank %d: its parameter list: %s",
                    u->label, u->rank, core_error_detail());
  CHECK(st);
  if (fsdp_on_gpu(u) && (u->pdt != TPDP_F32 || u->rdt != TPDP_F32))
    return TPDP_ERR(TPDP_ERR_UNSUPPORTED,
                    "fully_shard of %s on rank %d: param_dtype %s, "
                    "reduce_dtype %s on a GPU: CUDA units move f32 only (no "
                    "cast kernels yet)",
                    u->label, u->rank, tpdp_dtype_name(u->pdt),
                    tpdp_dtype_name(u->rdt));
  if (u->rep && tpdp_comm_device_type(u->rep) != tpdp_comm_device_type(u->comm))
    return TPDP_ERR(TPDP_ERR_DEVICE_MISMATCH,
                    "fully_shard of %s on rank %d: the replicate "
                    "communicator %s (%s) and dp %s (%s) move memory of "
                    "different devices",
                    u->label, u->rank, tpdp_comm_name(u->rep),
                    tpdp_comm_backend(u->rep), tpdp_comm_name(u->comm),
                    tpdp_comm_backend(u->comm));
  /* The all-reduce over replicate is not ordered on the unit's stream
   * yet: refused rather than racing the framework's kernels. */
  if (fsdp_on_gpu(u) && u->rep_size > 1)
    return TPDP_ERR(TPDP_ERR_UNSUPPORTED,
                    "fully_shard of %s on rank %d: hybrid sharding "
                    "(a replicate communicator of %d ranks) on a GPU: CUDA "
                    "units shard over dp only",
                    u->label, u->rank, u->rep_size);
  if (u->np == 0)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "fully_shard of %s on rank %d: the module has no "
                    "parameter outside nested units",
                    u->label, u->rank);
  return TPDP_SUCCESS;
}

/* ------------------------------------------------------- agreement */

/* What the ranks must agree on at creation. */
typedef struct {
  int32_t status;
  int32_t level;
  int32_t nparams;
  int32_t pad;
  int32_t dp_size;   /* S */
  int32_t rep_size;  /* R; -1: no replicate communicator */
  uint64_t shapes;   /* FNV-1a over every parameter's ndim and shape */
  int64_t msg_bytes; /* TPDP_PIECES_MSG_BYTES (0: no collectives over
                        pieces): both sides of a message cut alike */
} fsdp_agree_rec;

static int rec_same(const void *a, const void *b) {
  const fsdp_agree_rec *x = a, *y = b;
  /* A rank whose own check failed is reported as such, not as different. */
  if (x->status != TPDP_SUCCESS || y->status != TPDP_SUCCESS) return 1;
  return x->level == y->level && x->nparams == y->nparams &&
         x->shapes == y->shapes && x->msg_bytes == y->msg_bytes &&
         x->dp_size == y->dp_size && x->rep_size == y->rep_size;
}

static void rec_describe(core_strbuf *b, const void *rec) {
  const fsdp_agree_rec *r = rec;
  core_sb_printf(b,
                 "zero level %d, param_dtype %s, reduce_dtype %s, %d "
                 "parameters, shapes hash %016llx",
                 r->level & 0xff,
                 tpdp_dtype_name((tpdp_dtype)(r->level >> 8 & 0xff)),
                 tpdp_dtype_name((tpdp_dtype)(r->level >> 16 & 0xff)),
                 r->nparams, (unsigned long long)r->shapes);
  if (r->msg_bytes > 0)
    core_sb_printf(b, ", TPDP_PIECES_MSG_BYTES %lld", (long long)r->msg_bytes);
  core_sb_printf(b, ", dp size %d, replicate size ", r->dp_size);
  if (r->rep_size < 0)
    core_sb_printf(b, "none");
  else
    core_sb_printf(b, "%d", r->rep_size);
}

static CORE_THREAD_LOCAL const tpdp_fsdp_unit
    *agree_unit; /* for rec_mismatch's message */

static tpdp_status rec_mismatch(const tpdp_comm *comm, const void *a,
                                const void *b, const char *ranks) {
  (void)a;
  (void)b;
  return TPDP_ERR(TPDP_ERR_SHAPE_MISMATCH,
                  "fully_shard of %s on rank %d: the ranks of '%s' disagree "
                  "on the unit: %s",
                  agree_unit ? agree_unit->label : "?", tpdp_comm_rank(comm),
                  tpdp_comm_name(comm), ranks);
}

static uint64_t fnv(uint64_t h, int64_t v) {
  for (int i = 0; i < 8; i++) {
    h ^= (uint64_t)((v >> (8 * i)) & 0xff);
    h *= 1099511628211ull;
  }
  return h;
}

tpdp_status fsdp_agree(tpdp_comm *dp, tpdp_comm *replicate,
                       const tpdp_fsdp_unit *u, tpdp_status local) {
  fsdp_agree_rec rec = {0};
  rec.status = local;
  rec.dp_size = tpdp_comm_size(dp);
  rec.rep_size = replicate ? tpdp_comm_size(replicate) : -1;
  rec.msg_bytes = comm_supports_pieces(dp) ? comm_pieces_message_bytes() : 0;
  rec.shapes = 1469598103934665603ull;
  /* the level and both dtypes */
  if (u) rec.level = u->level | (int32_t)u->pdt << 8 | (int32_t)u->rdt << 16;
  rec.nparams = u ? u->np : 0;
  for (int i = 0; u && i < u->np; i++) {
    rec.shapes = fnv(rec.shapes, u->p[i].ndim);
    for (int d = 0; d < u->p[i].ndim; d++)
      rec.shapes = fnv(rec.shapes, u->p[i].shape[d]);
  }
  static const comm_agree_kind kind = {sizeof(fsdp_agree_rec), rec_same,
                                       rec_describe, rec_mismatch};
  agree_unit = u;
  tpdp_status st = comm_agree(dp, &kind, &rec, local);
  /* HSDP: the replicas of this rank's shard (in the other dp groups) agree
   * too - on the same record, so that every dp group has the same size S
   * and shapes - and on the outcome over dp, so that a group that failed
   * takes its replicas down with it instead of leaving them waiting in the
   * first replicate all-reduce. */
  if (replicate != NULL) {
    rec.status = st;
    st = comm_agree(replicate, &kind, &rec, st);
  }
  agree_unit = NULL;
  /* Memory short in the agreement itself (here or, spread to this rank,
   * on another) names no unit. */
  if (st == TPDP_ERR_OUT_OF_MEMORY && local == TPDP_SUCCESS && u != NULL)
    return TPDP_ERR(st,
                    "fully_shard of %s on rank %d: agreeing on the unit: %s",
                    u->label, u->rank, core_error_detail());
  return st;
}

/* ------------------------------------------------------ the storage */

tpdp_status fsdp_build_shard(tpdp_fsdp_unit *u) {
  int64_t soff = 0, foff = 0;
  for (int i = 0; i < u->np; i++)
    fsdp_param_layout(&u->p[i], u->nranks, &soff, &foff);
  u->shard_elems = soff;
  u->full_elems = foff;
  u->shard_in_full = u->level <= 2 && u->pdt == TPDP_F32;
  u->grad_in_full = u->level == 1 && u->pdt == TPDP_F32;
  if (u->shard_in_full) /* persistent; the other ranks' rows come later */
    CHECK(fsdp_alloc(u, "full parameters", foff, TPDP_F32, 0, 1, &u->full));
  else
    CHECK(fsdp_alloc(u, "f32 shard", soff, TPDP_F32, 0, 1, (void **)&u->shard));
  if (u->grad_in_full)
    CHECK(fsdp_alloc(u, "full gradients", foff, TPDP_F32, 0, 1, &u->full_grad));
  else
    CHECK(fsdp_alloc(u, "gradient shard", soff, TPDP_F32, 0, 1,
                     (void **)&u->shard_grad));
  for (int i = 0; i < u->np; i++) {
    const fsdp_param *q = &u->p[i];
    const float *src = q->original.data;
    CHECK(fsdp_copy(u, fsdp_shard_rows(u, q),
                    src + u->rank * q->chunk * q->row_elems, TPDP_F32,
                    fsdp_rows_of(q, u->rank) * q->row_elems));
  }
  /* The caller may free its tensors once tpdp_fully_shard returns. */
  if (fsdp_on_gpu(u)) CHECK(core_mem_sync(u->device, u->stream));
  return fsdp_build_pieces(u);
}

void fsdp_restore_params(tpdp_fsdp_unit *u) {
  for (int i = 0; i < u->np; i++) {
    tpdp_param_set_tensor(u->p[i].param, &u->p[i].original);
    tpdp_param_set_row_shard(u->p[i].param, 0, -1);
  }
}

/* --------------------------------------------------- nested units */

typedef struct {
  const tpdp_fsdp_unit *u;
  int n;
} nested_count;

static tpdp_status count_nested(tpdp_module *m, const char *prefix, int level,
                                void *vctx) {
  (void)prefix;
  (void)level;
  nested_count *c = vctx;
  tpdp_fsdp_unit *v = tpdp_fsdp_unit_of(m);
  if (v == NULL || v == c->u) return TPDP_SUCCESS;
  /* One root's units reduce in one chain of replicate all-reduces (the
   * group's rep_next): they share the replicate communicator. */
  if (v->rep != c->u->rep)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "fully_shard of %s on rank %d: the nested unit %s has "
                    "replicate communicator %s (%d ranks), this unit %s "
                    "(%d ranks): the units under one root share one",
                    c->u->label, c->u->rank, v->label,
                    v->rep ? tpdp_comm_name(v->rep) : "none", v->rep_size,
                    c->u->rep ? tpdp_comm_name(c->u->rep) : "none",
                    c->u->rep_size);
  if (v->group != c->u->group) c->n++;
  return TPDP_SUCCESS;
}

tpdp_status fsdp_reserve_nested(tpdp_fsdp_unit *u) {
  nested_count c = {u, 0};
  CHECK(tpdp_module_apply(u->module, count_nested, &c));
  fsdp_group *g = u->group;
  /* The forward order too, so that no step allocates for it. */
  tpdp_status st = core_grow((void **)&g->units, &g->cap_units, g->nunits + c.n,
                             sizeof *g->units);
  if (st == TPDP_SUCCESS)
    st = core_grow((void **)&g->order, &g->cap_order, g->nunits + c.n,
                   sizeof *g->order);
  if (st != TPDP_SUCCESS)
    return TPDP_ERR(st,
                    "fully_shard of %s on rank %d: room for %d nested units: "
                    "%s",
                    u->label, u->rank, c.n, core_error_detail());
  return TPDP_SUCCESS;
}

/* Move every unit of `from` into `to`. */
static tpdp_status merge_group(fsdp_group *to, fsdp_group *from) {
  if (from == to) return TPDP_SUCCESS;
  /* Reserved by fsdp_reserve_nested unless `from` holds units outside the
   * subtree (a module moved since it was sharded). */
  CHECK(core_grow((void **)&to->units, &to->cap_units,
                  to->nunits + from->nunits, sizeof *to->units));
  CHECK(core_grow((void **)&to->order, &to->cap_order,
                  to->nunits + from->nunits, sizeof *to->order));
  for (int i = 0; i < from->nunits; i++) {
    to->units[to->nunits++] = from->units[i];
    from->units[i]->group = to;
    to->refs++;
  }
  to->transient += from->transient;
  core_mem_cache_release(&from->cache);
  free(from->units);
  free(from->order);
  free(from);
  return TPDP_SUCCESS;
}

static tpdp_status adopt(tpdp_module *m, const char *prefix, int level,
                         void *vu) {
  (void)prefix;
  (void)level;
  tpdp_fsdp_unit *u = vu;
  tpdp_fsdp_unit *v = tpdp_fsdp_unit_of(m);
  if (v == NULL || v == u) return TPDP_SUCCESS;
  CHECK(merge_group(u->group, v->group));
  if (v->parent == NULL) v->parent = u;
  return TPDP_SUCCESS;
}

tpdp_status fsdp_adopt_nested(tpdp_fsdp_unit *u) {
  return tpdp_module_apply(u->module, adopt, u);
}

/* ------------------------------------------------------------ free */

void fsdp_unit_free(void *vu) {
  tpdp_fsdp_unit *u = vu;
  if (u == NULL) return;
  if (u->gather_work) tpdp_work_wait(u->gather_work);
  if (u->rs_work) tpdp_work_wait(u->rs_work);
  if (u->rep_work) tpdp_work_wait(u->rep_work);
  fsdp_group *g = u->group;
  if (g && g->rep_next == u) g->rep_next = NULL;
  if (g) {
    int k = 0;
    for (int i = 0; i < g->nunits; i++) {
      if (g->units[i] == u) continue;
      if (g->units[i]->parent == u) g->units[i]->parent = NULL;
      g->units[k++] = g->units[i];
    }
    g->nunits = k;
    k = 0;
    for (int i = 0; i < g->norder; i++)
      if (g->order[i] != u) g->order[k++] = g->order[i];
    g->norder = k;
    if (--g->refs == 0) {
      core_mem_cache_release(&g->cache);
      free(g->units);
      free(g->order);
      free(g);
    }
  }
  for (int i = 0; i < u->np; i++) {
    free(u->p[i].fqn);
    tpdp_param_release(u->p[i].param);
  }
  free(u->p);
  void *bufs[] = {u->shard,    u->shard_grad, u->full,        u->full_grad,
                  u->summoned, u->gather_buf, u->gather_send, u->rs_send,
                  u->rs_recv,  u->rs_scratch, u->rep_buf};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
    fsdp_release(u, bufs[i]);
  free((void *)u->full_pc.piece);
  free((void *)u->shard_pc.piece);
  free((void *)u->mine_pc.piece);
  u->magic = 0;
  free(u);
}
