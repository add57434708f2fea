// SPDX-License-Identifier: BSD-3-Clause
/* Agreement across the ranks of a communicator, so that a failure on some
 * ranks fails every rank alike rather than leaving the others waiting:
 * tpdp_comm_agree (every rank returns the status and the message of the
 * lowest failing rank), the record comparison of the library's own checks
 * (collective fingerprints, mesh creation, redistribute's specs), the small
 * exchanges of host bytes both run on any backend, and the message that
 * names what each rank passed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/backend.h"
#include "core/mem.h"

/* Run `a`, whose tensors are host memory, as a blocking backend collective
 * (no front-end checks, sequence number or fingerprint). A device (NCCL)
 * communicator moves device memory only: the bytes go through a temporary
 * buffer on its GPU. The copies are synchronous and the collective is
 * waited for on the host, so no stream ordering is needed around it. */
static tpdp_status host_run(tpdp_comm *comm, tpdp_coll_args *a) {
  a->blocking = 1;
  if (comm->ops->device_type == TPDP_DEVICE_CPU)
    return comm_backend_run(comm, a);
  tpdp_device dev = {comm->ops->device_type, comm->device_index};
  size_t sb = tpdp_tensor_nbytes(a->send), rb = tpdp_tensor_nbytes(a->recv);
  void *buf = NULL;
  CHECK(core_mem_alloc(dev, sb + rb, &buf));
  tpdp_tensor ds = *a->send, dr = *a->recv;
  ds.data = buf;
  ds.device = dev;
  dr.data = (char *)buf + sb;
  dr.device = dev;
  tpdp_coll_args d = *a;
  d.send = &ds;
  d.recv = &dr;
  tpdp_status st;
  CHECK_GOTO(core_mem_copy(&ds, a->send), st, done);
  CHECK_GOTO(comm_backend_run(comm, &d), st, done);
  CHECK_GOTO(core_mem_copy(a->recv, &dr), st, done);
done:
  return core_mem_free_keep(dev, buf, st);
}

tpdp_status comm_host_allgather(tpdp_comm *comm, const void *send, size_t bytes,
                                void *recv) {
  int64_t n = (int64_t)bytes;
  tpdp_tensor s = tpdp_tensor_1d((void *)send, TPDP_U8, n);
  tpdp_tensor r = tpdp_tensor_1d(recv, TPDP_U8, n * comm->size);
  tpdp_coll_args a = {
      .kind = TPDP_COLL_ALLGATHER, .send = &s, .recv = &r, .blocking = 1};
  return host_run(comm, &a);
}

/* ------------------------------------------------------- failures */

/* Bytes of a failing rank's message that every rank keeps: room is left
 * in the last-error buffer for the function's name and " (rank R of
 * NAME)". */
#define KEPT_MESSAGE ((int)CORE_ERROR_MAX - 160)

/* Rank `who` failed with `code`: its message (`mine`, read on that rank
 * only) goes to every rank (one broadcast of CORE_ERROR_MAX bytes), and
 * every rank returns `code` with "MESSAGE (rank WHO of NAME)". A failed
 * broadcast returns its own error. */
static tpdp_status spread_failure(tpdp_comm *comm, int who, tpdp_status code,
                                  const char *mine) {
  char msg[CORE_ERROR_MAX];
  memset(msg, 0, sizeof msg);
  if (comm->rank == who) snprintf(msg, sizeof msg, "%s", mine);
  if (comm->size > 1) {
    tpdp_tensor t = tpdp_tensor_1d(msg, TPDP_U8, (int64_t)sizeof msg);
    tpdp_coll_args a = {.kind = TPDP_COLL_BROADCAST,
                        .send = &t,
                        .recv = &t,
                        .root = who,
                        .blocking = 1};
    CHECK(host_run(comm, &a));
    msg[sizeof msg - 1] = '\0';
  }
  return TPDP_ERR(code, "%.*s (rank %d of %s)", KEPT_MESSAGE, msg, who,
                  comm->name);
}

/* The lowest failing rank and its status, from one allreduce MAX of
 * (size - rank) << 32 | status over the ranks that failed (0 elsewhere):
 * eight bytes whatever the size, and nothing to allocate, so a rank short
 * of memory still takes part. */
static tpdp_status agree_status(tpdp_comm *comm, tpdp_status local,
                                const char *mine) {
  int64_t key = local != TPDP_SUCCESS
                    ? ((int64_t)(comm->size - comm->rank) << 32) | local
                    : 0;
  if (comm->size > 1) {
    tpdp_tensor t = tpdp_tensor_1d(&key, TPDP_I64, 1);
    tpdp_coll_args a = {.kind = TPDP_COLL_ALLREDUCE,
                        .send = &t,
                        .recv = &t,
                        .op = TPDP_OP_MAX,
                        .blocking = 1};
    CHECK(host_run(comm, &a));
  }
  if (key == 0) return TPDP_SUCCESS;
  return spread_failure(comm, comm->size - (int)(key >> 32),
                        (tpdp_status)(key & 0xffffffff), mine);
}

