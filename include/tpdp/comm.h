// SPDX-License-Identifier: BSD-3-Clause
/*
 * tpdp comm: backend-neutral communicators, asynchronous work handles, and
 * the N-D device mesh.
 *
 * Backends: MPI over host memory (always built) and NCCL over CUDA device
 * memory (built with --config=cuda). A communicator serves one kind of
 * memory: tensors handed to an MPI communicator must be on the CPU, those
 * handed to an NCCL communicator on that communicator's GPU.
 *
 * Collectives take tensor views, which must be contiguous. Every collective
 * has an asynchronous form (`_async`) that returns once the operation is
 * queued and gives back a work handle, and a blocking form that returns when
 * the result is in the receive buffer. Buffers must stay valid and untouched
 * until the work completes. All ranks of the communicator must call the same
 * collectives in the same order, in the same form (a blocking call does not
 * match an `_async` one: MPI's rule), with matching counts, dtypes, roots
 * and reduce ops. With TPDP_DEBUG_COLLECTIVES=1 in the environment when a
 * communicator is made, every collective on it first compares these across
 * its ranks and fails on every rank when they differ, listing each rank's
 * call (one small extra allgather per collective; off by default).
 *
 * Thread-safety: one thread at a time per communicator (and per mesh).
 */
#ifndef TPDP_COMM_H
#define TPDP_COMM_H

#include "tpdp/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpdp_comm tpdp_comm; /* opaque */
typedef struct tpdp_work tpdp_work; /* opaque */
typedef struct tpdp_mesh tpdp_mesh; /* opaque */

/* Reduction ops. AVG is SUM divided by the communicator size. MAX and MIN
 * are valid for every dtype; SUM/AVG on u8 wrap modulo 256.
 * MPI backend: a blocking allreduce AVG of f32/f64 of at least 256 KiB
 * (TPDP_MPI_RING_AVG_MIN_BYTES) runs as a ring reduce-scatter + allgather
 * over point-to-point messages whose last reduction step adds and divides
 * in one loop, so averaging costs no pass of its own; other AVG calls are
 * MPI's SUM followed by a division. Results differ from SUM-then-divide
 * only in rounding (summation order), and every rank gets the same. */
typedef enum {
  TPDP_OP_SUM = 0,
  TPDP_OP_AVG = 1,
  TPDP_OP_MAX = 2,
  TPDP_OP_MIN = 3,
  TPDP_OP_COUNT
} tpdp_reduce_op;

/* "sum", "avg", "max", "min" ("?" if bad). */
TPDP_API const char *tpdp_reduce_op_name(tpdp_reduce_op op);

/* ------------------------------------------------------------ life cycle */

/* Initialise tpdp from an `mpirun` launch (or a singleton run): initialises
 * MPI if nobody has, creates the world communicator and sets the log rank.
 * A second call is a no-op returning TPDP_SUCCESS. argc/argv may be NULL. */
TPDP_API tpdp_status tpdp_init(int *argc, char ***argv);
/* Destroy the world communicator and finalise MPI if tpdp initialised it.
 * Objects that use communicators (reducers) must be destroyed first: while
 * one is alive tpdp_finalize does nothing and returns TPDP_ERR_STATE naming
 * them. Communicators and meshes the caller created should be destroyed
 * first too; any left are ended with it: a collective, split or mesh
 * creation on them (or on the old world pointer) returns
 * TPDP_ERR_NOT_INITIALIZED, and they may still be destroyed. */
TPDP_API tpdp_status tpdp_finalize(void);
/* 1 between tpdp_init and tpdp_finalize. */
TPDP_API int tpdp_is_initialized(void);

