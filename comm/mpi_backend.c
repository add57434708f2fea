// SPDX-License-Identifier: BSD-3-Clause
/* The MPI backend: tpdp_comm over host memory with Open MPI. This file
 * holds its life cycle (init, finalize, the world, split), its work
 * handles and the dispatch of each collective; the algorithms of its own
 * live beside it (comm/mpi_internal.h lists the files).
 *
 * Asynchronous calls use MPI's non-blocking collectives; calls the front end
 * marks blocking use the blocking ones, which Open MPI tunes better. f16 and
 * bf16 travel as 16-bit integers and are reduced by user-defined ops that
 * compute in f32 and round once per combine, as NCCL does. AVG is SUM
 * followed by a division when the work completes, except for blocking AVG
 * of large f32/f64 messages, which run as a ring over MPI_Sendrecv that
 * divides inside its last add (comm/mpi_ring_avg.c). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/mpi_internal.h"
#include "core/half.h"

/* A work handle and its MPI state in one allocation; `work` comes first so
 * that free(work) releases the block. */
typedef struct {
  tpdp_work work;
  mpi_work_impl impl;
} mpi_work_block;

/* user-defined ops for 16-bit floats: [dtype f16=0 bf16=1][op sum max min] */
static MPI_Op half_ops[2][3];
/* The thread support MPI was initialised with (MPI_Query_thread). */
static int thread_level = MPI_THREAD_SINGLE;
static int half_ops_ready;

void comm_mpi_error_text(int code, char *msg) {
  int len = 0;
  if (MPI_Error_string(code, msg, &len) != MPI_SUCCESS)
    snprintf(msg, MPI_MAX_ERROR_STRING, "MPI error %d", code);
}

tpdp_status comm_mpi_status(int code, const char *call, const tpdp_comm *c) {
  if (code == MPI_SUCCESS) return TPDP_SUCCESS;
  char msg[MPI_MAX_ERROR_STRING];
  comm_mpi_error_text(code, msg);
  return TPDP_ERR(TPDP_ERR_MPI, "%s failed on %s (rank %d): %s", call,
                  c ? c->name : "MPI_COMM_WORLD", c ? c->rank : -1, msg);
}

/* ---------------------------------------------------------- half ops */

#define HALF_OP(name, to_f, from_f, expr)                               \
  static void name(void *in, void *inout, int *len, MPI_Datatype *dt) { \
    (void)dt;                                                           \
    const uint16_t *a = (const uint16_t *)in;                           \
    uint16_t *b = (uint16_t *)inout;                                    \
    for (int i = 0; i < *len; i++) {                                    \
      float x = to_f(a[i]), y = to_f(b[i]);                             \
      b[i] = from_f(expr);                                              \
    }                                                                   \
  }
HALF_OP(f16_sum, tpdp_f16_to_f32, tpdp_f32_to_f16, x + y)
HALF_OP(f16_max, tpdp_f16_to_f32, tpdp_f32_to_f16, x > y ? x : y)
HALF_OP(f16_min, tpdp_f16_to_f32, tpdp_f32_to_f16, x < y ? x : y)
HALF_OP(bf16_sum, core_bf16_to_f32, core_f32_to_bf16, x + y)
HALF_OP(bf16_max, core_bf16_to_f32, core_f32_to_bf16, x > y ? x : y)
HALF_OP(bf16_min, core_bf16_to_f32, core_f32_to_bf16, x < y ? x : y)

static tpdp_status create_half_ops(void) {
  MPI_User_function *fns[2][3] = {{f16_sum, f16_max, f16_min},
                                  {bf16_sum, bf16_max, bf16_min}};
  for (int d = 0; d < 2; d++)
    for (int o = 0; o < 3; o++)
      MPI_CHECK(NULL, MPI_Op_create, fns[d][o], 1, &half_ops[d][o]);
  half_ops_ready = 1;
  return TPDP_SUCCESS;
}

