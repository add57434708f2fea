// SPDX-License-Identifier: BSD-3-Clause
/* What save and load share before they move bytes: each rank's box of each
 * entry, the table of every rank's boxes, and the check that every rank
 * holds the same entries. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt_internal.h"

const int64_t *ckpt_global_shape(const ckpt_entry *e) {
  if (e->boxed) return e->box_global;
  return e->spec ? tpdp_spec_global_shape(e->spec) : e->local.shape;
}

void ckpt_local_box(const ckpt_entry *e, int64_t *box) {
  int nd = e->local.ndim;
  memset(box, 0, sizeof(int64_t) * CKPT_BOX);
  const int64_t *g = ckpt_global_shape(e);
  int64_t off[TPDP_MAX_DIMS] = {0}, shape[TPDP_MAX_DIMS];
  if (e->boxed) {
    memcpy(off, e->box_offset, sizeof off);
    memcpy(shape, e->local.shape, sizeof(int64_t) * (size_t)nd);
  } else if (e->spec == NULL ||
             tpdp_spec_local_shape(e->spec, tpdp_spec_self_rank(e->spec), shape,
                                   off) != TPDP_SUCCESS)
    memcpy(shape, g, sizeof(int64_t) * (size_t)nd);
  int empty = 0;
  for (int d = 0; d < nd; d++) empty |= shape[d] == 0;
  for (int d = 0; d < nd; d++) {
    box[d] = empty ? 0 : off[d];
    box[TPDP_MAX_DIMS + d] = shape[d];
  }
}

tpdp_status ckpt_gather_boxes(const ckpt_group *g, const tpdp_state_dict *sd,
                              int64_t **all) {
  int64_t n = sd->n;
  int64_t *mine = NULL, *table = NULL;
  CHECK(TPDP_CALLOC(mine, (size_t)(n * CKPT_BOX)));
  tpdp_status st = TPDP_CALLOC(table, (size_t)(n * CKPT_BOX * g->size));
  for (int64_t i = 0; i < n && st == TPDP_SUCCESS; i++)
    ckpt_local_box(&sd->e[i], mine + i * CKPT_BOX);
  if (st == TPDP_SUCCESS) st = ckpt_allgather_i64(g, mine, n * CKPT_BOX, table);
  free(mine);
  if (st != TPDP_SUCCESS) {
    free(table);
    return st;
  }
  *all = table;
  return TPDP_SUCCESS;
}

int64_t ckpt_box_intersect(int nd, const int64_t *ao, const int64_t *as,
                           const int64_t *bo, const int64_t *bs, int64_t *oo,
                           int64_t *os) {
  int64_t n = 1;
  for (int d = 0; d < nd; d++) {
    int64_t lo = ao[d] > bo[d] ? ao[d] : bo[d];
    int64_t ae = ao[d] + as[d], be = bo[d] + bs[d];
    int64_t hi = ae < be ? ae : be;
    oo[d] = lo;
    os[d] = hi > lo ? hi - lo : 0;
    n *= os[d];
  }
  return n;
}

/* ---------------------------------------------------- same entries */

/* "'fc1.weight' f32 [67, 32] on mesh dp=2,tp=2 as (R, S0)" */
static void describe(const ckpt_entry *e, char *buf, size_t len) {
  char shape[160];
  tpdp_shape_format(e->local.ndim, ckpt_global_shape(e), shape, sizeof shape);
  int n = snprintf(buf, len, "'%s' %s %s", e->fqn,
                   tpdp_dtype_name(e->local.dtype), shape);
  if (e->boxed) {
    snprintf(buf + n, len - (size_t)n, " in boxes");
    return;
  }
  if (e->spec == NULL) {
    snprintf(buf + n, len - (size_t)n, " without a spec");
    return;
  }
  const tpdp_mesh *m = tpdp_spec_mesh(e->spec);
  core_strbuf b = {0};
  core_sb_puts(&b, " on mesh ");
  for (int d = 0; d < tpdp_mesh_ndim(m); d++)
    core_sb_printf(&b, "%s%s=%lld", d ? "," : "", tpdp_mesh_dim_name(m, d),
                   (long long)tpdp_mesh_dim_size(m, d));
  core_sb_puts(&b, " as (");
  for (int d = 0; d < tpdp_mesh_ndim(m); d++) {
    char p[16];
    tpdp_placement_format(tpdp_spec_placements(e->spec)[d], p, sizeof p);
    core_sb_printf(&b, "%s%s", d ? ", " : "", p);
  }
  core_sb_puts(&b, ")");
  snprintf(buf + n, len - (size_t)n, "%s", b.failed ? "" : b.s);
  core_sb_free(&b);
}

