// SPDX-License-Identifier: BSD-3-Clause
/* Device-memory paths of tp/ and dp/ at world size 1 on an NCCL
 * communicator (see nccl_checks.h): redistribute and full_tensor on CUDA
 * tensors over a 1-rank "tp" mesh, and the reducer over CUDA parameters
 * (view and copy modes, bf16/f16 hooks, the rebuild in the second
 * iteration, host metadata staged through device memory).
 *
 * Expected values are computed on the host without tpdp: at one rank every
 * placement holds the whole tensor, so each redistribution must reproduce
 * the input exactly (Replicate->Partial(sum) keeps the value on coordinate
 * 0); the reducer's average over one rank is the gradient divided by
 * divide_factor (2 here), exact for the small integers used, in f32, bf16
 * and f16 alike. */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gpu/check_macros.h"
#include "tests/gpu/nccl_checks.h"
#include "tpdp/tpdp.h"

/* ------------------------------------------------------------ redistribute */

#define R 5
#define C 7
#define PITCH 9 /* row stride of the strided source: columns 7, 8 unused */

static tpdp_placement parse_pl(char c, int dim) {
  if (c == 'S') return tpdp_shard(dim);
  if (c == 'P') return tpdp_partial(TPDP_OP_SUM);
  return tpdp_replicate();
}

/* One transition src -> dst ("S0", "S1", "R", "P") of a 5x7 f32 tensor
 * with value r*7+c+1, optionally from a strided source view (rows PITCH
 * apart), or full_tensor when dst is NULL. */
static int run_redistribute(const char *src_pl, const char *dst_pl, int strided,
                            char *msg, size_t len) {
  int rc = 1;
  tpdp_comm *c = NULL;
  tpdp_mesh *mesh = NULL;
  tpdp_spec *ss = NULL, *ds = NULL;
  float *d_src = NULL, *d_dst = NULL;
  float host[R * PITCH], want[R * C], got[R * C];
  const char *names[1] = {"tp"};
  int64_t msize[1] = {1};
  int64_t gshape[2] = {R, C};

  TOK(tpdp_comm_create_nccl(NULL, 0, &c));
  int dev = tpdp_comm_cuda_device(c);
  tpdp_device gpu = {TPDP_DEVICE_CUDA, dev};
  TOK(tpdp_mesh_create(c, 1, msize, names, &mesh));
  tpdp_placement sp = parse_pl(src_pl[0], src_pl[1] ? src_pl[1] - '0' : 0);
  TOK(tpdp_spec_create(mesh, &sp, 1, 2, gshape, TPDP_F32, gpu, &ss));
  if (dst_pl != NULL) {
    tpdp_placement dp = parse_pl(dst_pl[0], dst_pl[1] ? dst_pl[1] - '0' : 0);
    TOK(tpdp_spec_create(mesh, &dp, 1, 2, gshape, TPDP_F32, gpu, &ds));
  }
  for (int i = 0; i < R * PITCH; i++) host[i] = -7.0f; /* padding */
  for (int r = 0; r < R; r++)
    for (int k = 0; k < C; k++) {
      host[r * (strided ? PITCH : C) + k] = (float)(r * C + k + 1);
      want[r * C + k] = (float)(r * C + k + 1);
    }
  COK(cudaMalloc((void **)&d_src, sizeof host));
  COK(cudaMalloc((void **)&d_dst, sizeof got));
  COK(cudaMemcpy(d_src, host, sizeof host, cudaMemcpyHostToDevice));
  COK(cudaMemset(d_dst, 0xFF, sizeof got)); /* NaNs: nothing left over */
  /* redistribute's collectives run on the communicator's own stream: the
   * input must be complete (a pageable cudaMemcpy may still be in flight). */
  COK(cudaDeviceSynchronize());

  tpdp_dtensor src;
  TOK(tpdp_tensor_init(&src.local, d_src, TPDP_F32, gpu, 2, gshape));
  if (strided) src.local.strides[0] = PITCH;
  src.spec = ss;
  tpdp_tensor dst;
  TOK(tpdp_tensor_init(&dst, d_dst, TPDP_F32, gpu, 2, gshape));
  if (ds != NULL)
    TOK(tpdp_redistribute(&src, ds, &dst));
  else
    TOK(tpdp_dtensor_full_tensor(&src, &dst));
  COK(cudaMemcpy(got, d_dst, sizeof got, cudaMemcpyDeviceToHost));
  for (int i = 0; i < R * C; i++)
    if (got[i] != want[i])
      FAILF("%s -> %s%s: element [%d,%d] = %g, expected %g", src_pl,
            dst_pl ? dst_pl : "full_tensor", strided ? " (strided source)" : "",
            i / C, i % C, (double)got[i], (double)want[i]);
  /* The source is never written. */
  float back[R * PITCH];
  COK(cudaMemcpy(back, d_src, sizeof back, cudaMemcpyDeviceToHost));
  if (memcmp(back, host, sizeof back) != 0) FAILF("the source was modified");
  rc = 0;
out:
  if (d_src) cudaFree(d_src);
  if (d_dst) cudaFree(d_dst);
  tpdp_spec_destroy(ss);
  tpdp_spec_destroy(ds);
  if (tpdp_mesh_destroy(mesh) != TPDP_SUCCESS && rc == 0) {
    snprintf(msg, len, "tpdp_mesh_destroy: %s", tpdp_last_error());
    rc = 1;
  }
  tpdp_comm_destroy(c);
  return rc;
}

