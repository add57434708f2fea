// SPDX-License-Identifier: BSD-3-Clause
// Each parallel style's forward and backward against a dense computation on
// the host, on 2 ranks (tp=2) and 4 ranks (dp=2,tp=2 / tp=2,dp=2 / tp=4),
// with sizes that do not divide by tp. Expected values come from dense
// double-precision loops over the full tensors the test itself built; the
// local path computes with the shards tpdp_parallelize made, like a
// framework would, and uses tp/'s collectives in between.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "tests/tp/styles_test_util.h"

namespace {

using styles_test::Chunk;
using styles_test::MakeMlp;
using styles_test::Tree;
using styles_test::Val;

constexpr int64_t kH = 5;

std::vector<std::string> MeshesForWorld(int n) {
  if (n == 2) return {"tp=2"};
  if (n == 4) return {"dp=2,tp=2", "tp=2,dp=2", "tp=4"};
  return {};
}

double Act(double h) {  // tanh GELU
  const double c = 0.7978845608028654;
  return 0.5 * h * (1.0 + std::tanh(c * (h + 0.044715 * h * h * h)));
}
double ActGrad(double h) {
  const double c = 0.7978845608028654;
  double u = c * (h + 0.044715 * h * h * h);
  double t = std::tanh(u);
  return 0.5 * (1.0 + t) +
         0.5 * h * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * h * h);
}

