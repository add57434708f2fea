// SPDX-License-Identifier: BSD-3-Clause
/* The NCCL backend: tpdp_comm over CUDA device memory (--config=cuda).
 *
 * Each communicator owns a non-blocking CUDA stream; collectives are queued
 * on it and a work handle records a CUDA event after them. Waiting on the
 * host polls that event together with ncclCommGetAsyncError, so a peer that
 * died or a network failure surfaces as an error rather than a hang, and
 * gives up after TPDP_TIMEOUT_S seconds by aborting the communicator.
 * Communicators are created non-blocking (config.blocking = 0), so every
 * NCCL call may answer ncclInProgress; settle() then polls until it is
 * done, under the same timeout.
 *
 * Bootstrap goes through the tpdp_comm interface of a host-memory
 * communicator (no MPI header here): host-local ranks by an allgather of
 * host names, the unique id by a broadcast from rank 0. With no bootstrap
 * communicator a single-rank communicator needs nothing else. */
#include <cuda_runtime.h>
#include <math.h>
#include <nccl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/backend.h"
#include "comm/watchdog.h"
#include "core/tensor_cuda.h"

typedef struct {
  ncclComm_t nccl;
  cudaStream_t stream;     /* this communicator's, non-blocking */
  cudaEvent_t order_event; /* tpdp_comm_order_after */
  float *scratch;          /* one device float for barrier */
  double timeout_s;
  int aborted;
} nccl_impl;

typedef struct {
  cudaEvent_t done;
  int completed;
  double queued_at;
} nccl_work_impl;

static const tpdp_comm_ops nccl_ops;

/* ---------------------------------------------------------- helpers */

/* Spin briefly, then sleep in short steps: a wait for a short collective
 * returns quickly without burning a core on long ones. */
static void pause_briefly(int iter) {
  if (iter < 64) {
    sched_yield();
    return;
  }
  struct timespec ts = {0, iter < 1024 ? 20000 : 200000};
  nanosleep(&ts, NULL);
}

/* TPDP_TIMEOUT_S as on the MPI backend (comm/watchdog.h): 0 or negative
 * is no bound. */
static double timeout_from_env(void) {
  double t = comm_timeout_read();
  return t > 0 ? t : INFINITY;
}

static tpdp_status nccl_fail(ncclResult_t rc, ncclComm_t h, const char *call,
                             const char *name, int rank) {
  const char *detail = ncclGetLastError(h);
  return TPDP_ERR(TPDP_ERR_NCCL, "%s failed on %s (rank %d): %s%s%s", call,
                  name, rank, ncclGetErrorString(rc),
                  detail && *detail ? ": " : "", detail ? detail : "");
}

/* ncclCommAbort of `h` (NULL: nothing to abort). A non-blocking
 * communicator may answer ncclInProgress: the abort goes on in NCCL. */
static tpdp_status abort_handle(ncclComm_t h, const char *name, int rank) {
  if (h == NULL) return TPDP_SUCCESS;
  ncclResult_t rc = ncclCommAbort(h);
  if (rc == ncclSuccess || rc == ncclInProgress) return TPDP_SUCCESS;
  return nccl_fail(rc, NULL, "ncclCommAbort", name, rank);
}

/* Turn the answer of an NCCL call on non-blocking communicator `h` into a
 * status, polling while it is in progress. *timed_out is set when the
 * deadline passed (the caller then aborts `h`). */
static tpdp_status settle(ncclComm_t h, ncclResult_t rc, const char *call,
                          const char *name, int rank, double timeout_s,
                          int *timed_out) {
  *timed_out = 0;
  /* Poll after ncclSuccess too: a non-blocking group end may return
   * ncclSuccess with the communicator's state still ncclInProgress
   * (NVIDIA/nccl #1734), and NCCL refuses the next call on it until that
   * state clears ("Attempt to use communicator before the previous
   * operation returned ncclSuccess"). One query when it is already done. */
  if ((rc == ncclInProgress || rc == ncclSuccess) && h != NULL) {
    double t0 = core_now_s();
    for (int iter = 0;; iter++) {
      ncclResult_t state = ncclSuccess;
      ncclResult_t q = ncclCommGetAsyncError(h, &state);
      if (q != ncclSuccess)
        return nccl_fail(q, h, "ncclCommGetAsyncError", name, rank);
      if (state != ncclInProgress) {
        rc = state;
        break;
      }
      if (core_now_s() - t0 > timeout_s) {
        *timed_out = 1;
        return TPDP_ERR(TPDP_ERR_TIMEOUT,
                        "%s on %s (rank %d) still in progress after %.0f s "
                        "(TPDP_TIMEOUT_S); communicator aborted",
                        call, name, rank, timeout_s);
      }
      pause_briefly(iter);
    }
  }
  if (rc != ncclSuccess) return nccl_fail(rc, h, call, name, rank);
  return TPDP_SUCCESS;
}

