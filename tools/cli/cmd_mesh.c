// SPDX-License-Identifier: BSD-3-Clause
/* `tpdp mesh`: show a device mesh layout without launching MPI: every
 * rank's coordinates and, per dim, the groups of ranks that form its
 * sub-communicators. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "tools/cli/cli.h"
#include "tools/cli/commands.h"
#include "tpdp/comm.h"

static void cmd_mesh_usage(void) {
  printf(
      "usage: tpdp mesh --mesh SPEC [--json]\n"
      "\n"
      "Shows the layout of a device mesh, as tpdp_mesh_create builds it, with\n"
      "no MPI launch: each rank's coordinates and, for each dim, the groups "
      "of\n"
      "world ranks that share a sub-communicator on that dim.\n"
      "\n"
      "Ranks are laid out row-major: for dims (d0, d1, ...) rank =\n"
      "(c0 * d1 + c1) * d2 + ... ; the group rank inside a dim's\n"
      "sub-communicator is the coordinate on that dim.\n"
      "\n"
      "options:\n"
      "  --mesh SPEC   named dims and sizes, e.g. dp=2,tp=2 (at most 8 dims,\n"
      "                1048576 ranks)\n"
      "  --json        print JSON instead of text\n"
      "  -h, --help    this text\n"
      "\n"
      "exit status: 0 ok, 2 bad arguments or mesh spec\n"
      "\n"
      "example:\n"
      "  tpdp mesh --mesh dp=2,tp=2\n");
}

static void print_group(const int *ranks, int64_t n, int json) {
  fputs(json ? "[" : "{", stdout);
  for (int64_t i = 0; i < n; i++)
    printf(i ? (json ? ", %d" : ",%d") : "%d", ranks[i]);
  fputs(json ? "]" : "}", stdout);
}

/* Group of ranks along `dim` for each rank whose coordinate on dim is 0. */
static int for_each_group(const tpdp_mesh *m, int dim, int json, int *buf) {
  int64_t size = tpdp_mesh_size(m);
  int64_t dsize = tpdp_mesh_dim_size(m, dim);
  int first = 1;
  for (int64_t r = 0; r < size; r++) {
    int64_t coords[TPDP_MAX_DIMS];
    if (tpdp_mesh_coords(m, (int)r, coords) != TPDP_SUCCESS) return 1;
    if (coords[dim] != 0) continue;
    if (tpdp_mesh_group_ranks(m, dim, (int)r, buf) != TPDP_SUCCESS) return 1;
    if (!first) fputs(json ? ", " : " ", stdout);
    first = 0;
    print_group(buf, dsize, json);
  }
  return 0;
}

/* Each rank's coordinates, a line per rank: a JSON object, or a row of the
 * text table. Returns 1 when the mesh cannot give them (tpdp_last_error). */
static int print_ranks(const tpdp_mesh *m, int json) {
  int64_t size = tpdp_mesh_size(m);
  int ndim = tpdp_mesh_ndim(m);
  for (int64_t r = 0; r < size; r++) {
    int64_t c[TPDP_MAX_DIMS];
    if (tpdp_mesh_coords(m, (int)r, c) != TPDP_SUCCESS) return 1;
    if (json) {
      printf("    {\"rank\": %lld, \"coords\": [", (long long)r);
      for (int d = 0; d < ndim; d++)
        printf(d ? ", %lld" : "%lld", (long long)c[d]);
      printf("]}%s\n", r + 1 < size ? "," : "");
    } else {
      printf("%6lld", (long long)r);
      for (int d = 0; d < ndim; d++) printf(" %6lld", (long long)c[d]);
      printf("\n");
    }
  }
  return 0;
}

/* s as a JSON string: escaped, invalid UTF-8 included (core/util.h), so
 * that the output is always valid JSON. Says so and returns 2 when memory
 * is short (1 is left to failed library calls). */
