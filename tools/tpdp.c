/* `tpdp`: the user-facing command. Dispatches to subcommands. */
#include <stdio.h>
#include <string.h>

#include "tools/commands.h"
#include "tpdp/core.h"

static const tpdp_command commands[] = {
    {"version", "print the library version", cmd_version, cmd_version_usage},
    {"mesh", "show a device mesh layout: coordinates and groups", cmd_mesh,
     cmd_mesh_usage},
    {"shard", "show each rank's local shape and offset for a spec", cmd_shard,
     cmd_shard_usage},
    {"buckets", "show DDP-style gradient bucket assignment", cmd_buckets,
     cmd_buckets_usage},
    {"topo", "show machine topology, GPU affinity, mesh advice", cmd_topo,
     cmd_topo_usage},
    {"plan", "show how a model will be sharded (tree, params, buckets)",
     cmd_plan, cmd_plan_usage},
    {"partition", "split a model into balanced pipeline stages", cmd_partition,
     cmd_partition_usage},
    {"ckpt", "inspect or consolidate a sharded checkpoint", cmd_ckpt,
     cmd_ckpt_usage},
};
static const int ncommands = (int)(sizeof commands / sizeof commands[0]);

int tpdp_cli_wants_help(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) return 1;
  return 0;
}

int tpdp_cli_usage_error(const char *cmd, const char *fmt, const char *arg) {
  fprintf(stderr, "tpdp %s: ", cmd);
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n(see tpdp %s --help)\n", cmd);
  return 2;
}

const char *tpdp_cli_opt_value(int argc, char **argv, int *i, const char *name,
                               int *missing) {
  size_t n = strlen(name);
  if (strncmp(argv[*i], name, n) != 0) return NULL;
  if (argv[*i][n] == '=') return argv[*i] + n + 1;
  if (argv[*i][n] != '\0') return NULL;
  if (*i + 1 >= argc) {
    *missing = 1;
    return NULL;
  }
  return argv[++*i];
}

static void usage(FILE *out) {
  fprintf(out,
          "usage: tpdp <command> [options]\n"
          "       tpdp <command> --help\n\n"
          "tpdp composes tensor parallelism and data parallelism.\n\n"
          "commands:\n");
  for (int i = 0; i < ncommands; i++)
    fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
  fprintf(out,
          "\nenvironment: TPDP_DEBUG=WARN|INFO|TRACE sets the log level.\n");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 ||
      strcmp(argv[1], "help") == 0) {
    usage(stdout);
    return 0;
  }
  if (strcmp(argv[1], "--version") == 0) return cmd_version(1, argv + 1);
  for (int i = 0; i < ncommands; i++) {
    if (strcmp(argv[1], commands[i].name) != 0) continue;
    if (tpdp_cli_wants_help(argc - 1, argv + 1)) {
      commands[i].usage();
      return 0;
    }
    return commands[i].run(argc - 1, argv + 1);
  }
  fprintf(stderr, "tpdp: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return 2;
}
