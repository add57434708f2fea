// SPDX-License-Identifier: BSD-3-Clause
/* Mesh placement advice: do the TP groups of a row-major mesh stay inside
 * one host / PCIe switch / NUMA node, and which dim order makes them. */
#include <stdio.h>
#include <string.h>

#include "core/check.h"
#include "topo/topo_internal.h"
#include "tpdp/comm.h"

typedef struct {
  int in_host, in_switch, in_numa;
} group_check;

/* Check every TP group of a layout where TP neighbours are `stride` ranks
 * apart. */
static group_check check_groups(const tpdp_topo *t, int64_t world, int64_t tp,
                                int64_t stride, int rph, int uses_gpus) {
  group_check g = {1, 1, 1};
  for (int64_t r = 0; r < world; r++) {
    if ((r / stride) % tp != 0) continue; /* first member of its group */
    int64_t host = r / rph;
    int first_local = (int)(r % rph);
    for (int64_t c = 1; c < tp; c++) {
      int64_t m = r + c * stride;
      int local = (int)(m % rph);
      if (m / rph != host) {
        g.in_host = g.in_switch = g.in_numa = 0;
        return g;
      }
      if (uses_gpus) {
        if (t->info[local].switch_domain != t->info[first_local].switch_domain)
          g.in_switch = 0;
        if (t->info[local].numa_node != t->info[first_local].numa_node)
          g.in_numa = 0;
      }
    }
  }
  return g;
}

static void join_mesh(char *buf, size_t len, int ndim, const int *order,
                      const char *const *names, const int64_t *sizes) {
  size_t used = 0;
  if (len > 0) buf[0] = '\0';
  for (int i = 0; i < ndim; i++)
    used = topo_text_printf(buf, len, used, "%s%s=%lld", i ? "," : "",
                            names[order[i]], (long long)sizes[order[i]]);
}

tpdp_status tpdp_topo_advise(const tpdp_topo *topo, const char *mesh_spec,
                             tpdp_placement_advice *out) {
  TPDP_API_ENTRY;
  CHECK_PTR(topo);
  CHECK_PTR(mesh_spec);
  CHECK_PTR(out);
  char storage[sizeof out->mesh];
  /* out->mesh and out->suggested hold the spec: a longer one would be
   * truncated into a wrong suggestion. */
  if (strlen(mesh_spec) >= sizeof storage)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "mesh spec '%.40s...' has %zu characters; the advice "
                    "holds at most %zu",
                    mesh_spec, strlen(mesh_spec), sizeof storage - 1);
  int ndim = 0;
  int64_t sizes[TPDP_MAX_DIMS];
  const char *names[TPDP_MAX_DIMS];
  CHECK(tpdp_mesh_parse(mesh_spec, storage, &ndim, sizes, names));
  memset(out, 0, sizeof *out);
  int tp_dim = ndim - 1;
  for (int i = 0; i < ndim; i++)
    if (strcmp(names[i], "tp") == 0) tp_dim = i;
  int64_t world = 1, stride = 1;
  /* Checked at each step (sizes are at most INT_MAX), so the product
   * never wraps. */
  for (int i = 0; i < ndim; i++) {
    world *= sizes[i];
    if (world > ((int64_t)1 << 24))
      return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                      "mesh %s has more than %lld ranks, the most advice "
                      "handles",
                      mesh_spec, (long long)1 << 24);
  }
  for (int i = tp_dim + 1; i < ndim; i++) stride *= sizes[i];
  int order[TPDP_MAX_DIMS];
  for (int i = 0; i < ndim; i++) order[i] = i;
  join_mesh(out->mesh, sizeof out->mesh, ndim, order, names, sizes);
  out->tp_dim = tp_dim;
  snprintf(out->tp_name, sizeof out->tp_name, "%s", names[tp_dim]);
  out->tp_size = sizes[tp_dim];
  out->tp_stride = stride;
  out->world_size = world;
  out->uses_gpus = topo->counts.gpus > 0;
  out->ranks_per_host = out->uses_gpus ? topo->counts.gpus : topo->counts.cores;
  if (out->ranks_per_host < 1) out->ranks_per_host = 1;
  int rph = out->ranks_per_host;
  out->nhosts = (world + rph - 1) / rph;

  group_check g =
      check_groups(topo, world, out->tp_size, stride, rph, out->uses_gpus);
  out->tp_in_host = g.in_host;
  out->gpus_per_switch = topo->gpus_per_switch;
  out->tp_in_switch = out->uses_gpus && topo->shows_switches ? g.in_switch : -1;
  int numa_known = out->uses_gpus;
  for (int i = 0; i < topo->counts.gpus; i++)
    if (topo->info[i].numa_node < 0) numa_known = 0;
  out->tp_in_numa = numa_known ? g.in_numa : -1;

  /* Suggestion: the TP dim innermost (TP neighbours on consecutive ranks,
   * hence on one host whenever tp divides the ranks per host), the other
   * dims in their given order. */
  int k = 0;
  for (int i = 0; i < ndim; i++)
    if (i != tp_dim) order[k++] = i;
  order[k] = tp_dim;
  join_mesh(out->suggested, sizeof out->suggested, ndim, order, names, sizes);
  out->reorder = tp_dim != ndim - 1;
  group_check best =
      check_groups(topo, world, out->tp_size, 1, rph, out->uses_gpus);
  out->fixable = best.in_host;
  return TPDP_SUCCESS;
}

