// SPDX-License-Identifier: BSD-3-Clause
/* The fully sharded units' collectives (FSDP2's _fsdp_collectives.py):
 * the all-gather of the shards into the full tensors and the
 * reduce-scatter (AVG) of the full gradients into the gradient shard,
 * with the casts to param_dtype and reduce_dtype around them. Host memory
 * over MPI runs them over pieces of memory (comm/services.h): straight
 * between the ranks' parameters and gradients, padding left out, no packed
 * copy. Elsewhere (NCCL) they run packed, rank by rank in the padded flat
 * layout, on the communicator's stream ordered after the unit's stream. */
#include <stdlib.h>

#include "dp/fsdp_internal.h"

/* ---------------------------------------------------------- pieces */

/* The flat layout as pieces (see tpdp_fsdp_unit.pieces): rank q's rows of
 * each parameter at `base(i) + q * chunk * row` for every q in [q0, q1),
 * each followed by a hole for its padding. */
static tpdp_status make_pieces(const tpdp_fsdp_unit *u, int q0, int q1,
                               int in_full, comm_pieces *out) {
  comm_piece *pc = NULL;
  tpdp_status st = TPDP_CALLOC(pc, (size_t)(2 * u->np * (q1 - q0)));
  if (st != TPDP_SUCCESS)
    return TPDP_ERR(st, "unit %s on rank %d: its pieces lists: %s", u->label,
                    u->rank, core_error_detail());
  int k = 0;
  for (int q = q0; q < q1; q++)
    for (int i = 0; i < u->np; i++) {
      const fsdp_param *p = &u->p[i];
      int64_t rows = fsdp_rows_of(p, q);
      int64_t off =
          in_full ? p->full_off + q * p->chunk * p->row_elems : p->shard_off;
      if (rows > 0) pc[k++] = (comm_piece){off, rows * p->row_elems};
      if (rows < p->chunk)
        pc[k++] = (comm_piece){-1, (p->chunk - rows) * p->row_elems};
    }
  *out = (comm_pieces){pc, k};
  return TPDP_SUCCESS;
}

tpdp_status fsdp_build_pieces(tpdp_fsdp_unit *u) {
  u->pieces = comm_supports_pieces(u->comm);
  if (!u->pieces) return TPDP_SUCCESS;
  CHECK(make_pieces(u, 0, u->nranks, 1, &u->full_pc));
  CHECK(make_pieces(u, u->rank, u->rank + 1, 0, &u->shard_pc));
  CHECK(make_pieces(u, u->rank, u->rank + 1, 1, &u->mine_pc));
  return TPDP_SUCCESS;
}

/* ------------------------------------------------------- all-gather */

/* In param_dtype: the f32 shard cast into a send buffer first when that
 * differs. */
tpdp_status fsdp_all_gather_start(tpdp_fsdp_unit *u) {
  if (u->gather != GATHER_NONE) return TPDP_SUCCESS;
  int64_t S = u->shard_elems, n = S * u->nranks;
  if (u->full == NULL)
    CHECK(fsdp_alloc(u, "full parameters", u->full_elems, u->pdt,
                     !fsdp_full_is_persistent(u), 0, &u->full));
  void *send_buf = u->shard;
  if (u->pdt != TPDP_F32 || (u->shard_in_full && !u->pieces)) {
    /* this rank's rows, padded, in param_dtype */
    CHECK(
        fsdp_alloc(u, "all-gather's input", S, u->pdt, 1, 1, &u->gather_send));
    for (int i = 0; i < u->np; i++) {
      const fsdp_param *q = &u->p[i];
      CHECK(fsdp_convert(u, fsdp_at(u->gather_send, u->pdt, q->shard_off),
                         u->pdt, fsdp_shard_rows(u, q), TPDP_F32,
                         fsdp_rows_of(q, u->rank) * q->row_elems));
    }
    send_buf = u->gather_send;
  }
  if (u->pieces) {
    /* Straight into the full tensors; this rank's rows are there already
     * when they live inside them. */
    int in_full = send_buf == u->shard && u->shard_in_full;
    if (in_full) send_buf = u->full;
    tpdp_tensor send = tpdp_tensor_1d(send_buf, u->pdt, S);
    tpdp_tensor recv = tpdp_tensor_1d(u->full, u->pdt, n);
    AS_UNIT(u, "all-gather",
            comm_allgather_pieces_async(u->comm, &send,
                                        in_full ? &u->mine_pc : &u->shard_pc,
                                        &recv, &u->full_pc, &u->gather_work));
  } else {
    CHECK(
        fsdp_alloc(u, "all-gather's output", n, u->pdt, 1, 0, &u->gather_buf));
    tpdp_tensor send = fsdp_flat(u, send_buf, u->pdt, S);
    tpdp_tensor recv = fsdp_flat(u, u->gather_buf, u->pdt, n);
    /* GPU: after the shard's last update and the buffers' allocation */
    if (fsdp_on_gpu(u))
      AS_UNIT(u, "all-gather", tpdp_comm_order_after(u->comm, u->stream));
    AS_UNIT(u, "all-gather",
            tpdp_allgather_async(u->comm, &send, &recv, &u->gather_work));
  }
  u->gather = GATHER_IN_FLIGHT;
  u->group->cur.allgathers++;
  u->group->cur.bytes_allgathered += n * (int64_t)tpdp_dtype_size(u->pdt);
  return TPDP_SUCCESS;
}

