// SPDX-License-Identifier: BSD-3-Clause
/* Device-memory paths of tp/ and dp/ at world size 1 on an NCCL
 * communicator (see nccl_checks.h): redistribute and full_tensor on CUDA
 * tensors over a 1-rank "tp" mesh, the reducer over CUDA parameters
 * (view and copy modes, bf16/f16 hooks, the rebuild in the second
 * iteration, host metadata staged through device memory), and fully
 * sharded units over CUDA parameters.
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

/* ------------------------------------------------------------ fully sharded
 * units over CUDA parameters: a root (emb.weight [3, 4]) with two blocks
 * (w [5, 2], b [5]), at ZeRO level 1, 2 or 3, two steps driven as a
 * framework drives them, the "backward" writing gradients on the
 * framework's non-blocking stream. At world size 1 a unit still gathers
 * into its full tensors, packs and reduce-scatters over NCCL on the
 * communicator's stream, ordered by events: forward must see the values the
 * host expects (dyadic numbers: every step exact in f32), finalize must
 * leave each gradient shard the written gradient (the mean over one rank)
 * and count the collectives of the ZeRO formulas (3 units: 3 all-gathers
 * at levels 1-2, 3 + 2 at level 3 where the root stays gathered; 3
 * reduce-scatters). */

#define FP 5 /* parameters: emb.weight, blocks.{0,1}.{w,b} */
static const int kFsdpNdim[FP] = {2, 2, 1, 2, 1};
static const int64_t kFsdpShape[FP][2] = {
    {3, 4}, {5, 2}, {5, 0}, {5, 2}, {5, 0}};
static const int64_t kFsdpNumel[FP] = {12, 10, 5, 10, 5};

static float fsdp_grad(int step, int p, int64_t e) {
  return 0.5f * (float)(step + 1) + 0.125f * (float)(e + p);
}

/* Parameter p's current view equals want[p] (copied back in stream order). */
static int fsdp_expect(tpdp_param *q, const float *want, int64_t n,
                       cudaStream_t s, const char *when, int p, char *msg,
                       size_t len) {
  float got[12];
  const tpdp_tensor *t = tpdp_param_tensor(q);
  if (t->device.type != TPDP_DEVICE_CUDA || tpdp_tensor_numel(t) != n)
    FAILF("%s: parameter %d views %lld elements on %s, expected %lld on a GPU",
          when, p, (long long)tpdp_tensor_numel(t),
          t->device.type == TPDP_DEVICE_CUDA ? "a GPU" : "the host",
          (long long)n);
  COK(cudaMemcpyAsync(got, t->data, (size_t)n * sizeof(float),
                      cudaMemcpyDeviceToHost, s));
  COK(cudaStreamSynchronize(s));
  for (int64_t e = 0; e < n; e++)
    if (got[e] != want[e])
      FAILF("%s: parameter %d element %lld is %g, expected %g", when, p,
            (long long)e, (double)got[e], (double)want[e]);
  return 0;
out:
  return 1;
}

