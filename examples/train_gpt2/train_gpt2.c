// SPDX-License-Identifier: BSD-3-Clause
/*
 * examples/train_gpt2: trains GPT-2 with tensor parallelism inside data
 * parallelism, through tpdp, on Hugging Face weights (or GPT-2's random
 * initialisation) and llm.c token files:
 *
 *   mesh dp x tp -> module tree with Hugging Face's names -> TP layout from
 *   tp/ (wte vocab-parallel, attention by whole heads, c_fc colwise,
 *   c_proj rowwise; LayerNorms sequence-parallel with --sequence-parallel)
 *   with each rank reading only its slices of the file -> pre-DP transform
 *   -> reducer over dp -> per step: forward_begin / forward / forward_end,
 *   backward marking each gradient ready (buckets reduce while backward
 *   goes on), finalize, AdamW.
 *
 * Launch: mpirun -np D*T train_gpt2 --dp D --tp T --data FILE [flags];
 * --help lists them. --check also trains the same model in one process on
 * rank 0 and compares losses and parameters. --save / --save-every /
 * --load write and resume sharded checkpoints (ckpt/, any mesh). With
 * --device cuda (a --config=cuda build) the model trains on one GPU per
 * rank, its collectives over NCCL. The other files: see train.h.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "examples/train_gpt2/train.h"

/* The result of a run, for --check. */
typedef struct {
  double *losses;  /* [steps] */
  int want_params; /* gather the full parameters on rank 0 */
  float **params;  /* [np] then (rank 0; the caller frees them) */
  int np;
  int start; /* the first step trained */
} run_out;

/* All ranks of t->comm fail together, with the message of the lowest
 * failing rank (tpdp_comm_agree: rank 0 can print what another rank
 * found, "... (rank R of world)"). */
int agree(trainer *t, int failed) {
  if (tpdp_comm_size(t->comm) > 1) {
    tpdp_status st =
        tpdp_comm_agree(t->comm, failed ? TPDP_ERR_INVALID_ARGUMENT : 0,
                        failed ? t->err.msg : NULL);
    if (st == TPDP_SUCCESS) return 0;
    /* the agreed message, without the name of the call that carried it */
    const char *msg = tpdp_last_error();
    const char *prefix = "tpdp_comm_agree: ";
    if (strncmp(msg, prefix, strlen(prefix)) == 0) msg += strlen(prefix);
    ex_fail(&t->err, "%s", msg);
  } else if (!failed) {
    return 0;
  }
  t->err_agreed = 1;
  return -1;
}

/* ---- set up and tear down ---- */

static void trainer_free(trainer *t) {
  tpdp_reducer_destroy(t->reducer);
  if (t->b != NULL) t->b->release(t);
  for (int i = 0; i < t->np; i++) {
    if (t->storage) free(t->storage[i]);
    if (t->grad_storage) free(t->grad_storage[i]);
  }
  free(t->storage);
  free(t->grad_storage);
  free(t->m1);
  free(t->m2);
  free(t->P);
  free(t->G);
  free(t->rparams);
  free(t->fqn);
  free(t->info);
  free(t->params);
  ex_param_views_destroy(t->views);
  tpdp_module_destroy(t->root);
  tpdp_mesh_destroy(t->mesh);
  tpdp_safetensors_close(t->st);
  tok_close(&t->tok);
}

void trainer_refresh_views(trainer *t) {
  if (t->views) { /* --zero: f32 copies where a unit casts */
    ex_param_views_refresh(t->views);
    return;
  }
  for (int i = 0; i < t->np; i++) {
    t->P[i] = tpdp_param_tensor(t->params[i])->data;
    const tpdp_tensor *g = tpdp_param_grad(t->params[i]);
    if (g) t->G[i] = g->data;
  }
}

int trainer_grad_ready(void *ctx, int i) {
  trainer *t = ctx;
  if (t->reducer == NULL) return 0; /* --zero: the units reduce per block */
  double t0 = ex_now();
  tpdp_status st = tpdp_reducer_mark_ready(t->reducer, i);
  t->tm.mark += ex_now() - t0;
  return st == TPDP_SUCCESS ? 0 : tpdp_fail(t, "tpdp_reducer_mark_ready", st);
}

/* With one DP rank there is nothing to reduce or average: the reducer
 * keeps DDP's buckets and readiness bookkeeping, and this hook leaves the
 * gradients as they are (an allreduce AVG on a 1-rank communicator would
 * still pass over every gradient to divide it by 1). */
static tpdp_status keep_gradients(const tpdp_reducer_hook_args *args) {
  (void)args;
  return TPDP_SUCCESS;
}

