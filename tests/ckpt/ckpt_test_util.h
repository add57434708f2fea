// SPDX-License-Identifier: BSD-3-Clause
// Helpers of the checkpoint tests: a model of named tensors laid out on a
// mesh over some communicator, filled with a known function of each
// element's global position (so any rank can check any element after a
// load, whatever the layout it was saved from), with the local layout
// computed here by the torch.chunk rule, independently of tp/.
#ifndef TPDP_TESTS_CKPT_TEST_UTIL_H
#define TPDP_TESTS_CKPT_TEST_UTIL_H

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "tests/test_util.h"
#include "tpdp/checkpoint.h"

namespace ckpt_test {

using V = std::vector<int64_t>;
const tpdp_device kCpu = {TPDP_DEVICE_CPU, 0};

// Global value of element `flat` (row-major) of tensor `id`: a multiple of
// 0.5 in [-15, 15], exact in f32, f16 and bf16.
inline double Value(int id, int64_t flat) {
  return (double)((flat * 7 + id * 13) % 61) * 0.5 - 15.0;
}

// A tensor of the test model: name, global shape, placements per mesh dim
// ("" = no spec: whole on every rank).
struct TensorDef {
  std::string name;
  V shape;
  std::string placements;
};

inline void RefLayout(const V &mesh, const V &coords,
                      const std::vector<tpdp_placement> &pl, const V &g,
                      V *shape, V *offset) {
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
  *shape = V(g.size());
  *offset = lo;
  for (size_t d = 0; d < g.size(); d++) (*shape)[d] = hi[d] - lo[d];
}

// Element i of a buffer as a T: through memcpy, since the buffers are char
// vectors (a float * into them would break C++'s aliasing rule).
template <typename T>
T Get(const void *p, int64_t i) {
  T v;
  std::memcpy(&v, static_cast<const char *>(p) + i * sizeof(T), sizeof(T));
  return v;
}
template <typename T>
void Put(void *p, int64_t i, T v) {
  std::memcpy(static_cast<char *>(p) + i * sizeof(T), &v, sizeof(T));
}

// Element i of a buffer of dtype dt, read and written here rather than
// through ckpt's conversion, so that what a load converted is checked
// independently of it.
inline double Load(const void *p, tpdp_dtype dt, int64_t i) {
  switch (dt) {
    case TPDP_F64:
      return Get<double>(p, i);
    case TPDP_F16:
      return tpdp_f16_to_f32(Get<uint16_t>(p, i));
    case TPDP_BF16:
      return tpdp_bf16_to_f32(Get<uint16_t>(p, i));
    case TPDP_I32:
      return Get<int32_t>(p, i);
    default:
      return Get<float>(p, i);
  }
}

inline void Store(void *p, tpdp_dtype dt, int64_t i, double v) {
  switch (dt) {
    case TPDP_F64:
      return Put(p, i, v);
    case TPDP_F16:
      return Put(p, i, tpdp_f32_to_f16((float)v));
    case TPDP_BF16:
      return Put(p, i, tpdp_f32_to_bf16((float)v));
    case TPDP_I32:
      return Put(p, i, (int32_t)v);
    default:
      return Put(p, i, (float)v);
  }
}

// The model on one rank: mesh over `comm` (NULL mesh when comm is NULL
// and every tensor is plain), specs and local buffers, in a state dict.
class Model {
 public:
  // mesh: "dp=2,tp=2" over comm. fill: write Value() into the local
  // tensors (else NaN-like garbage 99).
  Model(tpdp_comm *comm, const std::string &mesh,
        const std::vector<TensorDef> &defs, tpdp_dtype dtype, bool fill)
      : defs_(defs), dtype_(dtype) {
    EXPECT_TPDP_OK(tpdp_state_dict_create(&sd_));
    if (!mesh.empty())
      EXPECT_TPDP_OK(tpdp_mesh_create_from_string(comm, mesh.c_str(), &mesh_));
    V msizes, coords;
    if (mesh_) {
      for (int d = 0; d < tpdp_mesh_ndim(mesh_); d++)
        msizes.push_back(tpdp_mesh_dim_size(mesh_, d));
      coords.resize(msizes.size());
      tpdp_mesh_coords(mesh_, tpdp_mesh_rank(mesh_), coords.data());
    }
    for (size_t i = 0; i < defs.size(); i++) {
      const TensorDef &d = defs[i];
      tpdp_spec *spec = nullptr;
      V shape = d.shape, offset(d.shape.size(), 0);
      if (!d.placements.empty()) {
        std::vector<tpdp_placement> pl(TPDP_MAX_DIMS);
        int np = 0;
        EXPECT_TPDP_OK(tpdp_placements_parse(d.placements.c_str(), pl.data(),
                                             TPDP_MAX_DIMS, &np));
        pl.resize(np);
        EXPECT_TPDP_OK(tpdp_spec_create(mesh_, pl.data(), np,
                                        (int)d.shape.size(), d.shape.data(),
                                        dtype, kCpu, &spec));
        RefLayout(msizes, coords, pl, d.shape, &shape, &offset);
      }
      specs_.push_back(spec);
      shapes_.push_back(shape);
      offsets_.push_back(offset);
      int64_t n = 1;
      for (int64_t s : shape) n *= s;
      bufs_.emplace_back((size_t)n * tpdp_dtype_size(dtype) + 8, 0);
      for (int64_t k = 0; k < n; k++)
        Store(bufs_.back().data(), dtype, k,
              fill ? Value((int)i, Flat(i, k)) : 99.0);
      tpdp_tensor t;
      EXPECT_TPDP_OK(tpdp_tensor_init(&t, bufs_.back().data(), dtype, kCpu,
                                      (int)shape.size(), shape.data()));
      EXPECT_TPDP_OK(tpdp_state_dict_add(sd_, d.name.c_str(), &t, spec));
    }
  }
  ~Model() {
    tpdp_state_dict_destroy(sd_);
    for (tpdp_spec *s : specs_) tpdp_spec_destroy(s);
    tpdp_mesh_destroy(mesh_);
  }
  tpdp_state_dict *sd() { return sd_; }

