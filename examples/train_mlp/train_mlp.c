// SPDX-License-Identifier: BSD-3-Clause
/*
 * examples/train_mlp: trains a residual MLP classifier with tensor
 * parallelism inside data parallelism, through tpdp:
 *
 *   mesh dp x tp -> module tree -> tpdp_parallelize (fc1 colwise, fc2
 *   rowwise) -> tpdp_pre_dp_transform -> reducer over the dp dim ->
 *   per step: forward_begin / forward / forward_end, backward marking each
 *   gradient ready (buckets reduce while backward goes on), finalize, AdamW.
 *
 * Launch: mpirun -np D*T train_mlp --dp D --tp T [flags]; --help lists them.
 * --check also trains the same model in one process on rank 0 and compares.
 *
 * The loop (train) is written once for every device; what differs is an
 * ex_backend: mlp_cpu_backend (cpu_backend.c), mlp_cuda_backend
 * (cuda_backend.c, --device cuda, built with --config=cuda). The other
 * files: see train.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "examples/common/blas_core.h"
#include "examples/train_mlp/train.h"

/* ------------------------------------------------------------ callbacks */

int train_grad_ready(int i, void *vt) {
  trainer *t = vt;
  double t0 = ex_now();
  tpdp_status st = tpdp_reducer_mark_ready(t->reducer, i);
  t->tm.mark += ex_now() - t0;
  return st == TPDP_SUCCESS
             ? 0
             : -ex_tpdp_fail(&t->err, "tpdp_reducer_mark_ready", st);
}

_Static_assert((int)MLP_BLOCK_FORWARD_BEGIN == (int)EX_BLOCK_FORWARD_BEGIN &&
                   (int)MLP_BLOCK_BACKWARD_END == (int)EX_BLOCK_BACKWARD_END,
               "the model's block events are ex_block_hooks' events");

int train_block_event(int event, int layer, void *vt) {
  trainer *t = vt;
  return -ex_block_hooks(t->tree.root, "layers.", layer, event, t->views,
                         &t->err);
}

/* --zero: each block a fully sharded unit over dp, then the root (the
 * input projection and the head); the shards replace the parameters, and
 * the model's pointers follow the tree (t->views). */
static int shard_units(trainer *t) {
  tpdp_fully_shard_options fo = tpdp_fully_shard_options_default();
  fo.zero_level = t->o.zero;
  fo.param_dtype = t->o.param_dtype;
  fo.reduce_dtype = t->o.reduce_dtype;
  fo.stream = t->grad_stream; /* cuda: the model's stream */
  /* --dp-replicate: shard within each group of dp ranks, replicate across
   * the groups (hybrid sharding) */
  if (ex_hsdp_comms(t->dp_comm, t->o.dp_replicate, &t->shard_comm,
                    &t->replicate_comm, &t->err) != 0)
    return -1;
  fo.replicate = t->replicate_comm;
  if (ex_fully_shard_blocks(t->tree.root, "layers.", t->o.layers, t->shard_comm,
                            &fo, &t->fsdp, &t->err) != 0 ||
      ex_param_views_create(t->tree.params, t->tree.nparams, t->param, t->grad,
                            &t->views, &t->err) != 0)
    return -1;
  ex_param_views_refresh(t->views);
  return 0;
}

/* The root module's hooks (EX_BLOCK_* events), timed into *seconds; under
 * --zero the model's pointers follow. */
static int root_hooks(trainer *t, int event, double *seconds) {
  double t0 = ex_now();
  int rc = ex_module_hooks(t->tree.root, event, t->views, &t->err);
  *seconds += ex_now() - t0;
  return rc;
}

/* ------------------------------------------------------------ setup */

/* The mesh over the backend's communicator, the tree, TP, the model, the
 * units or the reducer: everything up to the first step. 0, or -1 with
 * t->err set. */
