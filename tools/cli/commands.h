/* Subcommands of the `tpdp` CLI. Each lives in its own cmd_*.c file and
 * returns the process exit status: 0 success, 1 failure, 2 usage error.
 * Shared helpers: cli.h. */
#ifndef TPDP_TOOLS_CLI_COMMANDS_H
#define TPDP_TOOLS_CLI_COMMANDS_H

typedef struct {
  const char *name;
  const char *summary;               /* one line for `tpdp --help` */
  int (*run)(int argc, char **argv); /* argv[0] is the subcommand name */
  void (*usage)(void);               /* `tpdp NAME --help` text */
} cli_command;

int cmd_version(int argc, char **argv);
void cmd_version_usage(void);
int cmd_mesh(int argc, char **argv);
void cmd_mesh_usage(void);
int cmd_shard(int argc, char **argv);
void cmd_shard_usage(void);
int cmd_buckets(int argc, char **argv);
void cmd_buckets_usage(void);
int cmd_topo(int argc, char **argv);
void cmd_topo_usage(void);
int cmd_plan(int argc, char **argv);
void cmd_plan_usage(void);
int cmd_partition(int argc, char **argv);
void cmd_partition_usage(void);
int cmd_ckpt(int argc, char **argv);
void cmd_ckpt_usage(void);

#endif