/* Each rank's rows out of the padded flat layout `packed` (rank by rank)
 * into the full tensors at `full`, both of dtype dt. */
static tpdp_status unpack(const tpdp_fsdp_unit *u, void *full,
                          const void *packed, tpdp_dtype dt) {
  for (int r = 0; r < u->nranks; r++)
    for (int i = 0; i < u->np; i++) {
      const fsdp_param *q = &u->p[i];
      CHECK(fsdp_copy(
          u, fsdp_at(full, dt, q->full_off + r * q->chunk * q->row_elems),
          fsdp_at((void *)packed, dt, r * u->shard_elems + q->shard_off), dt,
          fsdp_rows_of(q, r) * q->row_elems));
    }
  return TPDP_SUCCESS;
}

/* Started here if it was not. */
tpdp_status fsdp_all_gather_wait(tpdp_fsdp_unit *u) {
  if (u->gather == GATHER_DONE) return TPDP_SUCCESS;
  CHECK(fsdp_all_gather_start(u));
  tpdp_work *w = u->gather_work;
  u->gather_work = NULL;
  /* GPU: the framework's stream waits for it (the host does not) */
  AS_UNIT(
      u, "all-gather",
      fsdp_on_gpu(u) ? tpdp_work_wait_stream(w, u->stream) : tpdp_work_wait(w));
  if (u->gather_buf != NULL) CHECK(unpack(u, u->full, u->gather_buf, u->pdt));
  fsdp_free(u, &u->gather_buf, u->shard_elems * u->nranks, u->pdt, 1);
  fsdp_free(u, &u->gather_send, u->shard_elems, u->pdt, 1);
  u->gather = GATHER_DONE;
  return TPDP_SUCCESS;
}

/* summon_full_params under another param_dtype. The shards are separate
 * then (shard_in_full needs f32 parameters). */
tpdp_status fsdp_all_gather_master(tpdp_fsdp_unit *u) {
  int64_t S = u->shard_elems, n = S * u->nranks;
  CHECK(fsdp_alloc(u, "summoned f32 parameters", u->full_elems, TPDP_F32, 1, 0,
                   (void **)&u->summoned));
  tpdp_tensor send = tpdp_tensor_1d(u->shard, TPDP_F32, S);
  tpdp_work *w = NULL;
  if (u->pieces) {
    tpdp_tensor recv = tpdp_tensor_1d(u->summoned, TPDP_F32, n);
    AS_UNIT(u, "all-gather",
            comm_allgather_pieces_async(u->comm, &send, &u->shard_pc, &recv,
                                        &u->full_pc, &w));
    AS_UNIT(u, "all-gather", tpdp_work_wait(w));
  } else {
    void *packed = NULL;
    CHECK(fsdp_alloc(u, "all-gather's output", n, TPDP_F32, 1, 0, &packed));
    tpdp_tensor recv = tpdp_tensor_1d(packed, TPDP_F32, n);
    tpdp_status st = tpdp_allgather(u->comm, &send, &recv);
    if (st == TPDP_SUCCESS) st = unpack(u, u->summoned, packed, TPDP_F32);
    fsdp_free(u, &packed, n, TPDP_F32, 1);
    CHECK(st);
  }
  u->group->cur.allgathers++;
  u->group->cur.bytes_allgathered += n * (int64_t)sizeof(float);
  return TPDP_SUCCESS;
}

/* --------------------------------------------------- reduce-scatter */

/* Without a cast (param_dtype = reduce_dtype) over pieces, straight from
 * the full gradients, which stay until it is done (so one at a time is in
 * flight: the others are finished first). With a cast, packed rank by
 * rank (padding zero) in reduce_dtype first. The result lands in the f32
 * shard, in place inside the full gradients (level 1, f32), or in a
 * reduce_dtype buffer cast to the f32 shard at the end. Over pieces the
 * sum runs in rank order (bf16/f16 in f32, rounded once), whatever the
 * dtypes. */
