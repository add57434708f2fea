// SPDX-License-Identifier: BSD-3-Clause
/* Topology discovery, GPU affinity and rank binding with hwloc. */
#include "tpdp/topo.h"

#include <errno.h>
#include <hwloc.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "topo/topo_internal.h"

static int is_gpu(hwloc_obj_t o) {
  return o->type == HWLOC_OBJ_PCI_DEVICE &&
         o->attr->pcidev.vendor_id == 0x10de &&
         (o->attr->pcidev.class_id == 0x0302 ||
          o->attr->pcidev.class_id == 0x0300);
}

static int cmp_pci(const void *a, const void *b) {
  const struct hwloc_pcidev_attr_s *x =
      &(*(hwloc_obj_t const *)a)->attr->pcidev;
  const struct hwloc_pcidev_attr_s *y =
      &(*(hwloc_obj_t const *)b)->attr->pcidev;
  unsigned long kx = ((unsigned long)x->domain << 24) |
                     ((unsigned long)x->bus << 16) |
                     ((unsigned long)x->dev << 8) | x->func;
  unsigned long ky = ((unsigned long)y->domain << 24) |
                     ((unsigned long)y->bus << 16) |
                     ((unsigned long)y->dev << 8) | y->func;
  return kx < ky ? -1 : kx > ky;
}

/* The topmost PCI-to-PCI bridge between a GPU and its host bridge (its
 * switch), or the GPU itself when it hangs off the host bridge. */
static hwloc_obj_t switch_of(hwloc_obj_t gpu) {
  hwloc_obj_t top = gpu;
  for (hwloc_obj_t o = gpu->parent; o != NULL && o->type == HWLOC_OBJ_BRIDGE;
       o = o->parent)
    if (o->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_PCI) top = o;
  return top;
}

static int count_type(hwloc_topology_t h, hwloc_obj_type_t type) {
  int n = hwloc_get_nbobjs_by_type(h, type);
  return n < 0 ? 0 : n;
}

/* Cores (or PUs when there are no Core objects) inside `set`. */
static hwloc_obj_type_t core_type(hwloc_topology_t h) {
  return count_type(h, HWLOC_OBJ_CORE) > 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
}

static tpdp_status list_string(hwloc_const_bitmap_t set, char *buf,
                               size_t len) {
  int n = hwloc_bitmap_list_snprintf(buf, len, set);
  if (n < 0 || (size_t)n >= len)
    return TPDP_ERR(TPDP_ERR_INTERNAL,
                    "cpuset list needs %d bytes, more than %zu", n, len);
  return TPDP_SUCCESS;
}

/* The one object of `type` whose cpuset intersects `set`, or NULL. */
static hwloc_obj_t single_intersecting(hwloc_topology_t h,
                                       hwloc_const_cpuset_t set,
                                       hwloc_obj_type_t type) {
  hwloc_obj_t found = NULL;
  for (hwloc_obj_t o = hwloc_get_next_obj_by_type(h, type, NULL); o != NULL;
       o = hwloc_get_next_obj_by_type(h, type, o)) {
    if (o->cpuset == NULL || !hwloc_bitmap_intersects(o->cpuset, set)) continue;
    if (found != NULL) return NULL;
    found = o;
  }
  return found;
}

tpdp_status tpdp_topo_destroy(tpdp_topo *topo) {
  TPDP_API_ENTRY;
  if (topo == NULL) return TPDP_SUCCESS;
  free(topo->gpus);
  free(topo->info);
  if (topo->h != NULL) hwloc_topology_destroy(topo->h);
  free(topo);
  return TPDP_SUCCESS;
}

/* hwloc 2.9's XML import trusts a topology's sets: a root object with a
 * cpuset but no complete_cpuset, or a nodeset but no complete_nodeset,
 * makes it dereference NULL (hwloc_bitmap_set called from
 * hwloc_insert_object_by_parent; found by tests/fuzz/topo_xml_fuzz).
 * hwloc's own exports write both sets of each pair on every object, so a
 * file where an object has one without the other was not written by
 * hwloc: refuse it, naming the object, before hwloc reads it. The scan
 * knows just enough XML for that: tags and quoted attribute values (hwloc's
 * own XML reader takes no comments either). */
typedef struct {
  int cpuset, complete_cpuset, nodeset, complete_nodeset;
  char type[32];
} xml_object_sets;

