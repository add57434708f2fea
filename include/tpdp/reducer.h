// SPDX-License-Identifier: BSD-3-Clause
/*
 * tpdp reducer: DDP-style gradient bucketing and asynchronous reduction over
 * the data-parallel (DP) communicator (dp/).
 *
 * Two parts:
 *  1. tpdp_bucket_assign: the bucket assignment of PyTorch DDP
 *     (compute_bucket_assignment_by_size), usable on its own (the `tpdp
 *     buckets` CLI prints it).
 *  2. tpdp_reducer: gradients of the local parameters, grouped into buckets
 *     with one contiguous buffer each; when every gradient of a bucket has
 *     been marked ready, that bucket's allreduce starts asynchronously.
 *
 * Life cycle of a training step:
 *
 *   tpdp_reducer_create(dp_comm, params, n, &opts, &r);    once
 *   loop:
 *     tpdp_reducer_prepare(r);           start of backward (or of the step)
 *     ... backward; for each gradient:   tpdp_reducer_mark_ready(r, i);
 *     tpdp_reducer_finalize(r);          waits; gradients are now averaged
 *     optimizer step
 *   tpdp_reducer_destroy(r);
 *
 * The reducer knows nothing of DTensors: it sees plain local tensors.
 * Thread-safety: one thread at a time per reducer (and its communicator;
 * with a module, the module's tree).
 * Error contract: as stated in tpdp/core.h.
 */
#ifndef TPDP_REDUCER_H
#define TPDP_REDUCER_H

#include "tpdp/comm.h"
#include "tpdp/core.h"
#include "tpdp/module.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------ bucket assignment */

/* DDP's default limits: the first bucket 1 MiB, every later one 25 MiB. */
#define TPDP_BUCKET_FIRST_BYTES ((size_t)1048576)
#define TPDP_BUCKET_CAP_BYTES ((size_t)26214400)

/* Result of tpdp_bucket_assign. Bucket b holds the tensor indices
 * indices[offsets[b]] .. indices[offsets[b+1]-1], in the order they were
 * walked; bytes[b] is the sum of their sizes and limits[b] the size limit
 * that was in force for the bucket. Free with tpdp_bucket_assignment_free. */
typedef struct {
  int64_t nbuckets;
  int64_t *offsets; /* nbuckets + 1 entries */
  int64_t *indices; /* ntensors entries */
  size_t *bytes;    /* nbuckets entries */
  size_t *limits;   /* nbuckets entries */
} tpdp_bucket_assignment;

/*
 * Assign tensors to buckets exactly as PyTorch's
 * compute_bucket_assignment_by_size:
 *  - tensors are walked in order (tensors[order[0]], tensors[order[1]], ...
 *    when `order` is given, else tensors[0], tensors[1], ...);
 *  - one bucket is open per key (dtype, device); the tensor joins the open
 *    bucket of its key;
 *  - every key has its own position in `limits`, starting at limits[0]; a
 *    bucket closes as soon as its bytes reach (>=) the key's current limit,
 *    so it can overshoot by one tensor; closing advances the key to the next
 *    limit, and the key stays on the last one;
 *  - buckets still open at the end are appended, in order of their key's
 *    first appearance (PyTorch uses hash-map order here);
 *  - without `order`, buckets are sorted by the smallest tensor index they
 *    hold; with `order`, they stay in the order they closed.
 * Only dtype, device and shape of the tensors are read (data may be NULL).
 * `order`, if not NULL, must be a permutation of 0..ntensors-1.
 * On success *out owns arrays; free with tpdp_bucket_assignment_free.
 * Errors: TPDP_ERR_NULL_POINTER; TPDP_ERR_INVALID_ARGUMENT for ntensors == 0
 * ("empty tensor list"), nlimits == 0 ("empty limit list"), a limit of 0
 * (naming its index), or an `order` that is not a permutation;
 * TPDP_ERR_DTYPE_MISMATCH for a bad dtype; TPDP_ERR_OUT_OF_MEMORY. */
TPDP_API tpdp_status tpdp_bucket_assign(const tpdp_tensor *tensors,
                                        int64_t ntensors, const size_t *limits,
                                        int64_t nlimits, const int64_t *order,
                                        tpdp_bucket_assignment *out);

/* Free the arrays of an assignment and zero it. NULL is a no-op. */
TPDP_API void tpdp_bucket_assignment_free(tpdp_bucket_assignment *a);

