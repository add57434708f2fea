// SPDX-License-Identifier: BSD-3-Clause
/* The MPI backend's entry points for a build without MPI (scripts/gpu-check
 * on a GPU machine that has no MPI): tpdp_init then fails with
 * TPDP_ERR_UNSUPPORTED, while single-rank NCCL communicators
 * (tpdp_comm_create_nccl(NULL, ...)) work. Not used by the Bazel build,
 * which always has MPI. */
#include "comm/backend.h"

#define NO_MPI                                \
  "built without MPI (comm/mpi_stub.c): use " \
  "tpdp_comm_create_nccl(NULL, ...) for a single rank"

tpdp_status comm_mpi_backend_init(int *argc, char ***argv,
                                  int *we_initialized) {
  (void)argc;
  (void)argv;
  *we_initialized = 0;
  return TPDP_ERR(TPDP_ERR_UNSUPPORTED, NO_MPI);
}

tpdp_status comm_mpi_backend_finalize(int we_initialized) {
  (void)we_initialized;
  return TPDP_SUCCESS;
}

tpdp_status comm_mpi_world(tpdp_comm **out) {
  *out = NULL;
  return TPDP_ERR(TPDP_ERR_UNSUPPORTED, NO_MPI);
}

tpdp_status comm_mpi_world_hosts(uint64_t **hosts, int *n) {
  *hosts = NULL;
  *n = 0;
  return TPDP_ERR(TPDP_ERR_UNSUPPORTED, NO_MPI);
}