static int run_fsdp(int level, char *msg, size_t len) {
  int rc = 1;
  tpdp_comm *c = NULL;
  tpdp_module *root = NULL, *blocks[2] = {NULL, NULL};
  tpdp_param *params[FP] = {NULL};
  void *d_init[FP] = {NULL};
  cudaStream_t s = NULL;
  float ref[FP][12], g[FP][12];
  static const char *const names[FP] = {"weight", "w", "b", "w", "b"};

  TOK(tpdp_comm_create_nccl(NULL, 0, &c));
  tpdp_device gpu = {TPDP_DEVICE_CUDA, tpdp_comm_cuda_device(c)};
  COK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  TOK(tpdp_module_create("Net", &root));
  tpdp_module *emb = NULL, *list = NULL;
  TOK(tpdp_module_create("Embedding", &emb));
  TOK(tpdp_module_add_child(root, "emb", emb));
  TOK(tpdp_module_create("ModuleList", &list));
  TOK(tpdp_module_add_child(root, "blocks", list));
  for (int b = 0; b < 2; b++) {
    TOK(tpdp_module_create("Block", &blocks[b]));
    TOK(tpdp_module_add_child(list, b ? "1" : "0", blocks[b]));
  }
  for (int p = 0; p < FP; p++) {
    for (int64_t e = 0; e < kFsdpNumel[p]; e++)
      ref[p][e] = 0.25f * (float)(10 * p + e);
    size_t bytes = (size_t)kFsdpNumel[p] * sizeof(float);
    COK(cudaMalloc(&d_init[p], bytes));
    COK(cudaMemcpy(d_init[p], ref[p], bytes, cudaMemcpyHostToDevice));
    tpdp_tensor t;
    TOK(tpdp_tensor_init(&t, d_init[p], TPDP_F32, gpu, kFsdpNdim[p],
                         kFsdpShape[p]));
    TOK(tpdp_param_create(&t, &params[p]));
    TOK(tpdp_module_add_param(p == 0 ? emb : blocks[(p - 1) / 2], names[p],
                              params[p]));
  }
  tpdp_fully_shard_options o = tpdp_fully_shard_options_default();
  o.zero_level = level;
  o.stream = s;
  tpdp_fsdp_unit *ub[2], *ur = NULL;
  for (int b = 0; b < 2; b++) TOK(tpdp_fully_shard(blocks[b], c, &o, &ub[b]));
  TOK(tpdp_fully_shard(root, c, &o, &ur));
  /* The shards are copies: the original memory may go. */
  for (int p = 0; p < FP; p++) {
    COK(cudaFree(d_init[p]));
    d_init[p] = NULL;
  }
  for (int step = 0; step < 2; step++) {
    char when[64];
    TOK(tpdp_module_forward_begin(root));
    snprintf(when, sizeof when, "level %d step %d root forward", level, step);
    if (fsdp_expect(params[0], ref[0], kFsdpNumel[0], s, when, 0, msg, len))
      goto out;
    for (int b = 0; b < 2; b++) {
      TOK(tpdp_module_forward_begin(blocks[b]));
      snprintf(when, sizeof when, "level %d step %d block %d forward", level,
               step, b);
      for (int p = 1 + 2 * b; p <= 2 + 2 * b; p++)
        if (fsdp_expect(params[p], ref[p], kFsdpNumel[p], s, when, p, msg, len))
          goto out;
      TOK(tpdp_module_forward_end(blocks[b]));
    }
    TOK(tpdp_module_forward_end(root));
    /* Backward: each unit's gradients written on the framework's stream
     * into the zeroed full gradients, blocks in reverse. */
    TOK(tpdp_module_backward_begin(root));
    for (int b = 1; b >= -1; b--) {
      if (b >= 0) TOK(tpdp_module_backward_begin(blocks[b]));
      int p0 = b >= 0 ? 1 + 2 * b : 0, p1 = b >= 0 ? 2 + 2 * b : 0;
      for (int p = p0; p <= p1; p++) {
        const tpdp_tensor *gt = tpdp_param_grad(params[p]);
        if (gt == NULL || tpdp_tensor_numel(gt) != kFsdpNumel[p])
          FAILF("level %d step %d: parameter %d has no full gradient view",
                level, step, p);
        for (int64_t e = 0; e < kFsdpNumel[p]; e++)
          g[p][e] = fsdp_grad(step, p, e);
        COK(cudaMemcpyAsync(gt->data, g[p],
                            (size_t)kFsdpNumel[p] * sizeof(float),
                            cudaMemcpyHostToDevice, s));
      }
      if (b >= 0) TOK(tpdp_module_backward_end(blocks[b]));
    }
    TOK(tpdp_module_backward_end(root));
    TOK(tpdp_fsdp_finalize(ur));
    tpdp_fsdp_stats st;
    TOK(tpdp_fsdp_get_stats(ur, &st));
    if (st.allgathers != (level == 3 ? 5 : 3) || st.reduce_scatters != 3)
      FAILF(
          "level %d step %d: %lld all-gathers, %lld reduce-scatters; "
          "expected %d and 3",
          level, step, (long long)st.allgathers, (long long)st.reduce_scatters,
          level == 3 ? 5 : 3);
    /* The gradient shards (every row at one rank), then SGD on the
     * framework's stream, and the same on the host. */
    for (int p = 0; p < FP; p++) {
      snprintf(when, sizeof when, "level %d step %d gradient shard", level,
               step);
      const tpdp_tensor *gt = tpdp_param_grad(params[p]);
      float got[12];
      COK(cudaMemcpyAsync(got, gt->data, (size_t)kFsdpNumel[p] * sizeof(float),
                          cudaMemcpyDeviceToHost, s));
      COK(cudaStreamSynchronize(s));
      for (int64_t e = 0; e < kFsdpNumel[p]; e++) {
        if (got[e] != g[p][e])
          FAILF("%s: parameter %d element %lld is %g, expected %g", when, p,
                (long long)e, (double)got[e], (double)g[p][e]);
        ref[p][e] -= 0.5f * g[p][e];
      }
      COK(cudaMemcpyAsync(tpdp_param_tensor(params[p])->data, ref[p],
                          (size_t)kFsdpNumel[p] * sizeof(float),
                          cudaMemcpyHostToDevice, s));
      COK(cudaStreamSynchronize(s)); /* ref is reused on the host */
    }
  }
  /* summon_full_params: the updated values, in stream order. */
  TOK(tpdp_fsdp_summon_full_params(ur));
  for (int p = 0; p < FP; p++)
    if (fsdp_expect(params[p], ref[p], kFsdpNumel[p], s, "summoned", p, msg,
                    len))
      goto out;
  TOK(tpdp_fsdp_summon_end(ur, 0));
  rc = 0;
out:
  for (int p = 0; p < FP; p++) {
    if (params[p]) tpdp_param_release(params[p]);
    if (d_init[p]) cudaFree(d_init[p]);
  }
  tpdp_module_destroy(root);
  if (s) cudaStreamDestroy(s);
  tpdp_comm_destroy(c);
  return rc;
}