/* The attributes of the tag starting at p (after "<object"); returns where
 * the tag ends (its '>' or the end of the text). */
static const char *scan_object_attrs(const char *p, const char *end,
                                     xml_object_sets *o) {
  memset(o, 0, sizeof *o);
  while (p < end && *p != '>') {
    if (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n' || *p == '/') {
      p++;
      continue;
    }
    const char *name = p;
    while (p < end && *p != '=' && *p != '>' && *p != ' ' && *p != '\t' &&
           *p != '\r' && *p != '\n')
      p++;
    size_t nlen = (size_t)(p - name);
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n'))
      p++;
    if (p >= end || *p != '=') continue;
    p++;
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n'))
      p++;
    if (p >= end || (*p != '"' && *p != '\'')) continue;
    const char quote = *p++;
    const char *val = p;
    while (p < end && *p != quote) p++;
    size_t vlen = (size_t)(p - val);
    if (p < end) p++;
#define IS(lit) (nlen == sizeof(lit) - 1 && memcmp(name, lit, nlen) == 0)
    if (IS("cpuset")) o->cpuset = 1;
    if (IS("complete_cpuset")) o->complete_cpuset = 1;
    if (IS("nodeset")) o->nodeset = 1;
    if (IS("complete_nodeset")) o->complete_nodeset = 1;
    if (IS("type")) {
      if (vlen >= sizeof o->type) vlen = sizeof o->type - 1;
      memcpy(o->type, val, vlen);
      o->type[vlen] = '\0';
    }
#undef IS
  }
  return p;
}

static tpdp_status check_xml_set_pairs(const char *path, const char *text,
                                       size_t len) {
  const char *p = text, *end = text + len;
  int line = 1;
  while (p < end) {
    if (*p == '\n') line++;
    if (end - p >= 8 && memcmp(p, "<object", 7) == 0 &&
        (p[7] == ' ' || p[7] == '\t' || p[7] == '\r' || p[7] == '\n')) {
      xml_object_sets o;
      const char *q = scan_object_attrs(p + 7, end, &o);
      const char *has = NULL, *lacks = NULL;
      if (o.cpuset != o.complete_cpuset) {
        has = o.cpuset ? "cpuset" : "complete_cpuset";
        lacks = o.cpuset ? "complete_cpuset" : "cpuset";
      } else if (o.nodeset != o.complete_nodeset) {
        has = o.nodeset ? "nodeset" : "complete_nodeset";
        lacks = o.nodeset ? "complete_nodeset" : "nodeset";
      }
      if (has != NULL)
        return TPDP_ERR(TPDP_ERR_IO,
                        "topology XML '%s': the object of type '%s' at line "
                        "%d has a %s but no %s (hwloc writes both of each "
                        "pair, and its XML import crashes on such an "
                        "object)",
                        path, o.type[0] ? o.type : "?", line, has, lacks);
      for (; p < q; p++) line += *p == '\n';
      continue;
    }
    p++;
  }
  return TPDP_SUCCESS;
}

/* A topology of a few thousand machines' worth of objects stays far below
 * this; a larger file is refused before it is read whole. */
#define TOPO_XML_MAX_BYTES (256 << 20)

/* Reads the whole file for check_xml_set_pairs. */
static tpdp_status check_xml_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (f == NULL)
    return TPDP_ERR(TPDP_ERR_IO, "cannot open topology XML '%s': %s", path,
                    strerror(errno));
  char *text = NULL;
  int len = 0, cap = 0;
  tpdp_status st = TPDP_SUCCESS;
  for (;;) {
    if (len > TOPO_XML_MAX_BYTES) {
      st = TPDP_ERR(TPDP_ERR_IO,
                    "topology XML '%s' is larger than %d bytes: not a "
                    "topology",
                    path, TOPO_XML_MAX_BYTES);
      break;
    }
    if (len + 65536 > cap) {
      st = core_grow((void **)&text, &cap, len + 65536, 1);
      if (st != TPDP_SUCCESS) break;
    }
    size_t got = fread(text + len, 1, (size_t)(cap - len), f);
    len += (int)got;
    if (got == 0) break;
  }
  if (st == TPDP_SUCCESS && ferror(f))
    st = TPDP_ERR(TPDP_ERR_IO, "cannot read topology XML '%s': %s", path,
                  strerror(errno));
  fclose(f);
  if (st == TPDP_SUCCESS) st = check_xml_set_pairs(path, text, (size_t)len);
  free(text);
  return st;
}

