// SPDX-License-Identifier: BSD-3-Clause
// Misuse of include/tpdp/dtensor.h on 2 ranks (a mesh "tp=2" over the
// world): each case asserts the status and that the message names the
// placement, mesh dim, parameter FQN or rank at fault with the expected and
// actual values. Every case fails alike on both ranks (before
// communicating, or in the agreement that the library runs first).
// Cases:
//  - placements: unknown text, unknown reduce op, a list too long, an empty
//    item
//  - tpdp_spec_create: placements count != mesh dims, Shard dim out of
//    range, negative and int64-overflowing global shapes, Partial(avg) on
//    an integer dtype, invalid dtype, NULL mesh
//  - tpdp_spec_local_shape: rank outside the mesh
//  - tpdp_dtensor_unflatten: local shape, dtype and device unlike the spec
//  - tpdp_redistribute: specs on different meshes (the communicator of
//    another mesh), a layout-only mesh, global shapes / dtypes / devices
//    that differ, a destination of the wrong local shape, a strided
//    destination, a destination overlapping the source
//  - JSON: malformed text, a mesh of another shape, other dim names, a
//    buffer too small
//  - redistribute with a different global shape on each rank; a mesh
//    destroyed while a spec uses it
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "tests/misuse/mesh_fixture.h"
#include "tests/test_util.h"

