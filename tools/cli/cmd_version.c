// SPDX-License-Identifier: BSD-3-Clause
#include <stdio.h>

#include "tools/cli/cli.h"
#include "tools/cli/commands.h"
#include "tpdp/core.h"

static void cmd_version_usage(void) {
  printf("usage: tpdp version\n\nPrints the tpdp library version.\n");
}

static int cmd_version(int argc, char **argv) {
  (void)argc;
  (void)argv;
  int v = tpdp_version();
  printf("tpdp %d.%d.%d\n", v / 10000, (v / 100) % 100, v % 100);
  return 0;
}

const cli_command cli_cmd_version = {"version", "print the library version",
                                     cmd_version, cmd_version_usage};