/* Reverse the bucket order of an assignment in place: bucket j becomes
 * bucket nbuckets-1-j, with its indices (in the order they were walked),
 * bytes and limit. DDP launches its buckets in this reversed order (the
 * gradients of the last-registered parameters are ready first), as the
 * reducer does after tpdp_bucket_assign. An empty assignment (nbuckets 0)
 * is left as it is. Allocates nothing. Errors: TPDP_ERR_NULL_POINTER (a
 * NULL assignment, or NULL arrays with nbuckets > 0),
 * TPDP_ERR_INVALID_ARGUMENT (nbuckets < 0); on error *a is unchanged.
 * Thread-safety: none needed beyond exclusive access to *a. */
TPDP_API tpdp_status tpdp_bucket_assignment_reverse(tpdp_bucket_assignment *a);

/* ---------------------------------------------------------------- reducer */

typedef struct tpdp_reducer tpdp_reducer; /* opaque */

/* One local parameter. `param` is the parameter tensor (contiguous, float
 * dtype); `grad` its gradient (same shape and dtype). `fqn` (may be NULL) is
 * copied and used in messages. */
typedef struct {
  tpdp_tensor param;
  tpdp_tensor grad;
  const char *fqn;
} tpdp_reducer_param;

/* Communication hooks: what happens to a bucket once it is ready. */
typedef enum {
  /* divide by divide_factor, allreduce SUM in the bucket's dtype. On the
   * host (MPI) with the communication thread, f32/f64 buckets whose
   * divide_factor is the communicator size (the default) instead run one
   * allreduce AVG, which the MPI backend folds into its reduction (see
   * TPDP_OP_AVG in tpdp/comm.h): no separate division pass. */
  TPDP_REDUCER_HOOK_NONE = 0,
  /* divide, cast to bf16, allreduce SUM in bf16, cast back */
  TPDP_REDUCER_HOOK_BF16 = 1,
  /* divide, cast to f16, allreduce SUM in f16, cast back */
  TPDP_REDUCER_HOOK_F16 = 2,
  /* call options.hook_fn (see tpdp_reducer_hook_fn) */
  TPDP_REDUCER_HOOK_USER = 3
} tpdp_reducer_hook;

/* Arguments of a user hook: `flat` is the bucket's whole contiguous buffer
 * (host memory on MPI, device memory on NCCL; 1-D, the bucket's dtype),
 * holding this rank's gradients. */
typedef struct {
  tpdp_comm *comm;      /* the reducer's communicator */
  int64_t bucket;       /* bucket index (launch order) */
  tpdp_tensor *flat;    /* the bucket buffer: read and overwrite in place */
  double divide_factor; /* what the built-in hooks would divide by */
  void *user_data;      /* options.hook_user_data */
} tpdp_reducer_hook_args;

/* A user hook is called synchronously when its bucket is launched (in
 * bucket order, from tpdp_reducer_mark_ready or tpdp_reducer_finalize) and
 * must leave the final (e.g. averaged) gradients in args->flat before it
 * returns, e.g. with tpdp_allreduce then a division. A non-success status
 * is returned by the reducer call that launched the bucket. */
typedef tpdp_status (*tpdp_reducer_hook_fn)(const tpdp_reducer_hook_args *args);

/* Options of tpdp_reducer_create, versioned as NCCL's ncclConfig_t: the
 * struct carries its own size and version first, so that a program built
 * against an older (smaller) tpdp_reducer_options keeps working with a newer
 * library. Initialise with TPDP_REDUCER_OPTIONS_INIT (or
 * tpdp_reducer_options_default()), then set fields:
 *
 *   tpdp_reducer_options o = TPDP_REDUCER_OPTIONS_INIT;
 *   o.bucket_cap_bytes = 50u << 20;
 *
 * New fields are only ever appended. */
