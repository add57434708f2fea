/* Agreement across the ranks of a communicator, for checks that must fail on
 * every rank rather than leave some waiting (collective fingerprints, mesh
 * creation, redistribute's specs): a small allgather of host records on any
 * backend, and the message that names what each rank passed. */
#include <stdlib.h>
#include <string.h>

#include "comm/comm_internal.h"
#include "core/mem.h"

tpdp_status comm_host_allgather(tpdp_comm *comm, const void *send, size_t bytes,
                                void *recv) {
  int64_t n = (int64_t)bytes, total = n * comm->size;
  tpdp_tensor s = tpdp_tensor_1d((void *)send, TPDP_U8, n);
  tpdp_tensor r = tpdp_tensor_1d(recv, TPDP_U8, total);
  if (comm->ops->device_type == TPDP_DEVICE_CPU)
    return comm_backend_allgather(comm, &s, &r);
  /* A device communicator moves device memory only. The copies are
   * synchronous and the collective is waited for on the host, so no
   * stream ordering is needed around it. */
  tpdp_device dev = {comm->ops->device_type, comm->device_index};
  void *buf = NULL;
  CHECK(core_mem_alloc(dev, bytes * ((size_t)comm->size + 1), &buf));
  tpdp_tensor ds = s, dr = r;
  ds.data = buf;
  ds.device = dev;
  dr.data = (char *)buf + bytes;
  dr.device = dev;
  tpdp_status st;
  CHECK_GOTO(core_mem_copy(&ds, &s), st, done);
  CHECK_GOTO(comm_backend_allgather(comm, &ds, &dr), st, done);
  CHECK_GOTO(core_mem_copy(&r, &dr), st, done);
done:
  return core_mem_free_keep(dev, buf, st);
}

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
  char *all = NULL;
  tpdp_status st = core_calloc((void **)&all, (size_t)comm->size, kind->size);
  if (st != TPDP_SUCCESS) return local != TPDP_SUCCESS ? local : st;
  st = comm_host_allgather(comm, mine, kind->size, all);
  int differ = -1, failed = -1;
  for (int k = 0; st == TPDP_SUCCESS && k < comm->size; k++) {
    const char *rec = all + (size_t)k * kind->size;
    int32_t status;
    memcpy(&status, rec, sizeof status);
    if (differ < 0 && !kind->same(all, rec)) differ = k;
    if (failed < 0 && status != TPDP_SUCCESS) failed = k;
  }
  if (st == TPDP_SUCCESS && differ >= 0) {
    core_strbuf b = {0};
    comm_sb_rank_groups(&b, all, kind->size, comm->size, kind->same,
                        kind->describe, "passed ", 8);
    st = kind->mismatch(comm, all, all + (size_t)differ * kind->size,
                        b.failed ? "?" : b.s);
    core_sb_free(&b);
  } else if (st == TPDP_SUCCESS && failed >= 0 && local == TPDP_SUCCESS) {
    int32_t status;
    memcpy(&status, all + (size_t)failed * kind->size, sizeof status);
    st = TPDP_ERR((tpdp_status)status,
                  "rank %d of %s rejected %s (%s); see that rank's message",
                  failed, comm->name, kind->rejected,
                  tpdp_status_string((tpdp_status)status));
  }
  free(all);
  if (local != TPDP_SUCCESS && (st == TPDP_SUCCESS || differ < 0)) return local;
  return st;
}
