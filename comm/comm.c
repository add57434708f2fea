/* Backend-neutral communicator front end: argument checks done once for
 * every backend, then dispatch through the backend's ops table. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_internal.h"

static int initialized;
static int we_initialized_mpi;
static tpdp_comm *world;

const char *tpdp_reduce_op_name(tpdp_reduce_op op) {
  static const char *const names[] = {"sum", "avg", "max", "min"};
  if ((int)op < 0 || op >= TPDP_OP_COUNT) return "?";
  return names[op];
}

const char *comm_coll_name(tpdp_coll_kind kind) {
  static const char *const names[] = {"allreduce",      "allgather",
                                      "reduce_scatter", "broadcast",
                                      "alltoall",       "barrier"};
  if ((int)kind < 0 || kind > TPDP_COLL_BARRIER) return "?";
  return names[kind];
}

tpdp_status tpdp_init(int *argc, char ***argv) {
  TPDP_API_ENTRY;
  if (initialized) return TPDP_SUCCESS;
  CHECK(comm_mpi_backend_init(argc, argv, &we_initialized_mpi));
  tpdp_status st = comm_mpi_world(&world);
  if (st != TPDP_SUCCESS) {
    /* Leave MPI as it was found, so that a later tpdp_init starts over. */
    core_first_error f;
    core_first_error_init(&f);
    core_first_error_add(&f, st);
    core_first_error_add(&f, comm_mpi_backend_finalize(we_initialized_mpi));
    we_initialized_mpi = 0;
    return f.status;
  }
  tpdp_log_set_rank(world->rank);
  initialized = 1;
  TPDP_INFO("initialised: %d ranks, tpdp %d", world->size, TPDP_VERSION);
  return TPDP_SUCCESS;
}

tpdp_status tpdp_finalize(void) {
  TPDP_API_ENTRY;
  if (!initialized) return TPDP_SUCCESS;
  initialized = 0;
  core_first_error f;
  core_first_error_init(&f);
  core_first_error_add(&f, tpdp_comm_destroy(world));
  world = NULL;
  core_first_error_add(&f, comm_mpi_backend_finalize(we_initialized_mpi));
  return f.status;
}

int tpdp_is_initialized(void) { return initialized; }

tpdp_status tpdp_comm_world(tpdp_comm **out) {
  TPDP_API_ENTRY;
  CHECK_PTR(out);
  if (!initialized)
    return TPDP_ERR(TPDP_ERR_NOT_INITIALIZED,
                    "call tpdp_init before asking for the world communicator");
  *out = world;
  return TPDP_SUCCESS;
}

tpdp_status comm_alloc(const tpdp_comm_ops *ops, int rank, int size,
                       const char *name, tpdp_comm **out) {
  tpdp_comm *c = NULL;
  CHECK(TPDP_CALLOC(c, 1));
  c->ops = ops;
  c->rank = rank;
  c->size = size;
  snprintf(c->name, sizeof c->name, "%s", name ? name : "comm");
  *out = c;
  return TPDP_SUCCESS;
}

tpdp_status tpdp_comm_destroy(tpdp_comm *comm) {
  TPDP_API_ENTRY;
  if (comm == NULL) return TPDP_SUCCESS;
  if (comm == world && initialized)
    return TPDP_ERR(TPDP_ERR_STATE,
                    "the world communicator is owned by tpdp; tpdp_finalize "
                    "destroys it");
  tpdp_status st = comm->ops->destroy(comm);
  free(comm);
  return st;
}

int tpdp_comm_rank(const tpdp_comm *comm) { return comm ? comm->rank : -1; }
int tpdp_comm_size(const tpdp_comm *comm) { return comm ? comm->size : 0; }
const char *tpdp_comm_name(const tpdp_comm *comm) {
  return comm ? comm->name : "(null)";
}
const char *tpdp_comm_backend(const tpdp_comm *comm) {
  return comm ? comm->ops->backend : "(null)";
}
int tpdp_comm_concurrent_threads(const tpdp_comm *comm) {
  return comm ? comm->concurrent_threads : 0;
}

