// SPDX-License-Identifier: BSD-3-Clause
/* Collective mismatch detection (TPDP_DEBUG_COLLECTIVES=1), as PyTorch's
 * TORCH_DISTRIBUTED_DEBUG=DETAIL.
 *
 * Every rank of a communicator must call the same collectives in the same
 * order with matching counts; when they do not, the backends corrupt data,
 * fail on one rank only, or hang, and some mismatches (broadcast counts off
 * the root, allgather and reduce_scatter counts) no backend can see. In
 * this mode every public collective and split (comm.c) first allgathers a
 * fixed-size fingerprint of the call on the same communicator: op (and
 * whether it is the _async form: MPI never matches a blocking collective
 * with a non-blocking one), dtype, the count that must agree, root, reduce
 * op, the communicator's sequence number, and whether this rank's own
 * argument checks passed. Two ranks in
 * different collectives still meet in that allgather, so each rank sees
 * every rank's call and all fail alike, with a message such as
 *   collective mismatch on world (this is rank 0): rank 0 called
 *   tpdp_allreduce sum f32 x 1000 (#7), rank 1 tpdp_allgather f32 x 10 (#7)
 * Counts are those every rank must pass alike: the elements of each rank's
 * send buffer for allreduce, allgather and alltoall, of its receive buffer
 * for reduce_scatter and broadcast.
 *
 * Off by default. Cost when on: one extra blocking allgather of 80 bytes a
 * rank per collective (on a device communicator also two synchronous
 * host-device copies), i.e. one small-message latency per call. Measured
 * with `TPDP_DEBUG_COLLECTIVES=1 bash bench/comm.sh` (2 MPI ranks, 2
 * cores): about 1.7 us more per call, so calls of 1-4 KiB take twice as
 * long (raw/tpdp 0.46-0.68), 64 KiB ones 8-24% longer, and from 1 MiB up
 * the cost is within noise (0.92-1.02). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/backend.h"

/* tpdp_comm_split's and tpdp_comm_agree's kinds in a fingerprint (after
 * the collectives). */
#define FP_SPLIT (TPDP_COLL_BARRIER + 1)
#define FP_AGREE (TPDP_COLL_BARRIER + 2)
#define FP_CALLER_MAX 40

/* One rank's call. Fixed size and zero-filled, so ranks can compare
 * records byte for byte apart from `caller`. */
typedef struct {
  int32_t kind;   /* tpdp_coll_kind or FP_SPLIT */
  int32_t status; /* this rank's checks of its own arguments */
  int32_t dtype;  /* -1: none */
  int32_t op;     /* reduce op, -1: none */
  int32_t root;   /* -1: none */
  int32_t async;  /* the _async form (MPI matches it only with itself) */
  int64_t count;  /* -1: none */
  uint64_t seq;
  /* The public function the caller called (message only: a collective
   * issued by tpdp_redistribute matches one called directly). */
  char caller[FP_CALLER_MAX];
  /* comm_watch_label: what the caller runs the collective for (e.g. a
   * fully sharded unit), for the message only. */
  char label[FP_CALLER_MAX + 24];
} fingerprint;

int comm_fp_enabled_from_env(void) {
  return core_env_long("TPDP_DEBUG_COLLECTIVES", 0) != 0;
}

static void fill(fingerprint *f, const tpdp_comm *comm, int32_t kind,
                 const tpdp_coll_args *a, tpdp_status local) {
  memset(f, 0, sizeof *f);
  f->kind = kind;
  f->status = (int32_t)local;
  f->dtype = f->op = f->root = -1;
  f->count = -1;
  f->seq = comm->seq;
  f->async = a != NULL && !a->blocking;
  if (core_api.depth > 0 && core_api.func)
    snprintf(f->caller, sizeof f->caller, "%s", core_api.func);
  if (comm_watch_label)
    snprintf(f->label, sizeof f->label, "%s", comm_watch_label);
  if (local != TPDP_SUCCESS || a == NULL || a->kind == TPDP_COLL_BARRIER)
    return;
  /* The front end's checks passed: recv is valid, and send is where the
   * count is read from it. */
  f->dtype = (int32_t)a->recv->dtype;
  switch (a->kind) {
    case TPDP_COLL_ALLREDUCE:
    case TPDP_COLL_ALLGATHER:
    case TPDP_COLL_ALLTOALL:
      f->count = tpdp_tensor_numel(a->send);
      break;
    case TPDP_COLL_REDUCE_SCATTER:
    case TPDP_COLL_BROADCAST:
      f->count = tpdp_tensor_numel(a->recv);
      break;
    default:
      break;
  }
  if (a->kind == TPDP_COLL_ALLREDUCE || a->kind == TPDP_COLL_REDUCE_SCATTER)
    f->op = (int32_t)a->op;
  if (a->kind == TPDP_COLL_BROADCAST) f->root = a->root;
}

