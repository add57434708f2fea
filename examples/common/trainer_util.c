// SPDX-License-Identifier: BSD-3-Clause
/* examples/common/trainer_util.h: what the example trainers share. */
#include "examples/common/trainer_util.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static int not_a(const char *flag, const char *text, const char *kind,
                 ex_error *e) {
  return ex_fail(e, "%s: '%s' is not %s", flag, text, kind);
}

int ex_flag_int(const char *flag, const char *text, int *out, ex_error *e) {
  char *end = NULL;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (end == text || *end != '\0' || errno != 0 || v < INT_MIN || v > INT_MAX)
    return not_a(flag, text, "an integer", e);
  *out = (int)v;
  return 0;
}

int ex_flag_double(const char *flag, const char *text, double *out,
                   ex_error *e) {
  char *end = NULL;
  errno = 0;
  double v = strtod(text, &end);
  if (end == text || *end != '\0' || errno != 0 || !isfinite(v))
    return not_a(flag, text, "a number", e);
  *out = v;
  return 0;
}

int ex_flag_u64(const char *flag, const char *text, unsigned long long *out,
                ex_error *e) {
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(text, &end, 10);
  if (end == text || *end != '\0' || errno != 0 || text[0] == '-')
    return not_a(flag, text, "a non-negative integer", e);
  *out = v;
  return 0;
}

int ex_parse_flags(int argc, char **argv, const char *prog,
                   const ex_flag *flags, int n, unsigned *given,
                   void (*usage)(FILE *out)) {
  struct option *longopts = calloc((size_t)n + 2, sizeof *longopts);
  if (longopts == NULL) {
    fprintf(stderr, "%s: out of memory\n", prog);
    return 2;
  }
  for (int i = 0; i < n; i++)
    longopts[i] = (struct option){
        flags[i].name,
        flags[i].kind == EX_FLAG_SWITCH ? no_argument : required_argument, 0,
        256 + i};
  longopts[n] = (struct option){"help", no_argument, 0, 'h'};
  ex_error e;
  int c, rc = 0;
  optind = 1;
  while (rc == 0 && (c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    if (c == 'h') {
      usage(stdout);
      rc = 1;
      break;
    }
    if (c < 256 || c >= 256 + n) {
      usage(stderr);
      rc = 2;
      break;
    }
    const ex_flag *f = &flags[c - 256];
    char name[64];
    snprintf(name, sizeof name, "--%s", f->name);
    int bad = 0;
    switch (f->kind) {
      case EX_FLAG_INT:
        bad = ex_flag_int(name, optarg, f->value, &e);
        break;
      case EX_FLAG_DOUBLE:
        bad = ex_flag_double(name, optarg, f->value, &e);
        break;
      case EX_FLAG_U64:
        bad = ex_flag_u64(name, optarg, f->value, &e);
        break;
      case EX_FLAG_STRING:
        *(const char **)f->value = optarg;
        break;
      case EX_FLAG_SWITCH:
        *(int *)f->value = 1;
        break;
    }
    if (bad) {
      fprintf(stderr, "%s: %s\n", prog, e.msg);
      rc = 2;
    } else if (given != NULL) {
      *given |= f->bit;
    }
  }
  if (rc == 0 && optind < argc) {
    fprintf(stderr, "%s: unexpected argument '%s'\n", prog, argv[optind]);
    rc = 2;
  }
  free(longopts);
  return rc;
}

int ex_tpdp_fail(ex_error *e, const char *what, tpdp_status st) {
  return ex_fail(e, "%s failed: %s: %s", what, tpdp_status_string(st),
                 tpdp_last_error());
}

int ex_state_dict_add_adamw(tpdp_state_dict *sd, const ex_adamw_entry *entries,
                            int n, ex_error *e) {
  static const char *const kinds[3] = {NULL, "exp_avg", "exp_avg_sq"};
  char name[320];
  for (int kind = 0; kind < 3; kind++)
    for (int i = 0; i < n; i++) {
      const ex_adamw_entry *x = &entries[i];
      const tpdp_tensor *t = kind == 0   ? &x->param
                             : kind == 1 ? &x->exp_avg
                                         : &x->exp_avg_sq;
      if (kind == 0)
        snprintf(name, sizeof name, "%s", x->fqn);
      else
        snprintf(name, sizeof name, EX_OPTIM_PREFIX "%s.%s", kinds[kind],
                 x->fqn);
      if (x->boxed)
        EX_TRY(e, tpdp_state_dict_add_box(sd, name, t, x->global, x->offset));
      else
        EX_TRY(e, tpdp_state_dict_add(sd, name, t, x->spec));
    }
  return 0;
}

/* This process's proportional set size in KiB (a page shared by k
 * processes counts 1/k), -1 where /proc/self/smaps_rollup is missing. */
static int64_t pss_kb(void) {
  FILE *f = fopen("/proc/self/smaps_rollup", "r");
  if (f == NULL) return -1;
  char line[256];
  long long kb = -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "Pss: %lld kB", &kb) == 1) break;
  fclose(f);
  return kb;
}

