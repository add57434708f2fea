// SPDX-License-Identifier: BSD-3-Clause
/* File I/O of checkpoints: full writes and positioned reads, fsync of files
 * and directories, atomic small files, host staging of tensor views, and
 * the crash test hook. Every error names the path and the failed call. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt_internal.h"

/* Bytes per read()/write() call: Linux moves at most ~2 GiB per call. */
#define IO_MAX ((size_t)1 << 30)

tpdp_status ckpt_join(const char *dir, const char *name, char **out) {
  size_t a = strlen(dir), b = strlen(name);
  char *p = malloc(a + b + 2);
  if (p == NULL)
    return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "out of memory naming '%s/%s'", dir,
                    name);
  memcpy(p, dir, a);
  size_t at = a;
  if (a == 0 || dir[a - 1] != '/') p[at++] = '/';
  memcpy(p + at, name, b + 1);
  *out = p;
  return TPDP_SUCCESS;
}

tpdp_status ckpt_write_all(int fd, const void *buf, size_t n,
                           const char *path) {
  const char *p = buf;
  while (n > 0) {
    ssize_t w = write(fd, p, n < IO_MAX ? n : IO_MAX);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0)
      return TPDP_ERR(TPDP_ERR_IO, "write to '%s' failed: %s", path,
                      w < 0 ? strerror(errno) : "no progress");
    p += w;
    n -= (size_t)w;
  }
  return TPDP_SUCCESS;
}

tpdp_status ckpt_pread_all(int fd, void *buf, size_t n, uint64_t off,
                           const char *path) {
  char *p = buf;
  uint64_t at = off;
  while (n > 0) {
    ssize_t r = pread(fd, p, n < IO_MAX ? n : IO_MAX, (off_t)at);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0)
      return TPDP_ERR(TPDP_ERR_IO, "read of '%s' at byte %llu failed: %s", path,
                      (unsigned long long)at, strerror(errno));
    if (r == 0)
      return TPDP_ERR(TPDP_ERR_IO,
                      "'%s' ends at byte %llu but %zu more bytes were "
                      "expected there (truncated file?)",
                      path, (unsigned long long)at, n);
    p += r;
    at += (uint64_t)r;
    n -= (size_t)r;
  }
  return TPDP_SUCCESS;
}

tpdp_status ckpt_fsync(int fd, const char *path) {
  if (fsync(fd) != 0)
    return TPDP_ERR(TPDP_ERR_IO, "fsync of '%s' failed: %s", path,
                    strerror(errno));
  return TPDP_SUCCESS;
}

tpdp_status ckpt_fsync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return TPDP_ERR(TPDP_ERR_IO, "cannot open directory '%s': %s", dir,
                    strerror(errno));
  tpdp_status st = ckpt_fsync(fd, dir);
  close(fd);
  return st;
}

tpdp_status ckpt_mkdirs(const char *dir) {
  char *p = core_strdup(dir);
  if (p == NULL) return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
  tpdp_status st = TPDP_SUCCESS;
  size_t n = strlen(p);
  for (size_t i = 1; i <= n && st == TPDP_SUCCESS; i++) {
    if (p[i] != '/' && p[i] != '\0') continue;
    char c = p[i];
    p[i] = '\0';
    struct stat sb;
    if (mkdir(p, 0777) != 0 && errno != EEXIST)
      st = TPDP_ERR(TPDP_ERR_IO, "cannot create directory '%s': %s", p,
                    strerror(errno));
    else if (stat(p, &sb) != 0 || !S_ISDIR(sb.st_mode))
      st = TPDP_ERR(TPDP_ERR_IO, "'%s' exists and is not a directory", p);
    p[i] = c;
  }
  free(p);
  return st;
}

tpdp_status ckpt_read_file(const char *path, char **out, size_t *len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return TPDP_ERR(TPDP_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
  struct stat sb;
  tpdp_status st = TPDP_SUCCESS;
  char *buf = NULL;
  if (fstat(fd, &sb) != 0) {
    st = TPDP_ERR(TPDP_ERR_IO, "cannot stat '%s': %s", path, strerror(errno));
    goto done;
  }
  size_t n = (size_t)sb.st_size;
  buf = malloc(n + 1);
  if (buf == NULL) {
    st = TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "out of memory reading '%s'", path);
    goto done;
  }
  CHECK_GOTO(ckpt_pread_all(fd, buf, n, 0, path), st, done);
  buf[n] = '\0';
  *out = buf;
  *len = n;
  buf = NULL;
done:
  free(buf);
  close(fd);
  return st;
}

