// SPDX-License-Identifier: BSD-3-Clause
/* examples/train_gpt2: --save / --save-every / --load (see train.h). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "examples/train_gpt2/train.h"

/* ------------------------------------------------------------ checkpoints
 *
 * A checkpoint holds what a resume needs: the weights under the tree's
 * Hugging Face FQNs ("transformer.*"; the tied lm_head.weight once, as
 * transformer.wte.weight, as save_pretrained writes it), the AdamW moments
 * as optim.exp_avg.<fqn> and optim.exp_avg_sq.<fqn> (sharded as their
 * weights), and metadata: "hf_config" (config.json's text), "train"
 * (batch, seq, AdamW, seed, token file), "step" (the steps done: the next
 * step's index and AdamW's count) and "data_pos" (the loader's position).
 * "consolidate_exclude" and "consolidate_shapes" make `tpdp ckpt
 * consolidate` write a Hugging Face model file: no optimizer state, and the
 * head-sharded views ([C, 3, H, hd], [3, H, hd], [H, hd, C]) under their
 * Conv1D shapes ([C, 3C], [3C], [C, C]): the same bytes. */

/* Weights, then first and second moments, each in Hugging Face's order
 * (examples/common's AdamW entries). */
static int build_state(trainer *t, tpdp_state_dict *sd) {
  ex_adamw_entry *e = calloc((size_t)t->np, sizeof *e);
  if (e == NULL) return ex_fail(&t->err, "out of memory");
  int rc = 0;
  for (int i = 0; i < t->np && rc == 0; i++) {
    /* --zero: the shards, saved as the boxes they hold */
    const tpdp_tensor *p =
        t->fsdp ? tpdp_param_tensor(t->params[i]) : &t->rparams[i].param;
    if (t->fsdp) {
      e[i].boxed = 1;
      tpdp_status st = tpdp_param_global_box(t->params[i], NULL, NULL,
                                             e[i].offset, e[i].global);
      if (st != TPDP_SUCCESS) rc = tpdp_fail(t, "tpdp_param_global_box", st);
    }
    e[i].fqn = t->fqn[i];
    e[i].spec = t->state_specs
                    ? t->state_specs[i]
                    : (const tpdp_spec *)tpdp_param_spec(t->params[i]);
    e[i].param = *p;
    if (tpdp_tensor_init(&e[i].exp_avg, t->m1[i], TPDP_F32, t->device, p->ndim,
                         p->shape) != TPDP_SUCCESS ||
        tpdp_tensor_init(&e[i].exp_avg_sq, t->m2[i], TPDP_F32, t->device,
                         p->ndim, p->shape) != TPDP_SUCCESS)
      rc = tpdp_fail(t, "tpdp_tensor_init", TPDP_ERR_INVALID_ARGUMENT);
  }
  if (rc == 0) rc = ex_state_dict_add_adamw(sd, e, t->np, &t->err);
  free(e);
  return rc;
}

/* "consolidate_shapes": the Hugging Face shape of every parameter whose
 * DTensor is a view of another shape. cJSON_free the result. */
static char *consolidate_shapes(const trainer *t) {
  cJSON *root = cJSON_CreateObject();
  for (int i = 0; i < t->np; i++) {
    const tpdp_spec *spec = (const tpdp_spec *)tpdp_param_spec(t->params[i]);
    const gpt2_param_info *in = &t->info[i];
    if (spec == NULL) continue;
    int same = tpdp_spec_ndim(spec) == in->ndim;
    for (int d = 0; d < in->ndim && same; d++)
      same = tpdp_spec_global_shape(spec)[d] == in->shape[d];
    if (same) continue;
    cJSON *a = cJSON_CreateArray();
    for (int d = 0; d < in->ndim; d++)
      cJSON_AddItemToArray(a, cJSON_CreateNumber((double)in->shape[d]));
    cJSON_AddItemToObject(root, t->fqn[i], a);
  }
  char *text = cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  return text;
}

