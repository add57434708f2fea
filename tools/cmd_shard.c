/* Placeholder until this subcommand lands. */
#include <stdio.h>

#include "tools/commands.h"

void cmd_shard_usage(void) { printf("usage: tpdp shard (not available yet)\n"); }

int cmd_shard(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fprintf(stderr, "tpdp shard: not available in this build yet\n");
  return 2;
}
