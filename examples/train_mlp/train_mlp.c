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
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "examples/train_mlp/mlp.h"
#ifdef TPDP_EXAMPLES_MLP_CUDA
#include "examples/train_mlp/mlp_cuda.h"
#endif
#include "tpdp/dtensor.h"
#include "tpdp/tpdp.h"

typedef struct {
  int dp, tp, layers, hidden, width, inputs, classes, batch, steps;
  double lr;
  unsigned long long seed;
  const char *device;
  double bucket_mib;
  int check;
  int quiet;
} options;

static void usage(FILE *out) {
  fprintf(out,
          "usage: mpirun -np D*T train_mlp [options]\n\n"
          "Trains a residual MLP classifier (input projection, L blocks of\n"
          "layernorm -> colwise fc1 -> GELU -> rowwise fc2 -> residual, head)\n"
          "on synthetic teacher data with TP over the mesh's tp dim and DP\n"
          "over its dp dim.\n\n"
          "  --dp D          data-parallel size (default 1)\n"
          "  --tp T          tensor-parallel size (default 1)\n"
          "  --layers L      residual blocks (default 2)\n"
          "  --hidden H      fc1 output width, the TP-sharded size; need not\n"
          "                  divide by T (default 67)\n"
          "  --width W       residual stream width (default 32)\n"
          "  --inputs N      input features (default 16)\n"
          "  --classes C     classes (default 10)\n"
          "  --batch B       global batch, split over dp (default 64)\n"
          "  --steps S       training steps (default 40)\n"
          "  --lr X          AdamW learning rate (default 3e-3)\n"
          "  --seed N        seed of weights and data (default 1)\n"
          "  --device cpu|cuda  (cuda needs a --config=cuda build; default cpu)\n"
          "  --bucket-mib M  DP bucket cap in MiB (default 25)\n"
          "  --check         also train in one process on rank 0 and compare;\n"
          "                  exit 1 if loss or parameters differ by > 1e-4\n"
          "  --quiet         print only the summary lines\n");
}

