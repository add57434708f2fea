// SPDX-License-Identifier: BSD-3-Clause
/* Host-local ranks over any host-memory communicator: every rank shares
 * its host name (allgather) and counts the lower ranks with the same one.
 * This is what MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) gives, done
 * through the tpdp_comm interface so that the NCCL bootstrap needs no MPI
 * header and works over any host backend. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/backend.h"

#define HOST_BYTES 256

tpdp_status tpdp_comm_local_rank(tpdp_comm *comm, int *local_rank,
                                 int *local_size) {
  TPDP_API_ENTRY;
  CHECK_PTR(local_rank);
  CHECK_PTR(local_size);
  if (comm == NULL || comm->size == 1) {
    *local_rank = 0;
    *local_size = 1;
    return TPDP_SUCCESS;
  }
  if (comm->ops->device_type != TPDP_DEVICE_CPU)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "%s is a %s communicator; host-local ranks need a "
                    "host-memory one (e.g. the world communicator)",
                    comm->name, comm->ops->backend);
  char mine[HOST_BYTES];
  memset(mine, 0, sizeof mine);
  if (gethostname(mine, sizeof mine - 1) != 0)
    return TPDP_ERR(TPDP_ERR_INTERNAL, "gethostname failed on rank %d of %s",
                    comm->rank, comm->name);
  char *all = NULL;
  CHECK(TPDP_CALLOC(all, (size_t)comm->size * HOST_BYTES));
  tpdp_tensor send = tpdp_tensor_1d(mine, TPDP_U8, HOST_BYTES);
  tpdp_tensor recv =
      tpdp_tensor_1d(all, TPDP_U8, (int64_t)comm->size * HOST_BYTES);
  tpdp_status st = tpdp_allgather(comm, &send, &recv);
  if (st == TPDP_SUCCESS) {
    int lr = 0, ls = 0;
    for (int r = 0; r < comm->size; r++) {
      if (memcmp(all + (size_t)r * HOST_BYTES, mine, HOST_BYTES) != 0) continue;
      if (r < comm->rank) lr++;
      ls++;
    }
    *local_rank = lr;
    *local_size = ls;
  }
  free(all);
  return st;
}
