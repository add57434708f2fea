// SPDX-License-Identifier: BSD-3-Clause
/* The reducer's create-time checks (see reducer_internal.h): the options'
 * size and values, the parameters on this rank, and what every rank must
 * agree on before any rank goes on (so that one rank's bad input fails
 * every rank instead of stranding the others in a collective). */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/mem.h"
#include "dp/host_collectives.h"
#include "dp/reducer_internal.h"

/* xxHash as a header-only library (as ckpt/): no run-time dependency. */
#define XXH_INLINE_ALL
#include <xxhash.h>

#define DESC_LEN (2 + TPDP_MAX_DIMS) /* dtype, ndim, shape[8] */

/* ------------------------------------------------------------ options */

#define DP_FIELD(f)                                  \
  {                                                  \
    offsetof(tpdp_reducer_options, f),               \
        sizeof(((const tpdp_reducer_options *)0)->f) \
  }

/* Every field after the header, in layout order: a smaller (older) struct
 * supplies those that end within its size. */
static const struct {
  size_t off, len;
} fields[] = {
    DP_FIELD(first_bucket_bytes),
    DP_FIELD(bucket_cap_bytes),
    DP_FIELD(gradient_as_bucket_view),
    DP_FIELD(find_unused_parameters),
    DP_FIELD(static_graph),
    DP_FIELD(comm_hook),
    DP_FIELD(divide_factor),
    DP_FIELD(hook_fn),
    DP_FIELD(hook_user_data),
    DP_FIELD(producer_stream),
    DP_FIELD(comm_thread),
    DP_FIELD(module),
    DP_FIELD(broadcast_from_rank0),
};

tpdp_status dp_options_resolve(const tpdp_reducer_options *in,
                               tpdp_reducer_options *out) {
  *out = tpdp_reducer_options_default();
  if (in == NULL) return TPDP_SUCCESS;
  const size_t header = offsetof(tpdp_reducer_options, first_bucket_bytes);
  if (in->size == 0)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "options->size is 0: initialise the options with "
                    "TPDP_REDUCER_OPTIONS_INIT or "
                    "tpdp_reducer_options_default() (size %zu)",
                    sizeof(tpdp_reducer_options));
  if (in->size < header || in->size > sizeof(tpdp_reducer_options))
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "options->size is %zu bytes but this library's "
                    "tpdp_reducer_options has %zu (and no version was ever "
                    "smaller than %zu): the caller was built against another "
                    "tpdp, or the options were not initialised with "
                    "TPDP_REDUCER_OPTIONS_INIT",
                    in->size, sizeof(tpdp_reducer_options), header);
  if (in->version == 0 || in->version > TPDP_REDUCER_OPTIONS_VERSION)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "options->version is %u but this library knows versions "
                    "1 to %u of tpdp_reducer_options",
                    in->version, TPDP_REDUCER_OPTIONS_VERSION);
  for (size_t k = 0; k < sizeof fields / sizeof fields[0]; k++)
    if (fields[k].off + fields[k].len <= in->size)
      memcpy((char *)out + fields[k].off, (const char *)in + fields[k].off,
             fields[k].len);
  /* Version 1 always broadcast rank 0's parameters: a caller built against
   * it keeps that behaviour. */
  if (offsetof(tpdp_reducer_options, broadcast_from_rank0) +
          sizeof out->broadcast_from_rank0 >
      in->size)
    out->broadcast_from_rank0 = 1;
  return TPDP_SUCCESS;
}

/* ------------------------------------------------------------ local */

static tpdp_status check_options(const tpdp_reducer_options *o) {
  if (o->first_bucket_bytes == 0 || o->bucket_cap_bytes == 0)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "bucket size limits must be > 0 bytes (first_bucket_bytes "
                    "= %zu, bucket_cap_bytes = %zu)",
                    o->first_bucket_bytes, o->bucket_cap_bytes);
  if (!isfinite(o->divide_factor))
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "divide_factor %g is not a finite number: gradients "
                    "would all become %s; use a factor > 0 (or 0 for the "
                    "communicator size)",
                    o->divide_factor, isnan(o->divide_factor) ? "NaN" : "0");
  if (o->divide_factor < 0.0)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "divide_factor %g must be > 0 (or 0 for the "
                    "communicator size)",
                    o->divide_factor);
  if ((int)o->comm_hook < 0 || o->comm_hook > TPDP_REDUCER_HOOK_USER)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT, "unknown comm hook %d",
                    (int)o->comm_hook);
  if (o->comm_hook == TPDP_REDUCER_HOOK_USER && o->hook_fn == NULL)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "comm_hook is TPDP_REDUCER_HOOK_USER but hook_fn is NULL");
  return TPDP_SUCCESS;
}

