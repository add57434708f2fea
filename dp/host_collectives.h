// SPDX-License-Identifier: BSD-3-Clause
/*
 * Internal: the reducer's collectives over small HOST buffers (its
 * metadata), for any communicator. The staging through device memory
 * (dp/host_collectives.c under TPDP_WITH_CUDA) is built with
 * --config=cuda.
 */
#ifndef TPDP_DP_HOST_COLLECTIVES_H
#define TPDP_DP_HOST_COLLECTIVES_H

#include "tpdp/comm.h"
#include "tpdp/core.h"

/* Collectives over small HOST buffers (the reducer's metadata: status
 * agreement, parameter signatures, the rebuilt ready order) on any
 * communicator. On a host communicator they are the plain blocking
 * collectives. On a device (NCCL) communicator the bytes are staged through
 * a temporary device buffer on the communicator's GPU: copied in on its
 * stream, the collective, copied back, and the stream synchronised, so the
 * host buffers hold the result on return. Collective: every rank calls. */
tpdp_status dp_host_allgather(tpdp_comm *comm, const tpdp_tensor *send,
                              tpdp_tensor *recv);
/* In place: `t` becomes its reduction over the ranks. */
tpdp_status dp_host_allreduce(tpdp_comm *comm, tpdp_tensor *t,
                              tpdp_reduce_op op);
/* In place: root's `t` lands in every rank's `t`. */
tpdp_status dp_host_broadcast(tpdp_comm *comm, tpdp_tensor *t, int root);

#endif /* TPDP_DP_HOST_COLLECTIVES_H */
