/* The MPI backend: tpdp_comm over host memory with Open MPI.
 *
 * Asynchronous calls use MPI's non-blocking collectives; calls the front end
 * marks blocking use the blocking ones, which Open MPI tunes better. f16 and
 * bf16 travel as 16-bit integers and are reduced by user-defined ops that
 * compute in f32 and round once per combine, as NCCL does. AVG is SUM
 * followed by a division when the work completes. */
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_internal.h"

typedef struct {
  MPI_Comm comm;
} mpi_comm_impl;

typedef struct {
  MPI_Request request;
  int done;
  /* post-processing once the data is in place */
  int divide;           /* AVG: divide recv by the comm size */
  tpdp_tensor avg_view; /* what to divide */
  void *move_dst;       /* in-place reduce_scatter: move result here */
  const void *move_src;
  size_t move_bytes;
  void *scratch;        /* temporary buffer to free */
} mpi_work_impl;

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

static tpdp_status mpi_error(int code, const char *call, const tpdp_comm *c) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, msg, &len) != MPI_SUCCESS)
    snprintf(msg, sizeof msg, "MPI error %d", code);
  return tpdp_set_error(TPDP_ERR_MPI, call, "failed on %s (rank %d): %s",
                        c ? c->name : "MPI_COMM_WORLD", c ? c->rank : -1, msg);
}

#define MPI_CHECK(call, comm)                                    \
  do {                                                           \
    int mpi_rc_ = (call);                                        \
    if (mpi_rc_ != MPI_SUCCESS) return mpi_error(mpi_rc_, #call, (comm)); \
  } while (0)

/* ---------------------------------------------------------- half ops */

#define HALF_OP(name, to_f, from_f, expr)                                 \
  static void name(void *in, void *inout, int *len, MPI_Datatype *dt) {  \
    (void)dt;                                                            \
    const uint16_t *a = (const uint16_t *)in;                            \
    uint16_t *b = (uint16_t *)inout;                                     \
    for (int i = 0; i < *len; i++) {                                     \
      float x = to_f(a[i]), y = to_f(b[i]);                              \
      b[i] = from_f(expr);                                               \
    }                                                                    \
  }
HALF_OP(f16_sum, tpdp_f16_to_f32, tpdp_f32_to_f16, x + y)
HALF_OP(f16_max, tpdp_f16_to_f32, tpdp_f32_to_f16, x > y ? x : y)
HALF_OP(f16_min, tpdp_f16_to_f32, tpdp_f32_to_f16, x < y ? x : y)
HALF_OP(bf16_sum, tpdp_bf16_to_f32, tpdp_f32_to_bf16, x + y)
HALF_OP(bf16_max, tpdp_bf16_to_f32, tpdp_f32_to_bf16, x > y ? x : y)
HALF_OP(bf16_min, tpdp_bf16_to_f32, tpdp_f32_to_bf16, x < y ? x : y)

static tpdp_status create_half_ops(void) {
  MPI_User_function *fns[2][3] = {{f16_sum, f16_max, f16_min},
                                  {bf16_sum, bf16_max, bf16_min}};
  for (int d = 0; d < 2; d++)
    for (int o = 0; o < 3; o++)
      MPI_CHECK(MPI_Op_create(fns[d][o], 1, &half_ops[d][o]), NULL);
  half_ops_ready = 1;
  return TPDP_SUCCESS;
}

static MPI_Datatype mpi_dtype(tpdp_dtype dtype) {
  switch (dtype) {
    case TPDP_F32: return MPI_FLOAT;
    case TPDP_F64: return MPI_DOUBLE;
    case TPDP_F16: return MPI_UINT16_T;
    case TPDP_BF16: return MPI_UINT16_T;
    case TPDP_I32: return MPI_INT32_T;
    case TPDP_I64: return MPI_INT64_T;
    case TPDP_U8: return MPI_UINT8_T;
    default: return MPI_DATATYPE_NULL;
  }
}

static MPI_Op mpi_op(tpdp_reduce_op op, tpdp_dtype dtype) {
  int idx = op == TPDP_OP_MAX ? 1 : op == TPDP_OP_MIN ? 2 : 0;
  if (dtype == TPDP_F16) return half_ops[0][idx];
  if (dtype == TPDP_BF16) return half_ops[1][idx];
  return idx == 1 ? MPI_MAX : idx == 2 ? MPI_MIN : MPI_SUM;
}

/* ---------------------------------------------------------- life cycle */

static const tpdp_comm_ops mpi_ops;

tpdp_status tpdp_mpi_backend_init(int *argc, char ***argv,
                                  int *we_initialized) {
  int flag = 0, finalized = 0;
  *we_initialized = 0;
  MPI_CHECK(MPI_Finalized(&finalized), NULL);
  if (finalized)
    return tpdp_set_error(TPDP_ERR_STATE, "tpdp_init",
                          "MPI has already been finalized; MPI (and so tpdp) "
                          "cannot be initialised again in this process");
  MPI_CHECK(MPI_Initialized(&flag), NULL);
  if (!flag) {
    int provided = 0;
    /* MULTIPLE lets the reducer's communication thread run a bucket's
     * allreduce while the caller's thread runs TP collectives. */
    MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided),
              NULL);
    *we_initialized = 1;
  }
  MPI_CHECK(MPI_Query_thread(&thread_level), NULL);
  /* Errors come back as codes so tpdp can report them, never abort. */
  MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), NULL);
  if (!half_ops_ready) CHECK(create_half_ops());
  return TPDP_SUCCESS;
}