/* Bounded waits. TPDP_TIMEOUT_S (environment, read by tpdp_init; seconds,
 * default 600; 0 or negative: no bound) bounds every blocking wait:
 *  - MPI communicators: blocking MPI calls are not interrupted (they are
 *    the fast path); a watchdog thread started by tpdp_init (stopped by
 *    tpdp_finalize) watches every collective, split and wait of an async
 *    collective. One blocked longer than the timeout ends the job: the
 *    watchdog prints one message on stderr and calls MPI_Abort (exit code
 *    TPDP_ERR_TIMEOUT, 10), since a thread stuck inside MPI cannot come
 *    back. The message names the public function, the operation and its
 *    sequence number on the communicator (the n-th collective every rank
 *    makes on it), the communicator and its mesh dim, and the ranks that
 *    have not arrived, with what each is doing, e.g.
 *      [rank 0] tpdp ERROR: tpdp_allreduce timed out after 5 s
 *      (TPDP_TIMEOUT_S=5): allreduce f32 x 1048576 #4 on communicator
 *      'mesh.tp' (mesh dim tp), rank 0 of 2, did not complete. Not
 *      arrived: rank 1 has not arrived and is not responding (stopped or
 *      hung: no sign of life for 6 s); it last finished allreduce f32 x
 *      1048576 #3 on 'mesh.tp' and is in no collective. Aborting the job.
 *    Other forms: "rank 1 called barrier #4 instead" (ranks calling
 *    different collectives), "it is in tpdp_finalize", "it is in
 *    allreduce ... #7 on 'mesh.dp' for 5 s". Ranks learn about their peers
 *    through shared memory, so peers on other hosts are "state unknown".
 *  - Waits tpdp performs outside MPI (the reducer's wait for its
 *    communication thread) return TPDP_ERR_TIMEOUT with such a message.
 *  - NCCL communicators: see "No hang on failure" below. */

/* The world communicator (MPI backend, host memory), owned by tpdp: do not
 * destroy it. Errors: TPDP_ERR_NOT_INITIALIZED. */
TPDP_API tpdp_status tpdp_comm_world(tpdp_comm **out);

/* Destroy a communicator made by tpdp_comm_split or tpdp_comm_create_nccl.
 * Outstanding work must have been waited for. NULL is a no-op. Refused with
 * TPDP_ERR_STATE (nothing destroyed) for the communicators tpdp owns: the
 * world (tpdp_finalize destroys it) and a mesh's dim communicators
 * (tpdp_mesh_destroy destroys them). */
TPDP_API tpdp_status tpdp_comm_destroy(tpdp_comm *comm);

TPDP_API int tpdp_comm_rank(const tpdp_comm *comm); /* -1 for NULL */
TPDP_API int tpdp_comm_size(const tpdp_comm *comm); /* 0 for NULL */
/* Human-readable name, e.g. "world", "mesh.dp", "world/split(3)". */
TPDP_API const char *tpdp_comm_name(const tpdp_comm *comm);
/* "mpi" or "nccl". */
TPDP_API const char *tpdp_comm_backend(const tpdp_comm *comm);
/* The kind of memory the communicator moves. */
TPDP_API tpdp_device_type tpdp_comm_device_type(const tpdp_comm *comm);
/* 1 if collectives on different communicators may run at the same time
 * from different threads (MPI initialised with MPI_THREAD_MULTIPLE, which
 * tpdp_init asks for); the same communicator is still one thread at a
 * time. 0 otherwise, and for NULL. */
TPDP_API int tpdp_comm_concurrent_threads(const tpdp_comm *comm);

/* Split by color and key as MPI_Comm_split: ranks with the same color form
 * one new communicator, ordered by key then old rank. color < 0 means "not
 * part of any group" and yields *out = NULL. Collective over `comm`. */
TPDP_API tpdp_status tpdp_comm_split(tpdp_comm *comm, int color, int key,
                                     tpdp_comm **out);

/* Order the communicator's next collectives after the work already queued
 * on `stream` (a cudaStream_t; NULL = the legacy default stream). NCCL: an
 * event is recorded on `stream` and the communicator's stream waits on it,
 * with no host synchronisation. MPI: a no-op (host memory is ready when a
 * collective is called). */
TPDP_API tpdp_status tpdp_comm_order_after(tpdp_comm *comm, void *stream);

/* ------------------------------------------------------------ work */

/* Block until the work has completed, then release the handle (the handle
 * is invalid afterwards, even on error). On an NCCL communicator this waits
 * on the host for the GPU work. Errors: the backend's, or TPDP_ERR_TIMEOUT.
 * NULL is a no-op. */