/* Halves are reduced by the ops of create_half_ops. */
MPI_Datatype comm_mpi_dtype(tpdp_dtype dtype) {
  static const MPI_Datatype types[TPDP_DTYPE_COUNT] = {
      [TPDP_F32] = MPI_FLOAT,    [TPDP_F64] = MPI_DOUBLE,
      [TPDP_F16] = MPI_UINT16_T, [TPDP_BF16] = MPI_UINT16_T,
      [TPDP_I32] = MPI_INT32_T,  [TPDP_I64] = MPI_INT64_T,
      [TPDP_U8] = MPI_UINT8_T};
  return (int)dtype >= 0 && dtype < TPDP_DTYPE_COUNT ? types[dtype]
                                                     : MPI_DATATYPE_NULL;
}

static MPI_Op mpi_op(tpdp_reduce_op op, tpdp_dtype dtype) {
  int idx = op == TPDP_OP_MAX ? 1 : op == TPDP_OP_MIN ? 2 : 0;
  if (dtype == TPDP_F16) return half_ops[0][idx];
  if (dtype == TPDP_BF16) return half_ops[1][idx];
  return idx == 1 ? MPI_MAX : idx == 2 ? MPI_MIN : MPI_SUM;
}

/* ---------------------------------------------------------- life cycle */

static const tpdp_comm_ops mpi_ops;

