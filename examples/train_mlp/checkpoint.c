// SPDX-License-Identifier: BSD-3-Clause
/* examples/train_mlp: --save / --save-every / --load (see train.h). */
#include <stdio.h>
#include <stdlib.h>

#include "examples/train_mlp/train.h"

/* A checkpoint holds what a resume needs: the model configuration
 * ("config", JSON), the weights under the tree's FQNs, the AdamW moments as
 * optim.exp_avg.<fqn> and optim.exp_avg_sq.<fqn> (sharded as their
 * weights: same specs), and the step the next run starts from ("step"; the
 * synthetic batch of step s is drawn from (seed, s), so the step is also
 * the data position, and AdamW's step count). */

#define CONFIG_FORMAT                                                       \
  "{\"layers\":%d,\"hidden\":%d,\"width\":%d,\"inputs\":%d,\"classes\":%d," \
  "\"batch\":%d,\"lr\":%.17g,\"seed\":%llu}"
#define CONFIG_SCAN                                                         \
  "{\"layers\":%d,\"hidden\":%d,\"width\":%d,\"inputs\":%d,\"classes\":%d," \
  "\"batch\":%d,\"lr\":%lf,\"seed\":%llu}"

/* --load: the saved configuration replaces the model flags (given ones
 * must agree) and *start receives the saved step. 0, or the exit code. */
static int config_of(trainer *t, tpdp_checkpoint *ck, int *start) {
  options *o = &t->o, c = t->o;
  const char *cfg = tpdp_checkpoint_meta(ck, "config");
  const char *step = tpdp_checkpoint_meta(ck, "step");
  if (cfg == NULL || step == NULL || sscanf(step, "%d", start) != 1 ||
      sscanf(cfg, CONFIG_SCAN, &c.layers, &c.hidden, &c.width, &c.inputs,
             &c.classes, &c.batch, &c.lr, &c.seed) != 8) {
    ex_fail(&t->err,
            "--load %s: not a train_mlp checkpoint (no \"config\" and "
            "\"step\" metadata)",
            o->load_dir);
    return 2;
  }
  const struct {
    unsigned bit;
    const char *flag;
    double given, saved;
  } flags[] = {{OPT_LAYERS, "--layers", o->layers, c.layers},
               {OPT_HIDDEN, "--hidden", o->hidden, c.hidden},
               {OPT_WIDTH, "--width", o->width, c.width},
               {OPT_INPUTS, "--inputs", o->inputs, c.inputs},
               {OPT_CLASSES, "--classes", o->classes, c.classes},
               {OPT_BATCH, "--batch", o->batch, c.batch},
               {OPT_LR, "--lr", o->lr, c.lr},
               {OPT_SEED, "--seed", (double)o->seed, (double)c.seed}};
  for (size_t k = 0; k < sizeof flags / sizeof *flags; k++)
    if ((o->given & flags[k].bit) && flags[k].given != flags[k].saved) {
      ex_fail(&t->err,
              "%s %g conflicts with the checkpoint in %s, trained with %g "
              "(leave the flag out)",
              flags[k].flag, flags[k].given, o->load_dir, flags[k].saved);
      return 2;
    }
  if (*start >= o->steps || c.batch % o->dp != 0) {
    ex_fail(&t->err,
            "the checkpoint in %s is at step %d with batch %d: --steps must "
            "be above its step (it counts all steps) and --dp must divide "
            "the batch",
            o->load_dir, *start, c.batch);
    return 2;
  }
  *o = c;
  return 0;
}

int read_checkpoint_config(trainer *t, int *start) {
  tpdp_checkpoint *ck = NULL;
  TRY(tpdp_checkpoint_open(t->o.load_dir, t->world, &ck));
  int rc = config_of(t, ck, start);
  tpdp_checkpoint_close(ck);
  t->err_agreed = rc != 0; /* every rank read the same metadata */
  return rc;
}

/* Weights and AdamW moments of every parameter, as the backend holds them. */
static int build_state(trainer *t, tpdp_state_dict *sd) {
  int np = t->tree.nparams;
  ex_adamw_entry *e = calloc((size_t)np, sizeof *e);
  if (e == NULL) return ex_fail(&t->err, "out of memory");
  for (int i = 0; i < np; i++) {
    e[i].fqn = t->tree.names[i];
    e[i].spec = (const tpdp_spec *)tpdp_param_spec(t->tree.params[i]);
    e[i].param = t->rparams[i].param;
    if (t->fsdp) { /* --zero: the shards, saved as the boxes they hold */
      e[i].param = *tpdp_param_tensor(t->tree.params[i]);
      e[i].boxed = 1;
      tpdp_status st = tpdp_param_global_box(t->tree.params[i], NULL, NULL,
                                             e[i].offset, e[i].global);
      if (st != TPDP_SUCCESS) {
        free(e);
        return ex_tpdp_fail(&t->err, "tpdp_param_global_box", st);
      }
    }
    if (t->b->moment_views(t, i, &e[i].exp_avg, &e[i].exp_avg_sq) != 0) {
      free(e);
      return -1;
    }
  }
  int rc = ex_state_dict_add_adamw(sd, e, np, &t->err);
  free(e);
  return rc;
}

/* The run's configuration and step as the checkpoint's metadata, then the
 * save. */
static int write_state(trainer *t, tpdp_state_dict *sd, int step) {
  const options *o = &t->o;
  char cfg[512], steps[32];
  snprintf(cfg, sizeof cfg, CONFIG_FORMAT, o->layers, o->hidden, o->width,
           o->inputs, o->classes, o->batch, o->lr, o->seed);
  snprintf(steps, sizeof steps, "%d", step);
  TRY(tpdp_state_dict_set_meta(sd, "config", cfg));
  TRY(tpdp_state_dict_set_meta(sd, "step", steps));
  TRY(tpdp_checkpoint_save(sd, o->save_dir, t->world, NULL));
  return 0;
}

/* Save after `step` steps (collective over the world). */
int save_checkpoint(trainer *t, int step) {
  double t0 = ex_now();
  /* The device's last optimizer step must be complete. */
  if (ex_call(t->b->finish, t) != 0) return -1;
  tpdp_state_dict *sd = NULL;
  TRY(tpdp_state_dict_create(&sd));
  int rc = build_state(t, sd);
  if (rc == 0) rc = write_state(t, sd, step);
  tpdp_state_dict_destroy(sd);
  if (rc == 0 && t->rank == 0 && !t->o.quiet)
    printf("checkpoint: step %d saved to %s in %.3f s\n", step, t->o.save_dir,
           ex_now() - t0);
  return rc;
}

/* --load: weights and moments into this run's (possibly other) layout. */
int load_checkpoint(trainer *t, int start) {
  double t0 = ex_now();
  tpdp_state_dict *sd = NULL;
  TRY(tpdp_state_dict_create(&sd));
  int rc = build_state(t, sd);
  tpdp_status st = TPDP_SUCCESS;
  if (rc == 0) st = tpdp_checkpoint_load(sd, t->o.load_dir, t->world, NULL);
  if (st != TPDP_SUCCESS)
    rc = ex_tpdp_fail(&t->err, "tpdp_checkpoint_load", st);
  tpdp_state_dict_destroy(sd);
  if (rc == 0 && t->rank == 0 && !t->o.quiet)
    printf("checkpoint: resumed at step %d from %s in %.3f s\n", start,
           t->o.load_dir, ex_now() - t0);
  return rc;
}