int tpdp_gpu_check_redistribute(char *msg, size_t len) {
  static const char *const cases[][2] = {
      {"S0", "R"},  {"S1", "R"}, {"P", "R"},   {"R", "S0"},
      {"R", "S1"},  {"P", "S0"}, {"P", "S1"},  {"S0", "S1"},
      {"S1", "S0"}, {"R", "P"},  {"S1", "S1"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    for (int strided = 0; strided < 2; strided++)
      if (run_redistribute(cases[i][0], cases[i][1], strided, msg, len))
        return 1;
  return 0;
}

int tpdp_gpu_check_full_tensor(char *msg, size_t len) {
  static const char *const srcs[] = {"S0", "S1", "R", "P"};
  for (size_t i = 0; i < sizeof srcs / sizeof srcs[0]; i++)
    for (int strided = 0; strided < 2; strided++)
      if (run_redistribute(srcs[i], NULL, strided, msg, len)) return 1;
  return 0;
}

/* ------------------------------------------------------------ reducer */

#define NP 3
static const int kNdim[NP] = {2, 1, 3};
static const int64_t kShape[NP][3] = {{4, 3, 0}, {5, 0, 0}, {2, 2, 2}};
static const int64_t kNumel[NP] = {12, 5, 8};

static float grad_value(int p, int64_t i, int iter) {
  return (float)((i % 13) + 1 + p) * (float)(iter == 0 ? 1 : 3);
}

/* Two iterations (the second after the bucket rebuild) of create, prepare,
 * gradients written on a producer stream, all marked ready in reverse order,
 * finalize; gradients checked against g / 2. */
static int run_reducer(int view, tpdp_reducer_hook hook, char *msg,
                       size_t len) {
  int rc = 1;
  tpdp_comm *c = NULL;
  tpdp_reducer *red = NULL;
  cudaStream_t producer = NULL;
  void *d_param[NP] = {NULL}, *d_grad[NP] = {NULL};
  float h_param[NP][12], h_grad[NP][12], got[12];
  tpdp_reducer_param params[NP];
  static const char *const fqns[NP] = {"fc.weight", "fc.bias", "conv.weight"};
  const char *mode = view ? "view" : "copy";

  TOK(tpdp_comm_create_nccl(NULL, 0, &c));
  int dev = tpdp_comm_cuda_device(c);
  tpdp_device gpu = {TPDP_DEVICE_CUDA, dev};
  COK(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking));
  memset(params, 0, sizeof params);
  for (int p = 0; p < NP; p++) {
    size_t bytes = (size_t)kNumel[p] * sizeof(float);
    for (int64_t i = 0; i < kNumel[p]; i++)
      h_param[p][i] = (float)(100 * p + i) * 0.5f;
    COK(cudaMalloc(&d_param[p], bytes));
    COK(cudaMemcpy(d_param[p], h_param[p], bytes, cudaMemcpyHostToDevice));
    TOK(tpdp_tensor_init(&params[p].param, d_param[p], TPDP_F32, gpu, kNdim[p],
                         kShape[p]));
    params[p].grad = params[p].param;
    params[p].grad.data = NULL;
    if (!view) {
      COK(cudaMalloc(&d_grad[p], bytes));
      COK(cudaMemset(d_grad[p], 0, bytes));
      params[p].grad.data = d_grad[p];
    }
    params[p].fqn = fqns[p];
  }
  COK(cudaDeviceSynchronize()); /* setup copies done before any stream */
  tpdp_reducer_options o = tpdp_reducer_options_default();
  o.first_bucket_bytes = 32; /* several buckets: 48, 20 and 32 bytes */
  o.bucket_cap_bytes = 64;
  o.gradient_as_bucket_view = view;
  o.divide_factor = 2.0;
  o.comm_hook = hook;
  o.producer_stream = producer;
  TOK(tpdp_reducer_create(c, params, NP, &o, &red));
  if (tpdp_reducer_num_buckets(red) < 2)
    FAILF("expected several buckets, got %lld",
          (long long)tpdp_reducer_num_buckets(red));
  /* Rank 0's parameters were broadcast: unchanged at one rank. */
  for (int p = 0; p < NP; p++) {
    COK(cudaMemcpy(got, d_param[p], (size_t)kNumel[p] * sizeof(float),
                   cudaMemcpyDeviceToHost));
    if (memcmp(got, h_param[p], (size_t)kNumel[p] * sizeof(float)) != 0)
      FAILF("parameter %s changed by the creation broadcast", fqns[p]);
  }
  for (int iter = 0; iter < 2; iter++) {
    TOK(tpdp_reducer_prepare(red));
    for (int p = NP - 1; p >= 0; p--) {
      tpdp_tensor g;
      TOK(tpdp_reducer_grad_view(red, p, &g));
      if (g.device.type != TPDP_DEVICE_CUDA) FAILF("gradient view on the host");
      for (int64_t i = 0; i < kNumel[p]; i++)
        h_grad[p][i] = grad_value(p, i, iter);
      /* The "backward" writes on the producer stream; the reducer must
       * order its reduction after it. */
      COK(cudaMemcpyAsync(g.data, h_grad[p], (size_t)kNumel[p] * sizeof(float),
                          cudaMemcpyHostToDevice, producer));
      TOK(tpdp_reducer_mark_ready(red, p));
    }
    TOK(tpdp_reducer_finalize(red));
    /* One rank: nothing to overlap, so no rebuild (reducer.h). */
    if (tpdp_reducer_rebuilt(red))
      FAILF("buckets were rebuilt on a communicator of one rank");
    for (int p = 0; p < NP; p++) {
      tpdp_tensor g;
      TOK(tpdp_reducer_grad_view(red, p, &g));
      COK(cudaMemcpy(got, g.data, (size_t)kNumel[p] * sizeof(float),
                     cudaMemcpyDeviceToHost));
      for (int64_t i = 0; i < kNumel[p]; i++) {
        float want = h_grad[p][i] / 2.0f;
        if (got[i] != want)
          FAILF("%s mode, hook %d, iteration %d: %s[%lld] = %g, expected %g",
                mode, (int)hook, iter, fqns[p], (long long)i, (double)got[i],
                (double)want);
      }
    }
  }
  rc = 0;
out:
  tpdp_reducer_destroy(red);
  for (int p = 0; p < NP; p++) {
    if (d_param[p]) cudaFree(d_param[p]);
    if (d_grad[p]) cudaFree(d_grad[p]);
  }
  if (producer) cudaStreamDestroy(producer);
  tpdp_comm_destroy(c);
  return rc;
}

int tpdp_gpu_check_reducer_view(char *m, size_t l) {
  return run_reducer(1, TPDP_REDUCER_HOOK_NONE, m, l);
}
int tpdp_gpu_check_reducer_copy(char *m, size_t l) {
  return run_reducer(0, TPDP_REDUCER_HOOK_NONE, m, l);
}
int tpdp_gpu_check_reducer_bf16_view(char *m, size_t l) {
  return run_reducer(1, TPDP_REDUCER_HOOK_BF16, m, l);
}
int tpdp_gpu_check_reducer_bf16_copy(char *m, size_t l) {
  return run_reducer(0, TPDP_REDUCER_HOOK_BF16, m, l);
}
int tpdp_gpu_check_reducer_f16_view(char *m, size_t l) {
  return run_reducer(1, TPDP_REDUCER_HOOK_F16, m, l);
}

/* Host parameters on an NCCL communicator: every rank agrees (through the
 * staged status allgather) on the device mismatch the local check found. */
int tpdp_gpu_check_reducer_host_params(char *msg, size_t len) {
  int rc = 1;
  tpdp_comm *c = NULL;
  tpdp_reducer *red = NULL;
  float w[4] = {1, 2, 3, 4}, g[4] = {0};
  tpdp_reducer_param p;
  memset(&p, 0, sizeof p);
  p.param = tpdp_tensor_1d(w, TPDP_F32, 4);
  p.grad = tpdp_tensor_1d(g, TPDP_F32, 4);
  p.fqn = "host.weight";
  TOK(tpdp_comm_create_nccl(NULL, 0, &c));
  tpdp_status st = tpdp_reducer_create(c, &p, 1, NULL, &red);
  if (st != TPDP_ERR_DEVICE_MISMATCH ||
      strstr(tpdp_last_error(), "parameters are on cpu") == NULL)
    FAILF(
        "host parameters on nccl: %s: %s (expected the reducer's own "
        "device-mismatch message)",
        tpdp_status_string(st), tpdp_last_error());
  if (red != NULL) FAILF("a reducer was returned");
  rc = 0;
out:
  tpdp_reducer_destroy(red);
  tpdp_comm_destroy(c);
  return rc;
}
