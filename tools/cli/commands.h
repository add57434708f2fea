// SPDX-License-Identifier: BSD-3-Clause
/* Subcommands of the `tpdp` CLI. Each lives in its own cmd_*.c file, which
 * defines its cli_command cli_cmd_NAME; tpdp.c lists them. Shared helpers:
 * cli.h. */
#ifndef TPDP_TOOLS_CLI_COMMANDS_H
#define TPDP_TOOLS_CLI_COMMANDS_H

typedef struct {
  const char *name;
  const char *summary; /* one line for `tpdp --help` */
  /* Runs it: argv[0] is the subcommand name; returns the process exit
   * status: 0 success, 1 failure, 2 usage error. */
  int (*run)(int argc, char **argv);
  void (*usage)(void); /* `tpdp NAME --help` text */
} cli_command;

extern const cli_command cli_cmd_version, cli_cmd_mesh, cli_cmd_shard,
    cli_cmd_buckets, cli_cmd_topo, cli_cmd_plan, cli_cmd_partition,
    cli_cmd_ckpt;

#endif
