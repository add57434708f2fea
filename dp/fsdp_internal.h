// SPDX-License-Identifier: BSD-3-Clause
/*
 * Internal to dp/: the fully sharded units' state (tpdp/fsdp.h), shared by
 * their files. Not installed. Each file stands for one of PyTorch FSDP2's
 * (torch/distributed/fsdp/_fully_shard/), so that the two read side by
 * side:
 *
 *   fully_shard.c         _fully_shard.py      every public function: the
 *                                              options, tpdp_fully_shard,
 *                                              accessors, finalize, summon,
 *                                              gradient sync, stats
 *   fsdp_init.c           _fsdp_init.py        creation: the managed-module
 *                                              walk, the parameters' checks,
 *                                              the cross-rank agreement, the
 *                                              shard's storage, nested units
 *                                              joining their root, the free
 *   fsdp_param.c          _fsdp_param.py       one parameter: its rows by
 *                                              the chunk rule and the views
 *                                              the framework sees
 *   fsdp_param_group.c    _fsdp_param_group.py a unit's state machine:
 *                         _fsdp_state.py       unshard, wait_for_unshard,
 *                                              reshard, the four hooks, the
 *                                              root's end of backward
 *   fsdp_collectives.c    _fsdp_collectives.py the all-gather and the
 *                                              reduce-scatter (over pieces
 *                                              or packed, with their casts)
 *   fsdp_common.c         _fsdp_common.py      memory on the unit's device
 *                                              (core/mem), copies, casts,
 *                                              the transient bytes' count
 *
 * Memory: every buffer comes from core/mem. On the host a unit's buffers
 * come from its group's core_mem_cache: the units ask for the same sizes
 * every step, and fresh pages fault in one by one (DEVELOPERS.md,
 * "Performance notes"). On a GPU they are stream-ordered on the unit's
 * stream (core_mem_alloc_async), whose pool caches by itself.
 */
#ifndef TPDP_DP_FSDP_INTERNAL_H
#define TPDP_DP_FSDP_INTERNAL_H

#include <stdint.h>

#include "comm/services.h"
#include "core/check.h"
#include "core/mem.h"
#include "tpdp/fsdp.h"

#define FSDP_EXT_KEY "tpdp.fsdp"
#define FSDP_MAGIC 0x46534450u /* "FSDP" */

/* One managed parameter (FSDP2's FSDPParam). */
typedef struct {
  tpdp_param *param; /* retained */
  char *fqn;         /* relative to the unit's module */
  int ndim;
  int64_t shape[TPDP_MAX_DIMS]; /* the full local shape */
  int64_t row_elems;            /* elements of one dim-0 row */
  int64_t chunk;                /* c = ceil(d0 / N) */
  int64_t shard_off;            /* in a rank's flat shard (elements) */
  int64_t full_off;             /* in the full buffer (elements) */
  tpdp_tensor original;         /* the caller's view, until creation ends */
} fsdp_param;

typedef enum { GATHER_NONE, GATHER_IN_FLIGHT, GATHER_DONE } gather_state;

typedef struct fsdp_group fsdp_group;

