// SPDX-License-Identifier: BSD-3-Clause
/*
 * Internal: what the layers above comm/ (tp/, dp/, ckpt/, topo/) may call
 * besides the API of tpdp/comm.h. Cross-rank agreement on records, objects
 * that keep communicators busy, shared-memory segments among one host's
 * ranks, the timeout and the watchdog's thread label, and the lifetime link
 * between a mesh and the objects built on it. Nothing here exposes a
 * communicator's fields: the backend interface (struct tpdp_comm, the ops
 * tables) is comm/backend.h, for comm/ itself and its test backend only.
 * Not installed.
 */
#ifndef TPDP_COMM_SERVICES_H
#define TPDP_COMM_SERVICES_H

#include "core/check.h"
#include "core/mem.h"
#include "tpdp/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

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
} comm_agree_kind;

/* Agree across `comm` on this rank's record `mine` (one comm_host_allgather)
 * given its own check, `local`, so that a call some ranks cannot make fails
 * on every rank instead of leaving the others waiting: when the records
 * differ every rank fails with kind->mismatch's error; else when a rank's
 * own check failed every rank fails as tpdp_comm_agree does (the status
 * and message of the lowest failing rank, naming it). A rank that cannot
 * take part (no memory, a failed exchange) returns `local` if its own
 * check failed (its message kept), else that error. TPDP_SUCCESS when
 * every rank passed the same and none failed. */
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

/* 1 if `comm` was made with TPDP_DEBUG_COLLECTIVES set: every collective on
 * it first agrees on its fingerprint, and checks that are cached across
 * calls (redistribute's) should run on every call. 0 for NULL. */
int comm_debug_collectives(const tpdp_comm *comm);

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
 * communicator lays out alike (the reducer's bucket arena): a segment per
 * host that its ranks map, one region of `bytes` per rank, and an
 * allreduce in it that reads the peers' buffers directly (see shm.c for
 * why it is faster than MPI on one host), hierarchical across hosts (each
 * local rank's slice allreduced over MPI with its namesakes on the other
 * hosts). Not for user buffers: a collective takes this path only through
 * comm_allreduce_shm, which every rank calls alike. */
typedef struct comm_shm comm_shm;

/* Collective over `comm`: a segment with a region of `bytes` for each
 * rank, zero-filled, or *out = NULL (and success) where there can be none:
 * one rank, a device communicator, one rank on a host or hosts holding
 * different numbers of ranks, TPDP_SHM=0 on any rank, or a rank that could
 * not map it (/dev/shm full: the reason is logged at INFO). The same on
 * every rank. On several hosts it also makes a communicator per local rank
 * (tpdp_comm_split: collective), destroyed by comm_shm_free. Errors: those
 * of the exchange and the split (TPDP_ERR_MPI), TPDP_ERR_OUT_OF_MEMORY. */
tpdp_status comm_shm_create(tpdp_comm *comm, size_t bytes, comm_shm **out);
/* Unmap and destroy the cross-host communicator (local; NULL: no-op).
 * Peers keep their mappings. */
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

/* ------------------------- collectives over pieces of memory (comm.c)
 *
 * An allgather or reduce-scatter whose flat buffer is not one block of
 * memory: the flat buffer (rank by rank, as tpdp_allgather's and
 * tpdp_reduce_scatter's) is given as a list of pieces, each `count`
 * elements at `offset` elements from the tensor's data, or a hole
 * (offset < 0): flat positions no rank sends or receives (padding). The
 * tensor gives the flat buffer's base, dtype and element count (the
 * pieces' counts add up to it). Holes must lie at the same flat positions
 * on every rank. What it saves is the copy into and out of a packed
 * buffer: fully sharded units gather straight into their parameters and
 * reduce out of their gradients (dp/fsdp_collectives.c). The MPI backend runs
 * it as point-to-point messages with derived datatypes; other backends
 * have no such path (comm_supports_pieces). The pieces must stay valid
 * until the work is waited for. */
typedef struct {
  int64_t offset; /* elements from the tensor's data; < 0: a hole */
  int64_t count;
} comm_piece;

typedef struct {
  const comm_piece *piece;
  int n;
} comm_pieces;

