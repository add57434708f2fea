// SPDX-License-Identifier: BSD-3-Clause
// Deterministic column sums over rows, for the kernels that need them
// (colsum.cu, layernorm.cu): a sum's terms are a Term's, so LayerNorm's
// parameter gradients are summed by the same passes as a bias's.
#ifndef TPDP_EXAMPLES_COMMON_NN_CUDA_COLSUM_CUH
#define TPDP_EXAMPLES_COMMON_NN_CUDA_COLSUM_CUH

#include "examples/common/nn_cuda/kernels.cuh"

// Column sums over rows in two passes: block (x, y) sums its 32 columns
// over row chunk y into partial[s][y][c] (8 row lanes, combined in a fixed
// order), then one thread per column adds the chunks in order. No atomics:
// the same bits every run.
static const int COL_TILE = 32, COL_LANES = 8, MAX_CHUNKS = 64;

static inline int col_chunks(int N) {
  int c = (N + 31) / 32;
  return c < 1 ? 1 : (c > MAX_CHUNKS ? MAX_CHUNKS : c);
}

// What is summed per column: dY itself (bias gradients), or LayerNorm's
// (dY * xhat, dY).
struct ColsumPlain {
  const float *X;
  __device__ void term(int64_t r, int64_t i, float *out) const {
    (void)r;
    out[0] = X[i];
  }
  static const int sums = 1;
};
struct ColsumLayernorm {
  const float *X, *dY, *mean, *rstd;
  __device__ void term(int64_t r, int64_t i, float *out) const {
    float xhat = (X[i] - mean[r]) * rstd[r];
    out[0] = dY[i] * xhat;
    out[1] = dY[i];
  }
  static const int sums = 2;
};

template <typename Term>
static __global__ void k_col_partials(Term t, int N, int C, int chunk_rows,
                                      float *partial) {
  __shared__ float sh[Term::sums][COL_LANES][COL_TILE];
  const int c = blockIdx.x * COL_TILE + threadIdx.x;
  const int r0 = blockIdx.y * chunk_rows;
  int r1 = r0 + chunk_rows;
  if (r1 > N) r1 = N;
  float acc[Term::sums];
  for (int s = 0; s < Term::sums; s++) acc[s] = 0.0f;
  if (c < C)
    for (int r = r0 + threadIdx.y; r < r1; r += COL_LANES) {
      float v[Term::sums];
      t.term(r, (int64_t)r * C + c, v);
      for (int s = 0; s < Term::sums; s++) acc[s] += v[s];
    }
  for (int s = 0; s < Term::sums; s++) sh[s][threadIdx.y][threadIdx.x] = acc[s];
  __syncthreads();
  if (threadIdx.y == 0 && c < C)
    for (int s = 0; s < Term::sums; s++) {
      float sum = 0.0f;
      for (int l = 0; l < COL_LANES; l++) sum += sh[s][l][threadIdx.x];
      partial[((int64_t)s * gridDim.y + blockIdx.y) * C + c] = sum;
    }
}

static __global__ void k_col_finish(const float *partial, int chunks, int C,
                                    float *out0, float *out1) {
  GRID_STRIDE(c, (int64_t)C) {
    float s0 = 0.0f, s1 = 0.0f;
    for (int y = 0; y < chunks; y++) {
      s0 += partial[(int64_t)y * C + c];
      if (out1) s1 += partial[((int64_t)chunks + y) * C + c];
    }
    out0[c] = s0;
    if (out1) out1[c] = s1;
  }
}

template <typename Term>
static int column_sums(const Term &t, int N, int C, float *scratch, float *out0,
                       float *out1, cudaStream_t st) {
  if (C == 0) return 0;
  if (N == 0) {
    CUDA_TRY(cudaMemsetAsync(out0, 0, sizeof(float) * (size_t)C, st));
    if (out1) CUDA_TRY(cudaMemsetAsync(out1, 0, sizeof(float) * (size_t)C, st));
    return 0;
  }
  int chunks = col_chunks(N);
  int chunk_rows = (N + chunks - 1) / chunks;
  chunks = (N + chunk_rows - 1) / chunk_rows;
  dim3 grid((C + COL_TILE - 1) / COL_TILE, chunks), block(COL_TILE, COL_LANES);
  k_col_partials<Term><<<grid, block, 0, st>>>(t, N, C, chunk_rows, scratch);
  LAUNCHED(k_col_partials);
  k_col_finish<<<grid_for(C), THREADS, 0, st>>>(scratch, chunks, C, out0, out1);
  LAUNCHED(k_col_finish);
  return 0;
}

#endif
