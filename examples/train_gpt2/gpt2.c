// SPDX-License-Identifier: BSD-3-Clause
/* GPT-2 for one TP rank: parameter table, deterministic initialisation,
 * forward and backward (see gpt2.h). */
#include "examples/train_gpt2/gpt2.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "examples/common/nn_cpu.h"
#include "examples/common/util.h"

static const float LN_EPS = 1e-5f;

/* ------------------------------------------------------------ parameters */

int gpt2_num_params(const gpt2_config *c) {
  return 4 + GPT2_BLOCK_SLOTS * c->n_layer;
}
int gpt2_block_param(int layer, int slot) {
  return 2 + GPT2_BLOCK_SLOTS * layer + slot;
}
int gpt2_lnf_param(const gpt2_config *c) {
  return 2 + GPT2_BLOCK_SLOTS * c->n_layer;
}

void gpt2_param_info_get(const gpt2_config *c, int i, gpt2_param_info *o) {
  static const char *const slot_names[GPT2_BLOCK_SLOTS] = {
      "ln_1.weight",      "ln_1.bias",          "attn.c_attn.weight",
      "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias",
      "ln_2.weight",      "ln_2.bias",          "mlp.c_fc.weight",
      "mlp.c_fc.bias",    "mlp.c_proj.weight",  "mlp.c_proj.bias"};
  const int64_t C = c->n_embd, F = c->n_inner;
  memset(o, 0, sizeof *o);
  o->init_std = 0.02f;
  int lnf = gpt2_lnf_param(c);
  if (i == GPT2_WTE || i == GPT2_WPE) {
    snprintf(o->name, sizeof o->name,
             i == GPT2_WTE ? "wte.weight" : "wpe.weight");
    o->ndim = 2;
    o->shape[0] = i == GPT2_WTE ? c->vocab : c->n_positions;
    o->shape[1] = C;
    o->tp = i == GPT2_WTE ? GPT2_TP_VOCAB : GPT2_TP_REPLICATE;
  } else if (i >= lnf) {
    snprintf(o->name, sizeof o->name, "ln_f.%s", i == lnf ? "weight" : "bias");
    o->ndim = 1;
    o->shape[0] = C;
    o->init_std = 0;
    o->init_fill = i == lnf ? 1.0f : 0.0f;
  } else {
    int l = (i - 2) / GPT2_BLOCK_SLOTS, slot = (i - 2) % GPT2_BLOCK_SLOTS;
    snprintf(o->name, sizeof o->name, "h.%d.%s", l, slot_names[slot]);
    /* Hugging Face / llm.c: residual projections N(0, 0.02 / sqrt(2L)),
     * other weights N(0, 0.02), biases 0, LayerNorm weights 1. */
    const float proj_std = 0.02f / sqrtf(2.0f * (float)c->n_layer);
    /* ndim, shape[0], shape[1] per slot (Conv1D weights are [in, out]) */
    const int64_t shapes[GPT2_BLOCK_SLOTS][3] = {
        {1, C, 0}, {1, C, 0}, {2, C, 3 * C}, {1, 3 * C, 0},
        {2, C, C}, {1, C, 0}, {1, C, 0},     {1, C, 0},
        {2, C, F}, {1, F, 0}, {2, F, C},     {1, C, 0}};
    o->ndim = (int)shapes[slot][0];
    o->shape[0] = shapes[slot][1];
    o->shape[1] = shapes[slot][2];
    switch (slot) {
      case GPT2_LN1_W:
      case GPT2_LN2_W:
        o->init_std = 0;
        o->init_fill = 1.0f;
        break;
      case GPT2_LN1_B:
      case GPT2_LN2_B:
      case GPT2_QKV_B:
      case GPT2_AO_B:
      case GPT2_FC_B:
      case GPT2_MO_B:
        o->init_std = 0;
        o->init_fill = 0.0f;
        break;
      case GPT2_AO_W:
      case GPT2_MO_W:
        o->init_std = proj_std;
        break;
      default:
        break;
    }
    switch (slot) {
      case GPT2_QKV_W:
      case GPT2_QKV_B:
        o->tp = GPT2_TP_HEADS_QKV;
        break;
      case GPT2_AO_W:
      case GPT2_AO_B:
        o->tp = GPT2_TP_HEADS_OUT;
        break;
      case GPT2_FC_W:
      case GPT2_FC_B:
        o->tp = GPT2_TP_COLWISE;
        break;
      case GPT2_MO_W:
      case GPT2_MO_B:
        o->tp = GPT2_TP_ROWWISE;
        break;
      default:
        o->tp = GPT2_TP_REPLICATE;
    }
  }
  o->decay = o->ndim >= 2;
}