/* Abort comm's NCCL communicator after `st`, the failure that calls for
 * it; returns st (the abort's own failure is logged). */
static tpdp_status abort_comm(tpdp_comm *comm, tpdp_status st) {
  nccl_impl *impl = (nccl_impl *)comm->impl;
  if (impl->aborted || impl->nccl == NULL) return st;
  core_first_error f;
  core_first_error_init(&f);
  core_first_error_add(&f, st);
  core_first_error_add(&f, abort_handle(impl->nccl, comm->name, comm->rank));
  impl->nccl = NULL;
  impl->aborted = 1;
  TPDP_WARN("NCCL communicator %s (rank %d) aborted", comm->name, comm->rank);
  return f.status;
}

/* Settle a call on comm's communicator, aborting it on timeout. */
static tpdp_status settle_comm(tpdp_comm *comm, ncclResult_t rc,
                               const char *call) {
  nccl_impl *impl = (nccl_impl *)comm->impl;
  int timed_out = 0;
  tpdp_status st = settle(impl->nccl, rc, call, comm->name, comm->rank,
                          impl->timeout_s, &timed_out);
  return timed_out ? abort_comm(comm, st) : st;
}

static tpdp_status aborted_error(const tpdp_comm *comm, const char *what) {
  return TPDP_ERR(TPDP_ERR_STATE,
                  "%s on %s (rank %d): the communicator was aborted "
                  "after an earlier failure or timeout; destroy it",
                  what, comm->name, comm->rank);
}

/* comm.c has checked the dtype and the op. */
static ncclDataType_t nccl_dtype(tpdp_dtype d) {
  static const ncclDataType_t types[TPDP_DTYPE_COUNT] = {
      [TPDP_F32] = ncclFloat32, [TPDP_F64] = ncclFloat64,
      [TPDP_F16] = ncclFloat16, [TPDP_BF16] = ncclBfloat16,
      [TPDP_I32] = ncclInt32,   [TPDP_I64] = ncclInt64,
      [TPDP_U8] = ncclUint8};
  return (int)d >= 0 && d < TPDP_DTYPE_COUNT ? types[d] : ncclUint8;
}

static ncclRedOp_t nccl_op(tpdp_reduce_op op) {
  static const ncclRedOp_t ops[TPDP_OP_COUNT] = {[TPDP_OP_SUM] = ncclSum,
                                                 [TPDP_OP_AVG] = ncclAvg,
                                                 [TPDP_OP_MAX] = ncclMax,
                                                 [TPDP_OP_MIN] = ncclMin};
  return (int)op >= 0 && op < TPDP_OP_COUNT ? ops[op] : ncclSum;
}

/* ---------------------------------------------------------- life cycle */

/* Abort `nc` and free what wrap_comm made of `impl` (may be NULL) after
 * `st`, the failure that stopped it: returns st with its message. */
static tpdp_status release_after(ncclComm_t nc, nccl_impl *impl,
                                 const char *name, int rank, tpdp_status st) {
  core_first_error f;
  core_first_error_init(&f);
  core_first_error_add(&f, st);
  core_first_error_add(&f, abort_handle(nc, name, rank));
  if (impl == NULL) return f.status;
  if (impl->scratch)
    core_first_error_add(&f,
                         core_cuda_status(cudaFree(impl->scratch), "cudaFree"));
  if (impl->order_event)
    core_first_error_add(&f,
                         core_cuda_status(cudaEventDestroy(impl->order_event),
                                          "cudaEventDestroy"));
  if (impl->stream)
    core_first_error_add(&f, core_cuda_status(cudaStreamDestroy(impl->stream),
                                              "cudaStreamDestroy"));
  free(impl);
  return f.status;
}

/* Wrap a ready NCCL communicator: stream, event, scratch. Takes ownership
 * of `nc` (aborted on failure). */
