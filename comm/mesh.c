// SPDX-License-Identifier: BSD-3-Clause
/* N-D device mesh: row-major rank layout, named dims, one
 * sub-communicator per dim. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/backend.h"

#define MESH_NAME_MAX 32
#define MESH_MAGIC 0x4d455348u /* tpdp_mesh.magic while alive */

struct tpdp_mesh {
  unsigned magic;
  int users[2];           /* specs, reducers holding it (services.h) */
  struct tpdp_mesh *next; /* list of live meshes with communicators */
  int ndim;
  int64_t sizes[TPDP_MAX_DIMS];
  char names[TPDP_MAX_DIMS][MESH_NAME_MAX];
  int64_t size;
  tpdp_comm *parent; /* NULL for layout-only meshes */
  tpdp_comm *dim_comms[TPDP_MAX_DIMS];
  int rank;
  core_scratch scratch; /* services.h: redistribution's packing */
};

/* Strip leading and trailing blanks in place. */
static char *trim(char *s) {
  while (isspace((unsigned char)*s)) s++;
  size_t n = strlen(s);
  while (n > 0 && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
  return s;
}

tpdp_status tpdp_mesh_parse(const char *text, char *storage, int *ndim,
                            int64_t sizes[TPDP_MAX_DIMS],
                            const char *names[TPDP_MAX_DIMS]) {
  TPDP_API_ENTRY;
  CHECK_PTR(text);
  CHECK_PTR(storage);
  CHECK_PTR(ndim);
  CHECK_PTR(sizes);
  CHECK_PTR(names);
  strcpy(storage, text);
  int n = 0;
  char *p = storage;
  if (*trim(p) == '\0')
    return TPDP_ERR(TPDP_ERR_PARSE,
                    "empty mesh spec (expected e.g. dp=2,tp=2)");
  while (1) {
    char *item = p;
    char *comma = strchr(p, ',');
    if (comma) *comma = '\0';
    char *eq = strchr(item, '=');
    if (eq == NULL)
      return TPDP_ERR(TPDP_ERR_PARSE,
                      "mesh spec '%s': item %d '%s' is not NAME=SIZE", text, n,
                      trim(item));
    *eq = '\0';
    item = trim(item);
    char *num = trim(eq + 1);
    if (item[0] == '\0')
      return TPDP_ERR(TPDP_ERR_EMPTY_NAME,
                      "mesh spec '%s': dim %d has an empty name", text, n);
    if (n >= TPDP_MAX_DIMS)
      return TPDP_ERR(TPDP_ERR_TOO_MANY_DIMS,
                      "mesh spec '%s' has more than %d dims", text,
                      TPDP_MAX_DIMS);
    for (const char *c = item; *c; c++)
      if (!isalnum((unsigned char)*c) && *c != '_' && *c != '-' && *c != '.')
        return TPDP_ERR(TPDP_ERR_PARSE,
                        "mesh spec '%s': dim name '%s' has character '%c' "
                        "(use letters, digits, '_', '-', '.')",
                        text, item, *c);
    char *end = NULL;
    errno = 0;
    long long v = strtoll(num, &end, 10);
    if (end == num || *end != '\0')
      return TPDP_ERR(TPDP_ERR_PARSE,
                      "mesh spec '%s': size '%s' of dim '%s' is not an integer",
                      text, num, item);
    if (errno == ERANGE || v > INT_MAX)
      return TPDP_ERR(TPDP_ERR_BAD_DIM_SIZE,
                      "mesh spec '%s': dim '%s' has size %s (too large)", text,
                      item, num);
    if (v <= 0)
      return TPDP_ERR(TPDP_ERR_BAD_DIM_SIZE,
                      "mesh spec '%s': dim '%s' has size %lld (must be > 0)",
                      text, item, v);
    for (int i = 0; i < n; i++)
      if (strcmp(names[i], item) == 0)
        return TPDP_ERR(TPDP_ERR_DUPLICATE,
                        "mesh spec '%s': dim name '%s' appears twice", text,
                        item);
    names[n] = item;
    sizes[n] = v;
    n++;
    if (comma == NULL) break;
    p = comma + 1;
  }
  *ndim = n;
  return TPDP_SUCCESS;
}

/* Row-major layout (comm.h). Callers have checked rank and coordinates
 * against the sizes. */
static void coords_of(const tpdp_mesh *m, int rank, int64_t *coords) {
  int64_t r = rank;
  for (int d = m->ndim - 1; d >= 0; d--) {
    coords[d] = r % m->sizes[d];
    r /= m->sizes[d];
  }
}

static int rank_at(const tpdp_mesh *m, const int64_t *coords) {
  int64_t r = 0;
  for (int d = 0; d < m->ndim; d++) r = r * m->sizes[d] + coords[d];
  return (int)r;
}

static tpdp_status validate_dims(int ndim, const int64_t *sizes,
                                 const char *const *names) {
  if (ndim < 1)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "mesh needs at least 1 dim, got %d", ndim);
  if (ndim > TPDP_MAX_DIMS)
    return TPDP_ERR(TPDP_ERR_TOO_MANY_DIMS, "mesh has %d dims; at most %d",
                    ndim, TPDP_MAX_DIMS);
  for (int i = 0; i < ndim; i++) {
    const char *nm = names ? names[i] : NULL;
    if (sizes[i] <= 0)
      return TPDP_ERR(TPDP_ERR_BAD_DIM_SIZE,
                      "mesh dim %d ('%s') has size %lld (must be > 0)", i,
                      nm ? nm : "?", (long long)sizes[i]);
    if (names == NULL) continue;
    if (nm == NULL)
      return TPDP_ERR(TPDP_ERR_NULL_POINTER, "mesh dim %d name is NULL", i);
    if (nm[0] == '\0')
      return TPDP_ERR(TPDP_ERR_EMPTY_NAME, "mesh dim %d has an empty name", i);
    if (strlen(nm) >= MESH_NAME_MAX)
      return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                      "mesh dim %d name '%s' is longer than %d chars", i, nm,
                      MESH_NAME_MAX - 1);
    for (int j = 0; j < i; j++)
      if (strcmp(names[j], nm) == 0)
        return TPDP_ERR(TPDP_ERR_DUPLICATE,
                        "mesh dim name '%s' used by dims %d and %d", nm, j, i);
  }
  return TPDP_SUCCESS;
}