/* ------------------------------------------------------------ init */

static uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

typedef struct {
  uint64_t key;
  float std, fill;
  float *out;
} init_ctx;

/* Box-Muller on a pair of counter-based uniforms: elements 2j and 2j+1
 * are the cosine and sine halves of pair j. */
static void normal_pair(uint64_t key, int64_t pair, double *z0, double *z1) {
  uint64_t h1 = mix64(key ^ mix64((uint64_t)pair + 0x9e3779b97f4a7c15ull));
  uint64_t h2 = mix64(h1 + 0x632be59bd9b4e019ull);
  double u1 = ((double)(h1 >> 11) + 0.5) * (1.0 / 9007199254740992.0);
  double u2 = (double)(h2 >> 11) * (1.0 / 9007199254740992.0);
  double r = sqrt(-2.0 * log(u1)), a = 6.283185307179586 * u2;
  *z0 = r * cos(a);
  *z1 = r * sin(a);
}

static int init_run(void *vctx, int64_t g, int64_t l, int64_t len) {
  init_ctx *c = vctx;
  float *o = c->out + l;
  if (c->std == 0.0f) {
    for (int64_t k = 0; k < len; k++) o[k] = c->fill;
    return 0;
  }
  for (int64_t k = g; k < g + len;) {
    double z0, z1;
    normal_pair(c->key, k >> 1, &z0, &z1);
    if ((k & 1) == 0) {
      o[k - g] = (float)(c->std * z0);
      if (k + 1 < g + len) o[k + 1 - g] = (float)(c->std * z1);
      k += 2;
    } else {
      o[k - g] = (float)(c->std * z1);
      k += 1;
    }
  }
  return 0;
}

void gpt2_init_box(const gpt2_config *c, int i, uint64_t seed, int ndim,
                   const int64_t *view, const int64_t *offset,
                   const int64_t *local, float *out) {
  gpt2_param_info info;
  gpt2_param_info_get(c, i, &info);
  init_ctx ctx = {mix64(seed * 0x9e3779b97f4a7c15ull + (uint64_t)i + 1),
                  info.init_std, info.init_fill, out};
  ex_box_runs(ndim, view, offset, local, init_run, &ctx);
}

/* ------------------------------------------------------------ buffers */

gpt2_sizes gpt2_sizes_of(const gpt2_dims *d) {
  gpt2_sizes s;
  s.B = d->B;
  s.T = d->T;
  s.N = (int64_t)d->B * d->T;
  s.Nl = (int64_t)d->B * d->tl;
  s.C = d->c.n_embd;
  s.E = (int64_t)d->hl * d->hd;
  s.L = d->c.n_layer;
  s.F = d->fl;
  s.V = d->vl;
  s.hl = d->hl;
  return s;
}

/* gpt2.h's buffers plus the attention backward's [T, T] scratch. */
#define CPU_BUFFERS(X)           \
  GPT2_BUFFERS(X, s, d->sp, s.V) \
  X(dscore, s.T *s.T)

int64_t gpt2_activation_bytes(const gpt2_dims *d) {
  gpt2_sizes s = gpt2_sizes_of(d);
  int64_t n = 0;
#define ADD(name, count) n += (count);
  CPU_BUFFERS(ADD)
#undef ADD
  return n * (int64_t)sizeof(float);
}

