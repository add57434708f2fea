// SPDX-License-Identifier: BSD-3-Clause
/* NCCL backend checks at world size 1 (see nccl_checks.h). Expected values
 * at one rank: every reduction of x over one rank is x (AVG divides by 1),
 * allgather/reduce_scatter/broadcast/alltoall return the input. */
#include "tests/gpu/nccl_checks.h"

#include <cuda_runtime.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/gpu/check_macros.h"
#include "tpdp/tpdp.h"

#define N 96

int tpdp_gpu_present(char *msg, size_t len) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    snprintf(msg, len, "cudaGetDeviceCount: %s", cudaGetErrorString(e));
    return 0;
  }
  if (n == 0) {
    snprintf(msg, len, "cudaGetDeviceCount found no GPU");
    return 0;
  }
  return 1;
}

/* Host pattern: element i = (i % 17) + 1, exact in every dtype. */
static void fill_host(void *h, tpdp_dtype dt, int n, int scale) {
  for (int i = 0; i < n; i++) {
    double v = (double)((i % 17) + 1) * scale;
    switch (dt) {
      case TPDP_F32:
        ((float *)h)[i] = (float)v;
        break;
      case TPDP_F64:
        ((double *)h)[i] = v;
        break;
      case TPDP_F16:
        ((uint16_t *)h)[i] = tpdp_f32_to_f16((float)v);
        break;
      case TPDP_BF16:
        ((uint16_t *)h)[i] = tpdp_f32_to_bf16((float)v);
        break;
      case TPDP_I32:
        ((int32_t *)h)[i] = (int32_t)v;
        break;
      case TPDP_I64:
        ((int64_t *)h)[i] = (int64_t)v;
        break;
      case TPDP_U8:
        ((uint8_t *)h)[i] = (uint8_t)v;
        break;
      default:
        break;
    }
  }
}

static tpdp_tensor dev_view(void *p, tpdp_dtype dt, int64_t n, int dev) {
  tpdp_tensor t;
  tpdp_device d = {TPDP_DEVICE_CUDA, dev};
  tpdp_tensor_init(&t, p, dt, d, 1, &n);
  return t;
}

enum {
  C_ALLREDUCE,
  C_ALLREDUCE_INPLACE,
  C_ALLGATHER,
  C_REDUCE_SCATTER,
  C_BROADCAST,
  C_ALLTOALL,
  C_ALLTOALL_INPLACE
};

static const char *tpdp_coll_name_for_check(int kind) {
  static const char *const names[] = {
      "allreduce",          "allreduce (in place)",
      "allgather",          "reduce_scatter",
      "broadcast",          "alltoall",
      "alltoall (in place)"};
  return names[kind];
}

/* One collective over every dtype (and every op where it reduces), in
 * blocking and async form. */