/* ------------------------------------------------------------ lifetime */

/* Live meshes with communicators, for comm_mesh_hold_by_comm. */
static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;
static tpdp_mesh *live_head;

static void mesh_link(tpdp_mesh *m) {
  pthread_mutex_lock(&live_mu);
  m->next = live_head;
  live_head = m;
  pthread_mutex_unlock(&live_mu);
}

static void mesh_unlink(tpdp_mesh *m) {
  pthread_mutex_lock(&live_mu);
  for (tpdp_mesh **p = &live_head; *p; p = &(*p)->next)
    if (*p == m) {
      *p = m->next;
      break;
    }
  pthread_mutex_unlock(&live_mu);
}

static void mesh_format(const tpdp_mesh *m, char *buf, size_t len) {
  size_t at = 0;
  buf[0] = '\0';
  for (int d = 0; d < m->ndim && at < len; d++) {
    int w = snprintf(buf + at, len - at, "%s%s=%lld", d ? "," : "", m->names[d],
                     (long long)m->sizes[d]);
    if (w < 0) break;
    at += (size_t)w;
  }
}

tpdp_status comm_mesh_check(const tpdp_mesh *m, const char *what) {
  if (m == NULL || m->magic == MESH_MAGIC) return TPDP_SUCCESS;
  return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                  "%s (%p) has been destroyed (tpdp_mesh_destroy), or is not "
                  "a mesh",
                  what, (const void *)m);
}

void comm_mesh_hold(const tpdp_mesh *m, comm_mesh_user kind) {
  __atomic_add_fetch(&((tpdp_mesh *)m)->users[kind], 1, __ATOMIC_RELAXED);
}