static tpdp_status wrap_comm(ncclComm_t nc, int device, const char *name,
                             double timeout_s, tpdp_comm **out) {
  tpdp_status st = TPDP_SUCCESS;
  nccl_impl *impl = NULL;
  tpdp_comm *c = NULL;
  int rank = 0, size = 0;
  ncclResult_t rc = ncclCommUserRank(nc, &rank);
  if (rc == ncclSuccess) rc = ncclCommCount(nc, &size);
  if (rc != ncclSuccess) {
    st = nccl_fail(rc, nc, "ncclCommUserRank/ncclCommCount", name, -1);
    goto fail;
  }
  CHECK_GOTO(TPDP_CALLOC(impl, 1), st, fail);
  impl->nccl = nc;
  impl->timeout_s = timeout_s;
  CHECK_GOTO(core_cuda_status(cudaStreamCreateWithFlags(&impl->stream,
                                                        cudaStreamNonBlocking),
                              "cudaStreamCreateWithFlags"),
             st, fail);
  CHECK_GOTO(core_cuda_status(cudaEventCreateWithFlags(&impl->order_event,
                                                       cudaEventDisableTiming),
                              "cudaEventCreateWithFlags"),
             st, fail);
  CHECK_GOTO(
      core_cuda_status(cudaMalloc((void **)&impl->scratch, sizeof(float)),
                       "cudaMalloc"),
      st, fail);
  CHECK_GOTO(core_cuda_status(cudaMemset(impl->scratch, 0, sizeof(float)),
                              "cudaMemset"),
             st, fail);
  CHECK_GOTO(comm_alloc(&nccl_ops, rank, size, name, &c), st, fail);
  c->device_index = device;
  c->impl = impl;
  *out = c;
  TPDP_INFO("NCCL communicator %s: rank %d of %d on cuda:%d", name, rank, size,
            device);
  return TPDP_SUCCESS;
fail:
  return release_after(nc, impl, name, rank, st);
}

int tpdp_nccl_available(void) { return 1; }

tpdp_status tpdp_cuda_device_count(int *count) {
  TPDP_API_ENTRY;
  CHECK_PTR(count);
  *count = 0;
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess)
    return TPDP_ERR(TPDP_ERR_CUDA,
                    "cudaGetDeviceCount failed: %s (%s): no usable GPU or "
                    "driver",
                    cudaGetErrorString(e), cudaGetErrorName(e));
  *count = n;
  return TPDP_SUCCESS;
}

/* This rank's CUDA setup before the collective part of the bootstrap. */
static tpdp_status pick_device(int device, int local_rank, int local_size,
                               int *chosen) {
  int ndev = 0;
  CHECK(tpdp_cuda_device_count(&ndev));
  if (ndev == 0)
    return TPDP_ERR(TPDP_ERR_CUDA, "cudaGetDeviceCount found no CUDA device");
  if (device == -1) {
    /* NCCL refuses two ranks of one communicator on one GPU ("Duplicate
     * GPU detected"); say so before its initialisation, on every rank
     * alike (they all see the same counts), instead of after a wait. */
    if (local_size > ndev)
      return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                      "%d ranks on this host but %d visible GPU%s: NCCL "
                      "needs one GPU per rank (local rank %d); launch at "
                      "most %d rank%s per host or use the MPI backend",
                      local_size, ndev, ndev == 1 ? "" : "s", local_rank, ndev,
                      ndev == 1 ? "" : "s");
    device = local_rank;
  } else if (device < 0 || device >= ndev) {
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "device %d outside [0, %d) (-1 picks from the local rank)",
                    device, ndev);
  }
  TPDP_CUDA_CHECK(cudaSetDevice(device));
  *chosen = device;
  return TPDP_SUCCESS;
}