/* The metadata of a checkpoint saved after `step` steps. */
static int set_meta(trainer *t, tpdp_state_dict *sd, int step,
                    const char *train, const char *shapes) {
  char cfg[1024], num[32];
  config_json(&t->c, cfg, sizeof cfg);
  TRY(tpdp_state_dict_set_meta(sd, "hf_config", cfg));
  TRY(tpdp_state_dict_set_meta(sd, "train", train));
  snprintf(num, sizeof num, "%d", step);
  TRY(tpdp_state_dict_set_meta(sd, "step", num));
  snprintf(num, sizeof num, "%lld", (long long)t->tok.pos);
  TRY(tpdp_state_dict_set_meta(sd, "data_pos", num));
  TRY(tpdp_state_dict_set_meta(sd, "consolidate_exclude",
                               "[\"" EX_OPTIM_PREFIX "\"]"));
  TRY(tpdp_state_dict_set_meta(sd, "consolidate_shapes", shapes));
  return 0;
}

/* Save after `step` steps into --save DIR (collective over t->comm). */
int save_checkpoint(trainer *t, int step) {
  const options *o = &t->o;
  double t0 = ex_now();
  /* The device's last optimizer step is complete before the save reads. */
  if (ex_call(t->b->finish, t) != 0) return -1;
  cJSON *tj = cJSON_CreateObject();
  cJSON_AddNumberToObject(tj, "batch", o->batch);
  cJSON_AddNumberToObject(tj, "seq", o->seq);
  cJSON_AddNumberToObject(tj, "lr", o->adamw.lr);
  cJSON_AddNumberToObject(tj, "beta1", o->adamw.beta1);
  cJSON_AddNumberToObject(tj, "beta2", o->adamw.beta2);
  cJSON_AddNumberToObject(tj, "eps", o->adamw.eps);
  cJSON_AddNumberToObject(tj, "weight_decay", o->weight_decay);
  cJSON_AddNumberToObject(tj, "seed", (double)o->seed);
  cJSON_AddStringToObject(tj, "data", o->data);
  char *train = cJSON_PrintUnformatted(tj);
  char *shapes = consolidate_shapes(t);
  cJSON_Delete(tj);
  tpdp_state_dict *sd = NULL;
  int bad = 0;
  if (train == NULL || shapes == NULL)
    bad = ex_fail(&t->err, "out of memory");
  else if (tpdp_state_dict_create(&sd) != TPDP_SUCCESS)
    bad = tpdp_fail(t, "tpdp_state_dict_create", TPDP_ERR_OUT_OF_MEMORY);
  else
    bad = build_state(t, sd) != 0 || set_meta(t, sd, step, train, shapes) != 0;
  cJSON_free(train);
  cJSON_free(shapes);
  int rc = agree(t, bad);
  if (rc == 0) {
    tpdp_status st = tpdp_checkpoint_save(sd, o->save_dir, t->comm, NULL);
    if (st != TPDP_SUCCESS) {
      rc = tpdp_fail(t, "tpdp_checkpoint_save", st);
      t->err_agreed = 1; /* the library agrees on its errors */
    }
  }
  tpdp_state_dict_destroy(sd);
  if (rc == 0 && t->print) {
    printf("checkpoint: step %d saved to %s in %.3f s\n", step, o->save_dir,
           ex_now() - t0);
    fflush(stdout);
  }
  t->tm.ckpt += ex_now() - t0;
  return rc;
}

static int json_number(const cJSON *obj, const char *key, const char *src,
                       double *out, ex_error *e) {
  const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!cJSON_IsNumber(j))
    return ex_fail(e, "%s lacks the number \"%s\"", src, key);
  *out = j->valuedouble;
  return 0;
}

/* --load, before building the model: the saved config, training flags
 * (unless given), step and data position. Collective over t->comm. */