int gpt2_model_init(gpt2_model *m, const gpt2_dims *d, float **P, float **G) {
  memset(m, 0, sizeof *m);
  m->d = *d;
  m->P = P;
  m->G = G;
  gpt2_sizes s = gpt2_sizes_of(d);
  int ok = 1;
  /* +1: a valid pointer for empty shards (no head, no vocabulary row) and
   * for the sequence-parallel buffers a run without it never uses */
#define ALLOC(name, count)                              \
  m->name = calloc((size_t)(count) + 1, sizeof(float)); \
  ok &= m->name != NULL;
  CPU_BUFFERS(ALLOC)
#undef ALLOC
  m->rep_scratch = calloc(2 * (size_t)s.C, sizeof(float));
  ok &= m->rep_scratch != NULL;
  if (!ok) {
    gpt2_model_free(m);
    return -1;
  }
  return 0;
}

void gpt2_model_free(gpt2_model *m) {
#define FREE(name, count) free(m->name);
  CPU_BUFFERS(FREE)
#undef FREE
  free(m->rep_scratch);
  memset(m, 0, sizeof *m);
}

/* ------------------------------------------------------------ attention */

/* Causal attention of this rank's heads: qkv [B*T, 3E] (q | k | v of the
 * local heads, each E = hl * hd wide) -> att [B, hl, T, T] (probabilities,
 * zero above the diagonal) and y [B*T, E]. */
static void attention_fwd(const gpt2_dims *d, const float *qkv, float *att,
                          float *y) {
  const int T = d->T, hd = d->hd, E = d->hl * d->hd, ld = 3 * E;
  const float scale = 1.0f / sqrtf((float)hd);
  for (int b = 0; b < d->B; b++)
    for (int h = 0; h < d->hl; h++) {
      const float *q = qkv + (int64_t)b * T * ld + h * hd;
      float *S = att + ((int64_t)b * d->hl + h) * T * T;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hd, scale, q,
                  ld, q + E, ld, 0.0f, S, T);
      for (int t1 = 0; t1 < T; t1++) {
        float *row = S + (int64_t)t1 * T;
        float mx = row[0];
        for (int t2 = 1; t2 <= t1; t2++) mx = row[t2] > mx ? row[t2] : mx;
        float sum = 0;
        for (int t2 = 0; t2 <= t1; t2++) {
          row[t2] = nn_expf(row[t2] - mx);
          sum += row[t2];
        }
        const float inv = 1.0f / sum;
        for (int t2 = 0; t2 <= t1; t2++) row[t2] *= inv;
        for (int t2 = t1 + 1; t2 < T; t2++) row[t2] = 0.0f;
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hd, T, 1.0f, S,
                  T, q + 2 * E, ld, 0.0f, y + (int64_t)b * T * E + h * hd, E);
    }
}

/* Backward: dy [B*T, E] -> dqkv [B*T, 3E] (overwritten); scratch [T, T]. */
static void attention_bwd(const gpt2_dims *d, const float *qkv,
                          const float *att, const float *dy, float *dqkv,
                          float *scratch) {
  const int T = d->T, hd = d->hd, E = d->hl * d->hd, ld = 3 * E;
  const float scale = 1.0f / sqrtf((float)hd);
  for (int b = 0; b < d->B; b++)
    for (int h = 0; h < d->hl; h++) {
      const float *q = qkv + (int64_t)b * T * ld + h * hd;
      const float *P = att + ((int64_t)b * d->hl + h) * T * T;
      const float *g = dy + (int64_t)b * T * E + h * hd;
      float *dq = dqkv + (int64_t)b * T * ld + h * hd;
      /* dP = dy v^T, dv = P^T dy */
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hd, 1.0f, g, E,
                  q + 2 * E, ld, 0.0f, scratch, T);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hd, T, 1.0f, P, T,
                  g, E, 0.0f, dq + 2 * E, ld);
      /* softmax backward: dS = P * (dP - sum(P * dP)) */
      for (int t1 = 0; t1 < T; t1++) {
        const float *p = P + (int64_t)t1 * T;
        float *ds = scratch + (int64_t)t1 * T;
        float dot = 0;
        for (int t2 = 0; t2 <= t1; t2++) dot += p[t2] * ds[t2];
        for (int t2 = 0; t2 <= t1; t2++) ds[t2] = p[t2] * (ds[t2] - dot);
        for (int t2 = t1 + 1; t2 < T; t2++) ds[t2] = 0.0f;
      }
      /* S = scale q k^T: dq = scale dS k, dk = scale dS^T q */
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hd, T, scale,
                  scratch, T, q + E, ld, 0.0f, dq, ld);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hd, T, scale,
                  scratch, T, q, ld, 0.0f, dq + E, ld);
    }
}