static int parse_options(int argc, char **argv, options *o) {
  *o = (options){1, 1, 2, 67, 32, 16, 10, 64, 40, 3e-3, 1, "cpu", 25.0, 0, 0};
  static const struct option longopts[] = {
      {"dp", required_argument, 0, 'd'},      {"tp", required_argument, 0, 't'},
      {"layers", required_argument, 0, 'L'},  {"hidden", required_argument, 0, 'H'},
      {"width", required_argument, 0, 'W'},   {"inputs", required_argument, 0, 'I'},
      {"classes", required_argument, 0, 'C'}, {"batch", required_argument, 0, 'B'},
      {"steps", required_argument, 0, 'S'},   {"lr", required_argument, 0, 'r'},
      {"seed", required_argument, 0, 's'},    {"device", required_argument, 0, 'v'},
      {"bucket-mib", required_argument, 0, 'm'}, {"check", no_argument, 0, 'c'},
      {"quiet", no_argument, 0, 'q'},         {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    switch (c) {
      case 'd': o->dp = atoi(optarg); break;
      case 't': o->tp = atoi(optarg); break;
      case 'L': o->layers = atoi(optarg); break;
      case 'H': o->hidden = atoi(optarg); break;
      case 'W': o->width = atoi(optarg); break;
      case 'I': o->inputs = atoi(optarg); break;
      case 'C': o->classes = atoi(optarg); break;
      case 'B': o->batch = atoi(optarg); break;
      case 'S': o->steps = atoi(optarg); break;
      case 'r': o->lr = atof(optarg); break;
      case 's': o->seed = strtoull(optarg, NULL, 10); break;
      case 'v': o->device = optarg; break;
      case 'm': o->bucket_mib = atof(optarg); break;
      case 'c': o->check = 1; break;
      case 'q': o->quiet = 1; break;
      case 'h': usage(stdout); return 1;
      default: usage(stderr); return 2;
    }
  }
  const char *bad = NULL;
  if (o->dp < 1) bad = "--dp must be >= 1";
  else if (o->tp < 1) bad = "--tp must be >= 1";
  else if (o->layers < 0) bad = "--layers must be >= 0";
  else if (o->hidden < 1 || o->width < 1 || o->inputs < 1 || o->classes < 2)
    bad = "--hidden, --width, --inputs must be >= 1 and --classes >= 2";
  else if (o->batch < 1 || o->batch % o->dp != 0)
    bad = "--batch must be a positive multiple of --dp";
  else if (o->steps < 1) bad = "--steps must be >= 1";
  else if (o->bucket_mib <= 0) bad = "--bucket-mib must be > 0";
  else if (strcmp(o->device, "cpu") != 0 && strcmp(o->device, "cuda") != 0)
    bad = "--device must be cpu or cuda";
  if (bad) {
    fprintf(stderr, "train_mlp: %s\n", bad);
    return 2;
  }
  return 0;
}

/* ------------------------------------------------------------ model tree */

typedef struct {
  mlp_shape shape;
  tpdp_module *root;
  int nparams;
  tpdp_param **params; /* in mlp index order */
  char (*names)[64];
  float **full;        /* caller-side full tensors (replicated params keep them) */
  float **full_grad;
} model_tree;

static const char *class_of(const char *path) {
  const char *last = strrchr(path, '.');
  last = last ? last + 1 : path;
  if (strcmp(path, "layers") == 0) return "ModuleList";
  if (strncmp(path, "layers.", 7) == 0 && strchr(path + 7, '.') == NULL)
    return "Block";
  if (strcmp(last, "norm") == 0) return "LayerNorm";
  return "Linear";
}

/* The module at dotted `path` under root, created (with its parents) if
 * missing. */
static tpdp_status module_at(tpdp_module *root, const char *path,
                             tpdp_module **out) {
  if (path[0] == '\0') {
    *out = root;
    return TPDP_SUCCESS;
  }
  if (tpdp_module_get_submodule(root, path, out) == TPDP_SUCCESS)
    return TPDP_SUCCESS;
  char parent_path[128];
  snprintf(parent_path, sizeof parent_path, "%s", path);
  char *dot = strrchr(parent_path, '.');
  const char *name = path;
  tpdp_module *parent = root;
  if (dot) {
    *dot = '\0';
    name = path + (dot - parent_path) + 1;
    tpdp_status st = module_at(root, parent_path, &parent);
    if (st != TPDP_SUCCESS) return st;
  }
  tpdp_module *m = NULL;
  tpdp_status st = tpdp_module_create(class_of(path), &m);
  if (st != TPDP_SUCCESS) return st;
  st = tpdp_module_add_child(parent, name, m);
  if (st != TPDP_SUCCESS) {
    tpdp_module_destroy(m);
    return st;
  }
  *out = m;
  return TPDP_SUCCESS;
}

static tpdp_status build_tree(const mlp_shape *s, uint64_t seed,
                              model_tree *t) {
  memset(t, 0, sizeof *t);
  t->shape = *s;
  t->nparams = mlp_num_params(s);
  t->params = calloc((size_t)t->nparams, sizeof *t->params);
  t->names = calloc((size_t)t->nparams, sizeof *t->names);
  t->full = calloc((size_t)t->nparams, sizeof *t->full);
  t->full_grad = calloc((size_t)t->nparams, sizeof *t->full_grad);
  if (!t->params || !t->names || !t->full || !t->full_grad)
    return TPDP_ERR_OUT_OF_MEMORY;
  tpdp_status st = tpdp_module_create("ResidualMLP", &t->root);
  if (st != TPDP_SUCCESS) return st;
  tpdp_device cpu = {TPDP_DEVICE_CPU, 0};
  for (int i = 0; i < t->nparams; i++) {
    int ndim;
    int64_t shape[2];
    mlp_param_info(s, i, t->names[i], sizeof t->names[i], &ndim, shape);
    int64_t n = ndim == 2 ? shape[0] * shape[1] : shape[0];
    t->full[i] = calloc((size_t)n, sizeof(float));
    t->full_grad[i] = calloc((size_t)n, sizeof(float));
    if (!t->full[i] || !t->full_grad[i]) return TPDP_ERR_OUT_OF_MEMORY;
    mlp_init_param(s, i, seed, t->full[i]);
    char path[64];
    snprintf(path, sizeof path, "%s", t->names[i]);
    char *dot = strrchr(path, '.');
    *dot = '\0';
    tpdp_module *m = NULL;
    if ((st = module_at(t->root, path, &m)) != TPDP_SUCCESS) return st;
    tpdp_tensor tensor, grad;
    tpdp_tensor_init(&tensor, t->full[i], TPDP_F32, cpu, ndim, shape);
    tpdp_tensor_init(&grad, t->full_grad[i], TPDP_F32, cpu, ndim, shape);
    tpdp_param *p = NULL;
    if ((st = tpdp_param_create(&tensor, &p)) != TPDP_SUCCESS) return st;
    tpdp_param_set_grad(p, &grad);
    st = tpdp_module_add_param(m, dot + 1, p);
    tpdp_param_release(p); /* the module holds its reference */
    if (st != TPDP_SUCCESS) return st;
    t->params[i] = p;
  }
  return TPDP_SUCCESS;
}

static void free_tree(model_tree *t) {
  tpdp_module_destroy(t->root);
  for (int i = 0; i < t->nparams && t->full; i++) {
    free(t->full[i]);
    free(t->full_grad[i]);
  }
  free(t->full);
  free(t->full_grad);
  free(t->params);
  free(t->names);
}

/* ------------------------------------------------------------ callbacks */

typedef struct {
  tpdp_module *fc1[256], *fc2[256];
  tpdp_status status;
} tp_ctx;

static int tp_allreduce(int kind, int layer, float *data, int64_t n,
                        void *vctx) {
  tp_ctx *ctx = vctx;
  tpdp_tensor t = tpdp_tensor_1d(data, TPDP_F32, n);
  ctx->status = kind == MLP_TP_ROWWISE_OUT
                    ? tpdp_tp_rowwise_output_forward(ctx->fc2[layer], &t)
                    : tpdp_tp_colwise_input_backward(ctx->fc1[layer], &t);
  return ctx->status == TPDP_SUCCESS ? 0 : 1;
}

typedef struct {
  tpdp_reducer *reducer;
  tpdp_status status;
  double seconds;
} dp_ctx;

static int grad_ready(int i, void *vctx) {
  dp_ctx *ctx = vctx;
  double t0 = mlp_now();
  ctx->status = tpdp_reducer_mark_ready(ctx->reducer, i);
  ctx->seconds += mlp_now() - t0;
  return ctx->status == TPDP_SUCCESS ? 0 : 1;
}

/* ------------------------------------------------------------ reference */

/* Trains the same model in this one process (tp = dp = 1, full batch):
 * per-step losses into ref_loss, final parameters into ref_params. */
static int train_reference(const options *o, const mlp_shape *s,
                           double *ref_loss, float **ref_params) {
  int np = mlp_num_params(s);
  float **grad = calloc((size_t)np, sizeof *grad);
  float **m1 = calloc((size_t)np, sizeof *m1), **m2 = calloc((size_t)np, sizeof *m2);
  int64_t *numel = calloc((size_t)np, sizeof *numel);
  float *x = malloc(sizeof(float) * (size_t)o->batch * (size_t)s->d_in);
  int *labels = malloc(sizeof(int) * (size_t)o->batch);
  int rc = 1;
  mlp_model m;
  memset(&m, 0, sizeof m);
  if (!grad || !m1 || !m2 || !numel || !x || !labels) goto done;
  for (int i = 0; i < np; i++) {
    int ndim;
    int64_t shape[2];
    char name[64];
    mlp_param_info(s, i, name, sizeof name, &ndim, shape);
    numel[i] = ndim == 2 ? shape[0] * shape[1] : shape[0];
    grad[i] = calloc((size_t)numel[i] + 1, sizeof(float));
    m1[i] = calloc((size_t)numel[i] + 1, sizeof(float));
    m2[i] = calloc((size_t)numel[i] + 1, sizeof(float));
    if (!grad[i] || !m1[i] || !m2[i]) goto done;
    mlp_init_param(s, i, o->seed, ref_params[i]);
  }
  if (mlp_model_init(&m, s, s->ffn, o->batch, ref_params, grad) != 0) goto done;
  mlp_timers t = {0, 0};
  for (int step = 0; step < o->steps; step++) {
    mlp_make_batch(s, o->seed, step, o->batch, x, labels);
    double loss = 0;
    mlp_forward(&m, x, labels, (float)o->batch, NULL, NULL, &loss, &t);
    mlp_backward(&m, NULL, NULL, NULL, NULL, &t);
    for (int i = 0; i < np; i++)
      adamw_update(ref_params[i], grad[i], m1[i], m2[i], numel[i],
                   (float)o->lr, step + 1);
    ref_loss[step] = loss / o->batch;
  }
  rc = 0;
done:
  mlp_model_free(&m);
  for (int i = 0; i < np && grad; i++) {
    free(grad[i]);
    if (m1) free(m1[i]);
    if (m2) free(m2[i]);
  }
  free(grad);
  free(m1);
  free(m2);
  free(numel);
  free(x);
  free(labels);
  return rc;
}

/* ------------------------------------------------------------ main */

#define TRY(call)                                                         \
  do {                                                                    \
    tpdp_status st_ = (call);                                             \
    if (st_ != TPDP_SUCCESS) {                                            \
      fprintf(stderr, "[rank %d] train_mlp: %s failed: %s: %s\n", rank,   \
              #call, tpdp_status_string(st_), tpdp_last_error());         \
      goto fail;                                                          \
    }                                                                     \
  } while (0)

/* ------------------------------------------------------------ GPU path
 *
 * --device cuda (built with --config=cuda). One GPU per rank:
 *  - an NCCL communicator over the MPI world (tpdp_comm_create_nccl; its
 *    GPU is local rank mod visible GPUs) and the dp x tp mesh over it, so
 *    both mesh dims are NCCL communicators over device memory;
 *  - the module tree stays in host memory: tpdp_parallelize slices the
 *    host tensors (no communication) and tpdp_pre_dp_transform and the
 *    forward hooks work on those host shards (bookkeeping only: the model
 *    reads the device copies). Each local shard is copied once to the GPU;
 *    the model (mlp_cuda.cu) and AdamW run there on the model's stream;
 *  - TP collectives: tpdp_allreduce_async on the tp communicator of the
 *    parallelized modules (tpdp_tp_module_comm), ordered after the model
 *    stream (tpdp_comm_order_after) and the stream then ordered after the
 *    collective (tpdp_work_wait_stream): no host synchronisation;
 *  - DP: the reducer over the mesh's NCCL dp communicator with device
 *    parameters and gradients and producer_stream = the model stream;
 *  - --check copies the trained device shards back into the host shards
 *    and assembles sharded parameters by a zero-padded allreduce (sum) over
 *    the tp communicator on the GPU, then compares with the CPU reference.
 * A build without MPI (tpdp_init answering TPDP_ERR_UNSUPPORTED) runs a
 * single rank (--dp 1 --tp 1) on tpdp_comm_create_nccl(NULL, ...). */
#ifdef TPDP_EXAMPLES_MLP_CUDA

typedef struct {
  tpdp_comm *comm; /* the TP communicator (NCCL) */
  tpdp_device device;
  tpdp_status status;
  double seconds;  /* host time spent queueing the collectives */
} cuda_tp_ctx;

static int tp_allreduce_cuda(int kind, int layer, float *data, int64_t n,
                             void *stream, void *vctx) {
  (void)kind;
  (void)layer;
  cuda_tp_ctx *c = vctx;
  double t0 = mlp_now();
  tpdp_tensor t;
  tpdp_work *work = NULL;
  c->status = tpdp_tensor_init(&t, data, TPDP_F32, c->device, 1, &n);
  if (c->status == TPDP_SUCCESS)
    c->status = tpdp_comm_order_after(c->comm, stream);
  if (c->status == TPDP_SUCCESS)
    c->status = tpdp_allreduce_async(c->comm, &t, &t, TPDP_OP_SUM, &work);
  if (c->status == TPDP_SUCCESS)
    c->status = tpdp_work_wait_stream(work, stream);
  c->seconds += mlp_now() - t0;
  return c->status == TPDP_SUCCESS ? 0 : 1;
}

#define CUDA_OK(call)                                                     \
  do {                                                                    \
    if ((call) != 0) {                                                    \
      fprintf(stderr, "[rank %d] train_mlp: %s failed: %s\n", rank, #call, \
              mlp_cuda_last_error());                                     \
      goto fail;                                                          \
    }                                                                     \
  } while (0)

/* The full value of parameter i into host memory `out` (collective over
 * the tp communicator for TP-sharded parameters): the host shard `local`
 * (already holding the trained values) placed at its global offset in a
 * zeroed buffer, summed over the tp ranks on the GPU. */
static tpdp_status gather_param_cuda(const tpdp_param *p, const tpdp_mesh *mesh,
                                     tpdp_comm *tp_comm, tpdp_device dev,
                                     float *out) {
  const tpdp_tensor *lt = tpdp_param_tensor(p);
  const tpdp_spec *spec = (const tpdp_spec *)tpdp_param_spec(p);
  int sharded = 0;
  if (spec != NULL) {
    const tpdp_placement *pl = tpdp_spec_placements(spec);
    for (int d = 0; d < tpdp_mesh_ndim(mesh); d++)
      if (pl[d].kind != TPDP_PLACEMENT_REPLICATE) sharded = 1;
  }
  if (!sharded) {
    memcpy(out, lt->data, sizeof(float) * (size_t)tpdp_tensor_numel(lt));
    return TPDP_SUCCESS;
  }
  int ndim = tpdp_spec_ndim(spec);
  const int64_t *gshape = tpdp_spec_global_shape(spec);
  int64_t lshape[TPDP_MAX_DIMS], loff[TPDP_MAX_DIMS];
  tpdp_status st = tpdp_spec_local_shape(spec, tpdp_mesh_rank(mesh), lshape, loff);
  if (st != TPDP_SUCCESS) return st;
  int64_t rows = ndim == 2 ? gshape[0] : 1, cols = gshape[ndim - 1];
  int64_t lrows = ndim == 2 ? lshape[0] : 1, lcols = lshape[ndim - 1];
  int64_t roff = ndim == 2 ? loff[0] : 0, coff = loff[ndim - 1];
  int64_t n = rows * cols;
  memset(out, 0, sizeof(float) * (size_t)n);
  const float *src = lt->data;
  for (int64_t r = 0; r < lrows; r++)
    for (int64_t c = 0; c < lcols; c++)
      out[(r + roff) * cols + c + coff] = src[r * lcols + c];
  void *d = NULL;
  if (mlp_cuda_alloc(&d, sizeof(float) * (size_t)n) != 0 ||
      mlp_cuda_to_device(d, out, sizeof(float) * (size_t)n) != 0) {
    fprintf(stderr, "train_mlp: gathering a parameter: %s\n",
            mlp_cuda_last_error());
    mlp_cuda_free(d);
    return TPDP_ERR_CUDA;
  }
  tpdp_tensor t;
  st = tpdp_tensor_init(&t, d, TPDP_F32, dev, 1, &n);
  /* the copy above ran on the legacy default stream */
  if (st == TPDP_SUCCESS) st = tpdp_comm_order_after(tp_comm, NULL);
  if (st == TPDP_SUCCESS) st = tpdp_allreduce(tp_comm, &t, &t, TPDP_OP_SUM);
  if (st == TPDP_SUCCESS &&
      (mlp_cuda_stream_wait(NULL, tpdp_comm_nccl_stream(tp_comm)) != 0 ||
       mlp_cuda_to_host(out, d, sizeof(float) * (size_t)n) != 0)) {
    fprintf(stderr, "train_mlp: gathering a parameter: %s\n",
            mlp_cuda_last_error());
    st = TPDP_ERR_CUDA;
  }
  mlp_cuda_free(d);
  return st;
}

static int main_cuda(const options *opt, int *argc, char ***argv) {
  const options o = *opt;
  int rank = 0, exit_code = 1, initialized = 0;
  model_tree tree;
  memset(&tree, 0, sizeof tree);
  tpdp_comm *world = NULL, *nccl = NULL;
  tpdp_mesh *mesh = NULL;
  tpdp_reducer *reducer = NULL;
  tpdp_reducer_param *rparams = NULL;
  float **dparam = NULL, **dgrad = NULL, **m1 = NULL, **m2 = NULL;
  void **gown = NULL; /* first gradient buffers (the reducer's buckets
                         replace them in dgrad) */
  int64_t *numel = NULL;
  float *xg = NULL, *full = NULL;
  int *labels_g = NULL;
  double *losses = NULL, *ref_loss = NULL, *d_loss = NULL;
  float **ref_params = NULL;
  mlp_cuda_model model;
  memset(&model, 0, sizeof model);

  tpdp_status ist = tpdp_init(argc, argv);
  if (ist == TPDP_SUCCESS) {
    initialized = 1;
    TRY(tpdp_comm_world(&world));
    rank = tpdp_comm_rank(world);
  } else if (ist != TPDP_ERR_UNSUPPORTED || o.dp * o.tp != 1) {
    fprintf(stderr, "train_mlp: tpdp_init failed: %s\n", tpdp_last_error());
    return 1;
  } /* else: no MPI in this build; a single rank */
  int world_size = world ? tpdp_comm_size(world) : 1;
  if (world_size != o.dp * o.tp) {
    if (rank == 0)
      fprintf(stderr,
              "train_mlp: launched on %d ranks but --dp %d --tp %d needs %d: "
              "use mpirun -np %d\n",
              world_size, o.dp, o.tp, o.dp * o.tp, o.dp * o.tp);
    exit_code = 2;
    goto done;
  }
  TRY(tpdp_comm_create_nccl(world, -1, &nccl));
  int cuda_dev = tpdp_comm_cuda_device(nccl);
  tpdp_device dev = {TPDP_DEVICE_CUDA, cuda_dev};
  char dev_name[256] = "";
  CUDA_OK(mlp_cuda_use_device(cuda_dev, dev_name, sizeof dev_name));
  if (rank == 0) {
    printf("device: cuda:%d (%s)\n", cuda_dev, dev_name);
    fflush(stdout);
  }
  int64_t sizes[2] = {o.dp, o.tp};
  const char *dim_names[2] = {"dp", "tp"};
  TRY(tpdp_mesh_create(nccl, 2, sizes, dim_names, &mesh));
  int64_t coords[2];
  TRY(tpdp_mesh_coords(mesh, tpdp_mesh_rank(mesh), coords));
  int dp_rank = (int)coords[0];
  tpdp_comm *dp_comm = NULL, *tp_comm = NULL;
  TRY(tpdp_mesh_dim_comm_by_name(mesh, "dp", &dp_comm));
  TRY(tpdp_mesh_dim_comm_by_name(mesh, "tp", &tp_comm));

  mlp_shape s = {o.inputs, o.width, o.hidden, o.classes, o.layers};
  TRY(build_tree(&s, o.seed, &tree));
  tpdp_tp_plan_entry plan[2] = {{"layers.*.fc1", TPDP_STYLE_COLWISE},
                                {"layers.*.fc2", TPDP_STYLE_ROWWISE}};
  TRY(tpdp_parallelize(tree.root, mesh, "tp", plan, o.layers > 0 ? 2 : 0));
  if (rank == 0 && !o.quiet) {
    tpdp_tree_report *report = NULL;
    TRY(tpdp_tree_report_create(tree.root, NULL, 0, &report));
    printf("model (mesh dp=%d, tp=%d; module tree on the host, parameters "
           "copied to cuda:%d):\n%s",
           o.dp, o.tp, cuda_dev, tpdp_tree_report_text(report));
    tpdp_tree_report_destroy(report);
  }
  TRY(tpdp_pre_dp_transform(tree.root));
  /* The TP communicator the parallelized modules use (the mesh's tp dim). */
  if (o.layers > 0) {
    tpdp_module *fc1 = NULL;
    TRY(tpdp_module_get_submodule(tree.root, "layers.0.fc1", &fc1));
    TRY(tpdp_tp_module_comm(fc1, &tp_comm));
  }
  cuda_tp_ctx tctx = {tp_comm, dev, TPDP_SUCCESS, 0};

  int np = tree.nparams;
  rparams = calloc((size_t)np, sizeof *rparams);
  dparam = calloc((size_t)np, sizeof *dparam);
  dgrad = calloc((size_t)np, sizeof *dgrad);
  m1 = calloc((size_t)np, sizeof *m1);
  m2 = calloc((size_t)np, sizeof *m2);
  numel = calloc((size_t)np, sizeof *numel);
  gown = calloc((size_t)np, sizeof *gown);
  if (!rparams || !dparam || !dgrad || !m1 || !m2 || !numel || !gown)
    goto fail;
  for (int i = 0; i < np; i++) {
    const tpdp_tensor *host = tpdp_param_tensor(tree.params[i]);
    numel[i] = tpdp_tensor_numel(host);
    size_t bytes = sizeof(float) * (size_t)numel[i];
    void *p = NULL, *g = NULL, *a = NULL, *b = NULL;
    CUDA_OK(mlp_cuda_alloc(&p, bytes));
    dparam[i] = p;
    CUDA_OK(mlp_cuda_alloc(&g, bytes));
    dgrad[i] = g;
    gown[i] = g;
    CUDA_OK(mlp_cuda_alloc(&a, bytes));
    m1[i] = a;
    CUDA_OK(mlp_cuda_alloc(&b, bytes));
    m2[i] = b;
    CUDA_OK(mlp_cuda_to_device(p, host->data, bytes));
    TRY(tpdp_tensor_init(&rparams[i].param, p, TPDP_F32, dev, host->ndim,
                         host->shape));
    TRY(tpdp_tensor_init(&rparams[i].grad, g, TPDP_F32, dev, host->ndim,
                         host->shape));
    rparams[i].fqn = tree.names[i];
  }
  int f_local = o.layers > 0
                    ? (int)rparams[mlp_block_param(0, BLK_FC1_B)].param.shape[0]
                    : o.hidden;
  int bl = o.batch / o.dp;
  CUDA_OK(mlp_cuda_model_init(&model, &s, f_local, bl, dparam, dgrad));
  void *dp_stream = tpdp_comm_nccl_stream(dp_comm);

  tpdp_reducer_options ropts = tpdp_reducer_options_default();
  ropts.bucket_cap_bytes = (size_t)(o.bucket_mib * 1048576.0);
  if (ropts.first_bucket_bytes > ropts.bucket_cap_bytes)
    ropts.first_bucket_bytes = ropts.bucket_cap_bytes;
  ropts.producer_stream = model.stream;
  /* The host-to-device copies above (legacy default stream) are complete
   * before the reducer's broadcast reads the parameters on its stream. */
  CUDA_OK(mlp_cuda_stream_sync(NULL));
  TRY(tpdp_reducer_create(dp_comm, rparams, np, &ropts, &reducer));
  /* The reducer broadcast the parameters from dp rank 0 on its stream. */
  CUDA_OK(mlp_cuda_stream_wait(model.stream, dp_stream));

  xg = malloc(sizeof(float) * (size_t)o.batch * (size_t)o.inputs);
  labels_g = malloc(sizeof(int) * (size_t)o.batch);
  losses = calloc((size_t)o.steps, sizeof(double));
  void *dl = NULL;
  CUDA_OK(mlp_cuda_alloc(&dl, sizeof(double)));
  d_loss = dl;
  if (!xg || !labels_g || !losses) goto fail;

  dp_ctx dctx = {reducer, TPDP_SUCCESS, 0};
  double hooks_s = 0, model_s = 0, finalize_s = 0, optim_s = 0;
  double t_start = mlp_now();
  for (int step = 0; step < o.steps; step++) {
    mlp_make_batch(&s, o.seed, step, o.batch, xg, labels_g);
    double h0 = mlp_now();
    TRY(tpdp_module_forward_begin(tree.root));
    hooks_s += mlp_now() - h0;
    double loss_sum = 0;
    h0 = mlp_now();
    if (mlp_cuda_forward(&model, xg + (size_t)dp_rank * bl * o.inputs,
                         labels_g + (size_t)dp_rank * bl, (float)bl,
                         tp_allreduce_cuda, &tctx, &loss_sum) != 0) {
      TRY(tctx.status);
      CUDA_OK(1);
    }
    model_s += mlp_now() - h0;
    h0 = mlp_now();
    TRY(tpdp_module_forward_end(tree.root));
    hooks_s += mlp_now() - h0;
    h0 = mlp_now();
    TRY(tpdp_reducer_prepare(reducer));
    dctx.seconds += mlp_now() - h0;
    /* Gradients live in the reducer's device buckets; they move once, when
     * prepare rebuilds the buckets after the first step. */
    CUDA_OK(mlp_cuda_stream_wait(model.stream, dp_stream));
    for (int i = 0; i < np; i++) {
      tpdp_tensor gv;
      TRY(tpdp_reducer_grad_view(reducer, i, &gv));
      dgrad[i] = gv.data;
    }
    h0 = mlp_now();
    if (mlp_cuda_backward(&model, tp_allreduce_cuda, &tctx, grad_ready,
                          &dctx) != 0) {
      TRY(tctx.status);
      TRY(dctx.status);
      CUDA_OK(1);
    }
    model_s += mlp_now() - h0;
    h0 = mlp_now();
    TRY(tpdp_reducer_finalize(reducer));
    /* AdamW reads the averaged gradients the dp stream wrote. */
    CUDA_OK(mlp_cuda_stream_wait(model.stream, dp_stream));
    finalize_s += mlp_now() - h0;
    h0 = mlp_now();
    for (int i = 0; i < np; i++)
      CUDA_OK(mlp_cuda_adamw(dparam[i], dgrad[i], m1[i], m2[i], numel[i],
                             (float)o.lr, step + 1, model.stream));
    optim_s += mlp_now() - h0;
    /* The step's loss: mean over the global batch (sum over DP ranks, on
     * the GPU: the dp communicator moves device memory). */
    double lsum = loss_sum;
    CUDA_OK(mlp_cuda_to_device(d_loss, &lsum, sizeof lsum));
    tpdp_tensor lt;
    int64_t one = 1;
    TRY(tpdp_tensor_init(&lt, d_loss, TPDP_F64, dev, 1, &one));
    TRY(tpdp_comm_order_after(dp_comm, NULL));
    TRY(tpdp_allreduce(dp_comm, &lt, &lt, TPDP_OP_SUM));
    CUDA_OK(mlp_cuda_stream_wait(NULL, dp_stream));
    CUDA_OK(mlp_cuda_to_host(&lsum, d_loss, sizeof lsum));
    losses[step] = lsum / o.batch;
    if (rank == 0 && !o.quiet) printf("step %d loss %.6f\n", step, losses[step]);
  }
  CUDA_OK(mlp_cuda_stream_sync(model.stream));
  double elapsed = mlp_now() - t_start;
  tpdp_reducer_stats rs;
  TRY(tpdp_reducer_get_stats(reducer, &rs));
  if (rank == 0) {
    double bookkeeping = rs.total_seconds - rs.comm_seconds - rs.data_seconds;
    double overhead = hooks_s + bookkeeping;
    printf("throughput: %.1f samples/s (%d steps of %d samples in %.3f s)\n",
           o.batch * o.steps / elapsed, o.steps, o.batch, elapsed);
    printf("time (host side; GPU work is asynchronous, the forward waits for "
           "its loss): model %.3f s (queueing tp collectives %.3f s), dp "
           "finalize %.3f s, optimizer %.3f s\n",
           model_s, tctx.seconds, finalize_s, optim_s);
    printf("tpdp overhead: %.4f s (hooks %.4f, reducer bookkeeping %.4f) = "
           "%.2f%% of step time\n",
           overhead, hooks_s, bookkeeping, 100.0 * overhead / elapsed);
    printf("reducer: %lld buckets, rebuilt %s\n",
           (long long)tpdp_reducer_num_buckets(reducer),
           tpdp_reducer_rebuilt(reducer) ? "yes" : "no");
    fflush(stdout);
  }

  exit_code = 0;
  if (o.check) {
    ref_loss = calloc((size_t)o.steps, sizeof(double));
    ref_params = calloc((size_t)np, sizeof *ref_params);
    if (!ref_loss || !ref_params) goto fail;
    for (int i = 0; i < np; i++) {
      int ndim;
      int64_t shape[2];
      char name[64];
      mlp_param_info(&s, i, name, sizeof name, &ndim, shape);
      ref_params[i] = calloc((size_t)(ndim == 2 ? shape[0] * shape[1] : shape[0]) + 1,
                             sizeof(float));
      if (!ref_params[i]) goto fail;
    }
    int ref_rc = 0;
    if (rank == 0) ref_rc = train_reference(&o, &s, ref_loss, ref_params);
    double max_rel = 0, max_abs = 0;
    for (int step = 0; step < o.steps && rank == 0; step++) {
      double rel = fabs(losses[step] - ref_loss[step]) /
                   fmax(fabs(ref_loss[step]), 1e-12);
      if (rel > max_rel || rel != rel) max_rel = rel;
    }
    for (int i = 0; i < np; i++) {
      /* trained device shard -> the host shard of the module tree */
      const tpdp_tensor *host = tpdp_param_tensor(tree.params[i]);
      CUDA_OK(mlp_cuda_to_host(host->data, dparam[i],
                               sizeof(float) * (size_t)numel[i]));
      int ndim;
      int64_t shape[2];
      char name[64];
      mlp_param_info(&s, i, name, sizeof name, &ndim, shape);
      int64_t n = ndim == 2 ? shape[0] * shape[1] : shape[0];
      free(full);
      full = malloc(sizeof(float) * (size_t)n + 1);
      if (!full) goto fail;
      TRY(gather_param_cuda(tree.params[i], mesh, tp_comm, dev, full));
      if (rank == 0)
        for (int64_t k = 0; k < n; k++) {
          double d = fabs((double)full[k] - (double)ref_params[i][k]);
          if (d > max_abs || d != d) max_abs = d;
        }
    }
    if (rank == 0) {
      printf("check: max_rel_loss_diff %.3e max_abs_param_diff %.3e\n",
             max_rel, max_abs);
      if (ref_rc != 0 || !(max_rel <= 1e-4) || !(max_abs <= 1e-4)) {
        printf("check: FAILED (tolerance 1e-4)\n");
        exit_code = 1;
      } else {
        printf("check: ok\n");
      }
    }
  }
  goto done;
fail:
  exit_code = 1;
done:
  mlp_cuda_model_free(&model);
  if (reducer) tpdp_reducer_destroy(reducer);
  for (int i = 0; i < tree.nparams; i++) {
    if (dparam) mlp_cuda_free(dparam[i]);
    if (gown) mlp_cuda_free(gown[i]);
    if (m1) mlp_cuda_free(m1[i]);
    if (m2) mlp_cuda_free(m2[i]);
    if (ref_params) free(ref_params[i]);
  }
  mlp_cuda_free(d_loss);
  free(dparam);
  free(gown);
  free(dgrad);
  free(m1);
  free(m2);
  free(ref_params);
  free(ref_loss);
  free(rparams);
  free(numel);
  free(xg);
  free(full);
  free(labels_g);
  free(losses);
  free_tree(&tree);
  tpdp_mesh_destroy(mesh);
  tpdp_comm_destroy(nccl);
  fflush(stdout);
  if (initialized) tpdp_finalize();
  return exit_code;
}
#endif /* TPDP_EXAMPLES_MLP_CUDA */

int main(int argc, char **argv) {
  options o;
  int prc = parse_options(argc, argv, &o);
  if (prc != 0) return prc == 1 ? 0 : 2;
  if (strcmp(o.device, "cuda") == 0) {
#ifdef TPDP_EXAMPLES_MLP_CUDA
    return main_cuda(&o, &argc, &argv);
#else
    fprintf(stderr,
            "train_mlp: --device cuda: built without --config=cuda (rebuild "
            "with bazel build --config=cuda //examples:train_mlp); use "
            "--device cpu\n");
    return 2;
#endif
  }
  int rank = -1, exit_code = 1;
  model_tree tree;
  memset(&tree, 0, sizeof tree);
  tpdp_mesh *mesh = NULL;
  tpdp_reducer *reducer = NULL;
  tpdp_reducer_param *rparams = NULL;
  float **local = NULL, **grad = NULL, **m1 = NULL, **m2 = NULL;
  int64_t *numel = NULL;
  float *xg = NULL, *xl = NULL;
  int *labels_g = NULL;
  double *losses = NULL, *ref_loss = NULL;
  float **ref_params = NULL;
  mlp_model model;
  memset(&model, 0, sizeof model);

  if (tpdp_init(&argc, &argv) != TPDP_SUCCESS) {
    fprintf(stderr, "train_mlp: tpdp_init failed: %s\n", tpdp_last_error());
    return 1;
  }
  tpdp_comm *world = NULL;
  TRY(tpdp_comm_world(&world));
  rank = tpdp_comm_rank(world);
  if (tpdp_comm_size(world) != o.dp * o.tp) {
    if (rank == 0)
      fprintf(stderr,
              "train_mlp: launched on %d ranks but --dp %d --tp %d needs %d: "
              "use mpirun -np %d\n",
              tpdp_comm_size(world), o.dp, o.tp, o.dp * o.tp, o.dp * o.tp);
    tpdp_finalize();
    return 2;
  }
  int64_t sizes[2] = {o.dp, o.tp};
  const char *dim_names[2] = {"dp", "tp"};
  TRY(tpdp_mesh_create(world, 2, sizes, dim_names, &mesh));
  int64_t coords[2];
  TRY(tpdp_mesh_coords(mesh, rank, coords));
  int dp_rank = (int)coords[0];
  tpdp_comm *dp_comm = NULL;
  TRY(tpdp_mesh_dim_comm_by_name(mesh, "dp", &dp_comm));

  mlp_shape s = {o.inputs, o.width, o.hidden, o.classes, o.layers};
  TRY(build_tree(&s, o.seed, &tree));

  /* TP: fc1 colwise, fc2 rowwise; everything else replicated. */
  tpdp_tp_plan_entry plan[2] = {{"layers.*.fc1", TPDP_STYLE_COLWISE},
                                {"layers.*.fc2", TPDP_STYLE_ROWWISE}};
  TRY(tpdp_parallelize(tree.root, mesh, "tp", plan, o.layers > 0 ? 2 : 0));
  if (rank == 0 && !o.quiet) {
    tpdp_tree_report *report = NULL;
    TRY(tpdp_tree_report_create(tree.root, NULL, 0, &report));
    printf("model (mesh dp=%d, tp=%d):\n%s", o.dp, o.tp,
           tpdp_tree_report_text(report));
    tpdp_tree_report_destroy(report);
  }
  /* DP sees plain local tensors from here on. */
  TRY(tpdp_pre_dp_transform(tree.root));

  int np = tree.nparams;
  tp_ctx tctx;
  memset(&tctx, 0, sizeof tctx);
  if (o.layers > 256) {
    fprintf(stderr, "train_mlp: at most 256 layers\n");
    goto fail;
  }
  for (int l = 0; l < o.layers; l++) {
    char path[64];
    snprintf(path, sizeof path, "layers.%d.fc1", l);
    TRY(tpdp_module_get_submodule(tree.root, path, &tctx.fc1[l]));
    snprintf(path, sizeof path, "layers.%d.fc2", l);
    TRY(tpdp_module_get_submodule(tree.root, path, &tctx.fc2[l]));
  }
  rparams = calloc((size_t)np, sizeof *rparams);
  local = calloc((size_t)np, sizeof *local);
  grad = calloc((size_t)np, sizeof *grad);
  m1 = calloc((size_t)np, sizeof *m1);
  m2 = calloc((size_t)np, sizeof *m2);
  numel = calloc((size_t)np, sizeof *numel);
  if (!rparams || !local || !grad || !m1 || !m2 || !numel) goto fail;
  for (int i = 0; i < np; i++) {
    rparams[i].param = *tpdp_param_tensor(tree.params[i]);
    rparams[i].grad = *tpdp_param_grad(tree.params[i]);
    rparams[i].fqn = tree.names[i];
    local[i] = rparams[i].param.data;
    numel[i] = tpdp_tensor_numel(&rparams[i].param);
    m1[i] = calloc((size_t)numel[i] + 1, sizeof(float));
    m2[i] = calloc((size_t)numel[i] + 1, sizeof(float));
    if (!m1[i] || !m2[i]) goto fail;
  }
  tpdp_reducer_options ropts = tpdp_reducer_options_default();
  ropts.bucket_cap_bytes = (size_t)(o.bucket_mib * 1048576.0);
  if (ropts.first_bucket_bytes > ropts.bucket_cap_bytes)
    ropts.first_bucket_bytes = ropts.bucket_cap_bytes;
  TRY(tpdp_reducer_create(dp_comm, rparams, np, &ropts, &reducer));

  int f_local = (int)rparams[mlp_block_param(0, BLK_FC1_B)].param.shape[0];
  if (o.layers == 0) f_local = o.hidden;
  int bl = o.batch / o.dp;
  if (mlp_model_init(&model, &s, f_local, bl, local, grad) != 0) goto fail;
  xg = malloc(sizeof(float) * (size_t)o.batch * (size_t)o.inputs);
  labels_g = malloc(sizeof(int) * (size_t)o.batch);
  losses = calloc((size_t)o.steps, sizeof(double));
  if (!xg || !labels_g || !losses) goto fail;

  mlp_timers t = {0, 0};
  dp_ctx dctx = {reducer, TPDP_SUCCESS, 0};
  double hooks_s = 0, finalize_s = 0, optim_s = 0;
  double t_start = mlp_now();
  for (int step = 0; step < o.steps; step++) {
    /* Every rank draws the global batch; each DP rank takes its rows. */
    mlp_make_batch(&s, o.seed, step, o.batch, xg, labels_g);
    double h0 = mlp_now();
    TRY(tpdp_module_forward_begin(tree.root));
    hooks_s += mlp_now() - h0;
    double loss_sum = 0;
    if (mlp_forward(&model, xg + (size_t)dp_rank * bl * o.inputs,
                    labels_g + (size_t)dp_rank * bl, (float)bl, tp_allreduce,
                    &tctx, &loss_sum, &t) != 0)
      TRY(tctx.status);
    h0 = mlp_now();
    TRY(tpdp_module_forward_end(tree.root));
    hooks_s += mlp_now() - h0;
    h0 = mlp_now();
    TRY(tpdp_reducer_prepare(reducer));
    dctx.seconds += mlp_now() - h0;
    /* Gradient views live in the reducer's buckets; they move once, when
     * prepare rebuilds the buckets after the first step. */
    for (int i = 0; i < np; i++) {
      tpdp_tensor gv;
      TRY(tpdp_reducer_grad_view(reducer, i, &gv));
      grad[i] = gv.data;
      TRY(tpdp_param_set_grad(tree.params[i], &gv));
    }
    if (mlp_backward(&model, tp_allreduce, &tctx, grad_ready, &dctx, &t) != 0) {
      TRY(tctx.status);
      TRY(dctx.status);
    }
    h0 = mlp_now();
    TRY(tpdp_reducer_finalize(reducer));
    finalize_s += mlp_now() - h0;
    h0 = mlp_now();
    for (int i = 0; i < np; i++)
      adamw_update(local[i], grad[i], m1[i], m2[i], numel[i], (float)o.lr,
                   step + 1);
    optim_s += mlp_now() - h0;
    /* The step's loss: mean over the global batch (sum over DP ranks). */
    double lsum = loss_sum;
    tpdp_tensor lt = tpdp_tensor_1d(&lsum, TPDP_F64, 1);
    TRY(tpdp_allreduce(dp_comm, &lt, &lt, TPDP_OP_SUM));
    losses[step] = lsum / o.batch;
    if (rank == 0 && !o.quiet) printf("step %d loss %.6f\n", step, losses[step]);
  }
  double elapsed = mlp_now() - t_start;
  tpdp_reducer_stats rs;
  TRY(tpdp_reducer_get_stats(reducer, &rs));
  if (rank == 0) {
    /* tpdp's own cost: the forward hooks plus the reducer's bookkeeping
     * (its time minus collectives and passes over gradient data). */
    double bookkeeping = rs.total_seconds - rs.comm_seconds - rs.data_seconds;
    double overhead = hooks_s + bookkeeping;
    printf("throughput: %.1f samples/s (%d steps of %d samples in %.3f s)\n",
           o.batch * o.steps / elapsed, o.steps, o.batch, elapsed);
    printf("time: compute %.3f s, tp collectives %.3f s, dp reduction %.3f s "
           "(collectives %.3f, averaging %.3f), optimizer %.3f s\n",
           t.compute, t.tp_comm, rs.comm_seconds + rs.data_seconds,
           rs.comm_seconds, rs.data_seconds, optim_s);
    printf("tpdp overhead: %.4f s (hooks %.4f, reducer bookkeeping %.4f) = "
           "%.2f%% of step time\n",
           overhead, hooks_s, bookkeeping, 100.0 * overhead / elapsed);
    printf("reducer: %lld buckets, rebuilt %s\n",
           (long long)tpdp_reducer_num_buckets(reducer),
           tpdp_reducer_rebuilt(reducer) ? "yes" : "no");
    fflush(stdout);
  }
  (void)finalize_s;

  exit_code = 0;
  if (o.check) {
    /* Gather every parameter (full_tensor: collective) and compare on rank 0
     * with a single-process run of the same model. */
    ref_loss = calloc((size_t)o.steps, sizeof(double));
    ref_params = calloc((size_t)np, sizeof *ref_params);
    if (!ref_loss || !ref_params) goto fail;
    for (int i = 0; i < np; i++) {
      int ndim;
      int64_t shape[2];
      char name[64];
      mlp_param_info(&s, i, name, sizeof name, &ndim, shape);
      ref_params[i] = calloc((size_t)(ndim == 2 ? shape[0] * shape[1] : shape[0]),
                             sizeof(float));
      if (!ref_params[i]) goto fail;
    }
    int ref_rc = 0;
    if (rank == 0) ref_rc = train_reference(&o, &s, ref_loss, ref_params);
    double max_rel = 0, max_abs = 0;
    for (int step = 0; step < o.steps && rank == 0; step++) {
      double rel = fabs(losses[step] - ref_loss[step]) /
                   fmax(fabs(ref_loss[step]), 1e-12);
      if (rel > max_rel) max_rel = rel;
    }
    for (int i = 0; i < np; i++) {
      tpdp_param *p = tree.params[i];
      const tpdp_tensor *lt = tpdp_param_tensor(p);
      const tpdp_spec *spec = (const tpdp_spec *)tpdp_param_spec(p);
      tpdp_tensor full;
      int owned = 0;
      if (spec != NULL) {
        tpdp_dtensor dt = {*lt, spec};
        TRY(tpdp_dtensor_full_tensor_alloc(&dt, &full));
        owned = 1;
      } else {
        full = *lt;
      }
      if (rank == 0) {
        const float *a = full.data;
        for (int64_t k = 0; k < tpdp_tensor_numel(&full); k++) {
          double d = fabs((double)a[k] - (double)ref_params[i][k]);
          if (d > max_abs || d != d) max_abs = d;
        }
      }
      if (owned) free(full.data);
    }
    if (rank == 0) {
      printf("check: max_rel_loss_diff %.3e max_abs_param_diff %.3e\n",
             max_rel, max_abs);
      if (ref_rc != 0 || !(max_rel <= 1e-4) || !(max_abs <= 1e-4)) {
        printf("check: FAILED (tolerance 1e-4)\n");
        exit_code = 1;
      } else {
        printf("check: ok\n");
      }
    }
  }
  goto done;
fail:
  exit_code = 1;
done:
  mlp_model_free(&model);
  tpdp_reducer_destroy(reducer);
  for (int i = 0; i < tree.nparams; i++) {
    if (m1) free(m1[i]);
    if (m2) free(m2[i]);
    if (ref_params) free(ref_params[i]);
  }
  free(m1);
  free(m2);
  free(ref_params);
  free(ref_loss);
  free(rparams);
  free(local);
  free(grad);
  free(numel);
  free(xg);
  free(xl);
  free(labels_g);
  free(losses);
  free_tree(&tree);
  tpdp_mesh_destroy(mesh);
  fflush(stdout);
  tpdp_finalize();
  return exit_code;
}
