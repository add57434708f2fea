// SPDX-License-Identifier: BSD-3-Clause
/* Bytes each communicator moves, and how many of them go to ranks on
 * another host (tpdp_comm_traffic_get in tpdp/comm.h). What crosses hosts
 * is what a multi-host layout is judged by: the hierarchical reducer sends
 * each host's partial sums across once where a ring over all ranks sends
 * about 1.5 times as much, and a hybrid-sharded layout keeps its
 * all-gathers inside a host. Counting bytes, not time, makes that a
 * property a test can assert from tensor shapes.
 *
 * Where the counts come from:
 *  - messages tpdp posts itself (the collectives over pieces) count at
 *    each send, to its destination (comm_traffic_add, from the backend);
 *  - every other collective counts, when it is issued, what a ring moves
 *    for it (comm_traffic_collective, from the front end): MPI picks its
 *    own algorithms, whose routes tpdp cannot see, and the ring is the
 *    bandwidth-optimal schedule that tpdp's own ring AVG runs message for
 *    message. So the counts follow from (kind, count, dtype, ranks) alone
 *    and are the same on every run;
 *  - the shared-memory allreduce moves nothing between ranks (peers read
 *    the segment in place); its cross-host step is an allreduce on a
 *    helper communicator of the host's namesakes, which charges its bytes
 *    to the communicator it works for (comm_traffic_charge_to).
 *
 * Which rank is on which host: the host-name hash of every world rank,
 * exchanged once at tpdp_init outside any tpdp communicator (so that no
 * collective's sequence number moves), and each communicator's map of its
 * ranks made from their world ranks when it is made. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/backend.h"

struct comm_traffic {
  _Atomic uint64_t bytes, cross;
  /* Counts go to this communicator's record instead (a helper that the
   * library runs part of another communicator's collectives on). */
  tpdp_comm *charge_to;
  int size;
  unsigned char remote[]; /* per rank: 1 if on another host than this one */
};

/* Host of each world rank (comm_host_hash of its host name). */
static uint64_t *world_hosts;
static int world_n;

uint64_t comm_host_hash(void) {
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) != 0) return 0;
  uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a */
  for (const char *c = host; *c; c++)
    h = (h ^ (unsigned char)*c) * 0x100000001b3ULL;
  return h;
}

tpdp_status comm_traffic_init(void) {
  comm_traffic_fini();
  return comm_mpi_world_hosts(&world_hosts, &world_n);
}

void comm_traffic_fini(void) {
  free(world_hosts);
  world_hosts = NULL;
  world_n = 0;
}

tpdp_status comm_traffic_attach(tpdp_comm *c, const int *world_ranks) {
  if (world_hosts == NULL) return TPDP_SUCCESS; /* no host map: not counted */
  comm_traffic *t = calloc(1, sizeof *t + (size_t)c->size);
  if (t == NULL)
    return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY,
                    "the traffic record of communicator %s (%d ranks)", c->name,
                    c->size);
  t->size = c->size;
  const int me = world_ranks[c->rank];
  for (int q = 0; q < c->size; q++) {
    const int w = world_ranks[q];
    t->remote[q] = w >= 0 && w < world_n && me >= 0 && me < world_n &&
                   world_hosts[w] != world_hosts[me];
  }
  c->traffic = t;
  return TPDP_SUCCESS;
}

void comm_traffic_detach(tpdp_comm *c) {
  free(c->traffic);
  c->traffic = NULL;
}

void comm_traffic_charge_to(tpdp_comm *helper, tpdp_comm *owner) {
  if (helper != NULL && helper->traffic != NULL)
    helper->traffic->charge_to = owner;
}

/* The record the bytes of `c`'s rank `peer` go to, and whether it is
 * remote; NULL when `c` is not counted. */
static comm_traffic *record(const tpdp_comm *c, int peer, int *remote) {
  comm_traffic *t = c->traffic;
  if (t == NULL || peer < 0 || peer >= t->size) return NULL;
  *remote = t->remote[peer];
  while (t->charge_to != NULL && t->charge_to->traffic != NULL)
    t = t->charge_to->traffic;
  return t;
}