tpdp_status tpdp_topo_load(const char *xml_path, tpdp_topo **out) {
  TPDP_API_ENTRY;
  CHECK_PTR(out);
  *out = NULL;
  tpdp_topo *t = NULL;
  tpdp_status st = TPDP_SUCCESS;
  CHECK(TPDP_CALLOC(t, 1));
  if (hwloc_topology_init(&t->h) != 0) {
    st = TPDP_ERR(TPDP_ERR_INTERNAL, "hwloc_topology_init failed: %s",
                  strerror(errno));
    t->h = NULL;
    goto fail;
  }
  /* Keep PCI devices and bridges (hwloc drops I/O objects by default);
   * OS devices and Misc objects are not needed. */
  if (hwloc_topology_set_type_filter(t->h, HWLOC_OBJ_PCI_DEVICE,
                                     HWLOC_TYPE_FILTER_KEEP_ALL) != 0 ||
      hwloc_topology_set_type_filter(t->h, HWLOC_OBJ_BRIDGE,
                                     HWLOC_TYPE_FILTER_KEEP_ALL) != 0) {
    st = TPDP_ERR(TPDP_ERR_INTERNAL,
                  "hwloc_topology_set_type_filter (PCI devices, bridges) "
                  "failed: %s",
                  strerror(errno));
    goto fail;
  }
  if (xml_path != NULL) {
    CHECK_GOTO(check_xml_file(xml_path), st, fail);
    if (hwloc_topology_set_xml(t->h, xml_path) != 0) {
      st = TPDP_ERR(TPDP_ERR_IO, "hwloc cannot use '%s' as XML: %s", xml_path,
                    strerror(errno));
      goto fail;
    }
    snprintf(t->source, sizeof t->source, "%s", xml_path);
    t->from_xml = 1;
  } else {
    snprintf(t->source, sizeof t->source, "this machine");
  }
  if (hwloc_topology_load(t->h) != 0) {
    st = TPDP_ERR(xml_path ? TPDP_ERR_IO : TPDP_ERR_INTERNAL,
                  "hwloc_topology_load of %s failed: %s", t->source,
                  strerror(errno));
    goto fail;
  }
  t->counts.packages = count_type(t->h, HWLOC_OBJ_PACKAGE);
  t->counts.numa_nodes = count_type(t->h, HWLOC_OBJ_NUMANODE);
  t->counts.cores = count_type(t->h, core_type(t->h));
  t->counts.pus = count_type(t->h, HWLOC_OBJ_PU);

  int n = 0;
  for (hwloc_obj_t o = hwloc_get_next_pcidev(t->h, NULL); o != NULL;
       o = hwloc_get_next_pcidev(t->h, o))
    n += is_gpu(o);
  if (n > 0) {
    CHECK_GOTO(TPDP_CALLOC(t->gpus, (size_t)n), st, fail);
    CHECK_GOTO(TPDP_CALLOC(t->info, (size_t)n), st, fail);
  }
  int k = 0;
  for (hwloc_obj_t o = hwloc_get_next_pcidev(t->h, NULL); o != NULL;
       o = hwloc_get_next_pcidev(t->h, o))
    if (is_gpu(o)) t->gpus[k++] = o;
  if (n > 0) qsort(t->gpus, (size_t)n, sizeof *t->gpus, cmp_pci);
  t->counts.gpus = n;

  hwloc_obj_t *switches = NULL;
  if (n > 0) CHECK_GOTO(TPDP_CALLOC(switches, (size_t)n), st, fail);
  int nswitches = 0;
  for (int i = 0; i < n; i++) {
    hwloc_obj_t g = t->gpus[i];
    tpdp_gpu_info *gi = &t->info[i];
    const struct hwloc_pcidev_attr_s *pa = &g->attr->pcidev;
    gi->index = i;
    snprintf(gi->pci_bus_id, sizeof gi->pci_bus_id, "%04x:%02x:%02x.%01x",
             (unsigned)pa->domain, (unsigned)pa->bus, (unsigned)pa->dev,
             (unsigned)pa->func);
    gi->vendor_id = pa->vendor_id;
    gi->device_id = pa->device_id;
    gi->class_id = pa->class_id;
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(t->h, g);
    hwloc_const_cpuset_t set = anc && anc->cpuset
                                   ? anc->cpuset
                                   : hwloc_topology_get_topology_cpuset(t->h);
    hwloc_obj_t numa = single_intersecting(t->h, set, HWLOC_OBJ_NUMANODE);
    hwloc_obj_t pkg = single_intersecting(t->h, set, HWLOC_OBJ_PACKAGE);
    gi->numa_node = numa ? (int)numa->os_index : -1;
    gi->package = pkg ? (int)pkg->logical_index : -1;
    gi->ncores =
        hwloc_get_nbobjs_inside_cpuset_by_type(t->h, set, core_type(t->h));
    st = list_string(set, gi->cpuset, sizeof gi->cpuset);
    if (st != TPDP_SUCCESS) {
      free(switches);
      goto fail;
    }
    hwloc_obj_t sw = switch_of(g);
    int d = 0;
    while (d < nswitches && switches[d] != sw) d++;
    if (d == nswitches) switches[nswitches++] = sw;
    gi->switch_domain = d;
  }
  for (int d = 0; d < nswitches; d++) {
    int members = 0;
    for (int i = 0; i < n; i++) members += t->info[i].switch_domain == d;
    if (members > t->gpus_per_switch) t->gpus_per_switch = members;
  }
  t->shows_switches = t->gpus_per_switch >= 2;
  if (!t->shows_switches) t->gpus_per_switch = 0;
  free(switches);
  *out = t;
  return TPDP_SUCCESS;
fail:
  tpdp_topo_destroy(t); /* cannot fail */
  return st;
}

