// SPDX-License-Identifier: BSD-3-Clause
/*
 * tpdp topo: the machine's topology through hwloc: packages, NUMA nodes,
 * cores and NVIDIA GPUs, GPU <-> core affinity, binding each rank to the
 * cores near its GPU, and advice on laying out a device mesh so that each
 * tensor-parallel group stays inside one host (and one PCIe switch).
 *
 * GPUs are the PCI devices of vendor 0x10de with class 0x0302 (3D
 * controller) or 0x0300 (VGA), numbered 0.. in PCI bus id order. That is
 * CUDA's order with CUDA_DEVICE_ORDER=PCI_BUS_ID (CUDA's default order,
 * FASTEST_FIRST, can differ on mixed machines). A GPU's locality is the
 * cpuset of its closest non-I/O ancestor in hwloc's tree (usually its
 * package or NUMA node); its cores are the cores inside that cpuset.
 *
 * PCIe switch domain: GPUs below the same PCI-to-PCI bridge under the host
 * bridge (the topmost bridge between a GPU and its host bridge) share a
 * switch. NVLink is not visible to hwloc without NVML, so the NUMA node
 * serves as the proxy for "close GPUs" when no switch is shared.
 *
 * Life cycle: tpdp_topo_load -> queries -> tpdp_topo_destroy. A topology
 * is read-only after loading and may be queried from several threads.
 */
#ifndef TPDP_TOPO_H
#define TPDP_TOPO_H

#include <stddef.h>

#include "tpdp/comm.h"
#include "tpdp/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpdp_topo tpdp_topo; /* opaque */

/* Buffer size of the cpuset list strings below ("0-7,16-23"). */
#define TPDP_TOPO_CPUSET_LEN 256

/* Load this machine's topology (xml_path NULL) or an hwloc XML export (v1
 * or v2 format, e.g. from `lstopo file.xml` or hwloc-gather-topology).
 * *out is owned by the caller: free with tpdp_topo_destroy.
 * Errors: TPDP_ERR_NULL_POINTER, TPDP_ERR_IO (XML missing or unreadable,
 * naming the file), TPDP_ERR_INTERNAL (hwloc failed, with errno text). */
TPDP_API tpdp_status tpdp_topo_load(const char *xml_path, tpdp_topo **out);
/* Free a topology. NULL is a no-op. Returns TPDP_SUCCESS (hwloc's
 * release cannot fail); a status, as every tpdp_*_destroy. */
TPDP_API tpdp_status tpdp_topo_destroy(tpdp_topo *topo);

typedef struct {
  int packages;
  int numa_nodes;
  int cores; /* hwloc Core objects (PUs when the machine shows no cores) */
  int pus;   /* hardware threads */
  int gpus;
} tpdp_topo_counts;

/* Fill *out. Errors: NULL pointers. */
TPDP_API tpdp_status tpdp_topo_get_counts(const tpdp_topo *topo,
                                          tpdp_topo_counts *out);

/* "this machine" or the XML path. */
TPDP_API const char *tpdp_topo_source(const tpdp_topo *topo);

typedef struct {
  int index;           /* 0.. in PCI bus id order */
  char pci_bus_id[16]; /* "0000:17:00.0" */
  unsigned vendor_id;  /* 0x10de */
  unsigned device_id;
  unsigned class_id; /* 0x0302 or 0x0300 */
  int numa_node;     /* OS index of its NUMA node; -1 if several/none */
  int package;       /* logical index of its package; -1 if several */
  int switch_domain; /* PCIe switch domain id (0..); GPUs sharing one
                             share a switch; every GPU has one */
  int ncores;        /* cores in its locality */
  char cpuset[TPDP_TOPO_CPUSET_LEN]; /* PU OS indexes of its locality */
} tpdp_gpu_info;

/* Information on GPU `index`. Errors: NULL pointers, index out of range
 * (TPDP_ERR_INVALID_ARGUMENT naming the count). */
TPDP_API tpdp_status tpdp_topo_gpu(const tpdp_topo *topo, int index,
                                   tpdp_gpu_info *out);

/* 1 if at least two GPUs share a PCIe switch (so switch domains say
 * something), else 0. */
TPDP_API int tpdp_topo_shows_switches(const tpdp_topo *topo);

typedef struct {
  int gpu;     /* GPU of the rank (local_rank mod gpus), -1 without GPUs */
  int sharers; /* local ranks splitting the same set of cores */
  int share;   /* this rank's position among them (0..sharers-1) */
  int ncores;  /* cores in the binding */
  char cpuset[TPDP_TOPO_CPUSET_LEN]; /* PU OS indexes, list form "0-3,16-19" */
  int applied; /* tpdp_topo_bind_self: 1 if the process was bound */
} tpdp_binding;