static int run_kind(int kind, char *msg, size_t len) {
  int rc = 1;
  tpdp_comm *c = NULL;
  void *d_send = NULL, *d_recv = NULL, *h_in = NULL, *h_out = NULL;
  TOK(tpdp_comm_create_nccl(NULL, 0, &c));
  int dev = tpdp_comm_cuda_device(c);
  h_in = malloc(N * 8);
  h_out = malloc(N * 8);
  if (!h_in || !h_out) FAILF("malloc");
  COK(cudaMalloc(&d_send, N * 8));
  COK(cudaMalloc(&d_recv, N * 8));
  for (int dt = 0; dt < TPDP_DTYPE_COUNT; dt++) {
    size_t es = tpdp_dtype_size((tpdp_dtype)dt);
    int nops = (kind == C_ALLREDUCE || kind == C_ALLREDUCE_INPLACE ||
                kind == C_REDUCE_SCATTER)
                   ? TPDP_OP_COUNT
                   : 1;
    for (int op = 0; op < nops; op++) {
      for (int async = 0; async < 2; async++) {
        fill_host(h_in, (tpdp_dtype)dt, N, 1);
        COK(cudaMemcpy(d_send, h_in, N * es, cudaMemcpyHostToDevice));
        COK(cudaMemset(d_recv, 0xEE, N * es));
        tpdp_tensor s = dev_view(d_send, (tpdp_dtype)dt, N, dev);
        tpdp_tensor r = dev_view(d_recv, (tpdp_dtype)dt, N, dev);
        int inplace = kind == C_ALLREDUCE_INPLACE || kind == C_ALLTOALL_INPLACE;
        tpdp_tensor *out = inplace ? &s : &r;
        tpdp_work *w = NULL;
        tpdp_reduce_op o = (tpdp_reduce_op)op;
        switch (kind) {
          case C_ALLREDUCE:
          case C_ALLREDUCE_INPLACE:
            if (async)
              TOK(tpdp_allreduce_async(c, &s, out, o, &w));
            else
              TOK(tpdp_allreduce(c, &s, out, o));
            break;
          case C_ALLGATHER:
            if (async)
              TOK(tpdp_allgather_async(c, &s, &r, &w));
            else
              TOK(tpdp_allgather(c, &s, &r));
            break;
          case C_REDUCE_SCATTER:
            if (async)
              TOK(tpdp_reduce_scatter_async(c, &s, &r, o, &w));
            else
              TOK(tpdp_reduce_scatter(c, &s, &r, o));
            break;
          case C_BROADCAST:
            if (async)
              TOK(tpdp_broadcast_async(c, &s, &r, 0, &w));
            else
              TOK(tpdp_broadcast(c, &s, &r, 0));
            break;
          case C_ALLTOALL:
          case C_ALLTOALL_INPLACE:
            if (async)
              TOK(tpdp_alltoall_async(c, &s, out, &w));
            else
              TOK(tpdp_alltoall(c, &s, out));
            break;
        }
        if (w) TOK(tpdp_work_wait(w));
        COK(cudaMemcpy(h_out, out->data, N * es, cudaMemcpyDeviceToHost));
        if (memcmp(h_in, h_out, N * es) != 0)
          FAILF("%s result differs from the input (dtype %s, op %s, %s)",
                tpdp_coll_name_for_check(kind), tpdp_dtype_name((tpdp_dtype)dt),
                tpdp_reduce_op_name(o), async ? "async" : "blocking");
      }
    }
  }
  rc = 0;
out:
  if (d_send) cudaFree(d_send);
  if (d_recv) cudaFree(d_recv);
  free(h_in);
  free(h_out);
  tpdp_comm_destroy(c);
  return rc;
}

static int check_allreduce(char *m, size_t l) {
  return run_kind(C_ALLREDUCE, m, l);
}
static int check_allreduce_inplace(char *m, size_t l) {
  return run_kind(C_ALLREDUCE_INPLACE, m, l);
}
static int check_allgather(char *m, size_t l) {
  return run_kind(C_ALLGATHER, m, l);
}
static int check_reduce_scatter(char *m, size_t l) {
  return run_kind(C_REDUCE_SCATTER, m, l);
}
static int check_broadcast(char *m, size_t l) {
  return run_kind(C_BROADCAST, m, l);
}
static int check_alltoall(char *m, size_t l) {
  return run_kind(C_ALLTOALL, m, l);
}
static int check_alltoall_inplace(char *m, size_t l) {
  return run_kind(C_ALLTOALL_INPLACE, m, l);
}

