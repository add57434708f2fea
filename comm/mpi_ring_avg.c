// SPDX-License-Identifier: BSD-3-Clause
/* The MPI backend's ring allreduce AVG (taken by blocking AVG of large
 * f32/f64 messages, comm_mpi_use_ring_avg).
 *
 * Open MPI's allreduce has no AVG, so AVG is SUM and then a pass dividing
 * the whole result. On host memory that pass is memory-bound and costs a
 * good fraction of the reduction itself (100 MB of gradients: 8-18 ms
 * against about 30 for the allreduce on the 2-core development VM). The
 * ring folds it into the reduction: a reduce-scatter in size-1 rounds,
 * where each rank adds the block it receives from its left neighbour to
 * its own and passes it on to the right, and in the last round adds *and*
 * divides by the size in the same loop; then an allgather ring
 * circulates the averaged blocks. Each rank moves 2 (size-1)/size of the
 * message, as MPI's own ring does. The reduce-scatter receives in chunks
 * of ring_chunk_bytes into a scratch buffer, so each chunk is added while
 * it is still in cache (the allgather, which only copies, moves whole
 * blocks).
 *
 * Blocks: the count is split into `size` blocks, the first count % size of
 * them one element longer (block k starts at k * base + min(k, rem)).
 * Every rank derives the same layout from (count, size), so the two sides
 * of each MPI_Sendrecv agree on its counts, and every rank makes the same
 * number of calls per round; MPI_Sendrecv pairs a send to the right with a
 * receive from the left, which cannot deadlock in a ring.
 * Blocking calls only: the async form keeps MPI_Iallreduce (+ division). */
#include <stdlib.h>

#include "comm/mpi_internal.h"

/* The ring's settings: the smallest message in bytes that takes it
 * (smaller ones: MPI_Allreduce SUM, then a division), and the bytes per
 * MPI_Sendrecv of its reduce-scatter. Read once at init from
 * TPDP_MPI_RING_AVG_MIN_BYTES (< 0 disables the ring) and
 * TPDP_MPI_RING_CHUNK_BYTES; every rank must see the same values, since
 * they decide which algorithm a collective runs. Measured on 2 ranks of
 * the 2-core development VM: the ring beats MPI_Allreduce + division from
 * 64 KiB up (45 vs 58 us at 256 KiB), but it takes 2 (size-1) latency
 * steps where MPI uses log2(size) for small messages, so the threshold
 * stays at 256 KiB. Chunks: over the bench's 17-27 MB buckets, 256-512 KiB
 * ran 1-3% under MPI_Allreduce SUM, 1 MiB 2-3% over, unchunked 7-12%
 * over. */
#define RING_AVG_MIN_BYTES_DEFAULT (256L * 1024)
#define RING_CHUNK_BYTES_DEFAULT (512L * 1024)
static long ring_min_bytes = RING_AVG_MIN_BYTES_DEFAULT;
static long ring_chunk_bytes = RING_CHUNK_BYTES_DEFAULT;

void comm_mpi_ring_avg_configure(void) {
  ring_min_bytes =
      core_env_long("TPDP_MPI_RING_AVG_MIN_BYTES", RING_AVG_MIN_BYTES_DEFAULT);
  ring_chunk_bytes =
      core_env_long("TPDP_MPI_RING_CHUNK_BYTES", RING_CHUNK_BYTES_DEFAULT);
  if (ring_chunk_bytes < 64) ring_chunk_bytes = 64;
}

#define RING_TAG 0x7470 /* point-to-point tag of the ring's messages */

static int64_t ring_block_off(int64_t n, int p, int k) {
  int64_t base = n / p, rem = n % p;
  return k * base + (k < rem ? k : rem);
}

static int64_t ring_block_len(int64_t n, int p, int k) {
  return n / p + (k < n % p ? 1 : 0);
}

/* A power of two divides exactly as a multiply by its reciprocal, which
 * vectorises better than a division (as dp_buf_divide does). */
static int is_pow2(int x) { return x > 0 && (x & (x - 1)) == 0; }

/* dst[i] = own[i] + in[i], or (own[i] + in[i]) / p when p > 0. own is the
 * rank's input: equal to dst in place, else a distinct buffer. */
#define RING_REDUCE(name, T)                                                   \
  static void name##_inplace(T *restrict dst, const T *restrict in, int64_t n, \
                             int p) {                                          \
    if (p == 0) {                                                              \
      for (int64_t i = 0; i < n; i++) dst[i] += in[i];                         \
    } else if (is_pow2(p)) {                                                   \
      const T inv = (T)1 / (T)p;                                               \
      for (int64_t i = 0; i < n; i++) dst[i] = (dst[i] + in[i]) * inv;         \
    } else {                                                                   \
      const T d = (T)p;                                                        \
      for (int64_t i = 0; i < n; i++) dst[i] = (dst[i] + in[i]) / d;           \
    }                                                                          \
  }                                                                            \
  static void name##_out(T *restrict dst, const T *restrict own,               \
                         const T *restrict in, int64_t n, int p) {             \
    if (p == 0) {                                                              \
      for (int64_t i = 0; i < n; i++) dst[i] = own[i] + in[i];                 \
    } else if (is_pow2(p)) {                                                   \
      const T inv = (T)1 / (T)p;                                               \
      for (int64_t i = 0; i < n; i++) dst[i] = (own[i] + in[i]) * inv;         \
    } else {                                                                   \
      const T d = (T)p;                                                        \
      for (int64_t i = 0; i < n; i++) dst[i] = (own[i] + in[i]) / d;           \
    }                                                                          \
  }
