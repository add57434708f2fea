// SPDX-License-Identifier: BSD-3-Clause
/* The wrong launcher, refused at tpdp_init. tpdp's ranks are MPI ranks.
 * Processes started by a launcher that does not wire up MPI (torchrun,
 * `srun --mpi=none`) each become an MPI world of one rank: every one would
 * train alone on the whole data, silently (torchrun), or Open MPI stops in
 * MPI_Init with a message about its build (srun without PMIx). The
 * launcher's own environment says how many processes it started; when
 * that is more than one and MPI's world is (or, with no MPI launcher's
 * variables, will be) one rank, tpdp_init refuses, naming both and the
 * launch that works. TPDP_LAUNCHER_CHECK=0 turns the check off (N
 * independent single-rank runs on purpose). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/backend.h"

/* What a launcher's variables say: `var`=`n` processes, this one being
 * `detail` (its rank variables). n == 0: no launcher of N > 1 processes. */
typedef struct {
  const char *var;
  long n;
  char detail[160];
  int slurm;
} launch_env;

/* A positive integer variable, else 0. */
static long env_count(const char *name) {
  const char *v = getenv(name);
  if (v == NULL || *v == '\0') return 0;
  char *end = NULL;
  long n = strtol(v, &end, 10);
  return *end == '\0' && n > 0 ? n : 0;
}

static const char *env_or(const char *name, const char *dflt) {
  const char *v = getenv(name);
  return v != NULL ? v : dflt;
}

static launch_env launcher_env(void) {
  launch_env e = {0};
  long n = env_count("WORLD_SIZE");
  if (n > 1) {
    /* torchrun (and torch.distributed.launch, accelerate, deepspeed). */
    e.var = "WORLD_SIZE";
    e.n = n;
    snprintf(e.detail, sizeof e.detail, "RANK=%s, LOCAL_RANK=%s",
             env_or("RANK", "unset"), env_or("LOCAL_RANK", "unset"));
    return e;
  }
  /* A task of an srun step (SLURM_STEP_ID is set in steps only: a batch
   * script's SLURM_NTASKS is the job's, not a count of processes running
   * this program). */
  n = env_count("SLURM_NTASKS");
  if (n > 1 && getenv("SLURM_STEP_ID") != NULL) {
    e.var = "SLURM_NTASKS";
    e.n = n;
    e.slurm = 1;
    snprintf(e.detail, sizeof e.detail, "SLURM_PROCID=%s, SLURM_STEP_ID=%s",
             env_or("SLURM_PROCID", "unset"), env_or("SLURM_STEP_ID", "?"));
  }
  return e;
}

/* The variables an MPI launcher gives its processes: Open MPI's mpirun
 * (OMPI_COMM_WORLD_SIZE), any PMIx server (srun --mpi=pmix, prterun),
 * PMI-1/2 (MPICH's hydra, srun --mpi=pmi2). */
static const char *mpi_launcher_var(void) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK",
                                     "PMI_RANK", "PMI_FD", "PMI_SIZE"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
    if (getenv(vars[i]) != NULL) return vars[i];
  return NULL;
}

static int check_enabled(void) {
  return core_env_long("TPDP_LAUNCHER_CHECK", 1) != 0;
}

static tpdp_status refuse(const launch_env *e, const char *world) {
  if (e->slurm)
    return TPDP_ERR(
        TPDP_ERR_INVALID_ARGUMENT,
        "this process is one of %ld tasks of a Slurm step (%s=%ld; %s), but "
        "%s: each task would be a job of its own. srun wires MPI up only "
        "through a PMI plugin: launch with `srun --mpi=pmix -n %ld PROGRAM` "
        "(`srun --mpi=list` shows the plugins; MpiDefault=pmix in "
        "slurm.conf makes it the default), or with `mpirun -np %ld "
        "PROGRAM` inside the allocation (TPDP_LAUNCHER_CHECK=0: %ld "
        "single-rank runs on purpose)",
        e->n, e->var, e->n, e->detail, world, e->n, e->n, e->n);
  return TPDP_ERR(
      TPDP_ERR_INVALID_ARGUMENT,
      "this process is one of %ld started by a launcher that does not set up "
      "MPI (%s=%ld; %s: torchrun's variables), but %s: each would train "
      "alone. tpdp's ranks are MPI ranks: launch with `mpirun -np %ld "
      "PROGRAM` (`srun --mpi=pmix -n %ld PROGRAM` under Slurm) instead of "
      "torchrun (TPDP_LAUNCHER_CHECK=0: %ld single-rank runs on purpose)",
      e->n, e->var, e->n, e->detail, world, e->n, e->n, e->n);
}

tpdp_status comm_launcher_check_env(void) {
  launch_env e = launcher_env();
  if (e.n < 2 || mpi_launcher_var() != NULL || !check_enabled())
    return TPDP_SUCCESS;
  /* Refused before MPI_Init: under srun without PMI, Open MPI would stop
   * the process inside it; elsewhere the singleton it makes is all MPI
   * could give. */
  return refuse(&e,
                "no MPI launcher started it (none of OMPI_COMM_WORLD_SIZE, "
                "PMIX_RANK, PMI_RANK is set), so its MPI world would be 1 "
                "rank");
}

tpdp_status comm_launcher_check_world(int world_size) {
  launch_env e = launcher_env();
  if (e.n < 2 || world_size != 1 || !check_enabled()) return TPDP_SUCCESS;
  char world[96];
  snprintf(world, sizeof world,
           "its MPI world (MPI_COMM_WORLD) has 1 rank (%s is set)",
           mpi_launcher_var() ? mpi_launcher_var() : "MPI was initialised");
  return refuse(&e, world);
}
