/* `tpdp`: the user-facing command. Dispatches to subcommands. */
#include <stdio.h>
#include <string.h>

#include "tools/cli/cli.h"
#include "tools/cli/commands.h"
#include "tpdp/core.h"

static const cli_command commands[] = {
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
    if (cli_wants_help(argc - 1, argv + 1)) {
      commands[i].usage();
      return 0;
    }
    return commands[i].run(argc - 1, argv + 1);
  }
  fprintf(stderr, "tpdp: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return 2;
}