/* --zero: each block h.<l> a fully sharded unit over dp, then the root
 * (embeddings, ln_f); the shards replace the parameters, and the copies
 * they came from (this program's storage of replicated parameters, TP's
 * local shards) are freed. */
static int shard_units(trainer *t) {
  tpdp_fully_shard_options fo = tpdp_fully_shard_options_default();
  fo.zero_level = t->o.zero;
  fo.param_dtype = t->o.param_dtype;
  fo.reduce_dtype = t->o.reduce_dtype;
  if (ex_fully_shard_blocks(t->root, "transformer.h.", t->c.n_layer,
                            t->reduce_comm, &fo, &t->fsdp, &t->err) != 0 ||
      ex_param_views_create(t->params, t->np, t->P, t->G, &t->views, &t->err) !=
          0)
    return -1;
  for (int i = 0; i < t->np; i++) {
    if (t->storage) {
      free(t->storage[i]);
      t->storage[i] = NULL;
    }
    if (t->grad_storage) {
      free(t->grad_storage[i]);
      t->grad_storage[i] = NULL;
    }
  }
  TRY(tpdp_tp_release_unused_storage(t->root, NULL));
  trainer_refresh_views(t);
  /* AdamW's moments, the shards' size. */
  for (int i = 0; i < t->np; i++) {
    int64_t n = tpdp_tensor_numel(tpdp_param_tensor(t->params[i]));
    t->m1[i] = calloc((size_t)n + 1, sizeof(float));
    t->m2[i] = calloc((size_t)n + 1, sizeof(float));
    if (!t->m1[i] || !t->m2[i]) return ex_fail(&t->err, "out of memory");
  }
  return 0;
}

/* Everything up to the first step. Returns 0, or -1 with t->err set
 * (identical on every rank: see agree). */
