// Smoke test of the MPI wrapper: allreduce of ranks over the world.
#include "tests/test_util.h"

TEST(Smoke, AllreduceOfRanks) {
  tpdp_comm *w = tpdp_test::World();
  ASSERT_NE(w, nullptr);
  int n = tpdp_comm_size(w);
  double x = tpdp_comm_rank(w), y = -1;
  tpdp_tensor s = tpdp_tensor_1d(&x, TPDP_F64, 1);
  tpdp_tensor r = tpdp_tensor_1d(&y, TPDP_F64, 1);
  ASSERT_TPDP_OK(tpdp_allreduce(w, &s, &r, TPDP_OP_SUM));
  EXPECT_EQ(y, n * (n - 1) / 2.0);
}
