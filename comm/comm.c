// SPDX-License-Identifier: BSD-3-Clause
/* Backend-neutral communicator front end: argument checks done once for
 * every backend, then dispatch through the backend's ops table; the life
 * cycle of tpdp_init / tpdp_finalize and the objects that must not outlive
 * it. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/backend.h"

static int initialized;
static int we_initialized_mpi;
static tpdp_comm *world;
/* tpdp_init generations (tpdp_comm.epoch): the current one (0 between
 * tpdp_finalize and the next tpdp_init) and the last one begun. */
static unsigned epoch_now, epoch_last;
/* World communicators of ended generations: their shells are kept (their
 * MPI state is freed), chained through `impl`, so that a caller still
 * holding one gets TPDP_ERR_NOT_INITIALIZED instead of reading freed
 * memory. One small block per tpdp_init / tpdp_finalize cycle. */
static tpdp_comm *retired_worlds;

const char comm_owner_tpdp[] = "tpdp";

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
  CHECK(comm_launcher_check_env());
  CHECK(comm_mpi_backend_init(argc, argv, &we_initialized_mpi));
  epoch_now = ++epoch_last;
  tpdp_status st = comm_traffic_init();
  if (st == TPDP_SUCCESS) st = comm_mpi_world(&world);
  if (st == TPDP_SUCCESS) st = comm_launcher_check_world(world->size);
  if (st != TPDP_SUCCESS) {
    epoch_now = 0;
    /* Leave MPI as it was found, so that a later tpdp_init starts over. */
    core_first_error f;
    core_first_error_init(&f);
    core_first_error_add(&f, st);
    if (world != NULL) {
      core_first_error_add(&f, world->ops->destroy(world));
      free(world);
      world = NULL;
    }
    comm_traffic_fini();
    core_first_error_add(&f, comm_mpi_backend_finalize(we_initialized_mpi));
    we_initialized_mpi = 0;
    return f.status;
  }
  world->owner = COMM_OWNER_TPDP;
  tpdp_log_set_rank(world->rank);
  initialized = 1;
  TPDP_INFO("initialised: %d ranks, tpdp %d", world->size, TPDP_VERSION);
  return TPDP_SUCCESS;
}

static tpdp_status check_nothing_live(void);

tpdp_status tpdp_finalize(void) {
  TPDP_API_ENTRY;
  if (!initialized) return TPDP_SUCCESS;
  CHECK(check_nothing_live());
  initialized = 0;
  epoch_now = 0;
  core_first_error f;
  core_first_error_init(&f);
  core_first_error_add(&f, world->ops->destroy(world));
  world->impl = retired_worlds;
  retired_worlds = world;
  world = NULL;
  core_first_error_add(&f, comm_mpi_backend_finalize(we_initialized_mpi));
  comm_traffic_fini();
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
  c->epoch = epoch_now;
  c->debug_collectives = comm_fp_enabled_from_env();
  *out = c;
  return TPDP_SUCCESS;
}

tpdp_status comm_check_alive(const tpdp_comm *comm) {
  if (comm->epoch == 0 || comm->epoch == epoch_now) return TPDP_SUCCESS;
  return TPDP_ERR(TPDP_ERR_NOT_INITIALIZED,
                  "communicator %s was made before tpdp_finalize, which "
                  "ended it; call tpdp_init again and make a new one",
                  comm->name);
}

