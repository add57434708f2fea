// SPDX-License-Identifier: BSD-3-Clause
/* bench/ckpt.sh: tpdp_checkpoint_save / _load of a model sharded over 4
 * ranks (mesh tp=4, every tensor Shard(0)) against writing and reading the
 * same bytes with plain write()/read() of one file per rank, in the same
 * run, alternating which goes first each round.
 *
 * Both sides fsync what they write (the checkpoint also fsyncs its
 * directory and writes index.json), and both write new files each round,
 * removing the previous round's once the new ones are durable (the
 * checkpoint must keep the previous one until its index commits; an
 * in-place rewrite would reuse freshly freed blocks, which on a
 * thin-provisioned virtual disk is several times faster than new ones).
 * Before every timed phase all files of both sides are dropped from the
 * page cache with posix_fadvise(POSIX_FADV_DONTNEED) after an fdatasync
 * (no root needed), so both start from the same cache state and read
 * from the disk as far as the kernel honours it. Times are the
 * slowest rank's (barrier, operation, barrier). Prints per-round times and
 * last `ckpt: save_ratio <x> load_ratio <y>` (baseline median / tpdp
 * median; > 1 means tpdp is faster).
 * Loads are timed three ways, in rotating order: plain read(), tpdp (the
 * ratio's side: every slice's xxhash64 checked) and tpdp with
 * options.verify = 0, whose time and the CPU seconds of each side show
 * what verification costs (hashing every byte read takes about as much
 * CPU as the read itself: on a CPU-starved machine that is time).
 * Usage: ckpt_bench --dir DIR [--mib N] [--rounds R] [--tensors T] */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "tpdp/tpdp.h"

#define OK(call)                                                         \
  do {                                                                   \
    tpdp_status st_ = (call);                                            \
    if (st_ != TPDP_SUCCESS) {                                           \
      fprintf(stderr, "ckpt_bench: %s: %s\n", #call, tpdp_last_error()); \
      exit(1);                                                           \
    }                                                                    \
  } while (0)

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* CPU seconds (user + system) of this process so far. */
static double cpu_now(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + 1e-6 * ru.ru_utime.tv_usec + ru.ru_stime.tv_sec +
         1e-6 * ru.ru_stime.tv_usec;
}

/* Sum over the ranks (collective). */
static double sum_ranks(tpdp_comm *world, double v) {
  tpdp_tensor t = tpdp_tensor_1d(&v, TPDP_F64, 1);
  if (tpdp_allreduce(world, &t, &t, TPDP_OP_SUM) != TPDP_SUCCESS) exit(1);
  return v;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void drop_cache_file(const char *path) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) return;
  fdatasync(fd);
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  close(fd);
}

/* Every regular file under dir (one level) and dir/sub. */
static void drop_cache_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (d == NULL) return;
  for (struct dirent *e = readdir(d); e; e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    if (e->d_type == DT_DIR)
      drop_cache_dir(p);
    else
      drop_cache_file(p);
  }
  closedir(d);
}

static void write_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n > (1u << 30) ? (1u << 30) : n);
    if (w <= 0) {
      perror("ckpt_bench: write");
      exit(1);
    }
    p += w;
    n -= (size_t)w;
  }
}

static void read_all(int fd, char *p, size_t n) {
  while (n > 0) {
    ssize_t r = read(fd, p, n > (1u << 30) ? (1u << 30) : n);
    if (r <= 0) {
      perror("ckpt_bench: read");
      exit(1);
    }
    p += r;
    n -= (size_t)r;
  }
}