static int json_string(const char *s) {
  core_strbuf b = {0};
  core_sb_json_string(&b, s);
  int failed = b.failed;
  if (!failed) fputs(b.s, stdout);
  core_sb_free(&b);
  if (failed) fprintf(stderr, "tpdp mesh: out of memory\n");
  return failed ? 2 : 0;
}

static int cmd_mesh(int argc, char **argv) {
  const char *spec = NULL;
  int json = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--json") == 0) {
      json = 1;
    } else if (strcmp(argv[i], "--mesh") == 0) {
      if (i + 1 >= argc) {
        fprintf(stderr,
                "tpdp mesh: --mesh needs a value, e.g. --mesh dp=2,tp=2\n");
        return 2;
      }
      spec = argv[++i];
    } else if (strncmp(argv[i], "--mesh=", 7) == 0) {
      spec = argv[i] + 7;
    } else {
      fprintf(stderr,
              "tpdp mesh: unknown argument '%s' (see tpdp mesh --help)\n",
              argv[i]);
      return 2;
    }
  }
  if (spec == NULL) {
    fprintf(stderr,
            "tpdp mesh: --mesh SPEC is required, e.g. --mesh dp=2,tp=2\n");
    return 2;
  }
  tpdp_mesh *m = NULL;
  int urc = cli_mesh_create("mesh", spec, 0, &m);
  if (urc != 0) return urc;
  int ndim = tpdp_mesh_ndim(m);
  int64_t size = tpdp_mesh_size(m);
  int64_t maxd = 1;
  for (int d = 0; d < ndim; d++)
    if (tpdp_mesh_dim_size(m, d) > maxd) maxd = tpdp_mesh_dim_size(m, d);
  int *buf = malloc((size_t)maxd * sizeof *buf);
  if (buf == NULL) {
    fprintf(stderr, "tpdp mesh: out of memory\n");
    (void)tpdp_mesh_destroy(m); /* layout-only: nothing can fail */
    return 1;
  }
  int rc = 0;
  if (json) {
    printf("{\n  \"mesh\": ");
    rc = json_string(spec);
    printf(",\n  \"size\": %lld,\n  \"dims\": [\n", (long long)size);
    for (int d = 0; d < ndim && rc == 0; d++) {
      printf("    {\"name\": ");
      rc = json_string(tpdp_mesh_dim_name(m, d));
      printf(", \"size\": %lld, \"groups\": [",
             (long long)tpdp_mesh_dim_size(m, d));
      if (rc == 0) rc = for_each_group(m, d, 1, buf);
      printf("]}%s\n", d + 1 < ndim ? "," : "");
    }
    printf("  ],\n  \"ranks\": [\n");
    if (rc == 0) rc = print_ranks(m, 1);
    printf("  ]\n}\n");
  } else {
    printf("mesh %s: %d dim%s, %lld rank%s (row-major)\n", spec, ndim,
           ndim == 1 ? "" : "s", (long long)size, size == 1 ? "" : "s");
    printf("\n%6s", "rank");
    for (int d = 0; d < ndim; d++) printf(" %6s", tpdp_mesh_dim_name(m, d));
    printf("\n");
    rc = print_ranks(m, 0);
    printf("\nsub-communicators (world ranks, in group-rank order):\n");
    for (int d = 0; d < ndim && rc == 0; d++) {
      int64_t ds = tpdp_mesh_dim_size(m, d);
      printf("  %s (size %lld, %lld group%s): ", tpdp_mesh_dim_name(m, d),
             (long long)ds, (long long)(size / ds), size / ds == 1 ? "" : "s");
      rc = for_each_group(m, d, 0, buf);
      printf("\n");
    }
  }
  if (rc == 1) fprintf(stderr, "tpdp mesh: %s\n", tpdp_last_error());
  free(buf);
  (void)tpdp_mesh_destroy(m); /* layout-only: nothing can fail */
  return rc != 0;
}

const cli_command cli_cmd_mesh = {
    "mesh", "show a device mesh layout: coordinates and groups", cmd_mesh,
    cmd_mesh_usage};
