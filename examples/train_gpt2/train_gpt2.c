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
 * --load write and resume sharded checkpoints (ckpt/, any mesh).
 */
#include <cblas.h>
#include <cjson/cJSON.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "examples/common/nn_cpu.h"
#include "examples/common/safetensors.h"
#include "examples/common/tokens.h"
#include "examples/common/tree.h"
#include "examples/common/util.h"
#include "examples/train_gpt2/gpt2.h"
#include "tpdp/tpdp.h"

/* ------------------------------------------------------------ options */

/* Flags given on the command line (--load takes the others from the
 * checkpoint). */
enum {
  G_BATCH = 1,
  G_SEQ = 2,
  G_LR = 4,
  G_BETA1 = 8,
  G_BETA2 = 16,
  G_EPS = 32,
  G_WD = 64,
  G_SEED = 128
};

typedef struct {
  const char *model_dir, *data, *device;
  int dp, tp, batch, seq, steps, sp, check, quiet;
  gpt2_config shape; /* the random-init shape (without --model) */
  int shape_flags;   /* a shape flag was given */
  nn_adamw_opts adamw;
  double weight_decay, bucket_mib;
  unsigned long long seed;
  const char *save_dir, *load_dir;
  int save_every;
  unsigned given; /* G_* */
} options;

static void usage(FILE *out) {
  fprintf(
      out,
      "usage: mpirun -np D*T train_gpt2 --data FILE [options]\n\n"
      "Trains GPT-2 (Hugging Face / llm.c) with tensor parallelism over the\n"
      "mesh's tp dim and data parallelism over its dp dim.\n\n"
      "  --data FILE      llm.c token file (scripts/make-tokens writes one)\n"
      "  --model DIR      DIR/config.json + DIR/model.safetensors (Hugging\n"
      "                   Face GPT-2; f32, f16 or bf16); default: random init\n"
      "  --dp D           data-parallel size (default 1)\n"
      "  --tp T           tensor-parallel size (default 1)\n"
      "  --batch B        global batch (rows), split over dp (default 4)\n"
      "  --seq S          sequence length (default 64)\n"
      "  --steps N        training steps (default 10)\n"
      "  --lr X --beta1 X --beta2 X --eps X --weight-decay X\n"
      "                   AdamW as torch.optim.AdamW (defaults 3e-4, 0.9,\n"
      "                   0.95, 1e-8, 0.0); decay on tensors of rank >= 2\n"
      "  --sequence-parallel  shard activations on the sequence dim around\n"
      "                   LayerNorms and residual adds\n"
      "  --device cpu|cuda  (default cpu; cuda is not supported yet)\n"
      "  --bucket-mib M   DP bucket cap in MiB (default 25)\n"
      "  --check          also train in one process on rank 0 and compare;\n"
      "                   exit 1 if loss or parameters differ by > 1e-4\n"
      "  --quiet          print only the summary lines\n"
      "  --save DIR       save a sharded checkpoint into DIR when the run "
      "ends\n"
      "                   (safetensors files + index.json: Hugging Face\n"
      "                   names, model config, AdamW state, step, data\n"
      "                   position); `tpdp ckpt consolidate DIR OUT` makes\n"
      "                   it a Hugging Face model file\n"
      "  --save-every N   also save into DIR after every N steps\n"
      "  --load DIR       resume from the checkpoint in DIR on any mesh (no\n"
      "                   --model or shape flags); --batch, --seq, --data,\n"
      "                   AdamW flags: the saved ones unless given. --steps\n"
      "                   counts all steps: a run saved after step k-1 goes\n"
      "                   on with steps k .. N-1\n"
      "random init (without --model), GPT-2's: N(0, 0.02), residual\n"
      "projections N(0, 0.02/sqrt(2L)), from --seed N (default 1):\n"
      "  --layers L --embd C --heads H --vocab V --positions P --inner F\n"
      "                   (defaults 4, 128, 4, 256, 256, 4C)\n");
}

