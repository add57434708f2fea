// SPDX-License-Identifier: BSD-3-Clause
/*
 * Internal to comm/: the communicator backend interface. A backend (MPI,
 * NCCL, ...) is one file that fills a tpdp_comm_ops table; comm.c
 * validates arguments once for every backend and then calls through the
 * table. Only comm/ and the fake backend of the tests
 * (tests/comm/fake_backend.h) include this header (its Bazel target is
 * visible to them alone); the layers above call comm/services.h. Not
 * installed.
 */
#ifndef TPDP_COMM_BACKEND_H
#define TPDP_COMM_BACKEND_H

/* Bazel cannot hide a header that a dependency's own sources include, so
 * the layers above refuse it here: tpdp_layer (tpdp.bzl) defines
 * TPDP_LAYER_<FOLDER> for each layer's sources. */
#if defined(TPDP_LAYER_CORE) || defined(TPDP_LAYER_TOPO) || \
    defined(TPDP_LAYER_TP) || defined(TPDP_LAYER_DP) ||     \
    defined(TPDP_LAYER_CKPT)
#error "comm/backend.h is comm/'s backend interface: include comm/services.h"
#endif

#include "comm/services.h"
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
  /* An in-place allreduce of a buffer inside this shared-memory segment
   * of the communicator (comm_allreduce_shm); NULL otherwise. */
  comm_shm *shm;
  /* Allgather and reduce-scatter: either flat buffer in pieces
   * (comm_allgather_pieces_async); NULL: the tensor's own memory. Only for
   * a backend with `pieces` set. */
  const comm_pieces *send_pieces, *recv_pieces;
  /* Reduce-scatter over pieces: room for the peers' contributions. */
  void *scratch;
  int64_t scratch_elems;
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
  /* 1: `collective` takes send_pieces / recv_pieces (comm_supports_pieces). */
  int pieces;
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
  /* Public collectives and splits called on this communicator so far: the
   * sequence number a collective's fingerprint carries (fingerprint.c). */
  uint64_t seq;
  /* TPDP_DEBUG_COLLECTIVES was set when the communicator was made: every
   * collective first agrees on its fingerprint (comm_fp_check). */
  int debug_collectives;
  /* The tpdp_init generation the communicator was made in (0: made
   * without tpdp_init). tpdp_finalize ends the generation; a call on a
   * communicator of an ended one is TPDP_ERR_NOT_INITIALIZED
   * (comm_check_alive) rather than a use of a freed MPI communicator. */
  unsigned epoch;
  /* What destroys the communicator when it is not its caller's: the mesh
   * (a dim's communicator) or COMM_OWNER_TPDP (the world). NULL: the
   * caller destroys it with tpdp_comm_destroy, which refuses the others. */
  const void *owner;
  void *impl; /* backend state */
  /* Bytes moved and how many crossed hosts (traffic.c); NULL: not
   * counted (a backend that does not attach one). */
  struct comm_traffic *traffic;
};

/* tpdp_comm.owner of the world communicator. */
extern const char comm_owner_tpdp[];
#define COMM_OWNER_TPDP ((const void *)comm_owner_tpdp)

/* Work handles: a backend allocates one and fills the callbacks. */
/* What a backend does with its work handles (one static table each). */
typedef struct {
  /* Block until done; must not free the handle. */
  tpdp_status (*wait)(tpdp_work *work);
  /* Non-blocking completion check. */
  tpdp_status (*test)(tpdp_work *work, int *done);
  /* Make a CUDA stream wait (NCCL); NULL means host wait. */
  tpdp_status (*wait_stream)(tpdp_work *work, void *stream);
  /* Release backend resources held by the handle (after wait or
   * wait_stream, whatever they returned); the front end then frees it. */
  tpdp_status (*release)(tpdp_work *work);
} tpdp_work_ops;

struct tpdp_work {
  tpdp_comm *comm;
  tpdp_coll_kind kind;
  const tpdp_work_ops *ops;
  void *impl;
};

/* Allocate a tpdp_comm shell for a backend (name copied). */
tpdp_status comm_alloc(const tpdp_comm_ops *ops, int rank, int size,
                       const char *name, tpdp_comm **out);

/* TPDP_ERR_NOT_INITIALIZED when `comm` belongs to a tpdp_init generation
 * that tpdp_finalize has ended (see tpdp_comm.epoch). */
tpdp_status comm_check_alive(const tpdp_comm *comm);