int read_checkpoint(trainer *t) {
  options *o = &t->o;
  tpdp_checkpoint *ck = NULL;
  tpdp_status st = tpdp_checkpoint_open(o->load_dir, t->comm, &ck);
  if (st != TPDP_SUCCESS) return tpdp_fail(t, "tpdp_checkpoint_open", st);
  const char *cfg = tpdp_checkpoint_meta(ck, "hf_config");
  const char *train = tpdp_checkpoint_meta(ck, "train");
  const char *step = tpdp_checkpoint_meta(ck, "step");
  const char *pos = tpdp_checkpoint_meta(ck, "data_pos");
  char src[4200];
  cJSON *tj = NULL;
  long long k = -1, p = -1;
  int rc = -1;
  if (cfg == NULL || train == NULL || step == NULL || pos == NULL ||
      sscanf(step, "%lld", &k) != 1 || sscanf(pos, "%lld", &p) != 1 || k < 0 ||
      k > 1000000000 || p < 0) {
    ex_fail(&t->err,
            "--load %s: not a train_gpt2 checkpoint (its metadata lacks "
            "\"hf_config\", \"train\", \"step\" or \"data_pos\")",
            o->load_dir);
    goto done;
  }
  snprintf(src, sizeof src, "%s/index.json: metadata \"hf_config\"",
           o->load_dir);
  if (parse_config(cfg, src, &t->c, &t->err) != 0) goto done;
  snprintf(src, sizeof src, "%s/index.json: metadata \"train\"", o->load_dir);
  tj = cJSON_Parse(train);
  double v[8];
  static const char *const keys[] = {"batch", "seq", "lr",           "beta1",
                                     "beta2", "eps", "weight_decay", "seed"};
  for (int i = 0; i < 8; i++)
    if (json_number(tj, keys[i], src, &v[i], &t->err) != 0) goto done;
  const cJSON *data = cJSON_GetObjectItemCaseSensitive(tj, "data");
  if (!cJSON_IsString(data)) {
    ex_fail(&t->err, "%s lacks the string \"data\"", src);
    goto done;
  }
  if (!(o->given & G_BATCH)) o->batch = (int)v[0];
  if (!(o->given & G_SEQ)) o->seq = (int)v[1];
  if (!(o->given & G_LR)) o->adamw.lr = v[2];
  if (!(o->given & G_BETA1)) o->adamw.beta1 = v[3];
  if (!(o->given & G_BETA2)) o->adamw.beta2 = v[4];
  if (!(o->given & G_EPS)) o->adamw.eps = v[5];
  if (!(o->given & G_WD)) o->weight_decay = v[6];
  if (!(o->given & G_SEED)) o->seed = (unsigned long long)v[7];
  if (o->data == NULL) {
    snprintf(t->saved_data, sizeof t->saved_data, "%s", data->valuestring);
    o->data = t->saved_data;
  }
  if (o->batch < 1 || o->seq < 1)
    ex_fail(&t->err, "%s: batch %d and seq %d must be >= 1", src, o->batch,
            o->seq);
  else if (o->batch % o->dp != 0)
    ex_fail(&t->err,
            "the checkpoint's batch %d (%s) is not divisible by --dp %d: "
            "pass --batch",
            o->batch, o->load_dir, o->dp);
  else if (k >= o->steps)
    ex_fail(&t->err,
            "the checkpoint in %s is at step %lld: --steps counts all steps "
            "and must be above it",
            o->load_dir, k);
  else
    rc = 0;
  t->start = (int)k;
  t->resume_pos = p;
done:
  cJSON_Delete(tj);
  tpdp_checkpoint_close(ck);
  return rc;
}

/* --load, once the model and the AdamW state exist: fill them with this
 * mesh's shards of the checkpoint (collective over t->comm). */
int load_checkpoint(trainer *t) {
  double t0 = ex_now();
  tpdp_state_dict *sd = NULL;
  int bad = tpdp_state_dict_create(&sd) != TPDP_SUCCESS
                ? tpdp_fail(t, "tpdp_state_dict_create", TPDP_ERR_OUT_OF_MEMORY)
                : build_state(t, sd) != 0;
  int rc = agree(t, bad);
  if (rc == 0) {
    tpdp_status st = tpdp_checkpoint_load(sd, t->o.load_dir, t->comm, NULL);
    if (st != TPDP_SUCCESS) {
      rc = tpdp_fail(t, "tpdp_checkpoint_load", st);
      t->err_agreed = 1; /* the library agrees on its errors */
    }
  }
  tpdp_state_dict_destroy(sd);
  if (rc == 0 && t->print)
    printf("checkpoint: resumed at step %d from %s in %.3f s\n", t->start,
           t->o.load_dir, ex_now() - t0);
  return rc;
}