/* ---- the model's views ---- */

/* Copies given back are kept for the next unit's (the blocks ask for the
 * same sizes one after another): a fresh large malloc is a fresh mapping
 * whose every page faults in, which cost more than the conversions. At
 * most POOL_MAX are kept, so the copies alive stay about two units'. */
#define POOL_MAX 32

struct ex_param_views {
  int n;
  tpdp_param **params;
  float **P, **G;
  float **pcopy, **gcopy; /* live f32 copies (NULL: none) */
  int64_t *pcap, *gcap;   /* their sizes (elements) */
  float *pool[POOL_MAX];
  int64_t pool_cap[POOL_MAX];
  int npool;
};

/* An f32 buffer of at least n elements (*cap: its size): a kept one of at
 * most twice n, else a new one. NULL when out of memory. */
static float *pool_take(ex_param_views *v, int64_t n, int64_t *cap) {
  int best = -1;
  for (int k = 0; k < v->npool; k++)
    if (v->pool_cap[k] >= n && v->pool_cap[k] <= 2 * n + 1024 &&
        (best < 0 || v->pool_cap[k] < v->pool_cap[best]))
      best = k;
  if (best < 0) {
    *cap = n;
    return malloc(sizeof(float) * (size_t)n + 1);
  }
  float *p = v->pool[best];
  *cap = v->pool_cap[best];
  v->pool[best] = v->pool[--v->npool];
  v->pool_cap[best] = v->pool_cap[v->npool];
  return p;
}

static void pool_give(ex_param_views *v, float **p, int64_t cap) {
  if (*p != NULL && v->npool < POOL_MAX) {
    v->pool[v->npool] = *p;
    v->pool_cap[v->npool++] = cap;
  } else {
    free(*p);
  }
  *p = NULL;
}

int ex_param_views_create(tpdp_param *const *params, int n, float **P,
                          float **G, ex_param_views **out, ex_error *e) {
  ex_param_views *v = calloc(1, sizeof *v);
  if (v != NULL) {
    v->params = calloc((size_t)n + 1, sizeof *v->params);
    v->pcopy = calloc((size_t)n + 1, sizeof *v->pcopy);
    v->gcopy = calloc((size_t)n + 1, sizeof *v->gcopy);
    v->pcap = calloc((size_t)n + 1, sizeof *v->pcap);
    v->gcap = calloc((size_t)n + 1, sizeof *v->gcap);
  }
  if (v == NULL || !v->params || !v->pcopy || !v->gcopy || !v->pcap ||
      !v->gcap) {
    ex_param_views_destroy(v);
    return ex_fail(e, "out of memory");
  }
  v->n = n;
  for (int i = 0; i < n; i++) v->params[i] = params[i];
  v->P = P;
  v->G = G;
  *out = v;
  return 0;
}

