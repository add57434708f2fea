// SPDX-License-Identifier: BSD-3-Clause
/*
 * The GEMM floor of a train_gpt2 step, for bench/gpt2.sh: the matmuls of
 * one GPT-2 training step on one rank (forward and backward of every
 * Conv1D and of the tied LM head, through the same nn_cpu calls, shapes
 * and thread count as train_gpt2; attention's small per-head products
 * left out), timed back to back with nothing else. A step can be no faster
 * than this; bench/gpt2.sh prints the step time against it.
 *
 * Usage: gpt2_gemm_bench --layers L --embd C --vocab V --rows N
 *                        [--threads T] [--repeat R]
 * Prints "gemm_floor: <ms> ms, <GFLOP/s> GFLOP/s (<T> threads, OpenBLAS
 * <core>)" (the best of R).
 *        gpt2_gemm_bench --better-core
 * Prints the OPENBLAS_CORETYPE that would give this CPU faster kernels than
 * OpenBLAS picked (ex_blas_better_core), or an empty line.
 * Otherwise it chooses its kernels as train_gpt2 does (ex_blas_choose_core),
 * so that the floor runs the trainer's GEMMs.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "examples/common/blas_core.h"
#include "examples/common/nn_cpu.h"
#include "examples/common/util.h"

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "--better-core") == 0) {
    const char *core = ex_blas_better_core();
    printf("%s\n", core ? core : "");
    return 0;
  }
  ex_blas_choose_core(argv, "gpt2_gemm_bench");
  int L = 12, C = 768, V = 50257, N = 256, repeat = 3;
  int threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
  static const struct option opts[] = {{"layers", required_argument, 0, 'L'},
                                       {"embd", required_argument, 0, 'C'},
                                       {"vocab", required_argument, 0, 'V'},
                                       {"rows", required_argument, 0, 'N'},
                                       {"threads", required_argument, 0, 't'},
                                       {"repeat", required_argument, 0, 'r'},
                                       {0, 0, 0, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    int v = optarg ? atoi(optarg) : 0;
    switch (c) {
      case 'L':
        L = v;
        break;
      case 'C':
        C = v;
        break;
      case 'V':
        V = v;
        break;
      case 'N':
        N = v;
        break;
      case 't':
        threads = v;
        break;
      case 'r':
        repeat = v;
        break;
      default:
        fprintf(stderr, "usage: see the header of bench/gpt2_gemm_bench.c\n");
        return 2;
    }
  }
  nn_set_threads(threads);
  const int F = 4 * C;
  /* one weight and gradient per shape (the floor does not depend on which
   * layer's memory a product reads) */
  size_t big = (size_t)V * C > (size_t)C * F ? (size_t)V * C : (size_t)C * F;
  float *W = calloc(big, sizeof(float)), *dW = calloc(big, sizeof(float));
  float *X = calloc((size_t)N * F, sizeof(float));
  float *Y = calloc((size_t)N * (V > F ? V : F), sizeof(float));
  float *dX = calloc((size_t)N * F, sizeof(float));
  if (!W || !dW || !X || !Y || !dX) {
    fprintf(stderr, "gpt2_gemm_bench: out of memory\n");
    return 1;
  }
  for (size_t i = 0; i < big; i++) W[i] = 0.01f * (float)(i % 7);
  for (size_t i = 0; i < (size_t)N * F; i++) X[i] = 0.01f * (float)(i % 5);
  const int shapes[4][2] = {{C, 3 * C}, {C, C}, {C, F}, {F, C}}; /* in, out */
  double best = 1e30, flop = 0;
  for (int r = 0; r < repeat + 1; r++) { /* +1: warm-up */
    double t0 = ex_now();
    flop = 0;
    for (int l = 0; l < L; l++)
      for (int k = 0; k < 4; k++) {
        int in = shapes[k][0], out = shapes[k][1];
        nn_conv1d_fwd(X, W, NULL, Y, N, in, out);
        nn_conv1d_bwd(X, W, Y, dX, dW, NULL, N, in, out, 0.0f, 0.0f);
        flop += 6.0 * N * in * out;
      }
    nn_linear_fwd(X, W, Y, N, C, V);
    nn_linear_bwd(X, W, Y, dX, dW, N, C, V, 0.0f);
    flop += 6.0 * N * C * V;
    double dt = ex_now() - t0;
    if (r > 0 && dt < best) best = dt;
  }
  printf("gemm_floor: %.1f ms, %.1f GFLOP/s (%d threads, OpenBLAS %s)\n",
         1e3 * best, flop / best * 1e-9, threads, ex_blas_core());
  free(W);
  free(dW);
  free(X);
  free(Y);
  free(dX);
  return 0;
}