tpdp_status tpdp_mpi_backend_finalize(int we_initialized) {
  if (half_ops_ready) {
    for (int d = 0; d < 2; d++)
      for (int o = 0; o < 3; o++) MPI_Op_free(&half_ops[d][o]);
    half_ops_ready = 0;
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (we_initialized && !finalized) MPI_CHECK(MPI_Finalize(), NULL);
  return TPDP_SUCCESS;
}

static tpdp_status wrap_comm(MPI_Comm mc, const char *name, tpdp_comm **out) {
  int rank = 0, size = 0;
  MPI_CHECK(MPI_Comm_set_errhandler(mc, MPI_ERRORS_RETURN), NULL);
  MPI_CHECK(MPI_Comm_rank(mc, &rank), NULL);
  MPI_CHECK(MPI_Comm_size(mc, &size), NULL);
  mpi_comm_impl *impl = NULL;
  CHECK(TPDP_CALLOC(impl, 1));
  impl->comm = mc;
  tpdp_comm *c = NULL;
  tpdp_status st = tpdp_comm_alloc(&mpi_ops, rank, size, name, &c);
  if (st != TPDP_SUCCESS) {
    free(impl);
    return st;
  }
  c->impl = impl;
  c->concurrent_threads = thread_level == MPI_THREAD_MULTIPLE;
  *out = c;
  return TPDP_SUCCESS;
}

tpdp_status tpdp_mpi_comm_world(tpdp_comm **out) {
  MPI_Comm dup;
  MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &dup), NULL);
  tpdp_status st = wrap_comm(dup, "world", out);
  if (st != TPDP_SUCCESS) MPI_Comm_free(&dup);
  return st;
}

static tpdp_status mpi_destroy(tpdp_comm *comm) {
  mpi_comm_impl *impl = (mpi_comm_impl *)comm->impl;
  if (impl == NULL) return TPDP_SUCCESS;
  int finalized = 0;
  MPI_Finalized(&finalized);
  int rc = finalized ? MPI_SUCCESS : MPI_Comm_free(&impl->comm);
  free(impl);
  comm->impl = NULL;
  if (rc != MPI_SUCCESS) return mpi_error(rc, "MPI_Comm_free", comm);
  return TPDP_SUCCESS;
}

static tpdp_status mpi_split(tpdp_comm *comm, int color, int key,
                             tpdp_comm **out) {
  mpi_comm_impl *impl = (mpi_comm_impl *)comm->impl;
  MPI_Comm nc;
  MPI_CHECK(MPI_Comm_split(impl->comm, color < 0 ? MPI_UNDEFINED : color, key,
                           &nc),
            comm);
  if (nc == MPI_COMM_NULL) {
    *out = NULL;
    return TPDP_SUCCESS;
  }
  char name[96];
  snprintf(name, sizeof name, "%.60s/split(%d)", comm->name, color);
  tpdp_status st = wrap_comm(nc, name, out);
  if (st != TPDP_SUCCESS) MPI_Comm_free(&nc);
  return st;
}

/* ---------------------------------------------------------- work */