void ex_param_views_destroy(ex_param_views *v) {
  if (v == NULL) return;
  for (int i = 0; i < v->n && v->pcopy && v->gcopy; i++) {
    free(v->pcopy[i]);
    free(v->gcopy[i]);
  }
  for (int k = 0; k < v->npool; k++) free(v->pool[k]);
  free(v->params);
  free(v->pcopy);
  free(v->gcopy);
  free(v->pcap);
  free(v->gcap);
  free(v);
}

void ex_param_views_refresh(ex_param_views *v) {
  for (int i = 0; i < v->n; i++) {
    const tpdp_tensor *t = tpdp_param_tensor(v->params[i]);
    v->P[i] = t->dtype == TPDP_F32 ? t->data : v->pcopy[i];
    const tpdp_tensor *g = tpdp_param_grad(v->params[i]);
    if (g) v->G[i] = g->dtype == TPDP_F32 ? g->data : v->gcopy[i];
  }
}

float ex_round_to(tpdp_dtype dt, float x) {
  if (dt == TPDP_BF16) return tpdp_bf16_to_f32(tpdp_f32_to_bf16(x));
  if (dt == TPDP_F16) return tpdp_f16_to_f32(tpdp_f32_to_f16(x));
  return x;
}

static int view_index(const ex_param_views *v, const tpdp_param *p) {
  for (int i = 0; i < v->n; i++)
    if (v->params[i] == p) return i;
  return -1;
}

/* After a unit's begin hook: f32 copies of its non-f32 parameters and,
 * with grads, zeroed f32 scratch for their gradients. */
static int views_begin(ex_param_views *v, const tpdp_fsdp_unit *u, int grads,
                       ex_error *e) {
  for (int k = 0; k < tpdp_fsdp_num_params(u); k++) {
    tpdp_param *p = tpdp_fsdp_param(u, k, NULL);
    const tpdp_tensor *t = tpdp_param_tensor(p);
    int i = t->dtype == TPDP_F32 ? -1 : view_index(v, p);
    if (i < 0) continue;
    int64_t n = tpdp_tensor_numel(t);
    pool_give(v, &v->pcopy[i], v->pcap[i]);
    v->pcopy[i] = pool_take(v, n, &v->pcap[i]);
    if (grads) {
      pool_give(v, &v->gcopy[i], v->gcap[i]);
      v->gcopy[i] = pool_take(v, n, &v->gcap[i]);
      if (v->gcopy[i] != NULL)
        memset(v->gcopy[i], 0, sizeof(float) * (size_t)n);
    }
    if (v->pcopy[i] == NULL || (grads && v->gcopy[i] == NULL))
      return ex_fail(e, "out of memory for an f32 copy of %lld elements",
                     (long long)n);
    EX_TRY(e, tpdp_convert_floats(v->pcopy[i], TPDP_F32, t->data, t->dtype, n));
  }
  return 0;
}

/* Before a unit's end hook: with grads, the scratch added into its
 * gradients (rounded to their dtype; the parameter's copy, about to go,
 * holds the widened gradient meanwhile); the copies freed. */
static int views_end(ex_param_views *v, const tpdp_fsdp_unit *u, int grads,
                     ex_error *e) {
  for (int k = 0; k < tpdp_fsdp_num_params(u); k++) {
    tpdp_param *p = tpdp_fsdp_param(u, k, NULL);
    /* f32 parameters have no copies (the unit still holds them gathered
     * here: the end hook comes after) */
    int i = tpdp_param_tensor(p)->dtype == TPDP_F32 ? -1 : view_index(v, p);
    if (i < 0) continue;
    const tpdp_tensor *g = tpdp_param_grad(p);
    float *wide = v->pcopy[i], *add = v->gcopy[i];
    if (grads && wide && add && g != NULL && g->dtype != TPDP_F32) {
      int64_t n = tpdp_tensor_numel(g);
      EX_TRY(e, tpdp_convert_floats(wide, TPDP_F32, g->data, g->dtype, n));
      for (int64_t j = 0; j < n; j++) wide[j] += add[j];
      EX_TRY(e, tpdp_convert_floats(g->data, g->dtype, wide, TPDP_F32, n));
    }
    pool_give(v, &v->pcopy[i], v->pcap[i]);
    if (grads) pool_give(v, &v->gcopy[i], v->gcap[i]);
  }
  return 0;
}