tpdp_device_type tpdp_comm_device_type(const tpdp_comm *comm) {
  return comm ? comm->ops->device_type : TPDP_DEVICE_CPU;
}

tpdp_status tpdp_comm_split(tpdp_comm *comm, int color, int key,
                            tpdp_comm **out) {
  TPDP_API_ENTRY;
  CHECK_PTR(comm);
  CHECK_PTR(out);
  *out = NULL;
  return comm->ops->split(comm, color, key, out);
}

tpdp_status tpdp_comm_order_after(tpdp_comm *comm, void *stream) {
  TPDP_API_ENTRY;
  CHECK_PTR(comm);
  if (comm->ops->order_after == NULL) return TPDP_SUCCESS;
  return comm->ops->order_after(comm, stream);
}

/* ------------------------------------------------------------ work */

/* Release the handle after its wait: both statuses count, the wait's
 * first. */
static tpdp_status work_finish(tpdp_work *work, tpdp_status wait_st) {
  core_first_error f;
  core_first_error_init(&f);
  core_first_error_add(&f, wait_st);
  core_first_error_add(&f, work->release(work));
  free(work);
  return f.status;
}

tpdp_status tpdp_work_wait(tpdp_work *work) {
  TPDP_API_ENTRY;
  if (work == NULL) return TPDP_SUCCESS;
  return work_finish(work, work->wait(work));
}

tpdp_status tpdp_work_test(tpdp_work *work, int *done) {
  TPDP_API_ENTRY;
  CHECK_PTR(work);
  CHECK_PTR(done);
  return work->test(work, done);
}

tpdp_status tpdp_work_wait_stream(tpdp_work *work, void *stream) {
  TPDP_API_ENTRY;
  if (work == NULL) return TPDP_SUCCESS;
  if (work->wait_stream == NULL) return tpdp_work_wait(work);
  return work_finish(work, work->wait_stream(work, stream));
}

/* ------------------------------------------------------------ checks */

static tpdp_status check_tensor(const tpdp_comm *comm, const tpdp_tensor *t,
                                const char *role) {
  if (t->ndim < 0 || t->ndim > TPDP_MAX_DIMS)
    return TPDP_ERR(TPDP_ERR_TOO_MANY_DIMS,
                    "%s buffer has ndim %d outside [0, %d] (%s)", role, t->ndim,
                    TPDP_MAX_DIMS, comm->name);
  for (int i = 0; i < t->ndim; i++)
    if (t->shape[i] < 0)
      return TPDP_ERR(TPDP_ERR_BAD_DIM_SIZE,
                      "%s buffer has shape[%d] = %lld (%s)", role, i,
                      (long long)t->shape[i], comm->name);
  if (tpdp_dtype_size(t->dtype) == 0)
    return TPDP_ERR(TPDP_ERR_DTYPE_MISMATCH,
                    "%s buffer has invalid dtype %d on %s", role, (int)t->dtype,
                    comm->name);
  if (!tpdp_tensor_is_contiguous(t))
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "%s buffer is not contiguous (%s, rank %d)", role,
                    comm->name, comm->rank);
  if (t->data == NULL && tpdp_tensor_numel(t) > 0)
    return TPDP_ERR(TPDP_ERR_NULL_POINTER,
                    "%s buffer has NULL data and %lld elements (%s)", role,
                    (long long)tpdp_tensor_numel(t), comm->name);
  if (t->device.type != comm->ops->device_type ||
      (t->device.type == TPDP_DEVICE_CUDA &&
       t->device.index != comm->device_index)) {
    char dev[32];
    tpdp_device_format(t->device, dev, sizeof dev);
    return TPDP_ERR(
        TPDP_ERR_DEVICE_MISMATCH,
        "%s buffer is on %s but communicator %s (%s backend) moves %s memory",
        role, dev, comm->name, comm->ops->backend,
        comm->ops->device_type == TPDP_DEVICE_CPU ? "host" : "device");
  }
  return TPDP_SUCCESS;
}

