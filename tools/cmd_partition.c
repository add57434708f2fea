/* Placeholder until this subcommand lands. */
#include <stdio.h>

#include "tools/commands.h"

void cmd_partition_usage(void) { printf("usage: tpdp partition (not available yet)\n"); }

int cmd_partition(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fprintf(stderr, "tpdp partition: not available in this build yet\n");
  return 2;
}