static int setup(trainer *t, int start) {
  const options *o = &t->o;
  /* Bind each rank near its GPU, or to its share of the host's cores
   * (TPDP_BIND=0 opts out; TPDP_DEBUG=INFO logs the binding). */
  if (t->world != NULL) TRY(tpdp_topo_bind_rank(t->world, NULL));
  if (ex_call(t->b->open, t) != 0) return -1;
  int64_t sizes[2] = {o->dp, o->tp};
  const char *dim_names[2] = {"dp", "tp"};
  TRY(tpdp_mesh_create(t->own_comm ? t->own_comm : t->world, 2, sizes,
                       dim_names, &t->mesh));
  int64_t coords[2];
  TRY(tpdp_mesh_coords(t->mesh, tpdp_mesh_rank(t->mesh), coords));
  t->dp_rank = (int)coords[0];
  TRY(tpdp_mesh_dim_comm_by_name(t->mesh, "dp", &t->dp_comm));

  t->s = (mlp_shape){o->inputs, o->width, o->hidden, o->classes, o->layers};
  TRY(build_tree(&t->s, o->seed, &t->tree));
  /* TP: fc1 colwise, fc2 rowwise; everything else replicated. */
  tpdp_tp_plan_entry plan[2] = {{"layers.*.fc1", TPDP_STYLE_COLWISE},
                                {"layers.*.fc2", TPDP_STYLE_ROWWISE}};
  TRY(tpdp_parallelize(t->tree.root, t->mesh, "tp", plan,
                       o->layers > 0 ? 2 : 0));
  if (t->rank == 0 && !o->quiet) {
    tpdp_tree_report *report = NULL;
    TRY(tpdp_tree_report_create(t->tree.root, NULL, 0, &report));
    printf("model (mesh dp=%d, tp=%d%s):\n%s", o->dp, o->tp, t->model_note,
           tpdp_tree_report_text(report));
    TRY(tpdp_tree_report_destroy(report));
  }
  if (o->zero > 0 && ex_call(t->b->place_tree, t) != 0) return -1;
  /* DP sees plain local tensors from here on. */
  TRY(tpdp_pre_dp_transform(t->tree.root));

  /* The model's local sizes: fc1's rows on this TP rank (the tree holds the
   * local shards now), the batch rows on this DP rank. */
  int np = t->tree.nparams;
  const tpdp_param *fc1_b =
      o->layers > 0 ? t->tree.params[mlp_block_param(0, BLK_FC1_B)] : NULL;
  t->f_local = fc1_b ? (int)tpdp_param_tensor(fc1_b)->shape[0] : o->hidden;
  t->batch_local = o->batch / o->dp;
  t->rparams = calloc((size_t)np, sizeof *t->rparams);
  t->param = calloc((size_t)np, sizeof *t->param);
  t->grad = calloc((size_t)np, sizeof *t->grad);
  if (!t->rparams || !t->param || !t->grad)
    return ex_fail(&t->err, "out of memory");
  if (t->b->setup(t) != 0) return -1;
  for (int i = 0; i < np; i++) t->rparams[i].fqn = t->tree.names[i];
  /* Before the reducer, which checks that every dp rank holds the same
   * parameters (same seed, same checkpoint; broadcast_from_rank0 stays 0);
   * --zero: into the units' shards (any saved layout). */
  if (o->zero > 0 && shard_units(t) != 0) return -1;
  if (o->load_dir && load_checkpoint(t, start) != 0) return -1;
  if (o->zero == 0) {
    tpdp_reducer_options ropts = TPDP_REDUCER_OPTIONS_INIT;
    ropts.bucket_cap_bytes = (size_t)(o->bucket_mib * 1048576.0);
    if (ropts.first_bucket_bytes > ropts.bucket_cap_bytes)
      ropts.first_bucket_bytes = ropts.bucket_cap_bytes;
    ropts.producer_stream = t->grad_stream;
    /* Training states as FSDP's: prepare moves the root to
     * FORWARD_BACKWARD, finalize back to IDLE; marks inside its forward are
     * refused. */
    ropts.module = t->tree.root;
    TRY(tpdp_reducer_create(t->dp_comm, t->rparams, np, &ropts, &t->reducer));
  }
  /* The units' copies are queued on the model's stream. */
  return ex_call(t->b->wait_dp, t);
}

/* ------------------------------------------------------------ one step */

/* Backward of one micro-batch (`sync`: the step's last, whose gradients
 * are reduced over dp; the others only accumulate). */