tpdp_status tpdp_comm_create_nccl(tpdp_comm *bootstrap, int device,
                                  tpdp_comm **out) {
  TPDP_API_ENTRY;
  CHECK_PTR(out);
  *out = NULL;
  if (bootstrap != NULL && bootstrap->ops->device_type != TPDP_DEVICE_CPU)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "bootstrap communicator %s is a %s one; pass a "
                    "host-memory communicator (e.g. the world) or NULL",
                    bootstrap->name, bootstrap->ops->backend);
  int rank = bootstrap ? bootstrap->rank : 0;
  int size = bootstrap ? bootstrap->size : 1;
  char name[96];
  if (bootstrap)
    snprintf(name, sizeof name, "nccl(%.80s)", bootstrap->name);
  else
    snprintf(name, sizeof name, "nccl");
  double timeout_s = timeout_from_env();

  int local_rank = 0, local_size = 1;
  CHECK(tpdp_comm_local_rank(bootstrap, &local_rank, &local_size));

  /* Local CUDA setup may fail on some ranks only; keep taking part in the
   * collective steps below so that the others do not hang, and agree on
   * the outcome before NCCL's own (blocking on peers) initialisation. */
  int chosen = -1;
  tpdp_status local_st = pick_device(device, local_rank, local_size, &chosen);
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  if (rank == 0 && local_st == TPDP_SUCCESS) {
    ncclResult_t rc = ncclGetUniqueId(&id);
    if (rc != ncclSuccess)
      local_st = nccl_fail(rc, NULL, "ncclGetUniqueId", name, rank);
  }
  if (bootstrap != NULL) {
    /* Rank 0's failure to make the id is its local_st too: the agreement
     * gives every rank the first failing rank's error. */
    tpdp_tensor b = tpdp_tensor_1d(&id, TPDP_U8, (int64_t)sizeof id);
    CHECK(tpdp_broadcast(bootstrap, &b, &b, 0));
    CHECK(tpdp_comm_agree(bootstrap, local_st, NULL));
  } else if (local_st != TPDP_SUCCESS) {
    return local_st;
  }

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t nc = NULL;
  ncclResult_t rc = ncclCommInitRankConfig(&nc, size, id, rank, &config);
  int timed_out = 0;
  tpdp_status st = settle(nc, rc, "ncclCommInitRankConfig", name, rank,
                          timeout_s, &timed_out);
  if (st != TPDP_SUCCESS) {
    core_first_error f;
    core_first_error_init(&f);
    core_first_error_add(&f, st);
    core_first_error_add(&f, abort_handle(nc, name, rank));
    return f.status;
  }
  return wrap_comm(nc, chosen, name, timeout_s, out);
}

void *tpdp_comm_nccl_stream(const tpdp_comm *comm) {
  if (comm == NULL || comm->ops != &nccl_ops || comm->impl == NULL) return NULL;
  return (void *)((const nccl_impl *)comm->impl)->stream;
}

int tpdp_comm_cuda_device(const tpdp_comm *comm) {
  if (comm == NULL || comm->ops != &nccl_ops) return -1;
  return comm->device_index;
}

static tpdp_status nccl_destroy(tpdp_comm *comm) {
  nccl_impl *impl = (nccl_impl *)comm->impl;
  /* Everything is released whatever fails; the first failure is
   * reported. */
  core_first_error f;
  core_first_error_init(&f);
  core_cuda_device_guard g;
  tpdp_status gst = core_cuda_guard_enter(&g, comm->device_index);
  core_first_error_add(&f, gst);
  if (!impl->aborted && impl->nccl != NULL) {
    /* Finalize flushes outstanding operations (non-blocking: poll). */
    core_first_error_add(&f, settle_comm(comm, ncclCommFinalize(impl->nccl),
                                         "ncclCommFinalize"));
    /* A timed-out finalize has aborted (and so freed) the communicator. */
    if (!impl->aborted) {
      ncclResult_t rc = ncclCommDestroy(impl->nccl);
      if (rc != ncclSuccess)
        core_first_error_add(
            &f, nccl_fail(rc, NULL, "ncclCommDestroy", comm->name, comm->rank));
    }
  }
  core_first_error_add(&f,
                       core_cuda_status(cudaFree(impl->scratch), "cudaFree"));
  core_first_error_add(&f, core_cuda_status(cudaEventDestroy(impl->order_event),
                                            "cudaEventDestroy"));
  core_first_error_add(&f, core_cuda_status(cudaStreamDestroy(impl->stream),
                                            "cudaStreamDestroy"));
  if (gst == TPDP_SUCCESS) core_first_error_add(&f, core_cuda_guard_exit(&g));
  free(impl);
  comm->impl = NULL;
  return f.status;
}