static const char *fqn_or_empty(const tpdp_reducer_param *p) {
  return p->fqn ? p->fqn : "";
}

tpdp_status dp_check_local(tpdp_comm *comm, const tpdp_reducer_param *params,
                           int64_t n, const tpdp_reducer_options *o) {
  if (n <= 0)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "empty parameter list (nparams = %lld): a reducer needs "
                    "at least one parameter",
                    (long long)n);
  if (params == NULL)
    return TPDP_ERR(TPDP_ERR_NULL_POINTER, "argument 'params' is NULL");
  CHECK(check_options(o));
  char a[64], b[64];
  for (int64_t i = 0; i < n; i++) {
    const tpdp_reducer_param *p = &params[i];
    const char *f = fqn_or_empty(p);
    if (!tpdp_dtype_is_float(p->param.dtype))
      return TPDP_ERR(TPDP_ERR_DTYPE_MISMATCH,
                      "parameter %lld '%s' has dtype %s: gradients must be "
                      "floating point (f32, f64, f16, bf16)",
                      (long long)i, f, tpdp_dtype_name(p->param.dtype));
    if (p->param.ndim < 0 || p->param.ndim > TPDP_MAX_DIMS)
      return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                      "parameter %lld '%s' has ndim %d", (long long)i, f,
                      p->param.ndim);
    if (!tpdp_device_equal(p->param.device, params[0].param.device)) {
      tpdp_device_format(params[0].param.device, a, sizeof a);
      tpdp_device_format(p->param.device, b, sizeof b);
      return TPDP_ERR(TPDP_ERR_DEVICE_MISMATCH,
                      "parameters on mixed devices: parameter 0 '%s' is on %s "
                      "but parameter %lld '%s' is on %s; one reducer serves "
                      "one device (one DP communicator per device)",
                      fqn_or_empty(&params[0]), a, (long long)i, f, b);
    }
    if (!tpdp_device_equal(p->grad.device, p->param.device)) {
      tpdp_device_format(p->param.device, a, sizeof a);
      tpdp_device_format(p->grad.device, b, sizeof b);
      return TPDP_ERR(TPDP_ERR_DEVICE_MISMATCH,
                      "parameter %lld '%s' is on %s but its gradient on %s",
                      (long long)i, f, a, b);
    }
  }
  char pn[256];
  snprintf(pn, sizeof pn, "parameter 0 '%s'", fqn_or_empty(&params[0]));
  CHECK(core_mem_supported(params[0].param.device, pn));
  if (params[0].param.device.type != tpdp_comm_device_type(comm)) {
    tpdp_device_format(params[0].param.device, a, sizeof a);
    return TPDP_ERR(
        TPDP_ERR_DEVICE_MISMATCH,
        "parameters are on %s but communicator %s (%s) moves %s memory", a,
        tpdp_comm_name(comm), tpdp_comm_backend(comm),
        tpdp_comm_device_type(comm) == TPDP_DEVICE_CPU ? "host" : "device");
  }
  for (int64_t i = 0; i < n; i++) {
    const tpdp_reducer_param *p = &params[i];
    const char *f = fqn_or_empty(p);
    int64_t numel = tpdp_tensor_numel(&p->param);
    if (numel < 0)
      return TPDP_ERR(TPDP_ERR_BAD_DIM_SIZE,
                      "parameter %lld '%s' has a negative dimension",
                      (long long)i, f);
    if (!tpdp_tensor_is_contiguous(&p->param))
      return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                      "parameter %lld '%s' is not contiguous", (long long)i, f);
    if (numel > 0 && p->param.data == NULL)
      return TPDP_ERR(TPDP_ERR_NULL_POINTER,
                      "parameter %lld '%s' has NULL data", (long long)i, f);
    if (p->grad.dtype != p->param.dtype)
      return TPDP_ERR(TPDP_ERR_DTYPE_MISMATCH,
                      "parameter %lld '%s' is %s but its gradient is %s",
                      (long long)i, f, tpdp_dtype_name(p->param.dtype),
                      tpdp_dtype_name(p->grad.dtype));
    if (!tpdp_tensor_same_shape(&p->grad, &p->param)) {
      tpdp_shape_format(p->param.ndim, p->param.shape, a, sizeof a);
      tpdp_shape_format(p->grad.ndim, p->grad.shape, b, sizeof b);
      return TPDP_ERR(TPDP_ERR_SHAPE_MISMATCH,
                      "parameter %lld '%s' has shape %s but its gradient %s",
                      (long long)i, f, a, b);
    }
    if (numel > 0 && p->grad.data == NULL && !o->gradient_as_bucket_view)
      return TPDP_ERR(TPDP_ERR_NULL_POINTER,
                      "parameter %lld '%s' has a NULL gradient (copy mode "
                      "needs the caller's gradient buffers)",
                      (long long)i, f);
  }
  return TPDP_SUCCESS;
}