tpdp_status tpdp_comm_destroy(tpdp_comm *comm) {
  TPDP_API_ENTRY;
  if (comm == NULL) return TPDP_SUCCESS;
  if (comm->owner == COMM_OWNER_TPDP)
    return TPDP_ERR(TPDP_ERR_STATE,
                    "the world communicator is owned by tpdp; tpdp_finalize "
                    "destroys it");
  if (comm->owner != NULL)
    return TPDP_ERR(TPDP_ERR_STATE,
                    "communicator %s (rank %d) belongs to a mesh; "
                    "tpdp_mesh_destroy destroys it",
                    comm->name, comm->rank);
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
int comm_debug_collectives(const tpdp_comm *comm) {
  return comm ? comm->debug_collectives : 0;
}

tpdp_device_type tpdp_comm_device_type(const tpdp_comm *comm) {
  return comm ? comm->ops->device_type : TPDP_DEVICE_CPU;
}

tpdp_status tpdp_comm_split(tpdp_comm *comm, int color, int key,
                            tpdp_comm **out) {
  TPDP_API_ENTRY;
  CHECK_PTR(comm);
  CHECK(comm_check_alive(comm));
  comm->seq++;
  tpdp_status st = TPDP_SUCCESS;
  if (out == NULL)
    st = TPDP_ERR(TPDP_ERR_NULL_POINTER, "argument 'out' is NULL");
  else
    *out = NULL;
  if (comm->debug_collectives) st = comm_fp_check(comm, NULL, st);
  CHECK(st);
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
  core_first_error_add(&f, work->ops->release(work));
  free(work);
  return f.status;
}

tpdp_status comm_backend_run(tpdp_comm *comm, const tpdp_coll_args *args) {
  tpdp_work *work = NULL;
  CHECK(comm->ops->collective(comm, args, &work));
  return work_finish(work, work->ops->wait(work));
}

tpdp_status tpdp_work_wait(tpdp_work *work) {
  TPDP_API_ENTRY;
  if (work == NULL) return TPDP_SUCCESS;
  return work_finish(work, work->ops->wait(work));
}

tpdp_status tpdp_work_test(tpdp_work *work, int *done) {
  TPDP_API_ENTRY;
  CHECK_PTR(work);
  CHECK_PTR(done);
  return work->ops->test(work, done);
}

tpdp_status tpdp_work_wait_stream(tpdp_work *work, void *stream) {
  TPDP_API_ENTRY;
  if (work == NULL) return TPDP_SUCCESS;
  if (work->ops->wait_stream == NULL) return tpdp_work_wait(work);
  return work_finish(work, work->ops->wait_stream(work, stream));
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

/* The front end's checks of one collective call on this rank. */
static tpdp_status check_collective(tpdp_comm *comm, tpdp_coll_args *args,
                                    tpdp_work **work) {
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
  return TPDP_SUCCESS;
}

static tpdp_status run_collective(tpdp_comm *comm, tpdp_coll_args *args,
                                  tpdp_work **work) {
  if (comm == NULL)
    return TPDP_ERR(TPDP_ERR_NULL_POINTER, "communicator is NULL");
  CHECK(comm_check_alive(comm));
  comm->seq++;
  tpdp_status st = check_collective(comm, args, work);
  /* Checked on every rank even when this one's arguments failed, so
   * that its peers fail too instead of waiting for it. */
  if (comm->debug_collectives) st = comm_fp_check(comm, args, st);
  CHECK(st);
  CHECK(comm->ops->collective(comm, args, work));
  comm_traffic_collective(comm, args);
  return TPDP_SUCCESS;
}

static tpdp_status run_blocking(tpdp_comm *comm, tpdp_coll_args *args) {
  tpdp_work *work = NULL;
  args->blocking = 1;
  CHECK(run_collective(comm, args, &work));
  return tpdp_work_wait(work);
}

/* Each collective's two public forms over one tpdp_coll_args: the
 * blocking tpdp_NAME, and tpdp_NAME_async, which takes a `work` pointer
 * after the same parameters. The parameters (after `comm`) name the
 * tensors `send` and `recv`; OP and ROOT fill in the reduce op and the root
 * (TPDP_OP_SUM and 0 for a collective that has none). Defines
 * tpdp_allreduce, tpdp_allgather, tpdp_reduce_scatter, tpdp_broadcast,
 * tpdp_alltoall and their _async forms. */
#define COLLECTIVE(name, KIND, OP, ROOT, ...)                   \
  tpdp_status tpdp_##name(tpdp_comm *comm, __VA_ARGS__) {       \
    TPDP_API_ENTRY;                                             \
    tpdp_coll_args args = {.kind = (KIND),                      \
                           .send = send,                        \
                           .recv = recv,                        \
                           .op = (OP),                          \
                           .root = (ROOT)};                     \
    return run_blocking(comm, &args);                           \
  }                                                             \
  tpdp_status tpdp_##name##_async(tpdp_comm *comm, __VA_ARGS__, \
                                  tpdp_work **work) {           \
    TPDP_API_ENTRY;                                             \
    tpdp_coll_args args = {.kind = (KIND),                      \
                           .send = send,                        \
                           .recv = recv,                        \
                           .op = (OP),                          \
                           .root = (ROOT)};                     \
    return run_collective(comm, &args, work);                   \
  }

COLLECTIVE(allreduce, TPDP_COLL_ALLREDUCE, op, 0, const tpdp_tensor *send,
           tpdp_tensor *recv, tpdp_reduce_op op)