/* 1 if `comm`'s backend runs the calls below. */
int comm_supports_pieces(const tpdp_comm *comm);
/* The bytes per message the MPI backend cuts them into:
 * TPDP_PIECES_MSG_BYTES (default 1 MiB, at least 1), read once. Ranks
 * that see different values would cut the same stream differently, so a
 * caller that makes objects over a communicator has its ranks agree on it
 * (the fully sharded units do, at creation). */
int64_t comm_pieces_message_bytes(void);
/* tpdp_allgather_async with either buffer in pieces (NULL: the tensor's
 * own contiguous memory). Any dtype. This rank's block is copied locally
 * unless its send and recv pieces are the same memory. */
tpdp_status comm_allgather_pieces_async(
    tpdp_comm *comm, const tpdp_tensor *send, const comm_pieces *send_pieces,
    tpdp_tensor *recv, const comm_pieces *recv_pieces, tpdp_work **work);
/* tpdp_reduce_scatter_async likewise: f32, f64, bf16 or f16, SUM or AVG,
 * summed in rank order (bf16/f16: in f32, rounded once at the end, so
 * the result depends on the values only, not on a reduction tree).
 * `scratch` (of the dtype) holds the peers' contributions to this rank's
 * block (its elements outside holes, c): size - 2 blocks of c when the
 * recv pieces lie outside the send buffer (the first peer's goes straight
 * into them), size - 1 when they are this rank's own block inside it;
 * comm_reduce_scatter_pieces_scratch says how many elements. */
tpdp_status comm_reduce_scatter_pieces_async(
    tpdp_comm *comm, const tpdp_tensor *send, const comm_pieces *send_pieces,
    tpdp_tensor *recv, const comm_pieces *recv_pieces, tpdp_reduce_op op,
    void *scratch, int64_t scratch_elems, tpdp_work **work);
/* The scratch elements it needs: `block` elements outside holes in this
 * rank's block, `recv_in_send`: its recv pieces lie in the send buffer. */
int64_t comm_reduce_scatter_pieces_scratch(const tpdp_comm *comm, int64_t block,
                                           int recv_in_send);

/* ------------------------------------- bounded waits (watchdog.c) */

/* TPDP_TIMEOUT_S in seconds, 0 for no bound (unset: 600; 0 or negative:
 * no bound), as tpdp_init last read it, else read now: the bound of the
 * waits a layer performs itself (the reducer's wait for its thread). */
double comm_timeout_s(void);

/* What a thread of the library's own is (e.g. "the reducer's
 * communication thread"), printed with a timeout on that thread. */
extern CORE_THREAD_LOCAL const char *comm_watch_label
    __attribute__((tls_model("initial-exec"), visibility("hidden")));

/* ----------------------------------------------- meshes (mesh.c)
 *
 * The lifetime link between a mesh and the objects built on it (tp/'s
 * specs, dp/'s reducers on one of its dim communicators). Such an object
 * holds the mesh from its creation to its destruction, and
 * tpdp_mesh_destroy refuses (TPDP_ERR_STATE, naming how many are alive)
 * while any holds it: a spec or reducer can then never outlive its mesh. */

typedef enum { COMM_MESH_SPEC = 0, COMM_MESH_REDUCER = 1 } comm_mesh_user;

/* TPDP_ERR_INVALID_ARGUMENT naming `what` (e.g. "the spec's mesh") when m
 * has been destroyed, as far as its freed memory still shows the cleared
 * magic (reading it is undefined behaviour: a best-effort check). NULL is
 * left to the caller (returns success). */
tpdp_status comm_mesh_check(const tpdp_mesh *m, const char *what);

/* One more / one fewer object of `kind` built on m (thread-safe). */
void comm_mesh_hold(const tpdp_mesh *m, comm_mesh_user kind);
void comm_mesh_release(const tpdp_mesh *m, comm_mesh_user kind);

/* The live mesh that has `c` as one of its dim communicators, held once as
 * `kind`; NULL (nothing held) if `c` is no mesh's dim communicator. */
const tpdp_mesh *comm_mesh_hold_by_comm(const tpdp_comm *c,
                                        comm_mesh_user kind);

/* The mesh's packing space for redistribution (core/mem.h), freed by
 * tpdp_mesh_destroy. Used under the mesh's rule: one thread at a time. */
core_scratch *comm_mesh_scratch(const tpdp_mesh *m);

#ifdef __cplusplus
}
#endif

#endif /* TPDP_COMM_SERVICES_H */
