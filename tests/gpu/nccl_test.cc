// NCCL backend tests at world size 1: one GoogleTest per check of
// tests/gpu/nccl_checks.c (every collective x dtype x op, in place, async
// test/wait, wait_stream, order_after, split, device tensor copies, the
// timeout path) and of tests/gpu/device_checks.c (redistribute and
// full_tensor of CUDA tensors on a 1-rank mesh; the reducer over CUDA
// parameters in view/copy mode with the bf16/f16 hooks). They skip when cudaGetDeviceCount finds no GPU, and in a
// build without --config=cuda they check the backend reports
// TPDP_ERR_UNSUPPORTED and skip.
#include <string>

#include "tests/test_util.h"

#ifdef TPDP_WITH_CUDA
#include "tests/gpu/nccl_checks.h"

namespace {

class NcclCheck : public ::testing::TestWithParam<int> {};

TEST_P(NcclCheck, Runs) {
  char msg[1024] = "";
  if (!tpdp_gpu_present(msg, sizeof msg)) GTEST_SKIP() << "no GPU: " << msg;
  const tpdp_gpu_check &c = tpdp_gpu_checks[GetParam()];
  EXPECT_EQ(c.run(msg, sizeof msg), 0) << c.name << ": " << msg;
}

INSTANTIATE_TEST_SUITE_P(WorldSize1, NcclCheck,
                         ::testing::Range(0, tpdp_gpu_check_count),
                         [](const ::testing::TestParamInfo<int> &i) {
                           return std::string(tpdp_gpu_checks[i.param].name);
                         });

TEST(NcclBuild, Available) { EXPECT_EQ(tpdp_nccl_available(), 1); }

}  // namespace

#else

TEST(NcclBuild, UnsupportedWithoutCuda) {
  EXPECT_EQ(tpdp_nccl_available(), 0);
  tpdp_comm *c = reinterpret_cast<tpdp_comm *>(1);
  EXPECT_TPDP_ERROR(tpdp_comm_create_nccl(nullptr, -1, &c),
                    TPDP_ERR_UNSUPPORTED, "--config=cuda");
  EXPECT_EQ(c, nullptr);
  int n = -1;
  EXPECT_TPDP_ERROR(tpdp_cuda_device_count(&n), TPDP_ERR_UNSUPPORTED,
                    "--config=cuda");
  EXPECT_EQ(tpdp_comm_nccl_stream(nullptr), nullptr);
  EXPECT_EQ(tpdp_comm_cuda_device(nullptr), -1);
}

TEST(NcclBuild, GpuTestsNeedCudaBuild) {
  GTEST_SKIP() << "built without --config=cuda";
}

#endif