COLLECTIVE(allgather, TPDP_COLL_ALLGATHER, TPDP_OP_SUM, 0,
           const tpdp_tensor *send, tpdp_tensor *recv)
COLLECTIVE(reduce_scatter, TPDP_COLL_REDUCE_SCATTER, op, 0,
           const tpdp_tensor *send, tpdp_tensor *recv, tpdp_reduce_op op)
COLLECTIVE(broadcast, TPDP_COLL_BROADCAST, TPDP_OP_SUM, root,
           const tpdp_tensor *send, tpdp_tensor *recv, int root)
COLLECTIVE(alltoall, TPDP_COLL_ALLTOALL, TPDP_OP_SUM, 0,
           const tpdp_tensor *send, tpdp_tensor *recv)

tpdp_status comm_allreduce_shm(tpdp_comm *comm, comm_shm *shm, tpdp_tensor *t,
                               tpdp_reduce_op op) {
  TPDP_API_ENTRY_AS("tpdp_allreduce");
  if (shm == NULL || comm == NULL || comm->ops->device_type != TPDP_DEVICE_CPU)
    return TPDP_ERR(TPDP_ERR_INTERNAL,
                    "shared-memory allreduce without a segment on a "
                    "host-memory communicator");
  tpdp_coll_args args = {
      .kind = TPDP_COLL_ALLREDUCE, .send = t, .recv = t, .op = op, .shm = shm};
  return run_blocking(comm, &args);
}

int comm_supports_pieces(const tpdp_comm *comm) {
  return comm != NULL && comm->ops->pieces;
}

int64_t comm_pieces_message_bytes(void) {
  static _Atomic long bytes = -1;
  long b = atomic_load(&bytes);
  if (b < 0) {
    b = core_env_long("TPDP_PIECES_MSG_BYTES", 1L << 20);
    if (b < 1) b = 1;
    atomic_store(&bytes, b);
  }
  return b;
}

int64_t comm_reduce_scatter_pieces_scratch(const tpdp_comm *comm, int64_t block,
                                           int recv_in_send) {
  int slots = comm->size - (recv_in_send ? 1 : 2);
  return slots > 0 ? slots * block : 0;
}

/* A pieces list must cover its tensor's elements exactly. */
static tpdp_status check_pieces(const tpdp_comm *comm, const comm_pieces *p,
                                const tpdp_tensor *t, const char *role) {
  if (p == NULL) return TPDP_SUCCESS;
  if (p->n < 0 || (p->n > 0 && p->piece == NULL))
    return TPDP_ERR(TPDP_ERR_NULL_POINTER,
                    "%s pieces: %d pieces at %p (%s, rank %d)", role, p->n,
                    (const void *)p->piece, comm->name, comm->rank);
  int64_t total = 0;
  for (int i = 0; i < p->n; i++) {
    if (p->piece[i].count < 0)
      return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                      "%s piece %d has count %lld (%s, rank %d)", role, i,
                      (long long)p->piece[i].count, comm->name, comm->rank);
    total += p->piece[i].count;
  }
  if (total != tpdp_tensor_numel(t))
    return TPDP_ERR(TPDP_ERR_SHAPE_MISMATCH,
                    "%s pieces cover %lld elements, the %s buffer has %lld "
                    "(%s, rank %d)",
                    role, (long long)total, role,
                    (long long)tpdp_tensor_numel(t), comm->name, comm->rank);
  return TPDP_SUCCESS;
}

static tpdp_status run_pieces(tpdp_comm *comm, tpdp_coll_args *args,
                              tpdp_work **work) {
  if (comm == NULL)
    return TPDP_ERR(TPDP_ERR_NULL_POINTER, "communicator is NULL");
  if (!comm->ops->pieces)
    return TPDP_ERR(TPDP_ERR_UNSUPPORTED,
                    "%s: the %s backend has no collectives over pieces of "
                    "memory",
                    comm->name, comm->ops->backend);
  CHECK(comm_check_alive(comm));
  comm->seq++;
  tpdp_status st = check_collective(comm, args, work);
  if (st == TPDP_SUCCESS)
    st = check_pieces(comm, args->send_pieces, args->send, "send");
  if (st == TPDP_SUCCESS)
    st = check_pieces(comm, args->recv_pieces, args->recv, "recv");
  if (st == TPDP_SUCCESS && args->kind == TPDP_COLL_REDUCE_SCATTER &&
      !(tpdp_dtype_is_float(args->recv->dtype) &&
        (args->op == TPDP_OP_SUM || args->op == TPDP_OP_AVG)))
    st = TPDP_ERR(TPDP_ERR_UNSUPPORTED,
                  "reduce-scatter over pieces takes f32/f64/bf16/f16 SUM/AVG, "
                  "not %s %s (%s, rank %d)",
                  tpdp_dtype_name(args->recv->dtype),
                  tpdp_reduce_op_name(args->op), comm->name, comm->rank);
  if (comm->debug_collectives) st = comm_fp_check(comm, args, st);
  CHECK(st);
  return comm->ops->collective(comm, args, work);
}