tpdp_status ckpt_atomic_open(ckpt_atomic_file *f, const char *path) {
  f->fd = -1;
  f->path = core_strdup(path);
  f->tmp = malloc(strlen(path) + 5);
  if (f->path == NULL || f->tmp == NULL) {
    ckpt_atomic_abort(f);
    return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "out of memory");
  }
  sprintf(f->tmp, "%s.tmp", path);
  f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (f->fd < 0) {
    tpdp_status st = TPDP_ERR(TPDP_ERR_IO, "cannot create '%s': %s", f->tmp,
                              strerror(errno));
    ckpt_atomic_abort(f);
    return st;
  }
  return TPDP_SUCCESS;
}

void ckpt_atomic_abort(ckpt_atomic_file *f) {
  if (f->fd >= 0) close(f->fd);
  if (f->tmp) unlink(f->tmp);
  free(f->tmp);
  free(f->path);
  f->fd = -1;
  f->tmp = f->path = NULL;
}

tpdp_status ckpt_atomic_commit(ckpt_atomic_file *f, const char *dir) {
  tpdp_status st = ckpt_fsync(f->fd, f->tmp);
  int rc = close(f->fd);
  f->fd = -1;
  if (st == TPDP_SUCCESS && rc != 0)
    st = TPDP_ERR(TPDP_ERR_IO, "close of '%s' failed: %s", f->tmp,
                  strerror(errno));
  if (st == TPDP_SUCCESS && rename(f->tmp, f->path) != 0)
    st = TPDP_ERR(TPDP_ERR_IO, "cannot rename '%s' to '%s': %s", f->tmp,
                  f->path, strerror(errno));
  if (st == TPDP_SUCCESS) {
    st = ckpt_fsync_dir(dir);
    free(f->tmp); /* renamed: nothing to remove */
    f->tmp = NULL;
  }
  ckpt_atomic_abort(f);
  return st;
}

void ckpt_test_kill_point(int rank, const char *point) {
  const char *v = getenv("TPDP_CKPT_TEST_KILL");
  if (v == NULL || *v == '\0') return;
  char *end = NULL;
  long r = strtol(v, &end, 10);
  if (end == v || *end != ':' || r != rank || strcmp(end + 1, point) != 0)
    return;
  fprintf(stderr, "[rank %d] tpdp: TPDP_CKPT_TEST_KILL=%s: SIGKILL now\n", rank,
          v);
  fflush(stderr);
  raise(SIGKILL);
}

/* ------------------------------------------------------------- staging */

/* A host view of `stage` with t's shape and dtype. */
static tpdp_status host_view(const tpdp_tensor *t, void *stage,
                             tpdp_tensor *out) {
  tpdp_device cpu = {TPDP_DEVICE_CPU, 0};
  return tpdp_tensor_init(out, stage, t->dtype, cpu, t->ndim, t->shape);
}

tpdp_status ckpt_stage_begin(const tpdp_tensor *t, int copy_in, void **stage,
                             int *owned) {
  if (t->device.type == TPDP_DEVICE_CPU && tpdp_tensor_is_contiguous(t)) {
    *stage = t->data;
    *owned = 0;
    return TPDP_SUCCESS;
  }
  size_t n = tpdp_tensor_nbytes(t);
  void *buf = malloc(n ? n : 1);
  if (buf == NULL)
    return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY,
                    "out of memory staging %zu bytes in host memory", n);
  tpdp_tensor host;
  tpdp_status st = TPDP_SUCCESS;
  if (copy_in) {
    st = host_view(t, buf, &host);
    if (st == TPDP_SUCCESS) st = tpdp_tensor_copy(&host, t);
  }
  if (st != TPDP_SUCCESS) {
    free(buf);
    return st;
  }
  *stage = buf;
  *owned = 1;
  return TPDP_SUCCESS;
}

tpdp_status ckpt_stage_end(tpdp_tensor *t, void *stage, int owned,
                           tpdp_status st) {
  if (owned && st == TPDP_SUCCESS) {
    tpdp_tensor host;
    st = host_view(t, stage, &host);
    if (st == TPDP_SUCCESS) st = tpdp_tensor_copy(t, &host);
  }
  if (owned) free(stage);
  return st;
}
