// SPDX-License-Identifier: BSD-3-Clause
// dp/reducer_thread.c: the caller's wait for the communication thread is
// bounded by TPDP_TIMEOUT_S. A scripted backend (one process, no MPI)
// whose allreduce blocks until released stands for a peer that never
// calls its allreduce; the watchdog of the MPI backend is not involved
// (this communicator is not an MPI one), so the wait itself must give up.
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

#include "comm/backend.h"
#include "tests/test_util.h"
#include "tpdp/reducer.h"

namespace {

std::atomic<bool> g_hold{false};
std::atomic<int> g_blocked{0};

tpdp_status WorkWait(tpdp_work *) { return TPDP_SUCCESS; }
tpdp_status WorkTest(tpdp_work *, int *done) {
  *done = 1;
  return TPDP_SUCCESS;
}
tpdp_status WorkRelease(tpdp_work *) { return TPDP_SUCCESS; }

// Completes at once (create's agreement: the buffers stay as they are,
// alike "on every rank"), except an allreduce while g_hold is set.
tpdp_status Collective(tpdp_comm *comm, const tpdp_coll_args *args,
                       tpdp_work **out) {
  if (args->kind == TPDP_COLL_ALLREDUCE && g_hold) {
    g_blocked++;
    while (g_hold) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  tpdp_work *w = static_cast<tpdp_work *>(calloc(1, sizeof(tpdp_work)));
  if (w == nullptr) return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "fake work");
  w->comm = comm;
  w->kind = args->kind;
  static const tpdp_work_ops work_ops = {WorkWait, WorkTest, nullptr,
                                         WorkRelease};
  w->ops = &work_ops;
  *out = w;
  return TPDP_SUCCESS;
}

tpdp_status Destroy(tpdp_comm *) { return TPDP_SUCCESS; }

const tpdp_comm_ops *Ops() {
  static tpdp_comm_ops ops = [] {
    tpdp_comm_ops o = {};
    o.backend = "fake";
    o.device_type = TPDP_DEVICE_CPU;
    o.collective = Collective;
    o.destroy = Destroy;
    return o;
  }();
  return &ops;
}

TEST(ReducerThread, WaitForAStuckBucketTimesOut) {
  // Read at the first bounded wait of this process (none came before).
  setenv("TPDP_TIMEOUT_S", "1", 1);
  tpdp_comm *comm = nullptr;
  ASSERT_EQ(comm_alloc(Ops(), 0, 2, "fake", &comm), TPDP_SUCCESS);
  comm->concurrent_threads = 1; /* the reducer starts its thread */
  std::vector<float> p(1000, 1.0f), g(1000, 1.0f);
  tpdp_reducer_param param = {tpdp_tensor_1d(p.data(), TPDP_F32, 1000),
                              tpdp_tensor_1d(g.data(), TPDP_F32, 1000), "w"};
  tpdp_reducer *r = nullptr;
  ASSERT_EQ(tpdp_reducer_create(comm, &param, 1, nullptr, &r), TPDP_SUCCESS)
      << tpdp_last_error();
  g_hold = true;
  ASSERT_EQ(tpdp_reducer_prepare(r), TPDP_SUCCESS) << tpdp_last_error();
  ASSERT_EQ(tpdp_reducer_mark_ready(r, 0), TPDP_SUCCESS) << tpdp_last_error();
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_TPDP_ERROR(tpdp_reducer_finalize(r), TPDP_ERR_TIMEOUT,
                    "tpdp_reducer_finalize: timed out after 1 s "
                    "(TPDP_TIMEOUT_S) waiting for bucket 0 of 1",
                    "allreduce on fake, rank 0 of 2",
                    "the iteration was abandoned");
  double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  EXPECT_GE(waited, 1.0); /* the bucket's wait, then the abandon's drain */
  EXPECT_EQ(g_blocked.load(), 1);
  g_hold = false; /* the thread's allreduce returns: destroy can join it */
  EXPECT_EQ(tpdp_reducer_destroy(r), TPDP_SUCCESS) << tpdp_last_error();
  EXPECT_EQ(tpdp_comm_destroy(comm), TPDP_SUCCESS);
  unsetenv("TPDP_TIMEOUT_S");
}

}  // namespace
