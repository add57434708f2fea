// SPDX-License-Identifier: BSD-3-Clause
/* A stand-in for OpenBLAS on a CPU it does not recognise, for
 * blas_core_test.sh: preloaded (LD_PRELOAD), it answers "Prescott" to
 * openblas_get_corename() while OPENBLAS_CORETYPE is unset - what Debian's
 * OpenBLAS 0.3.21 picks on a recent Xeon - and OpenBLAS's own answer once
 * it is set (OpenBLAS then runs the kernels the variable names). Every
 * start of a process image appends "<program> pid <pid>
 * OPENBLAS_CORETYPE=<value>" to $BLAS_SHIM_LOG, so the test counts the
 * restarts. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

char *openblas_get_corename(void) {
  if (getenv("OPENBLAS_CORETYPE") == NULL) return (char *)"Prescott";
  char *(*real)(void) =
      (char *(*)(void))dlsym(RTLD_NEXT, "openblas_get_corename");
  return real ? real() : (char *)"unknown";
}

__attribute__((constructor)) static void log_start(void) {
  const char *path = getenv("BLAS_SHIM_LOG");
  if (path == NULL) return;
  FILE *f = fopen(path, "a");
  if (f == NULL) return;
  const char *core = getenv("OPENBLAS_CORETYPE");
  char exe[4096] = "";
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  exe[n > 0 ? n : 0] = '\0';
  const char *base = exe;
  for (const char *c = exe; *c; c++)
    if (*c == '/') base = c + 1;
  fprintf(f, "%s pid %ld OPENBLAS_CORETYPE=%s\n", base, (long)getpid(),
          core ? core : "");
  fclose(f);
}