TPDP_API tpdp_status tpdp_work_wait(tpdp_work *work);
/* Set *done to 1 if the work has completed (its result is in place), else
 * 0; also drives progress. Does not release the handle: call
 * tpdp_work_wait (which then returns at once). */
TPDP_API tpdp_status tpdp_work_test(tpdp_work *work, int *done);
/* NCCL only: make `stream` (a cudaStream_t) wait for the work on the GPU
 * without blocking the host, then release the handle. On an MPI
 * communicator this is tpdp_work_wait. */
TPDP_API tpdp_status tpdp_work_wait_stream(tpdp_work *work, void *stream);

/* ------------------------------------------------------------ collectives
 *
 * In-place rules follow NCCL: an operation is in place when the send and
 * receive views point at the same data (allgather: when send.data equals
 * recv.data + rank * send bytes; reduce_scatter: when recv.data equals
 * send.data + rank * recv bytes). `work` receives the handle of an async
 * call; it must be non-NULL.
 *
 * Errors common to all: NULL comm/tensors, non-contiguous views, send and
 * recv dtypes differing (TPDP_ERR_DTYPE_MISMATCH), counts not as stated
 * (TPDP_ERR_SHAPE_MISMATCH), memory on the wrong device for the backend
 * (TPDP_ERR_DEVICE_MISMATCH), backend failures (TPDP_ERR_MPI/NCCL/CUDA).
 */

/* recv[i] = op over ranks of send[i]. numel(send) == numel(recv). */
TPDP_API tpdp_status tpdp_allreduce(tpdp_comm *comm, const tpdp_tensor *send,
                                    tpdp_tensor *recv, tpdp_reduce_op op);
TPDP_API tpdp_status tpdp_allreduce_async(tpdp_comm *comm,
                                          const tpdp_tensor *send,
                                          tpdp_tensor *recv, tpdp_reduce_op op,
                                          tpdp_work **work);

/* recv = concatenation over ranks (in rank order) of send.
 * numel(recv) == size * numel(send). */
TPDP_API tpdp_status tpdp_allgather(tpdp_comm *comm, const tpdp_tensor *send,
                                    tpdp_tensor *recv);
TPDP_API tpdp_status tpdp_allgather_async(tpdp_comm *comm,
                                          const tpdp_tensor *send,
                                          tpdp_tensor *recv, tpdp_work **work);

/* Reduce send (size equal blocks) over ranks; rank r receives block r.
 * numel(send) == size * numel(recv). */
TPDP_API tpdp_status tpdp_reduce_scatter(tpdp_comm *comm,
                                         const tpdp_tensor *send,
                                         tpdp_tensor *recv, tpdp_reduce_op op);
TPDP_API tpdp_status tpdp_reduce_scatter_async(tpdp_comm *comm,
                                               const tpdp_tensor *send,
                                               tpdp_tensor *recv,
                                               tpdp_reduce_op op,
                                               tpdp_work **work);

/* Copy root's send into every rank's recv. send is read on the root only
 * (may be NULL elsewhere); send == recv (or send NULL on root) is in place.
 * numel(send) == numel(recv) on root. Errors also: root out of range. */
TPDP_API tpdp_status tpdp_broadcast(tpdp_comm *comm, const tpdp_tensor *send,
                                    tpdp_tensor *recv, int root);
TPDP_API tpdp_status tpdp_broadcast_async(tpdp_comm *comm,
                                          const tpdp_tensor *send,
                                          tpdp_tensor *recv, int root,
                                          tpdp_work **work);

/* send is `size` equal blocks; block j goes to rank j, and recv block i
 * comes from rank i. numel(send) == numel(recv), divisible by size.
 * In place (send.data == recv.data) is supported. */
TPDP_API tpdp_status tpdp_alltoall(tpdp_comm *comm, const tpdp_tensor *send,
                                   tpdp_tensor *recv);
TPDP_API tpdp_status tpdp_alltoall_async(tpdp_comm *comm,
                                         const tpdp_tensor *send,
                                         tpdp_tensor *recv, tpdp_work **work);

