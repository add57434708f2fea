// SPDX-License-Identifier: BSD-3-Clause
/*
 * Which of OpenBLAS's kernel sets the example programs run, chosen by the
 * programs themselves.
 *
 * OpenBLAS (Debian 12's 0.3.21, built with DYNAMIC_ARCH) picks its kernels
 * from the CPU's model when it loads, before main, and falls back to its
 * generic SSE3 "Prescott" kernels on a model it does not know (recent
 * Xeons): GPT-2's GEMMs then run several times slower than with the
 * AVX-512 ones the CPU has. OPENBLAS_CORETYPE overrides the pick, but it
 * is read only at load. So a program calls ex_blas_choose_core first thing
 * in main: when the variable is unset and OpenBLAS's pick uses a narrower
 * vector unit than the CPU's flags allow, it sets the variable to the
 * kernel set for those flags and executes itself again (before MPI_Init:
 * under mpirun the process stays the same one). The variable is set on the
 * second start, so it never restarts twice. An OPENBLAS_CORETYPE given by
 * the user always wins.
 */
#ifndef TPDP_EXAMPLES_COMMON_BLAS_CORE_H
#define TPDP_EXAMPLES_COMMON_BLAS_CORE_H

#include <stddef.h>

/* Vector levels of OpenBLAS's x86-64 kernel sets, narrowest first. */
enum {
  EX_BLAS_SSE = 0,    /* Prescott, Nehalem, Core2, ... */
  EX_BLAS_AVX = 1,    /* Sandybridge, Bulldozer .. Excavator */
  EX_BLAS_AVX2 = 2,   /* Haswell, Zen */
  EX_BLAS_AVX512 = 3, /* SkylakeX, Cooperlake, SapphireRapids */
};

/* The level this CPU (and its OS) supports: AVX-512 F, BW, VL and DQ (what
 * the SkylakeX kernels use), AVX2 with FMA, AVX, else SSE. */
int ex_blas_cpu_level(void);
/* The level of OpenBLAS's kernel set named `core` (openblas_get_corename's
 * name, any case); EX_BLAS_SSE for a name it does not know. */
int ex_blas_core_level(const char *core);
/* The OPENBLAS_CORETYPE value that gives a CPU of `cpu_level` wider
 * kernels than `picked`: SKYLAKEX, HASWELL or SANDYBRIDGE (the oldest set
 * of each level, which Debian 12's OpenBLAS 0.3.21 accepts; it does not
 * know SAPPHIRERAPIDS and ignores it), or NULL when `picked` is as wide as
 * the CPU allows. */
const char *ex_blas_better_core_for(const char *picked, int cpu_level);

/* What OpenBLAS runs now: its core name ("SkylakeX"). */
const char *ex_blas_core(void);
/* The better value for this process (ex_blas_better_core_for on OpenBLAS's
 * pick and this CPU), or NULL when OPENBLAS_CORETYPE is set (whoever set it
 * decided) or there is none. */
const char *ex_blas_better_core(void);

/* Called first thing in main, before MPI starts: when ex_blas_better_core
 * names a kernel set, sets OPENBLAS_CORETYPE to it and restarts the
 * program (execv of /proc/self/exe with argv and the environment). Returns
 * when there is nothing to do, or when the restart failed (then with the
 * variable unset again and a warning on stderr prefixed "<prog>:
 * warning:"). */
void ex_blas_choose_core(char **argv, const char *prog);

/* One line describing the kernels, for a program's summary: "SkylakeX
 * kernels (OPENBLAS_CORETYPE=SKYLAKEX set by train_gpt2: OpenBLAS alone
 * chose Prescott); OpenBLAS 0.3.21 ..." (openblas_get_config), or with
 * "(OpenBLAS's choice)" / "(OPENBLAS_CORETYPE=X from the environment)". */
void ex_blas_describe(char *buf, size_t len);

#endif