/* The backend runs `args` (memory as the backend needs) and the caller
 * waits for it, without the front end's checks, sequence number or
 * fingerprint: for the library's own agreement exchanges (agree.c). */
tpdp_status comm_backend_run(tpdp_comm *comm, const tpdp_coll_args *args);

/* ------------------------------------------ fingerprints (fingerprint.c) */

/* 1 if TPDP_DEBUG_COLLECTIVES is set to a non-zero integer (read when a
 * communicator is made). */
int comm_fp_enabled_from_env(void);

/* With TPDP_DEBUG_COLLECTIVES: agree across `comm` on the call about to be
 * made (args; NULL for tpdp_comm_split) given this rank's own check of its
 * arguments, `local`. Returns `local` when it failed (its message kept),
 * else a failure on every rank when any rank's check failed or the calls
 * differ (op, dtype, count, root, reduce op, sequence number), with a
 * message listing each rank's call; TPDP_SUCCESS when all match. */
tpdp_status comm_fp_check(tpdp_comm *comm, const tpdp_coll_args *args,
                          tpdp_status local);
/* The same for tpdp_comm_agree (its payload, the ranks' statuses, is not
 * part of the fingerprint: only that every rank makes the call). */
tpdp_status comm_fp_check_agree(tpdp_comm *comm);

/* ------------------------- shared memory among one host's ranks (shm.c) */

/* The algorithm, for a backend (no checks of its own but the region). */
tpdp_status comm_shm_allreduce(comm_shm *s, const tpdp_comm *comm,
                               tpdp_tensor *t, tpdp_reduce_op op);

/* ------------------------------------------- the launcher (launcher.c) */

/* tpdp_init's refusal of N processes that MPI does not know as one job:
 * TPDP_ERR_INVALID_ARGUMENT when a launcher's variables say N > 1
 * (torchrun's WORLD_SIZE, an srun step's SLURM_NTASKS) and no MPI
 * launcher's are set (before MPI_Init: under srun without PMI Open MPI
 * would stop the process in it), or, given the world's size after it,
 * when that is 1. TPDP_LAUNCHER_CHECK=0 turns both off. */
tpdp_status comm_launcher_check_env(void);
tpdp_status comm_launcher_check_world(int world_size);

/* --------------------------------- bytes moved per communicator (traffic.c)
 *
 * See tpdp_comm_traffic_get (tpdp/comm.h) for what is counted. */
typedef struct comm_traffic comm_traffic;

/* A hash of this host's name: ranks with equal hashes share a host. */
uint64_t comm_host_hash(void);
/* At tpdp_init: learn every world rank's host (comm_mpi_world_hosts).
 * comm_traffic_fini forgets it (tpdp_finalize). */
tpdp_status comm_traffic_init(void);
void comm_traffic_fini(void);
/* Give `c` its record, from the world rank of each of its ranks (a
 * backend does, when it makes a communicator). Without a host map (no
 * tpdp_init) `c` stays uncounted. Errors: TPDP_ERR_OUT_OF_MEMORY. */
tpdp_status comm_traffic_attach(tpdp_comm *c, const int *world_ranks);
void comm_traffic_detach(tpdp_comm *c);
/* `helper` carries part of `owner`'s collectives (the hierarchical
 * allreduce's cross-host step): its bytes count as owner's. */
void comm_traffic_charge_to(tpdp_comm *helper, tpdp_comm *owner);
/* `bytes` sent by this rank to rank `peer` of `c` (a message the backend
 * posts itself). */
void comm_traffic_add(const tpdp_comm *c, int peer, uint64_t bytes);
/* What a ring moves for collective `a` issued on `c` (the front end, for
 * every collective not over pieces). */
void comm_traffic_collective(const tpdp_comm *c, const tpdp_coll_args *a);

/* MPI backend (comm/mpi_backend.c). */
tpdp_status comm_mpi_backend_init(int *argc, char ***argv, int *we_initialized);
tpdp_status comm_mpi_backend_finalize(int we_initialized);
tpdp_status comm_mpi_world(tpdp_comm **out);
/* comm_host_hash of every world rank (*n of them, malloc'd), by an
 * allgather on MPI_COMM_WORLD itself: no tpdp communicator's collective
 * sequence moves. */
tpdp_status comm_mpi_world_hosts(uint64_t **hosts, int *n);

#ifdef __cplusplus
}
#endif

#endif /* TPDP_COMM_BACKEND_H */