/* Returns on each rank once all ranks have entered. */
TPDP_API tpdp_status tpdp_barrier(tpdp_comm *comm);
TPDP_API tpdp_status tpdp_barrier_async(tpdp_comm *comm, tpdp_work **work);

/* ------------------------------------------------------------ traffic
 *
 * How many bytes a communicator's collectives made this rank send, and
 * how many of them went to ranks on another host (ranks share a host when
 * they share a host name, as tpdp_comm_local_rank groups them): what a
 * multi-host layout is judged by, as a property of tensor shapes rather
 * than of a clock. Counted on every MPI communicator from tpdp_init on:
 *  - allreduce, allgather, reduce_scatter, broadcast: what a ring moves
 *    for the call, counted when it is issued (MPI chooses its own
 *    algorithms, whose routes tpdp cannot see; the ring is the
 *    bandwidth-optimal schedule, and the one the MPI backend's ring AVG
 *    runs message for message). Over p ranks in rank order, rank r sends
 *    to rank (r + 1) % p: allreduce of n elements, the count split into p
 *    blocks (the first n % p one longer), blocks r - s and r + 1 - s of
 *    rounds s = 0..p-2, 2 (p-1)/p n elements when p divides n;
 *    allgather and reduce_scatter, p - 1 blocks; broadcast, the whole
 *    message, except from the rank before the root (a chain);
 *  - alltoall: block q to rank q;
 *  - the library's own point-to-point messages (the fully sharded units'
 *    collectives over pieces: each rank's block straight to every peer)
 *    at each send, to its destination;
 *  - the reducer's shared-memory buckets move nothing between the ranks
 *    of a host (they read the segment in place); across hosts each local
 *    rank's slice is allreduced with the namesakes on the other hosts,
 *    counted on the reducer's communicator as above (over one rank per
 *    host). On 2 hosts x 2 ranks and n bytes each rank sends n/2 across
 *    (2n in all), where a ring over the four ranks sends 1.5 n from each
 *    of the two ranks whose right neighbour is on the other host (3n): 2/3
 *    of the bytes.
 * Barriers, communicator splits and the library's small agreement
 * exchanges (tpdp_comm_agree, TPDP_DEBUG_COLLECTIVES' fingerprints) are
 * not counted. Sums over time; tpdp_comm_traffic_reset starts again. */
typedef struct {
  uint64_t bytes;            /* sent to other ranks of the communicator */
  uint64_t cross_host_bytes; /* of which to ranks on another host */
} tpdp_comm_traffic;

/* This rank's counts on `comm` so far into *out.
 * Errors: TPDP_ERR_NULL_POINTER, TPDP_ERR_NOT_INITIALIZED (comm ended by
 * tpdp_finalize), TPDP_ERR_UNSUPPORTED (a communicator that does not
 * count: NCCL's, or one made without tpdp_init).
 * Thread-safety: any thread, also while a collective runs (the counts are
 * atomic; a snapshot). */
TPDP_API tpdp_status tpdp_comm_traffic_get(const tpdp_comm *comm,
                                           tpdp_comm_traffic *out);
/* Set this rank's counts on `comm` to zero (local: no collective).
 * Errors: as tpdp_comm_traffic_get. */
TPDP_API tpdp_status tpdp_comm_traffic_reset(tpdp_comm *comm);

/* ------------------------------------------------------------ agreement */