int ex_module_hooks(tpdp_module *module, int event, ex_param_views *views,
                    ex_error *e) {
  const tpdp_fsdp_unit *u = views ? tpdp_fsdp_unit_of(module) : NULL;
  int grads =
      event == EX_BLOCK_BACKWARD_BEGIN || event == EX_BLOCK_BACKWARD_END;
  if (u && (event == EX_BLOCK_FORWARD_END || event == EX_BLOCK_BACKWARD_END) &&
      views_end(views, u, grads, e) != 0)
    return -1;
  switch (event) {
    case EX_BLOCK_FORWARD_BEGIN:
      EX_TRY(e, tpdp_module_forward_begin(module));
      break;
    case EX_BLOCK_FORWARD_END:
      EX_TRY(e, tpdp_module_forward_end(module));
      break;
    case EX_BLOCK_BACKWARD_BEGIN:
      EX_TRY(e, tpdp_module_backward_begin(module));
      break;
    default:
      EX_TRY(e, tpdp_module_backward_end(module));
      break;
  }
  if (u &&
      (event == EX_BLOCK_FORWARD_BEGIN || event == EX_BLOCK_BACKWARD_BEGIN))
    if (views_begin(views, u, grads, e) != 0) return -1;
  if (views) ex_param_views_refresh(views);
  return 0;
}

int ex_block_hooks(tpdp_module *root, const char *prefix, int layer, int event,
                   ex_param_views *views, ex_error *e) {
  char path[96];
  snprintf(path, sizeof path, "%s%d", prefix, layer);
  tpdp_module *block = NULL;
  EX_TRY(e, tpdp_module_get_submodule(root, path, &block));
  return ex_module_hooks(block, event, views, e);
}

int ex_fully_shard_blocks(tpdp_module *root, const char *prefix, int nblocks,
                          tpdp_comm *dp, const tpdp_fully_shard_options *fo,
                          tpdp_fsdp_unit **root_unit, ex_error *e) {
  for (int l = 0; l < nblocks; l++) {
    char path[96];
    snprintf(path, sizeof path, "%s%d", prefix, l);
    tpdp_module *block = NULL;
    tpdp_fsdp_unit *unit = NULL;
    EX_TRY(e, tpdp_module_get_submodule(root, path, &block));
    EX_TRY(e, tpdp_fully_shard(block, dp, fo, &unit));
  }
  EX_TRY(e, tpdp_fully_shard(root, dp, fo, root_unit));
  return 0;
}

int ex_hsdp_comms(tpdp_comm *dp, int replicate, tpdp_comm **shard,
                  tpdp_comm **replicate_comm, ex_error *e) {
  *shard = dp;
  *replicate_comm = NULL;
  if (replicate <= 1) return 0;
  int d = tpdp_comm_rank(dp), S = tpdp_comm_size(dp) / replicate;
  tpdp_comm *sh = NULL, *rep = NULL;
  tpdp_status st = tpdp_comm_split(dp, d / S, d, &sh);
  if (st == TPDP_SUCCESS) st = tpdp_comm_split(dp, d % S, d, &rep);
  if (st != TPDP_SUCCESS) {
    tpdp_comm_destroy(sh);
    return ex_fail(e, "tpdp_comm_split (--dp-replicate %d): %s", replicate,
                   tpdp_last_error());
  }
  *shard = sh;
  *replicate_comm = rep;
  return 0;
}

void ex_hsdp_comms_destroy(tpdp_comm *dp, tpdp_comm *shard,
                           tpdp_comm *replicate_comm) {
  if (shard != dp) tpdp_comm_destroy(shard);
  tpdp_comm_destroy(replicate_comm);
}