static int backward(trainer *t, int sync) {
  const int np = t->tree.nparams;
  if (t->o.zero == 0) {
    TRY(tpdp_reducer_set_sync(t->reducer, sync));
    TRY(tpdp_reducer_prepare(t->reducer));
    /* Gradients live in the reducer's buckets; they move once, when
     * prepare rebuilds the buckets after the first step. */
    if (ex_call(t->b->wait_dp, t) != 0) return -1;
    for (int i = 0; i < np; i++) {
      tpdp_tensor gv;
      TRY(tpdp_reducer_grad_view(t->reducer, i, &gv));
      t->grad[i] = gv.data;
      if (t->b->tree_holds_model)
        TRY(tpdp_param_set_grad(t->tree.params[i], &gv));
    }
  } else {
    TRY(tpdp_fsdp_set_requires_gradient_sync(t->fsdp, sync));
  }
  /* The root's backward hooks (each block's run inside the model); the
   * end hook counts with the reduction it ends. */
  if (root_hooks(t, EX_BLOCK_BACKWARD_BEGIN, &t->tm.hooks) != 0) return -1;
  double h0 = ex_now();
  if (t->b->backward(t) != 0) return -1;
  t->tm.model += ex_now() - h0;
  h0 = ex_now();
  if (root_hooks(t, EX_BLOCK_BACKWARD_END, &t->tm.finalize) != 0) return -1;
  if (t->o.zero > 0) {
    /* The units' reduce-scatters done, the tree views the shards. */
    if (sync) TRY(tpdp_fsdp_finalize(t->fsdp));
    ex_param_views_refresh(t->views);
  } else {
    TRY(tpdp_reducer_finalize(t->reducer));
  }
  t->tm.finalize += ex_now() - h0;
  return 0;
}

/* Step `step` (its --accum micro-batches, the optimizer); *loss: the mean
 * over the global batch. xg, labels_g: room for one global batch. */
static int train_step(trainer *t, int step, float *xg, int *labels_g,
                      double *loss) {
  const options *o = &t->o;
  const int K = o->accum, bl = t->batch_local;
  double loss_sum = 0;
  for (int mb = 0; mb < K; mb++) {
    /* Every rank draws the global batch; each DP rank takes its rows. */
    double h0 = ex_now();
    mlp_make_batch(&t->s, o->seed, step * K + mb, o->batch, xg, labels_g);
    t->tm.data += ex_now() - h0;
    const ex_batch batch = {xg + (size_t)t->dp_rank * bl * o->inputs,
                            labels_g + (size_t)t->dp_rank * bl};
    if (root_hooks(t, EX_BLOCK_FORWARD_BEGIN, &t->tm.hooks) != 0) return -1;
    h0 = ex_now();
    double mb_loss = 0;
    if (t->b->forward(t, &batch, (float)bl * (float)K) != 0 ||
        t->b->loss(t, &mb_loss) != 0)
      return -1;
    loss_sum += mb_loss;
    t->tm.model += ex_now() - h0;
    if (root_hooks(t, EX_BLOCK_FORWARD_END, &t->tm.hooks) != 0) return -1;
    /* The micro-batches after the first add into the gradients; only the
     * last reduces them over dp (the others: no_sync). */
    t->accumulate = mb > 0;
    if (backward(t, mb == K - 1) != 0) return -1;
  }
  double h0 = ex_now();
  /* The optimizer reads the averaged gradients. */
  if (ex_call(t->b->wait_dp, t) != 0) return -1;
  t->tm.finalize += ex_now() - h0;
  h0 = ex_now();
  if (t->b->optimizer_step(t, step + 1) != 0) return -1;
  t->tm.optim += ex_now() - h0;
  /* The step's loss: mean over the global batch (sum over DP ranks). */
  if (t->b->sum_over_dp != NULL) {
    if (t->b->sum_over_dp(t, &loss_sum) != 0) return -1;
  } else {
    tpdp_tensor lt = tpdp_tensor_1d(&loss_sum, TPDP_F64, 1);
    TRY(tpdp_allreduce(t->dp_comm, &lt, &lt, TPDP_OP_SUM));
  }
  *loss = loss_sum / ((double)o->batch * K);
  return 0;
}

/* ------------------------------------------------------------ the run */

/* Every parameter's full value into params[i] (numel[i] floats; every
 * rank takes part). */
static int gather_params(trainer *t, float **params, const int64_t *numel) {
  /* The units' full (TP-local) parameters back in the tree. */
  if (t->fsdp) TRY(tpdp_fsdp_summon_full_params(t->fsdp));
  for (int i = 0; i < t->tree.nparams; i++) {
    int g = t->b->gather_param
                ? t->b->gather_param(t, i, params[i], numel[i])
                : ex_gather_param(t->tree.params[i], params[i], &t->err);
    if (g != 0) return -1;
  }
  if (t->fsdp) TRY(tpdp_fsdp_summon_end(t->fsdp, 0));
  return 0;
}