static tpdp_status count_error(const tpdp_comm *comm, const char *rule,
                               long long send_n, long long recv_n) {
  return TPDP_ERR(TPDP_ERR_SHAPE_MISMATCH,
                  "%s: send has %lld elements, recv %lld, comm %s has "
                  "%d ranks (rank %d)",
                  rule, send_n, recv_n, comm->name, comm->size, comm->rank);
}

static tpdp_status run_collective(tpdp_comm *comm, tpdp_coll_args *args,
                                  tpdp_work **work) {
  if (comm == NULL)
    return TPDP_ERR(TPDP_ERR_NULL_POINTER, "communicator is NULL");
  if (work == NULL)
    return TPDP_ERR(TPDP_ERR_NULL_POINTER, "work handle pointer is NULL");
  *work = NULL;
  if (args->kind != TPDP_COLL_BARRIER) {
    if (args->recv == NULL)
      return TPDP_ERR(TPDP_ERR_NULL_POINTER, "recv tensor is NULL (%s)",
                      comm->name);
    int send_needed =
        args->kind != TPDP_COLL_BROADCAST || comm->rank == args->root;
    if (args->send == NULL && args->kind != TPDP_COLL_BROADCAST)
      return TPDP_ERR(TPDP_ERR_NULL_POINTER, "send tensor is NULL (%s)",
                      comm->name);
    CHECK(check_tensor(comm, args->recv, "recv"));
    if (args->send != NULL && send_needed) {
      CHECK(check_tensor(comm, args->send, "send"));
      if (args->send->dtype != args->recv->dtype)
        return TPDP_ERR(TPDP_ERR_DTYPE_MISMATCH,
                        "send dtype %s != recv dtype %s (%s, rank %d)",
                        tpdp_dtype_name(args->send->dtype),
                        tpdp_dtype_name(args->recv->dtype), comm->name,
                        comm->rank);
    }
  }
  if ((args->kind == TPDP_COLL_ALLREDUCE ||
       args->kind == TPDP_COLL_REDUCE_SCATTER) &&
      ((int)args->op < 0 || args->op >= TPDP_OP_COUNT))
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT, "invalid reduce op %d",
                    (int)args->op);
  long long s = args->send ? (long long)tpdp_tensor_numel(args->send) : 0;
  long long r = args->recv ? (long long)tpdp_tensor_numel(args->recv) : 0;
  long long p = comm->size;
  switch (args->kind) {
    case TPDP_COLL_ALLREDUCE:
      if (s != r)
        return count_error(comm, "numel(send) must equal numel(recv)", s, r);
      break;
    case TPDP_COLL_ALLGATHER:
      if (r != s * p)
        return count_error(comm, "numel(recv) must be size * numel(send)", s,
                           r);
      break;
    case TPDP_COLL_REDUCE_SCATTER:
      if (s != r * p)
        return count_error(comm, "numel(send) must be size * numel(recv)", s,
                           r);
      break;
    case TPDP_COLL_ALLTOALL:
      if (s != r || s % p != 0)
        return count_error(
            comm, "numel(send) must equal numel(recv) and divide by size", s,
            r);
      break;
    case TPDP_COLL_BROADCAST:
      if (args->root < 0 || args->root >= comm->size)
        return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                        "root %d outside [0, %d) of %s", args->root, comm->size,
                        comm->name);
      if (comm->rank == args->root && args->send != NULL && s != r)
        return count_error(
            comm, "numel(send) must equal numel(recv) on the root", s, r);
      break;
    case TPDP_COLL_BARRIER:
      break;
  }
  return comm->ops->collective(comm, args, work);
}

static tpdp_status run_blocking(tpdp_comm *comm, tpdp_coll_args *args) {
  tpdp_work *work = NULL;
  args->blocking = 1;
  CHECK(run_collective(comm, args, &work));
  return tpdp_work_wait(work);
}

#define COLL_ARGS(kind_, send_, recv_, op_, root_) \
  tpdp_coll_args args = {(kind_), (send_), (recv_), (op_), (root_), 0}