  // Global flat index of local element k of tensor i.
  int64_t Flat(size_t i, int64_t k) const {
    const V &g = defs_[i].shape, &s = shapes_[i], &o = offsets_[i];
    int64_t flat = 0;
    V idx(g.size());
    int64_t r = k;
    for (int d = (int)g.size() - 1; d >= 0; d--) {
      idx[d] = s[d] ? r % s[d] : 0;
      r = s[d] ? r / s[d] : 0;
    }
    for (size_t d = 0; d < g.size(); d++) flat = flat * g[d] + o[d] + idx[d];
    return flat;
  }

  // Number of local elements that differ from Value() (each reported).
  int Mismatches() const {
    int bad = 0;
    for (size_t i = 0; i < defs_.size(); i++) {
      int64_t n = 1;
      for (int64_t s : shapes_[i]) n *= s;
      for (int64_t k = 0; k < n; k++) {
        double want = Value((int)i, Flat(i, k));
        double got = Load(bufs_[i].data(), dtype_, k);
        if (got != want && bad++ < 5)
          ADD_FAILURE() << "tensor " << defs_[i].name << " local element " << k
                        << " (global " << Flat(i, k) << "): got " << got
                        << " want " << want;
      }
    }
    return bad;
  }

 private:
  std::vector<TensorDef> defs_;
  tpdp_dtype dtype_;
  tpdp_state_dict *sd_ = nullptr;
  tpdp_mesh *mesh_ = nullptr;
  std::vector<tpdp_spec *> specs_;
  std::vector<V> shapes_, offsets_;
  std::vector<std::vector<char>> bufs_;
};

// A fresh directory under the test's temporary directory; on several ranks
// rank 0 makes it and broadcasts the name.
inline std::string TempDir(tpdp_comm *comm, const std::string &tag) {
  char buf[512] = "";
  if (comm == nullptr || tpdp_comm_rank(comm) == 0) {
    const char *base = std::getenv("TEST_TMPDIR");
    std::snprintf(buf, sizeof buf, "%s/%s.XXXXXX", base ? base : "/tmp",
                  tag.c_str());
    if (mkdtemp(buf) == nullptr) buf[0] = '\0';
  }
  if (comm != nullptr) {
    tpdp_tensor t = tpdp_tensor_1d(buf, TPDP_U8, sizeof buf);
    EXPECT_TPDP_OK(tpdp_broadcast(comm, &t, &t, 0));
  }
  return buf;
}

// Every rank's last-error message, to check they are identical.
inline std::vector<std::string> AllMessages(tpdp_comm *comm) {
  int n = tpdp_comm_size(comm);
  std::vector<char> mine(1024, 0), all(1024 * (size_t)n, 0);
  std::snprintf(mine.data(), mine.size(), "%s", tpdp_last_error());
  tpdp_tensor s = tpdp_tensor_1d(mine.data(), TPDP_U8, 1024);
  tpdp_tensor r = tpdp_tensor_1d(all.data(), TPDP_U8, 1024 * (int64_t)n);
  EXPECT_TPDP_OK(tpdp_allgather(comm, &s, &r));
  std::vector<std::string> out;
  for (int k = 0; k < n; k++) out.emplace_back(all.data() + 1024 * k);
  return out;
}

}  // namespace ckpt_test

#endif  // TPDP_TESTS_CKPT_TEST_UTIL_H
