// SPDX-License-Identifier: BSD-3-Clause
// Single process, no tpdp_init: the world is refused, NULL communicators are
// reported, and layout-only meshes (no communicator) work in full; mesh
// specs that do not parse name what is wrong.
#include <string>
#include <vector>

#include "tests/test_util.h"

namespace {

TEST(NoInit, WorldBeforeInitIsRefused) {
  EXPECT_FALSE(tpdp_is_initialized());
  tpdp_comm *w = reinterpret_cast<tpdp_comm *>(0x1);
  EXPECT_TPDP_ERROR(tpdp_comm_world(&w), TPDP_ERR_NOT_INITIALIZED,
                    "tpdp_comm_world", "tpdp_init");
  EXPECT_TPDP_OK(tpdp_finalize());  // nothing to do
  EXPECT_EQ(tpdp_comm_rank(nullptr), -1);
  EXPECT_EQ(tpdp_comm_size(nullptr), 0);
  EXPECT_STREQ(tpdp_comm_name(nullptr), "(null)");
  float x = 1;
  tpdp_tensor t = tpdp_tensor_1d(&x, TPDP_F32, 1);
  EXPECT_TPDP_ERROR(tpdp_allreduce(nullptr, &t, &t, TPDP_OP_SUM),
                    TPDP_ERR_NULL_POINTER, "communicator is NULL");
  EXPECT_TPDP_ERROR(tpdp_comm_order_after(nullptr, nullptr),
                    TPDP_ERR_NULL_POINTER, "'comm'");
  EXPECT_STREQ(tpdp_reduce_op_name(TPDP_OP_AVG), "avg");
  EXPECT_STREQ(tpdp_reduce_op_name(static_cast<tpdp_reduce_op>(8)), "?");
}

TEST(LayoutMesh, ThreeDimsCoordinatesAndGroups) {
  // 2 x 3 x 2, row-major: rank = (a * 3 + b) * 2 + c.
  tpdp_mesh *m = nullptr;
  ASSERT_TPDP_OK(tpdp_mesh_create_from_string(nullptr, "pp=2,dp=3,tp=2", &m));
  EXPECT_EQ(tpdp_mesh_ndim(m), 3);
  EXPECT_EQ(tpdp_mesh_size(m), 12);
  EXPECT_EQ(tpdp_mesh_rank(m), -1);
  EXPECT_EQ(tpdp_mesh_comm(m), nullptr);
  EXPECT_EQ(tpdp_mesh_dim_size(m, 1), 3);
  EXPECT_EQ(tpdp_mesh_dim_size(m, 3), 0);
  EXPECT_STREQ(tpdp_mesh_dim_name(m, 2), "tp");
  EXPECT_STREQ(tpdp_mesh_dim_name(m, 7), "?");
  for (int a = 0; a < 2; a++)
    for (int b = 0; b < 3; b++)
      for (int c = 0; c < 2; c++) {
        int want = (a * 3 + b) * 2 + c;
        int64_t co[3] = {a, b, c};
        int r = -1;
        ASSERT_TPDP_OK(tpdp_mesh_rank_of(m, co, &r));
        EXPECT_EQ(r, want);
        int64_t back[3];
        ASSERT_TPDP_OK(tpdp_mesh_coords(m, want, back));
        EXPECT_EQ(back[0], a);
        EXPECT_EQ(back[1], b);
        EXPECT_EQ(back[2], c);
      }
  // Rank 7 = (1, 0, 1).
  int g[3];
  ASSERT_TPDP_OK(tpdp_mesh_group_ranks(m, 0, 7, g));  // pp: (0,0,1) (1,0,1)
  EXPECT_EQ(std::vector<int>(g, g + 2), (std::vector<int>{1, 7}));
  ASSERT_TPDP_OK(tpdp_mesh_group_ranks(m, 1, 7, g));  // dp: (1,b,1)
  EXPECT_EQ(std::vector<int>(g, g + 3), (std::vector<int>{7, 9, 11}));
  ASSERT_TPDP_OK(tpdp_mesh_group_ranks(m, 2, 7, g));  // tp: (1,0,c)
  EXPECT_EQ(std::vector<int>(g, g + 2), (std::vector<int>{6, 7}));

  tpdp_comm *c = nullptr;
  EXPECT_TPDP_ERROR(tpdp_mesh_dim_comm(m, 0, &c), TPDP_ERR_STATE,
                    "layout-only");
  EXPECT_TPDP_ERROR(tpdp_mesh_dim_comm_by_name(m, "dp", &c), TPDP_ERR_STATE,
                    "layout-only");
  EXPECT_TPDP_ERROR(tpdp_mesh_dim_comm_by_name(m, "ep", &c), TPDP_ERR_NOT_FOUND,
                    "'ep'");
  EXPECT_TPDP_ERROR(tpdp_mesh_group_ranks(m, 3, 0, g),
                    TPDP_ERR_INVALID_ARGUMENT, "dim 3");
  EXPECT_TPDP_ERROR(tpdp_mesh_group_ranks(m, 0, 12, g),
                    TPDP_ERR_INVALID_ARGUMENT, "rank 12");
  int64_t co[3];
  EXPECT_TPDP_ERROR(tpdp_mesh_coords(m, -1, co), TPDP_ERR_INVALID_ARGUMENT,
                    "rank -1");
  int64_t bad[3] = {0, 3, 0};
  int r;
  EXPECT_TPDP_ERROR(tpdp_mesh_rank_of(m, bad, &r), TPDP_ERR_INVALID_ARGUMENT,
                    "coordinate 3", "'dp'");
  EXPECT_TPDP_ERROR(tpdp_mesh_coords(nullptr, 0, co), TPDP_ERR_NULL_POINTER,
                    "'mesh'");
  EXPECT_TPDP_ERROR(tpdp_mesh_coords(m, 0, nullptr), TPDP_ERR_NULL_POINTER,
                    "'coords'");

  tpdp_mesh *same = nullptr, *other = nullptr;
  ASSERT_TPDP_OK(
      tpdp_mesh_create_from_string(nullptr, "pp=2,dp=3,tp=2", &same));
  ASSERT_TPDP_OK(
      tpdp_mesh_create_from_string(nullptr, "pp=2,ep=3,tp=2", &other));
  EXPECT_TRUE(tpdp_mesh_equal(m, same));
  EXPECT_FALSE(tpdp_mesh_equal(m, other));
  EXPECT_FALSE(tpdp_mesh_equal(m, nullptr));
  EXPECT_TPDP_OK(tpdp_mesh_destroy(other));
  EXPECT_TPDP_OK(tpdp_mesh_destroy(same));
  EXPECT_TPDP_OK(tpdp_mesh_destroy(m));
  EXPECT_TPDP_OK(tpdp_mesh_destroy(nullptr));
}

TEST(LayoutMesh, CreateRejectsBadDims) {
  tpdp_mesh *m = reinterpret_cast<tpdp_mesh *>(0x1);
  int64_t s[9] = {2, 2, 1, 1, 1, 1, 1, 1, 1};
  const char *n[9] = {"a", "b", "c", "d", "e", "f", "g", "h", "i"};
  EXPECT_TPDP_ERROR(tpdp_mesh_create(nullptr, 9, s, n, &m),
                    TPDP_ERR_TOO_MANY_DIMS, "9 dims");
  EXPECT_EQ(m, nullptr);
  EXPECT_TPDP_ERROR(tpdp_mesh_create(nullptr, 0, s, n, &m),
                    TPDP_ERR_INVALID_ARGUMENT, "at least 1 dim");
  const char *dup[2] = {"dp", "dp"};
  EXPECT_TPDP_ERROR(tpdp_mesh_create(nullptr, 2, s, dup, &m),
                    TPDP_ERR_DUPLICATE, "'dp'", "dims 0 and 1");
  const char *empty[2] = {"", "tp"};
  EXPECT_TPDP_ERROR(tpdp_mesh_create(nullptr, 2, s, empty, &m),
                    TPDP_ERR_EMPTY_NAME, "dim 0");
  const char *null_name[2] = {"dp", nullptr};
  EXPECT_TPDP_ERROR(tpdp_mesh_create(nullptr, 2, s, null_name, &m),
                    TPDP_ERR_NULL_POINTER, "dim 1");
  std::string longname(40, 'x');
  const char *lng[2] = {"dp", longname.c_str()};
  EXPECT_TPDP_ERROR(tpdp_mesh_create(nullptr, 2, s, lng, &m),
                    TPDP_ERR_INVALID_ARGUMENT, "dim 1", "longer");
  int64_t zero[2] = {2, 0}, neg[2] = {-3, 2};
  EXPECT_TPDP_ERROR(tpdp_mesh_create(nullptr, 2, zero, n, &m),
                    TPDP_ERR_BAD_DIM_SIZE, "dim 1", "'b'", "size 0");
  EXPECT_TPDP_ERROR(tpdp_mesh_create(nullptr, 2, neg, n, &m),
                    TPDP_ERR_BAD_DIM_SIZE, "dim 0", "size -3");
  int64_t huge[3] = {65536, 65536, 2};
  EXPECT_TPDP_ERROR(tpdp_mesh_create(nullptr, 3, huge, n, &m),
                    TPDP_ERR_BAD_DIM_SIZE, "[65536, 65536, 2]", "more than");
  EXPECT_TPDP_ERROR(tpdp_mesh_create(nullptr, 2, nullptr, n, &m),
                    TPDP_ERR_NULL_POINTER, "'sizes'");
  EXPECT_TPDP_ERROR(tpdp_mesh_create(nullptr, 2, s, n, nullptr),
                    TPDP_ERR_NULL_POINTER, "'out'");
  EXPECT_TPDP_ERROR(tpdp_mesh_create_from_string(nullptr, nullptr, &m),
                    TPDP_ERR_NULL_POINTER, "'text'");
}

struct ParseCase {
  const char *text;
  tpdp_status status;
  const char *needle;
};

TEST(MeshParse, Errors) {
  const ParseCase k[] = {
      {"", TPDP_ERR_PARSE, "empty mesh spec"},
      {"   ", TPDP_ERR_PARSE, "empty mesh spec"},
      {"dp", TPDP_ERR_PARSE, "'dp' is not NAME=SIZE"},
      {"dp=2,", TPDP_ERR_PARSE, "item 1"},
      {"dp=2;tp=2", TPDP_ERR_PARSE, "'2;tp=2'"},
      {"dp=", TPDP_ERR_PARSE, "of dim 'dp' is not an integer"},
      {"dp=x", TPDP_ERR_PARSE, "'x'"},
      {"dp=2.5", TPDP_ERR_PARSE, "'2.5'"},
      {"d p=2", TPDP_ERR_PARSE, "'d p'"},
      {"=2", TPDP_ERR_EMPTY_NAME, "dim 0 has an empty name"},
      {"dp=2, =2", TPDP_ERR_EMPTY_NAME, "dim 1"},
      {"dp=2,tp=2,dp=1", TPDP_ERR_DUPLICATE, "'dp' appears twice"},
      {"dp=0", TPDP_ERR_BAD_DIM_SIZE, "'dp' has size 0"},
      {"dp=2,tp=-4", TPDP_ERR_BAD_DIM_SIZE, "'tp' has size -4"},
      {"dp=99999999999999999999", TPDP_ERR_BAD_DIM_SIZE, "too large"},
      {"a=1,b=1,c=1,d=1,e=1,f=1,g=1,h=1,i=1", TPDP_ERR_TOO_MANY_DIMS,
       "more than 8 dims"},
  };
  for (const ParseCase &c : k) {
    SCOPED_TRACE(c.text);
    tpdp_mesh *m = reinterpret_cast<tpdp_mesh *>(0x1);
    EXPECT_TPDP_ERROR(tpdp_mesh_create_from_string(nullptr, c.text, &m),
                      c.status, "tpdp_mesh_create_from_string: ", c.needle);
    EXPECT_EQ(m, reinterpret_cast<tpdp_mesh *>(0x1));  // parse fails first
  }
}

TEST(MeshParse, AcceptsBlanksAndEightDims) {
  std::string text = " dp = 2 , tp=3 ";
  std::vector<char> storage(text.size() + 1);
  int ndim = 0;
  int64_t sizes[TPDP_MAX_DIMS];
  const char *names[TPDP_MAX_DIMS];
  ASSERT_TPDP_OK(
      tpdp_mesh_parse(text.c_str(), storage.data(), &ndim, sizes, names));
  ASSERT_EQ(ndim, 2);
  EXPECT_STREQ(names[0], "dp");
  EXPECT_STREQ(names[1], "tp");
  EXPECT_EQ(sizes[0], 2);
  EXPECT_EQ(sizes[1], 3);
  tpdp_mesh *m = nullptr;
  ASSERT_TPDP_OK(tpdp_mesh_create_from_string(
      nullptr, "a=1,b=2,c=1,d=1,e=1,f=1,g=1,h=3", &m));
  EXPECT_EQ(tpdp_mesh_ndim(m), 8);
  EXPECT_EQ(tpdp_mesh_size(m), 6);
  EXPECT_EQ(tpdp_mesh_dim_index(m, "h"), 7);
  EXPECT_TPDP_OK(tpdp_mesh_destroy(m));
  EXPECT_TPDP_ERROR(
      tpdp_mesh_parse(nullptr, storage.data(), &ndim, sizes, names),
      TPDP_ERR_NULL_POINTER, "'text'");
}

}  // namespace