static int parse_options(int argc, char **argv, options *o) {
  memset(o, 0, sizeof *o);
  o->device = "cpu";
  o->dp = o->tp = 1;
  o->batch = 4;
  o->seq = 64;
  o->steps = 10;
  o->shape = (gpt2_config){4, 128, 4, 256, 256, 0};
  o->adamw = (nn_adamw_opts){3e-4, 0.9, 0.95, 1e-8};
  o->bucket_mib = 25;
  o->seed = 1;
  enum {
    O_BETA1 = 256,
    O_BETA2,
    O_EPS,
    O_WD,
    O_SP,
    O_INNER,
    O_SAVE,
    O_SAVE_EVERY,
    O_LOAD
  };
  static const struct option longopts[] = {
      {"data", required_argument, 0, 'D'},
      {"model", required_argument, 0, 'M'},
      {"dp", required_argument, 0, 'd'},
      {"tp", required_argument, 0, 't'},
      {"batch", required_argument, 0, 'B'},
      {"seq", required_argument, 0, 'T'},
      {"steps", required_argument, 0, 'S'},
      {"lr", required_argument, 0, 'r'},
      {"beta1", required_argument, 0, O_BETA1},
      {"beta2", required_argument, 0, O_BETA2},
      {"eps", required_argument, 0, O_EPS},
      {"weight-decay", required_argument, 0, O_WD},
      {"sequence-parallel", no_argument, 0, O_SP},
      {"device", required_argument, 0, 'v'},
      {"bucket-mib", required_argument, 0, 'm'},
      {"check", no_argument, 0, 'c'},
      {"quiet", no_argument, 0, 'q'},
      {"seed", required_argument, 0, 's'},
      {"layers", required_argument, 0, 'L'},
      {"embd", required_argument, 0, 'C'},
      {"heads", required_argument, 0, 'H'},
      {"vocab", required_argument, 0, 'V'},
      {"positions", required_argument, 0, 'P'},
      {"inner", required_argument, 0, O_INNER},
      {"save", required_argument, 0, O_SAVE},
      {"save-every", required_argument, 0, O_SAVE_EVERY},
      {"load", required_argument, 0, O_LOAD},
      {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    switch (c) {
      case 'D':
        o->data = optarg;
        break;
      case 'M':
        o->model_dir = optarg;
        break;
      case 'd':
        o->dp = atoi(optarg);
        break;
      case 't':
        o->tp = atoi(optarg);
        break;
      case 'B':
        o->batch = atoi(optarg);
        o->given |= G_BATCH;
        break;
      case 'T':
        o->seq = atoi(optarg);
        o->given |= G_SEQ;
        break;
      case 'S':
        o->steps = atoi(optarg);
        break;
      case 'r':
        o->adamw.lr = atof(optarg);
        o->given |= G_LR;
        break;
      case O_BETA1:
        o->adamw.beta1 = atof(optarg);
        o->given |= G_BETA1;
        break;
      case O_BETA2:
        o->adamw.beta2 = atof(optarg);
        o->given |= G_BETA2;
        break;
      case O_EPS:
        o->adamw.eps = atof(optarg);
        o->given |= G_EPS;
        break;
      case O_WD:
        o->weight_decay = atof(optarg);
        o->given |= G_WD;
        break;
      case O_SAVE:
        o->save_dir = optarg;
        break;
      case O_SAVE_EVERY:
        o->save_every = atoi(optarg);
        break;
      case O_LOAD:
        o->load_dir = optarg;
        break;
      case O_SP:
        o->sp = 1;
        break;
      case 'v':
        o->device = optarg;
        break;
      case 'm':
        o->bucket_mib = atof(optarg);
        break;
      case 'c':
        o->check = 1;
        break;
      case 'q':
        o->quiet = 1;
        break;
      case 's':
        o->seed = strtoull(optarg, NULL, 10);
        o->given |= G_SEED;
        break;
      case 'L':
        o->shape.n_layer = atoi(optarg);
        o->shape_flags = 1;
        break;
      case 'C':
        o->shape.n_embd = atoi(optarg);
        o->shape_flags = 1;
        break;
      case 'H':
        o->shape.n_head = atoi(optarg);
        o->shape_flags = 1;
        break;
      case 'V':
        o->shape.vocab = atoi(optarg);
        o->shape_flags = 1;
        break;
      case 'P':
        o->shape.n_positions = atoi(optarg);
        o->shape_flags = 1;
        break;
      case O_INNER:
        o->shape.n_inner = atoi(optarg);
        o->shape_flags = 1;
        break;
      case 'h':
        usage(stdout);
        return 1;
      default:
        usage(stderr);
        return 2;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "train_gpt2: unexpected argument '%s'\n", argv[optind]);
    return 2;
  }
  return 0;
}

/* Input errors that do not need a file: the same on every rank. */
static int check_options(const options *o, ex_error *e) {
  if (strcmp(o->device, "cpu") != 0) {
    if (strcmp(o->device, "cuda") == 0)
      return ex_fail(e,
                     "--device cuda is not supported yet: train_gpt2 has no "
                     "CUDA path (use --device cpu)");
    return ex_fail(e, "--device must be cpu or cuda, not '%s'", o->device);
  }
  if (o->data == NULL && o->load_dir == NULL)
    return ex_fail(e,
                   "--data FILE is required (scripts/make-tokens FILE OUT "
                   "writes a token file from any text)");
  if (o->dp < 1 || o->tp < 1) return ex_fail(e, "--dp and --tp must be >= 1");
  if (o->batch < 1 || o->seq < 1 || o->steps < 1)
    return ex_fail(e, "--batch, --seq and --steps must be >= 1");
  /* With --load and no --batch the batch is the checkpoint's: setup checks
   * it. */
  if (o->batch % o->dp != 0 && (o->load_dir == NULL || (o->given & G_BATCH)))
    return ex_fail(e, "--batch %d is not divisible by --dp %d", o->batch,
                   o->dp);
  if (o->save_every < 0 || (o->save_every > 0 && o->save_dir == NULL))
    return ex_fail(e, "--save-every N needs N >= 1 and --save DIR");
  if (o->load_dir != NULL && (o->model_dir != NULL || o->shape_flags))
    return ex_fail(e,
                   "--load %s resumes the model saved there (its config is "
                   "in the checkpoint): leave out --model and "
                   "--layers/--embd/--heads/--vocab/--positions/--inner",
                   o->load_dir);
  if (o->bucket_mib <= 0) return ex_fail(e, "--bucket-mib must be > 0");
  if (!(o->adamw.lr >= 0) || !(o->adamw.beta1 >= 0 && o->adamw.beta1 < 1) ||
      !(o->adamw.beta2 >= 0 && o->adamw.beta2 < 1) || !(o->adamw.eps >= 0) ||
      !(o->weight_decay >= 0))
    return ex_fail(e,
                   "AdamW needs --lr >= 0, 0 <= --beta1, --beta2 < 1, "
                   "--eps >= 0, --weight-decay >= 0");
  if (o->model_dir != NULL && o->shape_flags)
    return ex_fail(e,
                   "--layers/--embd/--heads/--vocab/--positions/--inner "
                   "describe a random init; with --model the shape comes "
                   "from %s/config.json",
                   o->model_dir);
  return 0;
}

/* The shape: positive sizes, heads dividing the width. `src` names where
 * it came from for the messages. */
static int check_shape(gpt2_config *c, const char *src, ex_error *e) {
  if (c->n_inner == 0) c->n_inner = 4 * c->n_embd;
  if (c->n_layer < 1 || c->n_embd < 1 || c->n_head < 1 || c->vocab < 1 ||
      c->n_positions < 1 || c->n_inner < 1)
    return ex_fail(e,
                   "%s: n_layer %d, n_embd %d, n_head %d, vocab_size %d, "
                   "n_positions %d, n_inner %d: each must be >= 1",
                   src, c->n_layer, c->n_embd, c->n_head, c->vocab,
                   c->n_positions, c->n_inner);
  if (c->n_embd % c->n_head != 0)
    return ex_fail(e, "%s: n_embd %d is not divisible by n_head %d", src,
                   c->n_embd, c->n_head);
  if (c->vocab > 65536)
    return ex_fail(e,
                   "%s: vocab_size %d: token files hold uint16 ids (at most "
                   "65536)",
                   src, c->vocab);
  return 0;
}

/* ------------------------------------------------------------ config.json */

static int json_int(const cJSON *root, const char *key, const char *path,
                    int required, int *out, ex_error *e) {
  const cJSON *j = cJSON_GetObjectItemCaseSensitive(root, key);
  if (j == NULL || cJSON_IsNull(j)) {
    if (required) return ex_fail(e, "%s: \"%s\" is missing", path, key);
    return 0;
  }
  if (!cJSON_IsNumber(j) || fabs(j->valuedouble) > 1e9 ||
      j->valuedouble != (double)(int)j->valuedouble)
    return ex_fail(e, "%s: \"%s\" is not an integer", path, key);
  *out = (int)j->valuedouble;
  return 0;
}

static int parse_config(const char *text, const char *path, gpt2_config *c,
                        ex_error *e);

/* Hugging Face's GPT2Config: the sizes, and refusal of the variants this
 * trainer does not implement. */
static int read_config(const char *dir, gpt2_config *c, ex_error *e) {
  char path[4096];
  snprintf(path, sizeof path, "%s/config.json", dir);
  FILE *fp = fopen(path, "rb");
  if (fp == NULL) return ex_fail(e, "%s: cannot open", path);
  char *text = NULL;
  size_t len = 0, cap = 0;
  for (;;) {
    if (len + 4096 > cap) {
      char *grown = realloc(text, cap = 2 * cap + 8192);
      if (grown == NULL) break;
      text = grown;
    }
    size_t r = fread(text + len, 1, cap - len - 1, fp);
    len += r;
    if (r == 0) break;
  }
  fclose(fp);
  if (text == NULL) return ex_fail(e, "%s: cannot read", path);
  text[len] = '\0';
  int rc = parse_config(text, path, c, e);
  free(text);
  return rc;
}

/* config.json's text (path names it in messages) into *c. */
static int parse_config(const char *text, const char *path, gpt2_config *c,
                        ex_error *e) {
  int rc = -1;
  cJSON *root = cJSON_Parse(text);
  if (!cJSON_IsObject(root)) {
    ex_fail(e, "%s: not a JSON object", path);
    goto done;
  }
  memset(c, 0, sizeof *c);
  if (json_int(root, "n_layer", path, 1, &c->n_layer, e) ||
      json_int(root, "n_embd", path, 1, &c->n_embd, e) ||
      json_int(root, "n_head", path, 1, &c->n_head, e) ||
      json_int(root, "vocab_size", path, 1, &c->vocab, e) ||
      json_int(root, "n_positions", path, 1, &c->n_positions, e) ||
      json_int(root, "n_inner", path, 0, &c->n_inner, e))
    goto done;
  const cJSON *act =
      cJSON_GetObjectItemCaseSensitive(root, "activation_function");
  if (act != NULL && (!cJSON_IsString(act) ||
                      (strcmp(act->valuestring, "gelu_new") != 0 &&
                       strcmp(act->valuestring, "gelu_pytorch_tanh") != 0))) {
    ex_fail(e,
            "%s: activation_function must be \"gelu_new\" (GELU, tanh "
            "approximation)",
            path);
    goto done;
  }
  const cJSON *eps =
      cJSON_GetObjectItemCaseSensitive(root, "layer_norm_epsilon");
  if (eps != NULL &&
      (!cJSON_IsNumber(eps) || fabs(eps->valuedouble - 1e-5) > 1e-12)) {
    ex_fail(e, "%s: layer_norm_epsilon must be 1e-05", path);
    goto done;
  }
  static const char *const off_flags[] = {"scale_attn_by_inverse_layer_idx",
                                          "reorder_and_upcast_attn"};
  for (int i = 0; i < 2; i++) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, off_flags[i]);
    if (f != NULL && cJSON_IsTrue(f)) {
      ex_fail(e, "%s: %s is not supported", path, off_flags[i]);
      goto done;
    }
  }
  const cJSON *sc =
      cJSON_GetObjectItemCaseSensitive(root, "scale_attn_weights");
  if (sc != NULL && cJSON_IsFalse(sc)) {
    ex_fail(e, "%s: scale_attn_weights false is not supported", path);
    goto done;
  }
  rc = check_shape(c, path, e);
