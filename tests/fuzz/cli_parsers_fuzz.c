// SPDX-License-Identifier: BSD-3-Clause
/* libFuzzer target: the option parsers every `tpdp` subcommand shares
 * (tools/cli/cli.h): integers, integer lists, bucket limits, shapes and
 * meshes, each given the input as its text. Their messages go to
 * /dev/null. What parses must hold: a shape is accepted by
 * tpdp_tensor_init (the same overflow rule) and shards over a 3-rank mesh
 * into chunks that tile it (torch.chunk, no wrapped sizes); a mesh has at
 * most CLI_MAX_RANKS ranks. */
#include "tests/fuzz/fuzz_util.h"
#include "tools/cli/cli.h"
#include "tpdp/tpdp.h"

static void check_shape(const int64_t *shape, int ndim, tpdp_dtype dtype) {
  static tpdp_mesh *mesh;
  if (mesh == NULL) {
    int64_t sizes[1] = {3};
    FUZZ_ASSERT(tpdp_mesh_create(NULL, 1, sizes, NULL, &mesh) == TPDP_SUCCESS,
                "%s", tpdp_last_error());
  }
  tpdp_device cpu = {TPDP_DEVICE_CPU, 0};
  tpdp_tensor t;
  FUZZ_ASSERT(
      tpdp_tensor_init(&t, NULL, dtype, cpu, ndim, shape) == TPDP_SUCCESS,
      "a parsed shape is refused: %s", tpdp_last_error());
  FUZZ_ASSERT(tpdp_tensor_numel(&t) >= 0, "numel %lld",
              (long long)tpdp_tensor_numel(&t));
  if (ndim == 0) return;
  for (int d = 0; d < ndim; d++) {
    tpdp_placement p = tpdp_shard(d);
    tpdp_spec *spec = NULL;
    FUZZ_ASSERT(tpdp_spec_create(mesh, &p, 1, ndim, shape, dtype, cpu, &spec) ==
                    TPDP_SUCCESS,
                "spec: %s", tpdp_last_error());
    int64_t next = 0; /* where the next non-empty chunk must start */
    for (int r = 0; r < 3; r++) {
      int64_t ls[TPDP_MAX_DIMS], off[TPDP_MAX_DIMS];
      FUZZ_ASSERT(tpdp_spec_local_shape(spec, r, ls, off) == TPDP_SUCCESS, "%s",
                  tpdp_last_error());
      FUZZ_ASSERT(ls[d] >= 0 && ls[d] <= shape[d], "rank %d size %lld of %lld",
                  r, (long long)ls[d], (long long)shape[d]);
      if (ls[d] == 0) {
        FUZZ_ASSERT(off[d] == shape[d], "empty chunk at %lld",
                    (long long)off[d]);
        continue;
      }
      FUZZ_ASSERT(off[d] == next, "rank %d starts at %lld, not %lld", r,
                  (long long)off[d], (long long)next);
      next += ls[d];
    }
    FUZZ_ASSERT(next == shape[d], "chunks cover %lld of %lld", (long long)next,
                (long long)shape[d]);
    tpdp_spec_destroy(spec);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static FILE *devnull;
  if (devnull == NULL) {
    devnull = fopen("/dev/null", "w");
    FUZZ_ASSERT(devnull != NULL, "cannot open /dev/null");
    cli_set_message_stream(devnull);
  }
  char *text = fuzz_text(data, size);
  if (text == NULL) return 0;
  int64_t v = 0;
  if (cli_parse_int(text, INT64_MIN, INT64_MAX, &v) == CLI_INT_OK) {
    int64_t w = 0;
    FUZZ_ASSERT(cli_parse_int(text, v, v, &w) == CLI_INT_OK && w == v,
                "%lld does not parse within [itself, itself]", (long long)v);
  }
  cli_int_option("fuzz", "--n", text, 1, 4096, &v);
  int64_t list[TPDP_MAX_DIMS];
  int n = 0;
  cli_int_list_option("fuzz", "--list", text, "sizes", "10,7", INT64_MIN,
                      INT64_MAX, 1, TPDP_MAX_DIMS, list, &n);
  size_t *limits = NULL;
  int64_t nlimits = 0;
  if (cli_parse_limits("fuzz", text, &limits, &nlimits) == 0) {
    for (int64_t k = 0; k < nlimits; k++)
      FUZZ_ASSERT(limits[k] > 0 && limits[k] <= (size_t)INT64_MAX,
                  "limit %lld is %zu", (long long)k, limits[k]);
    free(limits);
  }
  static const tpdp_dtype dtypes[3] = {TPDP_U8, TPDP_F32, TPDP_F64};
  for (int i = 0; i < 3; i++) {
    int ndim = 0;
    int64_t shape[TPDP_MAX_DIMS];
    if (cli_shape_option("fuzz", "--shape", text, dtypes[i], &ndim, shape) == 0)
      check_shape(shape, ndim, dtypes[i]);
  }
  for (int sizes = 0; sizes < 2; sizes++) {
    tpdp_mesh *mesh = NULL;
    if (cli_mesh_create("fuzz", text, sizes, &mesh) == 0) {
      FUZZ_ASSERT(mesh != NULL && tpdp_mesh_size(mesh) >= 1 &&
                      tpdp_mesh_size(mesh) <= CLI_MAX_RANKS,
                  "mesh of %lld ranks", (long long)tpdp_mesh_size(mesh));
      tpdp_mesh_destroy(mesh);
    }
  }
  free(text);
  return 0;
}
