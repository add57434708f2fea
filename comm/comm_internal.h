/*
 * Internal: the communicator backend interface. A backend (MPI, NCCL, ...)
 * is one file that fills a tpdp_comm_ops table; comm.c validates arguments
 * once for every backend and then calls through the table.
 */
#ifndef TPDP_COMM_INTERNAL_H
#define TPDP_COMM_INTERNAL_H

#include "core/check.h"
#include "tpdp/comm.h"

#ifdef __cplusplus
extern "C" { /* tests/comm/fake_backend.h plugs a backend in from C++ */
#endif

typedef enum {
  TPDP_COLL_ALLREDUCE = 0,
  TPDP_COLL_ALLGATHER,
  TPDP_COLL_REDUCE_SCATTER,
  TPDP_COLL_BROADCAST,
  TPDP_COLL_ALLTOALL,
  TPDP_COLL_BARRIER
} tpdp_coll_kind;

const char *comm_coll_name(tpdp_coll_kind kind);

/* One collective call, validated by comm.c before reaching a backend.
 * send may be NULL for barrier and for broadcast off the root. `blocking`
 * tells the backend the caller will wait at once, so it may use its
 * blocking primitive (faster on MPI); it still returns a work handle. */
typedef struct {
  tpdp_coll_kind kind;
  const tpdp_tensor *send;
  tpdp_tensor *recv;
  tpdp_reduce_op op;
  int root;
  int blocking;
} tpdp_coll_args;

typedef struct tpdp_comm_ops {
  const char *backend; /* "mpi", "nccl" */
  tpdp_device_type device_type;
  tpdp_status (*collective)(tpdp_comm *comm, const tpdp_coll_args *args,
                            tpdp_work **work);
  tpdp_status (*split)(tpdp_comm *comm, int color, int key, tpdp_comm **out);
  tpdp_status (*destroy)(tpdp_comm *comm);
  /* May be NULL (host-memory backends): then a no-op. */
  tpdp_status (*order_after)(tpdp_comm *comm, void *stream);
} tpdp_comm_ops;

struct tpdp_comm {
  const tpdp_comm_ops *ops;
  int rank;
  int size;
  char name[96];
  int device_index; /* CUDA ordinal for NCCL, 0 for MPI */
  /* 1 if collectives on *different* communicators may be issued from
   * different threads at the same time (MPI: MPI_THREAD_MULTIPLE). */
  int concurrent_threads;
  void *impl; /* backend state */
};

/* Work handles: a backend allocates one and fills the callbacks. */
struct tpdp_work {
  tpdp_comm *comm;
  tpdp_coll_kind kind;
  /* Block until done; must not free the handle. */
  tpdp_status (*wait)(tpdp_work *work);
  /* Non-blocking completion check. */
  tpdp_status (*test)(tpdp_work *work, int *done);
  /* Make a CUDA stream wait (NCCL); NULL means host wait. */
  tpdp_status (*wait_stream)(tpdp_work *work, void *stream);
  /* Release backend resources held by the handle (after wait or
   * wait_stream, whatever they returned); the front end then frees it. */
  tpdp_status (*release)(tpdp_work *work);
  void *impl;
};

/* Allocate a tpdp_comm shell for a backend (name copied). */
tpdp_status comm_alloc(const tpdp_comm_ops *ops, int rank, int size,
                       const char *name, tpdp_comm **out);

/* MPI backend (comm/mpi_backend.c). */
tpdp_status comm_mpi_backend_init(int *argc, char ***argv, int *we_initialized);
tpdp_status comm_mpi_backend_finalize(int we_initialized);
tpdp_status comm_mpi_world(tpdp_comm **out);

#ifdef __cplusplus
}
#endif

#endif /* TPDP_COMM_INTERNAL_H */
