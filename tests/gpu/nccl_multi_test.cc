// SPDX-License-Identifier: BSD-3-Clause
// Multi-rank NCCL backend tests (tpdp_mpi_test, np 2 and 4): one
// GoogleTest per check of tests/gpu/nccl_multi_checks.c, over an NCCL
// communicator made from the MPI world (tpdp_comm_create_nccl(world, -1)):
// allreduce (sum/avg/max/min), allgather, reduce_scatter, broadcast (every
// root), alltoall and barrier, every dtype, counts 1, 7 and 1M+3, in place
// and out of place, blocking and async (tpdp_work_wait_stream on a user
// stream, then cudaStreamSynchronize), a split of the communicator, and at
// world size 4 a dp=2 x tp=2 mesh over it (its sub-communicators by
// ncclCommSplit). Results are checked against values computed on the host.
//
// Skipped, with the reason, in a build without --config=cuda, and when any
// rank's host has fewer GPUs than ranks (or tpdp_cuda_device_count fails):
// the decision is taken together over the MPI world, so every rank skips
// or every rank runs and none is left waiting in a collective.
#include <string>

#include "tests/test_util.h"

#ifdef TPDP_WITH_CUDA
#include "tests/gpu/nccl_multi_checks.h"

namespace {

class NcclMulti : public ::testing::TestWithParam<int> {
 public:
  // Collective over the world: every rank runs the suite's set-up.
  static void SetUpTestSuite() {
    reason_[0] = '\0';
    ready_ = tpdp_gpu_multi_ready(tpdp_test::World(), reason_, sizeof reason_);
    opened_ = ready_ && tpdp_gpu_multi_open(&ctx_, tpdp_test::World(), reason_,
                                            sizeof reason_) == 0;
  }
  static void TearDownTestSuite() {
    tpdp_comm_destroy(ctx_.nccl);
    ctx_.nccl = nullptr;
  }

 protected:
  void SetUp() override {
    if (!ready_) GTEST_SKIP() << reason_;
    ASSERT_TRUE(opened_) << reason_;
    const tpdp_gpu_multi_check &c = tpdp_gpu_multi_checks[GetParam()];
    if (c.world_size != 0 && tpdp_test::WorldSize() != c.world_size)
      GTEST_SKIP() << c.name << " needs world size " << c.world_size << ", not "
                   << tpdp_test::WorldSize();
  }

  static tpdp_gpu_multi_ctx ctx_;
  static int ready_;
  static bool opened_;
  static char reason_[1024];
};

tpdp_gpu_multi_ctx NcclMulti::ctx_ = {nullptr, nullptr};
int NcclMulti::ready_ = 0;
bool NcclMulti::opened_ = false;
char NcclMulti::reason_[1024];

TEST_P(NcclMulti, Runs) {
  char msg[1024] = "";
  const tpdp_gpu_multi_check &c = tpdp_gpu_multi_checks[GetParam()];
  EXPECT_EQ(c.run(&ctx_, msg, sizeof msg), 0)
      << c.name << " (world rank " << tpdp_test::WorldRank() << " of "
      << tpdp_test::WorldSize() << "): " << msg;
}

INSTANTIATE_TEST_SUITE_P(Nccl, NcclMulti,
                         ::testing::Range(0, tpdp_gpu_multi_check_count),
                         [](const ::testing::TestParamInfo<int> &i) {
                           return std::string(
                               tpdp_gpu_multi_checks[i.param].name);
                         });

}  // namespace

#else

TEST(NcclMultiBuild, UnsupportedWithoutCuda) {
  EXPECT_EQ(tpdp_nccl_available(), 0);
  tpdp_comm *c = reinterpret_cast<tpdp_comm *>(1);
  EXPECT_TPDP_ERROR(tpdp_comm_create_nccl(tpdp_test::World(), -1, &c),
                    TPDP_ERR_UNSUPPORTED, "--config=cuda");
  EXPECT_EQ(c, nullptr);
}

TEST(NcclMultiBuild, GpuTestsNeedCudaBuild) {
  GTEST_SKIP() << "built without --config=cuda";
}

#endif
