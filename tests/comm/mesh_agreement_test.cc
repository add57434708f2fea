// SPDX-License-Identifier: BSD-3-Clause
// Mesh creation agrees across ranks (comm/mesh.c), on 2 and 4 ranks: ranks
// passing different meshes all fail with TPDP_ERR_MESH_MISMATCH naming each
// rank's mesh, instead of one rank failing while the others wait in a
// split, or communicators that disagree with the mesh. Also: a mesh's own
// dim communicators cannot be destroyed behind its back.
#include <string>

#include "tests/test_util.h"

namespace {

int Me() { return tpdp_test::WorldRank(); }
int P() { return tpdp_test::WorldSize(); }

std::string Head() {
  return "ranks of world passed different meshes (this is rank " +
         std::to_string(Me()) + "): ";
}

TEST(MeshAgreement, SameRankCountDifferentSizes) {
  // Both multiply to the world size: without the agreement each side
  // builds communicators that the other side's mesh contradicts.
  tpdp_mesh *m = reinterpret_cast<tpdp_mesh *>(0x1);
  int p = P();
  std::string a = "dp=" + std::to_string(p / 2) + ",tp=2";
  std::string b = "dp=" + std::to_string(p);
  bool first_half = Me() < p / 2;
  std::string want = Head() + (p == 2 ? "rank 0" : "ranks 0-1") +
                     " passed dp=" + std::to_string(p / 2) + ",tp=2, " +
                     (p == 2 ? "rank 1" : "ranks 2-3") +
                     " dp=" + std::to_string(p) +
                     "; every rank must pass the same dims";
  EXPECT_TPDP_ERROR(
      tpdp_mesh_create_from_string(tpdp_test::World(),
                                   first_half ? a.c_str() : b.c_str(), &m),
      TPDP_ERR_MESH_MISMATCH, "tpdp_mesh_create_from_string: ", want.c_str());
  EXPECT_EQ(m, nullptr);
}

TEST(MeshAgreement, SameSizesDifferentNames) {
  tpdp_mesh *m = nullptr;
  std::string n = "x=" + std::to_string(P());
  std::string y = "y=" + std::to_string(P());
  std::string want = Head() + "rank 0 passed " + n + ", " +
                     (P() == 2 ? "rank 1 " : "ranks 1-3 ") + y;
  EXPECT_TPDP_ERROR(
      tpdp_mesh_create_from_string(tpdp_test::World(),
                                   Me() == 0 ? n.c_str() : y.c_str(), &m),
      TPDP_ERR_MESH_MISMATCH, want.c_str());
}

TEST(MeshAgreement, ARankWithAWrongRankCountFailsItsPeersToo) {
  // Rank 0's mesh has twice the ranks of the world: it fails its own check
  // (which used to return at once while the others waited in a split);
  // every rank reports the disagreement.
  tpdp_mesh *m = nullptr;
  int64_t big[1] = {2 * P()}, right[1] = {P()};
  const char *names[1] = {"dp"};
  std::string want = Head() + "rank 0 passed dp=" + std::to_string(2 * P()) +
                     ", " + (P() == 2 ? "rank 1 " : "ranks 1-3 ") +
                     "dp=" + std::to_string(P());
  EXPECT_TPDP_ERROR(tpdp_mesh_create(tpdp_test::World(), 1,
                                     Me() == 0 ? big : right, names, &m),
                    TPDP_ERR_MESH_MISMATCH, want.c_str());
  EXPECT_EQ(m, nullptr);
}

TEST(MeshAgreement, TheSameWrongMeshEverywhereKeepsItsOwnMessage) {
  tpdp_mesh *m = nullptr;
  int64_t big[1] = {2 * P()};
  std::string want = "mesh [" + std::to_string(2 * P()) + "] has " +
                     std::to_string(2 * P()) + " ranks but communicator world";
  EXPECT_TPDP_ERROR(tpdp_mesh_create(tpdp_test::World(), 1, big, nullptr, &m),
                    TPDP_ERR_MESH_SIZE, want.c_str());
}

TEST(MeshAgreement, ARankFailingAloneNamesThatRank) {
  // The same mesh everywhere, but the last rank passes no `out`: every
  // rank gets its message, naming it.
  int last = P() - 1;
  tpdp_mesh *m = nullptr;
  int64_t sizes[1] = {P()};
  std::string want = "tpdp_mesh_create: argument 'out' is NULL (rank " +
                     std::to_string(last) + " of world)";
  EXPECT_TPDP_ERROR(tpdp_mesh_create(tpdp_test::World(), 1, sizes, nullptr,
                                     Me() == last ? nullptr : &m),
                    TPDP_ERR_NULL_POINTER, want.c_str());
  EXPECT_EQ(m, nullptr);
}

TEST(MeshAgreement, AgreeingRanksBuildTheMesh) {
  tpdp_mesh *m = nullptr;
  // names NULL on even ranks, spelled out on odd ones: the same mesh.
  int64_t sizes[2] = {P() / 2, 2};
  const char *names[2] = {"d0", "d1"};
  ASSERT_TPDP_OK(tpdp_mesh_create(tpdp_test::World(), 2, sizes,
                                  Me() % 2 ? names : nullptr, &m));
  tpdp_comm *d1 = nullptr;
  ASSERT_TPDP_OK(tpdp_mesh_dim_comm(m, 1, &d1));
  EXPECT_EQ(tpdp_comm_size(d1), 2);
  EXPECT_EQ(tpdp_comm_rank(d1), Me() % 2);
  EXPECT_TPDP_OK(tpdp_mesh_destroy(m));
}

TEST(MeshOwnership, ADimCommunicatorIsDestroyedByItsMeshOnly) {
  tpdp_mesh *m = nullptr;
  ASSERT_TPDP_OK(tpdp_mesh_create_from_string(
      tpdp_test::World(), ("dp=" + std::to_string(P())).c_str(), &m));
  tpdp_comm *dp = nullptr;
  ASSERT_TPDP_OK(tpdp_mesh_dim_comm(m, 0, &dp));
  std::string want = "communicator mesh.dp (rank " + std::to_string(Me()) +
                     ") belongs to a mesh; tpdp_mesh_destroy destroys it";
  EXPECT_TPDP_ERROR(tpdp_comm_destroy(dp), TPDP_ERR_STATE,
                    "tpdp_comm_destroy: ", want.c_str());
  // Still usable, and destroyed once, by the mesh.
  ASSERT_TPDP_OK(tpdp_barrier(dp));
  EXPECT_TPDP_OK(tpdp_mesh_destroy(m));
}

}  // namespace