static tpdp_status nccl_split(tpdp_comm *comm, int color, int key,
                              tpdp_comm **out) {
  nccl_impl *impl = (nccl_impl *)comm->impl;
  if (impl->aborted) return aborted_error(comm, "split");
  core_cuda_device_guard g;
  CHECK(core_cuda_guard_enter(&g, comm->device_index));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t nc = NULL;
  ncclResult_t rc = ncclCommSplit(
      impl->nccl, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &nc, &config);
  char name[96];
  snprintf(name, sizeof name, "%.60s/split(%d)", comm->name, color);
  int timed_out = 0;
  /* A non-blocking split is an operation of the parent: NCCL fills in the
   * new handle only once the parent leaves ncclInProgress (NVIDIA/nccl
   * #1472), so poll the parent first, then the new communicator (if this
   * rank joined one) until it is ready: its rank count reads 0 before. */
  tpdp_status st = settle(impl->nccl, rc, "ncclCommSplit", name, comm->rank,
                          impl->timeout_s, &timed_out);
  int child_timed_out = 0;
  if (st == TPDP_SUCCESS && nc != NULL)
    st = settle(nc, ncclSuccess, "ncclCommSplit (new communicator)", name,
                comm->rank, impl->timeout_s, &child_timed_out);
  if (st != TPDP_SUCCESS) {
    core_first_error f;
    core_first_error_init(&f);
    core_first_error_add(&f, st);
    core_first_error_add(&f, abort_handle(nc, name, comm->rank));
    st = timed_out ? abort_comm(comm, f.status) : f.status;
  } else if (nc == NULL) {
    *out = NULL;
  } else {
    st = wrap_comm(nc, comm->device_index, name, impl->timeout_s, out);
  }
  return core_cuda_guard_leave(&g, st);
}

static tpdp_status nccl_order_after(tpdp_comm *comm, void *stream) {
  nccl_impl *impl = (nccl_impl *)comm->impl;
  if (impl->aborted) return aborted_error(comm, "order_after");
  core_cuda_device_guard g;
  CHECK(core_cuda_guard_enter(&g, comm->device_index));
  tpdp_status st =
      core_cuda_status(cudaEventRecord(impl->order_event, (cudaStream_t)stream),
                       "cudaEventRecord");
  if (st == TPDP_SUCCESS)
    st = core_cuda_status(
        cudaStreamWaitEvent(impl->stream, impl->order_event, 0),
        "cudaStreamWaitEvent");
  return core_cuda_guard_leave(&g, st);
}

/* ---------------------------------------------------------- work */

/* An asynchronous NCCL error: abort and report it. */
static tpdp_status poll_async(tpdp_work *work) {
  tpdp_comm *comm = work->comm;
  nccl_impl *impl = (nccl_impl *)comm->impl;
  if (impl->aborted) return aborted_error(comm, comm_coll_name(work->kind));
  ncclResult_t state = ncclSuccess;
  ncclResult_t q = ncclCommGetAsyncError(impl->nccl, &state);
  if (q != ncclSuccess)
    return nccl_fail(q, impl->nccl, "ncclCommGetAsyncError", comm->name,
                     comm->rank);
  if (state != ncclSuccess && state != ncclInProgress)
    return abort_comm(comm,
                      nccl_fail(state, impl->nccl, comm_coll_name(work->kind),
                                comm->name, comm->rank));
  return TPDP_SUCCESS;
}

static tpdp_status nccl_work_test(tpdp_work *work, int *done) {
  nccl_work_impl *w = (nccl_work_impl *)work->impl;
  if (w->completed) {
    *done = 1;
    return TPDP_SUCCESS;
  }
  *done = 0;
  cudaError_t e = cudaEventQuery(w->done);
  if (e == cudaSuccess) {
    w->completed = 1;
    *done = 1;
    return TPDP_SUCCESS;
  }
  if (e != cudaErrorNotReady)
    return TPDP_ERR(TPDP_ERR_CUDA,
                    "cudaEventQuery failed for %s on %s (rank %d): %s",
                    comm_coll_name(work->kind), work->comm->name,
                    work->comm->rank, cudaGetErrorString(e));
  return poll_async(work);
}

static tpdp_status nccl_work_wait(tpdp_work *work) {
  nccl_work_impl *w = (nccl_work_impl *)work->impl;
  tpdp_comm *comm = work->comm;
  nccl_impl *impl = (nccl_impl *)comm->impl;
  for (int iter = 0;; iter++) {
    int done = 0;
    CHECK(nccl_work_test(work, &done));
    if (done) return TPDP_SUCCESS;
    double waited = core_now_s() - w->queued_at;
    if (waited > impl->timeout_s)
      return abort_comm(
          comm, TPDP_ERR(TPDP_ERR_TIMEOUT,
                         "%s on %s (rank %d of %d) did not complete within "
                         "%.0f s (TPDP_TIMEOUT_S); communicator aborted",
                         comm_coll_name(work->kind), comm->name, comm->rank,
                         comm->size, impl->timeout_s));
    pause_briefly(iter);
  }
}