typedef struct {
  size_t size;      /* sizeof(tpdp_reducer_options) where it was compiled */
  unsigned version; /* TPDP_REDUCER_OPTIONS_VERSION where it was compiled */
  /* Bucket size limits: the first bucket, then every later one (> 0). */
  size_t first_bucket_bytes; /* default TPDP_BUCKET_FIRST_BYTES (1 MiB) */
  size_t bucket_cap_bytes;   /* default TPDP_BUCKET_CAP_BYTES (25 MiB) */
  /* 1 (default): gradients live inside the bucket buffers; the reducer
   * re-points params[i].grad (and tpdp_reducer_grad_view) at them, and the
   * framework must write gradients there. 0: copy mode; gradients are copied
   * into the buckets at launch and the averages copied back at finalize. */
  int gradient_as_bucket_view;
  /* 1: parameters not marked by finalize are treated as unused: they
   * contribute zero (unless accumulated in no_sync steps) and are reported
   * (tpdp_reducer_unused_params, INFO log). 0 (default): finalize fails. */
  int find_unused_parameters;
  /* 1: the set of gradients and how often each hook fires are the same in
   * every iteration. The first iteration only records them (reductions run
   * at its finalize); later ones may mark a parameter several times
   * (reentrant backward, shared parameters): it is ready at its last mark.
   * Never-marked parameters are treated as unused (zero). */
  int static_graph;
  tpdp_reducer_hook comm_hook; /* default TPDP_REDUCER_HOOK_NONE */
  /* Gradients are divided by this (finite, >= 0); 0 (default) = the
   * communicator size. */
  double divide_factor;
  tpdp_reducer_hook_fn hook_fn; /* for TPDP_REDUCER_HOOK_USER */
  void *hook_user_data;
  /* NCCL: the cudaStream_t producing the gradients; each bucket's
   * reduction is ordered after it (tpdp_comm_order_after). NULL = the legacy
   * default stream. Ignored on MPI. */
  void *producer_stream;
  /* 1 (default): on a host (MPI) communicator of two or more ranks that
   * allows collectives from two threads (tpdp_comm_concurrent_threads), a
   * launched bucket's allreduce runs on the reducer's own communication
   * thread, so it progresses while the caller's thread goes on with
   * backward (Open MPI's non-blocking collectives progress only inside MPI
   * calls). Between the first launch of an iteration and
   * tpdp_reducer_finalize, the caller must not issue collectives on the
   * reducer's communicator itself (other communicators, e.g. the TP one,
   * are fine). Not used with a user hook, which always runs on the caller's
   * thread. 0: non-blocking collectives from the caller's thread. Ignored
   * on NCCL (streams are asynchronous). */
  int comm_thread;
  /* The model's root module (borrowed: it must outlive the reducer), or
   * NULL (default) for no training-state tracking. With a module, as
   * PyTorch FSDP's training states: tpdp_reducer_prepare requires the
   * module IDLE or FORWARD_BACKWARD and sets FORWARD_BACKWARD (the TP+DP
   * forward hooks set it at the first forward of a step);
   * tpdp_reducer_finalize requires FORWARD_BACKWARD and sets IDLE when the
   * iteration ends (also in a no_sync step); mark_ready(_ptr) and finalize
   * refuse to run inside the module's forward, where its parameters are
   * DTensors. Forwards without a backward (evaluation) and forwards
   * recomputed during backward (activation checkpointing) are fine. */
  struct tpdp_module *module;
  /* (version 2) 0 (default): tpdp_reducer_create compares a checksum of
   * every parameter's values across the communicator's ranks and fails,
   * naming the first parameter that differs and the ranks, when they do
   * not hold the same values: a reducer averages over ranks that are
   * replicas, and parameters that differ mean the wrong communicator (the
   * mesh's TP dim, along which they are sharded) or replicas initialised
   * differently. 1: copy rank 0's values to the other ranks instead (the
   * ranks initialised their replicas independently; DDP's behaviour). A
   * caller built against version 1 (a smaller struct, without this field)
   * keeps version 1's behaviour: 1. */
  int broadcast_from_rank0;
} tpdp_reducer_options;

/* Version of the struct above; grows when fields are appended. */
#define TPDP_REDUCER_OPTIONS_VERSION 2u

/* The documented defaults (designated initialisers: C99/C11, C++20), one
 * field a line. */
/* clang-format off */
#define TPDP_REDUCER_OPTIONS_INIT                   \
  {                                                 \
    .size = sizeof(tpdp_reducer_options),           \
    .version = TPDP_REDUCER_OPTIONS_VERSION,        \
    .first_bucket_bytes = TPDP_BUCKET_FIRST_BYTES,  \
    .bucket_cap_bytes = TPDP_BUCKET_CAP_BYTES,      \
    .gradient_as_bucket_view = 1,                   \
    .find_unused_parameters = 0,                    \
    .static_graph = 0,                              \
    .comm_hook = TPDP_REDUCER_HOOK_NONE,            \
    .divide_factor = 0.0,                           \
    .hook_fn = NULL,                                \
    .hook_user_data = NULL,                         \
    .producer_stream = NULL,                        \
    .comm_thread = 1,                               \
    .module = NULL,                                 \
    .broadcast_from_rank0 = 0,                      \
  }