static int check_comm_basics(char *msg, size_t len) {
  int rc = 1;
  tpdp_comm *c = NULL, *sub = NULL, *none = (tpdp_comm *)1;
  TOK(tpdp_comm_create_nccl(NULL, -1, &c));
  if (tpdp_comm_size(c) != 1 || tpdp_comm_rank(c) != 0)
    FAILF("rank/size %d/%d, expected 0/1", tpdp_comm_rank(c),
          tpdp_comm_size(c));
  if (strcmp(tpdp_comm_backend(c), "nccl") != 0)
    FAILF("backend %s", tpdp_comm_backend(c));
  if (tpdp_comm_device_type(c) != TPDP_DEVICE_CUDA) FAILF("device type");
  if (tpdp_comm_nccl_stream(c) == NULL) FAILF("no stream");
  if (tpdp_comm_cuda_device(c) != 0)
    FAILF("device %d, expected 0", tpdp_comm_cuda_device(c));
  TOK(tpdp_barrier(c));
  tpdp_work *w = NULL;
  TOK(tpdp_barrier_async(c, &w));
  TOK(tpdp_work_wait(w));
  TOK(tpdp_comm_split(c, 0, 0, &sub));
  if (sub == NULL || tpdp_comm_size(sub) != 1)
    FAILF("split(0) did not give a 1-rank comm");
  TOK(tpdp_barrier(sub));
  TOK(tpdp_comm_split(c, -1, 0, &none));
  if (none != NULL) FAILF("split(-1) gave a communicator");
  /* A host tensor on an NCCL communicator is refused, naming both. */
  float x = 1;
  tpdp_tensor h = tpdp_tensor_1d(&x, TPDP_F32, 1);
  tpdp_status st = tpdp_allreduce(c, &h, &h, TPDP_OP_SUM);
  if (st != TPDP_ERR_DEVICE_MISMATCH ||
      strstr(tpdp_last_error(), "nccl") == NULL)
    FAILF("host tensor: %s: %s", tpdp_status_string(st), tpdp_last_error());
  tpdp_comm *bad = NULL;
  st = tpdp_comm_create_nccl(NULL, 4096, &bad);
  if (st != TPDP_ERR_INVALID_ARGUMENT ||
      strstr(tpdp_last_error(), "4096") == NULL)
    FAILF("device 4096: %s: %s", tpdp_status_string(st), tpdp_last_error());
  rc = 0;
out:
  tpdp_comm_destroy(sub);
  tpdp_comm_destroy(c);
  return rc;
}

/* Async: test drives to completion; wait_stream orders a user stream after
 * the collective with no host wait; order_after orders the collective after
 * a copy queued on a user stream. */
static int check_async_streams(char *msg, size_t len) {
  int rc = 1;
  tpdp_comm *c = NULL;
  cudaStream_t user = NULL;
  float *d = NULL, *d2 = NULL;
  float h[N], out[N];
  TOK(tpdp_comm_create_nccl(NULL, 0, &c));
  COK(cudaStreamCreateWithFlags(&user, cudaStreamNonBlocking));
  COK(cudaMalloc((void **)&d, N * sizeof(float)));
  COK(cudaMalloc((void **)&d2, N * sizeof(float)));
  for (int i = 0; i < N; i++) h[i] = (float)(i + 1);
  /* order_after: the input arrives on `user`; the allreduce must see it. */
  COK(cudaMemsetAsync(d, 0, N * sizeof(float), user));
  COK(cudaMemcpyAsync(d, h, N * sizeof(float), cudaMemcpyHostToDevice, user));
  TOK(tpdp_comm_order_after(c, user));
  tpdp_tensor t = dev_view(d, TPDP_F32, N, 0);
  tpdp_tensor t2 = dev_view(d2, TPDP_F32, N, 0);
  tpdp_work *w = NULL;
  TOK(tpdp_allreduce_async(c, &t, &t2, TPDP_OP_SUM, &w));
  int done = 0;
  for (long i = 0; i < 100000000L && !done; i++) {
    TOK(tpdp_work_test(w, &done));
  }
  if (!done) FAILF("tpdp_work_test never reported completion");
  TOK(tpdp_work_wait(w));
  COK(cudaMemcpy(out, d2, sizeof out, cudaMemcpyDeviceToHost));
  if (memcmp(out, h, sizeof h) != 0)
    FAILF("order_after: result %g != %g", out[0], h[0]);
  /* wait_stream: a copy on `user` after the collective sees its result. */
  COK(cudaMemset(d2, 0, N * sizeof(float)));
  COK(cudaDeviceSynchronize());
  TOK(tpdp_allreduce_async(c, &t, &t2, TPDP_OP_MAX, &w));
  TOK(tpdp_work_wait_stream(w, user));
  COK(cudaMemcpyAsync(out, d2, sizeof out, cudaMemcpyDeviceToHost, user));
  COK(cudaStreamSynchronize(user));
  if (memcmp(out, h, sizeof h) != 0)
    FAILF("wait_stream: result %g != %g", out[0], h[0]);
  rc = 0;
out:
  if (d) cudaFree(d);
  if (d2) cudaFree(d2);
  if (user) cudaStreamDestroy(user);
  tpdp_comm_destroy(c);
  return rc;
}

