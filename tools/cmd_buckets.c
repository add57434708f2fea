/* Placeholder until this subcommand lands. */
#include <stdio.h>

#include "tools/commands.h"

void cmd_buckets_usage(void) { printf("usage: tpdp buckets (not available yet)\n"); }

int cmd_buckets(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fprintf(stderr, "tpdp buckets: not available in this build yet\n");
  return 2;
}
