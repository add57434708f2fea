// SPDX-License-Identifier: BSD-3-Clause
// nn_cuda.h: the vocabulary-parallel embedding and the position
// embedding's backward.
#include <string.h>

#include "examples/common/nn_cuda/kernels.cuh"

static __global__ void k_embedding_fwd(const int32_t *ids, int64_t n,
                                       const float *wte, int v0, int vl,
                                       const float *wpe, int T, int C,
                                       float *out) {
  GRID_STRIDE(k, n * C) {
    const int64_t i = k / C;
    const int c = (int)(k % C);
    const int r = ids[i] - v0;
    float v = r >= 0 && r < vl ? wte[(int64_t)r * C + c] : 0.0f;
    if (wpe) v += wpe[(i % T) * C + c];
    out[k] = v;
  }
}

extern "C" int nn_cuda_embedding_fwd(const int32_t *ids, int64_t n,
                                     const float *wte, int v0, int vl,
                                     const float *wpe, int T, int C, float *out,
                                     void *stream) {
  if (n * C == 0) return 0;
  k_embedding_fwd<<<grid_for(n * C), THREADS, 0, S(stream)>>>(
      ids, n, wte, v0, vl, wpe, T, C, out);
  LAUNCHED(k_embedding_fwd);
  return 0;
}

extern "C" void nn_embedding_plan_make(const int32_t *ids, int64_t n, int v0,
                                       int vl, nn_embedding_plan *plan) {
  // A counting sort of the positions by local row, stable (positions stay
  // increasing within a row): count per row, each row's start, then place.
  int32_t *next = plan->row_work;
  memset(next, 0, sizeof *next * (size_t)vl);
  for (int64_t i = 0; i < n; i++) {
    int r = ids[i] - v0;
    if (r >= 0 && r < vl) next[r]++;
  }
  int segments = 0, start = 0;
  for (int r = 0; r < vl; r++) {
    if (next[r] == 0) continue;
    plan->seg_row[segments] = r;
    plan->seg_start[segments++] = start;
    int c = next[r];
    next[r] = start;
    start += c;
  }
  plan->seg_start[segments] = start;
  plan->segments = segments;
  for (int64_t i = 0; i < n; i++) {
    int r = ids[i] - v0;
    if (r >= 0 && r < vl) plan->order[next[r]++] = (int32_t)i;
  }
}

// One block per updated row: its positions' gradients added in position
// order into the row, as nn_cpu's loop does.
static __global__ void k_embedding_bwd(const int32_t *order,
                                       const int32_t *seg_start,
                                       const int32_t *seg_row,
                                       const float *dout, int C, float *dwte) {
  const int s = blockIdx.x;
  const int j0 = seg_start[s], j1 = seg_start[s + 1];
  float *row = dwte + (int64_t)seg_row[s] * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float acc = row[c];
    for (int j = j0; j < j1; j++) acc += dout[(int64_t)order[j] * C + c];
    row[c] = acc;
  }
}

extern "C" int nn_cuda_embedding_bwd(const int32_t *order,
                                     const int32_t *seg_start,
                                     const int32_t *seg_row, int segments,
                                     const float *dout, int C, float *dwte,
                                     void *stream) {
  if (segments == 0 || C == 0) return 0;
  const int threads = C < THREADS ? 32 * ((C + 31) / 32) : THREADS;
  k_embedding_bwd<<<segments, threads, 0, S(stream)>>>(order, seg_start,
                                                       seg_row, dout, C, dwte);
  LAUNCHED(k_embedding_bwd);
  return 0;
}

static __global__ void k_position_bwd(const float *dx, int B, int T, int C,
                                      float *dwpe) {
  GRID_STRIDE(k, (int64_t)T * C) {
    float acc = 0.0f;
    for (int b = 0; b < B; b++) acc += dx[(int64_t)b * T * C + k];
    dwpe[k] = acc;
  }
}

extern "C" int nn_cuda_position_bwd(const float *dx, int B, int T, int C,
                                    float *dwpe, void *stream) {
  if ((int64_t)T * C == 0) return 0;
  k_position_bwd<<<grid_for((int64_t)T * C), THREADS, 0, S(stream)>>>(dx, B, T,
                                                                      C, dwpe);
  LAUNCHED(k_position_bwd);
  return 0;
}
