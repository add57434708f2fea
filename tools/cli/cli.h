// SPDX-License-Identifier: BSD-3-Clause
/* Helpers shared by the `tpdp` subcommands: help and usage errors, option
 * values, integers read with overflow checks, bucket limits, meshes under
 * the size limit every subcommand applies. The functions that can fail
 * print "tpdp CMD: <message>" and a pointer to --help on stderr and return
 * 2 (the usage-error exit status); 0 on success. */
#ifndef TPDP_TOOLS_CLI_CLI_H
#define TPDP_TOOLS_CLI_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tools/planning/plan.h"
#include "tpdp/comm.h"

/* The most ranks of any mesh a subcommand takes (`tpdp mesh` and `tpdp
 * shard` print a line per rank, `tpdp plan` a plan per tp rank): one limit
 * for all, the planning library's. */
#define CLI_MAX_RANKS PLANNING_PLAN_MAX_RANKS

/* Where the helpers print their messages: stderr (the default, also after
 * f = NULL) or f. Not thread-safe; the fuzz target sends them to
 * /dev/null. */
void cli_set_message_stream(FILE *f);

/* 1 if any argv[i] (i >= 1) is -h or --help. */
int cli_wants_help(int argc, char **argv);

/* Print "tpdp CMD: <fmt with arg>" and a pointer to --help on stderr;
 * returns 2. */
int cli_usage_error(const char *cmd, const char *fmt, const char *arg);

/* Match argv[*i] against option `name` as "--name value" or "--name=value":
 * returns the value (advancing *i past a separate value) or NULL if
 * argv[*i] is another option; sets *missing when the value is absent. */
const char *cli_opt_value(int argc, char **argv, int *i, const char *name,
                          int *missing);

/* An option that takes a value, for cli_options. */
typedef struct {
  const char *name;   /* "--model" */
  const char **value; /* where its value goes; left as is when not given */
  int required;       /* a usage error when *value is still NULL after */
} cli_option;

/* Read argv[1..argc) as the options opts[0..nopts) (through cli_opt_value)
 * and the flag --json (sets *json). Messages: "option --model needs a
 * value", "unknown argument '--x'", then "--model is required" for the
 * first required option left NULL. */
int cli_options(const char *cmd, int argc, char **argv, const cli_option *opts,
                int nopts, int *json);

/* Decimal integer text (an optional '-', digits, nothing else) read as an
 * integer, never through a double: CLI_INT_OK with *out set, or why not. */
typedef enum {
  CLI_INT_OK = 0,
  CLI_INT_NOT_INT,   /* not an integer */
  CLI_INT_TOO_SMALL, /* below min (also: below INT64_MIN) */
  CLI_INT_TOO_LARGE  /* above max (also: above INT64_MAX) */
} cli_int_result;
cli_int_result cli_parse_int(const char *text, int64_t min, int64_t max,
                             int64_t *out);

/* Option `opt`'s value `text` as an integer in [min, max]. Messages:
 * "--stages 'four' is not an integer", "--stages 99999999999 is too large
 * (max 2147483647)", "--local-ranks 0 is too small (min 1)". */
int cli_int_option(const char *cmd, const char *opt, const char *text,
                   int64_t min, int64_t max, int64_t *out);

/* Option `opt`'s value `text` as a comma-separated list of at most `maxn`
 * integers in [min, max] into out[0..*n). `items` names them in messages
 * ("sizes"): "bad --shape value 'x': expected sizes like 10,7" (with
 * `example`), "bad --limits-bytes value '0': limits must be > 0", "bad
 * --shape value '99999999999999999999': too large (max N)", "--shape has
 * more than 8 sizes". An empty `text` is an empty list when `maxn` allows
 * it (allow_empty). */
int cli_int_list_option(const char *cmd, const char *opt, const char *text,
                        const char *items, const char *example, int64_t min,
                        int64_t max, int allow_empty, int maxn, int64_t *out,
                        int *n);

/* Option `opt`'s value `text` as a tensor shape: at most TPDP_MAX_DIMS
 * sizes >= 0 (an empty text is a scalar) whose byte size as `dtype`
 * elements fits in int64, zero sizes aside (the product of the non-zero
 * sizes, as tpdp_tensor_init requires). Messages as cli_int_list_option's,
 * and "--shape '2305843009213693951,2': the element count overflows: an
 * f32 tensor's bytes must fit in int64 (max 2305843009213693951
 * elements)". */
int cli_shape_option(const char *cmd, const char *opt, const char *text,
                     tpdp_dtype dtype, int *ndim, int64_t *shape);

/* --limits-bytes "L1,L2,..." into a new array (*out, free()) of *n bucket
 * size limits, each > 0. */
int cli_parse_limits(const char *cmd, const char *text, size_t **out,
                     int64_t *n);

/* A layout-only mesh from `text`, named dims ("dp=2,tp=3", through
 * tpdp_mesh_create_from_string) or, when allow_sizes, bare sizes ("2,3"),
 * refused when it has more than CLI_MAX_RANKS ranks ("mesh 'tp=100000000'
 * has 100000000 ranks: too large (max 1048576)"). Destroy *out with
 * tpdp_mesh_destroy. */
int cli_mesh_create(const char *cmd, const char *text, int allow_sizes,
                    tpdp_mesh **out);

#endif