int tpdp_gpu_check_fsdp_level1(char *m, size_t l) { return run_fsdp(1, m, l); }
int tpdp_gpu_check_fsdp_level2(char *m, size_t l) { return run_fsdp(2, m, l); }
int tpdp_gpu_check_fsdp_level3(char *m, size_t l) { return run_fsdp(3, m, l); }

/* Host parameters on an NCCL communicator: refused at creation, naming the
 * parameter and the memory the communicator moves. */
int tpdp_gpu_check_fsdp_host_params(char *msg, size_t len) {
  int rc = 1;
  tpdp_comm *c = NULL;
  tpdp_module *m = NULL;
  tpdp_param *q = NULL;
  float w[4] = {1, 2, 3, 4};
  TOK(tpdp_comm_create_nccl(NULL, 0, &c));
  TOK(tpdp_module_create("Linear", &m));
  tpdp_tensor t = tpdp_tensor_1d(w, TPDP_F32, 4);
  TOK(tpdp_param_create(&t, &q));
  TOK(tpdp_module_add_param(m, "weight", q));
  tpdp_fsdp_unit *u = NULL;
  tpdp_status st = tpdp_fully_shard(m, c, NULL, &u);
  if (st != TPDP_ERR_DEVICE_MISMATCH ||
      strstr(tpdp_last_error(), "parameter 'weight' is on cpu") == NULL ||
      strstr(tpdp_last_error(), "moves GPU memory") == NULL)
    FAILF("host parameters on nccl: %s: %s (expected a device mismatch)",
          tpdp_status_string(st), tpdp_last_error());
  if (u != NULL) FAILF("a unit was returned");
  rc = 0;
out:
  if (q) tpdp_param_release(q);
  tpdp_module_destroy(m);
  tpdp_comm_destroy(c);
  return rc;
}
