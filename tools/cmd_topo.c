/* Placeholder until this subcommand lands. */
#include <stdio.h>

#include "tools/commands.h"

void cmd_topo_usage(void) { printf("usage: tpdp topo (not available yet)\n"); }

int cmd_topo(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fprintf(stderr, "tpdp topo: not available in this build yet\n");
  return 2;
}