done:
  cJSON_Delete(root);
  return rc;
}

/* Hugging Face's config.json of c (what --model reads). */
static void config_json(const gpt2_config *c, char *buf, size_t len) {
  char inner[32] = "null"; /* GPT-2's default, 4 * n_embd */
  if (c->n_inner != 4 * c->n_embd)
    snprintf(inner, sizeof inner, "%d", c->n_inner);
  snprintf(buf, len,
           "{\"architectures\":[\"GPT2LMHeadModel\"],\"model_type\":\"gpt2\","
           "\"activation_function\":\"gelu_new\",\"layer_norm_epsilon\":1e-05,"
           "\"n_layer\":%d,\"n_embd\":%d,\"n_head\":%d,\"vocab_size\":%d,"
           "\"n_positions\":%d,\"n_ctx\":%d,\"n_inner\":%s,"
           "\"scale_attn_weights\":true,\"tie_word_embeddings\":true}",
           c->n_layer, c->n_embd, c->n_head, c->vocab, c->n_positions,
           c->n_positions, inner);
}

/* ------------------------------------------------------------ trainer */

typedef struct {
  double hooks, data, optim;
  gpt2_timers model;
  double mark; /* inside reducer mark_ready (the grad_ready callback) */
  double ckpt; /* saving checkpoints */
} times;

typedef struct {
  options o;
  tpdp_comm *comm; /* the mesh's parent: world, or a 1-rank communicator */
  int rank;
  int print;      /* the tree report and step lines (rank 0, not --quiet) */
  int summary;    /* the throughput / time / memory lines (rank 0) */
  int err_agreed; /* err is the same on every rank (rank 0 prints it) */
  gpt2_config c;
  char model_path[4096];
  st_file st;
  const char *prefix; /* "transformer." or "" in the file */
  tok_file tok;
  tpdp_mesh *mesh;
  tpdp_comm *dp_comm, *tp_comm;
  int dp_rank, tp_rank;
  tpdp_module *root, *wte, *sp_module;
  int np;
  gpt2_param_info *info;
  tpdp_param **params;
  float **storage; /* this program's storage of replicated parameters */
  float **grad_storage;
  tpdp_reducer_param *rparams;
  tpdp_reducer *reducer;
  char (*fqn)[96];
  float **P, **G, **m1, **m2;
  gpt2_dims dims;
  gpt2_model model;
  int model_ready;
  int fill_failed;       /* fill_shard failed; err says why */
  int start;             /* the first step (the checkpoint's with --load) */
  int64_t resume_pos;    /* --load: the data position to go on from */
  char saved_data[4096]; /* --load without --data: the saved token file */
  times tm;
  ex_error err;
} trainer;

