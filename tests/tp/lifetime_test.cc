// SPDX-License-Identifier: BSD-3-Clause
// Lifetimes of meshes and specs (comm/mesh.c, tp/spec.c): a spec holds its
// mesh, which refuses to be destroyed while specs (or reducers) built on it
// live, naming how many; a destroyed mesh or spec is refused (a best-effort
// check of a magic field cleared on destroy, skipped under ASan and
// valgrind, which see the read of freed memory it makes on purpose).
// Single process, layout-only meshes.
#include <vector>

#include "tests/test_util.h"
#include "tests/tp/spec_test_util.h"

namespace {

using tpdp_test::kCpu;

tpdp_mesh *MakeMesh() {
  int64_t sizes[2] = {2, 2};
  const char *names[2] = {"dp", "tp"};
  tpdp_mesh *m = nullptr;
  EXPECT_TPDP_OK(tpdp_mesh_create(nullptr, 2, sizes, names, &m));
  return m;
}

tpdp_spec *MakeSpec(tpdp_mesh *m) {
  tpdp_placement pl[2] = {tpdp_replicate(), tpdp_shard(0)};
  int64_t shape[2] = {6, 4};
  tpdp_spec *s = nullptr;
  EXPECT_TPDP_OK(tpdp_spec_create(m, pl, 2, 2, shape, TPDP_F32, kCpu, &s));
  return s;
}

}  // namespace

TEST(MeshLifetime, DestroyIsRefusedWhileSpecsLive) {
  tpdp_mesh *m = MakeMesh();
  ASSERT_NE(m, nullptr);
  tpdp_spec *a = MakeSpec(m), *b = MakeSpec(m);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_TPDP_ERROR(tpdp_mesh_destroy(m), TPDP_ERR_STATE,
                    "tpdp_mesh_destroy: mesh dp=2,tp=2 is still in use by 2 "
                    "spec(s) and 0 reducer(s)",
                    "tpdp_spec_destroy", "nothing was destroyed");
  // Refused means untouched: the specs still work.
  int64_t shape[2] = {0, 0};
  EXPECT_TPDP_OK(tpdp_spec_local_shape(a, 3, shape, nullptr));
  EXPECT_EQ(shape[0], 3);  // tp coordinate 1 of 2 holds rows 3..5
  EXPECT_TPDP_OK(tpdp_spec_destroy(a));
  EXPECT_TPDP_ERROR(tpdp_mesh_destroy(m), TPDP_ERR_STATE,
                    "still in use by 1 spec(s)");
  // A spec derived from b holds the mesh too.
  tpdp_placement rep[2] = {tpdp_replicate(), tpdp_replicate()};
  tpdp_spec *c = nullptr;
  ASSERT_TPDP_OK(tpdp_spec_with_placements(b, rep, 2, &c));
  EXPECT_TPDP_OK(tpdp_spec_destroy(b));
  EXPECT_TPDP_ERROR(tpdp_mesh_destroy(m), TPDP_ERR_STATE,
                    "still in use by 1 spec(s)");
  EXPECT_TPDP_OK(tpdp_spec_destroy(c));
  EXPECT_TPDP_OK(tpdp_mesh_destroy(m));
}

// A spec whose creation failed holds nothing.
TEST(MeshLifetime, FailedSpecCreateHoldsNothing) {
  tpdp_mesh *m = MakeMesh();
  tpdp_placement pl[2] = {tpdp_replicate(), tpdp_shard(5)};
  int64_t shape[2] = {6, 4};
  tpdp_spec *s = nullptr;
  EXPECT_TPDP_ERROR(tpdp_spec_create(m, pl, 2, 2, shape, TPDP_F32, kCpu, &s),
                    TPDP_ERR_INVALID_ARGUMENT, "Shard(5)");
  EXPECT_TPDP_OK(tpdp_mesh_destroy(m));
}

TEST(MeshLifetime, DestroyedMeshIsRefused) {
  if (tpdp_test::FreedMemoryChecked())
    GTEST_SKIP() << "reads a freed mesh on purpose: not under ASan or "
                    "valgrind";
  tpdp_mesh *m = MakeMesh();
  ASSERT_TPDP_OK(tpdp_mesh_destroy(m));
  EXPECT_TPDP_ERROR(tpdp_mesh_destroy(m), TPDP_ERR_INVALID_ARGUMENT,
                    "tpdp_mesh_destroy: the mesh (",
                    "has been destroyed (tpdp_mesh_destroy)");
  int64_t coords[2];
  EXPECT_TPDP_ERROR(tpdp_mesh_coords(m, 0, coords), TPDP_ERR_INVALID_ARGUMENT,
                    "tpdp_mesh_coords: the mesh (", "has been destroyed");
  tpdp_placement pl[2] = {tpdp_replicate(), tpdp_shard(0)};
  int64_t shape[2] = {6, 4};
  tpdp_spec *s = nullptr;
  EXPECT_TPDP_ERROR(tpdp_spec_create(m, pl, 2, 2, shape, TPDP_F32, kCpu, &s),
                    TPDP_ERR_INVALID_ARGUMENT, "tpdp_spec_create: the mesh (",
                    "has been destroyed");
  EXPECT_EQ(s, nullptr);
}

TEST(SpecLifetime, DestroyedSpecIsRefused) {
  if (tpdp_test::FreedMemoryChecked())
    GTEST_SKIP() << "reads a freed spec on purpose: not under ASan or "
                    "valgrind";
  tpdp_mesh *m = MakeMesh();
  tpdp_spec *s = MakeSpec(m);
  ASSERT_TPDP_OK(tpdp_spec_destroy(s));
  EXPECT_TPDP_ERROR(tpdp_spec_destroy(s), TPDP_ERR_INVALID_ARGUMENT,
                    "tpdp_spec_destroy: argument 'spec' (",
                    "is a spec that has been destroyed (tpdp_spec_destroy)");
  int64_t shape[2];
  EXPECT_TPDP_ERROR(tpdp_spec_local_shape(s, 0, shape, nullptr),
                    TPDP_ERR_INVALID_ARGUMENT, "tpdp_spec_local_shape",
                    "has been destroyed");
  tpdp_placement rep[2] = {tpdp_replicate(), tpdp_replicate()};
  tpdp_spec *c = nullptr;
  EXPECT_TPDP_ERROR(tpdp_spec_with_placements(s, rep, 2, &c),
                    TPDP_ERR_INVALID_ARGUMENT, "has been destroyed");
  // The double destroy released nothing twice: the mesh goes now.
  EXPECT_TPDP_OK(tpdp_mesh_destroy(m));
}
