// SPDX-License-Identifier: BSD-3-Clause
// Every collective on the world communicator and on every dim of device
// meshes, for every dtype, in place and out of place, blocking and async,
// checked element by element against values computed here on the host.
//
// Communicators under test (all ranks run the same list in the same order):
//   np 2: world, mesh dp=2,tp=1 (dims dp, tp), mesh dp=1,tp=2
//   np 4: world, mesh dp=2,tp=2 (dims dp, tp), mesh dp=4,tp=1 (dims dp, tp)
// A sub-communicator's rank is the rank's coordinate on that dim, so inputs
// are a function of the group rank g: In(g, i) = (7g + i) % 11.
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/comm/coll_util.h"

namespace {

using coll::HostBuf;
using coll::In;
using coll::Matches;

struct Target {
  std::string label;
  tpdp_comm *comm;
};

class Comms {
 public:
  Comms() {
    tpdp_comm *w = tpdp_test::World();
    targets_.push_back({"world", w});
    int n = tpdp_comm_size(w);
    std::vector<std::string> specs;
    if (n == 4)
      specs = {"dp=2,tp=2", "dp=4,tp=1"};
    else if (n == 2)
      specs = {"dp=2,tp=1", "dp=1,tp=2"};
    else
      specs = {"dp=" + std::to_string(n)};
    for (const std::string &s : specs) {
      tpdp_mesh *m = nullptr;
      tpdp_status st = tpdp_mesh_create_from_string(w, s.c_str(), &m);
      EXPECT_EQ(st, TPDP_SUCCESS) << tpdp_last_error();
      if (st != TPDP_SUCCESS) continue;
      meshes_.push_back(m);
      for (int d = 0; d < tpdp_mesh_ndim(m); d++) {
        tpdp_comm *c = nullptr;
        EXPECT_EQ(tpdp_mesh_dim_comm(m, d, &c), TPDP_SUCCESS);
        targets_.push_back({s + " dim " + tpdp_mesh_dim_name(m, d), c});
      }
    }
  }
  ~Comms() {
    for (tpdp_mesh *m : meshes_) EXPECT_TPDP_OK(tpdp_mesh_destroy(m));
  }
  const std::vector<Target> &targets() const { return targets_; }

