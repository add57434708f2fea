// SPDX-License-Identifier: BSD-3-Clause
// The life cycle of communicators (comm/comm.c), on 2 ranks: tpdp_finalize
// refuses to run while an object that uses the communicators is alive (the
// reducer registers itself through comm_live_add), naming it; after
// tpdp_finalize, calls on communicators of the ended tpdp_init (the world
// included) are TPDP_ERR_NOT_INITIALIZED rather than reads of freed
// memory. This binary finalises, so it holds one test.
#include <string>

#include "comm/services.h"
#include "tests/test_util.h"

namespace {

TEST(Lifetime, FinalizeWaitsForLiveObjectsThenEndsEveryCommunicator) {
  tpdp_comm *w = tpdp_test::World();
  tpdp_comm *sub = nullptr;
  ASSERT_TPDP_OK(tpdp_comm_split(w, 0, 0, &sub));
  tpdp_mesh *mesh = nullptr;
  ASSERT_TPDP_OK(tpdp_mesh_create_from_string(w, "dp=2", &mesh));
  tpdp_comm *dp = nullptr;
  ASSERT_TPDP_OK(tpdp_mesh_dim_comm(mesh, 0, &dp));

  int reducer = 0, other = 0;
  ASSERT_TPDP_OK(comm_live_add(&reducer, "reducer on mesh.dp (3 parameters)"));
  EXPECT_TPDP_ERROR(tpdp_finalize(), TPDP_ERR_STATE,
                    "tpdp_finalize: 1 object still uses the communicators: "
                    "reducer on mesh.dp (3 parameters); destroy it first "
                    "(tpdp is still initialised)");
  ASSERT_TPDP_OK(comm_live_add(&other, "reducer on world (1 parameters)"));
  EXPECT_TPDP_ERROR(tpdp_finalize(), TPDP_ERR_STATE,
                    "2 objects still use the communicators: reducer on "
                    "mesh.dp (3 parameters), reducer on world (1 "
                    "parameters); destroy them first");
  // Nothing was torn down.
  EXPECT_TRUE(tpdp_is_initialized());
  ASSERT_TPDP_OK(tpdp_barrier(w));
  comm_live_remove(&reducer);
  comm_live_remove(&reducer);  // unknown now: no-op
  comm_live_remove(&other);

  // The mesh and the split are left alive on purpose (a caller's bug).
  ASSERT_TPDP_OK(tpdp_finalize());
  EXPECT_FALSE(tpdp_is_initialized());

  float x = 1;
  tpdp_tensor t = tpdp_tensor_1d(&x, TPDP_F32, 1);
  const char *ended = "was made before tpdp_finalize, which ended it";
  EXPECT_TPDP_ERROR(tpdp_allreduce(w, &t, &t, TPDP_OP_SUM),
                    TPDP_ERR_NOT_INITIALIZED,
                    "tpdp_allreduce: communicator world", ended);
  tpdp_work *work = nullptr;
  EXPECT_TPDP_ERROR(tpdp_broadcast_async(w, &t, &t, 0, &work),
                    TPDP_ERR_NOT_INITIALIZED, "communicator world", ended);
  EXPECT_TPDP_ERROR(tpdp_barrier(sub), TPDP_ERR_NOT_INITIALIZED,
                    "communicator world/split(0)", ended);
  EXPECT_TPDP_ERROR(tpdp_allgather(dp, &t, &t), TPDP_ERR_NOT_INITIALIZED,
                    "communicator mesh.dp", ended);
  tpdp_comm *c = nullptr;
  EXPECT_TPDP_ERROR(tpdp_comm_split(w, 0, 0, &c), TPDP_ERR_NOT_INITIALIZED,
                    "tpdp_comm_split: communicator world", ended);
  tpdp_mesh *m2 = nullptr;
  EXPECT_TPDP_ERROR(tpdp_mesh_create_from_string(w, "dp=2", &m2),
                    TPDP_ERR_NOT_INITIALIZED, "communicator world", ended);
  EXPECT_TPDP_ERROR(tpdp_comm_world(&c), TPDP_ERR_NOT_INITIALIZED, "tpdp_init");
  // The world is still tpdp's; the caller's leftovers can be freed.
  EXPECT_TPDP_ERROR(tpdp_comm_destroy(w), TPDP_ERR_STATE,
                    "the world communicator is owned by tpdp");
  EXPECT_TPDP_OK(tpdp_comm_destroy(sub));
  EXPECT_TPDP_OK(tpdp_mesh_destroy(mesh));
  EXPECT_TPDP_OK(tpdp_finalize());  // again: nothing to do
}

}  // namespace
