// SPDX-License-Identifier: BSD-3-Clause
// tpdp_topo_bind_rank on real MPI ranks of this machine: each rank gets its
// share of the host's cores (worked out here from the core count and the
// rank's local index), and TPDP_BIND=0 binds nothing.
#include <cstdlib>

#include "tests/test_util.h"
#include "tpdp/topo.h"

TEST(BindRank, EachRankGetsItsShareOfTheCores) {
  tpdp_topo *topo = nullptr;
  ASSERT_TPDP_OK(tpdp_topo_load(nullptr, &topo));
  tpdp_topo_counts c;
  ASSERT_TPDP_OK(tpdp_topo_get_counts(topo, &c));
  EXPECT_TPDP_OK(tpdp_topo_destroy(topo));
  int local = 0, nlocal = 0;
  ASSERT_TPDP_OK(tpdp_comm_local_rank(tpdp_test::World(), &local, &nlocal));
  // All ranks of this test run on one host.
  EXPECT_EQ(nlocal, tpdp_test::WorldSize());
  EXPECT_EQ(local, tpdp_test::WorldRank());

  unsetenv("TPDP_BIND");
  tpdp_binding b;
  ASSERT_TPDP_OK(tpdp_topo_bind_rank(tpdp_test::World(), &b));
  EXPECT_EQ(b.applied, 1);
  EXPECT_EQ(b.gpu, c.gpus > 0 ? local % c.gpus : -1);
  if (c.gpus == 0) {
    // cores [floor(j*n/k), floor((j+1)*n/k)), at least one
    int n = c.cores, k = nlocal, j = local;
    int lo = j * n / k, hi = (j + 1) * n / k;
    EXPECT_EQ(b.ncores, hi > lo ? hi - lo : 1);
  }

  setenv("TPDP_BIND", "0", 1);
  tpdp_binding off;
  ASSERT_TPDP_OK(tpdp_topo_bind_rank(tpdp_test::World(), &off));
  EXPECT_EQ(off.applied, 0);
  unsetenv("TPDP_BIND");
  EXPECT_TPDP_ERROR(tpdp_topo_bind_rank(nullptr, &off), TPDP_ERR_NULL_POINTER,
                    "comm");
}
