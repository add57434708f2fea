// SPDX-License-Identifier: BSD-3-Clause
/* Internal: the tpdp_topo handle, shared by topo.c and advice.c. */
#ifndef TPDP_TOPO_INTERNAL_H
#define TPDP_TOPO_INTERNAL_H

#include <hwloc.h>

#include "tpdp/topo.h"

struct tpdp_topo {
  hwloc_topology_t h;
  int from_xml;
  char source[512];
  tpdp_topo_counts counts;
  hwloc_obj_t *gpus;   /* counts.gpus, PCI bus id order */
  tpdp_gpu_info *info; /* same order */
  int shows_switches;  /* some switch holds >= 2 GPUs */
  int gpus_per_switch; /* most GPUs under one switch, 0 if not shown */
};

/* Binding as a bitmap (for hwloc_set_cpubind) and as a tpdp_binding. */
tpdp_status topo_binding_set(const tpdp_topo *topo, int local_rank, int nlocal,
                             hwloc_bitmap_t set, tpdp_binding *out);

/* snprintf-style append at buf+used; returns the new used length. */
size_t topo_text_printf(char *buf, size_t len, size_t used, const char *fmt,
                        ...) __attribute__((format(printf, 4, 5)));

#endif /* TPDP_TOPO_INTERNAL_H */