tpdp_status tpdp_topo_get_counts(const tpdp_topo *topo, tpdp_topo_counts *out) {
  TPDP_API_ENTRY;
  CHECK_PTR(topo);
  CHECK_PTR(out);
  *out = topo->counts;
  return TPDP_SUCCESS;
}

const char *tpdp_topo_source(const tpdp_topo *topo) {
  return topo ? topo->source : "(null)";
}

tpdp_status tpdp_topo_gpu(const tpdp_topo *topo, int index,
                          tpdp_gpu_info *out) {
  TPDP_API_ENTRY;
  CHECK_PTR(topo);
  CHECK_PTR(out);
  if (index < 0 || index >= topo->counts.gpus)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT, "GPU %d outside [0, %d) of %s",
                    index, topo->counts.gpus, topo->source);
  *out = topo->info[index];
  return TPDP_SUCCESS;
}

int tpdp_topo_shows_switches(const tpdp_topo *topo) {
  return topo ? topo->shows_switches : 0;
}

/* ---------------------------------------------------------- binding */

static hwloc_const_cpuset_t gpu_locality(const tpdp_topo *t, int g) {
  hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(t->h, t->gpus[g]);
  return anc && anc->cpuset ? anc->cpuset
                            : hwloc_topology_get_topology_cpuset(t->h);
}

tpdp_status topo_binding_set(const tpdp_topo *topo, int local_rank, int nlocal,
                             hwloc_bitmap_t set, tpdp_binding *out) {
  CHECK_PTR(topo);
  CHECK_PTR(out);
  if (nlocal < 1 || local_rank < 0 || local_rank >= nlocal)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT, "local rank %d outside [0, %d)",
                    local_rank, nlocal);
  memset(out, 0, sizeof *out);
  int ngpus = topo->counts.gpus;
  hwloc_const_cpuset_t loc;
  int j = local_rank, k = nlocal;
  if (ngpus > 0) {
    out->gpu = local_rank % ngpus;
    loc = gpu_locality(topo, out->gpu);
    j = 0;
    k = 0;
    for (int r = 0; r < nlocal; r++) {
      if (!hwloc_bitmap_isequal(gpu_locality(topo, r % ngpus), loc)) continue;
      if (r < local_rank) j++;
      k++;
    }
  } else {
    out->gpu = -1;
    loc = hwloc_topology_get_topology_cpuset(topo->h);
  }
  hwloc_obj_type_t ct = core_type(topo->h);
  int n = hwloc_get_nbobjs_inside_cpuset_by_type(topo->h, loc, ct);
  if (n <= 0)
    return TPDP_ERR(TPDP_ERR_INTERNAL, "no cores in the locality of %s%d on %s",
                    ngpus > 0 ? "GPU " : "host rank ",
                    ngpus > 0 ? out->gpu : local_rank, topo->source);
  int lo = (int)((long long)j * n / k);
  int hi = (int)((long long)(j + 1) * n / k);
  if (hi <= lo) hi = lo + 1;
  hwloc_bitmap_zero(set);
  for (int c = lo; c < hi; c++) {
    hwloc_obj_t core =
        hwloc_get_obj_inside_cpuset_by_type(topo->h, loc, ct, (unsigned)c);
    if (core != NULL && core->cpuset != NULL)
      hwloc_bitmap_or(set, set, core->cpuset);
  }
  out->sharers = k;
  out->share = j;
  out->ncores = hi - lo;
  return list_string(set, out->cpuset, sizeof out->cpuset);
}