tpdp_status comm_mpi_backend_init(int *argc, char ***argv,
                                  int *we_initialized) {
  int flag = 0, finalized = 0;
  *we_initialized = 0;
  MPI_CHECK(NULL, MPI_Finalized, &finalized);
  if (finalized)
    return TPDP_ERR(TPDP_ERR_STATE,
                    "MPI has already been finalized; MPI (and so tpdp) "
                    "cannot be initialised again in this process");
  MPI_CHECK(NULL, MPI_Initialized, &flag);
  if (!flag) {
    int provided = 0;
    /* MULTIPLE lets the reducer's communication thread run a bucket's
     * allreduce while the caller's thread runs TP collectives. */
    MPI_CHECK(NULL, MPI_Init_thread, argc, argv, MPI_THREAD_MULTIPLE,
              &provided);
    *we_initialized = 1;
  }
  MPI_CHECK(NULL, MPI_Query_thread, &thread_level);
  /* Errors come back as codes so tpdp can report them, never abort. */
  MPI_CHECK(NULL, MPI_Comm_set_errhandler, MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  if (!half_ops_ready) CHECK(create_half_ops());
  comm_mpi_ring_avg_configure();
  return comm_mpi_watchdog_start(thread_level);
}

tpdp_status comm_mpi_backend_finalize(int we_initialized) {
  core_first_error f;
  core_first_error_init(&f);
  core_first_error_add(&f, comm_mpi_watchdog_stop());
  if (half_ops_ready) {
    for (int d = 0; d < 2; d++)
      for (int o = 0; o < 3; o++)
        core_first_error_add(&f, comm_mpi_status(MPI_Op_free(&half_ops[d][o]),
                                                 "MPI_Op_free", NULL));
    half_ops_ready = 0;
  }
  int finalized = 0;
  tpdp_status st =
      comm_mpi_status(MPI_Finalized(&finalized), "MPI_Finalized", NULL);
  core_first_error_add(&f, st);
  if (st == TPDP_SUCCESS && we_initialized && !finalized)
    core_first_error_add(&f,
                         comm_mpi_status(MPI_Finalize(), "MPI_Finalize", NULL));
  return f.status;
}

/* The world rank of each rank of mc (size entries) into *out. */
static tpdp_status world_ranks_of(MPI_Comm mc, int size, int **out) {
  int *ranks = NULL;
  CHECK(TPDP_CALLOC(ranks, 2 * (size_t)size));
  for (int q = 0; q < size; q++) ranks[q] = q;
  MPI_Group g = MPI_GROUP_NULL, wg = MPI_GROUP_NULL;
  int rc = MPI_Comm_group(mc, &g);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_group(MPI_COMM_WORLD, &wg);
  if (rc == MPI_SUCCESS)
    rc = MPI_Group_translate_ranks(g, size, ranks, wg, ranks + size);
  if (g != MPI_GROUP_NULL) MPI_Group_free(&g);
  if (wg != MPI_GROUP_NULL) MPI_Group_free(&wg);
  if (rc != MPI_SUCCESS) {
    free(ranks);
    return comm_mpi_status(rc, "MPI_Group_translate_ranks", NULL);
  }
  memmove(ranks, ranks + size, (size_t)size * sizeof *ranks);
  *out = ranks;
  return TPDP_SUCCESS;
}

/* A tpdp_comm over mc, watched under `key` (comm/watchdog.h). */
static tpdp_status wrap_comm(MPI_Comm mc, const char *name, uint64_t key,
                             tpdp_comm **out) {
  int rank = 0, size = 0;
  MPI_CHECK(NULL, MPI_Comm_set_errhandler, mc, MPI_ERRORS_RETURN);
  MPI_CHECK(NULL, MPI_Comm_rank, mc, &rank);
  MPI_CHECK(NULL, MPI_Comm_size, mc, &size);
  mpi_comm_impl *impl = NULL;
  tpdp_comm *c = NULL;
  int *world = NULL;
  tpdp_status st = TPDP_SUCCESS;
  CHECK(TPDP_CALLOC(impl, 1));
  impl->comm = mc;
  CHECK_GOTO(comm_alloc(&mpi_ops, rank, size, name, &c), st, fail);
  c->impl = impl;
  c->concurrent_threads = thread_level == MPI_THREAD_MULTIPLE;
  CHECK_GOTO(world_ranks_of(mc, size, &world), st, fail);
  CHECK_GOTO(comm_traffic_attach(c, world), st, fail);
  CHECK_GOTO(comm_watch_register(&impl->watch, c, key, world), st, fail);
  free(world);
  *out = c;
  return TPDP_SUCCESS;
fail:
  free(world);
  if (c != NULL) comm_traffic_detach(c);
  free(c);
  free(impl);
  return st;
}

/* wrap_comm, freeing `mc` when it fails (its failure reported first). */
static tpdp_status wrap_or_free(MPI_Comm mc, const char *name, uint64_t key,
                                tpdp_comm **out) {
  tpdp_status st = wrap_comm(mc, name, key, out);
  if (st == TPDP_SUCCESS) return st;
  core_first_error f;
  core_first_error_init(&f);
  core_first_error_add(&f, st);
  core_first_error_add(
      &f, comm_mpi_status(MPI_Comm_free(&mc), "MPI_Comm_free", NULL));
  return f.status;
}

tpdp_status comm_mpi_world(tpdp_comm **out) {
  MPI_Comm dup;
  MPI_CHECK(NULL, MPI_Comm_dup, MPI_COMM_WORLD, &dup);
  return wrap_or_free(dup, "world", 1, out);
}

tpdp_status comm_mpi_world_hosts(uint64_t **hosts, int *n) {
  int size = 0;
  MPI_CHECK(NULL, MPI_Comm_size, MPI_COMM_WORLD, &size);
  uint64_t mine = comm_host_hash(), *all = NULL;
  CHECK(TPDP_CALLOC(all, (size_t)size));
  int rc = MPI_Allgather(&mine, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T,
                         MPI_COMM_WORLD);
  if (rc != MPI_SUCCESS) {
    free(all);
    return comm_mpi_status(rc, "MPI_Allgather", NULL);
  }
  *hosts = all;
  *n = size;
  return TPDP_SUCCESS;
}

static tpdp_status mpi_destroy(tpdp_comm *comm) {
  mpi_comm_impl *impl = (mpi_comm_impl *)comm->impl;
  comm_watch_unregister(&impl->watch);
  comm_traffic_detach(comm);
  int finalized = 0;
  tpdp_status st =
      comm_mpi_status(MPI_Finalized(&finalized), "MPI_Finalized", comm);
  /* After MPI_Finalize the communicator is gone with MPI. */
  if (st == TPDP_SUCCESS && !finalized)
    st = comm_mpi_status(MPI_Comm_free(&impl->comm), "MPI_Comm_free", comm);
  free(impl->scratch);
  free(impl);
  comm->impl = NULL;
  return st;
}

static tpdp_status mpi_split(tpdp_comm *comm, int color, int key,
                             tpdp_comm **out) {
  mpi_comm_impl *impl = (mpi_comm_impl *)comm->impl;
  MPI_Comm nc;
  uint64_t child = comm_watch_child_key(&impl->watch, color);
  int64_t seq = comm_watch_begin(&impl->watch, COMM_OP_SPLIT, 0, 0);
  int rc =
      MPI_Comm_split(impl->comm, color < 0 ? MPI_UNDEFINED : color, key, &nc);
  comm_watch_end(&impl->watch, seq);
  CHECK(comm_mpi_status(rc, "MPI_Comm_split", comm));
  if (nc == MPI_COMM_NULL) {
    *out = NULL;
    return TPDP_SUCCESS;
  }
  char name[96];
  snprintf(name, sizeof name, "%.60s/split(%d)", comm->name, color);
  return wrap_or_free(nc, name, child, out);
}

/* ---------------------------------------------------------- work */

static void divide_by(tpdp_tensor *t, int size) {
  int64_t n = tpdp_tensor_numel(t);
  switch (t->dtype) {
    case TPDP_F32: {
      float *p = t->data;
      for (int64_t i = 0; i < n; i++) p[i] /= (float)size;
      break;
    }
    case TPDP_F64: {
      double *p = t->data;
      for (int64_t i = 0; i < n; i++) p[i] /= size;
      break;
    }
    case TPDP_F16: {
      uint16_t *p = t->data;
      for (int64_t i = 0; i < n; i++)
        p[i] = tpdp_f32_to_f16(tpdp_f16_to_f32(p[i]) / (float)size);
      break;
    }
    case TPDP_BF16: {
      uint16_t *p = t->data;
      for (int64_t i = 0; i < n; i++)
        p[i] = tpdp_f32_to_bf16(tpdp_bf16_to_f32(p[i]) / (float)size);
      break;
    }
    case TPDP_I32: {
      int32_t *p = t->data;
      for (int64_t i = 0; i < n; i++) p[i] /= size;
      break;
    }
    case TPDP_I64: {
      int64_t *p = t->data;
      for (int64_t i = 0; i < n; i++) p[i] /= size;
      break;
    }
    case TPDP_U8: {
      uint8_t *p = t->data;
      for (int64_t i = 0; i < n; i++) p[i] = (uint8_t)(p[i] / size);
      break;
    }
    default:
      break;
  }
}

static void finish(tpdp_work *work) {
  mpi_work_impl *w = (mpi_work_impl *)work->impl;
  if (w->done) return;
  w->done = 1;
  if (w->move_dst != NULL && w->move_bytes > 0)
    memmove(w->move_dst, w->move_src, w->move_bytes);
  if (w->divide) divide_by(&w->avg_view, work->comm->size);
  if (w->sum != NULL) comm_mpi_pieces_sum_run(w->sum);
}

static tpdp_status mpi_work_wait(tpdp_work *work) {
  mpi_work_impl *w = (mpi_work_impl *)work->impl;
  if (!w->done) {
    comm_watch_block(w->watch, w->seq, work->kind, w->dtype, w->count,
                     core_now_s());
    int rc = MPI_Waitall(w->nreqs, w->reqs, MPI_STATUSES_IGNORE);
    comm_watch_end(w->watch, w->seq);
    if (rc != MPI_SUCCESS) {
      w->done = 1; /* the request is over, failed: never wait on it again */
      return comm_mpi_status(rc, "MPI_Wait", work->comm);
    }
    finish(work);
  }
  return TPDP_SUCCESS;
}

static tpdp_status mpi_work_test(tpdp_work *work, int *done) {
  mpi_work_impl *w = (mpi_work_impl *)work->impl;
  if (!w->done) {
    int flag = 0;
    int rc = MPI_Testall(w->nreqs, w->reqs, &flag, MPI_STATUSES_IGNORE);
    if (flag || rc != MPI_SUCCESS) comm_watch_finish(w->watch, w->seq);
    if (rc != MPI_SUCCESS) {
      w->done = 1;
      return comm_mpi_status(rc, "MPI_Test", work->comm);
    }
    if (flag) finish(work);
  }
  *done = w->done;
  return TPDP_SUCCESS;
}

/* Called after mpi_work_wait, which leaves no request in flight (done or
 * failed). */
static tpdp_status mpi_work_release(tpdp_work *work) {
  mpi_work_impl *w = (mpi_work_impl *)work->impl;
  free(w->scratch);
  w->scratch = NULL;
  if (w->reqs != &w->request) free(w->reqs);
  comm_mpi_pieces_sum_free(w->sum);
  work->impl = NULL; /* w lives in the same allocation as work */
  return TPDP_SUCCESS;
}

static const tpdp_work_ops mpi_work_ops = {
    .wait = mpi_work_wait,
    .test = mpi_work_test,
    .wait_stream = NULL, /* host memory: tpdp_work_wait */
    .release = mpi_work_release,
};

/* ---------------------------------------------------------- collectives */

/* The collective as MPI's own call: blocking, or posting w->request. AVG
 * leaves the division to the work's completion (finish). */
static tpdp_status mpi_library_call(tpdp_comm *comm, const tpdp_coll_args *a,
                                    mpi_work_impl *w) {
  MPI_Comm mc = ((mpi_comm_impl *)comm->impl)->comm;
  const tpdp_tensor *send = a->send;
  tpdp_tensor *recv = a->recv;
  MPI_Datatype dt = recv ? comm_mpi_dtype(recv->dtype) : MPI_BYTE;
  size_t es = recv ? tpdp_dtype_size(recv->dtype) : 1;
  int64_t rn = recv ? tpdp_tensor_numel(recv) : 0;
  int64_t sn = send ? tpdp_tensor_numel(send) : 0;
  int b = a->blocking;
  int rc = MPI_SUCCESS;
  const char *call = "";
  switch (a->kind) {
    case TPDP_COLL_ALLREDUCE: {
      const void *sb = send->data == recv->data ? MPI_IN_PLACE : send->data;
      MPI_Op op = mpi_op(a->op, recv->dtype);
      call = b ? "MPI_Allreduce" : "MPI_Iallreduce";
      rc = b ? MPI_Allreduce(sb, recv->data, (int)rn, dt, op, mc)
             : MPI_Iallreduce(sb, recv->data, (int)rn, dt, op, mc, &w->request);
      if (a->op == TPDP_OP_AVG) {
        w->divide = 1;
        w->avg_view = *recv;
      }
      break;
    }
    case TPDP_COLL_ALLGATHER: {
      const void *sb = send->data;
      if (sn > 0 && (const char *)send->data ==
                        (const char *)recv->data + (size_t)comm->rank * sn * es)
        sb = MPI_IN_PLACE;
      call = b ? "MPI_Allgather" : "MPI_Iallgather";
      rc = b ? MPI_Allgather(sb, (int)sn, dt, recv->data, (int)sn, dt, mc)
             : MPI_Iallgather(sb, (int)sn, dt, recv->data, (int)sn, dt, mc,
                              &w->request);
      break;
    }
    case TPDP_COLL_REDUCE_SCATTER: {
      MPI_Op op = mpi_op(a->op, recv->dtype);
      const void *sb = send->data;
      void *rb = recv->data;
      if (rn > 0 &&
          (const char *)recv->data ==
              (const char *)send->data + (size_t)comm->rank * rn * es) {
        /* NCCL-style in place: MPI leaves the block at the start of the
         * buffer; move it to this rank's slot when done. */
        sb = MPI_IN_PLACE;
        rb = send->data;
        w->move_dst = recv->data;
        w->move_src = send->data;
        w->move_bytes = (size_t)rn * es;
      }
      call = b ? "MPI_Reduce_scatter_block" : "MPI_Ireduce_scatter_block";
      rc = b ? MPI_Reduce_scatter_block(sb, rb, (int)rn, dt, op, mc)
             : MPI_Ireduce_scatter_block(sb, rb, (int)rn, dt, op, mc,
                                         &w->request);
      if (a->op == TPDP_OP_AVG) {
        w->divide = 1;
        w->avg_view = *recv;
      }
      break;
    }
    case TPDP_COLL_BROADCAST: {
      if (comm->rank == a->root && send != NULL && send->data != recv->data &&
          rn > 0)
        memcpy(recv->data, send->data, (size_t)rn * es);
      call = b ? "MPI_Bcast" : "MPI_Ibcast";
      rc = b ? MPI_Bcast(recv->data, (int)rn, dt, a->root, mc)
             : MPI_Ibcast(recv->data, (int)rn, dt, a->root, mc, &w->request);
      break;
    }
    case TPDP_COLL_ALLTOALL: {
      const void *sb = send->data;
      int block = (int)(rn / comm->size);
      if (send->data == recv->data && rn > 0) {
        /* Copy the input aside rather than rely on MPI_IN_PLACE support
         * in every non-blocking alltoall implementation. */
        w->scratch = malloc((size_t)rn * es);
        if (w->scratch == NULL) {
          return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY,
                          "alltoall scratch of %zu bytes", (size_t)rn * es);
        }
        memcpy(w->scratch, send->data, (size_t)rn * es);
        sb = w->scratch;
      }
      call = b ? "MPI_Alltoall" : "MPI_Ialltoall";
      rc = b ? MPI_Alltoall(sb, block, dt, recv->data, block, dt, mc)
             : MPI_Ialltoall(sb, block, dt, recv->data, block, dt, mc,
                             &w->request);
      break;
    }
    case TPDP_COLL_BARRIER:
      call = b ? "MPI_Barrier" : "MPI_Ibarrier";
      rc = b ? MPI_Barrier(mc) : MPI_Ibarrier(mc, &w->request);
      break;
  }
  return comm_mpi_status(rc, call, comm);
}