static int setup(trainer *t) {
  const options *o = &t->o;
  /* 1. inputs every rank checks alike */
  int bad = 0;
  if (o->load_dir != NULL) {
    bad = read_checkpoint(t) != 0;
  } else if (o->model_dir != NULL) {
    snprintf(t->model_path, sizeof t->model_path, "%s/model.safetensors",
             o->model_dir);
    bad = read_config(o->model_dir, &t->c, &t->err) != 0;
    if (!bad && tpdp_safetensors_open(t->model_path, &t->st) != TPDP_SUCCESS)
      bad = ex_fail(&t->err, "%s", tpdp_last_error()) != 0;
  } else {
    t->c = o->shape;
    bad = check_shape(&t->c, "random init", &t->err) != 0;
  }
  if (!bad && o->seq > t->c.n_positions)
    bad = ex_fail(&t->err, "--seq %d exceeds n_positions %d (%s)", o->seq,
                  t->c.n_positions,
                  o->model_dir ? "config.json, rows of wpe.weight"
                               : "--positions") != 0;
  if (!bad) {
    t->np = gpt2_num_params(&t->c);
    t->info = calloc((size_t)t->np, sizeof *t->info);
    t->params = calloc((size_t)t->np, sizeof *t->params);
    t->storage = calloc((size_t)t->np, sizeof *t->storage);
    t->grad_storage = calloc((size_t)t->np, sizeof *t->grad_storage);
    t->fqn = calloc((size_t)t->np, sizeof *t->fqn);
    t->rparams = calloc((size_t)t->np, sizeof *t->rparams);
    t->P = calloc((size_t)t->np, sizeof *t->P);
    t->G = calloc((size_t)t->np, sizeof *t->G);
    t->m1 = calloc((size_t)t->np, sizeof *t->m1);
    t->m2 = calloc((size_t)t->np, sizeof *t->m2);
    if (!t->info || !t->params || !t->storage || !t->grad_storage || !t->fqn ||
        !t->rparams || !t->P || !t->G || !t->m1 || !t->m2)
      bad = ex_fail(&t->err, "out of memory") != 0;
    for (int i = 0; i < t->np && !bad; i++)
      gpt2_param_info_get(&t->c, i, &t->info[i]);
  }
  if (!bad && o->model_dir != NULL) bad = check_file(t) != 0;
  if (!bad) bad = tok_open(o->data, &t->tok, &t->err) != 0;
  if (!bad && o->load_dir != NULL) {
    if (t->resume_pos > t->tok.count)
      bad = ex_fail(&t->err,
                    "%s: %lld tokens, but the checkpoint in %s goes on from "
                    "position %lld (another token file?)",
                    o->data, (long long)t->tok.count, o->load_dir,
                    (long long)t->resume_pos) != 0;
    else
      t->tok.pos = t->resume_pos;
  }
  if (!bad && (int64_t)o->batch * o->seq + 1 > t->tok.count)
    bad = ex_fail(&t->err,
                  "%s: %lld tokens, but a batch needs B*T+1 = %lld (use a "
                  "longer file or a smaller --batch / --seq)",
                  o->data, (long long)t->tok.count,
                  (long long)o->batch * o->seq + 1) != 0;
  if (agree(t, bad) != 0) return -1;

  /* 2. mesh, tree, TP layout (each rank reads its slices) */
  int64_t sizes[2] = {o->dp, o->tp};
  const char *names[2] = {"dp", "tp"};
  bad = 0;
  tpdp_status st = tpdp_mesh_create(t->comm, 2, sizes, names, &t->mesh);
  if (st != TPDP_SUCCESS) {
    tpdp_fail(t, "tpdp_mesh_create", st);
    return -1; /* collective: it failed everywhere */
  }
  int64_t coords[2];
  tpdp_mesh_coords(t->mesh, tpdp_mesh_rank(t->mesh), coords);
  t->dp_rank = (int)coords[0];
  t->tp_rank = (int)coords[1];
  tpdp_mesh_dim_comm_by_name(t->mesh, "dp", &t->dp_comm);
  tpdp_mesh_dim_comm_by_name(t->mesh, "tp", &t->tp_comm);
  /* The device's communicators (collective). */
  if (t->b->open != NULL && agree(t, t->b->open(t) != 0) != 0) return -1;
  bad = build_tree(t) != 0 || parallelize(t) != 0;
  if (agree(t, bad) != 0) return -1;
  if (t->print) {
    tpdp_tree_report *report = NULL;
    if (tpdp_tree_report_create(t->root, NULL, 0, &report) == TPDP_SUCCESS)
      printf("model (mesh dp=%d, tp=%d%s%s):\n%s", o->dp, o->tp,
             o->sp ? ", sequence parallel" : "", t->model_note,
             tpdp_tree_report_text(report));
    tpdp_tree_report_destroy(report);
  }
  /* DP sees plain local tensors from here on. */
  TRY(tpdp_pre_dp_transform(t->root));

  /* 3. this rank's sizes, the model, optimizer state, the reducer */
  gpt2_dims *d = &t->dims;
  d->c = t->c;
  d->B = o->batch / o->dp;
  d->T = o->seq;
  d->hd = t->c.n_embd / t->c.n_head;
  int64_t s, n;
  tpdp_chunk_range(t->c.n_head, o->tp, t->tp_rank, &s, &n);
  d->hl = (int)n;
  tpdp_chunk_range(t->c.n_inner, o->tp, t->tp_rank, &s, &n);
  d->fl = (int)n;
  tpdp_chunk_range(t->c.vocab, o->tp, t->tp_rank, &s, &n);
  d->vl = (int)n;
  d->v0 = (int)s;
  d->sp = o->sp && o->tp > 1;
  d->t0 = 0;
  d->tl = o->seq;
  if (d->sp) {
    tpdp_chunk_range(o->seq, o->tp, t->tp_rank, &s, &n);
    d->t0 = (int)s;
    d->tl = (int)n;
  }
  /* The backend's model, parameters and optimizer state (a GPU out of
   * memory fails on every rank with the failing rank's message). */
  if (agree(t, t->b->setup(t) != 0) != 0) return -1;
  for (int i = 0; i < t->np; i++) t->rparams[i].fqn = t->fqn[i];
  if (o->zero > 0) {
    /* The units, then the checkpoint into their shards (any saved
     * layout: tpdp_checkpoint_load reads each rank's box). */
    if (shard_units(t) != 0) return -1;
    return o->load_dir != NULL ? load_checkpoint(t) : 0;
  }
  /* Before the reducer, which broadcasts the parameters from dp rank 0. */
  if (o->load_dir != NULL && load_checkpoint(t) != 0) return -1;
  tpdp_reducer_options ropts = tpdp_reducer_options_default();
  ropts.bucket_cap_bytes = (size_t)(o->bucket_mib * 1048576.0);
  if (ropts.first_bucket_bytes > ropts.bucket_cap_bytes)
    ropts.first_bucket_bytes = ropts.bucket_cap_bytes;
  if (o->dp == 1) {
    ropts.comm_hook = TPDP_REDUCER_HOOK_USER;
    ropts.hook_fn = keep_gradients;
  }
  ropts.producer_stream = t->grad_stream;
  TRY(tpdp_reducer_create(t->reduce_comm, t->rparams, t->np, &ropts,
                          &t->reducer));
  /* The reducer broadcast the parameters from dp rank 0. */
  return t->b->wait_dp(t);
}