tpdp_status tpdp_topo_binding_for(const tpdp_topo *topo, int local_rank,
                                  int nlocal, tpdp_binding *out) {
  TPDP_API_ENTRY;
  CHECK_PTR(topo);
  CHECK_PTR(out);
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  if (set == NULL)
    return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "hwloc_bitmap_alloc");
  tpdp_status st = topo_binding_set(topo, local_rank, nlocal, set, out);
  hwloc_bitmap_free(set);
  return st;
}

tpdp_status tpdp_topo_bind_self(const tpdp_topo *topo, int local_rank,
                                int nlocal, tpdp_binding *out) {
  TPDP_API_ENTRY;
  CHECK_PTR(topo);
  tpdp_binding b;
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  if (set == NULL)
    return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "hwloc_bitmap_alloc");
  tpdp_status st = topo_binding_set(topo, local_rank, nlocal, set, &b);
  if (st != TPDP_SUCCESS) goto done;
  if (core_env_long("TPDP_BIND", 1) == 0) {
    TPDP_INFO(
        "binding disabled (TPDP_BIND=0): local rank %d of %d would use "
        "PUs %s",
        local_rank, nlocal, b.cpuset);
    goto done;
  }
  if (topo->from_xml) {
    st = TPDP_ERR(TPDP_ERR_STATE,
                  "topology was loaded from %s, not from this machine: "
                  "cannot bind to it",
                  topo->source);
    goto done;
  }
  if (hwloc_set_cpubind(topo->h, set, HWLOC_CPUBIND_PROCESS) != 0) {
    st = TPDP_ERR(TPDP_ERR_UNSUPPORTED,
                  "hwloc_set_cpubind to PUs %s (local rank %d) failed: %s",
                  b.cpuset, local_rank, strerror(errno));
    goto done;
  }
  b.applied = 1;
  if (b.gpu >= 0)
    TPDP_INFO(
        "local rank %d of %d bound to %d core(s), PUs %s, near GPU %d "
        "(%s)",
        local_rank, nlocal, b.ncores, b.cpuset, b.gpu,
        topo->info[b.gpu].pci_bus_id);
  else
    TPDP_INFO("local rank %d of %d bound to %d core(s), PUs %s (no GPU)",
              local_rank, nlocal, b.ncores, b.cpuset);
done:
  hwloc_bitmap_free(set);
  if (st == TPDP_SUCCESS && out != NULL) *out = b;
  return st;
}

tpdp_status tpdp_topo_bind_rank(tpdp_comm *comm, tpdp_binding *out) {
  TPDP_API_ENTRY;
  CHECK_PTR(comm);
  int local_rank = 0, local_size = 1;
  /* collective: every rank takes part even when binding is disabled */
  CHECK(tpdp_comm_local_rank(comm, &local_rank, &local_size));
  tpdp_topo *topo = NULL;
  CHECK(tpdp_topo_load(NULL, &topo));
  tpdp_status st = tpdp_topo_bind_self(topo, local_rank, local_size, out);
  tpdp_topo_destroy(topo); /* cannot fail */
  return st;
}

/* ---------------------------------------------------------- text */

typedef struct {
  char *buf;
  size_t len, used;
} text_out;