void comm_traffic_add(const tpdp_comm *c, int peer, uint64_t bytes) {
  int remote = 0;
  comm_traffic *t = record(c, peer, &remote);
  if (t == NULL || bytes == 0) return;
  atomic_fetch_add_explicit(&t->bytes, bytes, memory_order_relaxed);
  if (remote) atomic_fetch_add_explicit(&t->cross, bytes, memory_order_relaxed);
}

/* Elements of block k of n split into p blocks, the first n % p one longer
 * (the MPI backend's ring splits alike). */
static int64_t block_len(int64_t n, int p, int k) {
  return n / p + (k < n % p ? 1 : 0);
}

void comm_traffic_collective(const tpdp_comm *c, const tpdp_coll_args *a) {
  if (c->traffic == NULL || a->shm != NULL || a->send_pieces != NULL ||
      a->recv_pieces != NULL || c->size < 2 || a->recv == NULL)
    return; /* not counted, in place in shared memory, or counted per send */
  const int p = c->size, r = c->rank, right = (r + 1) % p;
  const uint64_t es = tpdp_dtype_size(a->recv->dtype);
  const int64_t rn = tpdp_tensor_numel(a->recv);
  switch (a->kind) {
    case TPDP_COLL_ALLREDUCE: {
      /* Reduce-scatter: round s sends block r - s; allgather: round s
       * sends block r + 1 - s; all of it to the right neighbour. */
      int64_t n = 0;
      for (int s = 0; s < p - 1; s++)
        n += block_len(rn, p, ((r - s) % p + p) % p) +
             block_len(rn, p, ((r + 1 - s) % p + p) % p);
      comm_traffic_add(c, right, (uint64_t)n * es);
      break;
    }
    case TPDP_COLL_ALLGATHER: /* p - 1 rounds of one rank's block */
      comm_traffic_add(c, right, (uint64_t)(p - 1) * (uint64_t)(rn / p) * es);
      break;
    case TPDP_COLL_REDUCE_SCATTER: /* p - 1 rounds of one block */
      comm_traffic_add(c, right, (uint64_t)(p - 1) * (uint64_t)rn * es);
      break;
    case TPDP_COLL_BROADCAST: /* a chain from the root; its last sends none */
      if ((r - a->root + p) % p != p - 1)
        comm_traffic_add(c, right, (uint64_t)rn * es);
      break;
    case TPDP_COLL_ALLTOALL: /* block q to rank q */
      for (int q = 0; q < p; q++)
        if (q != r) comm_traffic_add(c, q, (uint64_t)(rn / p) * es);
      break;
    case TPDP_COLL_BARRIER:
      break;
  }
}

/* The front end's checks of both accessors: a live communicator that
 * counts. */
static tpdp_status check_counted(const tpdp_comm *comm) {
  CHECK(comm_check_alive(comm));
  if (comm->traffic == NULL)
    return TPDP_ERR(TPDP_ERR_UNSUPPORTED,
                    "communicator %s (%s backend) does not count its traffic: "
                    "the MPI backend's communicators do",
                    comm->name, comm->ops->backend);
  return TPDP_SUCCESS;
}

tpdp_status tpdp_comm_traffic_get(const tpdp_comm *comm,
                                  tpdp_comm_traffic *out) {
  TPDP_API_ENTRY;
  CHECK_PTR(comm);
  CHECK_PTR(out);
  CHECK(check_counted(comm));
  out->bytes =
      atomic_load_explicit(&comm->traffic->bytes, memory_order_relaxed);
  out->cross_host_bytes =
      atomic_load_explicit(&comm->traffic->cross, memory_order_relaxed);
  return TPDP_SUCCESS;
}

tpdp_status tpdp_comm_traffic_reset(tpdp_comm *comm) {
  TPDP_API_ENTRY;
  CHECK_PTR(comm);
  CHECK(check_counted(comm));
  atomic_store_explicit(&comm->traffic->bytes, 0, memory_order_relaxed);
  atomic_store_explicit(&comm->traffic->cross, 0, memory_order_relaxed);
  return TPDP_SUCCESS;
}
