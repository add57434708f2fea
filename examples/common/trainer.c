// SPDX-License-Identifier: BSD-3-Clause
/* examples/common/trainer.h: the trainers' summary, check and failures. */
#include "examples/common/trainer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "examples/common/blas_core.h"
#include "examples/common/nn_cpu.h"

void ex_report_failure(const char *prog, int rank, int agreed,
                       const char *msg) {
  if (!agreed)
    fprintf(stderr, "%s: [rank %d] %s\n", prog, rank, msg);
  else if (rank == 0)
    fprintf(stderr, "%s: %s\n", prog, msg);
}

int ex_gather_param(const tpdp_param *p, void *out, ex_error *e) {
  const tpdp_tensor *lt = tpdp_param_tensor(p);
  const tpdp_spec *spec = (const tpdp_spec *)tpdp_param_spec(p);
  if (spec == NULL) {
    if (out) memcpy(out, lt->data, tpdp_tensor_nbytes(lt));
    return 0;
  }
  tpdp_dtensor dt = {*lt, spec};
  tpdp_tensor full;
  EX_TRY(e, tpdp_dtensor_full_tensor_alloc(&dt, &full));
  if (out) memcpy(out, full.data, tpdp_tensor_nbytes(&full));
  free(full.data);
  return 0;
}

void ex_print_summary(const ex_summary *s, const ex_backend *b,
                      const ex_trainer *t, const ex_times *tm, int rank,
                      int print, tpdp_comm *comm) {
  const int n = s->last - s->first + 1;
  if (print && n < 1)
    printf("throughput: n/a (one step, and the first step is warm-up)\n");
  if (print && n >= 1) {
    /* tpdp's own cost: the hooks plus the reducer's bookkeeping (its time
     * minus collectives and passes over gradient data). */
    double bookkeeping = s->reducer_total - s->reducer_comm - s->reducer_data;
    double overhead = s->hooks + bookkeeping;
    printf(
        "throughput: %.1f %s/s, %.1f ms/step (steps %d..%d: %d x %lld %s in "
        "%.3f s; %s excluded)\n",
        (double)n * (double)s->per_step / s->elapsed, s->unit,
        1e3 * s->elapsed / n, s->first, s->last, n, (long long)s->per_step,
        s->unit, s->elapsed, s->left_out);
    b->print_time(t, tm, s->reducer_comm, s->reducer_data);
    printf(
        "tpdp overhead: %.4f s (hooks %.4f, reducer bookkeeping %.4f) = "
        "%.2f%% of step time\n",
        overhead, s->hooks, bookkeeping, 100.0 * overhead / s->elapsed);
    if (s->reducer)
      printf("reducer: %lld buckets, rebuilt %s\n",
             (long long)tpdp_reducer_num_buckets(s->reducer),
             tpdp_reducer_rebuilt(s->reducer) ? "yes" : "no");
    else
      printf("dp: fully sharded units, zero %d, dp_shard %d, dp_replicate %d\n",
             s->zero, s->dp_shard, s->dp_replicate);
    char blas[512];
    ex_blas_describe(blas, sizeof blas);
    printf("openblas: %d threads per rank, %s\n", nn_threads(), blas);
  }
  fflush(stdout);
  if (s->fsdp)
    ex_fsdp_stats_line(s->fsdp, rank, s->zero, s->dp_shard, s->dp_replicate,
                       s->param_dtype, s->reduce_dtype);
  if (comm != NULL) ex_peak_memory_line(comm, print);
  fflush(stdout);
}

int ex_check_compare(const double *loss, const double *ref_loss, int first,
                     int steps, float *const *params, float *const *ref_params,
                     const int64_t *numel, const char *const *names, int np,
                     int ref_failed) {
  /* rel != rel, d != d: a NaN counts as a failure. */
  double max_rel = 0, max_abs = 0;
  int worst_param = 0;
  int64_t worst_elem = 0;
  for (int s = first; s < steps; s++) {
    double rel = fabs(loss[s] - ref_loss[s]) / fmax(fabs(ref_loss[s]), 1e-12);
    if (rel > max_rel || rel != rel) max_rel = rel;
  }
  for (int i = 0; i < np && !ref_failed; i++)
    for (int64_t k = 0; k < numel[i]; k++) {
      double d = fabs((double)params[i][k] - (double)ref_params[i][k]);
      if (d > max_abs || d != d) {
        max_abs = d;
        worst_param = i;
        worst_elem = k;
      }
    }
  printf(
      "check: max_rel_loss_diff %.3e max_abs_param_diff %.3e (%s element "
      "%lld)\n",
      max_rel, max_abs, np > 0 ? names[worst_param] : "no parameters",
      (long long)worst_elem);
  int failed = ref_failed || !(max_rel <= 1e-4) || !(max_abs <= 1e-4);
  printf(failed ? "check: FAILED (tolerance 1e-4)\n" : "check: ok\n");
  fflush(stdout);
  return failed;
}