tpdp_status comm_allgather_pieces_async(
    tpdp_comm *comm, const tpdp_tensor *send, const comm_pieces *send_pieces,
    tpdp_tensor *recv, const comm_pieces *recv_pieces, tpdp_work **work) {
  TPDP_API_ENTRY_AS("tpdp_allgather_async");
  tpdp_coll_args args = {.kind = TPDP_COLL_ALLGATHER,
                         .send = send,
                         .recv = recv,
                         .send_pieces = send_pieces,
                         .recv_pieces = recv_pieces};
  return run_pieces(comm, &args, work);
}

tpdp_status comm_reduce_scatter_pieces_async(
    tpdp_comm *comm, const tpdp_tensor *send, const comm_pieces *send_pieces,
    tpdp_tensor *recv, const comm_pieces *recv_pieces, tpdp_reduce_op op,
    void *scratch, int64_t scratch_elems, tpdp_work **work) {
  TPDP_API_ENTRY_AS("tpdp_reduce_scatter_async");
  tpdp_coll_args args = {.kind = TPDP_COLL_REDUCE_SCATTER,
                         .send = send,
                         .recv = recv,
                         .op = op,
                         .send_pieces = send_pieces,
                         .recv_pieces = recv_pieces,
                         .scratch = scratch,
                         .scratch_elems = scratch_elems};
  return run_pieces(comm, &args, work);
}

tpdp_status tpdp_barrier(tpdp_comm *comm) {
  TPDP_API_ENTRY;
  tpdp_coll_args args = {.kind = TPDP_COLL_BARRIER};
  return run_blocking(comm, &args);
}
tpdp_status tpdp_barrier_async(tpdp_comm *comm, tpdp_work **work) {
  TPDP_API_ENTRY;
  tpdp_coll_args args = {.kind = TPDP_COLL_BARRIER};
  return run_collective(comm, &args, work);
}

/* ------------------------------------------------------------ live objects */

typedef struct {
  const void *obj;
  char *what;
} live_entry;

static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;
static live_entry *live;
static int live_n, live_cap;

tpdp_status comm_live_add(const void *obj, const char *what) {
  char *copy = core_strdup(what ? what : "object");
  if (copy == NULL)
    return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "registering %s", what);
  pthread_mutex_lock(&live_mu);
  tpdp_status st =
      core_grow((void **)&live, &live_cap, live_n + 1, sizeof(live_entry));
  if (st == TPDP_SUCCESS) live[live_n++] = (live_entry){obj, copy};
  pthread_mutex_unlock(&live_mu);
  if (st != TPDP_SUCCESS) free(copy);
  return st;
}

void comm_live_remove(const void *obj) {
  pthread_mutex_lock(&live_mu);
  for (int i = 0; i < live_n; i++)
    if (live[i].obj == obj) {
      free(live[i].what);
      live[i] = live[--live_n];
      break;
    }
  if (live_n == 0) {
    free(live);
    live = NULL;
    live_cap = 0;
  }
  pthread_mutex_unlock(&live_mu);
}

/* TPDP_ERR_STATE naming the registered objects, if any. */
static tpdp_status check_nothing_live(void) {
  pthread_mutex_lock(&live_mu);
  int n = live_n;
  core_strbuf b = {0};
  for (int i = 0; i < n && i < 4; i++)
    core_sb_printf(&b, "%s%s", i ? ", " : "", live[i].what);
  if (n > 4) core_sb_printf(&b, " and %d more", n - 4);
  pthread_mutex_unlock(&live_mu);
  if (n == 0) return TPDP_SUCCESS;
  tpdp_status st = TPDP_ERR(
      TPDP_ERR_STATE,
      "%d object%s still use%s the communicators: %s; destroy %s first "
      "(tpdp is still initialised)",
      n, n > 1 ? "s" : "", n > 1 ? "" : "s", b.failed ? "?" : b.s,
      n > 1 ? "them" : "it");
  core_sb_free(&b);
  return st;
}