/* ------------------------------------------------------------ across */

static void fill_desc(const tpdp_tensor *t, int64_t *d) {
  d[0] = t->dtype;
  d[1] = t->ndim;
  for (int k = 0; k < TPDP_MAX_DIMS; k++)
    d[2 + k] = k < t->ndim ? t->shape[k] : 0;
}

static void format_desc(const int64_t *d, char *buf, size_t len) {
  char shape[128];
  int64_t sh[TPDP_MAX_DIMS];
  int nd = (int)d[1];
  if (nd < 0 || nd > TPDP_MAX_DIMS) nd = 0;
  for (int k = 0; k < nd; k++) sh[k] = d[2 + k];
  tpdp_shape_format(nd, sh, shape, sizeof shape);
  snprintf(buf, len, "%s %s", tpdp_dtype_name((tpdp_dtype)d[0]), shape);
}

/* The options every rank must pass alike, gathered with the parameter count:
 * differing bucket limits give different bucket sizes on the ranks (their
 * allreduces no longer match), a differing hook, divide factor or mode
 * different gradients. hook_fn, hook_user_data, producer_stream and module
 * are local (pointers into each process) and not compared. */
static const char *const agreed_names[] = {
    "first_bucket_bytes",     "bucket_cap_bytes", "gradient_as_bucket_view",
    "find_unused_parameters", "static_graph",     "comm_hook",
    "divide_factor",          "comm_thread",      "broadcast_from_rank0"};
#define NAGREED ((int)(sizeof agreed_names / sizeof agreed_names[0]))
#define HDR_LEN (1 + NAGREED) /* parameter count, then the options */
#define AGREED_DIVIDE 6       /* index of divide_factor (its bits) */
#define AGREED_HOOK 5

static void fill_header(int64_t n, const tpdp_reducer_options *o, int64_t *h) {
  h[0] = n;
  int64_t *v = h + 1;
  v[0] = (int64_t)o->first_bucket_bytes;
  v[1] = (int64_t)o->bucket_cap_bytes;
  v[2] = o->gradient_as_bucket_view;
  v[3] = o->find_unused_parameters;
  v[4] = o->static_graph;
  v[AGREED_HOOK] = (int64_t)o->comm_hook;
  memcpy(&v[AGREED_DIVIDE], &o->divide_factor, sizeof(double));
  v[7] = o->comm_thread;
  v[8] = o->broadcast_from_rank0;
}

static void format_option(int k, int64_t v, char *buf, size_t len) {
  static const char *const hooks[] = {"NONE", "BF16", "F16", "USER"};
  if (k == AGREED_DIVIDE) {
    double d;
    memcpy(&d, &v, sizeof d);
    snprintf(buf, len, "%g", d);
  } else if (k == AGREED_HOOK && v >= 0 && v <= TPDP_REDUCER_HOOK_USER) {
    snprintf(buf, len, "TPDP_REDUCER_HOOK_%s", hooks[v]);
  } else if (k <= 1) {
    snprintf(buf, len, "%llu", (unsigned long long)v);
  } else {
    snprintf(buf, len, "%lld", (long long)v);
  }
}

/* "rank 0 has 100, rank 1 has 64, ..." for option k (at most 8 ranks). */
static void list_option(const int64_t *all, int size, int k, char *buf,
                        size_t len) {
  size_t at = 0;
  buf[0] = '\0';
  for (int q = 0; q < size && at < len; q++) {
    if (q == 8) {
      snprintf(buf + at, len - at, ", ... (%d ranks)", size);
      break;
    }
    char v[64];
    format_option(k, all[(size_t)q * HDR_LEN + 1 + (size_t)k], v, sizeof v);
    int w =
        snprintf(buf + at, len - at, "%srank %d has %s", q ? ", " : "", q, v);
    if (w < 0) break;
    at += (size_t)w;
  }
}

