// SPDX-License-Identifier: BSD-3-Clause
// The spec's JSON form (tp/spec_json.c): the exact text, round trips
// through the parser, and the parser's errors, each naming the field or
// the mismatch. Single process, layout-only meshes; expected texts are
// typed in by hand.
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/test_util.h"
#include "tests/tp/spec_test_util.h"

namespace {

using tpdp_test::kCpu;
using tpdp_test::Mesh;
using tpdp_test::Spec;

TEST(Json, RoundTrip) {
  const char *names[2] = {"dp", "tp"};
  Mesh mesh({2, 2}, {names[0], names[1]});
  tpdp_placement pl[2] = {tpdp_partial(TPDP_OP_AVG), tpdp_shard(1)};
  int64_t g[2] = {7, 5};
  Spec s;
  ASSERT_TPDP_OK(tpdp_spec_create(mesh.m, pl, 2, 2, g, TPDP_BF16, kCpu, &s.s));
  const std::string want =
      "{\"mesh\":{\"shape\":[2,2],\"names\":[\"dp\",\"tp\"]},"
      "\"placements\":[\"P:avg\",\"S1\"],\"shape\":[7,5],\"stride\":[5,1],"
      "\"dtype\":\"bf16\",\"device\":\"cpu\"}";
  size_t need = 0;
  ASSERT_TPDP_OK(tpdp_spec_to_json(s.s, nullptr, 0, &need));
  EXPECT_EQ(need, want.size() + 1);
  std::vector<char> buf(need);
  ASSERT_TPDP_OK(tpdp_spec_to_json(s.s, buf.data(), buf.size(), nullptr));
  EXPECT_EQ(std::string(buf.data()), want);
  char small[10];
  EXPECT_TPDP_ERROR(tpdp_spec_to_json(s.s, small, sizeof small, &need),
                    TPDP_ERR_INVALID_ARGUMENT, "10 bytes", "too small");
  char *text = nullptr;
  ASSERT_TPDP_OK(tpdp_spec_to_json_alloc(s.s, &text));
  EXPECT_EQ(std::string(text), want);
  Spec back;
  ASSERT_TPDP_OK(tpdp_spec_from_json(mesh.m, text, &back.s));
  free(text);
  EXPECT_TRUE(tpdp_spec_equal(s.s, back.s));
  EXPECT_EQ(tpdp_spec_mesh(back.s), mesh.m);
  char *again = nullptr;
  ASSERT_TPDP_OK(tpdp_spec_to_json_alloc(back.s, &again));
  EXPECT_EQ(std::string(again), want);
  free(again);

  // Scalar (ndim 0) and a CUDA device round-trip too.
  Mesh m1({4});
  tpdp_placement r[1] = {tpdp_partial(TPDP_OP_MAX)};
  tpdp_device gpu = {TPDP_DEVICE_CUDA, 3};
  Spec sc;
  ASSERT_TPDP_OK(
      tpdp_spec_create(m1.m, r, 1, 0, nullptr, TPDP_I64, gpu, &sc.s));
  ASSERT_TPDP_OK(tpdp_spec_to_json_alloc(sc.s, &text));
  EXPECT_EQ(std::string(text),
            "{\"mesh\":{\"shape\":[4],\"names\":[\"d0\"]},\"placements\":"
            "[\"P:max\"],\"shape\":[],\"stride\":[],\"dtype\":\"i64\","
            "\"device\":\"cuda:3\"}");
  Spec sc2;
  ASSERT_TPDP_OK(tpdp_spec_from_json(m1.m, text, &sc2.s));
  free(text);
  EXPECT_TRUE(tpdp_spec_equal(sc.s, sc2.s));
  EXPECT_EQ(tpdp_spec_device(sc2.s).index, 3);
}

TEST(Json, Errors) {
  const char *names[2] = {"dp", "tp"};
  Mesh mesh({2, 2}, {names[0], names[1]});
  Mesh other({4});
  const char *names_x[2] = {"dp", "xx"};
  Mesh renamed({2, 2}, {names_x[0], names_x[1]});
  const char *good =
      "{\"mesh\":{\"shape\":[2,2],\"names\":[\"dp\",\"tp\"]},"
      "\"placements\":[\"S0\",\"R\"],\"shape\":[7,5],\"dtype\":\"f32\"}";
  tpdp_spec *s = nullptr;
  ASSERT_TPDP_OK(tpdp_spec_from_json(mesh.m, good, &s));
  ASSERT_TPDP_OK(tpdp_spec_destroy(s));
  EXPECT_TPDP_ERROR(tpdp_spec_from_json(other.m, good, &s),
                    TPDP_ERR_MESH_MISMATCH, "[2, 2]", "[4]");
  EXPECT_TPDP_ERROR(tpdp_spec_from_json(renamed.m, good, &s),
                    TPDP_ERR_MESH_MISMATCH, "'tp'", "'xx'");
  EXPECT_TPDP_ERROR(tpdp_spec_from_json(mesh.m, "{\"mesh\":", &s),
                    TPDP_ERR_PARSE, "does not parse");
  EXPECT_TPDP_ERROR(
      tpdp_spec_from_json(mesh.m,
                          "{\"mesh\":{\"shape\":[2,2]},\"placements\":[\"S0\","
                          "\"R\"],\"dtype\":\"f32\"}",
                          &s),
      TPDP_ERR_PARSE, "'shape'");
  EXPECT_TPDP_ERROR(
      tpdp_spec_from_json(mesh.m,
                          "{\"mesh\":{\"shape\":[2,2]},\"placements\":[\"S0\","
                          "\"X\"],\"shape\":[3],\"dtype\":\"f32\"}",
                          &s),
      TPDP_ERR_PARSE, "'X'");
  EXPECT_TPDP_ERROR(
      tpdp_spec_from_json(mesh.m,
                          "{\"mesh\":{\"shape\":[2,2]},\"placements\":[\"S0\","
                          "\"R\"],\"shape\":[3,2],\"stride\":[1,3],"
                          "\"dtype\":\"f32\"}",
                          &s),
      TPDP_ERR_PARSE, "stride");
  EXPECT_TPDP_ERROR(
      tpdp_spec_from_json(mesh.m,
                          "{\"mesh\":{\"shape\":[2,2]},\"placements\":[\"S3\","
                          "\"R\"],\"shape\":[3],\"dtype\":\"f32\"}",
                          &s),
      TPDP_ERR_INVALID_ARGUMENT, "Shard(3)");
  EXPECT_TPDP_ERROR(
      tpdp_spec_from_json(mesh.m,
                          "{\"mesh\":{\"shape\":[2,2]},\"placements\":[\"S0\","
                          "\"R\"],\"shape\":[3.5],\"dtype\":\"f32\"}",
                          &s),
      TPDP_ERR_PARSE, "'shape'[0]");
  // A shape whose size overflows, with a "stride" to check: said, not a
  // wrapped product (the stride check multiplied in int64 before; found by
  // tests/fuzz/spec_json_fuzz, corpus input overflow-stride-check).
  EXPECT_TPDP_ERROR(
      tpdp_spec_from_json(
          mesh.m,
          "{\"mesh\":{\"shape\":[2,2]},\"placements\":[\"S0\",\"R\"],"
          "\"shape\":[9007199254740992,9007199254740992,9007199254740992],"
          "\"stride\":[0,9007199254740992,1],\"dtype\":\"f32\"}",
          &s),
      TPDP_ERR_INVALID_ARGUMENT,
      "global shape [9007199254740992, 9007199254740992, 9007199254740992] "
      "of f32 overflows");
  EXPECT_EQ(s, nullptr);
}

}  // namespace
