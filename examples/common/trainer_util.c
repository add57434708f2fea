// SPDX-License-Identifier: BSD-3-Clause
/* examples/common/trainer_util.h: what the example trainers share. */
#include "examples/common/trainer_util.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
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

int ex_block_hooks(tpdp_module *root, const char *prefix, int layer, int event,
                   ex_error *e) {
  char path[96];
  snprintf(path, sizeof path, "%s%d", prefix, layer);
  tpdp_module *block = NULL;
  EX_TRY(e, tpdp_module_get_submodule(root, path, &block));
  switch (event) {
    case EX_BLOCK_FORWARD_BEGIN:
      EX_TRY(e, tpdp_module_forward_begin(block));
      break;
    case EX_BLOCK_FORWARD_END:
      EX_TRY(e, tpdp_module_forward_end(block));
      break;
    case EX_BLOCK_BACKWARD_BEGIN:
      EX_TRY(e, tpdp_module_backward_begin(block));
      break;
    default:
      EX_TRY(e, tpdp_module_backward_end(block));
      break;
  }
  return 0;
}

int ex_fully_shard_blocks(tpdp_module *root, const char *prefix, int nblocks,
                          tpdp_comm *dp, int level, tpdp_fsdp_unit **root_unit,
                          ex_error *e) {
  tpdp_fully_shard_options fo = tpdp_fully_shard_options_default();
  fo.zero_level = level;
  for (int l = 0; l < nblocks; l++) {
    char path[96];
    snprintf(path, sizeof path, "%s%d", prefix, l);
    tpdp_module *block = NULL;
    tpdp_fsdp_unit *unit = NULL;
    EX_TRY(e, tpdp_module_get_submodule(root, path, &block));
    EX_TRY(e, tpdp_fully_shard(block, dp, &fo, &unit));
  }
  EX_TRY(e, tpdp_fully_shard(root, dp, &fo, root_unit));
  return 0;
}

void ex_fsdp_stats_line(const tpdp_fsdp_unit *root, int rank, int level) {
  tpdp_fsdp_stats fs;
  if (tpdp_fsdp_get_stats(root, &fs) != TPDP_SUCCESS) return;
  printf(
      "[rank %d] fsdp: zero %d, persistent %.1f MiB, peak transient %.1f "
      "MiB; per step %lld all-gathers (%.1f MiB), %lld reduce-scatters "
      "(%.1f MiB)\n",
      rank, level, fs.persistent_bytes / 1048576.0,
      fs.peak_transient_bytes / 1048576.0, (long long)fs.allgathers,
      fs.bytes_allgathered / 1048576.0, (long long)fs.reduce_scatters,
      fs.bytes_reduce_scattered / 1048576.0);
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