void comm_mesh_release(const tpdp_mesh *m, comm_mesh_user kind) {
  __atomic_sub_fetch(&((tpdp_mesh *)m)->users[kind], 1, __ATOMIC_RELAXED);
}

const tpdp_mesh *comm_mesh_hold_by_comm(const tpdp_comm *c,
                                        comm_mesh_user kind) {
  const tpdp_mesh *found = NULL;
  pthread_mutex_lock(&live_mu);
  for (tpdp_mesh *m = live_head; m && !found; m = m->next)
    for (int d = 0; d < m->ndim; d++)
      if (m->dim_comms[d] == c) {
        comm_mesh_hold(m, kind);
        found = m;
        break;
      }
  pthread_mutex_unlock(&live_mu);
  return found;
}

core_scratch *comm_mesh_scratch(const tpdp_mesh *m) {
  return &((tpdp_mesh *)m)->scratch;
}

/* TPDP_ERR_STATE while specs or reducers hold the mesh: they read it (and
 * its communicators) until they are destroyed. */
static tpdp_status mesh_check_unused(const tpdp_mesh *m) {
  int specs = __atomic_load_n(&m->users[COMM_MESH_SPEC], __ATOMIC_RELAXED);
  int reducers =
      __atomic_load_n(&m->users[COMM_MESH_REDUCER], __ATOMIC_RELAXED);
  if (specs == 0 && reducers == 0) return TPDP_SUCCESS;
  char desc[MESH_NAME_MAX * TPDP_MAX_DIMS + 128];
  mesh_format(m, desc, sizeof desc);
  return TPDP_ERR(TPDP_ERR_STATE,
                  "mesh %s is still in use by %d spec(s) and %d reducer(s) "
                  "built on it: destroy those first (tpdp_spec_destroy; "
                  "tpdp_module_destroy for the specs of a parallelized "
                  "module; tpdp_reducer_destroy), then the mesh; nothing was "
                  "destroyed",
                  desc, specs, reducers);
}

/* Destroy a partly made mesh after `st`, the failure that stopped its
 * creation: returns st with its message, whatever the destroy does. */
static tpdp_status destroy_after(tpdp_mesh *m, tpdp_status st) {
  core_first_error f;
  core_first_error_init(&f);
  core_first_error_add(&f, st);
  core_first_error_add(&f, tpdp_mesh_destroy(m));
  return f.status;
}

/* This rank's checks of its mesh arguments; *total: the product of the
 * sizes. */
static tpdp_status check_mesh_args(const tpdp_comm *comm, int ndim,
                                   const int64_t *sizes,
                                   const char *const *names, tpdp_mesh **out,
                                   int64_t *total) {
  CHECK_PTR(sizes);
  CHECK_PTR(out);
  CHECK(validate_dims(ndim, sizes, names));
  *total = 1;
  for (int i = 0; i < ndim; i++) {
    if (sizes[i] > INT_MAX / *total) {
      char shape[128];
      tpdp_shape_format(ndim, sizes, shape, sizeof shape);
      return TPDP_ERR(TPDP_ERR_BAD_DIM_SIZE, "mesh %s has more than %d ranks",
                      shape, INT_MAX);
    }
    *total *= sizes[i];
  }
  if (comm != NULL && *total != comm->size) {
    char shape[128];
    tpdp_shape_format(ndim, sizes, shape, sizeof shape);
    return TPDP_ERR(TPDP_ERR_MESH_SIZE,
                    "mesh %s has %lld ranks but communicator %s has %d "
                    "(rank %d)",
                    shape, (long long)*total, comm->name, comm->size,
                    comm->rank);
  }
  return TPDP_SUCCESS;
}

/* One rank's mesh arguments, as ranks compare them. */
typedef struct {
  int32_t status; /* this rank's check_mesh_args */
  int32_t ndim;
  int64_t sizes[TPDP_MAX_DIMS];
  char names[TPDP_MAX_DIMS][MESH_NAME_MAX];
} mesh_args;