namespace {

const tpdp_device kCpu = {TPDP_DEVICE_CPU, 0};

using tpdp_test::Mesh;

struct Spec {
  tpdp_spec *s = nullptr;
  Spec(const tpdp_mesh *mesh, const char *placements,
       std::vector<int64_t> shape, tpdp_dtype dtype = TPDP_F32,
       tpdp_device dev = kCpu) {
    tpdp_placement p[TPDP_MAX_DIMS];
    int n = 0;
    EXPECT_TPDP_OK(tpdp_placements_parse(placements, p, TPDP_MAX_DIMS, &n));
    EXPECT_TPDP_OK(tpdp_spec_create(mesh, p, n, (int)shape.size(), shape.data(),
                                    dtype, dev, &s));
  }
  ~Spec() { EXPECT_TPDP_OK(tpdp_spec_destroy(s)); }
};

// A local f32 tensor of the given shape.
struct Local {
  std::vector<float> v;
  tpdp_tensor t;
  explicit Local(std::vector<int64_t> shape, tpdp_dtype dtype = TPDP_F32) {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    v.assign((size_t)(n > 0 ? n : 1) * 2, 0.f);
    EXPECT_TPDP_OK(tpdp_tensor_init(&t, v.data(), dtype, kCpu,
                                    (int)shape.size(), shape.data()));
  }
};

TEST(DtensorMisuse, PlacementTextErrors) {
  tpdp_placement p[2];
  int n = 0;
  EXPECT_TPDP_ERROR(tpdp_placement_parse("X1", p), TPDP_ERR_PARSE,
                    "tpdp_placement_parse: ",
                    "placement 'X1' is not S<dim> (dim < 8), R, P or P:<op>");
  EXPECT_TPDP_ERROR(tpdp_placement_parse("P:mean", p), TPDP_ERR_PARSE,
                    "unknown reduce op 'mean' (sum, avg, max, min)");
  EXPECT_TPDP_ERROR(tpdp_placements_parse("S0,R,R", p, 2, &n),
                    TPDP_ERR_TOO_MANY_DIMS,
                    "placement list 'S0,R,R' has more than 2 items");
  EXPECT_TPDP_ERROR(tpdp_placements_parse("S0,,R", p, 2, &n), TPDP_ERR_PARSE,
                    "placement list 'S0,,R': item 1 is empty or too long");
}

TEST(DtensorMisuse, SpecPlacementCountAndShardDim) {
  Mesh mesh(tpdp_test::World(), "tp=2");
  tpdp_spec *s = nullptr;
  int64_t shape[2] = {4, 3};
  tpdp_placement two[2] = {tpdp_shard(0), tpdp_replicate()};
  EXPECT_TPDP_ERROR(
      tpdp_spec_create(mesh.m, two, 2, 2, shape, TPDP_F32, kCpu, &s),
      TPDP_ERR_INVALID_ARGUMENT, "tpdp_spec_create: ",
      "2 placements given for a 1-dim mesh (one per mesh dim needed)");
  tpdp_placement s2 = tpdp_shard(2);
  EXPECT_TPDP_ERROR(
      tpdp_spec_create(mesh.m, &s2, 1, 2, shape, TPDP_F32, kCpu, &s),
      TPDP_ERR_INVALID_ARGUMENT,
      "placement of mesh dim 0 (tp) is Shard(2) but the tensor has 2 dims: "
      "shard dim must be in [0, 2)");
  EXPECT_EQ(s, nullptr);
}

TEST(DtensorMisuse, SpecNegativeAndHugeGlobalShapes) {
  Mesh mesh(tpdp_test::World(), "tp=2");
  tpdp_spec *s = nullptr;
  tpdp_placement sh = tpdp_shard(0);
  int64_t neg[2] = {4, -3};
  EXPECT_TPDP_ERROR(
      tpdp_spec_create(mesh.m, &sh, 1, 2, neg, TPDP_F32, kCpu, &s),
      TPDP_ERR_BAD_DIM_SIZE, "global shape dim 1 is -3 (sizes must be >= 0)");
  const int64_t big = std::numeric_limits<int64_t>::max();
  int64_t huge[2] = {big, 2};
  EXPECT_TPDP_ERROR(
      tpdp_spec_create(mesh.m, &sh, 1, 2, huge, TPDP_F32, kCpu, &s),
      TPDP_ERR_INVALID_ARGUMENT,
      "global shape [9223372036854775807, 2] of f32 overflows",
      "above INT64_MAX");
  EXPECT_EQ(s, nullptr);
}

TEST(DtensorMisuse, SpecPartialAvgOfIntegersAndBadDtype) {
  Mesh mesh(tpdp_test::World(), "tp=2");
  tpdp_spec *s = nullptr;
  int64_t shape[1] = {4};
  tpdp_placement avg = tpdp_partial(TPDP_OP_AVG);
  EXPECT_TPDP_ERROR(
      tpdp_spec_create(mesh.m, &avg, 1, 1, shape, TPDP_I32, kCpu, &s),
      TPDP_ERR_OP_DTYPE,
      "placement of mesh dim 0 (tp) is Partial(avg) but dtype i32 is an "
      "integer type");
  tpdp_placement r = tpdp_replicate();
  EXPECT_TPDP_ERROR(
      tpdp_spec_create(mesh.m, &r, 1, 1, shape, (tpdp_dtype)77, kCpu, &s),
      TPDP_ERR_DTYPE_MISMATCH, "invalid dtype 77");
  EXPECT_TPDP_ERROR(
      tpdp_spec_create(nullptr, &r, 1, 1, shape, TPDP_F32, kCpu, &s),
      TPDP_ERR_NULL_POINTER, "'mesh' is NULL");
}

TEST(DtensorMisuse, LocalShapeOfARankOutsideTheMesh) {
  Mesh mesh(tpdp_test::World(), "tp=2");
  Spec spec(mesh.m, "S0", {5, 3});
  int64_t local[2];
  EXPECT_TPDP_ERROR(tpdp_spec_local_shape(spec.s, 2, local, nullptr),
                    TPDP_ERR_INVALID_ARGUMENT, "tpdp_spec_local_shape: ",
                    "rank 2 outside [0, 2) of the spec's mesh");
}

TEST(DtensorMisuse, UnflattenLocalUnlikeTheSpec) {
  Mesh mesh(tpdp_test::World(), "tp=2");
  Spec spec(mesh.m, "S0", {5, 3});  // rank 0 [3, 3], rank 1 [2, 3]
  const int rank = tpdp_test::WorldRank();
  tpdp_dtensor dt;
  Local wrong({4, 3});
  const std::string want = "but the spec gives mesh rank " +
                           std::to_string(rank) + " the local shape " +
                           (rank == 0 ? "[3, 3]" : "[2, 3]");
  EXPECT_TPDP_ERROR(tpdp_dtensor_unflatten(&wrong.t, spec.s, &dt),
                    TPDP_ERR_SHAPE_MISMATCH,
                    "tpdp_dtensor_unflatten: ", "local tensor has shape [4, 3]",
                    want.c_str());
  Local f64({rank == 0 ? 3 : 2, 3}, TPDP_F64);
  EXPECT_TPDP_ERROR(tpdp_dtensor_unflatten(&f64.t, spec.s, &dt),
                    TPDP_ERR_DTYPE_MISMATCH,
                    "local tensor has dtype f64 but the spec says f32");
  Local gpu({rank == 0 ? 3 : 2, 3});
  gpu.t.device.type = TPDP_DEVICE_CUDA;
  EXPECT_TPDP_ERROR(tpdp_dtensor_unflatten(&gpu.t, spec.s, &dt),
                    TPDP_ERR_DEVICE_MISMATCH,
                    "local tensor is on cuda:0 but the spec says cpu");
}

// A DTensor of global [4, 3] f32 sharded S0 on "tp=2": [2, 3] per rank.
struct Src {
  Local local{{2, 3}};
  tpdp_dtensor dt;
  explicit Src(const tpdp_spec *spec) {
    EXPECT_TPDP_OK(tpdp_dtensor_unflatten(&local.t, spec, &dt));
  }
};

TEST(DtensorMisuse, RedistributeAcrossMeshes) {
  Mesh a(tpdp_test::World(), "tp=2"), b(tpdp_test::World(), "dp=2");
  Spec sa(a.m, "S0", {4, 3}), sb(b.m, "R", {4, 3});
  Src src(sa.s);
  Local dst({4, 3});
  EXPECT_TPDP_ERROR(tpdp_redistribute(&src.dt, sb.s, &dst.t),
                    TPDP_ERR_MESH_MISMATCH, "tpdp_redistribute: ",
                    "source spec and destination spec are on different "
                    "meshes");
}

TEST(DtensorMisuse, RedistributeOnALayoutOnlyMesh) {
  Mesh mesh(nullptr, "tp=2");
  Spec s0(mesh.m, "S0", {4, 3}), r(mesh.m, "R", {4, 3});
  Src src(s0.s);
  Local dst({4, 3});
  EXPECT_TPDP_ERROR(tpdp_redistribute(&src.dt, r.s, &dst.t), TPDP_ERR_STATE,
                    "the spec's mesh is layout-only (no communicator)");
}

TEST(DtensorMisuse, RedistributeGlobalShapeDtypeDeviceDiffer) {
  Mesh mesh(tpdp_test::World(), "tp=2");
  Spec s0(mesh.m, "S0", {4, 3});
  Src src(s0.s);
  Local dst({4, 4});
  Spec other_shape(mesh.m, "R", {4, 4});
  EXPECT_TPDP_ERROR(tpdp_redistribute(&src.dt, other_shape.s, &dst.t),
                    TPDP_ERR_SHAPE_MISMATCH,
                    "source global shape [4, 3] != destination global shape "
                    "[4, 4]");
  Spec other_dtype(mesh.m, "R", {4, 3}, TPDP_F64);
  EXPECT_TPDP_ERROR(tpdp_redistribute(&src.dt, other_dtype.s, &dst.t),
                    TPDP_ERR_DTYPE_MISMATCH,
                    "source dtype f32 != destination dtype f64");
  tpdp_device gpu = {TPDP_DEVICE_CUDA, 0};
  Spec other_dev(mesh.m, "R", {4, 3}, TPDP_F32, gpu);
  EXPECT_TPDP_ERROR(tpdp_redistribute(&src.dt, other_dev.s, &dst.t),
                    TPDP_ERR_DEVICE_MISMATCH,
                    "source spec's device cpu != destination spec's device "
                    "cuda:0");
}

TEST(DtensorMisuse, RedistributeDestinationOfTheWrongShapeOrStrided) {
  Mesh mesh(tpdp_test::World(), "tp=2");
  Spec s0(mesh.m, "S0", {4, 3}), r(mesh.m, "R", {4, 3});
  Src src(s0.s);
  Local small({2, 3});
  // Every rank's destination is wrong: every rank carries rank 0's message.
  const std::string want =
      "destination local tensor has shape [2, 3] but mesh rank 0 needs [4, 3] "
      "(rank 0 of world)";
  EXPECT_TPDP_ERROR(tpdp_redistribute(&src.dt, r.s, &small.t),
                    TPDP_ERR_SHAPE_MISMATCH, want.c_str());
  Local big({4, 6});
  tpdp_tensor strided = big.t;
  strided.shape[1] = 3;  // every row of 6, first 3 columns
  EXPECT_TPDP_ERROR(tpdp_redistribute(&src.dt, r.s, &strided),
                    TPDP_ERR_INVALID_ARGUMENT,
                    "destination local tensor must be contiguous");
}

TEST(DtensorMisuse, RedistributeIntoMemoryOverlappingTheSource) {
  Mesh mesh(tpdp_test::World(), "tp=2");
  Spec s0(mesh.m, "S0", {4, 3}), r(mesh.m, "R", {4, 3});
  Local buf({4, 3});
  tpdp_tensor src_local = buf.t;  // the source is rows 2..3 of the buffer
  src_local.shape[0] = 2;
  src_local.data = buf.v.data() + 6;
  tpdp_dtensor dt;
  ASSERT_TPDP_OK(tpdp_dtensor_unflatten(&src_local, s0.s, &dt));
  EXPECT_TPDP_ERROR(
      tpdp_redistribute(&dt, r.s, &buf.t), TPDP_ERR_INVALID_ARGUMENT,
      "overlaps the source local tensor", "pass a separate destination buffer");
}

TEST(DtensorMisuse, SpecJsonErrors) {
  Mesh mesh(nullptr, "dp=2,tp=2");
  tpdp_spec *s = nullptr;
  EXPECT_TPDP_ERROR(tpdp_spec_from_json(mesh.m, "{\"mesh\":", &s),
                    TPDP_ERR_PARSE,
                    "tpdp_spec_from_json: ", "spec JSON does not parse");
  const char *other_shape =
      "{\"mesh\":{\"shape\":[4],\"names\":[\"dp\"]},\"placements\":[\"R\"],"
      "\"shape\":[7,5],\"stride\":[5,1],\"dtype\":\"f32\",\"device\":\"cpu\"}";
  EXPECT_TPDP_ERROR(tpdp_spec_from_json(mesh.m, other_shape, &s),
                    TPDP_ERR_MESH_MISMATCH,
                    "spec JSON is for a mesh of shape [4] but the given mesh "
                    "has shape [2, 2]");
  const char *other_names =
      "{\"mesh\":{\"shape\":[2,2],\"names\":[\"dp\",\"pp\"]},\"placements\":"
      "[\"S0\",\"R\"],\"shape\":[7,5],\"stride\":[5,1],\"dtype\":\"f32\","
      "\"device\":\"cpu\"}";
  EXPECT_TPDP_ERROR(tpdp_spec_from_json(mesh.m, other_names, &s),
                    TPDP_ERR_MESH_MISMATCH,
                    "spec JSON names mesh dim 1 'pp' but the given mesh calls "
                    "it 'tp'");
  EXPECT_EQ(s, nullptr);
  Spec spec(mesh.m, "S0,R", {7, 5});
  char small[8];
  size_t need = 0;
  EXPECT_TPDP_ERROR(tpdp_spec_to_json(spec.s, small, sizeof small, &need),
                    TPDP_ERR_INVALID_ARGUMENT,
                    "buffer of 8 bytes too small for the spec's JSON (needs");
  EXPECT_GT(need, sizeof small);
}

// Fixed: ranks passing different global shapes used to get
// MPI_ERR_TRUNCATE on one rank and uninitialised data on the other; every
// rank now fails, naming each rank's shape.
TEST(DtensorMisuse, RedistributeWithADifferentShapeOnEachRank) {
  Mesh mesh(tpdp_test::World(), "tp=2");
  const int64_t rows = tpdp_test::WorldRank() == 0 ? 4 : 6;
  Spec s0(mesh.m, "S0", {rows, 3}), r(mesh.m, "R", {rows, 3});
  Local local({rows / 2, 3}), dst({rows, 3});
  tpdp_dtensor dt;
  ASSERT_TPDP_OK(tpdp_dtensor_unflatten(&local.t, s0.s, &dt));
  const std::string head =
      "ranks of world passed different arguments (this is rank " +
      std::to_string(tpdp_test::WorldRank()) + "): ";
  EXPECT_TPDP_ERROR(tpdp_redistribute(&dt, r.s, &dst.t),
                    TPDP_ERR_SHAPE_MISMATCH,
                    "tpdp_redistribute: ", head.c_str(),
                    "rank 0 passed f32 [4, 3] [S0] -> [R], rank 1 f32 [6, 3] "
                    "[S0] -> [R]");
}

// Fixed: a mesh destroyed while a spec still used it left the spec reading
// freed memory; the destroy is refused, naming the mesh and what holds it,
// and destroys nothing.
TEST(DtensorMisuse, MeshDestroyedWhileASpecUsesIt) {
  tpdp_mesh *m = nullptr;
  ASSERT_TPDP_OK(tpdp_mesh_create_from_string(tpdp_test::World(), "tp=2", &m));
  tpdp_spec *s = nullptr;
  tpdp_placement r = tpdp_replicate();
  int64_t shape[1] = {4};
  ASSERT_TPDP_OK(tpdp_spec_create(m, &r, 1, 1, shape, TPDP_F32, kCpu, &s));
  EXPECT_TPDP_ERROR(tpdp_mesh_destroy(m), TPDP_ERR_STATE, "tpdp_mesh_destroy: ",
                    "mesh tp=2 is still in use by 1 spec(s) and 0 reducer(s)",
                    "nothing was destroyed");
  EXPECT_TPDP_OK(tpdp_spec_destroy(s));
  EXPECT_TPDP_OK(tpdp_mesh_destroy(m));
}

}  // namespace