/* clang-format on */

/* The defaults listed above: the same as TPDP_REDUCER_OPTIONS_INIT. */
TPDP_API tpdp_reducer_options tpdp_reducer_options_default(void);

/*
 * Create a reducer over `nparams` local parameters and a communicator
 * (normally the mesh's "dp" sub-communicator; never the TP one).
 * Collective over `comm`. It:
 *  - checks the options and the parameters locally and sets up its buckets,
 *    then agrees with the other ranks that all succeeded (a rank whose own
 *    part succeeded returns the failing rank's status with a message naming
 *    that rank);
 *  - checks that every rank passed the same options where they change what
 *    is communicated or computed (first_bucket_bytes, bucket_cap_bytes,
 *    gradient_as_bucket_view, find_unused_parameters, static_graph,
 *    comm_hook, divide_factor, comm_thread, broadcast_from_rank0; not the
 *    local pointers hook_fn, hook_user_data, producer_stream, module), else
 *    fails on every rank naming the option and each rank's value;
 *  - checks that every rank has the same parameter count, shapes and
 *    dtypes, else fails on every rank naming the first mismatching
 *    parameter (index and FQN) and the two ranks;
 *  - with options->broadcast_from_rank0, broadcasts the parameters' values
 *    from rank 0 of `comm`; otherwise compares a checksum (xxHash) of each
 *    parameter's values across the ranks and fails on every rank, naming
 *    the first differing parameter (index and FQN), the ranks whose values
 *    differ from rank 0's and the communicator to use, when they differ:
 *    parameters that differ along `comm` mean it is not a DP communicator
 *    (e.g. the mesh's TP dim, along which they are sharded) or that the
 *    replicas were initialised apart. Cost: one pass over the parameters'
 *    bytes (device parameters are copied to the host for it) and one
 *    allreduce of 16 bytes per parameter, at create only;
 *  - assigns buckets as DDP: tpdp_bucket_assign over the parameters in
 *    registration order with limits {first, cap}, then the list reversed, so
 *    the bucket of the last-registered parameters launches first;
 *  - in view mode copies each current gradient into its bucket slot and
 *    re-points the caller's params[i].grad at the slot.
 * Ownership: the reducer copies the `params` array (and the FQNs) and
 * never reads the caller's array again. In copy mode it may be freed once
 * create returns. In view mode create writes the slots' views into its
 * params[i].grad and destroy writes the caller's own gradient tensors back
 * there, so the array must stay allocated until destroy (its contents may
 * change). The tensors' memory is borrowed: parameter data must stay valid
 * until destroy, and so must the caller's gradient buffers (copy mode:
 * gradients are copied from and to them; view mode: their values are
 * copied into the slots at create and back at destroy). The slot views
 * (params[i].grad as re-pointed, tpdp_reducer_grad_view) become invalid
 * when the buckets are rebuilt (read them again, see tpdp_reducer_prepare)
 * and at destroy. A create that fails leaves params[i].grad as it was.
 * The communicator must outlive the reducer; a mesh whose dim communicator
 * it is refuses to be destroyed while the reducer lives (TPDP_ERR_STATE,
 * see tpdp_mesh_destroy).
 * `options` may be NULL (defaults); otherwise options->size decides which
 * fields are read: a smaller size (an older header) takes the fields that
 * lie wholly within it and the defaults for the rest.
 * On a communicator of one rank nothing is communicated: no communication
 * thread, no collectives, no rebuild, and no averaging pass when the divide
 * factor is 1 (the default there).
 * With a communication thread on an MPI communicator whose ranks run two
 * or more to a host, as many on every host, the buckets are made in memory
 * each host's ranks share (a POSIX shared-memory segment per host;
 * collective, at create) and reduced there directly instead of through
 * MPI; TPDP_SHM=0 (on any rank) keeps them in the reducer's own memory.
 * The grad views then point into that segment. On several hosts the
 * reduction is hierarchical: each host's ranks sum their buffers in the
 * segment, each local rank allreduces its slice of that sum over MPI with
 * the same local rank of the other hosts, and writes the result into its
 * host's buffers. Numerical guarantee (f32/f64 SUM and AVG buckets): on one
 * host the sum is taken in rank order, on several each host's sum in
 * local-rank order and then the hosts' sums in MPI's order, so results are
 * bit-identical to another run or path wherever that summation order is the
 * same (with two hosts always to ((g0 + g1) + (g2 + g3)) for 2 x 2 ranks);
 * against the flat MPI path (TPDP_SHM=0, MPI's order) they differ by at
 * most 1e-6 of the sum of the ranks' magnitudes (f32; tested on 2 hosts x 2
 * ranks, tests/multihost/shm_hier_test.cc). Ranks on hosts with unequal
 * counts, or one per host, take the flat MPI path.
 * On success *out must be freed with tpdp_reducer_destroy.
 * Errors: TPDP_ERR_NULL_POINTER; TPDP_ERR_INVALID_ARGUMENT (options->size 0
 * or larger than this library's struct, naming both sizes; an unknown
 * options->version; empty parameter list, limits of 0, negative or
 * non-finite divide factor, non-contiguous parameter, user hook without
 * hook_fn, bad hook; options that differ across the ranks; parameter values
 * that differ across the ranks without broadcast_from_rank0);
 * TPDP_ERR_DUPLICATE (the same parameter data twice);
 * TPDP_ERR_DEVICE_MISMATCH (parameters on different devices, or memory the
 * communicator cannot move); TPDP_ERR_UNSUPPORTED (device parameters in a
 * build without CUDA); TPDP_ERR_SHAPE_MISMATCH / TPDP_ERR_DTYPE_MISMATCH
 * (grad unlike its param, non-float dtype, or ranks disagreeing);
 * TPDP_ERR_OUT_OF_MEMORY; communicator errors.
 */