/* Full value of parameter i on rank 0 (collective over the mesh). */
static int gather_param(trainer *t, int i, float *out) {
  const tpdp_tensor *lt = tpdp_param_tensor(t->params[i]);
  const tpdp_spec *spec = (const tpdp_spec *)tpdp_param_spec(t->params[i]);
  if (spec == NULL) {
    if (out) memcpy(out, lt->data, tpdp_tensor_nbytes(lt));
    return 0;
  }
  tpdp_dtensor dt = {*lt, spec};
  tpdp_tensor full;
  TRY(tpdp_dtensor_full_tensor_alloc(&dt, &full));
  if (out) memcpy(out, full.data, tpdp_tensor_nbytes(&full));
  free(full.data);
  return 0;
}

/* --grad-clip: the global gradient norm over the whole (dp, tp) mesh, each
 * element counted once - a TP-sharded parameter's local rows on every tp
 * rank, a TP-replicated one on tp rank 0 only; the dp ranks' identical
 * gradients (--zero 0) once, their disjoint shards (--zero 1-3) each - and
 * every gradient scaled by max / (norm + 1e-6) when that is below 1, as
 * torch.nn.utils.clip_grad_norm_ on the one-process model. *norm: the
 * norm before clipping. 0, or -1 with t->err set. */
static int clip_gradients(trainer *t, double *norm) {
  int tp_dim = tpdp_mesh_dim_index(t->mesh, "tp");
  double sq = 0;
  for (int i = 0; i < t->np; i++) {
    const tpdp_spec *spec = (const tpdp_spec *)tpdp_param_spec(t->params[i]);
    int tp_sharded = spec != NULL && tpdp_spec_placements(spec)[tp_dim].kind ==
                                         TPDP_PLACEMENT_SHARD;
    if (!tp_sharded && t->tp_rank != 0) continue;
    const tpdp_tensor *g = tpdp_param_grad(t->params[i]);
    const float *x = g->data;
    for (int64_t k = 0; k < tpdp_tensor_numel(g); k++)
      sq += (double)x[k] * (double)x[k];
  }
  tpdp_tensor v = tpdp_tensor_1d(&sq, TPDP_F64, 1);
  tpdp_comm *over = t->o.zero > 0 ? tpdp_mesh_comm(t->mesh) : t->tp_comm;
  TRY(tpdp_allreduce(over, &v, &v, TPDP_OP_SUM));
  *norm = sqrt(sq);
  double coef = t->o.grad_clip / (*norm + 1e-6);
  if (coef >= 1) return 0;
  for (int i = 0; i < t->np; i++) {
    const tpdp_tensor *g = tpdp_param_grad(t->params[i]);
    float *x = g->data;
    for (int64_t k = 0; k < tpdp_tensor_numel(g); k++)
      x[k] = (float)(x[k] * coef);
  }
  return 0;
}

/* Backward under the DDP-style reducer (--zero 0): prepare, the model's
 * backward marking gradients ready, finalize. The one-time bucket rebuild's
 * share goes into *rebuild and *rebuild_s. 0, or -1 with t->err set. */
static int reducer_backward(trainer *t, tpdp_reducer_stats *rebuild,
                            double *rebuild_s) {
  int was_rebuilt = tpdp_reducer_rebuilt(t->reducer);
  tpdp_status st;
  double h0;
  tpdp_reducer_stats pre;
  if (!was_rebuilt && tpdp_reducer_get_stats(t->reducer, &pre) != TPDP_SUCCESS)
    return -1;
  h0 = ex_now();
  st = tpdp_reducer_prepare(t->reducer);
  if (st != TPDP_SUCCESS) {
    tpdp_fail(t, "tpdp_reducer_prepare", st);
    return -1;
  }
  /* DDP's one-time warm-up: the buckets rebuilt in gradient-ready order
   * (new buffers, first touched here) at the start of step 1. Timed
   * apart from the steady state: its wall time leaves the step time, and
   * its share of every reducer figure (total, comm, data) leaves the
   * overhead, so no part of it is subtracted twice. */
  if (!was_rebuilt && tpdp_reducer_rebuilt(t->reducer)) {
    *rebuild_s = ex_now() - h0;
    tpdp_reducer_stats post;
    if (tpdp_reducer_get_stats(t->reducer, &post) != TPDP_SUCCESS) return -1;
    rebuild->total_seconds = post.total_seconds - pre.total_seconds;
    rebuild->comm_seconds = post.comm_seconds - pre.comm_seconds;
    rebuild->data_seconds = post.data_seconds - pre.data_seconds;
  }
  if (t->b->wait_dp(t) != 0) return -1;
  /* Gradients live in the reducer's buckets (they move once, when the
   * buckets are rebuilt after the first step). */
  for (int i = 0; i < t->np; i++) {
    tpdp_tensor gv;
    st = tpdp_reducer_grad_view(t->reducer, i, &gv);
    if (st == TPDP_SUCCESS && t->b->tree_holds_model)
      st = tpdp_param_set_grad(t->params[i], &gv);
    if (st != TPDP_SUCCESS) {
      tpdp_fail(t, "tpdp_reducer_grad_view", st);
      return -1;
    }
    t->G[i] = gv.data;
  }
  if (t->b->backward(t) != 0) return -1;
  st = tpdp_reducer_finalize(t->reducer);
  if (st != TPDP_SUCCESS) {
    tpdp_fail(t, "tpdp_reducer_finalize", st);
    return -1;
  }
  return 0;
}