/* ------------------------------------------------------------ forward */

/* Callbacks run with the clock paused; TP ones count as communication. */
#define CALL(t_, is_comm, expr)                   \
  do {                                            \
    double c0_ = ex_now();                        \
    int rc_ = (expr);                             \
    double dt_ = ex_now() - c0_;                  \
    paused += dt_;                                \
    if (is_comm) (t_)->tp_comm += dt_;            \
    if (rc_ != 0) {                               \
      (t_)->compute += ex_now() - start - paused; \
      return rc_;                                 \
    }                                             \
  } while (0)

/* The sharded matmuls' input: the sequence shard gathered over TP (sp) or
 * the activation itself. */
static int gather_in(const gpt2_model *m, const gpt2_ops *ops, const float *x,
                     float *full, const float **out) {
  if (!m->d.sp) {
    *out = x;
    return 0;
  }
  *out = full;
  return ops->seq_gather(ops->ctx, x, full);
}

/* The partial [N, C] output of a rowwise matmul summed over TP: in place
 * (allreduce), or into this rank's sequence shard (sp). */
static int reduce_out(const gpt2_model *m, const gpt2_ops *ops, float *partial,
                      float *shard, const float **out) {
  const gpt2_dims *d = &m->d;
  if (!d->sp) {
    *out = partial;
    return ops->allreduce(ops->ctx, partial,
                          (int64_t)d->B * d->T * d->c.n_embd);
  }
  *out = shard;
  return ops->seq_reduce_scatter(ops->ctx, partial, shard);
}

