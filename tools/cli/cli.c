// SPDX-License-Identifier: BSD-3-Clause
/* Helpers shared by the `tpdp` subcommands (cli.h). */
#include "tools/cli/cli.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static FILE *message_stream;

void cli_set_message_stream(FILE *f) { message_stream = f; }

/* Where messages go: stderr unless cli_set_message_stream said otherwise
 * (stderr is not a constant, so it cannot be the initial value). */
static FILE *messages(void) { return message_stream ? message_stream : stderr; }

int cli_wants_help(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) return 1;
  return 0;
}

int cli_usage_error(const char *cmd, const char *fmt, const char *arg) {
  fprintf(messages(), "tpdp %s: ", cmd);
  fprintf(messages(), fmt, arg);
  fprintf(messages(), "\n(see tpdp %s --help)\n", cmd);
  return 2;
}

const char *cli_opt_value(int argc, char **argv, int *i, const char *name,
                          int *missing) {
  size_t n = strlen(name);
  if (strncmp(argv[*i], name, n) != 0) return NULL;
  if (argv[*i][n] == '=') return argv[*i] + n + 1;
  if (argv[*i][n] != '\0') return NULL;
  if (*i + 1 >= argc) {
    *missing = 1;
    return NULL;
  }
  return argv[++*i];
}

int cli_options(const char *cmd, int argc, char **argv, const cli_option *opts,
                int nopts, int *json) {
  for (int i = 1; i < argc; i++) {
    int missing = 0, k = 0;
    const char *v = NULL;
    while (k < nopts &&
           (v = cli_opt_value(argc, argv, &i, opts[k].name, &missing)) == NULL)
      k++;
    if (v != NULL)
      *opts[k].value = v;
    else if (missing)
      return cli_usage_error(cmd, "option %s needs a value", argv[i]);
    else if (strcmp(argv[i], "--json") == 0)
      *json = 1;
    else
      return cli_usage_error(cmd, "unknown argument '%s'", argv[i]);
  }
  for (int k = 0; k < nopts; k++)
    if (opts[k].required && *opts[k].value == NULL)
      return cli_usage_error(cmd, "%s is required", opts[k].name);
  return 0;
}

cli_int_result cli_parse_int(const char *text, int64_t min, int64_t max,
                             int64_t *out) {
  const char *digits = text[0] == '-' ? text + 1 : text;
  if (*digits == '\0') return CLI_INT_NOT_INT;
  for (const char *c = digits; *c; c++)
    if (*c < '0' || *c > '9') return CLI_INT_NOT_INT;
  errno = 0;
  long long v = strtoll(text, NULL, 10); /* saturates, with ERANGE */
  if (errno == ERANGE)
    return text[0] == '-' ? CLI_INT_TOO_SMALL : CLI_INT_TOO_LARGE;
  if (v < min) return CLI_INT_TOO_SMALL;
  if (v > max) return CLI_INT_TOO_LARGE;
  *out = v;
  return CLI_INT_OK;
}

/* "too large (max N)" / "too small (min N)" for a parse result. */
static void range_text(cli_int_result r, int64_t min, int64_t max, char *buf,
                       size_t len) {
  if (r == CLI_INT_TOO_LARGE)
    snprintf(buf, len, "too large (max %" PRId64 ")", max);
  else
    snprintf(buf, len, "too small (min %" PRId64 ")", min);
}

int cli_int_option(const char *cmd, const char *opt, const char *text,
                   int64_t min, int64_t max, int64_t *out) {
  cli_int_result r = cli_parse_int(text, min, max, out);
  if (r == CLI_INT_OK) return 0;
  char why[96] = "is not an integer";
  if (r != CLI_INT_NOT_INT) {
    char range[80];
    range_text(r, min, max, range, sizeof range);
    snprintf(why, sizeof why, "is %s", range);
  }
  fprintf(messages(), "tpdp %s: %s '%s' %s\n(see tpdp %s --help)\n", cmd, opt,
          text, why, cmd);
  return 2;
}