static void out_printf(text_out *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void out_printf(text_out *o, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *dst = o->used < o->len ? o->buf + o->used : NULL;
  size_t room = o->used < o->len ? o->len - o->used : 0;
  int n = vsnprintf(dst, room, fmt, ap);
  va_end(ap);
  if (n > 0) o->used += (size_t)n;
}

size_t topo_text_printf(char *buf, size_t len, size_t used, const char *fmt,
                        ...) {
  va_list ap;
  va_start(ap, fmt);
  char *dst = used < len ? buf + used : NULL;
  size_t room = used < len ? len - used : 0;
  int n = vsnprintf(dst, room, fmt, ap);
  va_end(ap);
  return used + (n > 0 ? (size_t)n : 0);
}

static void print_gpus_inside(const tpdp_topo *t, text_out *o,
                              hwloc_const_cpuset_t set, const char *indent) {
  for (int i = 0; i < t->counts.gpus; i++) {
    if (!hwloc_bitmap_isincluded(gpu_locality(t, i), set)) continue;
    const tpdp_gpu_info *g = &t->info[i];
    out_printf(o, "%sGPU %d  %s  [%04x:%04x]\n", indent, i, g->pci_bus_id,
               g->vendor_id, g->device_id);
  }
}

size_t tpdp_topo_format(const tpdp_topo *topo, char *buf, size_t len) {
  text_out o = {buf, len, 0};
  if (len > 0) buf[0] = '\0';
  if (topo == NULL) return 0;
  const tpdp_topo_counts *c = &topo->counts;
  char list[TPDP_TOPO_CPUSET_LEN];
  out_printf(&o,
             "Machine (%s): %d package(s), %d NUMA node(s), %d core(s), "
             "%d PU(s), %d GPU(s)\n",
             topo->source, c->packages, c->numa_nodes, c->cores, c->pus,
             c->gpus);
  hwloc_obj_type_t ct = core_type(topo->h);
  for (hwloc_obj_t p =
           hwloc_get_next_obj_by_type(topo->h, HWLOC_OBJ_PACKAGE, NULL);
       p != NULL;
       p = hwloc_get_next_obj_by_type(topo->h, HWLOC_OBJ_PACKAGE, p)) {
    int ncores = hwloc_get_nbobjs_inside_cpuset_by_type(topo->h, p->cpuset, ct);
    if (hwloc_bitmap_list_snprintf(list, sizeof list, p->cpuset) < 0)
      list[0] = 0;
    out_printf(&o, "  Package %u: %d core(s), PUs %s\n", p->logical_index,
               ncores, list);
    for (hwloc_obj_t n =
             hwloc_get_next_obj_by_type(topo->h, HWLOC_OBJ_NUMANODE, NULL);
         n != NULL;
         n = hwloc_get_next_obj_by_type(topo->h, HWLOC_OBJ_NUMANODE, n)) {
      if (!hwloc_bitmap_isincluded(n->cpuset, p->cpuset) ||
          hwloc_bitmap_iszero(n->cpuset))
        continue;
      int nc = hwloc_get_nbobjs_inside_cpuset_by_type(topo->h, n->cpuset, ct);
      if (hwloc_bitmap_list_snprintf(list, sizeof list, n->cpuset) < 0)
        list[0] = 0;
      out_printf(&o, "    NUMA node %u: %d core(s), PUs %s, %llu MiB\n",
                 n->os_index, nc, list,
                 (unsigned long long)(n->attr->numanode.local_memory >> 20));
    }
    print_gpus_inside(topo, &o, p->cpuset, "    ");
  }
  /* GPUs whose locality spans several packages (or with no package). */
  for (int i = 0; i < c->gpus; i++) {
    if (topo->info[i].package >= 0 && c->packages > 0) continue;
    const tpdp_gpu_info *g = &topo->info[i];
    out_printf(&o, "  GPU %d  %s  [%04x:%04x] (no single package)\n", i,
               g->pci_bus_id, g->vendor_id, g->device_id);
  }
  if (c->gpus == 0) {
    out_printf(&o, "no GPUs found (NVIDIA PCI devices, vendor 0x10de)\n");
    return o.used;
  }
  out_printf(&o, "GPU affinity (PCIe switch domains %s):\n",
             topo->shows_switches ? "from shared PCI bridges"
                                  : "not shown: no GPUs share a bridge");
  out_printf(&o, "  %-4s %-13s %-5s %-8s %-7s %-6s %s\n", "GPU", "PCI bus id",
             "NUMA", "package", "switch", "cores", "PUs");
  for (int i = 0; i < c->gpus; i++) {
    const tpdp_gpu_info *g = &topo->info[i];
    char numa[16], pkg[16];
    snprintf(numa, sizeof numa, g->numa_node >= 0 ? "%d" : "-", g->numa_node);
    snprintf(pkg, sizeof pkg, g->package >= 0 ? "%d" : "-", g->package);
    out_printf(&o, "  %-4d %-13s %-5s %-8s %-7d %-6d %s\n", i, g->pci_bus_id,
               numa, pkg, g->switch_domain, g->ncores, g->cpuset);
  }
  return o.used;
}
