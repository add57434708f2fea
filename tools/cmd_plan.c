/* Placeholder until this subcommand lands. */
#include <stdio.h>

#include "tools/commands.h"

void cmd_plan_usage(void) { printf("usage: tpdp plan (not available yet)\n"); }

int cmd_plan(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fprintf(stderr, "tpdp plan: not available in this build yet\n");
  return 2;
}