int main(int argc, char **argv) {
  const char *dir = NULL;
  long mib = 1024, rounds = 3, ntensors = 16;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--dir") == 0) dir = argv[i + 1];
    if (strcmp(argv[i], "--mib") == 0) mib = atol(argv[i + 1]);
    if (strcmp(argv[i], "--rounds") == 0) rounds = atol(argv[i + 1]);
    if (strcmp(argv[i], "--tensors") == 0) ntensors = atol(argv[i + 1]);
  }
  tpdp_checkpoint_options unverified = TPDP_CHECKPOINT_OPTIONS_INIT;
  unverified.verify = 0;
  if (dir == NULL || mib < 1 || rounds < 1 || ntensors < 1) {
    fprintf(stderr, "usage: ckpt_bench --dir DIR [--mib N] [--rounds R]\n");
    return 2;
  }
  OK(tpdp_init(&argc, &argv));
  tpdp_comm *world = NULL;
  OK(tpdp_comm_world(&world));
  int rank = tpdp_comm_rank(world), size = tpdp_comm_size(world);
  tpdp_mesh *mesh = NULL;
  char mesh_text[32];
  snprintf(mesh_text, sizeof mesh_text, "tp=%d", size);
  OK(tpdp_mesh_create_from_string(world, mesh_text, &mesh));

  /* ntensors tensors [rows, 4096] f32 adding up to mib MiB. */
  int64_t cols = 4096;
  int64_t rows = (int64_t)mib * 1048576 / ntensors / (cols * 4);
  int64_t g[2] = {rows, cols};
  tpdp_placement s0 = tpdp_shard(0);
  tpdp_device cpu = {TPDP_DEVICE_CPU, 0};
  tpdp_spec *spec = NULL;
  OK(tpdp_spec_create(mesh, &s0, 1, 2, g, TPDP_F32, cpu, &spec));
  int64_t ls[2], off[2];
  OK(tpdp_spec_local_shape(spec, rank, ls, off));
  size_t local_bytes = (size_t)(ls[0] * ls[1]) * 4;
  tpdp_state_dict *sd = NULL;
  OK(tpdp_state_dict_create(&sd));
  char **bufs = calloc((size_t)ntensors, sizeof *bufs);
  for (long i = 0; i < ntensors; i++) {
    bufs[i] = malloc(local_bytes);
    float *f = (float *)bufs[i];
    for (size_t k = 0; k < local_bytes / 4; k++)
      f[k] = (float)(i * 131 + rank * 17 + (long)(k % 4099));
    tpdp_tensor t;
    OK(tpdp_tensor_init(&t, bufs[i], TPDP_F32, cpu, 2, ls));
    char name[64];
    snprintf(name, sizeof name, "layers.%ld.weight", i);
    OK(tpdp_state_dict_add(sd, name, &t, spec));
  }
  char ckdir[4096], base[2][4096];
  snprintf(ckdir, sizeof ckdir, "%s/ckpt", dir);
  for (int k = 0; k < 2; k++)
    snprintf(base[k], sizeof base[k], "%s/plain.%d.%d", dir, rank, k);
  if (rank == 0)
    printf(
        "ckpt bench: %d ranks, %ld tensors of [%lld, %lld] f32 = %ld MiB "
        "(%zu MiB per rank), %ld rounds, in %s\n",
        size, ntensors, (long long)rows, (long long)cols, mib,
        local_bytes * (size_t)ntensors >> 20, rounds, dir);

  double *bs = calloc((size_t)rounds, sizeof(double)),
         *ts = calloc((size_t)rounds, sizeof(double)),
         *bl = calloc((size_t)rounds, sizeof(double)),
         *tl = calloc((size_t)rounds, sizeof(double)),
         *ul = calloc((size_t)rounds, sizeof(double));
  /* plain, tpdp, tpdp unverified: CPU seconds of all ranks */
  double cpu_load[3] = {0, 0, 0};
  for (long r = 0; r < rounds; r++) {
    const char *plain = base[r % 2], *old = base[(r + 1) % 2];
    for (int side = 0; side < 2; side++) {
      int tpdp_side = (side + r) % 2; /* alternate who goes first */
      if (rank == 0) drop_cache_dir(dir);
      tpdp_barrier(world);
      double t0 = now();
      if (tpdp_side) {
        OK(tpdp_checkpoint_save(sd, ckdir, world, NULL));
      } else {
        /* A new file, the previous one removed once this one is durable:
         * what a save that keeps the last checkpoint until the new one is
         * complete must do (rewriting one file in place would reuse the
         * blocks just freed, which a crash-safe save cannot). */
        int fd = open(plain, O_WRONLY | O_CREAT | O_TRUNC, 0666);
        if (fd < 0) {
          perror(plain);
          return 1;
        }
        for (long i = 0; i < ntensors; i++) write_all(fd, bufs[i], local_bytes);
        fsync(fd);
        close(fd);
        unlink(old);
      }
      tpdp_barrier(world);
      (tpdp_side ? ts : bs)[r] = now() - t0;
    }
    for (int step = 0; step < 3; step++) {
      int side = (step + (int)r) % 3; /* 0 plain, 1 tpdp, 2 unverified */
      for (long i = 0; i < ntensors; i++) memset(bufs[i], 0, local_bytes);
      if (rank == 0) drop_cache_dir(dir);
      tpdp_barrier(world);
      double t0 = now(), c0 = cpu_now();
      if (side > 0) {
        OK(tpdp_checkpoint_load(sd, ckdir, world,
                                side == 1 ? NULL : &unverified));
      } else {
        int fd = open(plain, O_RDONLY);
        if (fd < 0) {
          perror(plain);
          return 1;
        }
        for (long i = 0; i < ntensors; i++) read_all(fd, bufs[i], local_bytes);
        close(fd);
      }
      double cpu = cpu_now() - c0;
      tpdp_barrier(world);
      (side == 0 ? bl : side == 1 ? tl : ul)[r] = now() - t0;
      cpu_load[side] += sum_ranks(world, cpu);
      /* Every side must have read the data back. */
      float *f = (float *)bufs[ntensors - 1];
      size_t k = local_bytes / 4 - 1;
      if (f[k] !=
          (float)((ntensors - 1) * 131 + rank * 17 + (long)(k % 4099))) {
        fprintf(stderr, "ckpt_bench: rank %d read wrong data (%s)\n", rank,
                side ? "tpdp" : "plain");
        return 1;
      }
    }
    if (rank == 0) {
      printf(
          "round %ld: save plain %.3f s, tpdp %.3f s; load plain %.3f s, "
          "tpdp %.3f s (unverified %.3f s)\n",
          r, bs[r], ts[r], bl[r], tl[r], ul[r]);
      fflush(stdout);
    }
  }
  if (rank == 0) {
    double b_s = median(bs, (int)rounds), t_s = median(ts, (int)rounds);
    double b_l = median(bl, (int)rounds), t_l = median(tl, (int)rounds);
    double u_l = median(ul, (int)rounds);
    double gib = (double)mib / 1024;
    printf(
        "median: save plain %.3f s (%.2f GiB/s), tpdp %.3f s (%.2f GiB/s); "
        "load plain %.3f s (%.2f GiB/s), tpdp %.3f s (%.2f GiB/s)\n",
        b_s, gib / b_s, t_s, gib / t_s, b_l, gib / b_l, t_l, gib / t_l);
    /* What verification costs: the unverified load's time, and the CPU
     * each load took (all ranks, mean per round). */
    printf(
        "load without verification: tpdp %.3f s (ratio %.2f); load CPU "
        "(all ranks, per round): plain %.3f s, tpdp %.3f s, unverified "
        "%.3f s\n",
        u_l, b_l / u_l, cpu_load[0] / rounds, cpu_load[1] / rounds,
        cpu_load[2] / rounds);
    printf("ckpt: save_ratio %.2f load_ratio %.2f\n", b_s / t_s, b_l / t_l);
  }
  unlink(base[0]);
  unlink(base[1]);
  for (long i = 0; i < ntensors; i++) free(bufs[i]);
  free(bufs);
  free(bs);
  free(ts);
  free(bl);
  free(tl);
  free(ul);
  tpdp_state_dict_destroy(sd);
  tpdp_spec_destroy(spec);
  tpdp_mesh_destroy(mesh);
  tpdp_finalize();
  return 0;
}