tpdp_status tpdp_allreduce(tpdp_comm *comm, const tpdp_tensor *send,
                           tpdp_tensor *recv, tpdp_reduce_op op) {
  TPDP_API_ENTRY;
  COLL_ARGS(TPDP_COLL_ALLREDUCE, send, recv, op, 0);
  return run_blocking(comm, &args);
}
tpdp_status tpdp_allreduce_async(tpdp_comm *comm, const tpdp_tensor *send,
                                 tpdp_tensor *recv, tpdp_reduce_op op,
                                 tpdp_work **work) {
  TPDP_API_ENTRY;
  COLL_ARGS(TPDP_COLL_ALLREDUCE, send, recv, op, 0);
  return run_collective(comm, &args, work);
}

tpdp_status tpdp_allgather(tpdp_comm *comm, const tpdp_tensor *send,
                           tpdp_tensor *recv) {
  TPDP_API_ENTRY;
  COLL_ARGS(TPDP_COLL_ALLGATHER, send, recv, TPDP_OP_SUM, 0);
  return run_blocking(comm, &args);
}
tpdp_status tpdp_allgather_async(tpdp_comm *comm, const tpdp_tensor *send,
                                 tpdp_tensor *recv, tpdp_work **work) {
  TPDP_API_ENTRY;
  COLL_ARGS(TPDP_COLL_ALLGATHER, send, recv, TPDP_OP_SUM, 0);
  return run_collective(comm, &args, work);
}

tpdp_status tpdp_reduce_scatter(tpdp_comm *comm, const tpdp_tensor *send,
                                tpdp_tensor *recv, tpdp_reduce_op op) {
  TPDP_API_ENTRY;
  COLL_ARGS(TPDP_COLL_REDUCE_SCATTER, send, recv, op, 0);
  return run_blocking(comm, &args);
}
tpdp_status tpdp_reduce_scatter_async(tpdp_comm *comm, const tpdp_tensor *send,
                                      tpdp_tensor *recv, tpdp_reduce_op op,
                                      tpdp_work **work) {
  TPDP_API_ENTRY;
  COLL_ARGS(TPDP_COLL_REDUCE_SCATTER, send, recv, op, 0);
  return run_collective(comm, &args, work);
}

tpdp_status tpdp_broadcast(tpdp_comm *comm, const tpdp_tensor *send,
                           tpdp_tensor *recv, int root) {
  TPDP_API_ENTRY;
  COLL_ARGS(TPDP_COLL_BROADCAST, send, recv, TPDP_OP_SUM, root);
  return run_blocking(comm, &args);
}
tpdp_status tpdp_broadcast_async(tpdp_comm *comm, const tpdp_tensor *send,
                                 tpdp_tensor *recv, int root,
                                 tpdp_work **work) {
  TPDP_API_ENTRY;
  COLL_ARGS(TPDP_COLL_BROADCAST, send, recv, TPDP_OP_SUM, root);
  return run_collective(comm, &args, work);
}

tpdp_status tpdp_alltoall(tpdp_comm *comm, const tpdp_tensor *send,
                          tpdp_tensor *recv) {
  TPDP_API_ENTRY;
  COLL_ARGS(TPDP_COLL_ALLTOALL, send, recv, TPDP_OP_SUM, 0);
  return run_blocking(comm, &args);
}
tpdp_status tpdp_alltoall_async(tpdp_comm *comm, const tpdp_tensor *send,
                                tpdp_tensor *recv, tpdp_work **work) {
  TPDP_API_ENTRY;
  COLL_ARGS(TPDP_COLL_ALLTOALL, send, recv, TPDP_OP_SUM, 0);
  return run_collective(comm, &args, work);
}

tpdp_status tpdp_barrier(tpdp_comm *comm) {
  TPDP_API_ENTRY;
  COLL_ARGS(TPDP_COLL_BARRIER, NULL, NULL, TPDP_OP_SUM, 0);
  return run_blocking(comm, &args);
}
tpdp_status tpdp_barrier_async(tpdp_comm *comm, tpdp_work **work) {
  TPDP_API_ENTRY;
  COLL_ARGS(TPDP_COLL_BARRIER, NULL, NULL, TPDP_OP_SUM, 0);
  return run_collective(comm, &args, work);
}
