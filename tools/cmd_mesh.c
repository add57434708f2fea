/* Placeholder until this subcommand lands. */
#include <stdio.h>

#include "tools/commands.h"

void cmd_mesh_usage(void) { printf("usage: tpdp mesh (not available yet)\n"); }

int cmd_mesh(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fprintf(stderr, "tpdp mesh: not available in this build yet\n");
  return 2;
}