/* A unit (FSDP2's FSDPParamGroup with its module's FSDPState). */
struct tpdp_fsdp_unit {
  unsigned magic;
  tpdp_module *module;
  tpdp_comm *comm;
  int rank, nranks;
  tpdp_device device; /* of every parameter: host, or one GPU */
  void *stream;       /* CUDA: the framework's stream (options.stream) */
  int level, reshard_option;
  char label[256];
  char watch_label[288]; /* "the fully sharded unit <label>" */
  fsdp_param *p;
  int np;
  int64_t shard_elems; /* S: one rank's padded flat shard */
  int64_t full_elems;  /* the unpadded full tensors, back to back */
  tpdp_dtype pdt, rdt; /* param_dtype, reduce_dtype */
  /* f32: the master copy and its gradient, each rank's rows padded. With
   * f32 parameters, levels 1-2 keep the master rows inside the persistent
   * full tensors and level 1 the gradient rows inside the full gradients
   * (ZeRO's memory: no second copy); shard / shard_grad are NULL then. */
  int shard_in_full, grad_in_full;
  float *shard, *shard_grad;
  void *full;      /* parameters when gathered (param_dtype) */
  void *full_grad; /* gradients during backward and accumulation (pdt) */
  /* summon_full_params with param_dtype other than f32: the f32 master
   * gathered here (FSDP's summon_full_params gives full precision) */
  float *summoned;
  /* transient: the all-gather's output (and its cast input), the
   * reduce-scatter's packed input (and its output before the f32 cast) */
  void *gather_buf, *gather_send, *rs_send, *rs_recv;
  tpdp_work *gather_work, *rs_work;
  /* Host memory over MPI: the collectives run over pieces of memory
   * (comm_allgather_pieces_async), gathering straight into the full
   * tensors and reducing straight out of the full gradients, with no
   * packed copy. The flat layout rank by rank as pieces: every rank's rows
   * in the full tensors (full_pc), this rank's in its shard (shard_pc) and
   * in the full tensors (mine_pc); padding rows are holes. */
  int pieces;
  comm_pieces full_pc, shard_pc, mine_pc;
  int rs_pieces; /* the reduce-scatter in flight keeps full_grad until done */
  /* a packed reduce-scatter's buffers as one piece each (send, recv): over
   * pieces the sum runs in rank order, unlike MPI's reduction tree */
  comm_piece packed[2];
  comm_pieces packed_send, packed_recv;
  void *rs_scratch; /* its room for the peers' contributions */
  int64_t rs_scratch_elems;
  /* HSDP (options.replicate): the gradient shard, once reduce-scattered
   * over comm, all-reduced (AVG) over rep; rep_size 1 (or no rep) does
   * none. Level 1 with f32 parameters keeps the gradient rows inside the
   * full gradients: they travel packed in rep_buf (S f32, transient).
   * With reduce_dtype other than f32 the all-reduce moves the
   * reduce-scatter's output (rs_recv, reduce_dtype, as FSDP2): rs_held
   * says it waits there for it, its cast to the f32 shard after. */
  tpdp_comm *rep;
  int rep_size;
  float *rep_buf;
  int rs_held;
  tpdp_work *rep_work;
  int reduced; /* this step's reduce-scatter has started */
  gather_state gather;
  tpdp_handle_state state;
  int grads_pending; /* full_grad holds values not yet reduced */
  int forwarded;     /* ran forward in this step */
  tpdp_fsdp_unit *parent;
  fsdp_group *group;
  tpdp_hook_handle hooks[4]; /* on the module: taken back if creation fails */
  int nhooks;
};

/* The units under one root (FSDP2's FSDPState of the root with the states
 * it collected): one step's order, gradient sync and accounting, and the
 * host buffers its units gave back. */
struct fsdp_group {
  int refs;
  tpdp_fsdp_unit **units; /* members, creation order */
  int nunits, cap_units;
  tpdp_fsdp_unit **order; /* this step's forward order */
  int norder, cap_order;
  int sync;
  /* HSDP: the unit whose reduce-scatter started last and whose replicate
   * all-reduce has not: it starts after the next unit's reduce-scatter
   * (or in finalize), in the order backward reduced them, the same on
   * every rank. */
  tpdp_fsdp_unit *rep_next;
  tpdp_fsdp_stats cur, last;
  int64_t transient;    /* bytes alive beyond the persistent ones */
  core_mem_cache cache; /* the units' host buffers, kept for reuse */
};

/* The unit's collectives and waits carry its name (comm_watch_label): a
 * TPDP_TIMEOUT_S report and a TPDP_DEBUG_COLLECTIVES mismatch name it.
 * Memory running short inside the communicator says nothing of the unit,
 * so that failure gets the unit and `what` ("all-gather") in front. */
#define AS_UNIT(u, what, call)                                                \
  do {                                                                        \
    const char *saved_ = comm_watch_label;                                    \
    comm_watch_label = (u)->watch_label;                                      \
    tpdp_status as_unit_st_ = (call);                                         \
    comm_watch_label = saved_;                                                \
    if (as_unit_st_ == TPDP_ERR_OUT_OF_MEMORY)                                \
      as_unit_st_ =                                                           \
          TPDP_ERR(as_unit_st_, "unit %s on rank %d: its %s: %s", (u)->label, \
                   (u)->rank, what, core_error_detail());                     \
    CHECK(as_unit_st_);                                                       \
  } while (0)