static void fill_mesh_args(mesh_args *a, int ndim, const int64_t *sizes,
                           const char *const *names, tpdp_status local) {
  memset(a, 0, sizeof *a);
  a->status = (int32_t)local;
  a->ndim = ndim;
  int n = ndim < 0 ? 0 : ndim > TPDP_MAX_DIMS ? TPDP_MAX_DIMS : ndim;
  for (int i = 0; i < n && sizes != NULL; i++) {
    a->sizes[i] = sizes[i];
    const char *nm = names ? names[i] : NULL;
    if (names == NULL)
      snprintf(a->names[i], MESH_NAME_MAX, "d%d", i);
    else
      snprintf(a->names[i], MESH_NAME_MAX, "%s", nm ? nm : "(null)");
  }
}

static int same_mesh_args(const void *x, const void *y) {
  const mesh_args *a = (const mesh_args *)x, *b = (const mesh_args *)y;
  return memcmp(&a->ndim, &b->ndim, sizeof *a - offsetof(mesh_args, ndim)) == 0;
}

static void describe_mesh_args(core_strbuf *b, const void *rec) {
  const mesh_args *a = (const mesh_args *)rec;
  if (a->ndim < 1 || a->ndim > TPDP_MAX_DIMS) {
    core_sb_printf(b, "%d dims", a->ndim);
    return;
  }
  for (int i = 0; i < a->ndim; i++)
    core_sb_printf(b, "%s%s=%lld", i ? "," : "", a->names[i],
                   (long long)a->sizes[i]);
}

static tpdp_status mesh_mismatch(const tpdp_comm *comm, const void *a,
                                 const void *b, const char *ranks) {
  (void)a;
  (void)b;
  return TPDP_ERR(TPDP_ERR_MESH_MISMATCH,
                  "ranks of %s passed different meshes (this is rank %d): "
                  "%s; every rank must pass the same dims",
                  comm->name, comm->rank, ranks);
}

/* Agree across `comm` on the mesh arguments before any split, so that
 * ranks passing different meshes (which would hang in the splits or build
 * communicators that disagree with the mesh) all fail, naming each rank's
 * mesh. One allgather of a fixed-size record. Returns `local` when it
 * failed (its message kept). */
static tpdp_status agree_mesh_args(tpdp_comm *comm, int ndim,
                                   const int64_t *sizes,
                                   const char *const *names,
                                   tpdp_status local) {
  static const comm_agree_kind kind = {sizeof(mesh_args), same_mesh_args,
                                       describe_mesh_args, mesh_mismatch};
  mesh_args mine;
  fill_mesh_args(&mine, ndim, sizes, names, local);
  return comm_agree(comm, &kind, &mine, local);
}

tpdp_status tpdp_mesh_create(tpdp_comm *comm, int ndim, const int64_t *sizes,
                             const char *const *names, tpdp_mesh **out) {
  TPDP_API_ENTRY;
  if (out != NULL) *out = NULL;
  if (comm != NULL) CHECK(comm_check_alive(comm));
  int64_t total = 0;
  tpdp_status st = check_mesh_args(comm, ndim, sizes, names, out, &total);
  if (comm != NULL) st = agree_mesh_args(comm, ndim, sizes, names, st);
  CHECK(st);
  tpdp_mesh *m = NULL;
  CHECK(TPDP_CALLOC(m, 1));
  m->ndim = ndim;
  m->size = total;
  m->parent = comm;
  m->rank = comm ? comm->rank : -1;
  for (int i = 0; i < ndim; i++) {
    m->sizes[i] = sizes[i];
    if (names)
      snprintf(m->names[i], MESH_NAME_MAX, "%s", names[i]);
    else
      snprintf(m->names[i], MESH_NAME_MAX, "d%d", i);
  }
  m->magic = MESH_MAGIC;
  if (comm != NULL) {
    mesh_link(m);
    int64_t coords[TPDP_MAX_DIMS];
    coords_of(m, comm->rank, coords);
    for (int d = 0; d < ndim; d++) {
      /* Color: this rank's index with coordinate d zeroed, so ranks that
       * differ only in d share it; key: the coordinate along d. */
      int64_t c0[TPDP_MAX_DIMS];
      memcpy(c0, coords, sizeof c0);
      c0[d] = 0;
      int color = rank_at(m, c0);
      CHECK_GOTO(tpdp_comm_split(comm, color, (int)coords[d], &m->dim_comms[d]),
                 st, fail);
      if (m->dim_comms[d] == NULL) {
        st = TPDP_ERR(TPDP_ERR_INTERNAL,
                      "mesh dim %s: splitting %s (%s) with color %d gave "
                      "rank %d no communicator",
                      m->names[d], comm->name, comm->ops->backend, color,
                      comm->rank);
        goto fail;
      }
      snprintf(m->dim_comms[d]->name, sizeof m->dim_comms[d]->name, "mesh.%s",
               m->names[d]);
      m->dim_comms[d]->owner = m;
    }
  }
  *out = m;
  return TPDP_SUCCESS;
fail:
  return destroy_after(m, st);
}

