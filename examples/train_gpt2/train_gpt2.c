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

#include "examples/common/blas_core.h"
#include "examples/train_gpt2/train.h"

/* The result of a run, for --check. */
typedef struct {
  double *losses;  /* [steps] */
  int want_params; /* gather the full parameters on rank 0 */
  float **params;  /* [np] then (rank 0; the caller frees them) */
  int np;
  int start; /* the first step trained */
} run_out;

/* --grad-clip: the global gradient norm over the whole (dp, tp) mesh, each
 * element counted once - a TP-sharded parameter's local rows on every tp
 * rank, a TP-replicated one on tp rank 0 only; the dp ranks' identical
 * gradients (--zero 0) once, their disjoint shards (--zero 1-3) each, over
 * one replica group under --dp-replicate - and
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
  /* --zero: over one replica group (--dp-replicate's replicas hold the
   * same shards: summing over them would count each R times) */
  tpdp_comm *over = t->o.zero > 0 ? t->replica_comm : t->tp_comm;
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
  if (ex_call(t->b->wait_dp, t) != 0) return -1;
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

/* The trained parameters, whole, into out->params on rank 0 (collective:
 * every rank takes part). */
static int gather_params(trainer *t, run_out *out) {
  if (ex_call(t->b->params_to_host, t) != 0) return -1;
  /* The units' full (TP-local) parameters back in the tree. */
  if (t->fsdp) TRY(tpdp_fsdp_summon_full_params(t->fsdp));
  for (int i = 0; i < t->np; i++)
    if (ex_gather_param(t->params[i],
                        t->rank == 0 && out->params ? out->params[i] : NULL,
                        &t->err) != 0)
      return -1;
  if (t->fsdp) TRY(tpdp_fsdp_summon_end(t->fsdp, 0));
  return 0;
}

/* One training run over t->comm. out->losses gets each step's loss; with
 * out->params the full parameters land there on rank 0. */
static int train(trainer *t, run_out *out) {
  const options *o = &t->o;
  int32_t *tokens = NULL;
  int rc = -1;
  if (trainer_setup(t) != 0) goto done;
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
  ex_times tm0;
  memset(&tm0, 0, sizeof tm0);
  double t_first = 0, t_data0 = 0, rebuild_s = 0;
  const int first = t->start;
  for (int step = first; step < o->steps; step++) {
    if (step == first + 1) { /* the first is warm-up: the summary starts */
      t_first = ex_now();
      tm0 = t->tm;
      t->model_tm0 = t->model_tm;
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
      const ex_batch in = {tokens + (int64_t)t->dp_rank * rows};
      h0 = ex_now();
      /* The root's hooks (--zero: the model's P and G follow the units) */
      if (ex_module_hooks(t->root, EX_BLOCK_FORWARD_BEGIN, t->views, &t->err) !=
          0)
        goto done;
      t->tm.hooks += ex_now() - h0;
      if (t->b->forward(t, &in, scale) != 0) goto done;
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
    if (ex_call(t->b->wait_dp, t) != 0) goto done;
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
  if (ex_call(t->b->finish, t) != 0) goto done;
  double elapsed = ex_now() - t_first - (t->tm.data - t_data0) -
                   (t->tm.ckpt - tm0.ckpt) - rebuild_s;
  if (o->save_dir != NULL &&
      (o->save_every == 0 || o->steps % o->save_every != 0) &&
      save_checkpoint(t, o->steps) != 0)
    goto done;
  tpdp_reducer_stats rs = {0, 0, 0, 0};
  if (t->reducer && tpdp_reducer_get_stats(t->reducer, &rs) != TPDP_SUCCESS)
    goto done;
  char left_out[160];
  snprintf(left_out, sizeof left_out,
           "step %d, loading, checkpoints and the one-time bucket rebuild "
           "(%.3f s)",
           first, rebuild_s);
  ex_times timed = t->tm;
  timed.optim -= tm0.optim;
  ex_summary sum = {
      "tokens",
      (int64_t)o->batch * o->seq * K,
      first + 1,
      o->steps - 1,
      elapsed,
      left_out,
      t->tm.hooks - tm0.hooks,
      rs.total_seconds - rs0.total_seconds - rebuild.total_seconds,
      rs.comm_seconds - rs0.comm_seconds - rebuild.comm_seconds,
      rs.data_seconds - rs0.data_seconds - rebuild.data_seconds,
      t->reducer,
      o->zero,
      t->fsdp,
      o->param_dtype,
      o->reduce_dtype,
      o->dp / o->dp_replicate,
      o->dp_replicate};
  ex_print_summary(&sum, t->b, t, &timed, t->rank, t->summary, t->comm);
  if (t->fsdp) /* each rank, as its fsdp line; bench/hsdp.sh reads it */
    ex_fsdp_traffic_line(t->shard_comm, t->replicate_comm, t->rank);
  if ((out->want_params || o->check) && gather_params(t, out) != 0) goto done;
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
  if (rc != 0)
    ex_report_failure("train_gpt2", t->rank, t->err_agreed, t->err.msg);
  *shape = t->c;
  free(t);
  return rc == 0 ? 0 : 1;
}

int main(int argc, char **argv) {
  /* OpenBLAS's widest kernels for this CPU (may restart the program once,
   * before MPI starts). */
  ex_blas_choose_core(argv, "train_gpt2");
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
      r.dp_replicate = 1;
      gpt2_config rshape;
      int ref_rc = run(&r, self, 0, &rout, &rshape);
      if (rout.np != out.np) ref_rc = 1;
      int64_t *numel = calloc((size_t)out.np + 1, sizeof *numel);
      const char **names = calloc((size_t)out.np + 1, sizeof *names);
      gpt2_param_info *info = calloc((size_t)out.np + 1, sizeof *info);
      if (numel == NULL || names == NULL || info == NULL) ref_rc = 1;
      for (int i = 0; i < out.np && ref_rc == 0; i++) {
        gpt2_param_info_get(&shape, i, &info[i]);
        numel[i] = full_numel(&info[i]);
        names[i] = info[i].name;
      }
      exit_code =
          ex_check_compare(losses, ref_losses, out.start, o.steps, out.params,
                           rout.params, numel, names, out.np, ref_rc != 0);
      free(numel);
      free(names);
      free(info);
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