tpdp_status dp_check_across(tpdp_comm *comm, const tpdp_reducer_param *params,
                            int64_t n, const tpdp_reducer_options *o) {
  int size = tpdp_comm_size(comm), me = tpdp_comm_rank(comm);
  tpdp_status st = TPDP_SUCCESS;
  int64_t *headers = NULL, *mine = NULL, *all = NULL;
  int64_t header[HDR_LEN];
  /* A rank short of memory must still take part in the allgathers: the
   * buffers are allocated first and the shortage agreed. */
  st = TPDP_CALLOC(headers, (size_t)size * HDR_LEN);
  if (st == TPDP_SUCCESS) st = TPDP_CALLOC(mine, (size_t)n * DESC_LEN);
  if (st == TPDP_SUCCESS)
    st = TPDP_CALLOC(all, (size_t)n * DESC_LEN * (size_t)size);
  CHECK_GOTO(tpdp_comm_agree(comm, st, NULL), st, done);
  fill_header(n, o, header);
  tpdp_tensor s = tpdp_tensor_1d(header, TPDP_I64, HDR_LEN);
  tpdp_tensor rv = tpdp_tensor_1d(headers, TPDP_I64, (int64_t)size * HDR_LEN);
  CHECK_GOTO(dp_host_allgather(comm, &s, &rv), st, done);
  for (int k = 0; k < NAGREED; k++)
    for (int q = 1; q < size; q++) {
      if (headers[(size_t)q * HDR_LEN + 1 + (size_t)k] == headers[1 + k])
        continue;
      char list[600];
      list_option(headers, size, k, list, sizeof list);
      st = TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "option %s differs across the ranks of %s: %s (this is "
                    "rank %d); every rank must pass the same reducer options",
                    agreed_names[k], tpdp_comm_name(comm), list, me);
      goto done;
    }
  for (int k = 1; k < size; k++)
    if (headers[(size_t)k * HDR_LEN] != headers[0]) {
      st = TPDP_ERR(TPDP_ERR_SHAPE_MISMATCH,
                    "parameter count differs across ranks of %s: rank 0 has "
                    "%lld parameters, rank %d has %lld (this is rank %d)",
                    tpdp_comm_name(comm), (long long)headers[0], k,
                    (long long)headers[(size_t)k * HDR_LEN], me);
      goto done;
    }
  for (int64_t i = 0; i < n; i++)
    fill_desc(&params[i].param, mine + i * DESC_LEN);
  s = tpdp_tensor_1d(mine, TPDP_I64, n * DESC_LEN);
  rv = tpdp_tensor_1d(all, TPDP_I64, n * DESC_LEN * size);
  CHECK_GOTO(dp_host_allgather(comm, &s, &rv), st, done);
  for (int64_t i = 0; i < n; i++) {
    const int64_t *d0 = all + i * DESC_LEN;
    for (int k = 1; k < size; k++) {
      const int64_t *dk = all + ((int64_t)k * n + i) * DESC_LEN;
      if (memcmp(d0, dk, DESC_LEN * sizeof(int64_t)) == 0) continue;
      char a[160], b[160];
      format_desc(d0, a, sizeof a);
      format_desc(dk, b, sizeof b);
      st = TPDP_ERR(
          d0[0] != dk[0] ? TPDP_ERR_DTYPE_MISMATCH : TPDP_ERR_SHAPE_MISMATCH,
          "parameter %lld '%s' differs across ranks of %s: rank 0 "
          "has %s, rank %d has %s (first mismatching parameter; "
          "this is rank %d)",
          (long long)i, fqn_or_empty(&params[i]), tpdp_comm_name(comm), a, k, b,
          me);
      goto done;
    }
  }
done:
  free(headers);
  free(mine);
  free(all);
  return st;
}

/* ------------------------------------------------------------ values */

/* Checksum of parameter i's bytes into *h (63 bits, so that -*h cannot
 * overflow), staging device memory through `host` (max_bytes). */
static tpdp_status param_checksum(const tpdp_reducer_param *p, void *host,
                                  int64_t *h) {
  size_t bytes = tpdp_tensor_nbytes(&p->param);
  const void *data = p->param.data;
  if (bytes == 0) {
    *h = 0;
    return TPDP_SUCCESS;
  }
  if (p->param.device.type != TPDP_DEVICE_CPU) {
    tpdp_tensor v;
    tpdp_device cpu = {TPDP_DEVICE_CPU, 0};
    tpdp_tensor_init(&v, host, p->param.dtype, cpu, p->param.ndim,
                     p->param.shape);
    CHECK(core_mem_copy(&v, &p->param));
    data = host;
  }
  *h = (int64_t)(XXH3_64bits(data, bytes) >> 1);
  return TPDP_SUCCESS;
}