/* --check: every parameter gathered (collective) and compared on rank 0
 * with a single-process run of the same model. The exit code, or -1 with
 * t->err set. */
static int check(trainer *t, const double *losses, int start) {
  const options *o = &t->o;
  const int np = t->tree.nparams;
  double *ref_loss = calloc((size_t)o->steps, sizeof(double));
  float **ref_params = calloc((size_t)np + 1, sizeof *ref_params);
  float **params = calloc((size_t)np + 1, sizeof *params);
  int64_t *numel = calloc((size_t)np + 1, sizeof *numel);
  const char **names = calloc((size_t)np + 1, sizeof *names);
  int rc = -1;
  if (!ref_loss || !ref_params || !params || !numel || !names) goto done;
  for (int i = 0; i < np; i++) {
    numel[i] = full_numel(&t->s, i);
    names[i] = t->tree.names[i];
    ref_params[i] = calloc((size_t)numel[i] + 1, sizeof(float));
    params[i] = calloc((size_t)numel[i] + 1, sizeof(float));
    if (!ref_params[i] || !params[i]) goto done;
  }
  int ref_rc = 0;
  if (t->rank == 0) ref_rc = train_reference(o, &t->s, ref_loss, ref_params);
  if (gather_params(t, params, numel) != 0) goto done;
  rc = 0;
  if (t->rank == 0)
    rc = ex_check_compare(losses, ref_loss, start, o->steps, params, ref_params,
                          numel, names, np, ref_rc != 0);
done:
  if (rc < 0 && t->err.msg[0] == '\0') ex_fail(&t->err, "out of memory");
  for (int i = 0; i < np && ref_params && params; i++) {
    free(ref_params[i]);
    free(params[i]);
  }
  free(ref_params);
  free(params);
  free(ref_loss);
  free(numel);
  free(names);
  return rc;
}

/* The steps from `start` on, the summary, --check. The exit code, or -1
 * with t->err set. */
static int run_steps(trainer *t, int start) {
  const options *o = &t->o;
  float *xg = malloc(sizeof(float) * (size_t)o->batch * (size_t)o->inputs);
  int *labels_g = malloc(sizeof(int) * (size_t)o->batch);
  double *losses = calloc((size_t)o->steps, sizeof(double));
  int rc = -1;
  if (!xg || !labels_g || !losses) {
    ex_fail(&t->err, "out of memory");
    goto done;
  }
  double t_start = ex_now();
  for (int step = start; step < o->steps; step++) {
    if (train_step(t, step, xg, labels_g, &losses[step]) != 0) goto done;
    if (t->rank == 0 && !o->quiet)
      printf("step %d loss %.6f\n", step, losses[step]);
    if (o->save_every > 0 && (step + 1) % o->save_every == 0 &&
        save_checkpoint(t, step + 1) != 0)
      goto done;
  }
  if (o->save_dir && (o->save_every == 0 || o->steps % o->save_every != 0) &&
      save_checkpoint(t, o->steps) != 0)
    goto done;
  if (ex_call(t->b->finish, t) != 0) goto done;
  /* Step time: the loop without drawing the synthetic data. */
  double elapsed = ex_now() - t_start - t->tm.data;
  tpdp_reducer_stats rs;
  memset(&rs, 0, sizeof rs);
  tpdp_status st =
      t->reducer ? tpdp_reducer_get_stats(t->reducer, &rs) : TPDP_SUCCESS;
  if (st != TPDP_SUCCESS) {
    ex_tpdp_fail(&t->err, "tpdp_reducer_get_stats", st);
    goto done;
  }
  char left_out[96];
  snprintf(left_out, sizeof left_out, "drawing the synthetic batches (%.3f s)",
           t->tm.data);
  ex_summary sum = {"samples",       (int64_t)o->batch * o->accum,
                    start,           o->steps - 1,
                    elapsed,         left_out,
                    t->tm.hooks,     rs.total_seconds,
                    rs.comm_seconds, rs.data_seconds,
                    t->reducer,      o->zero,
                    t->fsdp,         o->param_dtype,
                    o->reduce_dtype, o->dp / o->dp_replicate,
                    o->dp_replicate};
  ex_print_summary(&sum, t->b, t, &t->tm, t->rank, t->rank == 0, t->world);
  rc = o->check ? check(t, losses, start) : 0;
done:
  free(xg);
  free(labels_g);
  free(losses);
  return rc;
}

