// SPDX-License-Identifier: BSD-3-Clause
/*
 * The GPU GPT-2 (examples/train_gpt2/gpt2_cuda.cu, examples/common/
 * nn_cuda.cu) against the CPU one (gpt2.c) and against arithmetic written
 * here: run by scripts/gpu-check on the lent GPU machine (and built by
 * `bazel build --config=cuda //...`). Prints one line per check.
 *
 *   Model.*     one forward + backward of a small model on both, same
 *               parameters and tokens: the loss (1e-5 relative), every
 *               gradient (1e-4 relative to the tensor's largest magnitude:
 *               the two differ in summation order and libm), and the order
 *               of the gradient-ready calls (identical)
 *   Xent.Split  the vocabulary-parallel cross-entropy of two vocabulary
 *               halves, combined here as the TP sums would, against the
 *               whole vocabulary: the loss per row and every logit's
 *               gradient
 *   Embedding.Split  lookups and gradients of two vocabulary halves (v0 > 0)
 *               summed, against the whole table: exact
 *   AdamW       one step against nn_adamw
 *
 * Exit: 0 all passed, 1 a failure, 77 no GPU (the reason is printed).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "examples/common/nn_cpu.h"
#include "examples/common/nn_cuda.h"
#include "examples/train_gpt2/gpt2.h"
#include "examples/train_gpt2/gpt2_cuda.h"

static char g_msg[1024];

static int failf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_msg, sizeof g_msg, fmt, ap);
  va_end(ap);
  return 1;
}

#define CU(call)                                                          \
  do {                                                                    \
    if ((call) != 0) return failf("%s: %s", #call, nn_cuda_last_error()); \
  } while (0)

/* A reproducible uniform in [-1, 1). */
static float uniform(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((double)(*s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static void *dev_copy(const void *host, size_t bytes) {
  void *d = NULL;
  if (nn_cuda_alloc(&d, bytes, "a check buffer") != 0) return NULL;
  if (nn_cuda_to_device(d, host, bytes) != 0) {
    nn_cuda_free(d);
    return NULL;
  }
  return d;
}

/* max |a - b| / max(max |b|, tiny) over n */
static double rel_diff(const float *a, const float *b, int64_t n) {
  double mx = 0, scale = 1e-30;
  for (int64_t k = 0; k < n; k++) {
    double d = fabs((double)a[k] - (double)b[k]);
    if (d > mx || d != d) mx = d;
    if (fabs((double)b[k]) > scale) scale = fabs((double)b[k]);
  }
  return mx / scale;
}

/* ---------------------------------------------------------------- model */

/* The CPU model's TP callbacks for one rank, written here: the lookup,
 * its backward and the softmax cross-entropy of the whole vocabulary. */
typedef struct {
  const float *wte;
  int C, V;
  int order[4096], norder;
} cpu_ctx;

static int cpu_allreduce(void *ctx, float *buf, int64_t n) {
  (void)ctx, (void)buf, (void)n;
  return 0;
}
static int cpu_seq(void *ctx, const float *a, float *b) {
  (void)ctx, (void)a, (void)b;
  return failf("sequence parallelism called at tp 1");
}
static int cpu_embed(void *vctx, const int32_t *ids, int64_t n, float *out) {
  cpu_ctx *c = vctx;
  for (int64_t i = 0; i < n; i++)
    memcpy(out + i * c->C, c->wte + (int64_t)ids[i] * c->C,
           sizeof(float) * (size_t)c->C);
  return 0;
}
static int cpu_embed_bwd(void *vctx, const int32_t *ids, int64_t n,
                         const float *dout, float *dwte) {
  cpu_ctx *c = vctx;
  for (int64_t i = 0; i < n; i++)
    for (int k = 0; k < c->C; k++)
      dwte[(int64_t)ids[i] * c->C + k] += dout[i * c->C + k];
  return 0;
}
static int cpu_xent(void *vctx, float *logits, const int32_t *targets,
                    int64_t n, float scale, double *loss_sum) {
  cpu_ctx *c = vctx;
  double total = 0;
  for (int64_t i = 0; i < n; i++) {
    float *z = logits + i * c->V;
    float mx = z[0];
    for (int j = 1; j < c->V; j++) mx = z[j] > mx ? z[j] : mx;
    double S = 0;
    for (int j = 0; j < c->V; j++) S += exp((double)z[j] - mx);
    total += log(S) + mx - z[targets[i]];
    for (int j = 0; j < c->V; j++)
      z[j] = (float)(exp((double)z[j] - mx) / S * scale);
    z[targets[i]] -= scale;
  }
  *loss_sum = total;
  return 0;
}
static int cpu_ready(void *vctx, int i) {
  cpu_ctx *c = vctx;
  if (c->norder < 4096) c->order[c->norder++] = i;
  return 0;
}

typedef struct {
  int order[4096], norder;
} gpu_ctx;

static int gpu_allreduce(void *ctx, void *buf, int64_t n, int f64, int max,
                         void *stream) {
  (void)ctx, (void)buf, (void)n, (void)f64, (void)max, (void)stream;
  return failf("a TP collective called at tp 1");
}
static int gpu_seq(void *ctx, const float *a, float *b, void *stream) {
  (void)ctx, (void)a, (void)b, (void)stream;
  return failf("sequence parallelism called at tp 1");
}
static int gpu_ready(void *vctx, int i) {
  gpu_ctx *c = vctx;
  if (c->norder < 4096) c->order[c->norder++] = i;
  return 0;
}

typedef struct {
  const char *name;
  gpt2_config c;
  int B, T;
} model_case;

static int model_check(const model_case *mc) {
  gpt2_config c = mc->c;
  if (c.n_inner == 0) c.n_inner = 4 * c.n_embd;
  const int np = gpt2_num_params(&c);
  gpt2_dims d;
  memset(&d, 0, sizeof d);
  d.c = c;
  d.B = mc->B;
  d.T = mc->T;
  d.hd = c.n_embd / c.n_head;
  d.hl = c.n_head;
  d.fl = c.n_inner;
  d.vl = c.vocab;
  d.v0 = 0;
  d.t0 = 0;
  d.tl = mc->T;
  float **P = calloc((size_t)np, sizeof *P),
        **G = calloc((size_t)np, sizeof *G);
  float **dP = calloc((size_t)np, sizeof *dP),
        **dG = calloc((size_t)np, sizeof *dG);
  int64_t *numel = calloc((size_t)np, sizeof *numel);
  int64_t n = (int64_t)mc->B * mc->T;
  int32_t *tokens = malloc(sizeof(int32_t) * (size_t)(n + 1));
  int rc = 1;
  gpt2_model cm;
  gpt2_cuda_model gm;
  int cm_ready = 0, gm_ready = 0;
  memset(&gm, 0, sizeof gm);
  if (!P || !G || !dP || !dG || !numel || !tokens) {
    failf("out of memory");
    goto done;
  }
  for (int i = 0; i < np; i++) {
    gpt2_param_info in;
    gpt2_param_info_get(&c, i, &in);
    numel[i] = in.ndim == 2 ? in.shape[0] * in.shape[1] : in.shape[0];
    P[i] = calloc((size_t)numel[i] + 1, sizeof(float));
    G[i] = calloc((size_t)numel[i] + 1, sizeof(float));
    if (!P[i] || !G[i]) {
      failf("out of memory");
      goto done;
    }
    int64_t zero[2] = {0, 0};
    gpt2_init_box(&c, i, 7, in.ndim, in.shape, zero, in.shape, P[i]);
    /* LayerNorm weights 1 and biases 0 would hide mistakes in their
     * gradients' use: perturb every parameter a little. */
    uint64_t s = 1000 + (uint64_t)i;
    for (int64_t k = 0; k < numel[i]; k++) P[i][k] += 0.05f * uniform(&s);
    dP[i] = dev_copy(P[i], sizeof(float) * (size_t)numel[i]);
    dG[i] = dev_copy(G[i], sizeof(float) * (size_t)numel[i]);
    if (!dP[i] || !dG[i]) {
      failf("device copy: %s", nn_cuda_last_error());
      goto done;
    }
  }
  uint64_t s = 99;
  for (int64_t k = 0; k <= n; k++)
    tokens[k] =
        (int32_t)((uniform(&s) + 1.0f) * 0.5f * (float)c.vocab) % c.vocab;
  const float scale = 1.0f / (float)n;

  /* CPU */
  cpu_ctx cc = {P[GPT2_WTE], c.n_embd, c.vocab, {0}, 0};
  gpt2_ops cops = {
      &cc,           cpu_allreduce, cpu_seq,   cpu_seq, cpu_embed,
      cpu_embed_bwd, cpu_xent,      cpu_ready, NULL /* no block hooks */};
  if (gpt2_model_init(&cm, &d, P, G) != 0) {
    failf("gpt2_model_init: out of memory");
    goto done;
  }
  cm_ready = 1;
  gpt2_timers tt = {0, 0};
  double cpu_loss = 0, gpu_loss = 0;
  if (gpt2_forward(&cm, tokens, tokens + 1, scale, &cops, &cpu_loss, &tt) !=
          0 ||
      gpt2_backward(&cm, &cops, &tt) != 0) {
    failf("the CPU model failed: %s", g_msg);
    goto done;
  }

  /* GPU */
  gpu_ctx gc;
  memset(&gc, 0, sizeof gc);
  gpt2_cuda_ops gops = {&gc, gpu_allreduce, gpu_seq, gpu_seq, gpu_ready};
  if (gpt2_cuda_model_init(&gm, &d, dP, dG, 0, 1, 0) != 0) {
    failf("gpt2_cuda_model_init: %s", nn_cuda_last_error());
    goto done;
  }
  gm_ready = 1;
  if (gpt2_cuda_forward(&gm, tokens, tokens + 1, scale, &gops, &tt) != 0 ||
      gpt2_cuda_backward(&gm, &gops, &tt) != 0 ||
      gpt2_cuda_loss(&gm, &gpu_loss) != 0 || nn_cuda_stream_sync(gm.stream)) {
    failf("the GPU model failed: %s %s", nn_cuda_last_error(), g_msg);
    goto done;
  }
  double lrel = fabs(gpu_loss - cpu_loss) / fabs(cpu_loss);
  if (!(lrel <= 1e-5)) {
    failf("loss: GPU %.9g, CPU %.9g (relative %.2e > 1e-5)", gpu_loss, cpu_loss,
          lrel);
    goto done;
  }
  if (gc.norder != cc.norder ||
      memcmp(gc.order, cc.order, sizeof(int) * (size_t)cc.norder) != 0) {
    failf("gradient-ready order differs (%d calls on the GPU, %d on the CPU)",
          gc.norder, cc.norder);
    goto done;
  }
  double worst = 0;
  int worst_i = -1;
  for (int i = 0; i < np; i++) {
    float *h = malloc(sizeof(float) * (size_t)numel[i] + 4);
    if (!h || nn_cuda_to_host(h, dG[i], sizeof(float) * (size_t)numel[i])) {
      free(h);
      failf("reading gradient %d: %s", i, nn_cuda_last_error());
      goto done;
    }
    double r = rel_diff(h, G[i], numel[i]);
    free(h);
    if (r > worst || r != r) {
      worst = r;
      worst_i = i;
    }
  }
  if (!(worst <= 1e-4)) {
    gpt2_param_info in;
    gpt2_param_info_get(&c, worst_i, &in);
    failf("gradient of '%s' differs by %.2e (relative to its largest, > 1e-4)",
          in.name, worst);
    goto done;
  }
  snprintf(g_msg, sizeof g_msg,
           "loss %.6f (relative diff %.1e), worst gradient diff %.1e", cpu_loss,
           lrel, worst);
  rc = 0;
done:
  if (cm_ready) gpt2_model_free(&cm);
  if (gm_ready) gpt2_cuda_model_free(&gm);
  for (int i = 0; i < np; i++) {
    if (P) free(P[i]);
    if (G) free(G[i]);
    if (dP) nn_cuda_free(dP[i]);
    if (dG) nn_cuda_free(dG[i]);
  }
  free(P);
  free(G);
  free(dP);
  free(dG);
  free(numel);
  free(tokens);
  return rc;
}

/* ---------------------------------------------------------------- kernels */

/* Two vocabulary halves' statistics combined as TP's MAX and SUM would,
 * against the whole vocabulary. */
static int xent_split(void) {
  enum { N = 37, V = 301, V1 = 140, LD = 320 };
  static float z[N * LD], full_grad[N * LD], half_grad[N * LD];
  static int32_t tg[N];
  uint64_t s = 5;
  for (int k = 0; k < N * LD; k++) z[k] = 4.0f * uniform(&s);
  for (int i = 0; i < N; i++) tg[i] = (int32_t)((i * 97 + 13) % V);
  float *dz = dev_copy(z, sizeof z), *dz0 = dev_copy(z, sizeof z);
  float *dz1 = dev_copy(z, sizeof z);
  int32_t *dtg = dev_copy(tg, sizeof tg);
  float *mx = NULL, *m0 = NULL, *m1 = NULL, *gm = NULL;
  double *pair = NULL, *p0 = NULL, *p1 = NULL, *loss = NULL, *l0 = NULL;
  CU(nn_cuda_alloc((void **)&mx, sizeof(float) * N, "x"));
  CU(nn_cuda_alloc((void **)&m0, sizeof(float) * N, "x"));
  CU(nn_cuda_alloc((void **)&m1, sizeof(float) * N, "x"));
  CU(nn_cuda_alloc((void **)&gm, sizeof(float) * N, "x"));
  CU(nn_cuda_alloc((void **)&pair, sizeof(double) * 2 * N, "x"));
  CU(nn_cuda_alloc((void **)&p0, sizeof(double) * 2 * N, "x"));
  CU(nn_cuda_alloc((void **)&p1, sizeof(double) * 2 * N, "x"));
  CU(nn_cuda_alloc((void **)&loss, sizeof(double) * N, "x"));
  CU(nn_cuda_alloc((void **)&l0, sizeof(double) * N, "x"));
  if (!dz || !dz0 || !dz1 || !dtg) return failf("%s", nn_cuda_last_error());
  /* the whole vocabulary */
  CU(nn_cuda_xent_stats(dz, LD, dtg, N, 0, V, mx, pair, NULL));
  CU(nn_cuda_xent_grad(dz, LD, dtg, N, 0, V, mx, pair, 0.5f, loss, NULL));
  /* two halves: [0, V1) and [V1, V) (the second's logits start at column
   * V1 of the same rows) */
  CU(nn_cuda_xent_stats(dz0, LD, dtg, N, 0, V1, m0, p0, NULL));
  CU(nn_cuda_xent_stats(dz1 + V1, LD, dtg, N, V1, V - V1, m1, p1, NULL));
  float hm0[N], hm1[N], hg[N];
  double hp0[2 * N], hp1[2 * N], hp[2 * N];
  CU(nn_cuda_to_host(hm0, m0, sizeof hm0));
  CU(nn_cuda_to_host(hm1, m1, sizeof hm1));
  for (int i = 0; i < N; i++) hg[i] = hm0[i] > hm1[i] ? hm0[i] : hm1[i];
  CU(nn_cuda_to_device(gm, hg, sizeof hg));
  CU(nn_cuda_xent_rescale(m0, gm, p0, N, NULL));
  CU(nn_cuda_xent_rescale(m1, gm, p1, N, NULL));
  CU(nn_cuda_to_host(hp0, p0, sizeof hp0));
  CU(nn_cuda_to_host(hp1, p1, sizeof hp1));
  for (int k = 0; k < 2 * N; k++) hp[k] = hp0[k] + hp1[k];
  CU(nn_cuda_to_device(p0, hp, sizeof hp));
  CU(nn_cuda_xent_grad(dz0, LD, dtg, N, 0, V1, gm, p0, 0.5f, l0, NULL));
  CU(nn_cuda_xent_grad(dz1 + V1, LD, dtg, N, V1, V - V1, gm, p0, 0.5f, l0,
                       NULL));
  double hl[N], hl0[N];
  CU(nn_cuda_to_host(hl, loss, sizeof hl));
  CU(nn_cuda_to_host(hl0, l0, sizeof hl0));
  CU(nn_cuda_to_host(full_grad, dz, sizeof full_grad));
  CU(nn_cuda_to_host(half_grad, dz0, sizeof half_grad));
  CU(nn_cuda_to_host(z, dz1, sizeof z));
  for (int i = 0; i < N; i++)
    for (int j = V1; j < V; j++) half_grad[i * LD + j] = z[i * LD + j];
  /* the loss by hand: log-sum-exp in double */
  static float zz[N * LD];
  s = 5;
  for (int k = 0; k < N * LD; k++) zz[k] = 4.0f * uniform(&s);
  for (int i = 0; i < N; i++) {
    double m = -1e30, S = 0;
    for (int j = 0; j < V; j++) m = zz[i * LD + j] > m ? zz[i * LD + j] : m;
    for (int j = 0; j < V; j++) S += exp(zz[i * LD + j] - m);
    double want = log(S) + m - zz[i * LD + tg[i]];
    if (fabs(hl[i] - want) > 1e-5 * fabs(want) ||
        fabs(hl0[i] - want) > 1e-5 * fabs(want))
      return failf("row %d: loss %.9g (whole) %.9g (halves), by hand %.9g", i,
                   hl[i], hl0[i], want);
    for (int j = 0; j < V; j++) {
      double p = exp(zz[i * LD + j] - m) / S * 0.5 - (j == tg[i] ? 0.5 : 0);
      if (fabs(full_grad[i * LD + j] - p) > 1e-6 ||
          fabs(half_grad[i * LD + j] - p) > 1e-6)
        return failf(
            "row %d col %d: gradient %.9g (whole) %.9g (halves), by "
            "hand %.9g",
            i, j, full_grad[i * LD + j], half_grad[i * LD + j], p);
    }
  }
  void *bufs[] = {dz, dz0, dz1, dtg, mx, m0, m1, gm, pair, p0, p1, loss, l0};
  for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++)
    nn_cuda_free(bufs[k]);
  return 0;
}

/* Each half's lookup (v0 = 0 and v0 = V1) summed equals the whole table's;
 * gradients land in the right rows. */
static int embedding_split(void) {
  enum { N = 50, V = 31, V1 = 12, C = 40, T = 10 };
  static float wte[V * C], wpe[T * C], out[N * C], o0[N * C], o1[N * C];
  static float dout[N * C], dw[V * C], dw0[V * C], want[V * C];
  static int32_t ids[N], order[N], seg_start[N + 1], seg_row[N], work[V];
  uint64_t s = 11;
  for (int k = 0; k < V * C; k++) wte[k] = uniform(&s);
  for (int k = 0; k < T * C; k++) wpe[k] = uniform(&s);
  for (int k = 0; k < N * C; k++) dout[k] = uniform(&s);
  for (int i = 0; i < N; i++) ids[i] = (int32_t)((i * 7 + i / 3) % V);
  float *dwte = dev_copy(wte, sizeof wte), *dwpe = dev_copy(wpe, sizeof wpe);
  float *dout_d = dev_copy(dout, sizeof dout), *dres = NULL, *ddw = NULL;
  int32_t *dids = dev_copy(ids, sizeof ids), *dord = NULL, *dss = NULL,
          *dsr = NULL;
  CU(nn_cuda_alloc((void **)&dres, sizeof out, "x"));
  CU(nn_cuda_alloc((void **)&ddw, sizeof dw, "x"));
  CU(nn_cuda_alloc((void **)&dord, sizeof order, "x"));
  CU(nn_cuda_alloc((void **)&dss, sizeof seg_start, "x"));
  CU(nn_cuda_alloc((void **)&dsr, sizeof seg_row, "x"));
  if (!dwte || !dwpe || !dout_d || !dids)
    return failf("%s", nn_cuda_last_error());
  CU(nn_cuda_embedding_fwd(dids, N, dwte, 0, V, dwpe, T, C, dres, NULL));
  CU(nn_cuda_to_host(out, dres, sizeof out));
  CU(nn_cuda_embedding_fwd(dids, N, dwte, 0, V1, dwpe, T, C, dres, NULL));
  CU(nn_cuda_to_host(o0, dres, sizeof o0));
  CU(nn_cuda_embedding_fwd(dids, N, dwte + V1 * C, V1, V - V1, NULL, T, C, dres,
                           NULL));
  CU(nn_cuda_to_host(o1, dres, sizeof o1));
  for (int i = 0; i < N; i++)
    for (int k = 0; k < C; k++) {
      float w = wte[ids[i] * C + k] + wpe[(i % T) * C + k];
      if (out[i * C + k] != w || o0[i * C + k] + o1[i * C + k] != w)
        return failf(
            "lookup of position %d column %d: %g (whole), %g + %g "
            "(halves), want %g",
            i, k, out[i * C + k], o0[i * C + k], o1[i * C + k], w);
    }
  /* backward: the whole table, then each half into its own rows */
  for (int k = 0; k < V * C; k++) dw[k] = 0.25f * (float)(k % 5);
  memcpy(want, dw, sizeof dw);
  for (int i = 0; i < N; i++)
    for (int k = 0; k < C; k++) want[ids[i] * C + k] += dout[i * C + k];
  for (int half = 0; half < 3; half++) {
    int v0 = half == 1 ? V1 : 0, vl = half == 0 ? V : half == 1 ? V - V1 : V1;
    nn_embedding_plan plan = {order, seg_start, seg_row, 0, work};
    nn_embedding_plan_make(ids, N, v0, vl, &plan);
    CU(nn_cuda_to_device(ddw, dw, sizeof dw));
    CU(nn_cuda_to_device(dord, order, sizeof order));
    CU(nn_cuda_to_device(dss, seg_start, sizeof seg_start));
    CU(nn_cuda_to_device(dsr, seg_row, sizeof seg_row));
    CU(nn_cuda_embedding_bwd(dord, dss, dsr, plan.segments, dout_d, C,
                             ddw + (int64_t)v0 * C, NULL));
    CU(nn_cuda_to_host(dw0, ddw, sizeof dw0));
    for (int r = 0; r < V; r++)
      for (int k = 0; k < C; k++) {
        int mine = r >= v0 && r < v0 + vl;
        float w = mine ? want[r * C + k] : dw[r * C + k];
        /* the same additions in the same order: equal up to float
         * reassociation, which there is none of */
        if (fabsf(dw0[r * C + k] - w) > 1e-6f * (1.0f + fabsf(w)))
          return failf("gradient (rows [%d, %d)) row %d column %d: %g, want %g",
                       v0, v0 + vl, r, k, dw0[r * C + k], w);
      }
  }
  void *bufs[] = {dwte, dwpe, dout_d, dres, ddw, dids, dord, dss, dsr};
  for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++)
    nn_cuda_free(bufs[k]);
  return 0;
}

static int adamw(void) {
  enum { N = 1000 };
  static float p[N], g[N], m[N], v[N], q[N];
  uint64_t s = 3;
  for (int k = 0; k < N; k++) {
    p[k] = uniform(&s);
    g[k] = uniform(&s);
    m[k] = 0.1f * uniform(&s);
    v[k] = 0.01f * (1.0f + uniform(&s));
  }
  float *dp = dev_copy(p, sizeof p), *dg = dev_copy(g, sizeof g);
  float *dm = dev_copy(m, sizeof m), *dv = dev_copy(v, sizeof v);
  if (!dp || !dg || !dm || !dv) return failf("%s", nn_cuda_last_error());
  nn_adamw_opts o = {1e-3, 0.9, 0.95, 1e-8};
  CU(nn_cuda_adamw(dp, dg, dm, dv, N, &o, 0.1, 3, NULL));
  nn_adamw(p, g, m, v, N, &o, 0.1, 3);
  CU(nn_cuda_to_host(q, dp, sizeof q));
  double r = rel_diff(q, p, N);
  nn_cuda_free(dp);
  nn_cuda_free(dg);
  nn_cuda_free(dm);
  nn_cuda_free(dv);
  if (!(r <= 1e-6)) return failf("parameters differ by %.2e", r);
  return 0;
}

/* ---------------------------------------------------------------- main */

static const model_case cases[] = {
    /* uneven heads (3) and vocabulary (67) */
    {"Model.Small", {2, 48, 3, 67, 16, 0}, 3, 8},
    /* n_inner not 4C, a sequence longer than a warp */
    {"Model.OddShapes", {1, 32, 2, 300, 64, 100}, 2, 33},
    /* a wider vocabulary and a longer sequence */
    {"Model.Long", {1, 64, 4, 1000, 128, 0}, 1, 80},
};

int main(void) {
  int n = 0;
  if (nn_cuda_device_count(&n) != 0 || n < 1) {
    printf("gpt2-cuda-check: skipped, no GPU: %s\n",
           n < 1 && nn_cuda_last_error()[0] == 0 ? "0 devices"
                                                 : nn_cuda_last_error());
    return 77;
  }
  int passed = 0, failed = 0;
  const int ncases = (int)(sizeof cases / sizeof cases[0]);
  for (int k = 0; k < ncases + 3; k++) {
    g_msg[0] = '\0';
    const char *name = k < ncases        ? cases[k].name
                       : k == ncases     ? "Xent.Split"
                       : k == ncases + 1 ? "Embedding.Split"
                                         : "AdamW";
    int rc = k < ncases        ? model_check(&cases[k])
             : k == ncases     ? xent_split()
             : k == ncases + 1 ? embedding_split()
                               : adamw();
    printf("%-6s Gpt2Cuda.%s%s%s\n", rc == 0 ? "PASS" : "FAIL", name,
           g_msg[0] ? ": " : "", g_msg);
    fflush(stdout);
    if (rc == 0)
      passed++;
    else
      failed++;
  }
  printf("gpt2-cuda-check: %d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
