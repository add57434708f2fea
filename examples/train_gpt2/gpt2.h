// SPDX-License-Identifier: BSD-3-Clause
/*
 * GPT-2 (as Hugging Face's GPT2LMHeadModel and llm.c define it) for one
 * rank of a tensor-parallel group, on the CPU. With tp = 1 it is the plain
 * model (--check's reference runs it so).
 *
 *   x = wte[tokens] + wpe[positions]                  vocab-parallel lookup
 *   per block:  x = x + c_proj(attn(c_attn(ln_1(x))))  heads sharded
 *               x = x + c_proj(gelu(c_fc(ln_2(x))))    c_fc colwise,
 *                                                      c_proj rowwise
 *   logits = ln_f(x) wte^T (tied), loss = mean cross-entropy (vocab-parallel)
 *
 * Linear weights are Conv1D [in, out] as in Hugging Face's files. A rank
 * holds heads [h0, h0 + hl) (q|k|v of each), columns [f0, f0 + fl) of the
 * MLP width and vocabulary rows [v0, v0 + vl), any of which may be empty.
 * The TP communication is a set of callbacks (gpt2_ops): the trainer
 * implements them with tpdp's collectives. With sequence parallelism the
 * residual stream, LayerNorms and residual adds run on this rank's
 * sequence shard [t0, t0 + tl) of each row, gathered before the sharded
 * matmuls and reduce-scattered after them.
 */
#ifndef TPDP_EXAMPLES_TRAIN_GPT2_GPT2_H
#define TPDP_EXAMPLES_TRAIN_GPT2_GPT2_H

#include <stdint.h>

typedef struct {
  int n_layer, n_embd, n_head, vocab, n_positions;
  int n_inner; /* the MLP width, 4 * n_embd unless a config says so */
} gpt2_config;

/* Parameters in Hugging Face's order (wte, wpe, per block 12, ln_f). */
enum { GPT2_WTE = 0, GPT2_WPE = 1 };
enum {
  GPT2_LN1_W = 0,
  GPT2_LN1_B,
  GPT2_QKV_W,
  GPT2_QKV_B,
  GPT2_AO_W, /* attn.c_proj */
  GPT2_AO_B,
  GPT2_LN2_W,
  GPT2_LN2_B,
  GPT2_FC_W,
  GPT2_FC_B,
  GPT2_MO_W, /* mlp.c_proj */
  GPT2_MO_B,
  GPT2_BLOCK_SLOTS
};
int gpt2_num_params(const gpt2_config *c);
int gpt2_block_param(int layer, int slot);
int gpt2_lnf_param(const gpt2_config *c); /* ln_f.weight; the bias follows */

/* How each parameter is laid out over TP. */
typedef enum {
  GPT2_TP_REPLICATE = 0,
  GPT2_TP_VOCAB,     /* wte: rows of V */
  GPT2_TP_HEADS_QKV, /* c_attn: whole heads of q, k, v */
  GPT2_TP_HEADS_OUT, /* attn.c_proj: rows of its heads */
  GPT2_TP_COLWISE,   /* mlp.c_fc: columns (weight and bias) */
  GPT2_TP_ROWWISE    /* mlp.c_proj: rows (bias replicated) */
} gpt2_tp_kind;

typedef struct {
  char name[64]; /* Hugging Face's, without "transformer.": "h.0.ln_1.bias" */
  int ndim;      /* 1 or 2 */
  int64_t shape[2];
  gpt2_tp_kind tp;
  int decay;       /* AdamW weight decay applies (rank >= 2) */
  float init_std;  /* N(0, std), or */
  float init_fill; /* this constant when init_std is 0 */
} gpt2_param_info;
void gpt2_param_info_get(const gpt2_config *c, int i, gpt2_param_info *out);

/* GPT-2's initialisation, deterministic per element: element k (flat,
 * row-major in Hugging Face's shape) of parameter i depends only on seed,
 * i and k, so any rank can write any slice and all meshes agree. Writes
 * the box [offset, offset + local) of the parameter seen in the row-major
 * view `view` into out. */
void gpt2_init_box(const gpt2_config *c, int i, uint64_t seed, int ndim,
                   const int64_t *view, const int64_t *offset,
                   const int64_t *local, float *out);

/* The TP collectives the model needs; each returns 0 or nonzero to stop. */
typedef struct {
  void *ctx;
  /* in-place sum over TP of n floats */
  int (*allreduce)(void *ctx, float *buf, int64_t n);
  /* sequence parallelism: [B, tl, C] shard -> [B, T, C], and the partial
   * [B, T, C] -> this rank's summed [B, tl, C] */
  int (*seq_gather)(void *ctx, const float *shard, float *full);
  int (*seq_reduce_scatter)(void *ctx, const float *full, float *shard);
  /* vocab-parallel lookup out[n, C] (full rows), and its backward adding
   * into this rank's wte gradient rows */
  int (*embed)(void *ctx, const int32_t *ids, int64_t n, float *out);
  int (*embed_backward)(void *ctx, const int32_t *ids, int64_t n,
                        const float *dout, float *dwte);
  /* loss on this rank's logit columns [n, vl]; leaves scale * dloss/dlogits
   * there and the loss sum (over the n rows) in *loss_sum */
  int (*cross_entropy)(void *ctx, float *logits, const int32_t *targets,
                       int64_t n, float scale, double *loss_sum);
  /* parameter i's gradient is final (DP may reduce it now) */
  int (*grad_ready)(void *ctx, int i);
  /* NULL, or called at the start and end of block `layer`'s forward and
   * backward (GPT2_BLOCK_*): a framework's module hooks, where fully
   * sharded units gather the block and reduce its gradients; the callee
   * may re-point the model's P[]/G[] at other memory. */
  int (*block)(void *ctx, int event, int layer);
} gpt2_ops;