/* Backward under fully sharded units (--zero 1-3): the root's backward
 * hooks around the model's (each block's run inside it), then, on a step's
 * last micro-batch (`sync`), finalize, which leaves the tree viewing the
 * shards and their averaged gradients. The others only accumulate. */
static int fsdp_backward(trainer *t, int sync) {
  double h0 = ex_now();
  TRY(tpdp_fsdp_set_requires_gradient_sync(t->fsdp, sync));
  if (ex_module_hooks(t->root, EX_BLOCK_BACKWARD_BEGIN, t->views, &t->err) != 0)
    return -1;
  t->tm.hooks += ex_now() - h0;
  if (t->b->backward(t) != 0) return -1;
  if (ex_module_hooks(t->root, EX_BLOCK_BACKWARD_END, t->views, &t->err) != 0)
    return -1;
  if (sync) TRY(tpdp_fsdp_finalize(t->fsdp));
  trainer_refresh_views(t);
  return 0;
}

/* One training run over t->comm. out->losses gets each step's loss; with
 * out->params the full parameters land there on rank 0. */
static int train(trainer *t, run_out *out) {
  const options *o = &t->o;
  int32_t *tokens = NULL;
  int rc = -1;
  if (setup(t) != 0) goto done;
  out->start = t->start;
  if (out->want_params && t->rank == 0) {
    out->params = calloc((size_t)t->np, sizeof *out->params);
    out->np = out->params ? t->np : 0;
    for (int i = 0; i < out->np; i++) {
      const gpt2_param_info *in = &t->info[i];
      int64_t n = in->ndim == 2 ? in->shape[0] * in->shape[1] : in->shape[0];
      out->params[i] = calloc((size_t)n + 1, sizeof(float));
      if (out->params[i] == NULL) out->np = 0;
    }
    if (out->np == 0) {
      ex_fail(&t->err, "out of memory for --check's parameters");
      goto done;
    }
  }
  tokens = malloc(sizeof(int32_t) * ((size_t)o->batch * o->seq + 1));
  if (tokens == NULL) {
    ex_fail(&t->err, "out of memory");
    goto done;
  }
  /* The loss is the mean over the step's global batch: --accum
   * micro-batches of --batch rows, each split over dp. */
  const int K = o->accum;
  const int64_t rows = (int64_t)t->dims.B * o->seq;
  const float scale = 1.0f / ((float)rows * (float)K);
  tpdp_reducer_stats rs0 = {0, 0, 0, 0}, rebuild = {0, 0, 0, 0};
  times tm0;
  memset(&tm0, 0, sizeof tm0);
  double t_first = 0, t_data0 = 0, rebuild_s = 0;
  const int first = t->start;
  for (int step = first; step < o->steps; step++) {
    if (step == first + 1) { /* the first is warm-up: the summary starts */
      t_first = ex_now();
      tm0 = t->tm;
      t_data0 = t->tm.data;
      if (t->reducer &&
          tpdp_reducer_get_stats(t->reducer, &rs0) != TPDP_SUCCESS)
        goto done;
    }
    double loss_sum = 0;
    for (int mb = 0; mb < K; mb++) {
      /* Every rank reads the global batch and checks it; DP rank r takes
       * rows r*B/D .. (r+1)*B/D-1. */
      double h0 = ex_now();
      int bad = tok_next_batch(&t->tok, (int64_t)o->batch * o->seq, t->c.vocab,
                               tokens, &t->err) != 0;
      if (agree(t, bad) != 0) goto done;
      t->tm.data += ex_now() - h0;
      const int32_t *in = tokens + (int64_t)t->dp_rank * rows;
      h0 = ex_now();
      /* The root's hooks (--zero: the model's P and G follow the units) */
      if (ex_module_hooks(t->root, EX_BLOCK_FORWARD_BEGIN, t->views, &t->err) !=
          0)
        goto done;
      t->tm.hooks += ex_now() - h0;
      if (t->b->forward(t, in, scale) != 0) goto done;
      h0 = ex_now();
      if (ex_module_hooks(t->root, EX_BLOCK_FORWARD_END, t->views, &t->err) !=
          0)
        goto done;
      t->tm.hooks += ex_now() - h0;
      /* The micro-batches after the first add into the gradients; only the
       * last reduces them over dp (the others: no_sync). */
      const int sync = mb == K - 1;
      t->accumulate = mb > 0;
      if (o->zero > 0) {
        if (fsdp_backward(t, sync) != 0) goto done;
      } else {
        tpdp_status st =
            t->reducer ? tpdp_reducer_set_sync(t->reducer, sync) : TPDP_SUCCESS;
        if (st != TPDP_SUCCESS) {
          tpdp_fail(t, "tpdp_reducer_set_sync", st);
          goto done;
        }
        if (reducer_backward(t, &rebuild, &rebuild_s) != 0) goto done;
      }
      if (!sync) { /* the last micro-batch's loss: after the update */
        double l = 0;
        if (t->b->loss(t, &l) != 0) goto done;
        loss_sum += l;
      }
    }
    /* The optimizer reads the averaged gradients. */
    if (t->b->wait_dp(t) != 0) goto done;
    double grad_norm = 0;
    if (o->grad_clip > 0 && clip_gradients(t, &grad_norm) != 0) goto done;
    double h0 = ex_now();
    if (t->b->optimizer_step(t, step + 1) != 0) goto done;
    t->tm.optim += ex_now() - h0;
    double last_loss = 0;
    if (t->b->loss(t, &last_loss) != 0) goto done;
    loss_sum += last_loss;
    /* The step's loss: mean over the global batch (sum over DP ranks). */
    tpdp_tensor lt = tpdp_tensor_1d(&loss_sum, TPDP_F64, 1);
    tpdp_status st = tpdp_allreduce(t->dp_comm, &lt, &lt, TPDP_OP_SUM);
    if (st != TPDP_SUCCESS) {
      tpdp_fail(t, "tpdp_allreduce (loss)", st);
      goto done;
    }
    out->losses[step] = loss_sum / ((double)o->batch * o->seq * K);
    if (t->print) {
      if (o->grad_clip > 0)
        printf("step %d loss %.6f grad_norm %.6f%s\n", step, out->losses[step],
               grad_norm, grad_norm > o->grad_clip ? " (clipped)" : "");
      else
        printf("step %d loss %.6f\n", step, out->losses[step]);
      fflush(stdout);
    }
    if (o->save_every > 0 && (step + 1) % o->save_every == 0 &&
        save_checkpoint(t, step + 1) != 0)
      goto done;
  }
  /* The last step's device work is done; data reads and checkpoint saves
   * are not training time. */
  if (t->b->finish(t) != 0) goto done;
  double elapsed = ex_now() - t_first - (t->tm.data - t_data0) -
                   (t->tm.ckpt - tm0.ckpt) - rebuild_s;
  if (o->save_dir != NULL &&
      (o->save_every == 0 || o->steps % o->save_every != 0) &&
      save_checkpoint(t, o->steps) != 0)
    goto done;
  tpdp_reducer_stats rs = {0, 0, 0, 0};
  if (t->reducer && tpdp_reducer_get_stats(t->reducer, &rs) != TPDP_SUCCESS)
    goto done;
  if (t->summary && o->steps - first == 1)
    printf("throughput: n/a (one step, and the first step is warm-up)\n");
  if (t->summary && o->steps - first > 1) {
    int n = o->steps - first - 1;
    double comm = rs.comm_seconds - rs0.comm_seconds - rebuild.comm_seconds;
    double data = rs.data_seconds - rs0.data_seconds - rebuild.data_seconds;
    double total = rs.total_seconds - rs0.total_seconds - rebuild.total_seconds;
    double hooks = t->tm.hooks - tm0.hooks;
    double bookkeeping = total - comm - data;
    double overhead = hooks + bookkeeping;
    double tokens_n = (double)n * o->batch * o->seq * K;
    printf(
        "throughput: %.1f tokens/s, %.1f ms/step (steps %d..%d: %d x %d "
        "tokens in %.3f s; step %d, loading, checkpoints and the one-time "
        "bucket rebuild (%.3f s) excluded)\n",
        tokens_n / elapsed, 1e3 * elapsed / n, first + 1, o->steps - 1, n,
        o->batch * o->seq * K, elapsed, first, rebuild_s);
    times timed = t->tm;
    timed.model.compute -= tm0.model.compute;
    timed.model.tp_comm -= tm0.model.tp_comm;
    timed.optim -= tm0.optim;
    t->b->print_time(t, &timed, &rs, comm, data);
    printf(
        "tpdp overhead: %.4f s (hooks %.4f, reducer bookkeeping %.4f) = "
        "%.2f%% of step time\n",
        overhead, hooks, bookkeeping, 100.0 * overhead / elapsed);
    if (t->reducer)
      printf("reducer: %lld buckets, rebuilt %s; ",
             (long long)tpdp_reducer_num_buckets(t->reducer),
             tpdp_reducer_rebuilt(t->reducer) ? "yes" : "no");
    else
      printf("dp: fully sharded units, zero %d; ", o->zero);
    printf("threads per rank %d; OpenBLAS %s\n", nn_threads(), nn_blas_core());
  }
  if (t->summary) fflush(stdout);
  if (t->fsdp)
    ex_fsdp_stats_line(t->fsdp, t->rank, o->zero, o->param_dtype,
                       o->reduce_dtype);
  ex_peak_memory_line(t->comm, t->summary);
  if (out->want_params || o->check) {
    if (t->b->params_to_host(t) != 0) goto done;
    /* The units' full (TP-local) parameters back in the tree. */
    tpdp_status fst = TPDP_SUCCESS;
    if (t->fsdp && (fst = tpdp_fsdp_summon_full_params(t->fsdp)) != 0) {
      tpdp_fail(t, "tpdp_fsdp_summon_full_params", fst);
      goto done;
    }
    for (int i = 0; i < t->np; i++)
      if (gather_param(
              t, i, t->rank == 0 && out->params ? out->params[i] : NULL) != 0)
        goto done;
    if (t->fsdp && (fst = tpdp_fsdp_summon_end(t->fsdp, 0)) != 0) {
      tpdp_fail(t, "tpdp_fsdp_summon_end", fst);
      goto done;
    }
  }
  rc = 0;
done:
  free(tokens);
  trainer_free(t);
  return rc;
}

