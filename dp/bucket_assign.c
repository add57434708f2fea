// SPDX-License-Identifier: BSD-3-Clause
/* Bucket assignment with the semantics of PyTorch DDP's
 * compute_bucket_assignment_by_size (reimplemented from its documented
 * behaviour; see tpdp/reducer.h for the rules). */
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "tpdp/reducer.h"

/* One open bucket per (dtype, device) key. */
typedef struct {
  tpdp_dtype dtype;
  tpdp_device device;
  int64_t limit_pos; /* position in the limit list */
  int64_t first;     /* start of the open bucket in the scratch list */
  int64_t count;     /* tensors in the open bucket */
  size_t bytes;
} key_state;

typedef struct {
  int64_t start, count; /* into the `members` array */
  size_t bytes, limit;
  int64_t min_index;
} bucket_rec;

static int cmp_min_index(const void *a, const void *b) {
  const bucket_rec *x = (const bucket_rec *)a, *y = (const bucket_rec *)b;
  return (x->min_index > y->min_index) - (x->min_index < y->min_index);
}

void tpdp_bucket_assignment_free(tpdp_bucket_assignment *a) {
  if (a == NULL) return;
  free(a->offsets);
  free(a->indices);
  free(a->bytes);
  free(a->limits);
  memset(a, 0, sizeof *a);
}

static void reverse_i64(int64_t *v, int64_t n) {
  for (int64_t i = 0, j = n - 1; i < j; i++, j--) {
    int64_t t = v[i];
    v[i] = v[j];
    v[j] = t;
  }
}

static void reverse_size(size_t *v, int64_t n) {
  for (int64_t i = 0, j = n - 1; i < j; i++, j--) {
    size_t t = v[i];
    v[i] = v[j];
    v[j] = t;
  }
}

tpdp_status tpdp_bucket_assignment_reverse(tpdp_bucket_assignment *a) {
  TPDP_API_ENTRY;
  CHECK_PTR(a);
  const int64_t nb = a->nbuckets;
  if (nb < 0)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "nbuckets is %lld (must be >= 0)", (long long)nb);
  if (nb == 0) return TPDP_SUCCESS;
  CHECK_PTR(a->offsets);
  CHECK_PTR(a->bytes);
  CHECK_PTR(a->limits);
  const int64_t n = a->offsets[nb];
  if (n > 0) CHECK_PTR(a->indices);
  /* In place, no allocation: reversing the whole index list reverses the
   * bucket order and each bucket's own order; reversing each bucket's
   * range again restores the order its tensors were walked in. Bucket j
   * of the result is old bucket nb-1-j, which starts where the old one
   * ended, counted from the end: n - offsets[nb-1-j+1]. */
  reverse_i64(a->indices, n);
  reverse_i64(a->offsets, nb + 1);
  for (int64_t j = 0; j <= nb; j++) a->offsets[j] = n - a->offsets[j];
  for (int64_t j = 0; j < nb; j++)
    reverse_i64(a->indices + a->offsets[j], a->offsets[j + 1] - a->offsets[j]);
  reverse_size(a->bytes, nb);
  reverse_size(a->limits, nb);
  return TPDP_SUCCESS;
}

