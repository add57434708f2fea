// SPDX-License-Identifier: BSD-3-Clause
// comm/mesh.c over a scripted backend (fake_backend.h): what the mesh does
// when its sub-communicators fail to split or to be destroyed. The layout,
// the sub-communicators over MPI and bad input are in comm_test.cc and
// no_init_test.cc.
#include <string>
#include <vector>

#include "tests/comm/fake_backend.h"
#include "tests/test_util.h"

namespace {

using fake_backend::Parent;
using fake_backend::Script;
using Names = std::vector<std::string>;

const int64_t kSizes[2] = {2, 2};
const char *const kNames[2] = {"dp", "tp"};

TEST(MeshDestroy, DestroysEveryDimAndReportsTheFirstFailure) {
  Script s;
  Parent parent(&s, 1, 4);
  tpdp_mesh *m = nullptr;
  ASSERT_TPDP_OK(tpdp_mesh_create(parent.get(), 2, kSizes, kNames, &m));
  EXPECT_EQ(s.live, 3);  // the parent and one communicator per dim
  s.fail_destroy = {"mesh.dp", "mesh.tp"};
  // Both dims fail: the first one's status and message come back, and the
  // second dim is destroyed all the same.
  EXPECT_TPDP_ERROR(tpdp_mesh_destroy(m), TPDP_ERR_MPI,
                    "tpdp_mesh_destroy: fake destroy of mesh.dp failed");
  EXPECT_EQ(s.destroyed, (Names{"mesh.dp", "mesh.tp"}));
  EXPECT_EQ(s.live, 1);
}

TEST(MeshDestroy, ALaterDimFailingIsReported) {
  Script s;
  Parent parent(&s, 0, 4);
  tpdp_mesh *m = nullptr;
  ASSERT_TPDP_OK(tpdp_mesh_create(parent.get(), 2, kSizes, kNames, &m));
  s.fail_destroy = {"mesh.tp"};
  EXPECT_TPDP_ERROR(tpdp_mesh_destroy(m), TPDP_ERR_MPI,
                    "fake destroy of mesh.tp failed");
  EXPECT_EQ(s.live, 1);
  EXPECT_TPDP_OK(tpdp_mesh_destroy(nullptr));
}

TEST(MeshCreate, ASplitFailureIsReportedNotTheCleanupsFailure) {
  Script s;
  Parent parent(&s, 3, 4);
  s.fail_split_call = 1;         // the tp dim
  s.fail_destroy = {"mesh.dp"};  // the dp dim made before it
  tpdp_mesh *m = reinterpret_cast<tpdp_mesh *>(1);
  EXPECT_TPDP_ERROR(tpdp_mesh_create(parent.get(), 2, kSizes, kNames, &m),
                    TPDP_ERR_MPI,
                    "tpdp_mesh_create: fake split call 1 of fake failed");
  EXPECT_EQ(m, nullptr);
  // The dp dim's communicator was destroyed on the way out.
  EXPECT_EQ(s.destroyed, (Names{"mesh.dp"}));
  EXPECT_EQ(s.live, 1);
}

TEST(MeshCreate, ABackendGivingNoCommunicatorIsAnInternalError) {
  Script s;
  Parent parent(&s, 2, 4);
  s.split_gives_nothing = true;
  tpdp_mesh *m = nullptr;
  EXPECT_TPDP_ERROR(tpdp_mesh_create(parent.get(), 2, kSizes, kNames, &m),
                    TPDP_ERR_INTERNAL,
                    "mesh dim dp: splitting fake (fake) with color 0 gave "
                    "rank 2 no communicator");
  EXPECT_EQ(m, nullptr);
  EXPECT_EQ(s.live, 1);
}

}  // namespace
