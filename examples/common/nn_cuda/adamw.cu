// SPDX-License-Identifier: BSD-3-Clause
// nn_cuda.h: torch.optim.AdamW's step, each element by adamw.h's
// nn_adamw_element, the scalars made on the host as nn_adamw makes them:
// the same bits as the CPU's.
#include "examples/common/adamw.h"
#include "examples/common/nn_cuda/kernels.cuh"

static __global__ void k_adamw(float *p, const float *g, float *m, float *v,
                               int64_t n, nn_adamw_scalars s) {
  GRID_STRIDE(k, n) nn_adamw_element(&p[k], &m[k], &v[k], g[k], &s);
}

extern "C" int nn_cuda_adamw(float *p, const float *g, float *m, float *v,
                             int64_t n, const nn_adamw_opts *o,
                             double weight_decay, int step, void *stream) {
  if (n == 0) return 0;
  k_adamw<<<grid_for(n), THREADS, 0, S(stream)>>>(
      p, g, m, v, n, nn_adamw_scalars_make(o, weight_decay, step));
  LAUNCHED(k_adamw);
  return 0;
}
