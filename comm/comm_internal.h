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
typedef struct comm_shm comm_shm;

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

/* The backend's blocking allgather of `send` into `recv` (host or device
 * views as the backend needs), without the front end's checks, sequence
 * number or fingerprint: for the library's own agreement exchanges. */
tpdp_status comm_backend_allgather(tpdp_comm *comm, const tpdp_tensor *send,
                                   tpdp_tensor *recv);

/* ------------------------------------------------- agreement (agree.c) */

/* Allgather `bytes` bytes of HOST memory from every rank of `comm` into
 * `recv` (size * bytes, rank order), on any backend: a device (NCCL)
 * communicator stages them through a temporary buffer on its GPU.
 * Collective; bypasses the fingerprint (it is how fingerprints travel). */
tpdp_status comm_host_allgather(tpdp_comm *comm, const void *send, size_t bytes,
                                void *recv);

/* What comm_agree compares: one fixed-size record per rank whose first
 * field is the rank's own check of its arguments (an int32_t status). */
typedef struct {
  size_t size; /* bytes of a record */
  /* Two records say the same (the status aside). */
  int (*same)(const void *a, const void *b);
  /* Append one record to a message. */
  void (*describe)(core_strbuf *b, const void *rec);
  /* The error of ranks whose records differ, first at rank 0's `a` and
   * `b`: a TPDP_ERR naming `comm` and this rank, with `ranks`, each
   * rank's record as "rank 0 passed ..., ranks 1-3 ...". */
  tpdp_status (*mismatch)(const tpdp_comm *comm, const void *a, const void *b,
                          const char *ranks);
  /* What a failed check rejected ("the mesh"), for the ranks that passed
   * theirs: "rank 1 of world rejected the mesh (STATUS); see that rank's
   * message". */
  const char *rejected;
} comm_agree_kind;

/* Agree across `comm` on this rank's record `mine` (one comm_host_allgather)
 * given its own check, `local`, so that a call some ranks cannot make fails
 * on every rank instead of leaving the others waiting: when the records
 * differ every rank fails with kind->mismatch's error; else when a rank's
 * own check failed the others fail with its status. A rank whose own check
 * failed returns `local` (its message kept) unless the records differ,
 * which explains it better; so does a rank that cannot take part (no
 * memory). TPDP_SUCCESS when every rank passed the same and none failed. */
tpdp_status comm_agree(tpdp_comm *comm, const comm_agree_kind *kind,
                       const void *mine, tpdp_status local);

/* Append to `b` the ranks' records grouped by equality, in order of each
 * group's first rank: "rank 0 <first>, ranks 1-3, 5 <second>, ...". `recs`
 * holds `n` records of `size` bytes; same(a, b) says two records belong
 * together; describe(b, rec) appends one. `first_verb` (e.g. "called ") is
 * written after the first group's ranks only. At most `max_groups` groups
 * are written, then "and N more". */
void comm_sb_rank_groups(core_strbuf *b, const void *recs, size_t size, int n,
                         int (*same)(const void *a, const void *b),
                         void (*describe)(core_strbuf *b, const void *rec),
                         const char *first_verb, int max_groups);

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

/* ------------------------------------- live objects (comm.c) */

/* Objects that use communicators until they are destroyed (a reducer and
 * its communication thread): tpdp_finalize refuses to run while any is
 * registered and names them. `what` is copied, e.g. "reducer on 'mesh.dp'
 * (12 parameters)". Thread-safe. Errors: TPDP_ERR_OUT_OF_MEMORY. */
tpdp_status comm_live_add(const void *obj, const char *what);
/* Unregister `obj` (not registered: no-op). */
void comm_live_remove(const void *obj);

/* ------------------------- shared memory among one host's ranks (shm.c)
 *
 * For the library's own buffers that every rank of a host-memory
 * communicator lays out alike (the reducer's bucket arena): a segment that
 * all ranks map, one region of `bytes` per rank, and an allreduce in it
 * that reads the peers' buffers directly (see shm.c for why it is faster
 * than MPI on one host). Not for user buffers: a collective takes this
 * path only through comm_allreduce_shm, which every rank calls alike. */

/* Collective over `comm`: a segment with a region of `bytes` for each
 * rank, zero-filled, or *out = NULL (and success) where there can be none:
 * one rank, a device communicator, ranks on several hosts, TPDP_SHM=0 on
 * any rank, or a rank that could not map it (/dev/shm full: the reason is
 * logged at INFO). The same on every rank. Errors: those of the exchange
 * (TPDP_ERR_MPI), TPDP_ERR_OUT_OF_MEMORY. */
tpdp_status comm_shm_create(tpdp_comm *comm, size_t bytes, comm_shm **out);
/* Unmap (local; NULL: no-op). Peers keep their mappings. */
void comm_shm_free(comm_shm *s);
/* This rank's region, and its usable size. */
void *comm_shm_region(const comm_shm *s);
size_t comm_shm_bytes(const comm_shm *s);
/* Give back the memory of whole pages inside [ptr, ptr + bytes) of this
 * rank's region that no rank will use again (they read as zeros after). */
void comm_shm_discard(comm_shm *s, void *ptr, size_t bytes);
/* 1 if comm_allreduce_shm handles this dtype and op (f32/f64, SUM/AVG). */
int comm_shm_supports(tpdp_dtype dtype, tpdp_reduce_op op);
/* Blocking in-place allreduce of `t`, a buffer inside this rank's region
 * of `shm` (made on `comm`) at the same offset on every rank: the front
 * end's checks and sequence number as tpdp_allreduce, then the backend's
 * shared-memory path. Every rank must call it alike (offset, count,
 * dtype, op), or every rank fails with TPDP_ERR_INVALID_ARGUMENT naming
 * both calls. */
tpdp_status comm_allreduce_shm(tpdp_comm *comm, comm_shm *shm, tpdp_tensor *t,
                               tpdp_reduce_op op);
/* The algorithm, for a backend (no checks of its own but the region). */
tpdp_status comm_shm_allreduce(comm_shm *s, const tpdp_comm *comm,
                               tpdp_tensor *t, tpdp_reduce_op op);

/* MPI backend (comm/mpi_backend.c). */
tpdp_status comm_mpi_backend_init(int *argc, char ***argv, int *we_initialized);
tpdp_status comm_mpi_backend_finalize(int we_initialized);
tpdp_status comm_mpi_world(tpdp_comm **out);

#ifdef __cplusplus
}
#endif

#endif /* TPDP_COMM_INTERNAL_H */
