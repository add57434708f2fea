// SPDX-License-Identifier: BSD-3-Clause
// nn_cuda.h: column sums (bias gradients).
#include "examples/common/nn_cuda/colsum.cuh"

extern "C" int64_t nn_cuda_colsum_scratch_floats(int N, int C, int sums) {
  return (int64_t)sums * col_chunks(N) * C;
}

extern "C" int nn_cuda_colsum(const float *X, float *out, int N, int C,
                              float *scratch, void *stream) {
  ColsumPlain t = {X};
  return column_sums(t, N, C, scratch, out, NULL, S(stream));
}