/* "1, 3" : the ranks whose checksum differs from rank 0's (at most 8). */
static void list_ranks(const int64_t *h, int size, char *buf, size_t len) {
  size_t at = 0;
  int listed = 0;
  buf[0] = '\0';
  for (int q = 1; q < size && at < len; q++) {
    if (h[q] == h[0]) continue;
    int w = listed == 8
                ? snprintf(buf + at, len - at, ", ...")
                : snprintf(buf + at, len - at, "%s%d", listed ? ", " : "", q);
    if (w < 0 || listed == 8) break;
    at += (size_t)w;
    listed++;
  }
}

tpdp_status dp_check_values(tpdp_comm *comm, const tpdp_reducer_param *params,
                            int64_t n, void *producer_stream) {
  int size = tpdp_comm_size(comm), me = tpdp_comm_rank(comm);
  if (size == 1) return TPDP_SUCCESS;
  tpdp_device dev = params[0].param.device;
  int on_device = dev.type != TPDP_DEVICE_CPU;
  size_t max_bytes = 0;
  for (int64_t i = 0; i < n; i++) {
    size_t b = tpdp_tensor_nbytes(&params[i].param);
    if (b > max_bytes) max_bytes = b;
  }
  int64_t *keys = NULL, *own = NULL, *per_rank = NULL;
  void *host = NULL;
  /* keys[i] = checksum, keys[n + i] = -checksum: one allreduce MAX gives
   * the largest and (negated) the smallest of every parameter's; own keeps
   * this rank's. */
  tpdp_status st = TPDP_CALLOC(keys, (size_t)n * 2);
  if (st == TPDP_SUCCESS) st = TPDP_CALLOC(own, (size_t)n);
  if (st == TPDP_SUCCESS) st = TPDP_CALLOC(per_rank, (size_t)size);
  if (st == TPDP_SUCCESS && on_device) st = core_calloc(&host, max_bytes, 1);
  /* Device parameters: whatever writes them on the producer stream is
   * done before they are read. */
  if (st == TPDP_SUCCESS && on_device) st = core_mem_sync(dev, producer_stream);
  for (int64_t i = 0; st == TPDP_SUCCESS && i < n; i++)
    st = param_checksum(&params[i], host, &own[i]);
  /* Every rank reaches the collectives below, whatever failed here. */
  CHECK_GOTO(tpdp_comm_agree(comm, st, NULL), st, done);
  for (int64_t i = 0; i < n; i++) {
    keys[i] = own[i];
    keys[n + i] = -own[i];
  }
  tpdp_tensor t = tpdp_tensor_1d(keys, TPDP_I64, n * 2);
  CHECK_GOTO(dp_host_allreduce(comm, &t, TPDP_OP_MAX), st, done);
  for (int64_t i = 0; i < n; i++) {
    if (keys[i] == -keys[n + i]) continue; /* max == min */
    /* Every rank finds the same first parameter: the ranks' checksums of
     * it tell which ranks differ. */
    tpdp_tensor s1 = tpdp_tensor_1d(&own[i], TPDP_I64, 1);
    tpdp_tensor rv = tpdp_tensor_1d(per_rank, TPDP_I64, size);
    st = dp_host_allgather(comm, &s1, &rv);
    if (st != TPDP_SUCCESS) break;
    char ranks[200];
    list_ranks(per_rank, size, ranks, sizeof ranks);
    st = TPDP_ERR(
        TPDP_ERR_INVALID_ARGUMENT,
        "parameter %lld '%s' holds different values on the ranks of %s: "
        "rank 0's differ from those of rank(s) %s (first differing "
        "parameter, by checksum; this is rank %d). A reducer averages "
        "gradients over replicas: create it on the communicator along which "
        "the parameters are replicated (the mesh's DP dim, e.g. "
        "tpdp_mesh_dim_comm_by_name(mesh, \"dp\", &comm)), not one along "
        "which they are sharded (the TP dim); if the replicas were "
        "initialised independently, set options.broadcast_from_rank0 = 1 to "
        "copy rank 0's values",
        (long long)i, fqn_or_empty(&params[i]), tpdp_comm_name(comm), ranks,
        me);
    break;
  }
done:
  free(keys);
  free(own);
  free(per_rank);
  free(host);
  return st;
}
