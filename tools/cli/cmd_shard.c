// SPDX-License-Identifier: BSD-3-Clause
/* `tpdp shard`: each mesh rank's local shape and global offset for a
 * global shape, a mesh and placements (layout-only mesh: no MPI needed). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/cli/cli.h"
#include "tools/cli/commands.h"
#include "tpdp/tpdp.h"

static void cmd_shard_usage(void) {
  printf(
      "usage: tpdp shard --shape N[,N...] --mesh D[,D...] --placements P[,P...]"
      " [--json]\n\n"
      "Show every mesh rank's local shape and global offset (torch.chunk\n"
      "rule: chunk = ceil(n/k), possibly empty shards).\n\n"
      "  --shape       global tensor shape, e.g. 10,7 (an f32 tensor: its\n"
      "                bytes must fit in int64)\n"
      "  --mesh        mesh sizes (2,3) or named dims (dp=2,tp=3); at most\n"
      "                1048576 ranks\n"
      "  --placements  one per mesh dim: S<dim>, R, P or P:<op>\n"
      "                (op: sum, avg, max, min)\n"
      "  --json        one line: {\"ranks\":[{\"rank\":0,\"coords\":[..],\n"
      "                \"local_shape\":[..],\"global_offset\":[..]},...]}\n\n"
      "exit status: 0 ok, 2 bad arguments (message on stderr)\n");
}

/* A failed library call: its message, and the exit status `rc`. */
static int fail(const char *what, int rc) {
  fprintf(stderr, "tpdp shard: %s: %s\n", what, tpdp_last_error());
  return rc;
}

static void print_list(int n, const int64_t *v, int compact) {
  putchar('[');
  for (int i = 0; i < n; i++)
    printf(i ? (compact ? ",%lld" : ", %lld") : "%lld", (long long)v[i]);
  putchar(']');
}

static int cmd_shard(int argc, char **argv) {
  const char *shape_text = NULL, *mesh_text = NULL, *pl_text = NULL;
  int json = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--json") == 0) {
      json = 1;
    } else if (i + 1 < argc && strcmp(argv[i], "--shape") == 0) {
      shape_text = argv[++i];
    } else if (i + 1 < argc && strcmp(argv[i], "--mesh") == 0) {
      mesh_text = argv[++i];
    } else if (i + 1 < argc && strcmp(argv[i], "--placements") == 0) {
      pl_text = argv[++i];
    } else {
      fprintf(stderr, "tpdp shard: unknown or incomplete argument '%s'\n",
              argv[i]);
      cmd_shard_usage();
      return 2;
    }
  }
  if (!shape_text || !mesh_text || !pl_text) {
    fprintf(stderr,
            "tpdp shard: --shape, --mesh and --placements are "
            "required\n");
    return 2;
  }
  int ndim = 0;
  int64_t shape[TPDP_MAX_DIMS];
  /* An f32 tensor: its bytes must fit in int64, or the library's sizes,
   * offsets and chunk arithmetic would wrap around. */
  int rc =
      cli_shape_option("shard", "--shape", shape_text, TPDP_F32, &ndim, shape);
  if (rc != 0) return rc;
  tpdp_mesh *mesh = NULL;
  rc = cli_mesh_create("shard", mesh_text, 1, &mesh);
  if (rc != 0) return rc;
  tpdp_status st;
  tpdp_placement pl[TPDP_MAX_DIMS];
  int np = 0;
  tpdp_spec *spec = NULL;
  st = tpdp_placements_parse(pl_text, pl, TPDP_MAX_DIMS, &np);
  if (st == TPDP_SUCCESS) {
    tpdp_device cpu = {TPDP_DEVICE_CPU, 0};
    st = tpdp_spec_create(mesh, pl, np, ndim, shape, TPDP_F32, cpu, &spec);
  }
  if (st != TPDP_SUCCESS) {
    int r = fail("bad --placements/--shape", 2);
    (void)tpdp_mesh_destroy(mesh); /* layout-only: nothing can fail */
    return r;
  }
  int mesh_ndim = tpdp_mesh_ndim(mesh);
  int64_t size = tpdp_mesh_size(mesh);
  if (json) {
    printf("{\"ranks\":[");
  } else {
    printf("%-6s %-16s %-24s %s\n", "rank", "coords", "local_shape",
           "global_offset");
  }
  for (int r = 0; r < size && st == TPDP_SUCCESS; r++) {
    int64_t coords[TPDP_MAX_DIMS], ls[TPDP_MAX_DIMS], off[TPDP_MAX_DIMS];
    st = tpdp_mesh_coords(mesh, r, coords);
    if (st == TPDP_SUCCESS) st = tpdp_spec_local_shape(spec, r, ls, off);
    if (st != TPDP_SUCCESS) break;
    if (json) {
      printf("%s{\"rank\":%d,\"coords\":", r ? "," : "", r);
      print_list(mesh_ndim, coords, 1);
      printf(",\"local_shape\":");
      print_list(ndim, ls, 1);
      printf(",\"global_offset\":");
      print_list(ndim, off, 1);
      putchar('}');
    } else {
      char c[64], l[96], o[96];
      tpdp_shape_format(mesh_ndim, coords, c, sizeof c);
      tpdp_shape_format(ndim, ls, l, sizeof l);
      tpdp_shape_format(ndim, off, o, sizeof o);
      printf("%-6d %-16s %-24s %s\n", r, c, l, o);
    }
  }
  if (json) printf("]}\n");
  tpdp_spec_destroy(spec);
  if (st == TPDP_SUCCESS)
    st = tpdp_mesh_destroy(mesh);
  else
    (void)tpdp_mesh_destroy(mesh); /* keep the first error message */
  if (st != TPDP_SUCCESS) return fail("internal", 1);
  return 0;
}

const cli_command cli_cmd_shard = {
    "shard", "show each rank's local shape and offset for a spec", cmd_shard,
    cmd_shard_usage};