/* The result of a run, for --check. */
typedef struct {
  double *losses;  /* [steps] */
  int want_params; /* gather the full parameters on rank 0 */
  float **params;  /* [np] then (rank 0; the caller frees them) */
  int np;
  int start; /* the first step trained */
} run_out;

/* All ranks of comm fail together: the message of the lowest failing rank
 * reaches every rank (so rank 0 can print what another rank found). */
static int agree_all(tpdp_comm *comm, int failed, ex_error *e) {
  int32_t who = failed ? tpdp_comm_rank(comm) : tpdp_comm_size(comm);
  tpdp_tensor t = tpdp_tensor_1d(&who, TPDP_I32, 1);
  if (tpdp_allreduce(comm, &t, &t, TPDP_OP_MIN) != TPDP_SUCCESS)
    return ex_fail(e, "agreeing on errors: %s", tpdp_last_error());
  if (who == tpdp_comm_size(comm)) return 0;
  tpdp_tensor m = tpdp_tensor_1d(e->msg, TPDP_U8, sizeof e->msg);
  if (tpdp_broadcast(comm, &m, &m, who) != TPDP_SUCCESS)
    ex_fail(e, "rank %d failed (broadcasting its message: %s)", who,
            tpdp_last_error());
  e->msg[sizeof e->msg - 1] = '\0';
  return -1;
}

static int agree(trainer *t, int failed) {
  if (agree_all(t->comm, failed, &t->err) == 0) return 0;
  t->err_agreed = 1;
  return -1;
}