static const char *kind_name(int32_t kind) {
  if (kind == FP_SPLIT) return "comm_split";
  if (kind == FP_AGREE) return "comm_agree";
  return comm_coll_name((tpdp_coll_kind)kind);
}

/* Same call (the caller's name aside). */
static int same_call(const void *a, const void *b) {
  return memcmp(a, b, offsetof(fingerprint, caller)) == 0;
}

/* Same call from the same public function (for grouping in messages). */
static int same_record(const void *a, const void *b) {
  return memcmp(a, b, sizeof(fingerprint)) == 0;
}

static void describe(core_strbuf *b, const void *rec) {
  const fingerprint *f = (const fingerprint *)rec;
  char name[48];
  snprintf(name, sizeof name, "tpdp_%s%s", kind_name(f->kind),
           f->async ? "_async" : "");
  core_sb_puts(b, name);
  if (f->op >= 0) core_sb_printf(b, " %s", tpdp_reduce_op_name(f->op));
  if (f->dtype >= 0)
    core_sb_printf(b, " %s x %lld", tpdp_dtype_name((tpdp_dtype)f->dtype),
                   (long long)f->count);
  if (f->root >= 0) core_sb_printf(b, " root %d", f->root);
  if (f->status != TPDP_SUCCESS)
    core_sb_printf(b, " rejected (%s)",
                   tpdp_status_string((tpdp_status)f->status));
  core_sb_printf(b, " (#%llu)", (unsigned long long)f->seq);
  if (f->caller[0] && strcmp(f->caller, name) != 0)
    core_sb_printf(b, " in %s", f->caller);
  if (f->label[0]) core_sb_printf(b, " (on %s)", f->label);
}

/* The status of a mismatch: what the backends would call it. */
static tpdp_status mismatch_status(const fingerprint *a, const fingerprint *b) {
  if (a->kind != b->kind || a->async != b->async || a->op != b->op ||
      a->root != b->root || a->seq != b->seq)
    return TPDP_ERR_INVALID_ARGUMENT;
  if (a->dtype != b->dtype) return TPDP_ERR_DTYPE_MISMATCH;
  return TPDP_ERR_SHAPE_MISMATCH;
}

/* The call of `kind` (args: its arguments, NULL for a split or an
 * agreement) against the other ranks' calls. */
static tpdp_status check(tpdp_comm *comm, int32_t kind,
                         const tpdp_coll_args *args, tpdp_status local) {
  const int p = comm->size;
  fingerprint mine;
  fill(&mine, comm, kind, args, local);
  fingerprint *all = calloc((size_t)p, sizeof *all);
  if (all == NULL) {
    /* Cannot take part: report this rank's own failure first. */
    if (local != TPDP_SUCCESS) return local;
    return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY,
                    "TPDP_DEBUG_COLLECTIVES: no memory for %d fingerprints "
                    "on %s",
                    p, comm->name);
  }
  tpdp_status st = comm_host_allgather(comm, &mine, sizeof mine, all);
  if (local != TPDP_SUCCESS || st != TPDP_SUCCESS) {
    free(all);
    return local != TPDP_SUCCESS ? local : st;
  }
  int differ = -1, failed = -1;
  for (int k = 0; k < p; k++) {
    if (differ < 0 && !same_call(&all[0], &all[k])) differ = k;
    if (failed < 0 && all[k].status != TPDP_SUCCESS) failed = k;
  }
  if (differ < 0 && failed < 0) {
    free(all);
    return TPDP_SUCCESS;
  }
  core_strbuf b = {0};
  comm_sb_rank_groups(&b, all, sizeof *all, p, same_record, describe, "called ",
                      8);
  /* A rank whose own checks failed says why in its message; the others
   * fail with its status. */
  if (failed >= 0)
    st = TPDP_ERR((tpdp_status)all[failed].status,
                  "rank %d of %s rejected its arguments (see that rank's "
                  "message; this is rank %d): %s",
                  failed, comm->name, comm->rank, b.failed ? "?" : b.s);
  else
    st = TPDP_ERR(mismatch_status(&all[0], &all[differ]),
                  "collective mismatch on %s (this is rank %d): %s", comm->name,
                  comm->rank, b.failed ? "?" : b.s);
  core_sb_free(&b);
  free(all);
  return st;
}

tpdp_status comm_fp_check(tpdp_comm *comm, const tpdp_coll_args *args,
                          tpdp_status local) {
  return check(comm, args ? (int32_t)args->kind : FP_SPLIT, args, local);
}

tpdp_status comm_fp_check_agree(tpdp_comm *comm) {
  return check(comm, FP_AGREE, NULL, TPDP_SUCCESS);
}