static int64_t fnv1a(const char *s) {
  uint64_t h = 14695981039346656037ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return (int64_t)h;
}

/* Rank `from`'s description of entry i, sent to every rank. */
static tpdp_status description_of(const ckpt_group *g,
                                  const tpdp_state_dict *sd, int64_t i,
                                  int from, char *buf, size_t len) {
  if (g->rank == from) describe(&sd->e[i], buf, len);
  tpdp_tensor t = tpdp_tensor_1d(buf, TPDP_U8, (int64_t)len);
  CHECK(tpdp_broadcast(g->comm, &t, &t, from));
  buf[len - 1] = '\0';
  return TPDP_SUCCESS;
}

tpdp_status ckpt_check_same_entries(const ckpt_group *g,
                                    const tpdp_state_dict *sd) {
  if (g->size == 1) return TPDP_SUCCESS;
  int64_t n = sd->n, *counts = NULL, *mine = NULL, *all = NULL;
  tpdp_status st = TPDP_SUCCESS;
  CHECK(TPDP_CALLOC(counts, (size_t)g->size));
  CHECK_GOTO(ckpt_allgather_i64(g, &n, 1, counts), st, done);
  for (int r = 1; r < g->size; r++)
    if (counts[r] != counts[0]) {
      st = TPDP_ERR(TPDP_ERR_SHAPE_MISMATCH,
                    "the state dicts differ across ranks: rank 0 has %lld "
                    "entries, rank %d has %lld",
                    (long long)counts[0], r, (long long)counts[r]);
      goto done;
    }
  CHECK_GOTO(TPDP_CALLOC(mine, (size_t)n), st, done);
  CHECK_GOTO(TPDP_CALLOC(all, (size_t)(n * g->size)), st, done);
  for (int64_t i = 0; i < n; i++) {
    char d[512];
    describe(&sd->e[i], d, sizeof d);
    mine[i] = fnv1a(d);
  }
  CHECK_GOTO(ckpt_allgather_i64(g, mine, n, all), st, done);
  for (int64_t i = 0; i < n; i++)
    for (int r = 1; r < g->size; r++) {
      if (all[r * n + i] == all[i]) continue;
      char a[512] = "", b[512] = "";
      CHECK_GOTO(description_of(g, sd, i, 0, a, sizeof a), st, done);
      CHECK_GOTO(description_of(g, sd, i, r, b, sizeof b), st, done);
      st = TPDP_ERR(TPDP_ERR_SHAPE_MISMATCH,
                    "the state dicts differ across ranks at entry %lld: rank "
                    "0 has %s, rank %d has %s",
                    (long long)i, a, r, b);
      goto done;
    }
done:
  free(counts);
  free(mine);
  free(all);
  return st;
}

tpdp_status ckpt_prologue(const tpdp_state_dict *sd, const char *dir,
                          tpdp_comm *comm,
                          const tpdp_checkpoint_options *options, ckpt_group *g,
                          tpdp_checkpoint_options *o) {
  CHECK_PTR(sd);
  CHECK_PTR(dir);
  CHECK(ckpt_group_init(g, comm));
  tpdp_checkpoint_options unused; /* o NULL: the options are only checked */
  tpdp_status st = ckpt_options(options, o ? o : &unused);
  for (int i = 0; i < sd->n && st == TPDP_SUCCESS; i++)
    st = ckpt_check_entry(sd->e[i].fqn, &sd->e[i].local, sd->e[i].spec);
  CHECK(ckpt_agree(g, st));
  return ckpt_check_same_entries(g, sd);
}