/* A tpdp call that failed: its message into t->err. */
static int tpdp_fail(trainer *t, const char *what, tpdp_status st) {
  return ex_fail(&t->err, "%s failed: %s: %s", what, tpdp_status_string(st),
                 tpdp_last_error());
}
#define TRY(call)                                             \
  do {                                                        \
    tpdp_status st_ = (call);                                 \
    if (st_ != TPDP_SUCCESS) return tpdp_fail(t, #call, st_); \
  } while (0)

/* The tensors of the file against the model: every parameter present with
 * its shape and a readable dtype; nothing else but the attention mask
 * buffers and a tied lm_head.weight. Checked whole by every rank, so the
 * error is the same everywhere. */
static int check_file(trainer *t) {
  const st_file *f = &t->st;
  t->prefix = st_find(f, "transformer.wte.weight") ? "transformer." : "";
  char name[160], want[96], have[96], cfg[256];
  const gpt2_config *c = &t->c;
  snprintf(cfg, sizeof cfg,
           "%s/config.json: n_layer %d, n_embd %d, n_head %d, vocab_size %d, "
           "n_positions %d, n_inner %d",
           t->o.model_dir, c->n_layer, c->n_embd, c->n_head, c->vocab,
           c->n_positions, c->n_inner);
  for (int i = 0; i < t->np; i++) {
    const gpt2_param_info *in = &t->info[i];
    snprintf(name, sizeof name, "%s%s", t->prefix, in->name);
    const st_tensor *s = st_find(f, name);
    if (s == NULL)
      return ex_fail(&t->err, "%s: tensor '%s' is missing (%s)", f->path, name,
                     cfg);
    ex_shape_str(in->ndim, in->shape, want, sizeof want);
    ex_shape_str(s->ndim, s->shape, have, sizeof have);
    if (strcmp(want, have) != 0)
      return ex_fail(&t->err, "%s: tensor '%s' has shape %s; %s needs %s",
                     f->path, name, have, cfg, want);
    if (!st_dtype_readable(s->dtype))
      return ex_fail(&t->err,
                     "%s: tensor '%s' is %s; only F32, F16 and BF16 are read",
                     f->path, name, s->dtype);
  }
  for (int k = 0; k < f->n; k++) {
    const char *n = f->t[k].name;
    size_t pl = strlen(t->prefix);
    int known = 0;
    if (strcmp(n, "lm_head.weight") == 0) {
      snprintf(name, sizeof name, "%swte.weight", t->prefix);
      const st_tensor *w = st_find(f, name);
      ex_shape_str(w->ndim, w->shape, want, sizeof want);
      ex_shape_str(f->t[k].ndim, f->t[k].shape, have, sizeof have);
      if (strcmp(want, have) != 0)
        return ex_fail(&t->err,
                       "%s: tensor 'lm_head.weight' has shape %s; tied to "
                       "'%s' it needs %s",
                       f->path, have, name, want);
      continue;
    }
    if (strncmp(n, t->prefix, pl) == 0) {
      const char *rest = n + pl;
      for (int i = 0; i < t->np && !known; i++)
        known = strcmp(rest, t->info[i].name) == 0;
      int l, used = 0;
      if (!known && sscanf(rest, "h.%d.attn.%n", &l, &used) == 1 && used > 0 &&
          l >= 0 && l < c->n_layer &&
          (strcmp(rest + used, "bias") == 0 ||
           strcmp(rest + used, "masked_bias") == 0))
        known = 1; /* the causal-mask buffers: the model builds its own */
    }
    if (!known)
      return ex_fail(&t->err,
                     "%s: tensor '%s' is not part of the GPT-2 that %s "
                     "describes",
                     f->path, n, cfg);
  }
  return 0;
}

/* Parameter index of a Hugging Face FQN ("transformer.h.0.ln_1.bias"). */
static int param_index(const trainer *t, const char *fqn) {
  const char *name = strncmp(fqn, "transformer.", 12) == 0 ? fqn + 12 : fqn;
  for (int i = 0; i < t->np; i++)
    if (strcmp(t->info[i].name, name) == 0) return i;
  return -1;
}

/* Writes the box [offset, offset + local) of parameter i (seen in `view`):
 * from the file, or GPT-2's initialisation. */
static int load_box(trainer *t, int i, int ndim, const int64_t *view,
                    const int64_t *offset, const int64_t *local, float *out) {
  if (t->o.load_dir != NULL) return 0; /* the checkpoint fills it */
  if (t->o.model_dir == NULL) {
    gpt2_init_box(&t->c, i, t->o.seed, ndim, view, offset, local, out);
    return 0;
  }
  char name[160];
  snprintf(name, sizeof name, "%s%s", t->prefix, t->info[i].name);
  if (st_read_box_f32(&t->st, st_find(&t->st, name), ndim, view, offset, local,
                      out, &t->err) != 0)
    return -1;
  if (i != GPT2_WTE || st_find(&t->st, "lm_head.weight") == NULL) return 0;
  /* A tied head's copy must hold the same values: compare this rank's rows
   * (never the whole tensor). */
  int64_t n = 1;
  for (int d = 0; d < ndim; d++) n *= local[d];
  float *head = malloc(sizeof(float) * (size_t)n + 1);
  if (head == NULL) return ex_fail(&t->err, "out of memory");
  int rc = st_read_box_f32(&t->st, st_find(&t->st, "lm_head.weight"), ndim,
                           view, offset, local, head, &t->err);
  for (int64_t k = 0; k < n && rc == 0; k++)
    if (head[k] != out[k])
      rc = ex_fail(&t->err,
                   "%s: tensor 'lm_head.weight' differs from '%s' (row %lld): "
                   "only a head tied to the token embedding is supported",
                   t->st.path, name,
                   (long long)(offset[0] + k / (ndim > 1 ? local[1] : 1)));
  free(head);
  return rc;
}

/* tp/'s fill callback: this rank's shard of a sharded parameter. */
static tpdp_status fill_shard(void *ctx, const char *fqn, const tpdp_spec *spec,
                              const int64_t *offset, tpdp_tensor *local) {
  trainer *t = ctx;
  int i = param_index(t, fqn);
  if (i < 0) {
    ex_fail(&t->err, "internal: no parameter named '%s'", fqn);
    t->fill_failed = 1;
    return TPDP_ERR_NOT_FOUND;
  }
  if (load_box(t, i, tpdp_spec_ndim(spec), tpdp_spec_global_shape(spec), offset,
               local->shape, local->data) != 0) {
    t->fill_failed = 1;
    return TPDP_ERR_IO;
  }
  return TPDP_SUCCESS;
}

/* The class of a module of GPT2LMHeadModel, by its path. */
static const char *class_of(const char *path) {
  static const struct {
    const char *suffix, *cls;
  } k[] = {{"transformer", "GPT2Model"}, {"wte", "Embedding"},
           {"wpe", "Embedding"},         {"h", "ModuleList"},
           {"ln_1", "LayerNorm"},        {"ln_2", "LayerNorm"},
           {"ln_f", "LayerNorm"},        {"attn", "GPT2Attention"},
           {"mlp", "GPT2MLP"},           {"lm_head", "Linear"}};
  const char *last = strrchr(path, '.');
  last = last ? last + 1 : path;
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
    if (strcmp(last, k[i].suffix) == 0) return k[i].cls;
  if (last[0] >= '0' && last[0] <= '9') return "GPT2Block";
  return "Conv1D"; /* c_attn, c_proj, c_fc */
}

/* The module tree with Hugging Face's GPT2LMHeadModel names; replicated
 * parameters filled here, sharded ones as metadata for tp/ to fill. */
static int build_tree(trainer *t) {
  TRY(tpdp_module_create("GPT2LMHeadModel", &t->root));
  tpdp_device cpu = {TPDP_DEVICE_CPU, 0};
  for (int i = 0; i < t->np; i++) {
    const gpt2_param_info *in = &t->info[i];
    snprintf(t->fqn[i], sizeof t->fqn[i], "transformer.%s", in->name);
    char path[96];
    snprintf(path, sizeof path, "%s", t->fqn[i]);
    char *dot = strrchr(path, '.');
    *dot = '\0';
    tpdp_module *m = NULL;
    TRY(ex_module_at(t->root, path, class_of, &m));
    int64_t n = in->ndim == 2 ? in->shape[0] * in->shape[1] : in->shape[0];
    float *data = NULL;
    if (in->tp == GPT2_TP_REPLICATE) {
      t->storage[i] = calloc((size_t)n + 1, sizeof(float));
      t->grad_storage[i] = calloc((size_t)n + 1, sizeof(float));
      if (!t->storage[i] || !t->grad_storage[i])
        return ex_fail(&t->err, "out of memory for '%s'", t->fqn[i]);
      int64_t zero[2] = {0, 0};
      if (load_box(t, i, in->ndim, in->shape, zero, in->shape, t->storage[i]) !=
          0)
        return -1;
      data = t->storage[i];
    }
    tpdp_tensor tensor;
    TRY(tpdp_tensor_init(&tensor, data, TPDP_F32, cpu, in->ndim, in->shape));
    tpdp_param *p = NULL;
    TRY(tpdp_param_create(&tensor, &p));
    if (data != NULL) {
      tpdp_tensor grad = tensor;
      grad.data = t->grad_storage[i];
      tpdp_param_set_grad(p, &grad);
    }
    tpdp_status st = tpdp_module_add_param(m, dot + 1, p);
    tpdp_param_release(p); /* the module holds its reference */
    TRY(st);
    t->params[i] = p;
  }
  /* The LM head is tied: the same parameter object as wte's. */
  tpdp_module *head = NULL;
  TRY(ex_module_at(t->root, "lm_head", class_of, &head));
  TRY(tpdp_module_add_param(head, "weight", t->params[GPT2_WTE]));
  TRY(tpdp_module_get_submodule(t->root, "transformer.wte", &t->wte));
  return 0;
}

/* A tp/ call that runs fill_shard: when the callback failed, its own
 * message (naming the file and tensor) is the one to report. */
#define TRY_FILL(call)                                       \
  do {                                                       \
    t->fill_failed = 0;                                      \
    tpdp_status st_ = (call);                                \
    if (st_ != TPDP_SUCCESS)                                 \
      return t->fill_failed ? -1 : tpdp_fail(t, #call, st_); \
  } while (0)

/* TP: tp/'s layouts for the sharded modules (each rank filling only its
 * slices), and sequence parallelism's LayerNorms. */
static int parallelize(trainer *t) {
  char path[96];
  TRY_FILL(tpdp_tp_parallelize_vocab(t->wte, t->mesh, "tp", fill_shard, t));
  for (int l = 0; l < t->c.n_layer; l++) {
    tpdp_module *qkv, *out, *fc, *proj;
    snprintf(path, sizeof path, "transformer.h.%d.attn.c_attn", l);
    TRY(tpdp_module_get_submodule(t->root, path, &qkv));
    snprintf(path, sizeof path, "transformer.h.%d.attn.c_proj", l);
    TRY(tpdp_module_get_submodule(t->root, path, &out));
    snprintf(path, sizeof path, "transformer.h.%d.mlp.c_fc", l);
    TRY(tpdp_module_get_submodule(t->root, path, &fc));
    snprintf(path, sizeof path, "transformer.h.%d.mlp.c_proj", l);
    TRY(tpdp_module_get_submodule(t->root, path, &proj));
    TRY_FILL(tpdp_tp_parallelize_attention(qkv, out, t->c.n_head,
                                           TPDP_LINEAR_IN_OUT, t->mesh, "tp",
                                           fill_shard, t));
    TRY_FILL(tpdp_tp_parallelize_linear(fc, TPDP_STYLE_COLWISE,
                                        TPDP_LINEAR_IN_OUT, t->mesh, "tp",
                                        fill_shard, t));
    TRY_FILL(tpdp_tp_parallelize_linear(proj, TPDP_STYLE_ROWWISE,
                                        TPDP_LINEAR_IN_OUT, t->mesh, "tp",
                                        fill_shard, t));
  }
  if (t->o.sp) {
    tpdp_tp_plan_entry plan[3] = {
        {"transformer.h.*.ln_1", TPDP_STYLE_SEQUENCE_PARALLEL},
        {"transformer.h.*.ln_2", TPDP_STYLE_SEQUENCE_PARALLEL},
        {"transformer.ln_f", TPDP_STYLE_SEQUENCE_PARALLEL}};
    TRY(tpdp_parallelize(t->root, t->mesh, "tp", plan, 3));
    TRY(tpdp_module_get_submodule(t->root, "transformer.ln_f", &t->sp_module));
  }
  return 0;
}

/* ---- the model's TP callbacks (gpt2_ops), on tp/'s functions ---- */

static int op_allreduce(void *ctx, float *buf, int64_t n) {
  trainer *t = ctx;
  if (t->o.tp == 1 || n == 0) return 0;
  tpdp_tensor v = tpdp_tensor_1d(buf, TPDP_F32, n);
  tpdp_status st = tpdp_allreduce(t->tp_comm, &v, &v, TPDP_OP_SUM);
  return st == TPDP_SUCCESS ? 0 : tpdp_fail(t, "tpdp_allreduce (tp)", st);
}

static void act_views(trainer *t, float *shard, float *full, tpdp_tensor *s,
                      tpdp_tensor *f) {
  int64_t ss[3] = {t->dims.B, t->dims.tl, t->c.n_embd};
  int64_t fs[3] = {t->dims.B, t->dims.T, t->c.n_embd};
  tpdp_device cpu = {TPDP_DEVICE_CPU, 0};
  tpdp_tensor_init(s, shard, TPDP_F32, cpu, 3, ss);
  tpdp_tensor_init(f, full, TPDP_F32, cpu, 3, fs);
}

static int op_seq_gather(void *ctx, const float *shard, float *full) {
  trainer *t = ctx;
  tpdp_tensor s, f;
  act_views(t, (float *)shard, full, &s, &f);
  tpdp_status st = tpdp_tp_sequence_gather(t->sp_module, &s, 1, &f);
  return st == TPDP_SUCCESS ? 0 : tpdp_fail(t, "tpdp_tp_sequence_gather", st);
}

static int op_seq_reduce_scatter(void *ctx, const float *full, float *shard) {
  trainer *t = ctx;
  tpdp_tensor s, f;
  act_views(t, shard, (float *)full, &s, &f);
  tpdp_status st =
      tpdp_tp_rowwise_output_reduce_scatter(t->sp_module, &f, 1, &s);
  return st == TPDP_SUCCESS
             ? 0
             : tpdp_fail(t, "tpdp_tp_rowwise_output_reduce_scatter", st);
}

static int op_embed(void *ctx, const int32_t *ids, int64_t n, float *out) {
  trainer *t = ctx;
  tpdp_tensor o = tpdp_tensor_1d(out, TPDP_F32, n * t->c.n_embd);
  tpdp_status st = tpdp_tp_vocab_embedding_forward(t->wte, ids, n, &o);
  return st == TPDP_SUCCESS
             ? 0
             : tpdp_fail(t, "tpdp_tp_vocab_embedding_forward", st);
}

static int op_embed_backward(void *ctx, const int32_t *ids, int64_t n,
                             const float *dout, float *dwte) {
  trainer *t = ctx;
  tpdp_tensor g = tpdp_tensor_1d((float *)dout, TPDP_F32, n * t->c.n_embd);
  tpdp_tensor w =
      tpdp_tensor_1d(dwte, TPDP_F32, (int64_t)t->dims.vl * t->c.n_embd);
  tpdp_status st = tpdp_tp_vocab_embedding_backward(t->wte, ids, n, &g, &w);
  return st == TPDP_SUCCESS
             ? 0
             : tpdp_fail(t, "tpdp_tp_vocab_embedding_backward", st);
}

static int op_cross_entropy(void *ctx, float *logits, const int32_t *targets,
                            int64_t n, float scale, double *loss_sum) {
  trainer *t = ctx;
  tpdp_tensor z = tpdp_tensor_1d(logits, TPDP_F32, n * t->dims.vl);
  tpdp_status st =
      tpdp_tp_vocab_cross_entropy(t->wte, &z, targets, n, scale, loss_sum);
  return st == TPDP_SUCCESS ? 0
                            : tpdp_fail(t, "tpdp_tp_vocab_cross_entropy", st);
}

/* A gradient is final: the reducer may start its bucket. */
static int op_grad_ready(void *ctx, int i) {
  trainer *t = ctx;
  double t0 = ex_now();
  tpdp_status st = tpdp_reducer_mark_ready(t->reducer, i);
  t->tm.mark += ex_now() - t0;
  return st == TPDP_SUCCESS ? 0 : tpdp_fail(t, "tpdp_reducer_mark_ready", st);
}

/* ---- set up and tear down ---- */

static void trainer_free(trainer *t) {
  tpdp_reducer_destroy(t->reducer);
  if (t->model_ready) gpt2_model_free(&t->model);
  for (int i = 0; i < t->np; i++) {
    if (t->storage) free(t->storage[i]);
    if (t->grad_storage) free(t->grad_storage[i]);
    if (t->m1) free(t->m1[i]);
    if (t->m2) free(t->m2[i]);
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
  tpdp_module_destroy(t->root);
  tpdp_mesh_destroy(t->mesh);
  st_close(&t->st);
  tok_close(&t->tok);
}

/* With one DP rank there is nothing to reduce or average: the reducer
 * keeps DDP's buckets and readiness bookkeeping, and this hook leaves the
 * gradients as they are (an allreduce AVG on a 1-rank communicator would
 * still pass over every gradient to divide it by 1). */
static tpdp_status keep_gradients(const tpdp_reducer_hook_args *args) {
  (void)args;
  return TPDP_SUCCESS;
}

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

/* Weights, then first and second moments, each in Hugging Face's order. */
static int build_state(trainer *t, tpdp_state_dict *sd) {
  tpdp_device cpu = {TPDP_DEVICE_CPU, 0};
  char name[160];
  for (int kind = 0; kind < 3; kind++)
    for (int i = 0; i < t->np; i++) {
      const tpdp_spec *spec = (const tpdp_spec *)tpdp_param_spec(t->params[i]);
      const tpdp_tensor *p = &t->rparams[i].param;
      if (kind == 0) {
        TRY(tpdp_state_dict_add(sd, t->fqn[i], p, spec));
        continue;
      }
      tpdp_tensor m;
      TRY(tpdp_tensor_init(&m, kind == 1 ? t->m1[i] : t->m2[i], TPDP_F32, cpu,
                           p->ndim, p->shape));
      snprintf(name, sizeof name, "optim.%s.%s",
               kind == 1 ? "exp_avg" : "exp_avg_sq", t->fqn[i]);
      TRY(tpdp_state_dict_add(sd, name, &m, spec));
    }
  return 0;
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
  TRY(tpdp_state_dict_set_meta(sd, "consolidate_exclude", "[\"optim.\"]"));
  TRY(tpdp_state_dict_set_meta(sd, "consolidate_shapes", shapes));
  return 0;
}

/* Save after `step` steps into --save DIR (collective over t->comm). */
static int save_checkpoint(trainer *t, int step) {
  const options *o = &t->o;
  double t0 = ex_now();
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
static int read_checkpoint(trainer *t) {
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
static int load_checkpoint(trainer *t) {
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
    bad = read_config(o->model_dir, &t->c, &t->err) != 0 ||
          st_open(t->model_path, &t->st, &t->err) != 0;
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
  bad = build_tree(t) != 0 || parallelize(t) != 0;
  if (agree(t, bad) != 0) return -1;
  if (t->print) {
    tpdp_tree_report *report = NULL;
    if (tpdp_tree_report_create(t->root, NULL, 0, &report) == TPDP_SUCCESS)
      printf("model (mesh dp=%d, tp=%d%s):\n%s", o->dp, o->tp,
             o->sp ? ", sequence parallel" : "", tpdp_tree_report_text(report));
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
  d->sp = o->sp && o->tp > 1;
  d->t0 = 0;
  d->tl = o->seq;
  if (d->sp) {
    tpdp_chunk_range(o->seq, o->tp, t->tp_rank, &s, &n);
    d->t0 = (int)s;
    d->tl = (int)n;
  }
  for (int i = 0; i < t->np; i++) {
    t->rparams[i].param = *tpdp_param_tensor(t->params[i]);
    t->rparams[i].grad = *tpdp_param_grad(t->params[i]);
    t->rparams[i].fqn = t->fqn[i];
    t->P[i] = t->rparams[i].param.data;
    t->G[i] = t->rparams[i].grad.data;
    int64_t numel = tpdp_tensor_numel(&t->rparams[i].param);
    t->m1[i] = calloc((size_t)numel + 1, sizeof(float));
    t->m2[i] = calloc((size_t)numel + 1, sizeof(float));
    if (!t->m1[i] || !t->m2[i]) return ex_fail(&t->err, "out of memory");
  }
  if (gpt2_model_init(&t->model, d, t->P, t->G) != 0)
    return ex_fail(&t->err, "out of memory for %lld bytes of activations",
                   (long long)gpt2_activation_bytes(d));
  t->model_ready = 1;
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
  TRY(tpdp_reducer_create(t->dp_comm, t->rparams, t->np, &ropts, &t->reducer));
  return 0;
}

static void adamw_step(trainer *t, int step) {
  for (int i = 0; i < t->np; i++)
    nn_adamw(t->P[i], t->G[i], t->m1[i], t->m2[i],
             tpdp_tensor_numel(&t->rparams[i].param), &t->o.adamw,
             t->info[i].decay ? t->o.weight_decay : 0.0, step);
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

static void peak_memory_line(trainer *t) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  int size = tpdp_comm_size(t->comm);
  int64_t *kb = calloc((size_t)size, sizeof *kb);
  int64_t mine = ru.ru_maxrss;
  tpdp_tensor s = tpdp_tensor_1d(&mine, TPDP_I64, 1);
  tpdp_tensor r = tpdp_tensor_1d(kb, TPDP_I64, size);
  if (kb == NULL || tpdp_allgather(t->comm, &s, &r) != TPDP_SUCCESS) {
    free(kb);
    return;
  }
  if (t->summary) {
    printf("peak memory:");
    for (int i = 0; i < size; i++)
      printf("%s rank %d %.1f MiB", i ? "," : "", i, kb[i] / 1024.0);
    printf("\n");
  }
  free(kb);
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
  const gpt2_ops ops = {
      t,        op_allreduce,      op_seq_gather,    op_seq_reduce_scatter,
      op_embed, op_embed_backward, op_cross_entropy, op_grad_ready};
  const int64_t rows = (int64_t)t->dims.B * o->seq;
  const float scale = 1.0f / (float)rows;
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
      if (tpdp_reducer_get_stats(t->reducer, &rs0) != TPDP_SUCCESS) goto done;
    }
    /* Every rank reads the global batch and checks it; DP rank r takes rows
     * r*B/D .. (r+1)*B/D-1. */
    double h0 = ex_now();
    int bad = tok_next_batch(&t->tok, (int64_t)o->batch * o->seq, t->c.vocab,
                             tokens, &t->err) != 0;
    if (agree(t, bad) != 0) goto done;
    t->tm.data += ex_now() - h0;
    const int32_t *in = tokens + (int64_t)t->dp_rank * rows;
    double loss_sum = 0;
    h0 = ex_now();
    tpdp_status st = tpdp_module_forward_begin(t->root);
    if (st != TPDP_SUCCESS) {
      tpdp_fail(t, "tpdp_module_forward_begin", st);
      goto done;
    }
    t->tm.hooks += ex_now() - h0;
    if (gpt2_forward(&t->model, in, in + 1, scale, &ops, &loss_sum,
                     &t->tm.model) != 0)
      goto done;
    h0 = ex_now();
    st = tpdp_module_forward_end(t->root);
    if (st != TPDP_SUCCESS) {
      tpdp_fail(t, "tpdp_module_forward_end", st);
      goto done;
    }
    t->tm.hooks += ex_now() - h0;
    int was_rebuilt = tpdp_reducer_rebuilt(t->reducer);
    tpdp_reducer_stats pre;
    if (!was_rebuilt &&
        tpdp_reducer_get_stats(t->reducer, &pre) != TPDP_SUCCESS)
      goto done;
    h0 = ex_now();
    st = tpdp_reducer_prepare(t->reducer);
    if (st != TPDP_SUCCESS) {
      tpdp_fail(t, "tpdp_reducer_prepare", st);
      goto done;
    }
    /* DDP's one-time warm-up: the buckets rebuilt in gradient-ready order
     * (new buffers, first touched here) at the start of step 1. Timed
     * apart from the steady state: its wall time leaves the step time, and
     * its share of every reducer figure (total, comm, data) leaves the
     * overhead, so no part of it is subtracted twice. */
    if (!was_rebuilt && tpdp_reducer_rebuilt(t->reducer)) {
      rebuild_s = ex_now() - h0;
      tpdp_reducer_stats post;
      if (tpdp_reducer_get_stats(t->reducer, &post) != TPDP_SUCCESS) goto done;
      rebuild.total_seconds = post.total_seconds - pre.total_seconds;
      rebuild.comm_seconds = post.comm_seconds - pre.comm_seconds;
      rebuild.data_seconds = post.data_seconds - pre.data_seconds;
    }
    /* Gradients live in the reducer's buckets (they move once, when the
     * buckets are rebuilt after the first step). */
    for (int i = 0; i < t->np; i++) {
      tpdp_tensor gv;
      st = tpdp_reducer_grad_view(t->reducer, i, &gv);
      if (st == TPDP_SUCCESS) st = tpdp_param_set_grad(t->params[i], &gv);
      if (st != TPDP_SUCCESS) {
        tpdp_fail(t, "tpdp_reducer_grad_view", st);
        goto done;
      }
      t->G[i] = gv.data;
    }
    if (gpt2_backward(&t->model, &ops, &t->tm.model) != 0) goto done;
    st = tpdp_reducer_finalize(t->reducer);
    if (st != TPDP_SUCCESS) {
      tpdp_fail(t, "tpdp_reducer_finalize", st);
      goto done;
    }
    h0 = ex_now();
    adamw_step(t, step + 1);
    t->tm.optim += ex_now() - h0;
    /* The step's loss: mean over the global batch (sum over DP ranks). */
    tpdp_tensor lt = tpdp_tensor_1d(&loss_sum, TPDP_F64, 1);
    st = tpdp_allreduce(t->dp_comm, &lt, &lt, TPDP_OP_SUM);
    if (st != TPDP_SUCCESS) {
      tpdp_fail(t, "tpdp_allreduce (loss)", st);
      goto done;
    }
    out->losses[step] = loss_sum / ((double)o->batch * o->seq);
    if (t->print) {
      printf("step %d loss %.6f\n", step, out->losses[step]);
      fflush(stdout);
    }
    if (o->save_every > 0 && (step + 1) % o->save_every == 0 &&
        save_checkpoint(t, step + 1) != 0)
      goto done;
  }
  /* Data reads and checkpoint saves are not training time. */
  double elapsed = ex_now() - t_first - (t->tm.data - t_data0) -
                   (t->tm.ckpt - tm0.ckpt) - rebuild_s;
  if (o->save_dir != NULL &&
      (o->save_every == 0 || o->steps % o->save_every != 0) &&
      save_checkpoint(t, o->steps) != 0)
    goto done;
  tpdp_reducer_stats rs;
  if (tpdp_reducer_get_stats(t->reducer, &rs) != TPDP_SUCCESS) goto done;
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
    double tokens_n = (double)n * o->batch * o->seq;
    printf(
        "throughput: %.1f tokens/s, %.1f ms/step (steps %d..%d: %d x %d "
        "tokens in %.3f s; step %d, loading, checkpoints and the one-time "
        "bucket rebuild (%.3f s) excluded)\n",
        tokens_n / elapsed, 1e3 * elapsed / n, first + 1, o->steps - 1, n,
        o->batch * o->seq, elapsed, first, rebuild_s);
    printf(
        "time: compute %.3f s, tp collectives %.3f s, dp reduction %.3f s "
        "(collectives %.3f, averaging %.3f), optimizer %.3f s\n",
        t->tm.model.compute - tm0.model.compute,
        t->tm.model.tp_comm - tm0.model.tp_comm, comm + data, comm, data,
        t->tm.optim - tm0.optim);
    printf(
        "tpdp overhead: %.4f s (hooks %.4f, reducer bookkeeping %.4f) = "
        "%.2f%% of step time\n",
        overhead, hooks, bookkeeping, 100.0 * overhead / elapsed);
    printf(
        "reducer: %lld buckets, rebuilt %s; threads per rank %d; OpenBLAS "
        "%s\n",
        (long long)tpdp_reducer_num_buckets(t->reducer),
        tpdp_reducer_rebuilt(t->reducer) ? "yes" : "no", nn_threads(),
        nn_blas_core());
  }
  if (t->summary) fflush(stdout);
  peak_memory_line(t);
  if (out->want_params || o->check) {
    for (int i = 0; i < t->np; i++)
      if (gather_param(
              t, i, t->rank == 0 && out->params ? out->params[i] : NULL) != 0)
        goto done;
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
  t->comm = comm;
  t->rank = tpdp_comm_rank(comm);
  t->summary = summary && t->rank == 0;
  t->print = t->summary && !o->quiet;
  t->st.fd = t->tok.fd = -1;
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
      r.check = 0;
      r.quiet = 1;
      r.save_dir = NULL;
      r.save_every = 0;
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