TPDP_API tpdp_status tpdp_reducer_create(tpdp_comm *comm,
                                         tpdp_reducer_param *params,
                                         int64_t nparams,
                                         const tpdp_reducer_options *options,
                                         tpdp_reducer **out);

/* Wait for reductions still in flight (this blocks if other ranks never
 * launched them), stop the communication thread, free the buffers and the
 * reducer. In view mode, before the buckets go, each gradient's current
 * value is copied into the caller's own buffer (the params[i].grad given
 * to create; a NULL one stays NULL) and the caller's params[i].grad points
 * at that buffer again, so nothing points into freed memory and a reducer
 * can be created again from the same array. Everything is freed even when
 * something fails; the first failure is returned (e.g. a reduction of an
 * iteration that was never finalized failed). Does not touch the options'
 * module. NULL is a no-op.
 * A destroyed reducer passed to any tpdp_reducer_* call (destroy included)
 * gives TPDP_ERR_INVALID_ARGUMENT ("has been destroyed"), as far as that
 * goes: the check reads a magic field cleared by destroy in memory that has
 * been freed, which is undefined behaviour and may miss (never rely on it;
 * it catches the common double destroy). The accessors that return no
 * status give 0. */
TPDP_API tpdp_status tpdp_reducer_destroy(tpdp_reducer *r);

/* Start an iteration (call before backward). After the first synchronised
 * iteration, the first prepare rebuilds the buckets once in the observed
 * gradient-ready order of rank 0 (broadcast; collective over the comm)
 * unless find_unused_parameters is set without static_graph (as DDP) or the
 * communicator has one rank; in view mode the gradients move into the new
 * buffers (values kept; the memory was set aside at create): read the grad
 * views again (tpdp_reducer_rebuilt tells whether it happened). A prepare
 * that fails changes nothing (a failed rebuild fails on every rank and is
 * tried again by the next prepare).
 * Errors: TPDP_ERR_STATE when the previous iteration's reduction has not
 * finished (naming the parameters never marked ready), or when the
 * options' module is not IDLE or FORWARD_BACKWARD (naming the expected and
 * actual states); TPDP_ERR_OUT_OF_MEMORY and communicator errors of the
 * rebuild. */
TPDP_API tpdp_status tpdp_reducer_prepare(tpdp_reducer *r);

/* Mark parameter `index`'s gradient ready (call from the gradient hook once
 * the gradient is written). When every gradient of the next bucket in
 * launch order is ready, its reduction starts asynchronously (buckets launch
 * in order; a later bucket that is ready waits for the earlier ones). Also
 * tests in-flight reductions to drive MPI progress. In a no_sync step it
 * only records the mark. Cost: O(1) outside the launch of a bucket.
 * Errors: TPDP_ERR_NOT_FOUND (index outside [0, nparams)); TPDP_ERR_STATE
 * (no prepare; inside the options' module's forward); TPDP_ERR_ALREADY
 * (marked twice in one iteration: the message names the parameter and the
 * likely causes); these leave the iteration as it was. A failed launch or
 * progress (user hook, communicator, memory) abandons the iteration: what
 * was started is waited for, no gradient counts as accumulated, the module
 * (if any) goes back to IDLE, and the next call is tpdp_reducer_prepare. */