/* Timeout: the communicator's stream is held behind a host function that
 * blocks until released, so the allreduce cannot finish; with
 * TPDP_TIMEOUT_S=1 the wait must give up, abort, and name the operation
 * and the communicator. ncclCommAbort itself waits for the work already
 * queued on the stream (seen with NCCL 2.28 on an H100: releasing the
 * blocker only after the wait returned deadlocked), so a watchdog thread
 * releases it 4 s in, well after the 1 s timeout fired: as a peer that
 * never arrives is cut loose by the abort in real use. */
static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static volatile int release_blocker;
static void CUDART_CB block_until_released(void *arg) {
  (void)arg;
  while (!__atomic_load_n(&release_blocker, __ATOMIC_ACQUIRE)) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
}
static void *release_after_4s(void *arg) {
  (void)arg;
  for (int i = 0;
       i < 400 && !__atomic_load_n(&release_blocker, __ATOMIC_ACQUIRE); i++) {
    struct timespec ts = {0, 10000000};
    nanosleep(&ts, NULL);
  }
  __atomic_store_n(&release_blocker, 1, __ATOMIC_RELEASE);
  return NULL;
}

static int check_timeout(char *msg, size_t len) {
  int rc = 1;
  tpdp_comm *c = NULL;
  cudaStream_t blocker = NULL;
  float *d = NULL;
  pthread_t watchdog;
  int have_watchdog = 0;
  setenv("TPDP_TIMEOUT_S", "1", 1);
  tpdp_status cst = tpdp_comm_create_nccl(NULL, 0, &c);
  unsetenv("TPDP_TIMEOUT_S");
  TOK(cst);
  COK(cudaMalloc((void **)&d, 64 * sizeof(float)));
  COK(cudaStreamCreateWithFlags(&blocker, cudaStreamNonBlocking));
  __atomic_store_n(&release_blocker, 0, __ATOMIC_RELEASE);
  COK(cudaLaunchHostFunc(blocker, block_until_released, NULL));
  if (pthread_create(&watchdog, NULL, release_after_4s, NULL) != 0) {
    __atomic_store_n(&release_blocker, 1, __ATOMIC_RELEASE);
    FAILF("pthread_create failed");
  }
  have_watchdog = 1;
  double t0 = now_seconds();
  TOK(tpdp_comm_order_after(c, blocker));
  tpdp_tensor t = dev_view(d, TPDP_F32, 64, 0);
  tpdp_work *w = NULL;
  TOK(tpdp_allreduce_async(c, &t, &t, TPDP_OP_SUM, &w));
  tpdp_status st = tpdp_work_wait(w);
  double waited = now_seconds() - t0;
  __atomic_store_n(&release_blocker, 1, __ATOMIC_RELEASE);
  if (waited < 0.9)
    FAILF("the wait returned after %.2f s, before the 1 s timeout", waited);
  if (st != TPDP_ERR_TIMEOUT)
    FAILF("wait gave %s, expected TPDP_ERR_TIMEOUT: %s", tpdp_status_string(st),
          tpdp_last_error());
  if (!strstr(tpdp_last_error(), "allreduce") ||
      !strstr(tpdp_last_error(), "nccl") ||
      !strstr(tpdp_last_error(), "aborted"))
    FAILF("timeout message lacks the op/comm/abort: %s", tpdp_last_error());
  st = tpdp_allreduce(c, &t, &t, TPDP_OP_SUM);
  if (st != TPDP_ERR_STATE)
    FAILF("collective after abort gave %s: %s", tpdp_status_string(st),
          tpdp_last_error());
  rc = 0;
out:
  __atomic_store_n(&release_blocker, 1, __ATOMIC_RELEASE);
  if (have_watchdog) pthread_join(watchdog, NULL);
  if (blocker) {
    cudaStreamSynchronize(blocker);
    cudaStreamDestroy(blocker);
  }
  tpdp_comm_destroy(c);
  if (d) cudaFree(d);
  return rc;
}