int gpt2_forward(gpt2_model *m, const int32_t *inputs, const int32_t *targets,
                 float loss_scale, const gpt2_ops *ops, double *loss_sum,
                 gpt2_timers *t) {
  const gpt2_dims *d = &m->d;
  const gpt2_sizes s = gpt2_sizes_of(d);
  const int C = d->c.n_embd, N = (int)s.N, Nl = (int)s.Nl;
  const int E = (int)s.E, F = d->fl;
  float **P = m->P;
  double start = ex_now(), paused = 0;
  m->inputs = inputs;
  m->targets = targets;
  m->loss_scale = loss_scale;

  /* embeddings: full rows, then this rank's sequence shard (sp) */
  float *x0 = d->sp ? m->x0 : m->resid;
  CALL(t, 1, ops->embed(ops->ctx, inputs, s.N, x0));
  const float *wpe = P[GPT2_WPE];
  for (int b = 0; b < d->B; b++)
    for (int p = 0; p < d->T; p++) {
      float *row = x0 + ((int64_t)b * d->T + p) * C;
      const float *pe = wpe + (int64_t)p * C;
      for (int k = 0; k < C; k++) row[k] += pe[k];
    }
  if (d->sp)
    for (int b = 0; b < d->B; b++)
      memcpy(m->resid + (int64_t)b * d->tl * C,
             x0 + ((int64_t)b * d->T + d->t0) * C,
             sizeof(float) * (size_t)d->tl * (size_t)C);

  for (int l = 0; l < d->c.n_layer; l++) {
    const int64_t o_l = (int64_t)l * Nl * C, o_g = (int64_t)l * N * C;
    float *x = m->resid + o_l, *r2 = m->resid2 + o_l;
    float *ln1 = m->ln1 + o_l, *ln2 = m->ln2 + o_l;
    float *st1 = m->ln1_stats + 2 * (int64_t)l * Nl;
    float *st2 = m->ln2_stats + 2 * (int64_t)l * Nl;
    float *qkv = m->qkv + (int64_t)l * N * 3 * E;
    float *att = m->att + (int64_t)l * s.B * s.hl * s.T * s.T;
    float *atty = m->atty + (int64_t)l * N * E;
    float *fch = m->fch + (int64_t)l * N * F,
          *fcg = m->fcg + (int64_t)l * N * F;
    const float *in = NULL, *red = NULL;

    if (ops->block)
      CALL(t, 0, ops->block(ops->ctx, GPT2_BLOCK_FORWARD_BEGIN, l));
    nn_layernorm_fwd(x, P[gpt2_block_param(l, GPT2_LN1_W)],
                     P[gpt2_block_param(l, GPT2_LN1_B)], ln1, st1, st1 + Nl, Nl,
                     C, LN_EPS);
    CALL(t, 1, gather_in(m, ops, ln1, d->sp ? m->ln1g + o_g : NULL, &in));
    nn_conv1d_fwd(in, P[gpt2_block_param(l, GPT2_QKV_W)],
                  P[gpt2_block_param(l, GPT2_QKV_B)], qkv, N, C, 3 * E);
    attention_fwd(d, qkv, att, atty);
    nn_conv1d_fwd(atty, P[gpt2_block_param(l, GPT2_AO_W)], NULL, m->tmp, N, E,
                  C);
    CALL(t, 1, reduce_out(m, ops, m->tmp, m->tmp2, &red));
    const float *bo = P[gpt2_block_param(l, GPT2_AO_B)];
    for (int i = 0; i < Nl; i++)
      for (int k = 0; k < C; k++)
        r2[(int64_t)i * C + k] =
            x[(int64_t)i * C + k] + red[(int64_t)i * C + k] + bo[k];

    nn_layernorm_fwd(r2, P[gpt2_block_param(l, GPT2_LN2_W)],
                     P[gpt2_block_param(l, GPT2_LN2_B)], ln2, st2, st2 + Nl, Nl,
                     C, LN_EPS);
    CALL(t, 1, gather_in(m, ops, ln2, d->sp ? m->ln2g + o_g : NULL, &in));
    nn_conv1d_fwd(in, P[gpt2_block_param(l, GPT2_FC_W)],
                  P[gpt2_block_param(l, GPT2_FC_B)], fch, N, C, F);
    nn_gelu_fwd(fch, fcg, (int64_t)N * F);
    nn_conv1d_fwd(fcg, P[gpt2_block_param(l, GPT2_MO_W)], NULL, m->tmp, N, F,
                  C);
    CALL(t, 1, reduce_out(m, ops, m->tmp, m->tmp2, &red));
    const float *bm = P[gpt2_block_param(l, GPT2_MO_B)];
    float *xo = m->resid + o_l + (int64_t)Nl * C;
    for (int i = 0; i < Nl; i++)
      for (int k = 0; k < C; k++)
        xo[(int64_t)i * C + k] =
            r2[(int64_t)i * C + k] + red[(int64_t)i * C + k] + bm[k];
    if (ops->block) CALL(t, 0, ops->block(ops->ctx, GPT2_BLOCK_FORWARD_END, l));
  }

  const int lnf = gpt2_lnf_param(&d->c);
  const float *xL = m->resid + (int64_t)d->c.n_layer * Nl * C, *in = NULL;
  nn_layernorm_fwd(xL, P[lnf], P[lnf + 1], m->lnf, m->lnf_stats,
                   m->lnf_stats + Nl, Nl, C, LN_EPS);
  CALL(t, 1, gather_in(m, ops, m->lnf, m->lnfg, &in));
  nn_linear_fwd(in, P[GPT2_WTE], m->logits, N, C, d->vl);
  CALL(t, 0,
       ops->cross_entropy(ops->ctx, m->logits, targets, s.N, loss_scale,
                          loss_sum));
  t->compute += ex_now() - start - paused;
  return 0;
}

/* ------------------------------------------------------------ backward */

#define READY(i) CALL(t, 0, ops->grad_ready(ops->ctx, (i)))

/* Sequence parallelism leaves the gradients of replicated parameters used
 * on sequence shards partial: sum them over TP before they are final.
 * Accumulating, only this micro-batch's partial sums may be summed (the
 * earlier ones are already whole): the replicated gradients (all C wide)
 * are then computed into m->rep_scratch (slot 0 or 1), summed over TP
 * there and added to m->G. */