/* Agree on a failure across the ranks of `comm`, so that work failing on
 * some ranks fails every rank alike instead of leaving the others waiting
 * in their next collective. Every rank passes the outcome of its own part,
 * `local_status` (TPDP_SUCCESS when it went well), and every rank returns
 * the same:
 *  - TPDP_SUCCESS when every rank passed TPDP_SUCCESS;
 *  - else the status of the lowest-ranked rank that failed, R, and on
 *    every rank (R included) tpdp_last_error() holds R's message followed
 *    by " (rank R of NAME)", e.g. "tpdp_comm_agree: tpdp_reducer_create:
 *    options->size is 0 (rank 1 of world)".
 * R's message is its `local_message`, or when that is NULL its
 * tpdp_last_error() as it was at the call (the message of the tpdp call
 * that returned local_status), cut to about 860 bytes; when that is empty,
 * "STATUS (no message)". local_message is read only when local_status is
 * a failure; it is copied.
 * tpdp uses this step itself (reducer creation, checkpoint save and load,
 * NCCL communicator creation) and reports its errors the same way.
 *
 * Collective over `comm`: every rank calls it, in the same order as its
 * other collectives on `comm`. Cost: one allreduce of 8 bytes; when a rank
 * failed, also a broadcast of its message (1 KiB). Any backend: on an
 * NCCL communicator the bytes are staged through a small buffer on its
 * GPU, with synchronous copies (the host waits; nothing is queued on a
 * caller's stream). With TPDP_DEBUG_COLLECTIVES the call is compared
 * across ranks like every collective (tpdp_comm_agree against another
 * collective fails on every rank, listing each rank's call).
 *
 * Errors: TPDP_ERR_NULL_POINTER (comm NULL: nothing is exchanged),
 * TPDP_ERR_NOT_INITIALIZED (comm ended by tpdp_finalize), the agreed
 * failure as above; a local_status that is no tpdp_status value counts as
 * a failure of that rank with TPDP_ERR_INVALID_ARGUMENT naming it; if the
 * exchange itself fails, the communicator's error (TPDP_ERR_MPI,
 * TPDP_ERR_NCCL, TPDP_ERR_CUDA, TPDP_ERR_TIMEOUT), which ranks may then
 * not share.
 * Thread-safety: as every collective (one thread at a time per
 * communicator); the message is set on the calling thread
 * (tpdp_last_error is per thread). */
TPDP_API tpdp_status tpdp_comm_agree(tpdp_comm *comm, tpdp_status local_status,
                                     const char *local_message);

/* ------------------------------------------------------------ device mesh
 *
 * World ranks laid out row-major in an N-D array with named dims: for sizes
 * (d0, d1, ..., dn-1) rank = ((c0 * d1) + c1) * d2 + ... . Each dim k has a
 * sub-communicator joining the ranks whose coordinates differ only in k; its
 * rank equals the coordinate c_k.
 */

/* Parse "dp=2,tp=2" into names and sizes. names[i] receives pointers into
 * `storage` (at least strlen(text)+1 bytes). Errors: TPDP_ERR_PARSE on
 * malformed text, TPDP_ERR_TOO_MANY_DIMS, TPDP_ERR_BAD_DIM_SIZE,
 * TPDP_ERR_EMPTY_NAME, TPDP_ERR_DUPLICATE. */
TPDP_API tpdp_status tpdp_mesh_parse(const char *text, char *storage, int *ndim,
                                     int64_t sizes[TPDP_MAX_DIMS],
                                     const char *names[TPDP_MAX_DIMS]);

/* Create a mesh over `comm` (NULL: a layout-only mesh with no
 * communicators, for planning tools). names may be NULL (dims are then
 * named "d0", "d1", ...). On success *out owns one sub-communicator per dim;
 * free it with tpdp_mesh_destroy. Collective over `comm`: the ranks first
 * agree on the dims (one small allgather), and ranks passing different
 * sizes or names all fail with TPDP_ERR_MESH_MISMATCH naming each rank's
 * mesh ("rank 0 passed dp=2,tp=2, ranks 1-3 dp=4"); a rank whose own
 * arguments fail makes every rank fail.
 * Errors: TPDP_ERR_NULL_POINTER, TPDP_ERR_TOO_MANY_DIMS (ndim < 1 or > 8 is
 * TPDP_ERR_INVALID_ARGUMENT / TOO_MANY_DIMS), TPDP_ERR_BAD_DIM_SIZE,
 * TPDP_ERR_EMPTY_NAME, TPDP_ERR_DUPLICATE, TPDP_ERR_MESH_SIZE (product of
 * sizes != comm size), TPDP_ERR_MESH_MISMATCH (ranks passed different
 * meshes), TPDP_ERR_NOT_INITIALIZED (comm ended by tpdp_finalize). */
TPDP_API tpdp_status tpdp_mesh_create(tpdp_comm *comm, int ndim,
                                      const int64_t *sizes,
                                      const char *const *names,
                                      tpdp_mesh **out);