tpdp_status tpdp_comm_agree(tpdp_comm *comm, tpdp_status local_status,
                            const char *local_message) {
  TPDP_API_ENTRY;
  /* This rank's account of its failure, kept before anything here records
   * a message of its own. Called from inside another public function
   * (depth > 1) the failure was recorded under that function's name,
   * which names the agreed error again: only the message proper is sent. */
  char mine[CORE_ERROR_MAX] = "";
  if (local_status != TPDP_SUCCESS)
    snprintf(mine, sizeof mine, "%s",
             local_message        ? local_message
             : core_api.depth > 1 ? core_error_detail()
                                  : tpdp_last_error());
  CHECK_PTR(comm);
  CHECK(comm_check_alive(comm));
  if ((int)local_status < 0 || local_status >= TPDP_STATUS_COUNT) {
    /* Agreed like any failure: the peers are waiting for this rank. */
    snprintf(mine, sizeof mine,
             "argument 'local_status' (%d) is not a tpdp_status value",
             (int)local_status);
    local_status = TPDP_ERR_INVALID_ARGUMENT;
  } else if (local_status != TPDP_SUCCESS && mine[0] == '\0') {
    snprintf(mine, sizeof mine, "%s (no message)",
             tpdp_status_string(local_status));
  }
  comm->seq++;
  if (comm->debug_collectives) CHECK(comm_fp_check_agree(comm));
  return agree_status(comm, local_status, mine);
}

/* ------------------------------------------------------- records */

/* Append the members of rec's group (ranks >= first with a record like
 * rec's) as "rank 3" or "ranks 0-2, 5". */
static void append_members(core_strbuf *b, const char *recs, size_t size, int n,
                           int first,
                           int (*same)(const void *a, const void *b)) {
  const char *rec = recs + (size_t)first * size;
  int count = 0;
  for (int k = first; k < n; k++) count += same(rec, recs + (size_t)k * size);
  core_sb_puts(b, count > 1 ? "ranks " : "rank ");
  int written = 0;
  for (int k = first; k < n; k++) {
    if (!same(rec, recs + (size_t)k * size)) continue;
    int end = k;
    while (end + 1 < n && same(rec, recs + (size_t)(end + 1) * size)) end++;
    core_sb_printf(b, "%s%d", written++ ? ", " : "", k);
    if (end > k) core_sb_printf(b, "-%d", end);
    k = end;
  }
}

void comm_sb_rank_groups(core_strbuf *b, const void *recs, size_t size, int n,
                         int (*same)(const void *a, const void *b),
                         void (*describe)(core_strbuf *b, const void *rec),
                         const char *first_verb, int max_groups) {
  const char *base = (const char *)recs;
  int groups = 0, more = 0;
  for (int i = 0; i < n; i++) {
    const char *rec = base + (size_t)i * size;
    int seen = 0;
    for (int j = 0; j < i && !seen; j++)
      seen = same(base + (size_t)j * size, rec);
    if (seen) continue;
    if (groups == max_groups) {
      more++;
      continue;
    }
    if (groups > 0) core_sb_puts(b, ", ");
    append_members(b, base, size, n, i, same);
    core_sb_puts(b, " ");
    if (groups == 0 && first_verb) core_sb_puts(b, first_verb);
    describe(b, rec);
    groups++;
  }
  if (more) core_sb_printf(b, " and %d more", more);
}

tpdp_status comm_agree(tpdp_comm *comm, const comm_agree_kind *kind,
                       const void *mine, tpdp_status local) {
  /* This rank's own check's message (recorded just before). */
  char why[CORE_ERROR_MAX] = "";
  if (local != TPDP_SUCCESS)
    snprintf(why, sizeof why, "%s", core_error_detail());
  char *all = NULL;
  tpdp_status st = core_calloc((void **)&all, (size_t)comm->size, kind->size);
  if (st == TPDP_SUCCESS) st = comm_host_allgather(comm, mine, kind->size, all);
  if (st != TPDP_SUCCESS) {
    /* This rank could not take part: its own failure, if any, first. */
    free(all);
    return local != TPDP_SUCCESS ? TPDP_ERR(local, "%s", why) : st;
  }
  int differ = -1, failed = -1;
  for (int k = 0; k < comm->size; k++) {
    const char *rec = all + (size_t)k * kind->size;
    int32_t status;
    memcpy(&status, rec, sizeof status);
    if (differ < 0 && !kind->same(all, rec)) differ = k;
    if (failed < 0 && status != TPDP_SUCCESS) failed = k;
  }
  if (differ >= 0) {
    core_strbuf b = {0};
    comm_sb_rank_groups(&b, all, kind->size, comm->size, kind->same,
                        kind->describe, "passed ", 8);
    st = kind->mismatch(comm, all, all + (size_t)differ * kind->size,
                        b.failed ? "?" : b.s);
    core_sb_free(&b);
  } else if (failed >= 0) {
    int32_t status;
    memcpy(&status, all + (size_t)failed * kind->size, sizeof status);
    st = spread_failure(comm, failed, (tpdp_status)status, why);
  }
  free(all);
  return st;
}
