// SPDX-License-Identifier: BSD-3-Clause
/* `tpdp`: the user-facing command. Dispatches to subcommands. */
#include <stdio.h>
#include <string.h>

#include "tools/cli/cli.h"
#include "tools/cli/commands.h"
#include "tpdp/core.h"

/* In the order `tpdp --help` lists them. */
static const cli_command *const commands[] = {
    &cli_cmd_version, &cli_cmd_mesh, &cli_cmd_shard,     &cli_cmd_buckets,
    &cli_cmd_topo,    &cli_cmd_plan, &cli_cmd_partition, &cli_cmd_ckpt};
static const int ncommands = (int)(sizeof commands / sizeof commands[0]);

static void usage(FILE *out) {
  fprintf(out,
          "usage: tpdp <command> [options]\n"
          "       tpdp <command> --help\n\n"
          "tpdp composes tensor parallelism and data parallelism.\n\n"
          "commands:\n");
  for (int i = 0; i < ncommands; i++)
    fprintf(out, "  %-10s %s\n", commands[i]->name, commands[i]->summary);
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
  if (strcmp(argv[1], "--version") == 0)
    return cli_cmd_version.run(1, argv + 1);
  for (int i = 0; i < ncommands; i++) {
    if (strcmp(argv[1], commands[i]->name) != 0) continue;
    if (cli_wants_help(argc - 1, argv + 1)) {
      commands[i]->usage();
      return 0;
    }
    return commands[i]->run(argc - 1, argv + 1);
  }
  fprintf(stderr, "tpdp: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return 2;
}
