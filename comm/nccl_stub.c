// SPDX-License-Identifier: BSD-3-Clause
/* The NCCL entry points in a build without --config=cuda: they exist so
 * that callers link everywhere, and say why they cannot work. */
#include <stddef.h>

#include "comm/backend.h"

#define NOT_BUILT "built without --config=cuda: no CUDA/NCCL support"

int tpdp_nccl_available(void) { return 0; }

tpdp_status tpdp_cuda_device_count(int *count) {
  TPDP_API_ENTRY;
  CHECK_PTR(count);
  *count = 0;
  return TPDP_ERR(TPDP_ERR_UNSUPPORTED, NOT_BUILT);
}

tpdp_status tpdp_comm_create_nccl(tpdp_comm *bootstrap, int device,
                                  tpdp_comm **out) {
  TPDP_API_ENTRY;
  (void)bootstrap;
  (void)device;
  CHECK_PTR(out);
  *out = NULL;
  return TPDP_ERR(TPDP_ERR_UNSUPPORTED, NOT_BUILT);
}

void *tpdp_comm_nccl_stream(const tpdp_comm *comm) {
  (void)comm;
  return NULL;
}

int tpdp_comm_cuda_device(const tpdp_comm *comm) {
  (void)comm;
  return -1;
}
