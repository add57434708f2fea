// SPDX-License-Identifier: BSD-3-Clause
// NCCL backend tests at world size 1: one GoogleTest per check of
// tests/gpu/nccl_checks.c (every collective x dtype x op, in place, async
// test/wait, wait_stream, order_after, split, device tensor copies, the
// timeout path) and of tests/gpu/device_checks.c (redistribute and
// full_tensor of CUDA tensors on a 1-rank mesh; the reducer over CUDA
// parameters in view/copy mode with the bf16/f16 hooks). The checks skip,
// with CUDA's reason, when cudaGetDeviceCount finds no GPU: nothing can be
// asserted of them there. NcclBuild asserts what holds in every build: with
// --config=cuda the backend is there and the device count works or names
// the driver's error; without it every entry point says to build with
// --config=cuda.
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

// tpdp_cuda_device_count agrees with cudaGetDeviceCount called directly
// (tpdp_gpu_present): a count on a GPU machine, else TPDP_ERR_CUDA with
// CUDA's own error text (a CUDA build on a machine without a driver or
// GPU, as the development machines), and tpdp_comm_create_nccl fails the
// same way instead of reporting the backend as missing.
TEST(NcclBuild, DeviceCountWorksOrNamesTheDriversError) {
  char direct[1024] = "";
  const bool present = tpdp_gpu_present(direct, sizeof direct);
  int n = -1;
  tpdp_clear_error();
  const tpdp_status st = tpdp_cuda_device_count(&n);
  if (present) {
    EXPECT_EQ(st, TPDP_SUCCESS) << tpdp_last_error();
    EXPECT_GE(n, 1);
    return;
  }
  const std::string prefix = "cudaGetDeviceCount: ";
  const std::string why = std::string(direct).rfind(prefix, 0) == 0
                              ? std::string(direct).substr(prefix.size())
                              : std::string();
  if (why.empty()) {
    // CUDA works but sees no device: a count of 0.
    EXPECT_EQ(st, TPDP_SUCCESS) << tpdp_last_error();
    EXPECT_EQ(n, 0);
  } else {
    EXPECT_EQ(st, TPDP_ERR_CUDA);
    EXPECT_EQ(n, 0);
    const std::string msg = tpdp_last_error();
    EXPECT_EQ(
        msg.rfind("tpdp_cuda_device_count: cudaGetDeviceCount failed: " + why,
                  0),
        0u)
        << msg;
  }
  tpdp_comm *c = reinterpret_cast<tpdp_comm *>(1);
  EXPECT_TPDP_ERROR(tpdp_comm_create_nccl(nullptr, -1, &c), TPDP_ERR_CUDA,
                    "tpdp_comm_create_nccl: cudaGetDeviceCount");
  EXPECT_EQ(c, nullptr);
}

}  // namespace

#else

TEST(NcclBuild, EveryEntryPointSaysToBuildWithCuda) {
  EXPECT_EQ(tpdp_nccl_available(), 0);
  tpdp_comm *c = reinterpret_cast<tpdp_comm *>(1);
  EXPECT_TPDP_ERROR(tpdp_comm_create_nccl(nullptr, -1, &c),
                    TPDP_ERR_UNSUPPORTED,
                    "tpdp_comm_create_nccl: built without --config=cuda");
  EXPECT_EQ(c, nullptr);
  int n = -1;
  EXPECT_TPDP_ERROR(tpdp_cuda_device_count(&n), TPDP_ERR_UNSUPPORTED,
                    "tpdp_cuda_device_count: built without --config=cuda");
  EXPECT_EQ(n, 0);
  EXPECT_EQ(tpdp_comm_nccl_stream(nullptr), nullptr);
  EXPECT_EQ(tpdp_comm_cuda_device(nullptr), -1);
}

#endif
