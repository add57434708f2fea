// SPDX-License-Identifier: BSD-3-Clause
/* The few collectives of save and load over an optional host-memory
 * communicator (NULL: this process alone), and the agreement that makes a
 * failure on any rank the same failure, with the same message, on all. */
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt_internal.h"

tpdp_status ckpt_group_init(ckpt_group *g, tpdp_comm *comm) {
  g->comm = comm;
  g->rank = 0;
  g->size = 1;
  if (comm == NULL) return TPDP_SUCCESS;
  if (tpdp_comm_device_type(comm) != TPDP_DEVICE_CPU)
    return TPDP_ERR(TPDP_ERR_DEVICE_MISMATCH,
                    "communicator '%s' moves device memory (%s): checkpoints "
                    "need a host-memory communicator (e.g. tpdp_comm_world)",
                    tpdp_comm_name(comm), tpdp_comm_backend(comm));
  g->rank = tpdp_comm_rank(comm);
  g->size = tpdp_comm_size(comm);
  return TPDP_SUCCESS;
}

tpdp_status ckpt_allgather_i64(const ckpt_group *g, const int64_t *mine,
                               int64_t n, int64_t *all) {
  if (g->size == 1) {
    if (n > 0) memcpy(all, mine, sizeof *all * (size_t)n);
    return TPDP_SUCCESS;
  }
  tpdp_tensor s = tpdp_tensor_1d((void *)mine, TPDP_I64, n);
  tpdp_tensor r = tpdp_tensor_1d(all, TPDP_I64, n * g->size);
  return tpdp_allgather(g->comm, &s, &r);
}

tpdp_status ckpt_allreduce_sum_i64(const ckpt_group *g, int64_t *v, int64_t n) {
  if (g->size == 1 || n == 0) return TPDP_SUCCESS;
  tpdp_tensor t = tpdp_tensor_1d(v, TPDP_I64, n);
  return tpdp_allreduce(g->comm, &t, &t, TPDP_OP_SUM);
}

tpdp_status ckpt_bcast_bytes(const ckpt_group *g, char **buf, int64_t *len,
                             int root) {
  if (g->size == 1) return TPDP_SUCCESS;
  tpdp_tensor lt = tpdp_tensor_1d(len, TPDP_I64, 1);
  CHECK(tpdp_broadcast(g->comm, &lt, &lt, root));
  if (*len <= 0) return TPDP_SUCCESS;
  if (g->rank != root) {
    *buf = malloc((size_t)*len + 1);
    if (*buf == NULL)
      return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY,
                      "out of memory receiving %lld bytes", (long long)*len);
    (*buf)[*len] = '\0';
  }
  tpdp_tensor bt = tpdp_tensor_1d(*buf, TPDP_U8, *len);
  tpdp_status st = tpdp_broadcast(g->comm, &bt, &bt, root);
  if (st != TPDP_SUCCESS && g->rank != root) {
    free(*buf);
    *buf = NULL;
  }
  return st;
}

tpdp_status ckpt_agree(const ckpt_group *g, tpdp_status mine) {
  return g->comm == NULL ? mine : tpdp_comm_agree(g->comm, mine, NULL);
}