/* tpdp_tensor_copy on device memory: a strided device view (every other
 * column of a 4x6 matrix) to a contiguous host view and back. */
static int check_tensor_copy(char *msg, size_t len) {
  int rc = 1;
  float *d = NULL;
  float h[24], col[12], back[24];
  for (int i = 0; i < 24; i++) h[i] = (float)i;
  COK(cudaMalloc((void **)&d, sizeof h));
  COK(cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice));
  tpdp_tensor src;
  int64_t shape[2] = {4, 3};
  tpdp_device gpu = {TPDP_DEVICE_CUDA, 0}, cpu = {TPDP_DEVICE_CPU, 0};
  TOK(tpdp_tensor_init(&src, d, TPDP_F32, gpu, 2, shape));
  src.strides[0] = 6;
  src.strides[1] = 2; /* columns 0, 2, 4 */
  tpdp_tensor dst;
  TOK(tpdp_tensor_init(&dst, col, TPDP_F32, cpu, 2, shape));
  TOK(tpdp_tensor_copy(&dst, &src));
  for (int r = 0; r < 4; r++)
    for (int k = 0; k < 3; k++)
      if (col[r * 3 + k] != (float)(r * 6 + 2 * k))
        FAILF("D2H strided copy [%d,%d] = %g, expected %d", r, k,
              col[r * 3 + k], r * 6 + 2 * k);
  for (int i = 0; i < 12; i++) col[i] = -1.0f;
  TOK(tpdp_tensor_copy(&src, &dst)); /* H2D into the strided view */
  COK(cudaMemcpy(back, d, sizeof back, cudaMemcpyDeviceToHost));
  for (int i = 0; i < 24; i++) {
    float want = (i % 2 == 0) ? -1.0f : (float)i;
    if (back[i] != want)
      FAILF("H2D strided copy [%d] = %g, expected %g", i, back[i], want);
  }
  rc = 0;
out:
  if (d) cudaFree(d);
  return rc;
}

const tpdp_gpu_check tpdp_gpu_checks[] = {
    {"comm_basics", check_comm_basics},
    {"allreduce", check_allreduce},
    {"allreduce_inplace", check_allreduce_inplace},
    {"allgather", check_allgather},
    {"reduce_scatter", check_reduce_scatter},
    {"broadcast", check_broadcast},
    {"alltoall", check_alltoall},
    {"alltoall_inplace", check_alltoall_inplace},
    {"async_streams", check_async_streams},
    {"tensor_copy", check_tensor_copy},
    /* tp/ and dp/ on device memory (device_checks.c) */
    {"redistribute_device", tpdp_gpu_check_redistribute},
    {"full_tensor_device", tpdp_gpu_check_full_tensor},
    {"reducer_device_view", tpdp_gpu_check_reducer_view},
    {"reducer_device_copy", tpdp_gpu_check_reducer_copy},
    {"reducer_device_bf16_view", tpdp_gpu_check_reducer_bf16_view},
    {"reducer_device_bf16_copy", tpdp_gpu_check_reducer_bf16_copy},
    {"reducer_device_f16_view", tpdp_gpu_check_reducer_f16_view},
    {"reducer_host_params_on_nccl", tpdp_gpu_check_reducer_host_params},
    {"fsdp_device_level1", tpdp_gpu_check_fsdp_level1},
    {"fsdp_device_level2", tpdp_gpu_check_fsdp_level2},
    {"fsdp_device_level3", tpdp_gpu_check_fsdp_level3},
    {"fsdp_host_params_on_nccl", tpdp_gpu_check_fsdp_host_params},
    /* last: it aborts its communicator */
    {"timeout", check_timeout},
};
const int tpdp_gpu_check_count =
    (int)(sizeof tpdp_gpu_checks / sizeof tpdp_gpu_checks[0]);