/* Parse and create in one call ("dp=2,tp=2"). */
TPDP_API tpdp_status tpdp_mesh_create_from_string(tpdp_comm *comm,
                                                  const char *text,
                                                  tpdp_mesh **out);
/* Destroys the sub-communicators (not the parent comm) and frees the mesh,
 * all of them even when one fails; call it on every rank (MPI_Comm_free
 * and ncclCommFinalize are collective). NULL is a no-op returning
 * TPDP_SUCCESS.
 * Lifetime: specs (tpdp_spec_create, also those a parallelized module
 * keeps until tpdp_module_destroy) and reducers created on one of the
 * mesh's dim communicators hold the mesh; while any lives, destroy fails
 * with TPDP_ERR_STATE naming how many specs and reducers, and destroys
 * nothing: destroy them first. So no spec or reducer ever sees its mesh
 * freed. A mesh already destroyed, passed to this or to the mesh calls
 * returning a status (or to tpdp_spec_create), gives
 * TPDP_ERR_INVALID_ARGUMENT ("has been destroyed"), as far as that goes:
 * the check reads a magic field cleared by destroy in freed memory, which
 * is undefined behaviour and may miss (it catches the common double
 * destroy; never rely on it). Also frees the packing space that
 * tpdp_redistribute keeps on the mesh. Errors: those, then the first
 * failing tpdp_comm_destroy's. */
TPDP_API tpdp_status tpdp_mesh_destroy(tpdp_mesh *mesh);

TPDP_API int tpdp_mesh_ndim(const tpdp_mesh *mesh);
TPDP_API int64_t tpdp_mesh_size(const tpdp_mesh *mesh); /* product of dims */
TPDP_API int64_t tpdp_mesh_dim_size(const tpdp_mesh *mesh, int dim);
TPDP_API const char *tpdp_mesh_dim_name(const tpdp_mesh *mesh, int dim);
/* Index of a named dim, or -1. */
TPDP_API int tpdp_mesh_dim_index(const tpdp_mesh *mesh, const char *name);
/* This process's rank in the mesh (-1 for a layout-only mesh). */
TPDP_API int tpdp_mesh_rank(const tpdp_mesh *mesh);
/* The parent communicator (NULL for a layout-only mesh). */
TPDP_API tpdp_comm *tpdp_mesh_comm(const tpdp_mesh *mesh);
/* 1 if both have the same dims (sizes and names) and the same parent. */
TPDP_API int tpdp_mesh_equal(const tpdp_mesh *a, const tpdp_mesh *b);

/* Coordinates of `rank` (coords has ndim entries). Errors: rank range. */
TPDP_API tpdp_status tpdp_mesh_coords(const tpdp_mesh *mesh, int rank,
                                      int64_t *coords);
/* Rank at `coords`. Errors: a coordinate out of range. */
TPDP_API tpdp_status tpdp_mesh_rank_of(const tpdp_mesh *mesh,
                                       const int64_t *coords, int *rank);
/* The world ranks of the group of `rank` along `dim`, in group-rank order
 * (ranks has dim_size entries). */
TPDP_API tpdp_status tpdp_mesh_group_ranks(const tpdp_mesh *mesh, int dim,
                                           int rank, int *ranks);
/* The sub-communicator of dim `dim`, owned by the mesh (tpdp_comm_destroy
 * refuses it). Errors: dim out of range, TPDP_ERR_STATE for a layout-only
 * mesh. */
TPDP_API tpdp_status tpdp_mesh_dim_comm(const tpdp_mesh *mesh, int dim,
                                        tpdp_comm **out);
/* Same, by name. Errors also TPDP_ERR_NOT_FOUND naming the dim. */
TPDP_API tpdp_status tpdp_mesh_dim_comm_by_name(const tpdp_mesh *mesh,
                                                const char *name,
                                                tpdp_comm **out);

