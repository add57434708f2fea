// SPDX-License-Identifier: BSD-3-Clause
// The example's CUDA model (examples/train_mlp/mlp_cuda.cu) against its CPU
// model (mlp.c): one GoogleTest per check of mlp_cuda_checks.c (forward +
// backward on the same parameters and batch, AdamW). Skips with the reason
// when no GPU is found, and in a build without --config=cuda.
#include <gtest/gtest.h>

#include <string>

#ifdef TPDP_EXAMPLES_MLP_CUDA
#include "tests/examples/mlp_cuda_checks.h"

namespace {

class MlpCuda : public ::testing::TestWithParam<int> {};

TEST_P(MlpCuda, MatchesCpu) {
  char msg[1024] = "";
  if (!mlp_cuda_gpu_present(msg, sizeof msg)) GTEST_SKIP() << "no GPU: " << msg;
  const mlp_cuda_check &c = mlp_cuda_checks[GetParam()];
  EXPECT_EQ(c.run(msg, sizeof msg), 0) << c.name << ": " << msg;
}

INSTANTIATE_TEST_SUITE_P(Model, MlpCuda,
                         ::testing::Range(0, mlp_cuda_check_count),
                         [](const ::testing::TestParamInfo<int> &i) {
                           return std::string(mlp_cuda_checks[i.param].name);
                         });

}  // namespace

#else

TEST(MlpCuda, NeedsCudaBuild) {
  GTEST_SKIP() << "built without --config=cuda: the CUDA model is not compiled";
}

#endif