/* ------------------------------------------------------------ main */

static int64_t full_numel(const gpt2_param_info *in) {
  return in->ndim == 2 ? in->shape[0] * in->shape[1] : in->shape[0];
}

/* Train on `comm` (summary: print the summary lines). 0, or 1 after
 * printing the failure: once (rank 0) when every rank agreed on it, else
 * on each failing rank. *shape: the model's shape. */
static int run(const options *o, tpdp_comm *comm, int summary, run_out *out,
               gpt2_config *shape) {
  trainer *t = calloc(1, sizeof *t);
  if (t == NULL) return 1;
  t->o = *o;
  t->b = &gpt2_cpu_backend;
#ifdef TPDP_EXAMPLES_GPT2_CUDA
  if (strcmp(o->device, "cuda") == 0) t->b = &gpt2_cuda_backend;
#endif
  t->comm = comm;
  t->rank = tpdp_comm_rank(comm);
  t->summary = summary && t->rank == 0;
  t->print = t->summary && !o->quiet;
  t->tok.fd = -1;
  int rc = train(t, out);
  if (rc != 0 && !t->err_agreed)
    fprintf(stderr, "train_gpt2: [rank %d] %s\n", t->rank, t->err.msg);
  else if (rc != 0 && t->rank == 0)
    fprintf(stderr, "train_gpt2: %s\n", t->err.msg);
  *shape = t->c;
  free(t);
  return rc == 0 ? 0 : 1;
}