/* ------------------------------------------------------------ NCCL
 *
 * The NCCL backend moves CUDA device memory. It is compiled in with
 * `bazel build --config=cuda`; in a build without it every function below
 * still exists and reports TPDP_ERR_UNSUPPORTED ("built without
 * --config=cuda"), tpdp_nccl_available() returns 0.
 *
 * Streams: each NCCL communicator owns a non-blocking CUDA stream, created
 * with it; collectives are queued on that stream. Use
 * tpdp_comm_order_after(comm, s) to order them after compute queued on `s`,
 * and tpdp_work_wait_stream(work, s) to order compute on `s` after them,
 * both without a host synchronisation. tpdp_work_wait blocks the host.
 *
 * No hang on failure: communicators are non-blocking (ncclConfig_t
 * blocking = 0). Every wait polls ncclCommGetAsyncError; when an operation
 * has not completed within TPDP_TIMEOUT_S seconds (environment, read when
 * the communicator is created; default 600; 0 or negative: no bound) the
 * communicator is aborted
 * (ncclCommAbort) and the wait returns TPDP_ERR_TIMEOUT naming the
 * operation and the communicator. An aborted communicator refuses further
 * collectives with TPDP_ERR_STATE; destroy it.
 *
 * Reductions: f16 and bf16 natively (ncclFloat16, ncclBfloat16), AVG as
 * ncclAvg. alltoall is grouped ncclSend/ncclRecv; barrier is a one-element
 * allreduce. In-place rules are those stated above (NCCL's). Device buffers
 * must be on the communicator's GPU (tpdp_comm_cuda_device).
 */

/* 1 if this build has the NCCL backend (--config=cuda), else 0. */
TPDP_API int tpdp_nccl_available(void);

/* Number of CUDA devices visible to this process.
 * Errors: TPDP_ERR_CUDA (cudaGetDeviceCount failed, e.g. no driver or no
 * GPU: the message carries CUDA's error string), TPDP_ERR_UNSUPPORTED. */
TPDP_API tpdp_status tpdp_cuda_device_count(int *count);

/* Create an NCCL communicator over the ranks of `bootstrap`, a host-memory
 * communicator (e.g. tpdp_comm_world); NULL makes a single-rank
 * communicator and needs no MPI at all. Collective over `bootstrap`.
 *
 * device: the CUDA ordinal to use, or -1 to pick one from the host-local
 * rank (local rank r uses GPU r; see tpdp_comm_local_rank). With -1, more
 * ranks on a host than visible GPUs is TPDP_ERR_INVALID_ARGUMENT on every
 * rank: NCCL cannot put two ranks of a communicator on one GPU.
 * The calling thread's current device is set to it. Rank 0 creates the
 * NCCL unique id and broadcasts it over `bootstrap`.
 * *out: the new communicator (rank and size those of `bootstrap`), named
 * "nccl(<bootstrap name>)" or "nccl"; destroy with tpdp_comm_destroy.
 * Errors: TPDP_ERR_NULL_POINTER, TPDP_ERR_INVALID_ARGUMENT (device out of
 * range, more local ranks than GPUs, bootstrap not a host-memory
 * communicator), TPDP_ERR_CUDA,
 * TPDP_ERR_NCCL, TPDP_ERR_TIMEOUT (initialisation did not finish), the
 * bootstrap communicator's errors, TPDP_ERR_UNSUPPORTED. */
TPDP_API tpdp_status tpdp_comm_create_nccl(tpdp_comm *bootstrap, int device,
                                           tpdp_comm **out);

/* The communicator's CUDA stream (a cudaStream_t), or NULL for a
 * communicator of another backend. Owned by the communicator. */
TPDP_API void *tpdp_comm_nccl_stream(const tpdp_comm *comm);

/* The CUDA ordinal of an NCCL communicator, -1 for other backends. */
TPDP_API int tpdp_comm_cuda_device(const tpdp_comm *comm);

/* Host-local ranks, as MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) groups
 * them: ranks of `comm` on the same host (same gethostname) are numbered
 * 0..local_size-1 in rank order. Collective over `comm` (a host-memory
 * communicator; NULL = a single rank: 0 of 1). Works in every build. */
TPDP_API tpdp_status tpdp_comm_local_rank(tpdp_comm *comm, int *local_rank,
                                          int *local_size);

#ifdef __cplusplus
}
#endif
#endif /* TPDP_COMM_H */