tpdp_status fsdp_reduce_scatter_start(tpdp_fsdp_unit *u) {
  int64_t S = u->shard_elems, n = S * u->nranks;
  const int direct = u->pieces && u->pdt == u->rdt;
  const int in_place = direct && u->grad_in_full;
  void *send_buf = u->full_grad;
  if (direct) {
    fsdp_group *g = u->group;
    for (int i = 0; i < g->nunits; i++)
      if (g->units[i] != u) CHECK(fsdp_reduce_scatter_wait(g->units[i]));
  } else {
    CHECK(
        fsdp_alloc(u, "reduce-scatter's input", n, u->rdt, 1, 1, &u->rs_send));
    for (int r = 0; r < u->nranks; r++)
      for (int i = 0; i < u->np; i++) {
        const fsdp_param *q = &u->p[i];
        CHECK(fsdp_convert(u, fsdp_at(u->rs_send, u->rdt, r * S + q->shard_off),
                           u->rdt,
                           fsdp_at(u->full_grad, u->pdt,
                                   q->full_off + r * q->chunk * q->row_elems),
                           u->pdt, fsdp_rows_of(q, r) * q->row_elems));
      }
    if (!fsdp_grad_is_persistent(u))
      fsdp_free(u, &u->full_grad, u->full_elems, u->pdt, 1);
    send_buf = u->rs_send;
  }
  void *recv_buf = in_place ? u->full_grad : (void *)u->shard_grad;
  if (!in_place && (u->rdt != TPDP_F32 || u->grad_in_full)) {
    CHECK(
        fsdp_alloc(u, "reduce-scatter's output", S, u->rdt, 1, 0, &u->rs_recv));
    recv_buf = u->rs_recv;
  }
  tpdp_tensor send = fsdp_flat(u, send_buf, u->rdt, n);
  tpdp_tensor recv = fsdp_flat(u, recv_buf, u->rdt, S);
  if (u->pieces) {
    /* Packed, the buffers are contiguous (padding travels, as zeros). */
    int64_t mine = direct ? 0 : S; /* this rank's elements outside holes */
    for (int i = 0; i < u->np && direct; i++)
      mine += fsdp_rows_of(&u->p[i], u->rank) * u->p[i].row_elems;
    u->rs_scratch_elems =
        comm_reduce_scatter_pieces_scratch(u->comm, mine, in_place);
    if (u->rs_scratch_elems > 0)
      CHECK(fsdp_alloc(u, "reduce-scatter's room for the peers' rows",
                       u->rs_scratch_elems, u->rdt, 1, 0, &u->rs_scratch));
    u->packed[0] = (comm_piece){0, n};
    u->packed[1] = (comm_piece){0, S};
    u->packed_send = (comm_pieces){&u->packed[0], 1};
    u->packed_recv = (comm_pieces){&u->packed[1], 1};
    const comm_pieces *rp = in_place ? &u->mine_pc : &u->shard_pc;
    AS_UNIT(u, "reduce-scatter",
            comm_reduce_scatter_pieces_async(
                u->comm, &send, direct ? &u->full_pc : &u->packed_send, &recv,
                direct ? rp : &u->packed_recv, TPDP_OP_AVG, u->rs_scratch,
                u->rs_scratch_elems, &u->rs_work));
    u->rs_pieces = direct;
  } else {
    /* GPU: after the packing (and the backward that wrote the gradients) */
    if (fsdp_on_gpu(u))
      AS_UNIT(u, "reduce-scatter", tpdp_comm_order_after(u->comm, u->stream));
    AS_UNIT(u, "reduce-scatter",
            tpdp_reduce_scatter_async(u->comm, &send, &recv, TPDP_OP_AVG,
                                      &u->rs_work));
  }
  u->group->cur.reduce_scatters++;
  u->group->cur.bytes_reduce_scattered += n * (int64_t)tpdp_dtype_size(u->rdt);
  return TPDP_SUCCESS;
}

/* The reduce-scatter's output (reduce_dtype, when there is one) into this
 * rank's f32 gradient rows. */
static tpdp_status cast_rs_recv(tpdp_fsdp_unit *u) {
  for (int i = 0; u->rs_recv != NULL && i < u->np; i++) {
    const fsdp_param *q = &u->p[i];
    CHECK(fsdp_convert(u, fsdp_grad_rows(u, q), TPDP_F32,
                       fsdp_at(u->rs_recv, u->rdt, q->shard_off), u->rdt,
                       fsdp_rows_of(q, u->rank) * q->row_elems));
  }
  return TPDP_SUCCESS;
}

/* Frees the buffers whatever the wait returns (HSDP in reduce_dtype: all
 * but the output, which the replicate all-reduce takes). */
