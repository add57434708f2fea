// SPDX-License-Identifier: BSD-3-Clause
/* examples/train_gpt2: everything up to the first step (inputs every rank
 * checks alike, the mesh, the module tree and its TP layout, the backend's
 * model, the reducer or the fully sharded units) and the teardown; see
 * train.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "examples/train_gpt2/train.h"

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

void trainer_free(trainer *t) {
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
  tpdp_module_destroy(t->root); /* the units, before their communicators */
  ex_hsdp_comms_destroy(t->reduce_comm, t->shard_comm, t->replicate_comm);
  if (t->replica_comm != tpdp_mesh_comm(t->mesh))
    tpdp_comm_destroy(t->replica_comm);
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
  /* --dp-replicate: shard within each group of dp ranks, replicate across
   * the groups (hybrid sharding); the gradient norm then sums over one
   * replica group, whose shards tile the model once. */
  if (ex_hsdp_comms(t->reduce_comm, t->o.dp_replicate, &t->shard_comm,
                    &t->replicate_comm, &t->err) != 0)
    return -1;
  t->replica_comm = tpdp_mesh_comm(t->mesh);
  if (t->o.dp_replicate > 1) {
    int S = t->o.dp / t->o.dp_replicate;
    tpdp_status st = tpdp_comm_split(tpdp_mesh_comm(t->mesh), t->dp_rank / S,
                                     tpdp_mesh_rank(t->mesh), &t->replica_comm);
    if (st != TPDP_SUCCESS) {
      t->replica_comm = NULL;
      return ex_tpdp_fail(&t->err, "tpdp_comm_split", st);
    }
  }
  fo.replicate = t->replicate_comm;
  if (ex_fully_shard_blocks(t->root, "transformer.h.", t->c.n_layer,
                            t->shard_comm, &fo, &t->fsdp, &t->err) != 0 ||
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

int trainer_setup(trainer *t) {
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
  /* Before the reducer, which checks that every dp rank holds the same
   * parameters (same seed, same checkpoint; broadcast_from_rank0 stays 0). */
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
  return ex_call(t->b->wait_dp, t);
}
