// SPDX-License-Identifier: BSD-3-Clause
// The wrong launcher (comm/launcher.c): processes that a launcher started
// as N but that MPI does not join are refused by tpdp_init with
// TPDP_ERR_INVALID_ARGUMENT naming the launcher's variable, the MPI world
// of 1 and the launch that works; launches that are fine are not.
//
// Run directly (launcher_test, no mpirun), each case in a child process
// of its own (forked before anything initialises MPI) with the
// environment of the launcher it plays: torchrun's WORLD_SIZE / RANK /
// LOCAL_RANK and an srun step's SLURM_NTASKS / SLURM_STEP_ID are refused
// before MPI_Init; a batch script's SLURM_NTASKS (no step), WORLD_SIZE=1
// and TPDP_LAUNCHER_CHECK=0 are not. Under `mpirun -np 1`
// (launcher_mpirun_test, the AfterMpiInit case), torchrun's variables meet
// a real MPI world of 1 rank. tests/slurm runs a real `srun --mpi=none`.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "tests/test_util.h"

namespace {

struct Outcome {
  tpdp_status status = TPDP_ERR_INTERNAL;
  std::string message;
  int initialized = -1;
};

// The variables of any launcher, cleared before each case sets its own.
const char *const kLauncherVars[] = {
    "WORLD_SIZE",       "RANK",         "LOCAL_RANK",
    "LOCAL_WORLD_SIZE", "SLURM_NTASKS", "SLURM_STEP_ID",
    "SLURM_PROCID",     "SLURM_JOB_ID", "TPDP_LAUNCHER_CHECK"};

// tpdp_init in a child process with `env` set; its status, message and
// tpdp_is_initialized() afterwards.
Outcome InitIn(const std::vector<std::pair<const char *, const char *>> &env) {
  int fd[2];
  Outcome o;
  if (pipe(fd) != 0) return o;
  pid_t pid = fork();
  if (pid == 0) {
    close(fd[0]);
    for (const char *v : kLauncherVars) unsetenv(v);
    for (const auto &kv : env) setenv(kv.first, kv.second, 1);
    tpdp_status st = tpdp_init(nullptr, nullptr);
    std::string out = std::to_string((int)st) + " " +
                      std::to_string(tpdp_is_initialized()) + " " +
                      tpdp_last_error();
    if (write(fd[1], out.data(), out.size()) < 0) _exit(3);
    close(fd[1]);
    if (st == TPDP_SUCCESS) tpdp_finalize();
    _exit(0);
  }
  close(fd[1]);
  std::string got;
  char buf[512];
  ssize_t n;
  while ((n = read(fd[0], buf, sizeof buf)) > 0) got.append(buf, (size_t)n);
  close(fd[0]);
  int wstatus = 0;
  waitpid(pid, &wstatus, 0);
  EXPECT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0)
      << "the child did not exit cleanly: " << got;
  int st = -1, init = -1, used = 0;
  if (std::sscanf(got.c_str(), "%d %d %n", &st, &init, &used) >= 2) {
    o.status = (tpdp_status)st;
    o.initialized = init;
    o.message = got.substr((size_t)used);
  }
  return o;
}

void ExpectRefused(const Outcome &o, const std::vector<const char *> &needles) {
  EXPECT_EQ(tpdp_status_string(o.status),
            std::string(tpdp_status_string(TPDP_ERR_INVALID_ARGUMENT)))
      << o.message;
  EXPECT_EQ(o.initialized, 0);
  EXPECT_EQ(o.message.rfind("tpdp_init: ", 0), 0u) << o.message;
  for (const char *n : needles)
    EXPECT_NE(o.message.find(n), std::string::npos)
        << "message '" << o.message << "' lacks '" << n << "'";
}

TEST(Launcher, TorchrunProcessesAreRefusedBeforeMpi) {
  Outcome o = InitIn({{"WORLD_SIZE", "4"}, {"RANK", "1"}, {"LOCAL_RANK", "1"}});
  ExpectRefused(o, {"one of 4", "WORLD_SIZE=4", "RANK=1, LOCAL_RANK=1",
                    "its MPI world would be 1 rank", "each would train alone",
                    "mpirun -np 4", "srun --mpi=pmix -n 4"});
}

TEST(Launcher, SrunStepWithoutPmiIsRefusedBeforeMpi) {
  Outcome o = InitIn({{"SLURM_NTASKS", "3"},
                      {"SLURM_STEP_ID", "0"},
                      {"SLURM_PROCID", "2"},
                      {"SLURM_JOB_ID", "17"}});
  ExpectRefused(o, {"one of 3 tasks of a Slurm step", "SLURM_NTASKS=3",
                    "SLURM_PROCID=2", "its MPI world would be 1 rank",
                    "srun --mpi=pmix -n 3", "mpirun -np 3"});
}

// A batch script's SLURM_NTASKS counts the job's tasks, not processes
// running this program (no SLURM_STEP_ID): a one-rank tool there is fine.
TEST(Launcher, BatchScriptIsNotAStep) {
  Outcome o = InitIn({{"SLURM_NTASKS", "4"}, {"SLURM_JOB_ID", "17"}});
  EXPECT_EQ(o.status, TPDP_SUCCESS) << o.message;
  EXPECT_EQ(o.initialized, 1);
}

TEST(Launcher, OneProcessOrTheCheckOffIsFine) {
  Outcome one = InitIn({{"WORLD_SIZE", "1"}, {"RANK", "0"}});
  EXPECT_EQ(one.status, TPDP_SUCCESS) << one.message;
  Outcome off = InitIn({{"WORLD_SIZE", "4"}, {"TPDP_LAUNCHER_CHECK", "0"}});
  EXPECT_EQ(off.status, TPDP_SUCCESS) << off.message;
  EXPECT_EQ(off.initialized, 1);
}

// Under `mpirun -np 1` (an MPI launcher's variables are set, so the check
// waits for MPI's own answer): torchrun's variables say 2, the world says
// 1. The refusal leaves tpdp uninitialised (and MPI finalised, as tpdp
// found it).
TEST(AfterMpiInit, TorchrunVariablesMeetAWorldOfOne) {
  if (std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr)
    GTEST_SKIP() << "runs under mpirun -np 1 (launcher_mpirun_test)";
  setenv("WORLD_SIZE", "2", 1);
  setenv("RANK", "0", 1);
  EXPECT_TPDP_ERROR(tpdp_init(nullptr, nullptr), TPDP_ERR_INVALID_ARGUMENT,
                    "one of 2", "WORLD_SIZE=2",
                    "its MPI world (MPI_COMM_WORLD) has 1 rank",
                    "mpirun -np 2");
  EXPECT_EQ(tpdp_is_initialized(), 0);
}

}  // namespace