/* Frees the run; 0, or -1 when tpdp reports a failure doing so. */
static int teardown(trainer *t) {
  int rc = 0;
  if (tpdp_reducer_destroy(t->reducer) != TPDP_SUCCESS) {
    ex_fail(&t->err, "%s", tpdp_last_error());
    rc = -1;
  }
  if (t->b->release) t->b->release(t);
  ex_param_views_destroy(t->views);
  free(t->rparams);
  free(t->param);
  free(t->grad);
  free_tree(&t->tree); /* the units with it, before their communicators */
  ex_hsdp_comms_destroy(t->dp_comm, t->shard_comm, t->replicate_comm);
  for (int i = 0; t->tree_specs && i < t->tree.nparams; i++)
    tpdp_spec_destroy(t->tree_specs[i]);
  free(t->tree_specs);
  if (tpdp_mesh_destroy(t->mesh) != TPDP_SUCCESS) {
    ex_fail(&t->err, "%s", tpdp_last_error());
    rc = -1;
  }
  tpdp_comm_destroy(t->own_comm);
  return rc;
}

/* The whole run on backend b: exit code 0, 1 (failure or --check above
 * tolerance) or 2 (wrong number of ranks, a checkpoint that does not fit
 * the flags). */
static int train(const options *opt, const ex_backend *b, int *argc,
                 char ***argv) {
  trainer run;
  memset(&run, 0, sizeof run);
  trainer *t = &run;
  t->o = *opt;
  t->b = b;
  t->rank = 0;
  const options *o = &t->o;
  int initialized = 0, rc = -1;
  tpdp_status ist = tpdp_init(argc, argv);
  if (ist == TPDP_SUCCESS) {
    initialized = 1;
    if (tpdp_comm_world(&t->world) != TPDP_SUCCESS) {
      fprintf(stderr, "train_mlp: tpdp_comm_world failed: %s\n",
              tpdp_last_error());
      tpdp_finalize();
      return 1;
    }
    t->rank = tpdp_comm_rank(t->world);
  } else if (ist != TPDP_ERR_UNSUPPORTED || !b->runs_without_mpi ||
             o->dp * o->tp != 1) {
    fprintf(stderr, "train_mlp: tpdp_init failed: %s\n", tpdp_last_error());
    return 1;
  }              /* else: no MPI in this build; a single rank */
  int start = 0; /* the first step: the checkpoint's with --load */
  int world_size = t->world ? tpdp_comm_size(t->world) : 1;
  if (o->load_dir) rc = read_checkpoint_config(t, &start);
  if (o->load_dir && rc != 0) {
    rc = rc > 0 ? rc : -1;
  } else if (world_size != o->dp * o->tp) {
    ex_fail(&t->err,
            "launched on %d ranks but --dp %d --tp %d needs %d: use mpirun "
            "-np %d",
            world_size, o->dp, o->tp, o->dp * o->tp, o->dp * o->tp);
    t->err_agreed = 1;
    rc = 2;
  } else {
    rc = setup(t, start) != 0 ? -1 : run_steps(t, start);
  }
  if (rc < 0 || rc == 2)
    ex_report_failure("train_mlp", t->rank, t->err_agreed, t->err.msg);
  if (teardown(t) != 0) {
    fprintf(stderr, "train_mlp: %s\n", t->err.msg);
    if (rc == 0) rc = 1;
  }
  fflush(stdout);
  if (initialized) tpdp_finalize();
  return rc < 0 ? 1 : rc;
}

int main(int argc, char **argv) {
  /* OpenBLAS's widest kernels for this CPU (may restart the program once,
   * before MPI starts). */
  ex_blas_choose_core(argv, "train_mlp");
  options o;
  int prc = parse_options(argc, argv, &o);
  if (prc != 0) return prc == 1 ? 0 : 2;
  if (strcmp(o.device, "cuda") == 0) {
#ifdef TPDP_EXAMPLES_MLP_CUDA
    return train(&o, &mlp_cuda_backend, &argc, &argv);
#else
    fprintf(stderr,
            "train_mlp: --device cuda: built without --config=cuda (rebuild "
            "with bazel build --config=cuda //examples:train_mlp); use "
            "--device cpu\n");
    return 2;
#endif
  }
  return train(&o, &mlp_cpu_backend, &argc, &argv);
}