/* One collective: its handle, its watch record, and the algorithm that
 * runs it. */
static tpdp_status mpi_collective(tpdp_comm *comm, const tpdp_coll_args *a,
                                  tpdp_work **out) {
  mpi_comm_impl *impl = (mpi_comm_impl *)comm->impl;
  /* One allocation per call for the handle and its MPI state (the front
   * end frees `work`; release frees only what hangs off it). */
  mpi_work_block *blk = NULL;
  tpdp_status st = TPDP_SUCCESS;
  CHECK(TPDP_CALLOC(blk, 1));
  tpdp_work *work = &blk->work;
  mpi_work_impl *w = &blk->impl;
  work->comm = comm;
  work->kind = a->kind;
  work->impl = w;
  work->ops = &mpi_work_ops;
  w->request = MPI_REQUEST_NULL;
  w->reqs = &w->request;
  w->nreqs = 1;

  tpdp_tensor *recv = a->recv;
  int64_t rn = recv ? tpdp_tensor_numel(recv) : 0;
  int64_t sn = a->send ? tpdp_tensor_numel(a->send) : 0;
  if (rn > INT_MAX || sn > INT_MAX) {
    st = TPDP_ERR(TPDP_ERR_UNSUPPORTED,
                  "%s of %lld elements on %s exceeds the MPI backend's "
                  "limit of %d elements per call",
                  comm_coll_name(a->kind), (long long)(rn > sn ? rn : sn),
                  comm->name, INT_MAX);
    goto fail;
  }
  int b = a->blocking;
  /* The watchdog's record (comm/watchdog.h): a blocking call is watched
   * until it returns, a non-blocking one from its wait. */
  w->watch = &impl->watch;
  w->dtype = recv ? (int)recv->dtype : 0;
  w->count = a->kind == TPDP_COLL_ALLGATHER ? sn : rn;
  w->seq =
      b ? comm_watch_begin(w->watch, a->kind, w->dtype, w->count)
        : comm_watch_enter(w->watch, a->kind, w->dtype, w->count, core_now_s());
  /* Over pieces, the messages are only posted: the work's wait or test
   * completes them, blocking or not. */
  const int pieces = a->send_pieces != NULL || a->recv_pieces != NULL;
  if (pieces)
    st = a->kind == TPDP_COLL_ALLGATHER
             ? comm_mpi_allgather_pieces(comm, a, w)
             : comm_mpi_reduce_scatter_pieces(comm, a, w);
  else if (a->kind == TPDP_COLL_ALLREDUCE && a->shm != NULL)
    st = comm_shm_allreduce(a->shm, comm, recv, a->op);
  else if (a->kind == TPDP_COLL_ALLREDUCE && comm_mpi_use_ring_avg(comm, a, rn))
    st = comm_mpi_ring_allreduce_avg(comm, impl, a->send, recv);
  else
    st = mpi_library_call(comm, a, w);
  if (st != TPDP_SUCCESS) goto fail;
  if (b && !pieces) {
    comm_watch_end(w->watch, w->seq);
    finish(work);
  }
  *out = work;
  return TPDP_SUCCESS;
fail: /* nothing in flight */
  if (w->seq > 0) comm_watch_end(w->watch, w->seq);
  free(w->scratch);
  free(blk);
  return st;
}

static const tpdp_comm_ops mpi_ops = {
    .backend = "mpi",
    .device_type = TPDP_DEVICE_CPU,
    .collective = mpi_collective,
    .split = mpi_split,
    .destroy = mpi_destroy,
    .pieces = 1,
};
