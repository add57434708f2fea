// SPDX-License-Identifier: BSD-3-Clause
/* `tpdp buckets`: print the DDP bucket assignment of a list of tensors,
 * exactly as tpdp_bucket_assign returns it (tensors in the given order). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/cli/cli.h"
#include "tools/cli/commands.h"
#include "tpdp/reducer.h"

static void cmd_buckets_usage(void) {
  printf(
      "usage: tpdp buckets [--json] [--limits-bytes L1,L2,...] DTYPE:NUMEL "
      "...\n\n"
      "Assign the given tensors (in the given order) to gradient buckets as\n"
      "PyTorch DDP's compute_bucket_assignment_by_size does: one open bucket\n"
      "per dtype; a bucket closes once its bytes reach the current limit;\n"
      "each dtype then moves on to the next limit and stays on the last.\n"
      "Buckets are listed by their smallest tensor index.\n\n"
      "  DTYPE          f32 f64 f16 bf16 i32 i64 u8\n"
      "  NUMEL          element count (>= 0)\n"
      "  --limits-bytes bucket size limits in bytes (default "
      "1048576,26214400)\n"
      "  --json         print {\"buckets\":[{\"params\":[...],\"bytes\":N,"
      "\"limit\":N},...]}\n\n"
      "example: tpdp buckets --json f32:1000 f16:300 f32:100\n");
}

/* Element counts are bounded so that any tensor's bytes (8 per element at
 * most) fit in int64. */
#define BUCKETS_MAX_NUMEL (INT64_MAX / 8)

static int cmd_buckets(int argc, char **argv) {
  int json = 0;
  size_t default_limits[2] = {TPDP_BUCKET_FIRST_BYTES, TPDP_BUCKET_CAP_BYTES};
  size_t *limits = NULL;
  int64_t nlimits = 0;
  tpdp_tensor *tensors = NULL;
  int64_t n = 0;
  int rc = 0;
  tensors =
      (tpdp_tensor *)calloc((size_t)(argc > 1 ? argc : 1), sizeof *tensors);
  if (tensors == NULL) return cli_usage_error("buckets", "%s", "out of memory");
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--json") == 0) {
      json = 1;
    } else if (strcmp(a, "--limits-bytes") == 0 ||
               strncmp(a, "--limits-bytes=", 15) == 0) {
      const char *val = a[14] == '=' ? a + 15 : NULL;
      if (val == NULL) {
        if (i + 1 >= argc) {
          rc = cli_usage_error("buckets", "%s",
                               "--limits-bytes needs a value, e.g. "
                               "--limits-bytes 1048576,26214400");
          goto done;
        }
        val = argv[++i];
      }
      free(limits);
      limits = NULL;
      rc = cli_parse_limits("buckets", val, &limits, &nlimits);
      if (rc != 0) goto done;
    } else if (a[0] == '-' && a[1] != '\0') {
      rc = cli_usage_error("buckets", "unknown option '%s'", a);
      goto done;
    } else {
      const char *colon = strchr(a, ':');
      if (colon == NULL) {
        rc = cli_usage_error("buckets",
                             "bad tensor '%s': expected DTYPE:NUMEL, e.g. "
                             "f32:1000",
                             a);
        goto done;
      }
      char dname[16];
      size_t dl = (size_t)(colon - a);
      if (dl == 0 || dl >= sizeof dname) {
        rc = cli_usage_error(
            "buckets", "bad dtype in '%s': use f32 f64 f16 bf16 i32 i64 u8", a);
        goto done;
      }
      memcpy(dname, a, dl);
      dname[dl] = '\0';
      tpdp_dtype dt;
      if (tpdp_dtype_parse(dname, &dt) != TPDP_SUCCESS) {
        rc = cli_usage_error("buckets",
                             "unknown dtype in '%s': use f32 f64 f16 bf16 i32 "
                             "i64 u8",
                             a);
        goto done;
      }
      int64_t numel = 0;
      cli_int_result r = cli_parse_int(colon + 1, 0, BUCKETS_MAX_NUMEL, &numel);
      if (r != CLI_INT_OK) {
        char fmt[128];
        if (r == CLI_INT_TOO_LARGE)
          snprintf(fmt, sizeof fmt,
                   "bad element count in '%%s': too large (max %lld)",
                   (long long)BUCKETS_MAX_NUMEL);
        else
          snprintf(fmt, sizeof fmt,
                   "bad element count in '%%s': expected an integer >= 0");
        rc = cli_usage_error("buckets", fmt, a);
        goto done;
      }
      int64_t shape[1] = {numel};
      tpdp_device cpu = {TPDP_DEVICE_CPU, 0};
      tpdp_tensor_init(&tensors[n], NULL, dt, cpu, 1, shape);
      n++;
    }
  }
  if (n == 0) {
    rc = cli_usage_error("buckets", "%s",
                         "no tensors given: list them as DTYPE:NUMEL, e.g. "
                         "tpdp buckets f32:1000 f16:300");
    goto done;
  }
  /* Bucket byte counts are sums of tensor sizes: keep every sum in int64. */
  int64_t total = 0;
  for (int64_t k = 0; k < n; k++)
    if (__builtin_add_overflow(total, (int64_t)tpdp_tensor_nbytes(&tensors[k]),
                               &total)) {
      char what[32];
      snprintf(what, sizeof what, "%lld", (long long)k);
      rc = cli_usage_error("buckets",
                           "the tensors' total size overflows int64 at "
                           "tensor %s",
                           what);
      goto done;
    }
  const size_t *lim = limits ? limits : default_limits;
  int64_t nl = limits ? nlimits : 2;
  tpdp_bucket_assignment as;
  tpdp_status st = tpdp_bucket_assign(tensors, n, lim, nl, NULL, &as);
  if (st != TPDP_SUCCESS) {
    fprintf(stderr, "tpdp buckets: %s\n", tpdp_last_error());
    rc = 1;
    goto done;
  }
  if (json) {
    printf("{\"buckets\":[");
    for (int64_t b = 0; b < as.nbuckets; b++) {
      printf("%s{\"params\":[", b ? "," : "");
      for (int64_t k = as.offsets[b]; k < as.offsets[b + 1]; k++)
        printf("%s%lld", k > as.offsets[b] ? "," : "",
               (long long)as.indices[k]);
      printf("],\"bytes\":%zu,\"limit\":%zu}", as.bytes[b], as.limits[b]);
    }
    printf("]}\n");
  } else {
    printf("%lld tensors in %lld buckets (limits:", (long long)n,
           (long long)as.nbuckets);
    for (int64_t k = 0; k < nl; k++) printf(" %zu", lim[k]);
    printf(" bytes)\n\n");
    printf("%-7s %-6s %-14s %-14s %s\n", "bucket", "dtype", "bytes", "limit",
           "params");
    for (int64_t b = 0; b < as.nbuckets; b++) {
      printf("%-7lld %-6s %-14zu %-14zu ", (long long)b,
             tpdp_dtype_name(tensors[as.indices[as.offsets[b]]].dtype),
             as.bytes[b], as.limits[b]);
      for (int64_t k = as.offsets[b]; k < as.offsets[b + 1]; k++)
        printf("%s%lld", k > as.offsets[b] ? "," : "",
               (long long)as.indices[k]);
      printf("\n");
    }
  }
  tpdp_bucket_assignment_free(&as);
done:
  free(limits);
  free(tensors);
  return rc;
}

const cli_command cli_cmd_buckets = {
    "buckets", "show DDP-style gradient bucket assignment", cmd_buckets,
    cmd_buckets_usage};