#define REP_ACC (m->accumulate && d->sp)
#define REP(i, slot) (REP_ACC ? m->rep_scratch + (slot)*C : G[i])
#define READY_REPLICATED(i, slot)                           \
  do {                                                      \
    float *g_ = REP(i, slot);                               \
    if (d->sp) CALL(t, 1, ops->allreduce(ops->ctx, g_, C)); \
    if (g_ != G[i])                                         \
      for (int k_ = 0; k_ < C; k_++) G[i][k_] += g_[k_];    \
    READY(i);                                               \
  } while (0)

/* dst[C] = column sums of src [rows, C], added to dst when `add`. */
static void colsum(const float *src, float *dst, int rows, int C, int add) {
  if (!add) memset(dst, 0, sizeof(float) * (size_t)C);
  for (int i = 0; i < rows; i++)
    for (int k = 0; k < C; k++) dst[k] += src[(int64_t)i * C + k];
}

int gpt2_backward(gpt2_model *m, const gpt2_ops *ops, gpt2_timers *t) {
  const gpt2_dims *d = &m->d;
  const gpt2_sizes s = gpt2_sizes_of(d);
  const int C = d->c.n_embd, N = (int)s.N, Nl = (int)s.Nl;
  const int E = (int)s.E, F = d->fl, L = d->c.n_layer;
  float **P = m->P, **G = m->G;
  double start = ex_now(), paused = 0;
  const int lnf = gpt2_lnf_param(&d->c);
  /* accumulating: add into G (the replicated gradients under sequence
   * parallelism go through rep_scratch, overwritten, see REP) */
  const float gb = m->accumulate ? 1.0f : 0.0f, rb = REP_ACC ? 0.0f : gb;

  /* head (tied to wte): logits = lnf wte^T; m->logits holds dlogits */
  const float *lnf_in = d->sp ? m->lnfg : m->lnf;
  nn_linear_bwd(lnf_in, P[GPT2_WTE], m->logits, m->dtmp, G[GPT2_WTE], N, C,
                d->vl, gb);
  const float *dln = NULL;
  CALL(t, 1, reduce_out(m, ops, m->dtmp, m->tmp2, &dln));
  memset(m->dresid, 0, sizeof(float) * (size_t)Nl * (size_t)C);
  const float *xL = m->resid + (int64_t)L * Nl * C;
  nn_layernorm_bwd(xL, P[lnf], m->lnf_stats, m->lnf_stats + Nl, dln, m->dresid,
                   REP(lnf, 0), REP(lnf + 1, 1), Nl, C, rb);
  READY_REPLICATED(lnf, 0);
  READY_REPLICATED(lnf + 1, 1);

  for (int l = L - 1; l >= 0; l--) {
    const int64_t o_l = (int64_t)l * Nl * C, o_g = (int64_t)l * N * C;
    const float *x = m->resid + o_l, *r2 = m->resid2 + o_l;
    const float *st1 = m->ln1_stats + 2 * (int64_t)l * Nl;
    const float *st2 = m->ln2_stats + 2 * (int64_t)l * Nl;
    const float *qkv = m->qkv + (int64_t)l * N * 3 * E;
    const float *att = m->att + (int64_t)l * s.B * s.hl * s.T * s.T;
    const float *atty = m->atty + (int64_t)l * N * E;
    const float *fch = m->fch + (int64_t)l * N * F;
    const float *fcg = m->fcg + (int64_t)l * N * F;
    const float *ln1_in = d->sp ? m->ln1g + o_g : m->ln1 + o_l;
    const float *ln2_in = d->sp ? m->ln2g + o_g : m->ln2 + o_l;
    const float *dy = NULL, *dred = NULL;

    if (ops->block)
      CALL(t, 0, ops->block(ops->ctx, GPT2_BLOCK_BACKWARD_BEGIN, l));
    /* MLP: x_out = r2 + sum_tp(fcg Wmo) + bmo */
    int i_mo_b = gpt2_block_param(l, GPT2_MO_B);
    colsum(m->dresid, REP(i_mo_b, 0), Nl, C, rb != 0.0f);
    READY_REPLICATED(i_mo_b, 0);
    CALL(t, 1, gather_in(m, ops, m->dresid, m->dfull, &dy));
    int i_mo_w = gpt2_block_param(l, GPT2_MO_W);
    nn_conv1d_bwd(fcg, P[i_mo_w], dy, m->dfc, G[i_mo_w], NULL, N, F, C, 0.0f,
                  gb);
    READY(i_mo_w);
    nn_gelu_bwd(fch, m->dfc, (int64_t)N * F);
    int i_fc_w = gpt2_block_param(l, GPT2_FC_W);
    nn_conv1d_bwd(ln2_in, P[i_fc_w], m->dfc, m->dtmp, G[i_fc_w], G[i_fc_w + 1],
                  N, C, F, 0.0f, gb);
    READY(i_fc_w);
    READY(i_fc_w + 1);
    CALL(t, 1, reduce_out(m, ops, m->dtmp, m->tmp2, &dred));
    int i_ln2 = gpt2_block_param(l, GPT2_LN2_W);
    nn_layernorm_bwd(r2, P[i_ln2], st2, st2 + Nl, dred, m->dresid,
                     REP(i_ln2, 0), REP(i_ln2 + 1, 1), Nl, C, rb);
    READY_REPLICATED(i_ln2, 0);
    READY_REPLICATED(i_ln2 + 1, 1);

    /* attention: r2 = x + sum_tp(atty Wao) + bao */
    int i_ao_b = gpt2_block_param(l, GPT2_AO_B);
    colsum(m->dresid, REP(i_ao_b, 0), Nl, C, rb != 0.0f);
    READY_REPLICATED(i_ao_b, 0);
    CALL(t, 1, gather_in(m, ops, m->dresid, m->dfull, &dy));
    int i_ao_w = gpt2_block_param(l, GPT2_AO_W);
    nn_conv1d_bwd(atty, P[i_ao_w], dy, m->datty, G[i_ao_w], NULL, N, E, C, 0.0f,
                  gb);
    READY(i_ao_w);
    attention_bwd(d, qkv, att, m->datty, m->dqkv, m->dscore);
    int i_qkv = gpt2_block_param(l, GPT2_QKV_W);
    nn_conv1d_bwd(ln1_in, P[i_qkv], m->dqkv, m->dtmp, G[i_qkv], G[i_qkv + 1], N,
                  C, 3 * E, 0.0f, gb);
    READY(i_qkv);
    READY(i_qkv + 1);
    CALL(t, 1, reduce_out(m, ops, m->dtmp, m->tmp2, &dred));
    int i_ln1 = gpt2_block_param(l, GPT2_LN1_W);
    nn_layernorm_bwd(x, P[i_ln1], st1, st1 + Nl, dred, m->dresid, REP(i_ln1, 0),
                     REP(i_ln1 + 1, 1), Nl, C, rb);
    READY_REPLICATED(i_ln1, 0);
    READY_REPLICATED(i_ln1 + 1, 1);
    if (ops->block)
      CALL(t, 0, ops->block(ops->ctx, GPT2_BLOCK_BACKWARD_END, l));
  }

  /* embeddings: the full rows' gradient (gathered under sp) */
  const float *dx0 = NULL;
  CALL(t, 1, gather_in(m, ops, m->dresid, m->dfull, &dx0));
  float *dwpe = G[GPT2_WPE];
  if (!m->accumulate)
    memset(dwpe, 0, sizeof(float) * (size_t)d->c.n_positions * (size_t)C);
  for (int b = 0; b < d->B; b++)
    for (int p = 0; p < d->T; p++) {
      const float *g = dx0 + ((int64_t)b * d->T + p) * C;
      float *o = dwpe + (int64_t)p * C;
      for (int k = 0; k < C; k++) o[k] += g[k];
    }
  READY(GPT2_WPE);
  CALL(t, 1, ops->embed_backward(ops->ctx, m->inputs, s.N, dx0, G[GPT2_WTE]));
  READY(GPT2_WTE);
  t->compute += ex_now() - start - paused;
  return 0;
}