tpdp_status tpdp_mesh_create_from_string(tpdp_comm *comm, const char *text,
                                         tpdp_mesh **out) {
  TPDP_API_ENTRY;
  CHECK_PTR(text);
  CHECK_PTR(out);
  char *storage = malloc(strlen(text) + 1);
  if (storage == NULL)
    return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "parsing mesh spec");
  int ndim = 0;
  int64_t sizes[TPDP_MAX_DIMS];
  const char *names[TPDP_MAX_DIMS];
  tpdp_status st = tpdp_mesh_parse(text, storage, &ndim, sizes, names);
  if (st == TPDP_SUCCESS) st = tpdp_mesh_create(comm, ndim, sizes, names, out);
  free(storage);
  return st;
}

tpdp_status tpdp_mesh_destroy(tpdp_mesh *mesh) {
  TPDP_API_ENTRY;
  if (mesh == NULL) return TPDP_SUCCESS;
  CHECK(comm_mesh_check(mesh, "the mesh"));
  CHECK(mesh_check_unused(mesh));
  if (mesh->parent != NULL) mesh_unlink(mesh);
  mesh->magic = 0;
  /* Every dim's communicator is destroyed even when one fails; the first
   * failure is reported. */
  core_first_error f;
  core_first_error_init(&f);
  for (int d = 0; d < mesh->ndim; d++) {
    if (mesh->dim_comms[d] != NULL) mesh->dim_comms[d]->owner = NULL;
    core_first_error_add(&f, tpdp_comm_destroy(mesh->dim_comms[d]));
  }
  core_first_error_add(&f, core_scratch_free(&mesh->scratch));
  free(mesh);
  return f.status;
}

int tpdp_mesh_ndim(const tpdp_mesh *mesh) { return mesh ? mesh->ndim : 0; }
int64_t tpdp_mesh_size(const tpdp_mesh *mesh) { return mesh ? mesh->size : 0; }
int64_t tpdp_mesh_dim_size(const tpdp_mesh *mesh, int dim) {
  if (mesh == NULL || dim < 0 || dim >= mesh->ndim) return 0;
  return mesh->sizes[dim];
}
const char *tpdp_mesh_dim_name(const tpdp_mesh *mesh, int dim) {
  if (mesh == NULL || dim < 0 || dim >= mesh->ndim) return "?";
  return mesh->names[dim];
}
int tpdp_mesh_dim_index(const tpdp_mesh *mesh, const char *name) {
  if (mesh == NULL || name == NULL) return -1;
  for (int d = 0; d < mesh->ndim; d++)
    if (strcmp(mesh->names[d], name) == 0) return d;
  return -1;
}
int tpdp_mesh_rank(const tpdp_mesh *mesh) { return mesh ? mesh->rank : -1; }
tpdp_comm *tpdp_mesh_comm(const tpdp_mesh *mesh) {
  return mesh ? mesh->parent : NULL;
}