static tpdp_status nccl_work_wait_stream(tpdp_work *work, void *stream) {
  nccl_work_impl *w = (nccl_work_impl *)work->impl;
  if (!w->completed) CHECK(poll_async(work));
  core_cuda_device_guard g;
  CHECK(core_cuda_guard_enter(&g, work->comm->device_index));
  tpdp_status st =
      core_cuda_status(cudaStreamWaitEvent((cudaStream_t)stream, w->done, 0),
                       "cudaStreamWaitEvent");
  return core_cuda_guard_leave(&g, st);
}

static tpdp_status nccl_work_release(tpdp_work *work) {
  nccl_work_impl *w = (nccl_work_impl *)work->impl;
  /* Safe even if the event is still pending: CUDA releases it once it
   * completes. */
  tpdp_status st =
      core_cuda_status(cudaEventDestroy(w->done), "cudaEventDestroy");
  free(w);
  work->impl = NULL;
  return st;
}

static const tpdp_work_ops nccl_work_ops = {
    .wait = nccl_work_wait,
    .test = nccl_work_test,
    .wait_stream = nccl_work_wait_stream,
    .release = nccl_work_release,
};

/* ---------------------------------------------------------- collectives */

/* alltoall of rn elements of dt as grouped ncclSend/ncclRecv on nc and s,
 * one pair per peer (enqueue's case). */
static tpdp_status enqueue_alltoall(tpdp_comm *comm, ncclComm_t nc,
                                    cudaStream_t s, const tpdp_tensor *send,
                                    tpdp_tensor *recv, ncclDataType_t dt,
                                    size_t rn) {
  size_t es = tpdp_dtype_size(recv->dtype);
  if (rn == 0) return TPDP_SUCCESS;
  size_t block = rn / (size_t)comm->size;
  const char *sb = (const char *)send->data;
  void *tmp = NULL;
  tpdp_status st = TPDP_SUCCESS;
  if (send->data == recv->data) {
    /* In place: NCCL's send/recv would overwrite blocks still to be sent;
     * send from a stream-ordered copy freed after the group. */
    CHECK(
        core_cuda_status(cudaMallocAsync(&tmp, rn * es, s), "cudaMallocAsync"));
    st = core_cuda_status(
        cudaMemcpyAsync(tmp, send->data, rn * es, cudaMemcpyDeviceToDevice, s),
        "cudaMemcpyAsync");
    if (st != TPDP_SUCCESS) goto done;
    sb = (const char *)tmp;
  }
  ncclResult_t first = ncclSuccess;
  const char *first_call = "ncclGroupStart";
  ncclResult_t rc = ncclGroupStart();
  if (rc != ncclSuccess && rc != ncclInProgress) {
    first = rc;
  } else {
    for (int p = 0; p < comm->size; p++) {
      rc = ncclSend(sb + (size_t)p * block * es, block, dt, p, nc, s);
      if (rc != ncclSuccess && rc != ncclInProgress && first == ncclSuccess) {
        first = rc;
        first_call = "ncclSend";
      }
      rc = ncclRecv((char *)recv->data + (size_t)p * block * es, block, dt, p,
                    nc, s);
      if (rc != ncclSuccess && rc != ncclInProgress && first == ncclSuccess) {
        first = rc;
        first_call = "ncclRecv";
      }
    }
    rc = ncclGroupEnd();
  }
  st = first != ncclSuccess
           ? nccl_fail(first, nc, first_call, comm->name, comm->rank)
           : settle_comm(comm, rc, "ncclGroupEnd");
done:
  if (tmp != NULL) {
    core_first_error f;
    core_first_error_init(&f);
    core_first_error_add(&f, st);
    core_first_error_add(
        &f, core_cuda_status(cudaFreeAsync(tmp, s), "cudaFreeAsync"));
    st = f.status;
  }
  return st;
}

