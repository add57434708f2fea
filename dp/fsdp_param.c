// SPDX-License-Identifier: BSD-3-Clause
/* One managed parameter of a fully sharded unit (FSDP2's _fsdp_param.py):
 * its dim-0 rows by the chunk rule, its place in the unit's flat shard and
 * full tensors, and the views the framework sees through tpdp_param: the
 * full tensors while gathered (to_unsharded), this rank's rows of the
 * shard otherwise (to_sharded), and the matching gradients. */
#include <string.h>

#include "dp/fsdp_internal.h"

int64_t fsdp_rows_of(const fsdp_param *q, int r) {
  int64_t lo = (int64_t)r * q->chunk, n = q->shape[0] - lo;
  return n < 0 ? 0 : (n > q->chunk ? q->chunk : n);
}

void fsdp_param_layout(fsdp_param *q, int nranks, int64_t *shard_off,
                       int64_t *full_off) {
  q->row_elems = 1;
  for (int d = 1; d < q->ndim; d++) q->row_elems *= q->shape[d];
  q->chunk = (q->shape[0] + nranks - 1) / nranks;
  q->shard_off = *shard_off;
  q->full_off = *full_off;
  *shard_off += q->chunk * q->row_elems;
  *full_off += q->shape[0] * q->row_elems;
}

float *fsdp_shard_rows(const tpdp_fsdp_unit *u, const fsdp_param *q) {
  if (!u->shard_in_full) return u->shard + q->shard_off;
  return (float *)u->full + q->full_off + u->rank * q->chunk * q->row_elems;
}

float *fsdp_grad_rows(const tpdp_fsdp_unit *u, const fsdp_param *q) {
  if (!u->grad_in_full) return u->shard_grad + q->shard_off;
  return (float *)u->full_grad + q->full_off +
         u->rank * q->chunk * q->row_elems;
}

/* q's shape with `rows` rows at `base`. */
static tpdp_status view(const tpdp_fsdp_unit *u, const fsdp_param *q,
                        void *base, tpdp_dtype dt, int64_t rows,
                        tpdp_tensor *out) {
  int64_t shape[TPDP_MAX_DIMS];
  memcpy(shape, q->shape, sizeof shape);
  shape[0] = rows;
  return tpdp_tensor_init(out, base, dt, u->device, q->ndim, shape);
}

tpdp_status fsdp_params_to_unsharded(tpdp_fsdp_unit *u, void *base,
                                     tpdp_dtype dt) {
  for (int i = 0; i < u->np; i++) {
    const fsdp_param *q = &u->p[i];
    tpdp_tensor t;
    CHECK(view(u, q, fsdp_at(base, dt, q->full_off), dt, q->shape[0], &t));
    CHECK(tpdp_param_set_tensor(q->param, &t));
    CHECK(tpdp_param_set_row_shard(q->param, 0, -1));
  }
  return TPDP_SUCCESS;
}

tpdp_status fsdp_params_to_sharded(tpdp_fsdp_unit *u) {
  for (int i = 0; i < u->np; i++) {
    const fsdp_param *q = &u->p[i];
    int64_t rows = fsdp_rows_of(q, u->rank);
    tpdp_tensor t;
    CHECK(view(u, q, fsdp_shard_rows(u, q), TPDP_F32, rows, &t));
    CHECK(tpdp_param_set_tensor(q->param, &t));
    CHECK(tpdp_param_set_row_shard(q->param, rows ? u->rank * q->chunk : 0,
                                   q->shape[0]));
  }
  return TPDP_SUCCESS;
}

tpdp_status fsdp_params_set_grads(tpdp_fsdp_unit *u, int full) {
  for (int i = 0; i < u->np; i++) {
    const fsdp_param *q = &u->p[i];
    tpdp_tensor t;
    if (full)
      CHECK(view(u, q, fsdp_at(u->full_grad, u->pdt, q->full_off), u->pdt,
                 q->shape[0], &t));
    else
      CHECK(view(u, q, fsdp_grad_rows(u, q), TPDP_F32, fsdp_rows_of(q, u->rank),
                 &t));
    CHECK(tpdp_param_set_grad(q->param, &t));
  }
  return TPDP_SUCCESS;
}
