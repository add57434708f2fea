// SPDX-License-Identifier: BSD-3-Clause
// Entries added as boxes (tpdp_state_dict_add_box) on 4 ranks as a 2x2
// (dp, tp) mesh: each rank holds dp's rows inside tp's chunk of dim 0 of a
// [7, 3] tensor (the fully sharded units' layout), and dp's rows of a [5]
// tensor replicated over tp (two ranks pass each box: saved once). Saved,
// then loaded whole on every rank, into tp=4 Shard(1) specs, and into
// other boxes; every element against the formula. Boxes that overlap or
// leave a hole, and a box outside its tensor, are refused.
#include <string>
#include <vector>

#include "tests/ckpt/ckpt_test_util.h"

namespace {

using ckpt_test::TempDir;

const tpdp_device kCpu = {TPDP_DEVICE_CPU, 0};

void Chunk(int64_t n, int64_t k, int64_t i, int64_t *start, int64_t *len) {
  int64_t c = (n + k - 1) / k;
  *start = i * c;
  *len = n - *start < 0 ? 0 : (n - *start < c ? n - *start : c);
}

float W(int64_t r, int64_t c) { return (float)(r * 10 + c); }
float B(int64_t i) { return (float)(100 + i); }

struct Box {
  std::vector<int64_t> off, shape;
  std::vector<float> data;
};

// Rank (dp, tp)'s rows of w [7, 3]: tp's chunk of the 7 rows, dp's chunk
// of those; of b [5]: dp's chunk (the same on both tp ranks).
Box WBox(int dp, int tp, bool fill) {
  int64_t ts, tl, ds, dl;
  Chunk(7, 2, tp, &ts, &tl);
  Chunk(tl, 2, dp, &ds, &dl);
  Box b{{dl ? ts + ds : 0, 0}, {dl, 3}, {}};
  for (int64_t r = 0; r < dl; r++)
    for (int64_t c = 0; c < 3; c++)
      b.data.push_back(fill ? W(b.off[0] + r, c) : -1.0f);
  return b;
}
Box BBox(int dp, bool fill) {
  int64_t ds, dl;
  Chunk(5, 2, dp, &ds, &dl);
  Box b{{ds}, {dl}, {}};
  for (int64_t i = 0; i < dl; i++) b.data.push_back(fill ? B(ds + i) : -1.0f);
  return b;
}

void AddBox(tpdp_state_dict *sd, const char *fqn, Box &b,
            std::vector<int64_t> global) {
  tpdp_tensor t;
  ASSERT_TPDP_OK(tpdp_tensor_init(&t, b.data.data(), TPDP_F32, kCpu,
                                  (int)b.shape.size(), b.shape.data()));
  ASSERT_TPDP_OK(
      tpdp_state_dict_add_box(sd, fqn, &t, global.data(), b.off.data()));
}

TEST(Box, SaveInDpRowsOfTpChunksLoadAnyLayout) {
  if (tpdp_test::WorldSize() != 4) GTEST_SKIP() << "needs 4 ranks";
  tpdp_comm *w = tpdp_test::World();
  int rank = tpdp_test::WorldRank(), dp = rank / 2, tp = rank % 2;
  std::string dir = TempDir(w, "box");
  {
    Box wb = WBox(dp, tp, true), bb = BBox(dp, true);
    tpdp_state_dict *sd = nullptr;
    ASSERT_TPDP_OK(tpdp_state_dict_create(&sd));
    AddBox(sd, "w", wb, {7, 3});
    AddBox(sd, "b", bb, {5});
    ASSERT_TPDP_OK(tpdp_checkpoint_save(sd, dir.c_str(), w, nullptr));
    tpdp_state_dict_destroy(sd);
  }
  {  // whole on every rank
    std::vector<float> wf(21, -1), bf(5, -1);
    int64_t ws[2] = {7, 3}, bs[1] = {5};
    tpdp_tensor wt, bt;
    ASSERT_TPDP_OK(tpdp_tensor_init(&wt, wf.data(), TPDP_F32, kCpu, 2, ws));
    ASSERT_TPDP_OK(tpdp_tensor_init(&bt, bf.data(), TPDP_F32, kCpu, 1, bs));
    tpdp_state_dict *sd = nullptr;
    ASSERT_TPDP_OK(tpdp_state_dict_create(&sd));
    ASSERT_TPDP_OK(tpdp_state_dict_add(sd, "w", &wt, nullptr));
    ASSERT_TPDP_OK(tpdp_state_dict_add(sd, "b", &bt, nullptr));
    ASSERT_TPDP_OK(tpdp_checkpoint_load(sd, dir.c_str(), w, nullptr));
    tpdp_state_dict_destroy(sd);
    for (int64_t r = 0; r < 7; r++)
      for (int64_t c = 0; c < 3; c++) EXPECT_EQ(wf[r * 3 + c], W(r, c));
    for (int64_t i = 0; i < 5; i++) EXPECT_EQ(bf[i], B(i));
  }
  {  // tp=4, Shard(1) for w (columns 1, 1, 1, 0) and Shard(0) for b
    tpdp_mesh *mesh = nullptr;
    ASSERT_TPDP_OK(tpdp_mesh_create_from_string(w, "tp=4", &mesh));
    tpdp_placement s1 = tpdp_shard(1), s0 = tpdp_shard(0);
    int64_t wg[2] = {7, 3}, bg[1] = {5};
    tpdp_spec *ws = nullptr, *bs = nullptr;
    ASSERT_TPDP_OK(tpdp_spec_create(mesh, &s1, 1, 2, wg, TPDP_F32, kCpu, &ws));
    ASSERT_TPDP_OK(tpdp_spec_create(mesh, &s0, 1, 1, bg, TPDP_F32, kCpu, &bs));
    int64_t wl[2], wo[2], bl[1], bo[1];
    ASSERT_TPDP_OK(tpdp_spec_local_shape(ws, rank, wl, wo));
    ASSERT_TPDP_OK(tpdp_spec_local_shape(bs, rank, bl, bo));
    std::vector<float> wf(wl[0] * wl[1] + 1, -1), bf(bl[0] + 1, -1);
    tpdp_tensor wt, bt;
    ASSERT_TPDP_OK(tpdp_tensor_init(&wt, wf.data(), TPDP_F32, kCpu, 2, wl));
    ASSERT_TPDP_OK(tpdp_tensor_init(&bt, bf.data(), TPDP_F32, kCpu, 1, bl));
    tpdp_state_dict *sd = nullptr;
    ASSERT_TPDP_OK(tpdp_state_dict_create(&sd));
    ASSERT_TPDP_OK(tpdp_state_dict_add(sd, "w", &wt, ws));
    ASSERT_TPDP_OK(tpdp_state_dict_add(sd, "b", &bt, bs));
    ASSERT_TPDP_OK(tpdp_checkpoint_load(sd, dir.c_str(), w, nullptr));
    tpdp_state_dict_destroy(sd);
    for (int64_t r = 0; r < wl[0]; r++)
      for (int64_t c = 0; c < wl[1]; c++)
        EXPECT_EQ(wf[r * wl[1] + c], W(wo[0] + r, wo[1] + c));
    for (int64_t i = 0; i < bl[0]; i++) EXPECT_EQ(bf[i], B(bo[0] + i));
    tpdp_spec_destroy(ws);
    tpdp_spec_destroy(bs);
    ASSERT_TPDP_OK(tpdp_mesh_destroy(mesh));
  }
  {  // other boxes: the mesh read the other way round (tp = rank / 2)
    Box wb = WBox(rank % 2, rank / 2, false), bb = BBox(rank % 2, false);
    tpdp_state_dict *sd = nullptr;
    ASSERT_TPDP_OK(tpdp_state_dict_create(&sd));
    AddBox(sd, "w", wb, {7, 3});
    AddBox(sd, "b", bb, {5});
    ASSERT_TPDP_OK(tpdp_checkpoint_load(sd, dir.c_str(), w, nullptr));
    tpdp_state_dict_destroy(sd);
    for (int64_t r = 0; r < wb.shape[0]; r++)
      for (int64_t c = 0; c < 3; c++)
        EXPECT_EQ(wb.data[r * 3 + c], W(wb.off[0] + r, c));
    for (int64_t i = 0; i < bb.shape[0]; i++)
      EXPECT_EQ(bb.data[i], B(bb.off[0] + i));
  }
}

TEST(Box, OverlapsHolesAndOutsideBoxesAreRefused) {
  if (tpdp_test::WorldSize() != 4) GTEST_SKIP() << "needs 4 ranks";
  tpdp_comm *w = tpdp_test::World();
  int rank = tpdp_test::WorldRank();
  std::string dir = TempDir(w, "box_bad");
  std::vector<float> d(6, 1.0f);
  int64_t shape[1] = {2}, global[1] = {6};
  tpdp_tensor t;
  ASSERT_TPDP_OK(tpdp_tensor_init(&t, d.data(), TPDP_F32, kCpu, 1, shape));
  tpdp_state_dict *sd = nullptr;
  ASSERT_TPDP_OK(tpdp_state_dict_create(&sd));
  int64_t outside[1] = {5};
  EXPECT_TPDP_ERROR(tpdp_state_dict_add_box(sd, "x", &t, global, outside),
                    TPDP_ERR_SHAPE_MISMATCH, "'x'", "offset 5 in dim 0",
                    "global shape [6]");
  // Rows [r, r + 2): ranks overlap (and cover 0..5 with overlaps).
  int64_t off[1] = {rank};
  ASSERT_TPDP_OK(tpdp_state_dict_add_box(sd, "x", &t, global, off));
  EXPECT_TPDP_ERROR(tpdp_checkpoint_save(sd, dir.c_str(), w, nullptr),
                    TPDP_ERR_INVALID_ARGUMENT, "'x'", "overlapping slices");
  tpdp_state_dict_destroy(sd);
}

}  // namespace