/* ------------------------------------------------ fsdp_common.c */

static inline int fsdp_on_gpu(const tpdp_fsdp_unit *u) {
  return u->device.type == TPDP_DEVICE_CUDA;
}
/* The element at index k of a buffer of dtype dt (f32, bf16 or f16). */
static inline void *fsdp_at(void *base, tpdp_dtype dt, int64_t k) {
  return (char *)base + k * (int64_t)tpdp_dtype_size(dt);
}
/* Level 1 keeps the full parameters and gradients, level 2 the full
 * parameters: persistent there, transient at level 3. */
static inline int fsdp_full_is_persistent(const tpdp_fsdp_unit *u) {
  return u->level <= 2;
}
static inline int fsdp_grad_is_persistent(const tpdp_fsdp_unit *u) {
  return u->level == 1;
}
/* n elements of dtype dt at `data` as a flat tensor on the unit's device. */
tpdp_tensor fsdp_flat(const tpdp_fsdp_unit *u, void *data, tpdp_dtype dt,
                      int64_t n);
/* *out = n elements of dtype dt (zeroed when `zero`), counted as transient
 * when `transient`; `what` names the buffer in the error ("full
 * gradients"). Host: from the group's cache; GPU: stream-ordered on the
 * unit's stream. */
tpdp_status fsdp_alloc(tpdp_fsdp_unit *u, const char *what, int64_t n,
                       tpdp_dtype dt, int transient, int zero, void **out);
/* Give back *p (NULL: no-op) as allocated (same n, dt, transient); *p is
 * NULL after. */
void fsdp_free(tpdp_fsdp_unit *u, void **p, int64_t n, tpdp_dtype dt,
               int transient);
/* A buffer's last free, when the unit goes (waits for the device). */
void fsdp_release(const tpdp_fsdp_unit *u, void *p);
/* dst[0, n) = src[0, n), zero fill, and casts between f32, bf16 and f16:
 * done on the host, queued on the unit's stream on a GPU. */
tpdp_status fsdp_copy(const tpdp_fsdp_unit *u, void *dst, const void *src,
                      tpdp_dtype dt, int64_t n);
tpdp_status fsdp_zero(const tpdp_fsdp_unit *u, void *dst, tpdp_dtype dt,
                      int64_t n);
tpdp_status fsdp_convert(const tpdp_fsdp_unit *u, void *dst, tpdp_dtype dd,
                         const void *src, tpdp_dtype sd, int64_t n);

/* ------------------------------------------------- fsdp_param.c */

/* Rows of q that rank r holds by the chunk rule (possibly 0). */
int64_t fsdp_rows_of(const fsdp_param *q, int r);
/* Lay q out for `nranks` ranks at *shard_off / *full_off (elements), both
 * advanced past it. */
void fsdp_param_layout(fsdp_param *q, int nranks, int64_t *shard_off,
                       int64_t *full_off);
/* Where this rank's f32 rows of q live: the separate shard, or inside the
 * full tensors (and the same for the gradient). */
float *fsdp_shard_rows(const tpdp_fsdp_unit *u, const fsdp_param *q);
float *fsdp_grad_rows(const tpdp_fsdp_unit *u, const fsdp_param *q);
/* Every parameter views its full tensor of dtype dt, back to back from
 * `base` (FSDP2's to_unsharded), or its rows of the shard (to_sharded). */
tpdp_status fsdp_params_to_unsharded(tpdp_fsdp_unit *u, void *base,
                                     tpdp_dtype dt);
tpdp_status fsdp_params_to_sharded(tpdp_fsdp_unit *u);
/* The gradients: the full ones (param_dtype) during backward when `full`,
 * else the f32 shards. */
tpdp_status fsdp_params_set_grads(tpdp_fsdp_unit *u, int full);

/* ------------------------------------------- fsdp_collectives.c */

