// SPDX-License-Identifier: BSD-3-Clause
// Multi-rank (np 4) tests of redistribute on 2x2 and 4x1 meshes. Each rank
// builds the global tensor by a formula, makes its source local tensor by
// direct indexing (with a chunk rule written here, independently of tp/),
// redistributes, and checks every element of the result against the
// formula at the element's global position.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "comm/services.h"
#include "tests/test_util.h"

namespace {

const tpdp_device kCpu = {TPDP_DEVICE_CPU, 0};
using V = std::vector<int64_t>;

// Global value at (i, j): exact in every dtype used.
double F(int64_t i, int64_t j) { return (double)(i * 10 + j + 1); }

// Independent reference of the local layout: iterate mesh dims in order,
// chunking the current [lo, hi) range of the shard dim.
void RefLayout(const V &mesh, const V &coords,
               const std::vector<tpdp_placement> &pl, const V &g, V *shape,
               V *offset) {
  V lo(g.size(), 0), hi = g;
  for (size_t m = 0; m < mesh.size(); m++) {
    if (pl[m].kind != TPDP_PLACEMENT_SHARD) continue;
    int d = pl[m].dim;
    int64_t n = hi[d] - lo[d], k = mesh[m];
    int64_t chunk = (n + k - 1) / k;
    int64_t a = std::min(lo[d] + coords[m] * chunk, hi[d]);
    int64_t b = std::min(a + chunk, hi[d]);
    lo[d] = a;
    hi[d] = b;
  }
  shape->resize(g.size());
  offset->resize(g.size());
  for (size_t d = 0; d < g.size(); d++) {
    (*shape)[d] = hi[d] - lo[d];
    (*offset)[d] = (*shape)[d] == 0 ? g[d] : lo[d];
  }
}

// One rank's contribution to a Partial(op) value y over a mesh dim of size
// k at coordinate c (the op over c of Split(y, c) is y).
double Split(double y, tpdp_reduce_op op, int64_t c, int64_t k, int64_t flat) {
  auto h = [&](int64_t cc) { return (double)((flat + cc) % 5 + cc); };
  switch (op) {
    case TPDP_OP_SUM: {
      if (c != 0) return h(c);
      double rest = 0;
      for (int64_t cc = 1; cc < k; cc++) rest += h(cc);
      return y - rest;
    }
    case TPDP_OP_AVG:
      return y + 2.0 * c - (k - 1);
    case TPDP_OP_MAX:
      return c == 0 ? y : y - 1 - c;
    case TPDP_OP_MIN:
      return c == 0 ? y : y + 1 + c;
    default:
      return NAN;
  }
}

std::vector<tpdp_placement> Parse(const char *text) {
  tpdp_placement p[TPDP_MAX_DIMS];
  int n = 0;
  EXPECT_EQ(tpdp_placements_parse(text, p, TPDP_MAX_DIMS, &n), TPDP_SUCCESS);
  return std::vector<tpdp_placement>(p, p + n);
}

double Get(const std::vector<char> &buf, tpdp_dtype dt, int64_t i) {
  switch (dt) {
    case TPDP_F32: {
      float v;
      memcpy(&v, &buf[i * 4], 4);
      return v;
    }
    case TPDP_F64: {
      double v;
      memcpy(&v, &buf[i * 8], 8);
      return v;
    }
    case TPDP_I32: {
      int32_t v;
      memcpy(&v, &buf[i * 4], 4);
      return v;
    }
    default:
      return NAN;
  }
}
void Put(std::vector<char> &buf, tpdp_dtype dt, int64_t i, double x) {
  switch (dt) {
    case TPDP_F32: {
      float v = (float)x;
      memcpy(&buf[i * 4], &v, 4);
      break;
    }
    case TPDP_F64: {
      memcpy(&buf[i * 8], &x, 8);
      break;
    }
    case TPDP_I32: {
      int32_t v = (int32_t)x;
      memcpy(&buf[i * 4], &v, 4);
      break;
    }
    default:
      break;
  }
}

struct World {
  V mesh_shape;
  tpdp_mesh *mesh = nullptr;
  V coords;
  explicit World(V shape) : mesh_shape(shape) {
    EXPECT_EQ(tpdp_mesh_create(tpdp_test::World(), (int)shape.size(),
                               shape.data(), nullptr, &mesh),
              TPDP_SUCCESS)
        << tpdp_last_error();
    coords.resize(shape.size());
    tpdp_mesh_coords(mesh, tpdp_mesh_rank(mesh), coords.data());
  }
  ~World() { (void)tpdp_mesh_destroy(mesh); }
};

// Expected local values of this rank under `pl` given that the source was
// `src` (Partial dims that stay unchanged keep their contributions; dims
// that become Partial follow the documented rule: sum -> coordinate 0 keeps
// the value, others 0; avg/max/min -> all keep it).
double Expected(const World &w, const std::vector<tpdp_placement> &src,
                const std::vector<tpdp_placement> &pl, int64_t i, int64_t j,
                int64_t gcols, bool as_source) {
  double y = F(i, j);
  int64_t flat = i * gcols + j;
  for (size_t m = 0; m < pl.size(); m++) {
    if (pl[m].kind != TPDP_PLACEMENT_PARTIAL) continue;
    bool kept = as_source || (src[m].kind == TPDP_PLACEMENT_PARTIAL &&
                              src[m].op == pl[m].op);
    if (kept) y = Split(y, pl[m].op, w.coords[m], w.mesh_shape[m], flat);
  }
  if (!as_source)
    for (size_t m = 0; m < pl.size(); m++) {
      if (pl[m].kind != TPDP_PLACEMENT_PARTIAL) continue;
      bool kept =
          src[m].kind == TPDP_PLACEMENT_PARTIAL && src[m].op == pl[m].op;
      if (!kept && pl[m].op == TPDP_OP_SUM && w.coords[m] != 0) y = 0;
    }
  return y;
}

// Run one transition; returns a description of the first mismatch or "".
void RunCase(const World &w, const char *src_text, const char *dst_text, V g,
             tpdp_dtype dt) {
  SCOPED_TRACE(std::string(src_text) + " -> " + dst_text + " shape [" +
               std::to_string(g[0]) + "," + std::to_string(g[1]) + "] " +
               tpdp_dtype_name(dt) + " rank " +
               std::to_string(tpdp_test::WorldRank()));
  auto src = Parse(src_text), dst = Parse(dst_text);
  tpdp_spec *ss = nullptr, *ds = nullptr;
  ASSERT_TPDP_OK(tpdp_spec_create(w.mesh, src.data(), (int)src.size(), 2,
                                  g.data(), dt, kCpu, &ss));
  ASSERT_TPDP_OK(tpdp_spec_create(w.mesh, dst.data(), (int)dst.size(), 2,
                                  g.data(), dt, kCpu, &ds));
  size_t es = tpdp_dtype_size(dt);
  V sshape, soff, dshape, doff;
  RefLayout(w.mesh_shape, w.coords, src, g, &sshape, &soff);
  RefLayout(w.mesh_shape, w.coords, dst, g, &dshape, &doff);
  // Source: a strided view (row pitch one larger) to exercise packing.
  int64_t pitch = sshape[1] + 1;
  std::vector<char> sbuf((size_t)(sshape[0] * pitch + 1) * es);
  for (int64_t a = 0; a < sshape[0]; a++)
    for (int64_t b = 0; b < sshape[1]; b++)
      Put(sbuf, dt, a * pitch + b,
          Expected(w, src, src, soff[0] + a, soff[1] + b, g[1], true));
  tpdp_tensor sl;
  ASSERT_TPDP_OK(
      tpdp_tensor_init(&sl, sbuf.data(), dt, kCpu, 2, sshape.data()));
  sl.strides[0] = pitch;
  tpdp_dtensor sd;
  ASSERT_TPDP_OK(tpdp_dtensor_unflatten(&sl, ss, &sd));
  std::vector<char> dbuf((size_t)(dshape[0] * dshape[1] + 1) * es, 0x7f);
  tpdp_tensor dl;
  ASSERT_TPDP_OK(
      tpdp_tensor_init(&dl, dbuf.data(), dt, kCpu, 2, dshape.data()));
  EXPECT_TPDP_OK(tpdp_redistribute(&sd, ds, &dl));
  int bad = 0;
  for (int64_t a = 0; a < dshape[0] && bad < 3; a++)
    for (int64_t b = 0; b < dshape[1] && bad < 3; b++) {
      double want =
          Expected(w, src, dst, doff[0] + a, doff[1] + b, g[1], false);
      double got = Get(dbuf, dt, a * dshape[1] + b);
      if (got != want) {
        bad++;
        ADD_FAILURE() << "at global (" << doff[0] + a << "," << doff[1] + b
                      << "): got " << got << " want " << want;
      }
    }
  // Allocating form gives the same.
  tpdp_dtensor out;
  EXPECT_TPDP_OK(tpdp_redistribute_alloc(&sd, ds, &out));
  if (out.local.data) {
    EXPECT_EQ(out.spec, ds);
    EXPECT_EQ(memcmp(out.local.data, dbuf.data(),
                     (size_t)(dshape[0] * dshape[1]) * es),
              0);
    tpdp_dtensor_free_local(&out);
  }
  EXPECT_TPDP_OK(tpdp_spec_destroy(ss));
  EXPECT_TPDP_OK(tpdp_spec_destroy(ds));
}

struct Case {
  const char *src, *dst;
};

const std::vector<V> kShapes = {{7, 5}, {10, 3}, {3, 2}, {8, 4}};

void RunAll(const World &w, const std::vector<Case> &cases) {
  for (const Case &c : cases)
    for (const V &g : kShapes) RunCase(w, c.src, c.dst, g, TPDP_F32);
}

TEST(Redistribute, Mesh4x1EveryTransition) {
  World w({4, 1});
  RunAll(w, {
                {"S0,R", "R,R"},     {"S1,R", "R,R"},  // allgather
                {"P:sum,R", "R,R"},  {"P:avg,R", "R,R"},
                {"P:max,R", "R,R"},  {"P:min,R", "R,R"},  // allreduce
                {"P:sum,R", "S0,R"}, {"P:sum,R", "S1,R"},
                {"P:max,R", "S1,R"}, {"P:avg,R", "S0,R"},  // reduce_scatter
                {"R,R", "S0,R"},     {"R,R", "S1,R"},      // slice
                {"S0,R", "S1,R"},    {"S1,R", "S0,R"},     // alltoall
                {"R,R", "P:sum,R"},  {"R,R", "P:avg,R"},
                {"R,R", "P:max,R"},  {"R,R", "P:min,R"},      // partial
                {"S0,R", "P:sum,R"}, {"P:sum,R", "P:max,R"},  // combos
                {"S0,R", "S0,R"},    {"P:sum,R", "P:sum,R"},
                {"R,R", "R,R"},                         // identity
                {"S0,R", "R,S1"},    {"R,S0", "S1,R"},  // size-1 dim
            });
  // Other dtypes through the packing paths.
  RunCase(w, "S1,R", "R,R", {7, 5}, TPDP_F64);
  RunCase(w, "P:sum,R", "S1,R", {7, 5}, TPDP_I32);
  RunCase(w, "S0,R", "S1,R", {10, 3}, TPDP_I32);
  RunCase(w, "R,R", "P:sum,R", {3, 2}, TPDP_I32);
}

TEST(Redistribute, Mesh2x2EveryTransition) {
  World w({2, 2});
  RunAll(w, {
                {"S0,S1", "R,R"},         {"S1,S0", "R,R"},
                {"S0,S0", "R,R"},         {"S1,S1", "R,R"},
                {"S0,R", "R,R"},          {"R,S1", "R,R"},
                {"P:sum,P:sum", "R,R"},   {"P:max,P:max", "R,R"},
                {"P:avg,R", "R,R"},       {"R,P:min", "R,R"},
                {"P:sum,R", "S0,R"},      {"R,P:sum", "R,S1"},
                {"P:sum,P:sum", "S0,S1"}, {"P:sum,S1", "S0,S1"},
                {"S0,P:sum", "S0,S1"},    {"S0,P:max", "S0,S0"},
                {"R,R", "S0,S1"},         {"R,R", "S0,S0"},
                {"R,R", "S1,S1"},         {"R,S0", "S0,S0"},
                {"S0,R", "S0,S0"},        {"S0,S1", "S1,S0"},
                {"S0,R", "S1,R"},         {"R,S1", "R,S0"},
                {"S0,S0", "S1,S1"},       {"S0,S0", "S0,R"},
                {"S0,S0", "R,S0"},        {"S0,S0", "S1,S0"},
                {"S1,S0", "S0,S0"},       {"S0,S1", "S0,S0"},
                {"R,R", "P:sum,P:sum"},   {"R,R", "P:avg,P:max"},
                {"S0,S1", "P:sum,R"},     {"P:sum,S1", "P:sum,S0"},
                {"R,S0", "P:sum,S0"},     {"P:max,R", "P:max,S1"},
                {"S0,S1", "R,S1"},        {"S0,S1", "S0,S1"},
            });
  RunCase(w, "S0,S1", "S1,S0", {7, 5}, TPDP_F64);
  RunCase(w, "P:sum,P:sum", "S1,S0", {10, 3}, TPDP_I32);
}

// The packing space lives on the mesh: a repeated call reuses it, a call
// needing more replaces it, one needing less keeps it; results stay right
// whatever the previous call left in it (RunCase checks every element).
TEST(Redistribute, PackingSpaceKeptOnTheMesh) {
  World w({4, 1});
  const core_scratch *s = comm_mesh_scratch(w.mesh);
  EXPECT_EQ(s->data, nullptr);                  // nothing packed yet
  RunCase(w, "S1,R", "R,R", {8, 4}, TPDP_F32);  // S(1): packed allgather
  void *first = s->data;
  size_t bytes = s->bytes;
  EXPECT_NE(first, nullptr);
  // Blocks of [8, 1] f32: 4 received, and the send block (RunCase's source
  // is strided, so it is packed).
  EXPECT_EQ(bytes, 5u * 8u * 4u);
  RunCase(w, "S1,R", "R,R", {8, 4}, TPDP_F32);
  EXPECT_EQ(s->data, first);
  EXPECT_EQ(s->bytes, bytes);
  RunCase(w, "P:sum,R", "S1,R", {40, 7}, TPDP_F32);  // more: grows
  EXPECT_GT(s->bytes, bytes);
  size_t grown = s->bytes;
  void *big = s->data;
  RunCase(w, "S1,R", "S0,R", {10, 3}, TPDP_F32);  // less: kept
  EXPECT_EQ(s->data, big);
  EXPECT_EQ(s->bytes, grown);
  RunCase(w, "S0,R", "R,R", {8, 4}, TPDP_F32);  // leading dim: no packing
  EXPECT_EQ(s->data, big);
}

TEST(Redistribute, FullTensor) {
  for (V ms : {V{2, 2}, V{4, 1}}) {
    World w(ms);
    for (const char *pl :
         {"S0,S1", "S1,S0", "S0,S0", "P:sum,R", "R,P:max", "R,R"}) {
      if (ms[1] == 1 && std::string(pl) == "R,P:max") continue;
      SCOPED_TRACE(pl);
      V g = {7, 5};
      auto src = Parse(pl);
      tpdp_spec *ss = nullptr;
      ASSERT_TPDP_OK(tpdp_spec_create(w.mesh, src.data(), 2, 2, g.data(),
                                      TPDP_F32, kCpu, &ss));
      V shape, off;
      RefLayout(ms, w.coords, src, g, &shape, &off);
      std::vector<float> local((size_t)(shape[0] * shape[1]) + 1);
      for (int64_t a = 0; a < shape[0]; a++)
        for (int64_t b = 0; b < shape[1]; b++)
          local[a * shape[1] + b] =
              (float)Expected(w, src, src, off[0] + a, off[1] + b, g[1], true);
      tpdp_tensor t;
      ASSERT_TPDP_OK(
          tpdp_tensor_init(&t, local.data(), TPDP_F32, kCpu, 2, shape.data()));
      tpdp_dtensor dt;
      ASSERT_TPDP_OK(tpdp_dtensor_unflatten(&t, ss, &dt));
      std::vector<float> full(35, -1);
      tpdp_tensor ft;
      ASSERT_TPDP_OK(
          tpdp_tensor_init(&ft, full.data(), TPDP_F32, kCpu, 2, g.data()));
      EXPECT_TPDP_OK(tpdp_dtensor_full_tensor(&dt, &ft));
      for (int64_t i = 0; i < 7; i++)
        for (int64_t j = 0; j < 5; j++)
          EXPECT_EQ(full[i * 5 + j], F(i, j)) << i << "," << j;
      tpdp_tensor fa;
      EXPECT_TPDP_OK(tpdp_dtensor_full_tensor_alloc(&dt, &fa));
      if (fa.data) {
        EXPECT_EQ(memcmp(fa.data, full.data(), 35 * sizeof(float)), 0);
        free(fa.data);
      }
      EXPECT_TPDP_OK(tpdp_spec_destroy(ss));
    }
  }
}

TEST(Redistribute, BadInput) {
  World w22({2, 2}), w41({4, 1});
  V g = {8, 4};
  auto s0 = Parse("S0,R"), rr = Parse("R,R");
  tpdp_spec *a = nullptr, *b = nullptr, *c = nullptr, *gpu = nullptr,
            *other_shape = nullptr, *f64 = nullptr;
  ASSERT_TPDP_OK(tpdp_spec_create(w22.mesh, s0.data(), 2, 2, g.data(), TPDP_F32,
                                  kCpu, &a));
  ASSERT_TPDP_OK(tpdp_spec_create(w22.mesh, rr.data(), 2, 2, g.data(), TPDP_F32,
                                  kCpu, &b));
  ASSERT_TPDP_OK(tpdp_spec_create(w41.mesh, rr.data(), 2, 2, g.data(), TPDP_F32,
                                  kCpu, &c));
  tpdp_device cuda = {TPDP_DEVICE_CUDA, 0};
  ASSERT_TPDP_OK(tpdp_spec_create(w22.mesh, s0.data(), 2, 2, g.data(), TPDP_F32,
                                  cuda, &gpu));
  V g2 = {8, 5};
  ASSERT_TPDP_OK(tpdp_spec_create(w22.mesh, rr.data(), 2, 2, g2.data(),
                                  TPDP_F32, kCpu, &other_shape));
  ASSERT_TPDP_OK(tpdp_spec_create(w22.mesh, rr.data(), 2, 2, g.data(), TPDP_F64,
                                  kCpu, &f64));
  std::vector<float> x(16), y(32);
  V ls = {4, 4};
  tpdp_tensor lx, ly;
  ASSERT_TPDP_OK(tpdp_tensor_init(&lx, x.data(), TPDP_F32, kCpu, 2, ls.data()));
  ASSERT_TPDP_OK(tpdp_tensor_init(&ly, y.data(), TPDP_F32, kCpu, 2, g.data()));
  tpdp_dtensor dx;
  ASSERT_TPDP_OK(tpdp_dtensor_unflatten(&lx, a, &dx));
  EXPECT_TPDP_ERROR(tpdp_redistribute(&dx, c, &ly), TPDP_ERR_MESH_MISMATCH,
                    "different meshes");
  EXPECT_TPDP_ERROR(tpdp_redistribute(&dx, other_shape, &ly),
                    TPDP_ERR_SHAPE_MISMATCH, "[8, 4]", "[8, 5]");
  EXPECT_TPDP_ERROR(tpdp_redistribute(&dx, f64, &ly), TPDP_ERR_DTYPE_MISMATCH,
                    "f32", "f64");
  tpdp_tensor wrong = ly;
  wrong.shape[0] = 7;
  EXPECT_TPDP_ERROR(tpdp_redistribute(&dx, b, &wrong), TPDP_ERR_SHAPE_MISMATCH,
                    "destination", "[7, 4]", "[8, 4]");
  tpdp_dtensor bad_src = dx;
  bad_src.local.shape[0] = 3;
  EXPECT_TPDP_ERROR(tpdp_redistribute(&bad_src, b, &ly),
                    TPDP_ERR_SHAPE_MISMATCH, "source", "[3, 4]", "[4, 4]");
  // Device memory in a host-only build: a clear UNSUPPORTED.
  tpdp_tensor gx = lx;
  gx.device = cuda;
  tpdp_dtensor dg;
  ASSERT_TPDP_OK(tpdp_dtensor_unflatten(&gx, gpu, &dg));
  tpdp_spec *gpu_r = nullptr;
  ASSERT_TPDP_OK(tpdp_spec_with_placements(gpu, rr.data(), 2, &gpu_r));
  tpdp_tensor gy = ly;
  gy.device = cuda;
#ifndef TPDP_WITH_CUDA
  EXPECT_TPDP_ERROR(tpdp_redistribute(&dg, gpu_r, &gy), TPDP_ERR_UNSUPPORTED,
                    "cuda:0", "host memory only");
#endif
  EXPECT_TPDP_ERROR(tpdp_redistribute(nullptr, b, &ly), TPDP_ERR_NULL_POINTER,
                    "src");
  for (tpdp_spec *s : {a, b, c, gpu, gpu_r, other_shape, f64})
    EXPECT_TPDP_OK(tpdp_spec_destroy(s));
}

TEST(Redistribute, UnflattenUsesThisRank) {
  World w({4, 1});
  V g = {7, 5};
  auto s0 = Parse("S0,R");
  tpdp_spec *s = nullptr;
  ASSERT_TPDP_OK(
      tpdp_spec_create(w.mesh, s0.data(), 2, 2, g.data(), TPDP_F32, kCpu, &s));
  int r = tpdp_mesh_rank(w.mesh);
  int64_t rows = r < 3 ? 2 : 1;  // 7 over 4: 2,2,2,1
  EXPECT_EQ(tpdp_spec_self_rank(s), r);
  std::vector<float> buf(10);
  V ok = {rows, 5}, other = {rows == 2 ? 1 : 2, 5};
  tpdp_tensor t;
  tpdp_dtensor dt;
  ASSERT_TPDP_OK(
      tpdp_tensor_init(&t, buf.data(), TPDP_F32, kCpu, 2, ok.data()));
  EXPECT_TPDP_OK(tpdp_dtensor_unflatten(&t, s, &dt));
  ASSERT_TPDP_OK(
      tpdp_tensor_init(&t, buf.data(), TPDP_F32, kCpu, 2, other.data()));
  const std::string who = "rank " + std::to_string(r);
  EXPECT_TPDP_ERROR(tpdp_dtensor_unflatten(&t, s, &dt), TPDP_ERR_SHAPE_MISMATCH,
                    who.c_str());
  EXPECT_TPDP_OK(tpdp_spec_destroy(s));
}

}  // namespace
