// SPDX-License-Identifier: BSD-3-Clause
// Unit tests of placements, the spec (torch.chunk local shapes/offsets),
// flatten/unflatten (tp/spec.c; the JSON form is in spec_json_test.cc).
// Single process, layout-only meshes. Expected shapes and offsets are
// worked out by hand (comments) or by a brute-force ownership count written
// here, never read from the code under test.
#include <cstring>
#include <string>
#include <vector>

#include "tests/test_util.h"
#include "tests/tp/spec_test_util.h"

namespace {

using tpdp_test::kCpu;
using tpdp_test::Mesh;
using tpdp_test::Spec;

std::vector<int64_t> Shape(const tpdp_spec *s, int rank,
                           std::vector<int64_t> *offset = nullptr) {
  int n = tpdp_spec_ndim(s);
  std::vector<int64_t> shape(n, -7), off(n, -7);
  tpdp_status st = tpdp_spec_local_shape(s, rank, shape.data(), off.data());
  EXPECT_EQ(st, TPDP_SUCCESS) << tpdp_last_error();
  if (offset) *offset = off;
  return shape;
}

using V = std::vector<int64_t>;

TEST(Placement, ConstructorsAndEquality) {
  tpdp_placement s = tpdp_shard(1);
  EXPECT_EQ(s.kind, TPDP_PLACEMENT_SHARD);
  EXPECT_EQ(s.dim, 1);
  EXPECT_EQ(tpdp_replicate().kind, TPDP_PLACEMENT_REPLICATE);
  tpdp_placement p = tpdp_partial(TPDP_OP_MAX);
  EXPECT_EQ(p.kind, TPDP_PLACEMENT_PARTIAL);
  EXPECT_EQ(p.op, TPDP_OP_MAX);
  EXPECT_TRUE(tpdp_placement_equal(tpdp_shard(1), tpdp_shard(1)));
  EXPECT_FALSE(tpdp_placement_equal(tpdp_shard(1), tpdp_shard(0)));
  EXPECT_FALSE(tpdp_placement_equal(tpdp_partial(TPDP_OP_SUM),
                                    tpdp_partial(TPDP_OP_AVG)));
  EXPECT_TRUE(tpdp_placement_equal(tpdp_replicate(), tpdp_replicate()));
}

TEST(Placement, ParseAndFormat) {
  struct {
    const char *text, *canon;
  } cases[] = {{"S0", "S0"},       {"S3", "S3"},       {"R", "R"},
               {"P", "P:sum"},     {"P:sum", "P:sum"}, {"P:avg", "P:avg"},
               {"P:max", "P:max"}, {"P:min", "P:min"}};
  for (auto &c : cases) {
    tpdp_placement p;
    ASSERT_TPDP_OK(tpdp_placement_parse(c.text, &p));
    char buf[16];
    tpdp_placement_format(p, buf, sizeof buf);
    EXPECT_STREQ(buf, c.canon);
  }
  tpdp_placement p;
  EXPECT_TPDP_ERROR(tpdp_placement_parse("Q", &p), TPDP_ERR_PARSE, "'Q'");
  EXPECT_TPDP_ERROR(tpdp_placement_parse("S", &p), TPDP_ERR_PARSE, "'S'");
  EXPECT_TPDP_ERROR(tpdp_placement_parse("S1x", &p), TPDP_ERR_PARSE, "S1x");
  EXPECT_TPDP_ERROR(tpdp_placement_parse("P:prod", &p), TPDP_ERR_PARSE, "prod");
  tpdp_placement list[4];
  int n = 0;
  ASSERT_TPDP_OK(tpdp_placements_parse("S1,R,P:avg", list, 4, &n));
  ASSERT_EQ(n, 3);
  EXPECT_TRUE(tpdp_placement_equal(list[0], tpdp_shard(1)));
  EXPECT_TRUE(tpdp_placement_equal(list[1], tpdp_replicate()));
  EXPECT_TRUE(tpdp_placement_equal(list[2], tpdp_partial(TPDP_OP_AVG)));
  EXPECT_TPDP_ERROR(tpdp_placements_parse("S0,,R", list, 4, &n), TPDP_ERR_PARSE,
                    "item 1");
  EXPECT_TPDP_ERROR(tpdp_placements_parse("R,R,R", list, 2, &n),
                    TPDP_ERR_TOO_MANY_DIMS, "more than 2");
}

TEST(Spec, EvenShardDim0) {
  // 10x7 on a 2x3 mesh, S0,R: rank (a, b) holds rows [5a, 5a+5).
  Mesh mesh({2, 3});
  tpdp_placement pl[2] = {tpdp_shard(0), tpdp_replicate()};
  int64_t g[2] = {10, 7};
  Spec s;
  ASSERT_TPDP_OK(tpdp_spec_create(mesh.m, pl, 2, 2, g, TPDP_F32, kCpu, &s.s));
  for (int r = 0; r < 6; r++) {
    V off;
    EXPECT_EQ(Shape(s.s, r, &off), (V{5, 7})) << "rank " << r;
    EXPECT_EQ(off, (V{5 * (r / 3), 0})) << "rank " << r;
  }
  EXPECT_EQ(tpdp_spec_mesh(s.s), mesh.m);
  EXPECT_EQ(tpdp_spec_ndim(s.s), 2);
  EXPECT_EQ(tpdp_spec_global_shape(s.s)[0], 10);
  EXPECT_EQ(tpdp_spec_global_strides(s.s)[0], 7);
  EXPECT_EQ(tpdp_spec_global_strides(s.s)[1], 1);
  EXPECT_EQ(tpdp_spec_dtype(s.s), TPDP_F32);
  EXPECT_EQ(tpdp_spec_device(s.s).type, TPDP_DEVICE_CPU);
  EXPECT_TRUE(
      tpdp_placement_equal(tpdp_spec_placements(s.s)[0], tpdp_shard(0)));
  EXPECT_EQ(tpdp_spec_self_rank(s.s), 0);  // layout-only: rank 0
}

TEST(Spec, UnevenAndEmptyShards) {
  // 5 over 4: chunk 2 -> sizes 2,2,1,0; offsets 0,2,4 and 5 (empty: global
  // size).
  Mesh mesh({4});
  int64_t g[2] = {3, 5};
  tpdp_placement pl[1] = {tpdp_shard(1)};
  Spec s;
  ASSERT_TPDP_OK(tpdp_spec_create(mesh.m, pl, 1, 2, g, TPDP_F64, kCpu, &s.s));
  V sizes[4] = {{3, 2}, {3, 2}, {3, 1}, {3, 0}};
  V offs[4] = {{0, 0}, {0, 2}, {0, 4}, {0, 5}};
  for (int r = 0; r < 4; r++) {
    V off;
    EXPECT_EQ(Shape(s.s, r, &off), sizes[r]) << "rank " << r;
    EXPECT_EQ(off, offs[r]) << "rank " << r;
  }
  // 7 over 4: chunk 2 -> 2,2,2,1.
  int64_t g7[1] = {7};
  tpdp_placement p0[1] = {tpdp_shard(0)};
  Spec s7;
  ASSERT_TPDP_OK(tpdp_spec_create(mesh.m, p0, 1, 1, g7, TPDP_F32, kCpu, &s7.s));
  int64_t want[4] = {2, 2, 2, 1}, wofs[4] = {0, 2, 4, 6};
  for (int r = 0; r < 4; r++) {
    V off;
    EXPECT_EQ(Shape(s7.s, r, &off), (V{want[r]}));
    EXPECT_EQ(off, (V{wofs[r]}));
  }
  // 2 over 4: chunk 1 -> 1,1,0,0 with offsets 0,1,2,2.
  int64_t g2[1] = {2};
  Spec s2;
  ASSERT_TPDP_OK(tpdp_spec_create(mesh.m, p0, 1, 1, g2, TPDP_F32, kCpu, &s2.s));
  int64_t w2[4] = {1, 1, 0, 0}, o2[4] = {0, 1, 2, 2};
  for (int r = 0; r < 4; r++) {
    V off;
    EXPECT_EQ(Shape(s2.s, r, &off), (V{w2[r]}));
    EXPECT_EQ(off, (V{o2[r]}));
  }
  // 0 rows: everything empty, offset 0 (= global size).
  int64_t g0[1] = {0};
  Spec s0;
  ASSERT_TPDP_OK(tpdp_spec_create(mesh.m, p0, 1, 1, g0, TPDP_F32, kCpu, &s0.s));
  V off;
  EXPECT_EQ(Shape(s0.s, 3, &off), (V{0}));
  EXPECT_EQ(off, (V{0}));
}

TEST(Spec, TwoMeshDimsShardOneTensorDim) {
  // 7 rows, mesh 2x2, S0,S0: mesh dim 0 -> [0,4) and [4,7); mesh dim 1
  // chunks each: [0,2),[2,4) and [4,6),[6,7).
  Mesh mesh({2, 2});
  int64_t g[2] = {7, 3};
  tpdp_placement pl[2] = {tpdp_shard(0), tpdp_shard(0)};
  Spec s;
  ASSERT_TPDP_OK(tpdp_spec_create(mesh.m, pl, 2, 2, g, TPDP_F32, kCpu, &s.s));
  int64_t rows[4] = {2, 2, 2, 1}, ofs[4] = {0, 2, 4, 6};
  for (int r = 0; r < 4; r++) {
    V off;
    EXPECT_EQ(Shape(s.s, r, &off), (V{rows[r], 3})) << "rank " << r;
    EXPECT_EQ(off, (V{ofs[r], 0})) << "rank " << r;
  }
  // 5 rows, mesh 2x4, S0,S0: [0,3) and [3,5); then chunks of 1 each:
  // (0,*): 0,1,2,empty; (1,*): 3,4,empty,empty. Empty offset = 5.
  Mesh mesh24({2, 4});
  int64_t g5[1] = {5};
  Spec s5;
  ASSERT_TPDP_OK(
      tpdp_spec_create(mesh24.m, pl, 2, 1, g5, TPDP_F32, kCpu, &s5.s));
  int64_t r5[8] = {1, 1, 1, 0, 1, 1, 0, 0}, o5[8] = {0, 1, 2, 5, 3, 4, 5, 5};
  for (int r = 0; r < 8; r++) {
    V off;
    EXPECT_EQ(Shape(s5.s, r, &off), (V{r5[r]})) << "rank " << r;
    EXPECT_EQ(off, (V{o5[r]})) << "rank " << r;
  }
  // S1,S0 on 10x7 over 2x3: cols split 4,3 by mesh dim 0; rows 4,4,2 by dim 1.
  Mesh mesh23({2, 3});
  tpdp_placement pl2[2] = {tpdp_shard(1), tpdp_shard(0)};
  int64_t g2[2] = {10, 7};
  Spec s2;
  ASSERT_TPDP_OK(
      tpdp_spec_create(mesh23.m, pl2, 2, 2, g2, TPDP_F32, kCpu, &s2.s));
  for (int r = 0; r < 6; r++) {
    int a = r / 3, b = r % 3;
    V off;
    V shape = Shape(s2.s, r, &off);
    EXPECT_EQ(shape, (V{b < 2 ? 4 : 2, a == 0 ? 4 : 3})) << "rank " << r;
    EXPECT_EQ(off, (V{4 * b, 4 * a})) << "rank " << r;
  }
}

// Brute force: along one tensor dim sharded by mesh dims (sizes k0, k1),
// every element must be owned by exactly one (c0, c1) pair, and the owned
// ranges must be contiguous and ordered by (c0, c1).
TEST(Spec, CoverageBruteForce) {
  for (int64_t k0 = 1; k0 <= 3; k0++)
    for (int64_t k1 = 1; k1 <= 4; k1++) {
      Mesh mesh({k0, k1});
      tpdp_placement pl[2] = {tpdp_shard(0), tpdp_shard(0)};
      for (int64_t n = 0; n <= 13; n++) {
        Spec s;
        ASSERT_TPDP_OK(
            tpdp_spec_create(mesh.m, pl, 2, 1, &n, TPDP_U8, kCpu, &s.s));
        int64_t next = 0;
        for (int r = 0; r < k0 * k1; r++) {
          V off;
          V shape = Shape(s.s, r, &off);
          if (shape[0] == 0) {
            EXPECT_EQ(off[0], n);
            continue;
          }
          EXPECT_EQ(off[0], next)
              << "n=" << n << " k=" << k0 << "x" << k1 << " rank " << r;
          next = off[0] + shape[0];
        }
        EXPECT_EQ(next, n) << "n=" << n << " k=" << k0 << "x" << k1;
      }
    }
}

TEST(Spec, PartialAndReplicateAreFull) {
  Mesh mesh({2, 2});
  tpdp_placement pl[2] = {tpdp_partial(TPDP_OP_MIN), tpdp_replicate()};
  int64_t g[3] = {2, 3, 4};
  Spec s;
  ASSERT_TPDP_OK(tpdp_spec_create(mesh.m, pl, 2, 3, g, TPDP_I32, kCpu, &s.s));
  for (int r = 0; r < 4; r++) {
    V off;
    EXPECT_EQ(Shape(s.s, r, &off), (V{2, 3, 4}));
    EXPECT_EQ(off, (V{0, 0, 0}));
  }
}

TEST(Spec, DestroyReturnsAStatusAndNullIsANoOp) {
  Mesh mesh({2});
  int64_t g[1] = {4};
  tpdp_placement pl[1] = {tpdp_shard(0)};
  tpdp_spec *s = nullptr;
  ASSERT_TPDP_OK(tpdp_spec_create(mesh.m, pl, 1, 1, g, TPDP_F32, kCpu, &s));
  EXPECT_EQ(tpdp_spec_destroy(s), TPDP_SUCCESS);
  EXPECT_EQ(tpdp_spec_destroy(nullptr), TPDP_SUCCESS);
}

TEST(Spec, BadInput) {
  Mesh mesh({2, 2});
  int64_t g[2] = {4, 4};
  tpdp_placement ok[2] = {tpdp_shard(0), tpdp_replicate()};
  tpdp_spec *s = reinterpret_cast<tpdp_spec *>(0x1);
  EXPECT_TPDP_ERROR(tpdp_spec_create(nullptr, ok, 2, 2, g, TPDP_F32, kCpu, &s),
                    TPDP_ERR_NULL_POINTER, "mesh");
  EXPECT_EQ(s, nullptr);
  tpdp_placement bad[2] = {tpdp_replicate(), tpdp_shard(2)};
  EXPECT_TPDP_ERROR(tpdp_spec_create(mesh.m, bad, 2, 2, g, TPDP_F32, kCpu, &s),
                    TPDP_ERR_INVALID_ARGUMENT, "mesh dim 1", "Shard(2)",
                    "2 dims");
  EXPECT_TPDP_ERROR(tpdp_spec_create(mesh.m, ok, 1, 2, g, TPDP_F32, kCpu, &s),
                    TPDP_ERR_INVALID_ARGUMENT, "1 placements", "2-dim mesh");
  EXPECT_TPDP_ERROR(tpdp_spec_create(mesh.m, ok, 3, 2, g, TPDP_F32, kCpu, &s),
                    TPDP_ERR_INVALID_ARGUMENT, "3 placements");
  tpdp_placement avg[2] = {tpdp_partial(TPDP_OP_AVG), tpdp_replicate()};
  EXPECT_TPDP_ERROR(tpdp_spec_create(mesh.m, avg, 2, 2, g, TPDP_I32, kCpu, &s),
                    TPDP_ERR_OP_DTYPE, "avg", "i32", "mesh dim 0");
  EXPECT_TPDP_ERROR(tpdp_spec_create(mesh.m, avg, 2, 2, g, TPDP_U8, kCpu, &s),
                    TPDP_ERR_OP_DTYPE, "u8");
  tpdp_spec *fine = nullptr;
  ASSERT_TPDP_OK(
      tpdp_spec_create(mesh.m, avg, 2, 2, g, TPDP_BF16, kCpu, &fine));
  ASSERT_TPDP_OK(tpdp_spec_destroy(fine));
  tpdp_placement sum_i[2] = {tpdp_partial(TPDP_OP_SUM),
                             tpdp_partial(TPDP_OP_MAX)};
  ASSERT_TPDP_OK(
      tpdp_spec_create(mesh.m, sum_i, 2, 2, g, TPDP_I64, kCpu, &fine));
  ASSERT_TPDP_OK(tpdp_spec_destroy(fine));
  int64_t neg[2] = {4, -1};
  EXPECT_TPDP_ERROR(tpdp_spec_create(mesh.m, ok, 2, 2, neg, TPDP_F32, kCpu, &s),
                    TPDP_ERR_BAD_DIM_SIZE, "dim 1");
  EXPECT_TPDP_ERROR(tpdp_spec_create(mesh.m, ok, 2, 9, g, TPDP_F32, kCpu, &s),
                    TPDP_ERR_TOO_MANY_DIMS, "ndim 9");
  EXPECT_TPDP_ERROR(
      tpdp_spec_create(mesh.m, ok, 2, 2, g, (tpdp_dtype)42, kCpu, &s),
      TPDP_ERR_DTYPE_MISMATCH, "42");
  tpdp_placement badop[2] = {tpdp_partial((tpdp_reduce_op)9), tpdp_replicate()};
  EXPECT_TPDP_ERROR(
      tpdp_spec_create(mesh.m, badop, 2, 2, g, TPDP_F32, kCpu, &s),
      TPDP_ERR_INVALID_ARGUMENT, "reduce op 9");
  Spec good;
  ASSERT_TPDP_OK(
      tpdp_spec_create(mesh.m, ok, 2, 2, g, TPDP_F32, kCpu, &good.s));
  int64_t shape[2];
  EXPECT_TPDP_ERROR(tpdp_spec_local_shape(good.s, 4, shape, nullptr),
                    TPDP_ERR_INVALID_ARGUMENT, "rank 4");
  EXPECT_TPDP_ERROR(tpdp_spec_local_shape(good.s, -1, shape, nullptr),
                    TPDP_ERR_INVALID_ARGUMENT, "rank -1");
}

// Global shapes whose size overflows are refused; the largest that fit
// shard without wrapping (ceil(n/k) used to compute n + k - 1, which wraps
// for n near INT64_MAX into negative local sizes).
TEST(Spec, OverflowingShapesAreRefusedAndHugeOnesShardExactly) {
  Mesh two({2});
  tpdp_placement s0 = tpdp_shard(0);
  tpdp_spec *s = reinterpret_cast<tpdp_spec *>(0x1);
  int64_t both_max[2] = {INT64_MAX, INT64_MAX};
  EXPECT_TPDP_ERROR(
      tpdp_spec_create(two.m, &s0, 1, 2, both_max, TPDP_F32, kCpu, &s),
      TPDP_ERR_INVALID_ARGUMENT, "tpdp_spec_create",
      "global shape [9223372036854775807, 9223372036854775807] of f32 "
      "overflows");
  EXPECT_EQ(s, nullptr);
  // Bytes, not only elements: 2^62 f32 elements are 2^64 bytes.
  int64_t bytes_over[1] = {int64_t{1} << 62};
  EXPECT_TPDP_ERROR(
      tpdp_spec_create(two.m, &s0, 1, 1, bytes_over, TPDP_F32, kCpu, &s),
      TPDP_ERR_INVALID_ARGUMENT, "[4611686018427387904] of f32 overflows");
  // A zero size does not excuse the others (their strides would wrap).
  int64_t empty_huge[3] = {0, int64_t{1} << 32, int64_t{1} << 32};
  EXPECT_TPDP_ERROR(
      tpdp_spec_create(two.m, &s0, 1, 3, empty_huge, TPDP_U8, kCpu, &s),
      TPDP_ERR_INVALID_ARGUMENT, "overflows");

  // INT64_MAX one-byte elements fit. Over 2 ranks: chunk ceil(n/2) =
  // 2^62; over 3: n = 3 * 3074457345618258602 + 1, chunk
  // 3074457345618258603, the last rank gets n - 2 * chunk.
  int64_t max[1] = {INT64_MAX};
  Spec half;
  ASSERT_TPDP_OK(
      tpdp_spec_create(two.m, &s0, 1, 1, max, TPDP_U8, kCpu, &half.s));
  V off;
  EXPECT_EQ(Shape(half.s, 0, &off), V({int64_t{1} << 62}));
  EXPECT_EQ(off, V({0}));
  EXPECT_EQ(Shape(half.s, 1, &off), V({(int64_t{1} << 62) - 1}));
  EXPECT_EQ(off, V({int64_t{1} << 62}));
  EXPECT_EQ(tpdp_spec_global_strides(half.s)[0], 1);
  Mesh three({3});
  Spec third;
  ASSERT_TPDP_OK(
      tpdp_spec_create(three.m, &s0, 1, 1, max, TPDP_U8, kCpu, &third.s));
  EXPECT_EQ(Shape(third.s, 0, &off), V({3074457345618258603}));
  EXPECT_EQ(off, V({0}));
  EXPECT_EQ(Shape(third.s, 1, &off), V({3074457345618258603}));
  EXPECT_EQ(off, V({3074457345618258603}));
  EXPECT_EQ(Shape(third.s, 2, &off), V({3074457345618258601}));
  EXPECT_EQ(off, V({6148914691236517206}));
}

TEST(DTensor, FlattenIsZeroCopy) {
  Mesh mesh({2, 2});
  tpdp_placement pl[2] = {tpdp_shard(0), tpdp_shard(1)};
  int64_t g[2] = {7, 5};
  Spec s;
  ASSERT_TPDP_OK(tpdp_spec_create(mesh.m, pl, 2, 2, g, TPDP_F32, kCpu, &s.s));
  // Layout-only mesh: unflatten checks rank 0's shape, [4, 3].
  float data[12];
  int64_t shape[2] = {4, 3};
  tpdp_tensor local;
  ASSERT_TPDP_OK(tpdp_tensor_init(&local, data, TPDP_F32, kCpu, 2, shape));
  tpdp_dtensor dt;
  ASSERT_TPDP_OK(tpdp_dtensor_unflatten(&local, s.s, &dt));
  EXPECT_EQ(dt.local.data, (void *)data);
  EXPECT_EQ(dt.spec, s.s);
  tpdp_tensor back;
  const tpdp_spec *bs = nullptr;
  ASSERT_TPDP_OK(tpdp_dtensor_flatten(&dt, &back, &bs));
  EXPECT_EQ(back.data, (void *)data);
  EXPECT_EQ(bs, s.s);
  EXPECT_TRUE(tpdp_tensor_same_shape(&back, &local));
  EXPECT_EQ(back.strides[0], 3);
  // A strided (non-contiguous) local view of the right shape is accepted.
  float big[40];
  tpdp_tensor strided = local;
  strided.data = big;
  strided.strides[0] = 10;
  ASSERT_TPDP_OK(tpdp_dtensor_unflatten(&strided, s.s, &dt));
  EXPECT_EQ(dt.local.strides[0], 10);
}

TEST(DTensor, UnflattenValidates) {
  Mesh mesh({2, 2});
  tpdp_placement pl[2] = {tpdp_shard(0), tpdp_shard(1)};
  int64_t g[2] = {7, 5};
  Spec s;
  ASSERT_TPDP_OK(tpdp_spec_create(mesh.m, pl, 2, 2, g, TPDP_F32, kCpu, &s.s));
  float data[20];
  tpdp_dtensor dt;
  dt.spec = nullptr;
  int64_t wrong[2] = {4, 4};
  tpdp_tensor t;
  ASSERT_TPDP_OK(tpdp_tensor_init(&t, data, TPDP_F32, kCpu, 2, wrong));
  EXPECT_TPDP_ERROR(tpdp_dtensor_unflatten(&t, s.s, &dt),
                    TPDP_ERR_SHAPE_MISMATCH, "[4, 4]", "[4, 3]", "rank 0");
  EXPECT_EQ(dt.spec, nullptr);  // untouched
  int64_t one[1] = {12};
  ASSERT_TPDP_OK(tpdp_tensor_init(&t, data, TPDP_F32, kCpu, 1, one));
  EXPECT_TPDP_ERROR(tpdp_dtensor_unflatten(&t, s.s, &dt),
                    TPDP_ERR_SHAPE_MISMATCH, "[12]", "[4, 3]");
  int64_t right[2] = {4, 3};
  ASSERT_TPDP_OK(tpdp_tensor_init(&t, data, TPDP_F64, kCpu, 2, right));
  EXPECT_TPDP_ERROR(tpdp_dtensor_unflatten(&t, s.s, &dt),
                    TPDP_ERR_DTYPE_MISMATCH, "f64", "f32");
  tpdp_device gpu = {TPDP_DEVICE_CUDA, 1};
  ASSERT_TPDP_OK(tpdp_tensor_init(&t, data, TPDP_F32, gpu, 2, right));
  EXPECT_TPDP_ERROR(tpdp_dtensor_unflatten(&t, s.s, &dt),
                    TPDP_ERR_DEVICE_MISMATCH, "cuda:1", "cpu");
  EXPECT_TPDP_ERROR(tpdp_dtensor_unflatten(nullptr, s.s, &dt),
                    TPDP_ERR_NULL_POINTER, "local");
  EXPECT_TPDP_ERROR(tpdp_dtensor_flatten(nullptr, &t, nullptr),
                    TPDP_ERR_NULL_POINTER, "dt");
}

TEST(Redistribute, LayoutOnlyAndMeshMismatch) {
  Mesh a({2, 2}), b({4});
  int64_t g[1] = {8};
  tpdp_placement pa[2] = {tpdp_shard(0), tpdp_replicate()};
  tpdp_placement pb[1] = {tpdp_replicate()};
  Spec sa, sb, sa2;
  ASSERT_TPDP_OK(tpdp_spec_create(a.m, pa, 2, 1, g, TPDP_F32, kCpu, &sa.s));
  ASSERT_TPDP_OK(tpdp_spec_create(b.m, pb, 1, 1, g, TPDP_F32, kCpu, &sb.s));
  tpdp_placement rr[2] = {tpdp_replicate(), tpdp_replicate()};
  ASSERT_TPDP_OK(tpdp_spec_create(a.m, rr, 2, 1, g, TPDP_F32, kCpu, &sa2.s));
  float x[8] = {0}, y[8] = {0};
  int64_t four = 4, eight = 8;
  tpdp_tensor lx, ly;
  ASSERT_TPDP_OK(tpdp_tensor_init(&lx, x, TPDP_F32, kCpu, 1, &four));
  ASSERT_TPDP_OK(tpdp_tensor_init(&ly, y, TPDP_F32, kCpu, 1, &eight));
  tpdp_dtensor dx;
  ASSERT_TPDP_OK(tpdp_dtensor_unflatten(&lx, sa.s, &dx));
  EXPECT_TPDP_ERROR(tpdp_redistribute(&dx, sb.s, &ly), TPDP_ERR_MESH_MISMATCH,
                    "different meshes");
  EXPECT_TPDP_ERROR(tpdp_redistribute(&dx, sa2.s, &ly), TPDP_ERR_STATE,
                    "layout-only");
}

}  // namespace