/* The cores for host-local rank `local_rank` of `nlocal`:
 *  - with GPUs: GPU g = local_rank mod gpus. The local ranks whose GPUs have
 *    the same locality (e.g. the 4 GPUs of one package) split its cores:
 *    with n cores and k such ranks, the j-th (in local-rank order) gets cores
 *    [floor(j*n/k), floor((j+1)*n/k)), or core floor(j*n/k) when that range
 *    is empty (more ranks than cores);
 *  - without GPUs: the same split of all the host's cores among nlocal.
 * The set holds every PU of the chosen cores.
 * Errors: NULL pointers, nlocal < 1 or local_rank outside [0, nlocal)
 * (TPDP_ERR_INVALID_ARGUMENT). */
TPDP_API tpdp_status tpdp_topo_binding_for(const tpdp_topo *topo,
                                           int local_rank, int nlocal,
                                           tpdp_binding *out);

/* Compute the binding and bind this process to it (hwloc_set_cpubind),
 * logging it at INFO. With TPDP_BIND=0 in the environment nothing is bound
 * (out->applied = 0) and TPDP_SUCCESS is returned. out may be NULL.
 * Errors: those of tpdp_topo_binding_for, TPDP_ERR_STATE (topology loaded
 * from XML: not this machine), TPDP_ERR_UNSUPPORTED (the OS refused the
 * binding, with errno text). */
TPDP_API tpdp_status tpdp_topo_bind_self(const tpdp_topo *topo, int local_rank,
                                         int nlocal, tpdp_binding *out);

/* The usual call after tpdp_init: load this machine's topology, find this
 * rank's host-local rank among the ranks of `comm` on the same host
 * (tpdp_comm_local_rank), and bind the process as tpdp_topo_bind_self does
 * (TPDP_BIND=0 opts out). Collective over `comm` (a host communicator,
 * e.g. the world). out may be NULL. Errors: those of tpdp_topo_load,
 * tpdp_comm_local_rank and tpdp_topo_bind_self. */
TPDP_API tpdp_status tpdp_topo_bind_rank(tpdp_comm *comm, tpdp_binding *out);

/* Machine tree (packages, NUMA nodes, cores, GPUs) and the GPU affinity
 * table as text, snprintf-style: writes at most len bytes (NUL-terminated
 * when len > 0) and returns the length the full text needs. On a machine
 * without GPUs the text says "no GPUs found". */
TPDP_API size_t tpdp_topo_format(const tpdp_topo *topo, char *buf, size_t len);

/* ---------------------------------------------------------- mesh advice
 *
 * Model: every host looks like the loaded one and holds ranks_per_host
 * ranks (its GPUs, or its cores without GPUs); ranks fill hosts in order
 * (rank r on host r / ranks_per_host, local GPU r mod ranks_per_host), as
 * mpirun places them by slot. Mesh ranks are row-major (comm.h), so the
 * ranks of a TP group are tp_stride apart, tp_stride being the product of
 * the sizes of the dims after the TP dim.
 */
typedef struct {
  char mesh[128]; /* the mesh as parsed, "dp=4,tp=8" */
  int tp_dim;     /* the dim named "tp", else the innermost */
  char tp_name[32];
  int64_t tp_size;
  int64_t tp_stride;  /* rank distance between TP neighbours */
  int64_t world_size; /* product of the sizes */
  int ranks_per_host;
  int uses_gpus;       /* 1: ranks_per_host counts GPUs; 0: cores */
  int64_t nhosts;      /* ceil(world_size / ranks_per_host) */
  int tp_in_host;      /* 1 if every TP group lies inside one host */
  int tp_in_switch;    /* 1/0 every TP group inside one PCIe switch;
                           -1: the topology shows no shared switch */
  int gpus_per_switch; /* most GPUs under one switch (0 if not shown) */
  int tp_in_numa;      /* 1/0 every TP group's GPUs on one NUMA node;
                           -1: no GPUs or no NUMA affinity known */
  int fixable;         /* 1 if some order of the dims puts every TP group
                           inside one host */
  int reorder;         /* 1 if the suggestion differs from the mesh */
  char suggested[128]; /* suggested mesh: the TP dim innermost */
} tpdp_placement_advice;

/* Advice for mesh `mesh_spec` ("dp=4,tp=8", see tpdp_mesh_parse) on hosts
 * like `topo`. Errors: NULL pointers, the parse errors of tpdp_mesh_parse. */
TPDP_API tpdp_status tpdp_topo_advise(const tpdp_topo *topo,
                                      const char *mesh_spec,
                                      tpdp_placement_advice *out);

/* The advice as a few lines of text, snprintf-style (see tpdp_topo_format). */
TPDP_API size_t tpdp_topo_advice_format(const tpdp_placement_advice *advice,
                                        char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* TPDP_TOPO_H */