static tpdp_status enqueue(tpdp_comm *comm, const tpdp_coll_args *a) {
  nccl_impl *impl = (nccl_impl *)comm->impl;
  ncclComm_t nc = impl->nccl;
  cudaStream_t s = impl->stream;
  const tpdp_tensor *send = a->send;
  tpdp_tensor *recv = a->recv;
  ncclDataType_t dt = recv ? nccl_dtype(recv->dtype) : ncclFloat32;
  size_t rn = recv ? (size_t)tpdp_tensor_numel(recv) : 0;
  size_t sn = send ? (size_t)tpdp_tensor_numel(send) : 0;
  switch (a->kind) {
    case TPDP_COLL_ALLREDUCE:
      return settle_comm(
          comm,
          ncclAllReduce(send->data, recv->data, rn, dt, nccl_op(a->op), nc, s),
          "ncclAllReduce");
    case TPDP_COLL_ALLGATHER:
      return settle_comm(comm,
                         ncclAllGather(send->data, recv->data, sn, dt, nc, s),
                         "ncclAllGather");
    case TPDP_COLL_REDUCE_SCATTER:
      return settle_comm(comm,
                         ncclReduceScatter(send->data, recv->data, rn, dt,
                                           nccl_op(a->op), nc, s),
                         "ncclReduceScatter");
    case TPDP_COLL_BROADCAST: {
      /* Off the root NCCL ignores sendbuff; on it NULL send is in place. */
      const void *sb =
          (send != NULL && comm->rank == a->root) ? send->data : recv->data;
      return settle_comm(comm,
                         ncclBroadcast(sb, recv->data, rn, dt, a->root, nc, s),
                         "ncclBroadcast");
    }
    case TPDP_COLL_ALLTOALL:
      return enqueue_alltoall(comm, nc, s, send, recv, dt, rn);
    case TPDP_COLL_BARRIER:
      break;
  }
  /* TPDP_COLL_BARRIER: a one-element allreduce. */
  return settle_comm(comm,
                     ncclAllReduce(impl->scratch, impl->scratch, 1, ncclFloat32,
                                   ncclSum, nc, s),
                     "ncclAllReduce (barrier)");
}

/* Free a work handle that could not be queued (and restore the device)
 * after `st`, the failure: returns st with its message. */
static tpdp_status work_free_after(tpdp_work *work, nccl_work_impl *w,
                                   core_cuda_device_guard *g, tpdp_status st) {
  core_first_error f;
  core_first_error_init(&f);
  core_first_error_add(&f, st);
  if (w != NULL && w->done != NULL)
    core_first_error_add(
        &f, core_cuda_status(cudaEventDestroy(w->done), "cudaEventDestroy"));
  free(w);
  free(work);
  return core_cuda_guard_leave(g, f.status);
}

static tpdp_status nccl_collective(tpdp_comm *comm, const tpdp_coll_args *a,
                                   tpdp_work **out) {
  nccl_impl *impl = (nccl_impl *)comm->impl;
  if (impl->aborted) return aborted_error(comm, comm_coll_name(a->kind));
  core_cuda_device_guard g;
  CHECK(core_cuda_guard_enter(&g, comm->device_index));
  tpdp_status st = TPDP_SUCCESS;
  tpdp_work *work = NULL;
  nccl_work_impl *w = NULL;
  CHECK_GOTO(TPDP_CALLOC(work, 1), st, fail);
  CHECK_GOTO(TPDP_CALLOC(w, 1), st, fail);
  CHECK_GOTO(core_cuda_status(
                 cudaEventCreateWithFlags(&w->done, cudaEventDisableTiming),
                 "cudaEventCreateWithFlags"),
             st, fail);
  work->comm = comm;
  work->kind = a->kind;
  work->impl = w;
  work->ops = &nccl_work_ops;
  w->queued_at = core_now_s();
  CHECK_GOTO(enqueue(comm, a), st, fail);
  CHECK_GOTO(core_cuda_status(cudaEventRecord(w->done, impl->stream),
                              "cudaEventRecord"),
             st, fail);
  CHECK_GOTO(core_cuda_guard_exit(&g), st, fail);
  *out = work;
  return TPDP_SUCCESS;
fail:
  return work_free_after(work, w, &g, st);
}

static const tpdp_comm_ops nccl_ops = {
    .backend = "nccl",
    .device_type = TPDP_DEVICE_CUDA,
    .collective = nccl_collective,
    .split = nccl_split,
    .destroy = nccl_destroy,
    .order_after = nccl_order_after,
};
