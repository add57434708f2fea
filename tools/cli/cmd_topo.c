// SPDX-License-Identifier: BSD-3-Clause
/* tpdp topo [--xml FILE] [--mesh dp=..,tp=..] [--local-ranks N]: the
 * machine tree, GPU affinity table, per-rank bindings and mesh advice. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/cli/cli.h"
#include "tools/cli/commands.h"
#include "tpdp/topo.h"
#include "tpdp/tpdp.h"

static void cmd_topo_usage(void) {
  printf(
      "usage: tpdp topo [--xml FILE] [--mesh SPEC] [--local-ranks N]\n"
      "\n"
      "Print this machine's topology (or that of an hwloc XML export, e.g.\n"
      "from `lstopo FILE.xml`): packages, NUMA nodes, cores, NVIDIA GPUs,\n"
      "the GPU affinity table and the cores each local rank is bound to.\n"
      "\n"
      "  --xml FILE        read the topology from FILE instead\n"
      "  --mesh SPEC       advise on a mesh such as dp=4,tp=8: does each TP\n"
      "                    group stay inside one host / PCIe switch, and\n"
      "                    which dim order makes it so (every host assumed\n"
      "                    like this one); at most 1048576 ranks\n"
      "  --local-ranks N   ranks per host for the binding table, 1..4096\n"
      "                    (default: the GPUs, or 1 without GPUs)\n");
}

static char *format_all(size_t (*fn)(const void *, char *, size_t),
                        const void *obj) {
  size_t n = fn(obj, NULL, 0);
  char *buf = malloc(n + 1);
  if (buf != NULL) fn(obj, buf, n + 1);
  return buf;
}

static size_t topo_fmt(const void *o, char *b, size_t l) {
  return tpdp_topo_format((const tpdp_topo *)o, b, l);
}
static size_t advice_fmt(const void *o, char *b, size_t l) {
  return tpdp_topo_advice_format((const tpdp_placement_advice *)o, b, l);
}

/* Ranks on one host for the binding table. Each row compares the rank with
 * all the others (quadratic): 4096, far above any host's core count, still
 * prints in well under a second. */
#define TOPO_MAX_LOCAL_RANKS 4096

static int cmd_topo(int argc, char **argv) {
  const char *xml = NULL, *mesh = NULL;
  int64_t nlocal = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--xml") == 0 && i + 1 < argc) {
      xml = argv[++i];
    } else if (strcmp(argv[i], "--mesh") == 0 && i + 1 < argc) {
      mesh = argv[++i];
      /* The same mesh limit as every subcommand, before any work. */
      tpdp_mesh *m = NULL;
      int urc = cli_mesh_create("topo", mesh, 0, &m);
      tpdp_mesh_destroy(m);
      if (urc != 0) return urc;
    } else if (strcmp(argv[i], "--local-ranks") == 0 && i + 1 < argc) {
      int urc = cli_int_option("topo", "--local-ranks", argv[++i], 1,
                               TOPO_MAX_LOCAL_RANKS, &nlocal);
      if (urc != 0) return urc;
    } else {
      fprintf(stderr, "tpdp topo: unexpected argument '%s'\n", argv[i]);
      cmd_topo_usage();
      return 2;
    }
  }
  tpdp_topo *topo = NULL;
  if (tpdp_topo_load(xml, &topo) != TPDP_SUCCESS) {
    fprintf(stderr, "tpdp topo: %s\n", tpdp_last_error());
    return 1;
  }
  int rc = 0;
  char *text = format_all(topo_fmt, topo);
  if (text != NULL) fputs(text, stdout);
  free(text);

  tpdp_topo_counts c;
  tpdp_topo_get_counts(topo, &c);
  if (nlocal == 0) nlocal = c.gpus > 0 ? c.gpus : 1;
  printf("Binding for %lld local rank(s)%s:\n", (long long)nlocal,
         getenv("TPDP_BIND") && strcmp(getenv("TPDP_BIND"), "0") == 0
             ? " (TPDP_BIND=0: ranks would not be bound)"
             : "");
  for (int r = 0; r < nlocal; r++) {
    tpdp_binding b;
    if (tpdp_topo_binding_for(topo, r, (int)nlocal, &b) != TPDP_SUCCESS) {
      fprintf(stderr, "tpdp topo: %s\n", tpdp_last_error());
      rc = 1;
      break;
    }
    if (b.gpu >= 0)
      printf("  local rank %-3d GPU %-2d %d core(s)  PUs %s\n", r, b.gpu,
             b.ncores, b.cpuset);
    else
      printf("  local rank %-3d %d core(s)  PUs %s\n", r, b.ncores, b.cpuset);
  }
  if (mesh != NULL && rc == 0) {
    tpdp_placement_advice a;
    if (tpdp_topo_advise(topo, mesh, &a) != TPDP_SUCCESS) {
      fprintf(stderr, "tpdp topo: %s\n", tpdp_last_error());
      rc = 2;
    } else {
      printf("Placement advice:\n");
      char *adv = format_all(advice_fmt, &a);
      if (adv != NULL) fputs(adv, stdout);
      free(adv);
    }
  }
  if (tpdp_topo_destroy(topo) != TPDP_SUCCESS && rc == 0) rc = 1;
  return rc;
}

const cli_command cli_cmd_topo = {
    "topo", "show machine topology, GPU affinity, mesh advice", cmd_topo,
    cmd_topo_usage};