TPDP_API tpdp_status tpdp_reducer_mark_ready(tpdp_reducer *r, int64_t index);

/* Same, finding the parameter by its data pointer (params[i].param.data),
 * in O(log n). Errors: TPDP_ERR_NOT_FOUND for an unknown pointer. */
TPDP_API tpdp_status tpdp_reducer_mark_ready_ptr(tpdp_reducer *r,
                                                 const void *data);

/* End the iteration: in find_unused / static-graph mode treat unmarked
 * parameters as unused, launch the remaining buckets, wait for all, and
 * leave the averaged gradients (divided by divide_factor, or as the comm
 * hook does) in the grad views (copied back in copy mode). In a no_sync step
 * it only ends the iteration: the gradients stay local and keep
 * accumulating until the next synchronised step reduces the sum. With the
 * options' module, sets it IDLE when the iteration ends.
 * Errors: TPDP_ERR_STATE (finalize without prepare, naming the expected
 * and actual state; the module not in FORWARD_BACKWARD, or inside its
 * forward; parameters never marked without find_unused_parameters, named:
 * in these cases the reducer stays in the iteration so they can still be
 * marked); communicator and hook errors (the iteration ends);
 * TPDP_ERR_STATE in view mode with the options' module when a module
 * parameter that is one of the reducer's (same data pointer at create) has
 * a gradient (tpdp_param_grad) other than its reducer view, naming it: that
 * gradient was left out of the reduction (the reduction itself completed
 * and the iteration ended, as on the other ranks). */
TPDP_API tpdp_status tpdp_reducer_finalize(tpdp_reducer *r);

/* no_sync: sync = 0 makes the following iterations accumulate gradients
 * locally (nothing is communicated); sync = 1 (default) makes the next
 * iteration reduce the accumulated sum. Errors: TPDP_ERR_STATE inside an
 * iteration (between prepare and finalize). */
TPDP_API tpdp_status tpdp_reducer_set_sync(tpdp_reducer *r, int sync);

/* The current gradient view of parameter `index` (in view mode a slice of
 * its bucket buffer, moved by a rebuild; in copy mode the caller's
 * gradient as given to create). Errors: TPDP_ERR_NOT_FOUND, NULL
 * pointers. */
TPDP_API tpdp_status tpdp_reducer_grad_view(const tpdp_reducer *r,
                                            int64_t index, tpdp_tensor *out);

/* Number of buckets (0 for NULL). */
TPDP_API int64_t tpdp_reducer_num_buckets(const tpdp_reducer *r);

/* Bucket `bucket` in launch order: its parameter indices (owned by the
 * reducer, valid until the next rebuild or destroy), their count, bytes and
 * size limit. Any out pointer may be NULL. Errors: TPDP_ERR_NOT_FOUND. */
TPDP_API tpdp_status tpdp_reducer_bucket(const tpdp_reducer *r, int64_t bucket,
                                         const int64_t **params, int64_t *count,
                                         size_t *bytes, size_t *limit);

/* Parameters treated as unused by the last synchronised finalize (in
 * ascending order; owned by the reducer, valid until the next finalize). */
TPDP_API tpdp_status tpdp_reducer_unused_params(const tpdp_reducer *r,
                                                const int64_t **params,
                                                int64_t *count);

/* 1 once the buckets have been rebuilt in gradient-ready order. */
TPDP_API int tpdp_reducer_rebuilt(const tpdp_reducer *r);

/* Where the reducer's time went, accumulated since creation. total covers
 * everything inside prepare, mark_ready(_ptr) and finalize; comm and data
 * are the parts spent in collectives (launch, test, wait) and in passes
 * over bucket data (divide, cast, copy, zero; for device buckets also
 * finalize's wait for the stream, which includes the device work queued
 * before those passes, the backward's too). total - comm - data is
 * tpdp's own bookkeeping. With a communication thread (options.comm_thread)
 * the averaging pass (where there is one) runs on that thread, and the
 * caller's time waiting for it counts as comm. */
typedef struct {
  double total_seconds;
  double comm_seconds;
  double data_seconds;
  int64_t iterations; /* successful finalize calls */
} tpdp_reducer_stats;

TPDP_API tpdp_status tpdp_reducer_get_stats(const tpdp_reducer *r,
                                            tpdp_reducer_stats *out);

#ifdef __cplusplus
}
#endif
#endif /* TPDP_REDUCER_H */