tpdp_status tpdp_bucket_assign(const tpdp_tensor *tensors, int64_t ntensors,
                               const size_t *limits, int64_t nlimits,
                               const int64_t *order,
                               tpdp_bucket_assignment *out) {
  TPDP_API_ENTRY;
  CHECK_PTR(out);
  memset(out, 0, sizeof *out);
  if (ntensors <= 0)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "empty tensor list (ntensors = %lld): nothing to bucket",
                    (long long)ntensors);
  CHECK_PTR(tensors);
  if (nlimits <= 0)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "empty limit list (nlimits = %lld): give at least one "
                    "bucket size limit in bytes",
                    (long long)nlimits);
  CHECK_PTR(limits);
  for (int64_t i = 0; i < nlimits; i++)
    if (limits[i] == 0)
      return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                      "bucket size limit %lld is 0 bytes; limits must be > 0",
                      (long long)i);
  for (int64_t i = 0; i < ntensors; i++)
    if (tpdp_dtype_size(tensors[i].dtype) == 0)
      return TPDP_ERR(TPDP_ERR_DTYPE_MISMATCH,
                      "tensor %lld has invalid dtype %d", (long long)i,
                      (int)tensors[i].dtype);

  tpdp_status st = TPDP_SUCCESS;
  char *seen = NULL;
  key_state *keys = NULL;
  int64_t nkeys = 0;
  int64_t *members = NULL; /* closed buckets' indices, in closing order */
  /* per-key chains of the open bucket's members: head/tail per key, next
   * per tensor */
  int64_t *next = NULL, *head = NULL, *tail = NULL;
  bucket_rec *recs = NULL;
  int64_t nrecs = 0, nmembers = 0;

  if (order != NULL) {
    CHECK_GOTO(TPDP_CALLOC(seen, (size_t)ntensors), st, fail);
    for (int64_t i = 0; i < ntensors; i++) {
      if (order[i] < 0 || order[i] >= ntensors || seen[order[i]]) {
        st = TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                      "order[%lld] = %lld: order must be a permutation of "
                      "0..%lld",
                      (long long)i, (long long)order[i],
                      (long long)ntensors - 1);
        goto fail;
      }
      seen[order[i]] = 1;
    }
  }
  CHECK_GOTO(TPDP_CALLOC(keys, (size_t)ntensors), st, fail);
  CHECK_GOTO(TPDP_CALLOC(members, (size_t)ntensors), st, fail);
  CHECK_GOTO(TPDP_CALLOC(recs, (size_t)ntensors), st, fail);

  CHECK_GOTO(TPDP_CALLOC(next, (size_t)ntensors), st, fail);
  CHECK_GOTO(TPDP_CALLOC(head, (size_t)ntensors), st, fail);
  CHECK_GOTO(TPDP_CALLOC(tail, (size_t)ntensors), st, fail);

  for (int64_t i = 0; i < ntensors; i++) {
    int64_t t = order ? order[i] : i;
    const tpdp_tensor *x = &tensors[t];
    int64_t k = 0;
    while (k < nkeys && !(keys[k].dtype == x->dtype &&
                          tpdp_device_equal(keys[k].device, x->device)))
      k++;
    if (k == nkeys) {
      keys[k].dtype = x->dtype;
      keys[k].device = x->device;
      keys[k].limit_pos = 0;
      keys[k].count = 0;
      keys[k].bytes = 0;
      nkeys++;
    }
    key_state *ks = &keys[k];
    next[t] = -1;
    if (ks->count == 0)
      head[k] = t;
    else
      next[tail[k]] = t;
    tail[k] = t;
    ks->count++;
    ks->bytes += tpdp_tensor_nbytes(x);
    size_t limit = limits[ks->limit_pos];
    if (ks->bytes >= limit) {
      bucket_rec *b = &recs[nrecs++];
      b->start = nmembers;
      b->count = ks->count;
      b->bytes = ks->bytes;
      b->limit = limit;
      b->min_index = INT64_MAX;
      for (int64_t m = head[k]; m >= 0; m = next[m]) {
        members[nmembers++] = m;
        if (m < b->min_index) b->min_index = m;
      }
      ks->count = 0;
      ks->bytes = 0;
      if (ks->limit_pos + 1 < nlimits) ks->limit_pos++;
    }
  }
  /* Leftover open buckets, in order of their key's first appearance. */
  for (int64_t k = 0; k < nkeys; k++) {
    key_state *ks = &keys[k];
    if (ks->count == 0) continue;
    bucket_rec *b = &recs[nrecs++];
    b->start = nmembers;
    b->count = ks->count;
    b->bytes = ks->bytes;
    b->limit = limits[ks->limit_pos];
    b->min_index = INT64_MAX;
    for (int64_t m = head[k]; m >= 0; m = next[m]) {
      members[nmembers++] = m;
      if (m < b->min_index) b->min_index = m;
    }
  }
  free(next);
  free(head);
  free(tail);
  next = head = tail = NULL;

  /* Minimum indices are distinct across buckets, so the sort is total. */
  if (order == NULL) qsort(recs, (size_t)nrecs, sizeof *recs, cmp_min_index);

  CHECK_GOTO(TPDP_CALLOC(out->offsets, (size_t)nrecs + 1), st, fail);
  CHECK_GOTO(TPDP_CALLOC(out->indices, (size_t)ntensors), st, fail);
  CHECK_GOTO(TPDP_CALLOC(out->bytes, (size_t)nrecs), st, fail);
  CHECK_GOTO(TPDP_CALLOC(out->limits, (size_t)nrecs), st, fail);
  int64_t pos = 0;
  for (int64_t b = 0; b < nrecs; b++) {
    out->offsets[b] = pos;
    memcpy(out->indices + pos, members + recs[b].start,
           (size_t)recs[b].count * sizeof(int64_t));
    pos += recs[b].count;
    out->bytes[b] = recs[b].bytes;
    out->limits[b] = recs[b].limit;
  }
  out->offsets[nrecs] = pos;
  out->nbuckets = nrecs;
  free(seen);
  free(keys);
  free(members);
  free(recs);
  return TPDP_SUCCESS;

fail:
  free(next);
  free(head);
  free(tail);
  tpdp_bucket_assignment_free(out);
  free(seen);
  free(keys);
  free(members);
  free(recs);
  return st;
}
