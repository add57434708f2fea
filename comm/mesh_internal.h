/*
 * Internal: the lifetime link between a mesh and the objects built on it
 * (tp/'s specs, dp/'s reducers on one of its dim communicators). Such an
 * object holds the mesh from its creation to its destruction, and
 * tpdp_mesh_destroy refuses (TPDP_ERR_STATE, naming how many are alive)
 * while any holds it: a spec or reducer can then never outlive its mesh.
 * Not installed.
 */
#ifndef TPDP_COMM_MESH_INTERNAL_H
#define TPDP_COMM_MESH_INTERNAL_H

#include "core/check.h"
#include "core/mem.h"
#include "tpdp/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

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

#endif /* TPDP_COMM_MESH_INTERNAL_H */