RING_REDUCE(ring_reduce_f32, float)
RING_REDUCE(ring_reduce_f64, double)

static void ring_reduce(tpdp_dtype dt, void *dst, const void *own,
                        const void *in, int64_t n, int p) {
  if (dt == TPDP_F32) {
    if (dst == own)
      ring_reduce_f32_inplace(dst, in, n, p);
    else
      ring_reduce_f32_out(dst, own, in, n, p);
  } else {
    if (dst == own)
      ring_reduce_f64_inplace(dst, in, n, p);
    else
      ring_reduce_f64_out(dst, own, in, n, p);
  }
}

/* Chosen by every rank alike (mpi_internal.h). */
int comm_mpi_use_ring_avg(const tpdp_comm *comm, const tpdp_coll_args *a,
                          int64_t rn) {
  const tpdp_tensor *t = a->recv;
  if (!a->blocking || a->op != TPDP_OP_AVG || comm->size < 2 ||
      ring_min_bytes < 0)
    return 0;
  if (t->dtype != TPDP_F32 && t->dtype != TPDP_F64) return 0;
  return (double)rn * (double)tpdp_dtype_size(t->dtype) >=
         (double)ring_min_bytes;
}

static tpdp_status ring_error(int code, const tpdp_comm *c, const char *phase,
                              int step) {
  char msg[MPI_MAX_ERROR_STRING];
  comm_mpi_error_text(code, msg);
  return TPDP_ERR(
      TPDP_ERR_MPI,
      "MPI_Sendrecv failed on %s (rank %d of %d) in the ring allreduce "
      "(avg), %s round %d: %s",
      c->name, c->rank, c->size, phase, step + 1, msg);
}

tpdp_status comm_mpi_ring_allreduce_avg(tpdp_comm *comm, mpi_comm_impl *impl,
                                        const tpdp_tensor *send,
                                        tpdp_tensor *recv) {
  const int p = comm->size, r = comm->rank;
  const int right = (r + 1) % p, left = (r + p - 1) % p;
  const tpdp_dtype dt = recv->dtype;
  const size_t es = tpdp_dtype_size(dt);
  const MPI_Datatype mdt = comm_mpi_dtype(dt);
  const int64_t n = tpdp_tensor_numel(recv);
  int64_t chunk = ring_chunk_bytes / (long)es;
  if (chunk < 1) chunk = 1;
  if (chunk > n / p + 1) chunk = n / p + 1; /* no larger than a block */
  size_t need = (size_t)chunk * es;
  if (impl->scratch_bytes < need) {
    void *s = realloc(impl->scratch, need);
    if (s == NULL)
      return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY,
                      "ring allreduce (avg) on %s (rank %d): cannot allocate "
                      "%zu bytes of scratch",
                      comm->name, r, need);
    impl->scratch = s;
    impl->scratch_bytes = need;
  }
  char *scratch = impl->scratch;
  const char *own = (const char *)send->data; /* == dst in place */
  char *dst = (char *)recv->data;

  /* Every rank makes the same number of MPI_Sendrecv calls per round,
   * enough for the longest block (the others send or receive 0 elements
   * at the end): one message per call and direction must pair with one
   * call of the neighbour. */
  const int64_t longest = n / p + (n % p != 0);
  /* Reduce-scatter: in round s send block r-s (round 0 from the input,
   * later the partial sum made in round s-1) and receive block r-s-1, to
   * which this rank adds its own input. After round size-2 the rank holds
   * the average of block r+1. */
  for (int s = 0; s < p - 1; s++) {
    const int sb = ((r - s) % p + p) % p, rb = ((r - s - 1) % p + p) % p;
    const int divide = s == p - 2 ? p : 0;
    const char *sbase = (s == 0 ? own : dst) + ring_block_off(n, p, sb) * es;
    const int64_t roff = ring_block_off(n, p, rb);
    const int64_t slen = ring_block_len(n, p, sb);
    const int64_t rlen = ring_block_len(n, p, rb);
    for (int64_t c = 0; c < longest; c += chunk) {
      int64_t sc = slen - c, rc = rlen - c;
      sc = sc < 0 ? 0 : sc > chunk ? chunk : sc;
      rc = rc < 0 ? 0 : rc > chunk ? chunk : rc;
      int rcode = MPI_Sendrecv(sbase + c * es, (int)sc, mdt, right, RING_TAG,
                               scratch, (int)rc, mdt, left, RING_TAG,
                               impl->comm, MPI_STATUS_IGNORE);
      if (rcode != MPI_SUCCESS)
        return ring_error(rcode, comm, "reduce-scatter", s);
      if (rc > 0)
        ring_reduce(dt, dst + (roff + c) * es, own + (roff + c) * es, scratch,
                    rc, divide);
    }
  }
  /* Allgather: in round s pass on block r+1-s (averaged here or received
   * in round s-1) and receive block r-s straight into place. */
  for (int s = 0; s < p - 1; s++) {
    const int sb = ((r + 1 - s) % p + p) % p, rb = ((r - s) % p + p) % p;
    int rcode = MPI_Sendrecv(dst + ring_block_off(n, p, sb) * es,
                             (int)ring_block_len(n, p, sb), mdt, right,
                             RING_TAG, dst + ring_block_off(n, p, rb) * es,
                             (int)ring_block_len(n, p, rb), mdt, left, RING_TAG,
                             impl->comm, MPI_STATUS_IGNORE);
    if (rcode != MPI_SUCCESS) return ring_error(rcode, comm, "allgather", s);
  }
  return TPDP_SUCCESS;
}