::testing::AssertionResult Near(double got, double want, const char *what,
                                int64_t i) {
  double tol = 1e-5 * std::max(1.0, std::fabs(want));
  if (std::fabs(got - want) <= tol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << "[" << i << "]: got " << got << ", want " << want;
}

// Element (r, c) of a 2-D tensor view, through its strides.
float At(const tpdp_tensor *t, int64_t r, int64_t c) {
  return ((const float *)t->data)[r * t->strides[0] + c * t->strides[1]];
}
float At1(const tpdp_tensor *t, int64_t i) {
  return ((const float *)t->data)[i * t->strides[0]];
}
float *Ptr(const tpdp_tensor *t, int64_t r, int64_t c) {
  return (float *)t->data + r * t->strides[0] + c * t->strides[1];
}

tpdp_tensor View(float *data, std::vector<int64_t> shape) {
  tpdp_tensor t;
  EXPECT_EQ(
      tpdp_tensor_init(&t, data, TPDP_F32, tpdp_device{TPDP_DEVICE_CPU, 0},
                       (int)shape.size(), shape.data()),
      TPDP_SUCCESS);
  return t;
}

// Where this rank sits on the mesh.
struct Place {
  tpdp_mesh *mesh = nullptr;
  int tp_dim = -1;
  int64_t T = 0;        // tp size
  int64_t tp_rank = 0;  // coordinate on tp
  int64_t key = 0;      // index of this rank's TP group (its other coords)
  int64_t ngroups = 1;
};

bool MakePlace(const std::string &text, Place *p) {
  if (tpdp_mesh_create_from_string(tpdp_test::World(), text.c_str(),
                                   &p->mesh) != TPDP_SUCCESS)
    return false;
  p->tp_dim = tpdp_mesh_dim_index(p->mesh, "tp");
  p->T = tpdp_mesh_dim_size(p->mesh, p->tp_dim);
  int64_t coords[TPDP_MAX_DIMS];
  if (tpdp_mesh_coords(p->mesh, tpdp_mesh_rank(p->mesh), coords) !=
      TPDP_SUCCESS)
    return false;
  p->tp_rank = coords[p->tp_dim];
  for (int d = 0; d < tpdp_mesh_ndim(p->mesh); d++) {
    if (d == p->tp_dim) continue;
    p->key = p->key * tpdp_mesh_dim_size(p->mesh, d) + coords[d];
    p->ngroups *= tpdp_mesh_dim_size(p->mesh, d);
  }
  return true;
}

const tpdp_tp_plan_entry kPlan[] = {
    {"fc1", TPDP_STYLE_COLWISE},
    {"fc2", TPDP_STYLE_ROWWISE},
    {"norm", TPDP_STYLE_SEQUENCE_PARALLEL},
    {"proj", TPDP_STYLE_REPLICATE},
};

// Dense MLP block on the host in double: y = act(x W1^T + b1) W2^T + b2 and
// its backward for dy. x, dy: [N, H]; W1 [F, H]; W2 [H, F].
struct Dense {
  std::vector<double> h, a, y, dW1, db1, dW2, db2, dx;
};
Dense DenseMlp(const std::vector<float> &x, const std::vector<float> &dy,
               int64_t N, int64_t F, const Tree &t) {
  const auto &W1 = t.full.at("fc1.weight"), &b1 = t.full.at("fc1.bias");
  const auto &W2 = t.full.at("fc2.weight"), &b2 = t.full.at("fc2.bias");
  Dense d;
  d.h.assign(N * F, 0);
  d.a.assign(N * F, 0);
  d.y.assign(N * kH, 0);
  for (int64_t n = 0; n < N; n++)
    for (int64_t o = 0; o < F; o++) {
      double s = b1[o];
      for (int64_t i = 0; i < kH; i++)
        s += (double)x[n * kH + i] * W1[o * kH + i];
      d.h[n * F + o] = s;
      d.a[n * F + o] = Act(s);
    }
  for (int64_t n = 0; n < N; n++)
    for (int64_t j = 0; j < kH; j++) {
      double s = b2[j];
      for (int64_t o = 0; o < F; o++) s += d.a[n * F + o] * W2[j * F + o];
      d.y[n * kH + j] = s;
    }
  std::vector<double> dh(N * F, 0);
  for (int64_t n = 0; n < N; n++)
    for (int64_t o = 0; o < F; o++) {
      double s = 0;
      for (int64_t j = 0; j < kH; j++)
        s += (double)dy[n * kH + j] * W2[j * F + o];
      dh[n * F + o] = s * ActGrad(d.h[n * F + o]);
    }
  d.dW2.assign(kH * F, 0);
  d.db2.assign(kH, 0);
  for (int64_t j = 0; j < kH; j++) {
    for (int64_t o = 0; o < F; o++)
      for (int64_t n = 0; n < N; n++)
        d.dW2[j * F + o] += (double)dy[n * kH + j] * d.a[n * F + o];
    for (int64_t n = 0; n < N; n++) d.db2[j] += dy[n * kH + j];
  }
  d.dW1.assign(F * kH, 0);
  d.db1.assign(F, 0);
  for (int64_t o = 0; o < F; o++) {
    for (int64_t i = 0; i < kH; i++)
      for (int64_t n = 0; n < N; n++)
        d.dW1[o * kH + i] += dh[n * F + o] * x[n * kH + i];
    for (int64_t n = 0; n < N; n++) d.db1[o] += dh[n * F + o];
  }
  d.dx.assign(N * kH, 0);
  for (int64_t n = 0; n < N; n++)
    for (int64_t i = 0; i < kH; i++)
      for (int64_t o = 0; o < F; o++)
        d.dx[n * kH + i] += dh[n * F + o] * W1[o * kH + i];
  return d;
}

// The local (sharded) MLP: what one TP rank computes with its shards, in
// f32 like a framework. l1 = local width of fc1's output.
struct Local {
  std::vector<float> h, a, partial;  // h, a: [N, l1]; partial: [N, H]
};
Local LocalForward(const std::vector<float> &x, int64_t N, int64_t l1,
                   const Tree &t) {
  tpdp_param *pw1 = t.params.at("fc1.weight"), *pb1 = t.params.at("fc1.bias");
  tpdp_param *pw2 = t.params.at("fc2.weight");
  const tpdp_tensor *W1 = tpdp_param_tensor(pw1), *b1 = tpdp_param_tensor(pb1);
  const tpdp_tensor *W2 = tpdp_param_tensor(pw2);
  Local l;
  l.h.assign(N * l1, 0);
  l.a.assign(N * l1, 0);
  l.partial.assign(N * kH, 0);
  for (int64_t n = 0; n < N; n++)
    for (int64_t o = 0; o < l1; o++) {
      float s = At1(b1, o);
      for (int64_t i = 0; i < kH; i++) s += x[n * kH + i] * At(W1, o, i);
      l.h[n * l1 + o] = s;
      l.a[n * l1 + o] = (float)Act(s);
    }
  for (int64_t n = 0; n < N; n++)
    for (int64_t j = 0; j < kH; j++) {
      float s = 0;
      for (int64_t o = 0; o < l1; o++) s += l.a[n * l1 + o] * At(W2, j, o);
      l.partial[n * kH + j] = s;
    }
  return l;
}

// Local backward: writes dW1, db1 (fc1 grads, local rows), dW2 (fc2 grad,
// local columns), db2 (replicated) into the parameters' grad views and
// returns dx's partial sum [N, H].
std::vector<float> LocalBackward(const std::vector<float> &x,
                                 const std::vector<float> &dy, int64_t N,
                                 int64_t l1, const Local &l, const Tree &t) {
  const tpdp_tensor *W1 = tpdp_param_tensor(t.params.at("fc1.weight"));
  const tpdp_tensor *W2 = tpdp_param_tensor(t.params.at("fc2.weight"));
  const tpdp_tensor *gW1 = tpdp_param_grad(t.params.at("fc1.weight"));
  const tpdp_tensor *gb1 = tpdp_param_grad(t.params.at("fc1.bias"));
  const tpdp_tensor *gW2 = tpdp_param_grad(t.params.at("fc2.weight"));
  const tpdp_tensor *gb2 = tpdp_param_grad(t.params.at("fc2.bias"));
  std::vector<float> dh(N * l1, 0), dx(N * kH, 0);
  for (int64_t n = 0; n < N; n++)
    for (int64_t o = 0; o < l1; o++) {
      float s = 0;
      for (int64_t j = 0; j < kH; j++) s += dy[n * kH + j] * At(W2, j, o);
      dh[n * l1 + o] = s * (float)ActGrad(l.h[n * l1 + o]);
    }
  for (int64_t j = 0; j < kH; j++) {
    for (int64_t o = 0; o < l1; o++) {
      float s = 0;
      for (int64_t n = 0; n < N; n++) s += dy[n * kH + j] * l.a[n * l1 + o];
      *Ptr(gW2, j, o) = s;
    }
    float s = 0;
    for (int64_t n = 0; n < N; n++) s += dy[n * kH + j];
    ((float *)gb2->data)[j * gb2->strides[0]] = s;
  }
  for (int64_t o = 0; o < l1; o++) {
    for (int64_t i = 0; i < kH; i++) {
      float s = 0;
      for (int64_t n = 0; n < N; n++) s += dh[n * l1 + o] * x[n * kH + i];
      *Ptr(gW1, o, i) = s;
    }
    float s = 0;
    for (int64_t n = 0; n < N; n++) s += dh[n * l1 + o];
    ((float *)gb1->data)[o * gb1->strides[0]] = s;
  }
  for (int64_t n = 0; n < N; n++)
    for (int64_t i = 0; i < kH; i++) {
      float s = 0;
      for (int64_t o = 0; o < l1; o++) s += dh[n * l1 + o] * At(W1, o, i);
      dx[n * kH + i] = s;
    }
  return dx;
}

// Checks a parallelized parameter: local shape, values = the torch.chunk
// slice of the full tensor on `shard_dim` (-1: replicated), spec, grad view.
void CheckParam(Tree &t, const Place &pl, const std::string &fqn,
                int shard_dim) {
  SCOPED_TRACE(fqn);
  tpdp_param *p = t.Param(fqn);
  const std::vector<int64_t> &g = t.shape.at(fqn);
  const std::vector<float> &full = t.full.at(fqn);
  const tpdp_tensor *loc = tpdp_param_tensor(p);
  ASSERT_EQ(loc->ndim, (int)g.size());
  EXPECT_EQ(loc->dtype, TPDP_F32);
  EXPECT_EQ(loc->device.type, TPDP_DEVICE_CPU);
  EXPECT_NE(loc->data, (const void *)full.data());
  std::vector<int64_t> start(g.size(), 0), len = g;
  if (shard_dim >= 0)
    Chunk(g[shard_dim], pl.T, pl.tp_rank, &start[shard_dim], &len[shard_dim]);
  for (size_t d = 0; d < g.size(); d++) EXPECT_EQ(loc->shape[d], len[d]) << d;
  EXPECT_EQ(tpdp_tensor_is_contiguous(loc), 1);
  // Values: exact copies of the full tensor's slice.
  if (g.size() == 2) {
    for (int64_t r = 0; r < len[0]; r++)
      for (int64_t c = 0; c < len[1]; c++)
        ASSERT_EQ(At(loc, r, c), full[(start[0] + r) * g[1] + start[1] + c])
            << r << "," << c;
  } else {
    for (int64_t i = 0; i < len[0]; i++)
      ASSERT_EQ(At1(loc, i), full[start[0] + i]) << i;
  }
  // Spec: Shard(shard_dim) / Replicate on tp, Replicate elsewhere; global
  // shape.
  EXPECT_EQ(tpdp_param_get_form(p), TPDP_PARAM_DTENSOR);
  const tpdp_spec *spec = (const tpdp_spec *)tpdp_param_spec(p);
  ASSERT_NE(spec, nullptr);
  ASSERT_EQ(tpdp_spec_ndim(spec), (int)g.size());
  for (size_t d = 0; d < g.size(); d++)
    EXPECT_EQ(tpdp_spec_global_shape(spec)[d], g[d]);
  for (int d = 0; d < tpdp_mesh_ndim(pl.mesh); d++) {
    tpdp_placement want = (d == pl.tp_dim && shard_dim >= 0)
                              ? tpdp_shard(shard_dim)
                              : tpdp_replicate();
    EXPECT_TRUE(tpdp_placement_equal(tpdp_spec_placements(spec)[d], want))
        << "mesh dim " << d;
  }
  tpdp_dtensor dt;
  EXPECT_EQ(tpdp_dtensor_unflatten(loc, spec, &dt), TPDP_SUCCESS)
      << tpdp_last_error();
  // Gradient view: local shape, zeroed, distinct storage.
  const tpdp_tensor *gr = tpdp_param_grad(p);
  ASSERT_NE(gr, nullptr);
  EXPECT_EQ(tpdp_tensor_same_shape(gr, loc), 1);
  EXPECT_EQ(gr->dtype, TPDP_F32);
  if (tpdp_tensor_numel(gr) > 0) {
    EXPECT_NE(gr->data, loc->data);
    for (int64_t i = 0; i < tpdp_tensor_numel(gr); i++)
      ASSERT_EQ(((const float *)gr->data)[i], 0.0f) << i;
  }
}

class StylesMlp : public ::testing::TestWithParam<int64_t> {};

// Parameters after tpdp_parallelize: shards, specs, grads, units, report.
TEST_P(StylesMlp, ParallelizeShardsParameters) {
  const int64_t F = GetParam();
  for (const std::string &mt : MeshesForWorld(tpdp_test::WorldSize())) {
    SCOPED_TRACE("mesh " + mt + " F=" + std::to_string(F));
    Place pl;
    ASSERT_TRUE(MakePlace(mt, &pl)) << tpdp_last_error();
    {
      auto t = MakeMlp(F, kH);
      ASSERT_NE(t, nullptr);
      auto saved = t->full;
      ASSERT_TPDP_OK(tpdp_parallelize(t->root, pl.mesh, "tp", kPlan, 4));
      EXPECT_EQ(saved, t->full) << "caller's full tensors were modified";
      CheckParam(*t, pl, "fc1.weight", 0);
      CheckParam(*t, pl, "fc1.bias", 0);
      CheckParam(*t, pl, "fc2.weight", 1);
      CheckParam(*t, pl, "fc2.bias", -1);
      CheckParam(*t, pl, "norm.weight", -1);
      CheckParam(*t, pl, "proj.weight", -1);
      // Units, styles, communicators.
      const char *mods[] = {"fc1", "fc2", "norm", "proj"};
      for (int i = 0; i < 4; i++) {
        tpdp_module *m = t->Module(mods[i]);
        ASSERT_NE(tpdp_module_unit_kind(m), nullptr) << mods[i];
        EXPECT_EQ(std::string(tpdp_module_unit_kind(m)), "TP");
        tpdp_tp_style s;
        ASSERT_TPDP_OK(tpdp_tp_module_style(m, &s));
        EXPECT_EQ(s, kPlan[i].style);
        tpdp_comm *c = nullptr;
        ASSERT_TPDP_OK(tpdp_tp_module_comm(m, &c));
        EXPECT_EQ(tpdp_comm_size(c), pl.T);
        EXPECT_EQ(tpdp_comm_rank(c), pl.tp_rank);
      }
      EXPECT_EQ(tpdp_module_unit_kind(t->root), nullptr);
      tpdp_tree_report *r = nullptr;
      ASSERT_TPDP_OK(tpdp_tree_report_create(t->root, nullptr, 0, &r));
      std::string text = tpdp_tree_report_text(r);
      for (const char *line :
           {"fc1[Linear] TP COLWISE\n", "fc2[Linear] TP ROWWISE\n",
            "norm[Norm] TP SEQUENCE_PARALLEL\n", "proj[Linear] TP REPLICATE\n"})
        EXPECT_NE(text.find(line), std::string::npos)
            << "report lacks '" << line << "':\n"
            << text;
      EXPECT_EQ(text.rfind("[Model]\n", 0), 0u) << text;
      tpdp_tree_report_destroy(r);
    }
    EXPECT_TPDP_OK(tpdp_mesh_destroy(pl.mesh));
  }
}

// Colwise fc1 -> GELU -> rowwise fc2 (allreduce), forward and backward.
TEST_P(StylesMlp, ColwiseRowwiseForwardBackward) {
  const int64_t F = GetParam(), N = 3;
  for (const std::string &mt : MeshesForWorld(tpdp_test::WorldSize())) {
    SCOPED_TRACE("mesh " + mt + " F=" + std::to_string(F));
    Place pl;
    ASSERT_TRUE(MakePlace(mt, &pl)) << tpdp_last_error();
    {
      auto t = MakeMlp(F, kH);
      ASSERT_NE(t, nullptr);
      ASSERT_TPDP_OK(tpdp_parallelize(t->root, pl.mesh, "tp", kPlan, 4));
      int64_t s1, l1;
      Chunk(F, pl.T, pl.tp_rank, &s1, &l1);
      // Input and output gradient: the same within a TP group, different
      // across DP groups.
      std::vector<float> x(N * kH), dy(N * kH);
      for (int64_t i = 0; i < N * kH; i++) {
        x[i] = 2.0f * Val(10 + (int)pl.key, i);
        dy[i] = Val(20 + 3 * (int)pl.key, i);
      }
      Dense d = DenseMlp(x, dy, N, F, *t);
      Local l = LocalForward(x, N, l1, *t);
      for (int64_t n = 0; n < N; n++)  // colwise output = columns of dense h
        for (int64_t o = 0; o < l1; o++)
          EXPECT_TRUE(
              Near(l.h[n * l1 + o], d.h[n * F + s1 + o], "h", n * F + o));
      tpdp_tensor partial = View(l.partial.data(), {N, kH});
      EXPECT_TPDP_OK(
          tpdp_tp_rowwise_output_forward(t->Module("fc2"), &partial));
      const tpdp_tensor *b2 = tpdp_param_tensor(t->Param("fc2.bias"));
      for (int64_t n = 0; n < N; n++)
        for (int64_t j = 0; j < kH; j++)
          EXPECT_TRUE(Near(l.partial[n * kH + j] + At1(b2, j), d.y[n * kH + j],
                           "y", n * kH + j));
      // Backward.
      std::vector<float> dx = LocalBackward(x, dy, N, l1, l, *t);
      const tpdp_tensor *gW1 = tpdp_param_grad(t->Param("fc1.weight"));
      const tpdp_tensor *gb1 = tpdp_param_grad(t->Param("fc1.bias"));
      const tpdp_tensor *gW2 = tpdp_param_grad(t->Param("fc2.weight"));
      const tpdp_tensor *gb2 = tpdp_param_grad(t->Param("fc2.bias"));
      for (int64_t j = 0; j < kH; j++) {  // dW2: dense columns [s1, s1+l1)
        for (int64_t o = 0; o < l1; o++)
          EXPECT_TRUE(Near(At(gW2, j, o), d.dW2[j * F + s1 + o], "dW2",
                           j * F + s1 + o));
        EXPECT_TRUE(Near(At1(gb2, j), d.db2[j], "db2", j));
      }
      for (int64_t o = 0; o < l1; o++) {  // dW1, db1: dense rows
        for (int64_t i = 0; i < kH; i++)
          EXPECT_TRUE(Near(At(gW1, o, i), d.dW1[(s1 + o) * kH + i], "dW1",
                           (s1 + o) * kH + i));
        EXPECT_TRUE(Near(At1(gb1, o), d.db1[s1 + o], "db1", s1 + o));
      }
      tpdp_tensor gx = View(dx.data(), {N, kH});
      EXPECT_TPDP_OK(tpdp_tp_colwise_input_backward(t->Module("fc1"), &gx));
      for (int64_t i = 0; i < N * kH; i++)
        EXPECT_TRUE(Near(dx[i], d.dx[i], "dx", i));
    }
    EXPECT_TPDP_OK(tpdp_mesh_destroy(pl.mesh));
  }
}

// Sequence-parallel MLP block: x sharded on the sequence dim (S rows) ->
// sequence_gather -> colwise fc1 -> GELU -> rowwise fc2 -> reduce_scatter
// back to sequence shards; backward: gather dy, scatter_grad dx.
TEST_P(StylesMlp, SequenceParallelBlock) {
  const int64_t F = GetParam();
  for (const std::string &mt : MeshesForWorld(tpdp_test::WorldSize())) {
    for (int64_t S : {7, 3}) {
      SCOPED_TRACE("mesh " + mt + " F=" + std::to_string(F) +
                   " S=" + std::to_string(S));
      Place pl;
      ASSERT_TRUE(MakePlace(mt, &pl)) << tpdp_last_error();
      {
        auto t = MakeMlp(F, kH);
        ASSERT_NE(t, nullptr);
        ASSERT_TPDP_OK(tpdp_parallelize(t->root, pl.mesh, "tp", kPlan, 4));
        int64_t s1, l1, ss, ls;
        Chunk(F, pl.T, pl.tp_rank, &s1, &l1);
        Chunk(S, pl.T, pl.tp_rank, &ss, &ls);
        std::vector<float> x(S * kH), dy(S * kH);
        for (int64_t i = 0; i < S * kH; i++) {
          x[i] = 2.0f * Val(30 + (int)pl.key, i);
          dy[i] = Val(50 + 5 * (int)pl.key, i);
        }
        Dense d = DenseMlp(x, dy, S, F, *t);
        // Forward: gather the sequence shards of x.
        std::vector<float> xs(x.begin() + ss * kH, x.begin() + (ss + ls) * kH);
        xs.reserve(1);
        std::vector<float> xfull(S * kH,
                                 std::numeric_limits<float>::quiet_NaN());
        tpdp_tensor txs = View(xs.data(), {ls, kH});
        tpdp_tensor txf = View(xfull.data(), {S, kH});
        EXPECT_TPDP_OK(
            tpdp_tp_sequence_gather(t->Module("fc1"), &txs, 0, &txf));
        EXPECT_EQ(xfull, x);
        Local l = LocalForward(xfull, S, l1, *t);
        std::vector<float> ys(ls * kH + 1,
                              std::numeric_limits<float>::quiet_NaN());
        tpdp_tensor tp_ = View(l.partial.data(), {S, kH});
        tpdp_tensor tys = View(ys.data(), {ls, kH});
        EXPECT_TPDP_OK(tpdp_tp_rowwise_output_reduce_scatter(t->Module("fc2"),
                                                             &tp_, 0, &tys));
        const tpdp_tensor *b2 = tpdp_param_tensor(t->Param("fc2.bias"));
        for (int64_t r = 0; r < ls; r++)
          for (int64_t j = 0; j < kH; j++)
            EXPECT_TRUE(Near(ys[r * kH + j] + At1(b2, j),
                             d.y[(ss + r) * kH + j], "y", (ss + r) * kH + j));
        // Backward: dy arrives as sequence shards; gather it (backward of
        // reduce_scatter), run the local backward, scatter dx.
        std::vector<float> dys(dy.begin() + ss * kH,
                               dy.begin() + (ss + ls) * kH);
        dys.reserve(1);
        std::vector<float> dyfull(S * kH,
                                  std::numeric_limits<float>::quiet_NaN());
        tpdp_tensor tdys = View(dys.data(), {ls, kH});
        tpdp_tensor tdyf = View(dyfull.data(), {S, kH});
        EXPECT_TPDP_OK(
            tpdp_tp_sequence_gather(t->Module("fc2"), &tdys, 0, &tdyf));
        EXPECT_EQ(dyfull, dy);
        std::vector<float> dxp = LocalBackward(xfull, dyfull, S, l1, l, *t);
        const tpdp_tensor *gW1 = tpdp_param_grad(t->Param("fc1.weight"));
        const tpdp_tensor *gW2 = tpdp_param_grad(t->Param("fc2.weight"));
        for (int64_t o = 0; o < l1; o++)
          for (int64_t i = 0; i < kH; i++)
            EXPECT_TRUE(Near(At(gW1, o, i), d.dW1[(s1 + o) * kH + i], "dW1",
                             (s1 + o) * kH + i));
        for (int64_t j = 0; j < kH; j++)
          for (int64_t o = 0; o < l1; o++)
            EXPECT_TRUE(Near(At(gW2, j, o), d.dW2[j * F + s1 + o], "dW2",
                             j * F + s1 + o));
        std::vector<float> dxs(ls * kH + 1,
                               std::numeric_limits<float>::quiet_NaN());
        tpdp_tensor tdxp = View(dxp.data(), {S, kH});
        tpdp_tensor tdxs = View(dxs.data(), {ls, kH});
        EXPECT_TPDP_OK(
            tpdp_tp_sequence_scatter_grad(t->Module("fc1"), &tdxp, 0, &tdxs));
        for (int64_t r = 0; r < ls; r++)
          for (int64_t i = 0; i < kH; i++)
            EXPECT_TRUE(Near(dxs[r * kH + i], d.dx[(ss + r) * kH + i], "dx",
                             (ss + r) * kH + i));
      }
      EXPECT_TPDP_OK(tpdp_mesh_destroy(pl.mesh));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Widths, StylesMlp, ::testing::Values(7, 5),
                         [](const ::testing::TestParamInfo<int64_t> &i) {
                           return "F" + std::to_string(i.param);
                         });

// The sequence-parallel collectives on their own, on a [A, S, C] activation
// sharded on dim 1 (and [S, C] on dim 0): per-rank partials whose sums the
// test computes from the same formula for every TP peer.
TEST(StylesSequence, GatherAndReduceScatterOnAnyDim) {
  for (const std::string &mt : MeshesForWorld(tpdp_test::WorldSize())) {
    for (int seq_dim : {0, 1}) {
      for (int64_t S : {7, 3}) {
        SCOPED_TRACE("mesh " + mt + " seq_dim " + std::to_string(seq_dim) +
                     " S=" + std::to_string(S));
        Place pl;
        ASSERT_TRUE(MakePlace(mt, &pl)) << tpdp_last_error();
        {
          auto t = MakeMlp(7, kH);
          ASSERT_NE(t, nullptr);
          ASSERT_TPDP_OK(tpdp_parallelize(t->root, pl.mesh, "tp", kPlan, 4));
          const int64_t A = seq_dim == 1 ? 2 : 1, C = 3;
          int64_t ss, ls;
          Chunk(S, pl.T, pl.tp_rank, &ss, &ls);
          auto full_shape = [&](int64_t s) {
            return seq_dim == 1 ? std::vector<int64_t>{A, s, C}
                                : std::vector<int64_t>{s, C};
          };
          auto idx = [&](int64_t a, int64_t s, int64_t c, int64_t ns) {
            return (a * ns + s) * C + c;
          };
          // gather: shard of the group's tensor -> full.
          std::vector<float> full(A * S * C), shard(A * ls * C + 1);
          for (int64_t i = 0; i < A * S * C; i++)
            full[i] = Val(70 + (int)pl.key, i);
          for (int64_t a = 0; a < A; a++)
            for (int64_t s = 0; s < ls; s++)
              for (int64_t c = 0; c < C; c++)
                shard[idx(a, s, c, ls)] = full[idx(a, ss + s, c, S)];
          std::vector<float> got(A * S * C,
                                 std::numeric_limits<float>::quiet_NaN());
          tpdp_tensor tsh = View(shard.data(), full_shape(ls));
          tpdp_tensor tgot = View(got.data(), full_shape(S));
          EXPECT_TPDP_OK(
              tpdp_tp_sequence_gather(t->Module("norm"), &tsh, seq_dim, &tgot));
          EXPECT_EQ(got, full);
          // reduce_scatter / scatter_grad: partial of TP rank r is
          // Val(tag + 8*key + r, i); expected: this rank's rows of the sum.
          for (int which = 0; which < 2; which++) {
            int tag = which == 0 ? 100 : 200;
            std::vector<float> part(A * S * C);
            for (int64_t i = 0; i < A * S * C; i++)
              part[i] = Val(tag + 8 * (int)pl.key + (int)pl.tp_rank, i);
            std::vector<float> out(A * ls * C + 1,
                                   std::numeric_limits<float>::quiet_NaN());
            tpdp_tensor tpart = View(part.data(), full_shape(S));
            tpdp_tensor tout = View(out.data(), full_shape(ls));
            if (which == 0)
              EXPECT_TPDP_OK(tpdp_tp_rowwise_output_reduce_scatter(
                  t->Module("fc2"), &tpart, seq_dim, &tout));
            else
              EXPECT_TPDP_OK(tpdp_tp_sequence_scatter_grad(
                  t->Module("norm"), &tpart, seq_dim, &tout));
            for (int64_t a = 0; a < A; a++)
              for (int64_t s = 0; s < ls; s++)
                for (int64_t c = 0; c < C; c++) {
                  double want = 0;
                  for (int64_t r = 0; r < pl.T; r++)
                    want += Val(tag + 8 * (int)pl.key + (int)r,
                                idx(a, ss + s, c, S));
                  EXPECT_TRUE(Near(out[idx(a, s, c, ls)], want,
                                   which ? "scatter_grad" : "reduce_scatter",
                                   idx(a, ss + s, c, S)));
                }
          }
        }
        EXPECT_TPDP_OK(tpdp_mesh_destroy(pl.mesh));
      }
    }
  }
}

// A sequence-parallel norm (y = x * w over the hidden dim) on sequence
// shards: each rank's weight gradient covers its rows only;
// tpdp_tp_reduce_replicated_grads sums it over the TP group (not over DP
// peers) and leaves every other style's gradients alone.
TEST(StylesSequence, ReduceReplicatedGradsOverTpOnly) {
  for (const std::string &mt : MeshesForWorld(tpdp_test::WorldSize())) {
    SCOPED_TRACE("mesh " + mt);
    Place pl;
    ASSERT_TRUE(MakePlace(mt, &pl)) << tpdp_last_error();
    {
      auto t = MakeMlp(7, kH);
      ASSERT_NE(t, nullptr);
      ASSERT_TPDP_OK(tpdp_parallelize(t->root, pl.mesh, "tp", kPlan, 4));
      const int64_t S = 7;
      int64_t ss, ls;
      Chunk(S, pl.T, pl.tp_rank, &ss, &ls);
      auto xv = [&](int64_t key, int64_t i) { return Val(300 + (int)key, i); };
      auto dyv = [&](int64_t key, int64_t i) {
        return Val(400 + 2 * (int)key, i);
      };
      // Local gradient over this rank's sequence rows.
      const tpdp_tensor *gn = tpdp_param_grad(t->Param("norm.weight"));
      ASSERT_NE(gn, nullptr);
      ASSERT_EQ(gn->shape[0], kH);
      for (int64_t h = 0; h < kH; h++) {
        float s = 0;
        for (int64_t r = ss; r < ss + ls; r++)
          s += xv(pl.key, r * kH + h) * dyv(pl.key, r * kH + h);
        ((float *)gn->data)[h * gn->strides[0]] = s;
      }
      // Known values in the other styles' grads: must stay as they are.
      std::vector<std::string> others = {"fc1.weight", "fc1.bias", "fc2.weight",
                                         "fc2.bias", "proj.weight"};
      for (const std::string &f : others) {
        const tpdp_tensor *g = tpdp_param_grad(t->Param(f));
        for (int64_t i = 0; i < tpdp_tensor_numel(g); i++)
          ((float *)g->data)[i] = 1.0f + (float)i;
      }
      EXPECT_TPDP_OK(tpdp_tp_reduce_replicated_grads(t->root));
      for (int64_t h = 0; h < kH; h++) {
        double want = 0, world = 0;
        for (int64_t r = 0; r < S; r++)
          want += (double)xv(pl.key, r * kH + h) * dyv(pl.key, r * kH + h);
        for (int64_t k = 0; k < pl.ngroups; k++)
          for (int64_t r = 0; r < S; r++)
            world += (double)xv(k, r * kH + h) * dyv(k, r * kH + h);
        float got = ((const float *)gn->data)[h * gn->strides[0]];
        EXPECT_TRUE(Near(got, want, "norm.grad", h));
        // On a mesh with DP peers, summing over them too would be caught.
        if (pl.ngroups > 1 && std::fabs(world - want) > 1e-3) {
          EXPECT_FALSE(std::fabs(got - world) <=
                       1e-5 * std::max(1.0, std::fabs(world)))
              << "norm grad summed over DP peers too, h=" << h;
        }
      }
      for (const std::string &f : others) {
        const tpdp_tensor *g = tpdp_param_grad(t->Param(f));
        for (int64_t i = 0; i < tpdp_tensor_numel(g); i++)
          ASSERT_EQ(((const float *)g->data)[i], 1.0f + (float)i)
              << f << " " << i;
      }
      // The replicated weight itself is untouched.
      const tpdp_tensor *w = tpdp_param_tensor(t->Param("norm.weight"));
      for (int64_t h = 0; h < kH; h++)
        EXPECT_EQ(At1(w, h), t->full.at("norm.weight")[h]);
    }
    EXPECT_TPDP_OK(tpdp_mesh_destroy(pl.mesh));
  }
}

TEST(StylesSequence, WorldSizeHasMeshes) {
  EXPECT_FALSE(MeshesForWorld(tpdp_test::WorldSize()).empty())
      << "run on 2 or 4 ranks";
}

}  // namespace