static const char *yes_no(int v) {
  return v > 0 ? "yes" : v == 0 ? "no" : "unknown";
}

size_t tpdp_topo_advice_format(const tpdp_placement_advice *a, char *buf,
                               size_t len) {
  size_t u = 0;
  if (len > 0) buf[0] = '\0';
  if (a == NULL) return 0;
  const char *unit = a->uses_gpus ? "GPUs" : "cores (no GPUs)";
  u = topo_text_printf(buf, len, u,
                       "mesh %s: %lld ranks on %lld host(s) of %d %s, "
                       "ranks filling hosts in order\n",
                       a->mesh, (long long)a->world_size, (long long)a->nhosts,
                       a->ranks_per_host, unit);
  u = topo_text_printf(buf, len, u,
                       "  TP dim '%s': size %lld, neighbours %lld rank(s) "
                       "apart\n",
                       a->tp_name, (long long)a->tp_size,
                       (long long)a->tp_stride);
  u = topo_text_printf(buf, len, u, "  each TP group inside one host: %s\n",
                       yes_no(a->tp_in_host));
  if (a->tp_in_switch >= 0)
    u = topo_text_printf(buf, len, u,
                         "  each TP group inside one PCIe switch: %s "
                         "(up to %d GPUs share a switch)\n",
                         yes_no(a->tp_in_switch), a->gpus_per_switch);
  else if (a->uses_gpus)
    u = topo_text_printf(buf, len, u,
                         "  PCIe switch: not shown by the topology (no "
                         "GPUs share a bridge)\n");
  if (a->tp_in_numa >= 0)
    u = topo_text_printf(buf, len, u,
                         "  each TP group's GPUs on one NUMA node: %s\n",
                         yes_no(a->tp_in_numa));
  if (a->tp_in_host > 0 && !a->reorder) {
    u = topo_text_printf(buf, len, u,
                         "  advice: keep %s (TP innermost, each TP group "
                         "on one host)\n",
                         a->mesh);
  } else if (a->fixable) {
    u = topo_text_printf(buf, len, u,
                         "  advice: put %s innermost: mesh %s keeps each "
                         "TP group on one host\n",
                         a->tp_name, a->suggested);
  } else {
    /* No order keeps every TP group on one host. */
    int too_big = a->tp_size > a->ranks_per_host;
    u = topo_text_printf(
        buf, len, u, "  advice: %s=%lld %s the %d %s of a host", a->tp_name,
        (long long)a->tp_size, too_big ? "is larger than" : "does not divide",
        a->ranks_per_host, a->uses_gpus ? "GPUs" : "cores");
    if (too_big)
      u = topo_text_printf(buf, len, u,
                           ": no order keeps a TP group on one host; use %s "
                           "<= %d\n",
                           a->tp_name, a->ranks_per_host);
    else
      u = topo_text_printf(buf, len, u,
                           ", so some TP groups straddle two hosts whatever "
                           "the order; use a divisor of %d%s%s\n",
                           a->ranks_per_host,
                           a->reorder ? " and the order " : "",
                           a->reorder ? a->suggested : "");
  }
  if (a->tp_in_host > 0 && a->tp_in_switch == 0 && a->gpus_per_switch > 0 &&
      a->tp_size > a->gpus_per_switch)
    u = topo_text_printf(buf, len, u,
                         "  note: TP traffic crosses PCIe switches (a "
                         "group of %lld spans switches of %d GPUs); "
                         "fine with NVLink/NVSwitch, slow over PCIe\n",
                         (long long)a->tp_size, a->gpus_per_switch);
  return u;
}