int cli_int_list_option(const char *cmd, const char *opt, const char *text,
                        const char *items, const char *example, int64_t min,
                        int64_t max, int allow_empty, int maxn, int64_t *out,
                        int *n) {
  *n = 0;
  if (*text == '\0' && allow_empty) return 0;
  const char *p = text;
  for (;;) {
    char *tok = strndup(p, strcspn(p, ","));
    if (tok == NULL) return cli_usage_error(cmd, "%s", "out of memory");
    int64_t v = 0;
    cli_int_result r = cli_parse_int(tok, min, max, &v);
    char why[160];
    if (r == CLI_INT_NOT_INT)
      snprintf(why, sizeof why, "expected %s like %s", items, example);
    else if (r == CLI_INT_TOO_SMALL && min == 1)
      snprintf(why, sizeof why, "%s must be > 0", items);
    else if (r != CLI_INT_OK)
      range_text(r, min, max, why, sizeof why);
    if (r != CLI_INT_OK)
      fprintf(messages(),
              "tpdp %s: bad %s value '%s': %s\n(see tpdp %s --help)\n", cmd,
              opt, *tok ? tok : "(empty)", why, cmd);
    free(tok);
    if (r != CLI_INT_OK) return 2;
    if (*n >= maxn) {
      fprintf(messages(),
              "tpdp %s: %s '%s' has more than %d %s\n(see tpdp %s --help)\n",
              cmd, opt, text, maxn, items, cmd);
      return 2;
    }
    out[(*n)++] = v;
    p += strcspn(p, ",");
    if (*p == '\0') break;
    p++;
  }
  return 0;
}

int cli_parse_limits(const char *cmd, const char *text, size_t **out,
                     int64_t *n) {
  int cap = 1;
  for (const char *s = text; *s; s++)
    if (*s == ',') cap++;
  int64_t *v = calloc((size_t)cap, sizeof *v);
  size_t *lim = calloc((size_t)cap, sizeof *lim);
  int got = 0, rc = 2;
  if (v == NULL || lim == NULL)
    cli_usage_error(cmd, "%s", "out of memory");
  else
    rc = cli_int_list_option(cmd, "--limits-bytes", text, "limits",
                             "1048576,26214400", 1, INT64_MAX, 0, cap, v, &got);
  for (int k = 0; rc == 0 && k < got; k++) lim[k] = (size_t)v[k];
  free(v);
  if (rc != 0) {
    free(lim);
    return rc;
  }
  *out = lim;
  *n = got;
  return 0;
}

int cli_mesh_create(const char *cmd, const char *text, int allow_sizes,
                    tpdp_mesh **out) {
  tpdp_status st;
  *out = NULL;
  if (strchr(text, '=') != NULL || !allow_sizes) {
    st = tpdp_mesh_create_from_string(NULL, text, out);
  } else {
    int64_t sizes[TPDP_MAX_DIMS];
    int n = 0;
    int rc = cli_int_list_option(cmd, "--mesh", text, "sizes",
                                 "2,3 (or named dims like dp=2,tp=3)", 1,
                                 INT64_MAX, 0, TPDP_MAX_DIMS, sizes, &n);
    if (rc != 0) return rc;
    /* The rank count first: the library would name the int limit. */
    int64_t world = 1;
    for (int d = 0; d < n; d++)
      if (__builtin_mul_overflow(world, sizes[d], &world)) world = INT64_MAX;
    if (world > CLI_MAX_RANKS) {
      fprintf(messages(),
              "tpdp %s: mesh '%s' has %s%" PRId64
              " ranks: too large (max %d)\n",
              cmd, text, world == INT64_MAX ? "more than " : "", world,
              CLI_MAX_RANKS);
      return 2;
    }
    st = tpdp_mesh_create(NULL, n, sizes, NULL, out);
  }
  if (st != TPDP_SUCCESS) {
    fprintf(messages(), "tpdp %s: bad --mesh: %s\n", cmd, tpdp_last_error());
    return 2;
  }
  int64_t world = tpdp_mesh_size(*out);
  if (world > CLI_MAX_RANKS) {
    fprintf(messages(),
            "tpdp %s: mesh '%s' has %" PRId64 " ranks: too large (max %d)\n",
            cmd, text, world, CLI_MAX_RANKS);
    tpdp_mesh_destroy(*out);
    *out = NULL;
    return 2;
  }
  return 0;
}

int cli_shape_option(const char *cmd, const char *opt, const char *text,
                     tpdp_dtype dtype, int *ndim, int64_t *shape) {
  size_t es = tpdp_dtype_size(dtype);
  int64_t max = INT64_MAX / (int64_t)(es ? es : 1);
  int rc = cli_int_list_option(cmd, opt, text, "sizes", "10,7", 0, max, 1,
                               TPDP_MAX_DIMS, shape, ndim);
  if (rc != 0) return rc;
  /* The non-zero sizes: a size of 0 empties the tensor but leaves the
   * strides of the others to compute (tpdp_tensor_init's rule). */
  int64_t numel = 1;
  for (int d = 0; d < *ndim; d++)
    if (shape[d] != 0 &&
        (__builtin_mul_overflow(numel, shape[d], &numel) || numel > max)) {
      fprintf(messages(),
              "tpdp %s: %s '%s': the element count overflows: its bytes "
              "as %s must fit in int64 (max %" PRId64
              " elements)\n(see tpdp %s --help)\n",
              cmd, opt, text, tpdp_dtype_name(dtype), max, cmd);
      return 2;
    }
  return 0;
}
