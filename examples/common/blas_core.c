// SPDX-License-Identifier: BSD-3-Clause
/* examples/common/blas_core.h: the examples choose OpenBLAS's kernels. */
#include "examples/common/blas_core.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* Set with OPENBLAS_CORETYPE when ex_blas_choose_core restarts the
 * program: OpenBLAS's own pick, for the summary's line. Its presence also
 * forbids a second restart, whatever OpenBLAS does with the value. */
#define OWN_CHOICE_VAR "EX_OPENBLAS_OWN_CHOICE"

int ex_blas_cpu_level(void) {
  __builtin_cpu_init();
  /* GCC's checks include the OS's support (XCR0) for the wider registers. */
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
    return EX_BLAS_AVX512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return EX_BLAS_AVX2;
  if (__builtin_cpu_supports("avx")) return EX_BLAS_AVX;
  return EX_BLAS_SSE;
}

int ex_blas_core_level(const char *core) {
  /* OpenBLAS's x86-64 core names (driver/others/dynamic.c) by the widest
   * vector unit their GEMM kernels use. */
  static const struct {
    const char *name;
    int level;
  } cores[] = {
      {"SkylakeX", EX_BLAS_AVX512},
      {"Cooperlake", EX_BLAS_AVX512},
      {"SapphireRapids", EX_BLAS_AVX512},
      {"Haswell", EX_BLAS_AVX2},
      {"Zen", EX_BLAS_AVX2},
      {"Sandybridge", EX_BLAS_AVX},
      {"Bulldozer", EX_BLAS_AVX},
      {"Piledriver", EX_BLAS_AVX},
      {"Steamroller", EX_BLAS_AVX},
      {"Excavator", EX_BLAS_AVX},
  };
  for (size_t i = 0; core != NULL && i < sizeof cores / sizeof *cores; i++)
    if (strcasecmp(core, cores[i].name) == 0) return cores[i].level;
  return EX_BLAS_SSE;
}

const char *ex_blas_better_core_for(const char *picked, int cpu_level) {
  static const char *const value[] = {NULL, "SANDYBRIDGE", "HASWELL",
                                      "SKYLAKEX"};
  if (cpu_level <= ex_blas_core_level(picked) || cpu_level < EX_BLAS_SSE ||
      cpu_level > EX_BLAS_AVX512)
    return NULL;
  return value[cpu_level];
}

const char *ex_blas_core(void) { return openblas_get_corename(); }

const char *ex_blas_better_core(void) {
  if (getenv("OPENBLAS_CORETYPE") != NULL) return NULL;
  return ex_blas_better_core_for(ex_blas_core(), ex_blas_cpu_level());
}

void ex_blas_choose_core(char **argv, const char *prog) {
  if (getenv(OWN_CHOICE_VAR) != NULL) return; /* restarted already */
  const char *core = ex_blas_better_core();
  if (core == NULL) return;
  if (setenv(OWN_CHOICE_VAR, ex_blas_core(), 1) != 0 ||
      setenv("OPENBLAS_CORETYPE", core, 1) != 0) {
    unsetenv(OWN_CHOICE_VAR);
    return;
  }
  fflush(NULL);
  execv("/proc/self/exe", argv);
  /* Only on failure: go on with OpenBLAS's kernels. */
  unsetenv("OPENBLAS_CORETYPE");
  unsetenv(OWN_CHOICE_VAR);
  fprintf(stderr,
          "%s: warning: OpenBLAS runs its %s kernels on this CPU; restarting "
          "with OPENBLAS_CORETYPE=%s failed (execv /proc/self/exe); set it "
          "yourself for GEMMs several times faster\n",
          prog, ex_blas_core(), core);
}

void ex_blas_describe(char *buf, size_t len) {
  const char *set = getenv("OPENBLAS_CORETYPE");
  const char *own = getenv(OWN_CHOICE_VAR);
  char why[160];
  if (set != NULL && own != NULL)
    snprintf(why, sizeof why,
             "OPENBLAS_CORETYPE=%s set by this program: OpenBLAS alone chose "
             "%s",
             set, own);
  else if (set != NULL)
    snprintf(why, sizeof why, "OPENBLAS_CORETYPE=%s from the environment", set);
  else
    snprintf(why, sizeof why, "OpenBLAS's choice");
  snprintf(buf, len, "%s kernels (%s); %s", ex_blas_core(), why,
           openblas_get_config());
}