static void divide_by(tpdp_tensor *t, int size) {
  int64_t n = tpdp_tensor_numel(t);
  switch (t->dtype) {
    case TPDP_F32: { float *p = t->data; for (int64_t i = 0; i < n; i++) p[i] /= (float)size; break; }
    case TPDP_F64: { double *p = t->data; for (int64_t i = 0; i < n; i++) p[i] /= size; break; }
    case TPDP_F16: { uint16_t *p = t->data; for (int64_t i = 0; i < n; i++) p[i] = tpdp_f32_to_f16(tpdp_f16_to_f32(p[i]) / (float)size); break; }
    case TPDP_BF16: { uint16_t *p = t->data; for (int64_t i = 0; i < n; i++) p[i] = tpdp_f32_to_bf16(tpdp_bf16_to_f32(p[i]) / (float)size); break; }
    case TPDP_I32: { int32_t *p = t->data; for (int64_t i = 0; i < n; i++) p[i] /= size; break; }
    case TPDP_I64: { int64_t *p = t->data; for (int64_t i = 0; i < n; i++) p[i] /= size; break; }
    case TPDP_U8: { uint8_t *p = t->data; for (int64_t i = 0; i < n; i++) p[i] = (uint8_t)(p[i] / size); break; }
    default: break;
  }
}

static void finish(tpdp_work *work) {
  mpi_work_impl *w = (mpi_work_impl *)work->impl;
  if (w->done) return;
  w->done = 1;
  if (w->move_dst != NULL && w->move_bytes > 0)
    memmove(w->move_dst, w->move_src, w->move_bytes);
  if (w->divide) divide_by(&w->avg_view, work->comm->size);
}

static tpdp_status mpi_work_wait(tpdp_work *work) {
  mpi_work_impl *w = (mpi_work_impl *)work->impl;
  if (!w->done) {
    int rc = MPI_Wait(&w->request, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      w->done = 1; /* the request is over, failed: never wait on it again */
      return mpi_error(rc, "MPI_Wait", work->comm);
    }
    finish(work);
  }
  return TPDP_SUCCESS;
}

static tpdp_status mpi_work_test(tpdp_work *work, int *done) {
  mpi_work_impl *w = (mpi_work_impl *)work->impl;
  if (!w->done) {
    int flag = 0;
    int rc = MPI_Test(&w->request, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      w->done = 1;
      return mpi_error(rc, "MPI_Test", work->comm);
    }
    if (flag) finish(work);
  }
  *done = w->done;
  return TPDP_SUCCESS;
}

static void mpi_work_release(tpdp_work *work) {
  mpi_work_impl *w = (mpi_work_impl *)work->impl;
  if (w == NULL) return;
  /* A handle released before completion (only after an error) must not
   * leave MPI writing into freed memory: wait for it. */
  if (!w->done && w->request != MPI_REQUEST_NULL)
    MPI_Wait(&w->request, MPI_STATUS_IGNORE);
  free(w->scratch);
  w->scratch = NULL;
  work->impl = NULL; /* w lives in the same allocation as work */
}

/* ---------------------------------------------------------- collectives */

static tpdp_status mpi_collective(tpdp_comm *comm, const tpdp_coll_args *a,
                                  tpdp_work **out) {
  mpi_comm_impl *impl = (mpi_comm_impl *)comm->impl;
  MPI_Comm mc = impl->comm;
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
  work->wait = mpi_work_wait;
  work->test = mpi_work_test;
  work->release = mpi_work_release;
  w->request = MPI_REQUEST_NULL;

  const tpdp_tensor *send = a->send;
  tpdp_tensor *recv = a->recv;
  MPI_Datatype dt = recv ? mpi_dtype(recv->dtype) : MPI_BYTE;
  size_t es = recv ? tpdp_dtype_size(recv->dtype) : 1;
  int64_t rn = recv ? tpdp_tensor_numel(recv) : 0;
  int64_t sn = send ? tpdp_tensor_numel(send) : 0;
  if (rn > INT_MAX || sn > INT_MAX) {
    st = TPDP_ERR(TPDP_ERR_UNSUPPORTED,
                  "%s of %lld elements on %s exceeds the MPI backend's "
                  "limit of %d elements per call",
                  tpdp_coll_name(a->kind), (long long)(rn > sn ? rn : sn),
                  comm->name, INT_MAX);
    goto fail;
  }
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
      if (rn > 0 && (const char *)recv->data ==
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
          st = TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "alltoall scratch of %zu bytes",
                        (size_t)rn * es);
          goto fail;
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
  if (rc != MPI_SUCCESS) {
    st = mpi_error(rc, call, comm);
    goto fail;
  }
  if (b) finish(work);
  *out = work;
  return TPDP_SUCCESS;
fail:
  w->done = 1; /* nothing in flight */
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
};