enum {
  GPT2_BLOCK_FORWARD_BEGIN = 0,
  GPT2_BLOCK_FORWARD_END = 1,
  GPT2_BLOCK_BACKWARD_BEGIN = 2,
  GPT2_BLOCK_BACKWARD_END = 3
};

typedef struct {
  gpt2_config c;
  int B, T;   /* rows on this rank, sequence length */
  int hd;     /* head dim */
  int hl;     /* heads on this rank */
  int fl;     /* MLP columns on this rank */
  int vl;     /* vocabulary rows on this rank */
  int v0;     /* the first of them (the CUDA model's kernels need it) */
  int sp;     /* sequence parallel */
  int t0, tl; /* sequence shard (0, T without sp) */
} gpt2_dims;

/* A rank's sizes, from its dims: rows N = B*T (Nl = B*tl on this rank's
 * sequence shard), width C, local heads' width E = hl*hd, layers L, local
 * MLP width F, local vocabulary V. */
typedef struct {
  int64_t N, Nl, C, E, L, F, V, T, B, hl;
} gpt2_sizes;
gpt2_sizes gpt2_sizes_of(const gpt2_dims *d);

/* X(name, floats) for every activation buffer of gpt2_model, which the
 * CUDA model (gpt2_cuda.h) keeps too: s a gpt2_sizes, sp sequence
 * parallelism (the sp-only buffers are empty without it), logits_ld the
 * logits' row pitch (V on the CPU). */
#define GPT2_BUFFERS(X, s, sp, logits_ld)    \
  X(x0, (sp) ? (s).N *(s).C : 0)             \
  X(resid, ((s).L + 1) * (s).Nl * (s).C)     \
  X(resid2, (s).L *(s).Nl *(s).C)            \
  X(ln1, (s).L *(s).Nl *(s).C)               \
  X(ln2, (s).L *(s).Nl *(s).C)               \
  X(ln1_stats, (s).L * 2 * (s).Nl)           \
  X(ln2_stats, (s).L * 2 * (s).Nl)           \
  X(ln1g, (sp) ? (s).L *(s).N *(s).C : 0)    \
  X(ln2g, (sp) ? (s).L *(s).N *(s).C : 0)    \
  X(qkv, (s).L *(s).N * 3 * (s).E)           \
  X(att, (s).L *(s).B *(s).hl *(s).T *(s).T) \
  X(atty, (s).L *(s).N *(s).E)               \
  X(fch, (s).L *(s).N *(s).F)                \
  X(fcg, (s).L *(s).N *(s).F)                \
  X(lnf, (s).Nl *(s).C)                      \
  X(lnf_stats, 2 * (s).Nl)                   \
  X(lnfg, (sp) ? (s).N *(s).C : 0)           \
  X(logits, (s).N *(logits_ld))              \
  X(tmp, (s).N *(s).C)                       \
  X(tmp2, (sp) ? (s).Nl *(s).C : 0)          \
  X(dresid, (s).Nl *(s).C)                   \
  X(dfull, (s).N *(s).C)                     \
  X(dtmp, (s).N *(s).C)                      \
  X(dqkv, (s).N * 3 * (s).E)                 \
  X(datty, (s).N *(s).E)                     \
  X(dfc, (s).N *(s).F)

/* Seconds the model adds to: compute (everything but the callbacks other
 * than cross_entropy) and TP communication (inside them). */
typedef struct {
  double compute, tp_comm;
} gpt2_timers;

typedef struct {
  gpt2_dims d;
  float **P, **G; /* [num_params] local parameters / gradients (caller's) */
  const int32_t *inputs, *targets;
  float loss_scale;
  /* Gradient accumulation: the backward adds into m->G instead of
   * overwriting it (the micro-batches after a step's first). */
  int accumulate;
  float *rep_scratch; /* [2C]: see gpt2_backward */
  /* activations (see gpt2.c) */
  float *x0, *resid, *resid2, *ln1, *ln2, *ln1_stats, *ln2_stats, *ln1g, *ln2g;
  float *qkv, *att, *atty, *fch, *fcg, *lnf, *lnf_stats, *lnfg, *logits;
  float *tmp, *tmp2, *dresid, *dfull, *dtmp, *dqkv, *datty, *dfc, *dscore;
} gpt2_model;

/* Activation buffers for d (B rows of T). Returns 0, or -1 out of memory. */
int gpt2_model_init(gpt2_model *m, const gpt2_dims *d, float **P, float **G);
void gpt2_model_free(gpt2_model *m);
/* Bytes of activations gpt2_model_init allocates. */
int64_t gpt2_activation_bytes(const gpt2_dims *d);

/* Forward on inputs/targets [B, T] (kept by pointer until the backward);
 * dlogits are scaled by loss_scale (1 / rows of the global batch the
 * gradients average over). *loss_sum: the summed loss of these B*T
 * positions. Returns 0 or the first failing callback's result. */
int gpt2_forward(gpt2_model *m, const int32_t *inputs, const int32_t *targets,
                 float loss_scale, const gpt2_ops *ops, double *loss_sum,
                 gpt2_timers *t);
/* Backward after gpt2_forward: overwrites every m->G[i] (adds into it with
 * m->accumulate), calling
 * ops->grad_ready(i) as soon as gradient i is final (reverse order; wte
 * last, after both of its uses). */
int gpt2_backward(gpt2_model *m, const gpt2_ops *ops, gpt2_timers *t);

#endif