tpdp_status fsdp_reduce_scatter_wait(tpdp_fsdp_unit *u) {
  if (u->rs_work == NULL) return TPDP_SUCCESS;
  tpdp_work *w = u->rs_work;
  u->rs_work = NULL;
  const char *saved = comm_watch_label;
  comm_watch_label = u->watch_label;
  /* GPU: the framework's stream waits for it (the host does not) */
  tpdp_status st =
      fsdp_on_gpu(u) ? tpdp_work_wait_stream(w, u->stream) : tpdp_work_wait(w);
  comm_watch_label = saved;
  /* HSDP in reduce_dtype: the all-reduce over rep takes rs_recv as it is */
  u->rs_held = st == TPDP_SUCCESS && u->rs_recv != NULL && u->rep_size > 1 &&
               u->rdt != TPDP_F32;
  if (st == TPDP_SUCCESS && !u->rs_held) st = cast_rs_recv(u);
  if (u->rs_pieces && !fsdp_grad_is_persistent(u) && !u->grads_pending)
    fsdp_free(u, &u->full_grad, u->full_elems, u->pdt, 1);
  u->rs_pieces = 0;
  fsdp_free(u, &u->rs_scratch, u->rs_scratch_elems, u->rdt, 1);
  fsdp_free(u, &u->rs_send, u->shard_elems * u->nranks, u->rdt, 1);
  if (!u->rs_held) fsdp_free(u, &u->rs_recv, u->shard_elems, u->rdt, 1);
  return st;
}

/* ----------------------------------------------- replicate all-reduce */

/* HSDP's second step: each replica group holds the mean over its S ranks
 * of the same rows, so their mean over the R replicas is the mean over all
 * R*S ranks. One all-reduce per unit, in reduce_dtype as FSDP2's: with
 * another reduce_dtype than f32, of the reduce-scatter's output as it came
 * (the padded shard; the cast to f32 after it); in f32, in place on the
 * padded gradient shard, or packed from the full gradients where the rows
 * live inside them (level 1). Padding rows are zero on every rank. */
tpdp_status fsdp_replicate_start(tpdp_fsdp_unit *u) {
  CHECK(fsdp_reduce_scatter_wait(u));
  if (u->rep_size <= 1 || u->rep_work != NULL) return TPDP_SUCCESS;
  int64_t S = u->shard_elems;
  void *buf = u->shard_grad;
  tpdp_dtype dt = TPDP_F32;
  if (u->rs_held) {
    buf = u->rs_recv;
    dt = u->rdt;
  } else if (u->grad_in_full) {
    CHECK(fsdp_alloc(u, "replicate all-reduce's buffer", S, TPDP_F32, 1, 1,
                     (void **)&u->rep_buf));
    for (int i = 0; i < u->np; i++) {
      const fsdp_param *q = &u->p[i];
      CHECK(fsdp_copy(u, u->rep_buf + q->shard_off, fsdp_grad_rows(u, q),
                      TPDP_F32, fsdp_rows_of(q, u->rank) * q->row_elems));
    }
    buf = u->rep_buf;
  }
  tpdp_tensor t = fsdp_flat(u, buf, dt, S);
  AS_UNIT(u, "replicate all-reduce",
          tpdp_allreduce_async(u->rep, &t, &t, TPDP_OP_AVG, &u->rep_work));
  u->group->cur.allreduces++;
  u->group->cur.bytes_allreduced += S * (int64_t)tpdp_dtype_size(dt);
  return TPDP_SUCCESS;
}

/* Frees the buffers whatever the wait returns. An output held for an
 * all-reduce that never started (a failure before it) is cast as it is. */
tpdp_status fsdp_replicate_wait(tpdp_fsdp_unit *u) {
  tpdp_status st = TPDP_SUCCESS;
  if (u->rep_work != NULL) {
    tpdp_work *w = u->rep_work;
    u->rep_work = NULL;
    const char *saved = comm_watch_label;
    comm_watch_label = u->watch_label;
    st = tpdp_work_wait(w);
    comm_watch_label = saved;
  }
  if (u->rs_held) {
    u->rs_held = 0;
    if (st == TPDP_SUCCESS) st = cast_rs_recv(u);
    fsdp_free(u, &u->rs_recv, u->shard_elems, u->rdt, 1);
    return st;
  }
  for (int i = 0; st == TPDP_SUCCESS && u->rep_buf != NULL && i < u->np; i++) {
    const fsdp_param *q = &u->p[i];
    st = fsdp_copy(u, fsdp_grad_rows(u, q), u->rep_buf + q->shard_off, TPDP_F32,
                   fsdp_rows_of(q, u->rank) * q->row_elems);
  }
  fsdp_free(u, (void **)&u->rep_buf, u->shard_elems, TPDP_F32, 1);
  return st;
}