 private:
  std::vector<Target> targets_;
  std::vector<tpdp_mesh *> meshes_;
};

const int64_t kSmallCounts[] = {0, 1, 7};
const int64_t kLarge = 1048579;  // 1M + 3

// Mode bits: in place, async.
struct Mode {
  bool inplace;
  bool async;
};
const Mode kModes[] = {
    {false, false}, {true, false}, {false, true}, {true, true}};

std::string Describe(const Target &t, tpdp_dtype dt, const char *op, int64_t n,
                     Mode m) {
  return t.label + " " + tpdp_dtype_name(dt) + " " + op + " count " +
         std::to_string(n) + (m.inplace ? " in-place" : " out-of-place") +
         (m.async ? " async" : " blocking");
}

// ---------------------------------------------------------------- checks

void CheckAllreduce(tpdp_comm *c, tpdp_dtype dt, tpdp_reduce_op op, int64_t n,
                    Mode m) {
  int g = tpdp_comm_rank(c), p = tpdp_comm_size(c);
  HostBuf send(dt, n), recv(dt, n);
  for (int64_t i = 0; i < n; i++) send.Set(i, In(g, i));
  HostBuf &in = m.inplace ? recv : send;
  if (m.inplace)
    for (int64_t i = 0; i < n; i++) recv.Set(i, In(g, i));
  else
    recv.Fill(99);
  tpdp_tensor s = in.View(), r = recv.View();
  tpdp_status st;
  if (m.async) {
    tpdp_work *w = nullptr;
    st = tpdp_allreduce_async(c, &s, &r, op, &w);
    if (st == TPDP_SUCCESS) {
      int done = 0;
      st = coll::Finish(w, &done);
      EXPECT_EQ(done, 1);
    }
  } else {
    st = tpdp_allreduce(c, &s, &r, op);
  }
  ASSERT_EQ(st, TPDP_SUCCESS) << tpdp_last_error();
  EXPECT_TRUE(Matches(recv, 0, n,
                      [&](int64_t i) { return coll::Reduce(op, dt, p, i); }));
  if (!m.inplace) {  // the input is left alone
    EXPECT_TRUE(Matches(send, 0, n, [&](int64_t i) { return In(g, i); }));
  }
}

void CheckAllgather(tpdp_comm *c, tpdp_dtype dt, int64_t n, Mode m) {
  int g = tpdp_comm_rank(c), p = tpdp_comm_size(c);
  HostBuf send(dt, n), recv(dt, n * p);
  recv.Fill(99);
  tpdp_tensor s;
  if (m.inplace) {
    for (int64_t i = 0; i < n; i++) recv.Set(g * n + i, In(g, i));
    s = recv.View(g * n, n);
  } else {
    for (int64_t i = 0; i < n; i++) send.Set(i, In(g, i));
    s = send.View();
  }
  tpdp_tensor r = recv.View();
  tpdp_status st;
  if (m.async) {
    tpdp_work *w = nullptr;
    st = tpdp_allgather_async(c, &s, &r, &w);
    if (st == TPDP_SUCCESS) st = coll::Finish(w, nullptr);
  } else {
    st = tpdp_allgather(c, &s, &r);
  }
  ASSERT_EQ(st, TPDP_SUCCESS) << tpdp_last_error();
  for (int src = 0; src < p; src++)
    EXPECT_TRUE(
        Matches(recv, src * n, n, [&](int64_t i) { return In(src, i); }))
        << "block from rank " << src;
}

void CheckReduceScatter(tpdp_comm *c, tpdp_dtype dt, tpdp_reduce_op op,
                        int64_t n, Mode m) {
  int g = tpdp_comm_rank(c), p = tpdp_comm_size(c);
  HostBuf send(dt, n * p), recv(dt, n);
  for (int64_t i = 0; i < n * p; i++) send.Set(i, In(g, i));
  recv.Fill(99);
  tpdp_tensor s = send.View();
  tpdp_tensor r = m.inplace ? send.View(g * n, n) : recv.View();
  tpdp_status st;
  if (m.async) {
    tpdp_work *w = nullptr;
    st = tpdp_reduce_scatter_async(c, &s, &r, op, &w);
    if (st == TPDP_SUCCESS) st = coll::Finish(w, nullptr);
  } else {
    st = tpdp_reduce_scatter(c, &s, &r, op);
  }
  ASSERT_EQ(st, TPDP_SUCCESS) << tpdp_last_error();
  // This rank's block g: element i of the result reduces element g*n + i.
  auto want = [&](int64_t i) { return coll::Reduce(op, dt, p, g * n + i); };
  if (m.inplace)
    EXPECT_TRUE(Matches(send, g * n, n, want));
  else
    EXPECT_TRUE(Matches(recv, 0, n, want));
}

void CheckBroadcast(tpdp_comm *c, tpdp_dtype dt, int root, int64_t n, Mode m) {
  int g = tpdp_comm_rank(c);
  HostBuf send(dt, n), recv(dt, n);
  recv.Fill(99);
  tpdp_tensor s = send.View(), r = recv.View();
  const tpdp_tensor *sp = nullptr;  // non-roots pass NULL
  if (g == root) {
    if (m.inplace) {
      for (int64_t i = 0; i < n; i++) recv.Set(i, In(root, i) + 1);
      sp = &r;
    } else {
      for (int64_t i = 0; i < n; i++) send.Set(i, In(root, i) + 1);
      sp = &s;
    }
  } else if (m.async) {
    sp = &s;  // a send buffer off the root is ignored
  }
  tpdp_status st;
  if (m.async) {
    tpdp_work *w = nullptr;
    st = tpdp_broadcast_async(c, sp, &r, root, &w);
    if (st == TPDP_SUCCESS) st = coll::Finish(w, nullptr);
  } else {
    st = tpdp_broadcast(c, sp, &r, root);
  }
  ASSERT_EQ(st, TPDP_SUCCESS) << tpdp_last_error();
  EXPECT_TRUE(Matches(recv, 0, n, [&](int64_t i) { return In(root, i) + 1; }));
}

void CheckAlltoall(tpdp_comm *c, tpdp_dtype dt, int64_t block, Mode m) {
  int g = tpdp_comm_rank(c), p = tpdp_comm_size(c);
  int64_t n = block * p;
  HostBuf send(dt, n), recv(dt, n);
  HostBuf &in = m.inplace ? recv : send;
  // Block j of rank g's input goes to rank j.
  for (int64_t i = 0; i < n; i++) in.Set(i, In(g, i));
  if (!m.inplace) recv.Fill(99);
  tpdp_tensor s = in.View(), r = recv.View();
  tpdp_status st;
  if (m.async) {
    tpdp_work *w = nullptr;
    st = tpdp_alltoall_async(c, &s, &r, &w);
    if (st == TPDP_SUCCESS) st = coll::Finish(w, nullptr);
  } else {
    st = tpdp_alltoall(c, &s, &r);
  }
  ASSERT_EQ(st, TPDP_SUCCESS) << tpdp_last_error();
  // Block src of the result is block g of rank src's input.
  for (int src = 0; src < p; src++)
    EXPECT_TRUE(Matches(recv, src * block, block,
                        [&](int64_t i) { return In(src, g * block + i); }))
        << "block from rank " << src;
}

// ---------------------------------------------------------------- tests

TEST(Collectives, AllreduceEveryOpDtypeModeSmallCounts) {
  Comms comms;
  for (const Target &t : comms.targets())
    for (tpdp_dtype dt : coll::kDtypes)
      for (tpdp_reduce_op op : coll::kOps)
        for (int64_t n : kSmallCounts)
          for (Mode m : kModes) {
            SCOPED_TRACE(Describe(t, dt, tpdp_reduce_op_name(op), n, m));
            CheckAllreduce(t.comm, dt, op, n, m);
          }
}

TEST(Collectives, AllgatherEveryDtypeModeSmallCounts) {
  Comms comms;
  for (const Target &t : comms.targets())
    for (tpdp_dtype dt : coll::kDtypes)
      for (int64_t n : kSmallCounts)
        for (Mode m : kModes) {
          SCOPED_TRACE(Describe(t, dt, "allgather", n, m));
          CheckAllgather(t.comm, dt, n, m);
        }
}

TEST(Collectives, ReduceScatterEveryOpDtypeModeSmallCounts) {
  Comms comms;
  for (const Target &t : comms.targets())
    for (tpdp_dtype dt : coll::kDtypes)
      for (tpdp_reduce_op op : coll::kOps)
        for (int64_t n : kSmallCounts)
          for (Mode m : kModes) {
            SCOPED_TRACE(Describe(t, dt, tpdp_reduce_op_name(op), n, m));
            CheckReduceScatter(t.comm, dt, op, n, m);
          }
}

TEST(Collectives, BroadcastEveryRootDtypeModeSmallCounts) {
  Comms comms;
  for (const Target &t : comms.targets())
    for (int root = 0; root < tpdp_comm_size(t.comm); root++)
      for (tpdp_dtype dt : coll::kDtypes)
        for (int64_t n : kSmallCounts)
          for (Mode m : kModes) {
            SCOPED_TRACE(Describe(t, dt, "broadcast", n, m) + " root " +
                         std::to_string(root));
            CheckBroadcast(t.comm, dt, root, n, m);
          }
}

TEST(Collectives, AlltoallEveryDtypeModeSmallCounts) {
  Comms comms;
  for (const Target &t : comms.targets())
    for (tpdp_dtype dt : coll::kDtypes)
      for (int64_t n : kSmallCounts)
        for (Mode m : kModes) {
          SCOPED_TRACE(Describe(t, dt, "alltoall", n, m));
          CheckAlltoall(t.comm, dt, n, m);
        }
}

TEST(Collectives, BarrierBlockingAndAsync) {
  Comms comms;
  for (const Target &t : comms.targets()) {
    SCOPED_TRACE(t.label);
    EXPECT_TPDP_OK(tpdp_barrier(t.comm));
    tpdp_work *w = nullptr;
    ASSERT_TPDP_OK(tpdp_barrier_async(t.comm, &w));
    int done = 0;
    EXPECT_TPDP_OK(coll::Finish(w, &done));
    EXPECT_EQ(done, 1);
  }
}

TEST(Collectives, SeveralAsyncInFlightCompleteInAnyWaitOrder) {
  tpdp_comm *c = tpdp_test::World();
  int g = tpdp_comm_rank(c), p = tpdp_comm_size(c);
  const int64_t n = 1000;
  HostBuf a(TPDP_F32, n), b(TPDP_I64, n), ga(TPDP_I32, n * p);
  HostBuf gs(TPDP_I32, n);
  for (int64_t i = 0; i < n; i++) {
    a.Set(i, In(g, i));
    b.Set(i, In(g, i));
    gs.Set(i, In(g, i));
  }
  tpdp_tensor ta = a.View(), tb = b.View(), tga = ga.View(), tgs = gs.View();
  tpdp_work *w1 = nullptr, *w2 = nullptr, *w3 = nullptr;
  ASSERT_TPDP_OK(tpdp_allreduce_async(c, &ta, &ta, TPDP_OP_SUM, &w1));
  ASSERT_TPDP_OK(tpdp_allreduce_async(c, &tb, &tb, TPDP_OP_MAX, &w2));
  ASSERT_TPDP_OK(tpdp_allgather_async(c, &tgs, &tga, &w3));
  EXPECT_TPDP_OK(tpdp_work_wait(w3));  // waited in reverse order
  EXPECT_TPDP_OK(tpdp_work_wait(w2));
  EXPECT_TPDP_OK(tpdp_work_wait(w1));
  EXPECT_TRUE(Matches(a, 0, n, [&](int64_t i) {
    return coll::Reduce(TPDP_OP_SUM, TPDP_F32, p, i);
  }));
  EXPECT_TRUE(Matches(b, 0, n, [&](int64_t i) {
    return coll::Reduce(TPDP_OP_MAX, TPDP_I64, p, i);
  }));
  for (int src = 0; src < p; src++)
    EXPECT_TRUE(Matches(ga, src * n, n, [&](int64_t i) { return In(src, i); }));
}

TEST(Collectives, NullDataWithZeroCountIsFine) {
  tpdp_comm *c = tpdp_test::World();
  tpdp_tensor e = tpdp_tensor_1d(nullptr, TPDP_F32, 0);
  EXPECT_TPDP_OK(tpdp_allreduce(c, &e, &e, TPDP_OP_SUM));
  EXPECT_TPDP_OK(tpdp_allgather(c, &e, &e));
  EXPECT_TPDP_OK(tpdp_reduce_scatter(c, &e, &e, TPDP_OP_MAX));
  EXPECT_TPDP_OK(tpdp_broadcast(c, &e, &e, 0));
  EXPECT_TPDP_OK(tpdp_alltoall(c, &e, &e));
}

TEST(Collectives, U8SumWrapsAndIntegerAvgTruncates) {
  tpdp_comm *c = tpdp_test::World();
  int g = tpdp_comm_rank(c), p = tpdp_comm_size(c);
  uint8_t u = 200, usum = 0;
  tpdp_tensor tu = tpdp_tensor_1d(&u, TPDP_U8, 1),
              tus = tpdp_tensor_1d(&usum, TPDP_U8, 1);
  ASSERT_TPDP_OK(tpdp_allreduce(c, &tu, &tus, TPDP_OP_SUM));
  EXPECT_EQ(usum, (200 * p) % 256);
  int32_t x = g == 0 ? 1 : 0, avg = -1;  // sum 1 over p >= 2 ranks -> 0
  tpdp_tensor tx = tpdp_tensor_1d(&x, TPDP_I32, 1),
              ta = tpdp_tensor_1d(&avg, TPDP_I32, 1);
  ASSERT_TPDP_OK(tpdp_allreduce(c, &tx, &ta, TPDP_OP_AVG));
  EXPECT_EQ(avg, p == 1 ? 1 : 0);
  float f = g == 0 ? 1.0f : 0.0f, favg = -1;
  tpdp_tensor tf = tpdp_tensor_1d(&f, TPDP_F32, 1),
              tfa = tpdp_tensor_1d(&favg, TPDP_F32, 1);
  ASSERT_TPDP_OK(tpdp_allreduce(c, &tf, &tfa, TPDP_OP_AVG));
  EXPECT_EQ(favg, 1.0f / p);
}

// ------------------------------------------------------ ring AVG
//
// Blocking AVG of f32/f64 messages of at least TPDP_MPI_RING_AVG_MIN_BYTES
// (default 256 KiB) runs as the MPI backend's ring, which adds and divides
// in one loop and moves the reduce-scatter in chunks of
// TPDP_MPI_RING_CHUNK_BYTES (default 512 KiB). The targets in BUILD run this
// suite with the defaults (counts on both sides of the threshold, counts
// spanning several chunks) and with the threshold at 0 and 64-byte chunks
// (every count through the ring: 0, 1, fewer elements than ranks, many
// chunks per block), on 2, 3 and 4 ranks. Expected values are computed
// here in the message's dtype: the sum of small integers is exact, then
// one division by the size (correctly rounded, as the ring must give).

long EnvLong(const char *name, long dflt) {
  const char *v = std::getenv(name);
  return v && *v ? std::strtol(v, nullptr, 10) : dflt;
}

double AvgIn(tpdp_dtype dt, int p, int64_t i) {
  double sum = 0;
  for (int r = 0; r < p; r++) sum += In(r, i);
  if (dt == TPDP_F32) return static_cast<float>(sum) / static_cast<float>(p);
  return sum / p;
}

void CheckRingAvg(tpdp_comm *c, tpdp_dtype dt, int64_t n, Mode m) {
  int g = tpdp_comm_rank(c), p = tpdp_comm_size(c);
  HostBuf send(dt, n), recv(dt, n);
  // Inputs vary with the rank and the position, so a block reduced with
  // the wrong peer's data or at the wrong offset shows.
  for (int64_t i = 0; i < n; i++) send.Set(i, In(g, i));
  if (m.inplace)
    for (int64_t i = 0; i < n; i++) recv.Set(i, In(g, i));
  else
    recv.Fill(99);
  HostBuf &in = m.inplace ? recv : send;
  tpdp_tensor s = in.View(), r = recv.View();
  tpdp_status st;
  if (m.async) {
    tpdp_work *w = nullptr;
    st = tpdp_allreduce_async(c, &s, &r, TPDP_OP_AVG, &w);
    if (st == TPDP_SUCCESS) st = coll::Finish(w, nullptr);
  } else {
    st = tpdp_allreduce(c, &s, &r, TPDP_OP_AVG);
  }
  ASSERT_EQ(st, TPDP_SUCCESS) << tpdp_last_error();
  EXPECT_TRUE(Matches(recv, 0, n, [&](int64_t i) { return AvgIn(dt, p, i); }));
  if (!m.inplace) {
    EXPECT_TRUE(Matches(send, 0, n, [&](int64_t i) { return In(g, i); }));
  }
}

TEST(CollectivesRingAvg, CountsAroundThresholdAndChunks) {
  const long min_bytes = EnvLong("TPDP_MPI_RING_AVG_MIN_BYTES", 256 * 1024);
  const long chunk_bytes = EnvLong("TPDP_MPI_RING_CHUNK_BYTES", 512 * 1024);
  Comms comms;
  for (const Target &t : comms.targets())
    for (tpdp_dtype dt : {TPDP_F32, TPDP_F64}) {
      const int64_t es = static_cast<int64_t>(tpdp_dtype_size(dt));
      const int64_t thr = min_bytes / es, chunk = chunk_bytes / es;
      const int p = tpdp_comm_size(t.comm);
      std::vector<int64_t> counts = {0, 1, 2, 3, 5, 7, 13, 1001};
      for (int64_t d : {-1, 0, 1, 3})  // both sides of the threshold
        if (thr + d >= 0) counts.push_back(thr + d);
      // every block spans two chunks and a remainder; not divisible by p
      int64_t big = 2 * chunk * p + chunk / 2 + 3;
      if (big * es <= (64 << 20)) counts.push_back(big);
      for (int64_t n : counts)
        for (Mode m : kModes) {
          if (m.async && n > 100000) continue;  // async never takes the ring
          SCOPED_TRACE(Describe(t, dt, "avg", n, m));
          CheckRingAvg(t.comm, dt, n, m);
        }
    }
}

TEST(Collectives, MultiDimTensorsAreFlattened) {
  tpdp_comm *c = tpdp_test::World();
  int p = tpdp_comm_size(c);
  HostBuf s(TPDP_F64, 6), r(TPDP_F64, 6 * p);
  for (int i = 0; i < 6; i++) s.Set(i, In(tpdp_comm_rank(c), i));
  int64_t s23[2] = {2, 3};
  int64_t rshape[3] = {p, 2, 3};
  tpdp_device cpu = {TPDP_DEVICE_CPU, 0};
  tpdp_tensor ts, tr;
  ASSERT_TPDP_OK(tpdp_tensor_init(&ts, s.data(), TPDP_F64, cpu, 2, s23));
  ASSERT_TPDP_OK(tpdp_tensor_init(&tr, r.data(), TPDP_F64, cpu, 3, rshape));
  ASSERT_TPDP_OK(tpdp_allgather(c, &ts, &tr));
  for (int src = 0; src < p; src++)
    EXPECT_TRUE(Matches(r, src * 6, 6, [&](int64_t i) { return In(src, i); }));
}

// Large counts: every dtype, sum and one more op, in place and out of place
// (blocking for one, async for the other). One test per collective so each
// runs as its own Bazel target (see BUILD).
const tpdp_reduce_op kLargeOps[] = {TPDP_OP_SUM, TPDP_OP_AVG, TPDP_OP_MAX};

TEST(CollectivesLarge, Allreduce) {
  Comms comms;
  for (const Target &t : comms.targets())
    for (tpdp_dtype dt : coll::kDtypes)
      for (tpdp_reduce_op op : {TPDP_OP_SUM, kLargeOps[1 + dt % 2]})
        for (Mode m : {Mode{false, false}, Mode{true, true}}) {
          SCOPED_TRACE(Describe(t, dt, tpdp_reduce_op_name(op), kLarge, m));
          CheckAllreduce(t.comm, dt, op, kLarge, m);
        }
}

TEST(CollectivesLarge, ReduceScatter) {
  Comms comms;
  for (const Target &t : comms.targets())
    for (tpdp_dtype dt : coll::kDtypes)
      for (tpdp_reduce_op op :
           {TPDP_OP_SUM, dt % 2 ? TPDP_OP_AVG : TPDP_OP_MIN})
        for (Mode m : {Mode{false, true}, Mode{true, false}}) {
          SCOPED_TRACE(Describe(t, dt, tpdp_reduce_op_name(op), kLarge, m));
          CheckReduceScatter(t.comm, dt, op, kLarge, m);
        }
}

TEST(CollectivesLarge, AllgatherAndBroadcast) {
  Comms comms;
  for (const Target &t : comms.targets())
    for (tpdp_dtype dt : coll::kDtypes)
      for (Mode m : {Mode{false, true}, Mode{true, false}}) {
        SCOPED_TRACE(Describe(t, dt, "allgather/broadcast", kLarge, m));
        CheckAllgather(t.comm, dt, kLarge, m);
        CheckBroadcast(t.comm, dt, tpdp_comm_size(t.comm) - 1, kLarge, m);
      }
}

TEST(CollectivesLarge, Alltoall) {
  Comms comms;
  for (const Target &t : comms.targets())
    for (tpdp_dtype dt : coll::kDtypes)
      for (Mode m : {Mode{false, true}, Mode{true, false}}) {
        SCOPED_TRACE(Describe(t, dt, "alltoall", kLarge, m));
        CheckAlltoall(t.comm, dt, kLarge, m);
      }
}

}  // namespace