int tpdp_mesh_equal(const tpdp_mesh *a, const tpdp_mesh *b) {
  if (a == b) return 1;
  if (a == NULL || b == NULL || a->ndim != b->ndim || a->parent != b->parent)
    return 0;
  for (int d = 0; d < a->ndim; d++)
    if (a->sizes[d] != b->sizes[d] || strcmp(a->names[d], b->names[d]) != 0)
      return 0;
  return 1;
}

tpdp_status tpdp_mesh_coords(const tpdp_mesh *mesh, int rank, int64_t *coords) {
  TPDP_API_ENTRY;
  CHECK_PTR(mesh);
  CHECK(comm_mesh_check(mesh, "the mesh"));
  CHECK_PTR(coords);
  if (rank < 0 || rank >= mesh->size)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "rank %d outside [0, %lld) of the mesh", rank,
                    (long long)mesh->size);
  coords_of(mesh, rank, coords);
  return TPDP_SUCCESS;
}

tpdp_status tpdp_mesh_rank_of(const tpdp_mesh *mesh, const int64_t *coords,
                              int *rank) {
  TPDP_API_ENTRY;
  CHECK_PTR(mesh);
  CHECK(comm_mesh_check(mesh, "the mesh"));
  CHECK_PTR(coords);
  CHECK_PTR(rank);
  for (int d = 0; d < mesh->ndim; d++)
    if (coords[d] < 0 || coords[d] >= mesh->sizes[d])
      return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                      "coordinate %lld outside [0, %lld) of dim '%s'",
                      (long long)coords[d], (long long)mesh->sizes[d],
                      mesh->names[d]);
  *rank = rank_at(mesh, coords);
  return TPDP_SUCCESS;
}

static tpdp_status check_dim(const tpdp_mesh *mesh, int dim) {
  if (dim < 0 || dim >= mesh->ndim)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT, "dim %d outside [0, %d)", dim,
                    mesh->ndim);
  return TPDP_SUCCESS;
}

tpdp_status tpdp_mesh_group_ranks(const tpdp_mesh *mesh, int dim, int rank,
                                  int *ranks) {
  TPDP_API_ENTRY;
  CHECK_PTR(mesh);
  CHECK(comm_mesh_check(mesh, "the mesh"));
  CHECK_PTR(ranks);
  CHECK(check_dim(mesh, dim));
  int64_t coords[TPDP_MAX_DIMS];
  CHECK(tpdp_mesh_coords(mesh, rank, coords));
  for (int64_t i = 0; i < mesh->sizes[dim]; i++) {
    coords[dim] = i;
    ranks[i] = rank_at(mesh, coords);
  }
  return TPDP_SUCCESS;
}

tpdp_status tpdp_mesh_dim_comm(const tpdp_mesh *mesh, int dim,
                               tpdp_comm **out) {
  TPDP_API_ENTRY;
  CHECK_PTR(mesh);
  CHECK(comm_mesh_check(mesh, "the mesh"));
  CHECK_PTR(out);
  CHECK(check_dim(mesh, dim));
  if (mesh->parent == NULL)
    return TPDP_ERR(TPDP_ERR_STATE,
                    "mesh is layout-only (created without a communicator)");
  *out = mesh->dim_comms[dim];
  return TPDP_SUCCESS;
}

tpdp_status tpdp_mesh_dim_comm_by_name(const tpdp_mesh *mesh, const char *name,
                                       tpdp_comm **out) {
  TPDP_API_ENTRY;
  CHECK_PTR(mesh);
  CHECK_PTR(name);
  int d = tpdp_mesh_dim_index(mesh, name);
  if (d < 0) {
    /* The dims it has, so that a typo ("pt" for "tp") is obvious. */
    char dims[TPDP_MAX_DIMS * (MESH_NAME_MAX + 2)] = "";
    for (int i = 0; i < mesh->ndim; i++)
      snprintf(dims + strlen(dims), sizeof dims - strlen(dims), "%s%s",
               i ? ", " : "", mesh->names[i]);
    return TPDP_ERR(TPDP_ERR_NOT_FOUND,
                    "mesh has no dim named '%s' (its dims: %s)", name, dims);
  }
  return tpdp_mesh_dim_comm(mesh, d, out);
}