int ex_flag_float_dtype(const char *flag, const char *text, tpdp_dtype *out,
                        ex_error *e) {
  if (strcmp(text, "f32") == 0)
    *out = TPDP_F32;
  else if (strcmp(text, "bf16") == 0)
    *out = TPDP_BF16;
  else if (strcmp(text, "f16") == 0)
    *out = TPDP_F16;
  else
    return ex_fail(e, "%s: '%s' is not a dtype of the units (f32, bf16 or f16)",
                   flag, text);
  return 0;
}

void ex_fsdp_stats_line(const tpdp_fsdp_unit *root, int rank, int level,
                        int dp_shard, int dp_replicate, tpdp_dtype param_dtype,
                        tpdp_dtype reduce_dtype) {
  tpdp_fsdp_stats fs;
  if (tpdp_fsdp_get_stats(root, &fs) != TPDP_SUCCESS) return;
  char mixed[64] = "";
  if (param_dtype != TPDP_F32 || reduce_dtype != TPDP_F32)
    snprintf(mixed, sizeof mixed, " param_dtype %s, reduce_dtype %s,",
             tpdp_dtype_name(param_dtype), tpdp_dtype_name(reduce_dtype));
  char rep[80] = "";
  if (dp_replicate > 1)
    snprintf(rep, sizeof rep, ", %lld all-reduces over dp_replicate (%.1f MiB)",
             (long long)fs.allreduces, fs.bytes_allreduced / 1048576.0);
  printf(
      "[rank %d] fsdp: zero %d, dp_shard %d, dp_replicate %d,%s persistent "
      "%.1f MiB, peak transient %.1f MiB; per step %lld all-gathers (%.1f "
      "MiB), %lld reduce-scatters (%.1f MiB)%s\n",
      rank, level, dp_shard, dp_replicate, mixed,
      fs.persistent_bytes / 1048576.0, fs.peak_transient_bytes / 1048576.0,
      (long long)fs.allgathers, fs.bytes_allgathered / 1048576.0,
      (long long)fs.reduce_scatters, fs.bytes_reduce_scattered / 1048576.0,
      rep);
  fflush(stdout);
}

void ex_fsdp_traffic_line(const tpdp_comm *shard, const tpdp_comm *replicate,
                          int rank) {
  tpdp_comm_traffic s = {0, 0}, r = {0, 0};
  if (tpdp_comm_traffic_get(shard, &s) != TPDP_SUCCESS ||
      (replicate && tpdp_comm_traffic_get(replicate, &r) != TPDP_SUCCESS))
    return;
  printf(
      "[rank %d] fsdp traffic: dp_shard %llu bytes (%llu across hosts), "
      "dp_replicate %llu bytes (%llu across hosts)\n",
      rank, (unsigned long long)s.bytes, (unsigned long long)s.cross_host_bytes,
      (unsigned long long)r.bytes, (unsigned long long)r.cross_host_bytes);
  fflush(stdout);
}

void ex_peak_memory_line(tpdp_comm *comm, int print) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  int size = tpdp_comm_size(comm);
  int64_t *kb = calloc(2 * (size_t)size, sizeof *kb);
  int64_t mine[2] = {ru.ru_maxrss, pss_kb()};
  tpdp_tensor s = tpdp_tensor_1d(mine, TPDP_I64, 2);
  tpdp_tensor r = tpdp_tensor_1d(kb, TPDP_I64, 2 * (int64_t)size);
  if (kb == NULL || tpdp_allgather(comm, &s, &r) != TPDP_SUCCESS) {
    free(kb);
    return;
  }
  if (print) {
    printf("peak memory:");
    for (int i = 0; i < size; i++) {
      printf("%s rank %d %.1f MiB", i ? "," : "", i, kb[2 * i] / 1024.0);
      if (kb[2 * i + 1] >= 0)
        printf(" (PSS now %.1f MiB)", kb[2 * i + 1] / 1024.0);
    }
    printf("\n");
  }
  free(kb);
}