/* The pieces lists of the unit's flat layout (a no-op off pieces). */
tpdp_status fsdp_build_pieces(tpdp_fsdp_unit *u);
/* Start the all-gather of the shards into the full tensors (allocated
 * if needed) in param_dtype; no-op unless GATHER_NONE. */
tpdp_status fsdp_all_gather_start(tpdp_fsdp_unit *u);
/* Wait for it and copy a packed result out into the full tensors. */
tpdp_status fsdp_all_gather_wait(tpdp_fsdp_unit *u);
/* The f32 master shards gathered into u->summoned (synchronous). */
tpdp_status fsdp_all_gather_master(tpdp_fsdp_unit *u);
/* Start the reduce-scatter (AVG) of the full gradients into the gradient
 * shard; finish it (the cast back to f32, the buffers freed). */
tpdp_status fsdp_reduce_scatter_start(tpdp_fsdp_unit *u);
tpdp_status fsdp_reduce_scatter_wait(tpdp_fsdp_unit *u);
/* HSDP: finish the reduce-scatter, then start the all-reduce (AVG) of the
 * gradient shard over the replicate communicator (a no-op without one);
 * wait for it, the rows copied back where they travelled packed. */
tpdp_status fsdp_replicate_start(tpdp_fsdp_unit *u);
tpdp_status fsdp_replicate_wait(tpdp_fsdp_unit *u);

/* ------------------------------------------- fsdp_param_group.c */

tpdp_status fsdp_expect_state(const tpdp_fsdp_unit *u,
                              const tpdp_handle_state *allowed, int n,
                              const char *call);
/* FSDP2's unshard / wait_for_unshard / reshard. */
tpdp_status fsdp_unshard(tpdp_fsdp_unit *u);
tpdp_status fsdp_wait_for_unshard(tpdp_fsdp_unit *u);
tpdp_status fsdp_reshard(tpdp_fsdp_unit *u);
/* The unit's four hooks on its module, and their removal (on a failure of
 * tpdp_fully_shard: none stays). */
tpdp_status fsdp_register_hooks(tpdp_fsdp_unit *u);
void fsdp_remove_hooks(tpdp_fsdp_unit *u);
/* The end of a step for every unit of the group (tpdp_fsdp_finalize). */
tpdp_status fsdp_group_finalize(fsdp_group *g);

/* -------------------------------------------------- fsdp_init.c */

/* A new unit of `module` over `dp` in a group of its own (not yet attached
 * to the module); its label set. */
tpdp_status fsdp_unit_create(tpdp_module *module, tpdp_comm *dp,
                             const tpdp_fully_shard_options *o,
                             tpdp_fsdp_unit **out);
/* Collect the parameters of the module's subtree outside nested units and
 * check them and the unit: the first failed check, or memory running
 * short. */
tpdp_status fsdp_collect_params(tpdp_fsdp_unit *u);
/* Agree across dp on the unit (level, dtypes, shapes, the replicate
 * communicator's size) and on this rank's own check `local`, then, where
 * replicate is not NULL, across replicate on the same and on the outcome
 * over dp; u is NULL where it could not be made (local then says why). */
tpdp_status fsdp_agree(tpdp_comm *dp, tpdp_comm *replicate,
                       const tpdp_fsdp_unit *u, tpdp_status local);
/* The shard's layout and storage, this rank's rows copied in, the pieces
 * lists; the parameters still view the caller's memory. */
tpdp_status fsdp_build_shard(tpdp_fsdp_unit *u);
/* Room in the unit's group for the units nested under its module (and
 * for them in the forward order), so that neither fsdp_adopt_nested, which
 * runs after the agreement, nor a step allocates. */
tpdp_status fsdp_reserve_nested(tpdp_fsdp_unit *u);
/* The units nested under the module join the unit's group; the outermost
 * of them get it as their parent. */
tpdp_status fsdp_adopt_nested(tpdp_fsdp_unit *u);
/* The parameters view the caller's memory again. */
void fsdp_restore_params(tpdp_fsdp_unit *u);
/* Free a unit (the module extension's free function). */
void fsdp_unit_free(void *u);

#endif /* TPDP_DP_FSDP_INTERNAL_H */