int main(int argc, char **argv) {
  options o;
  int prc = parse_options(argc, argv, &o);
  if (prc != 0) return prc == 1 ? 0 : 2;
  ex_error e;
  tpdp_comm *world = NULL;
  int rank = 0;
  tpdp_status ist = tpdp_init(&argc, &argv);
  if (ist == TPDP_SUCCESS && tpdp_comm_world(&world) == TPDP_SUCCESS)
    rank = tpdp_comm_rank(world);
  if (check_options(&o, &e) != 0) {
    if (rank == 0) fprintf(stderr, "train_gpt2: %s\n", e.msg);
    if (ist == TPDP_SUCCESS) tpdp_finalize();
    return 1;
  }
  if (world == NULL) {
    fprintf(stderr, "train_gpt2: tpdp_init failed: %s\n", tpdp_last_error());
    return 1;
  }
  int size = tpdp_comm_size(world);
  if (size != o.dp * o.tp) {
    if (rank == 0)
      fprintf(stderr,
              "train_gpt2: launched on %d ranks but --dp %d --tp %d needs %d: "
              "use mpirun -np %d\n",
              size, o.dp, o.tp, o.dp * o.tp, o.dp * o.tp);
    tpdp_finalize();
    return 1;
  }
  /* Each rank near its share of the host's cores; OpenBLAS and the
   * elementwise kernels get as many threads as the host has cores per local
   * rank (OPENBLAS_NUM_THREADS, if set, decides instead). */
  if (tpdp_topo_bind_rank(world, NULL) != TPDP_SUCCESS && rank == 0)
    fprintf(stderr, "train_gpt2: warning: ranks not bound to cores: %s\n",
            tpdp_last_error());
  int local_rank = 0, local_size = 1;
  tpdp_comm_local_rank(world, &local_rank, &local_size);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int threads = (int)(cores / local_size);
  const char *env = getenv("OPENBLAS_NUM_THREADS");
  if (env != NULL) threads = atoi(env);
  nn_set_threads(threads);
  const char *core = nn_blas_better_core();
  if (core != NULL && rank == 0)
    fprintf(stderr,
            "train_gpt2: warning: OpenBLAS runs its %s kernels on this CPU, "
            "which it does not recognise; OPENBLAS_CORETYPE=%s makes its "
            "GEMMs several times faster\n",
            nn_blas_core(), core);

  double *losses = calloc((size_t)o.steps, sizeof(double));
  double *ref_losses = calloc((size_t)o.steps, sizeof(double));
  gpt2_config shape;
  int exit_code = 1;
  /* With --check, rank 0 keeps the gathered parameters of the distributed
   * run. */
  run_out out = {losses, o.check, NULL, 0, 0};
  run_out rout = {ref_losses, 1, NULL, 0, 0};
  if (losses == NULL || ref_losses == NULL) goto done;
  int trc = run(&o, world, 1, &out, &shape);
  if (trc != 0) goto done;
  exit_code = 0;
  if (o.check) {
    /* The reference: the same model in one process (a 1-rank mesh). */
    tpdp_comm *self = NULL;
    if (tpdp_comm_split(world, rank == 0 ? 0 : -1, 0, &self) != TPDP_SUCCESS) {
      if (rank == 0)
        fprintf(stderr, "train_gpt2: tpdp_comm_split: %s\n", tpdp_last_error());
      exit_code = 1;
      goto done;
    }
    if (rank == 0) {
      /* With --load, the reference resumes from the same checkpoint. */
      options r = o;
      r.dp = r.tp = 1;
      r.sp = 0;
      r.device = "cpu";
      r.tf32 = 0;
      r.check = 0;
      r.quiet = 1;
      r.save_dir = NULL;
      r.save_every = 0;
      r.zero = 0;
      gpt2_config rshape;
      int ref_rc = run(&r, self, 0, &rout, &rshape);
      if (rout.np != out.np) ref_rc = 1;
      double max_rel = 0, max_abs = 0;
      for (int s = out.start; s < o.steps; s++) {
        double rel =
            fabs(losses[s] - ref_losses[s]) / fmax(fabs(ref_losses[s]), 1e-12);
        if (rel > max_rel || rel != rel) max_rel = rel; /* NaN fails */
      }
      for (int i = 0; i < out.np && ref_rc == 0; i++) {
        gpt2_param_info in;
        gpt2_param_info_get(&shape, i, &in);
        for (int64_t k = 0; k < full_numel(&in); k++) {
          double dd =
              fabs((double)out.params[i][k] - (double)rout.params[i][k]);
          if (dd > max_abs || dd != dd) max_abs = dd;
        }
      }
      printf("check: max_rel_loss_diff %.3e max_abs_param_diff %.3e\n", max_rel,
             max_abs);
      if (ref_rc != 0 || !(max_rel <= 1e-4) || !(max_abs <= 1e-4)) {
        printf("check: FAILED (tolerance 1e-4)\n");
        exit_code = 1;
      } else {
        printf("check: ok\n");
      }
      tpdp_comm_destroy(self);
    }
  }
done:
  for (int i = 0; i < out.np; i++) free(out.params[i]);
  for (int i = 0; i < rout.np; i++) free(rout.params[i]);
  free(out.params);
  free(rout.params);
  free(losses);
  free(ref_losses);
  fflush(stdout);
  tpdp_finalize();
  return exit_code;
}
