// SPDX-License-Identifier: BSD-3-Clause
// What every rank of a reducer must agree on at tpdp_reducer_create beyond
// the parameter shapes (reducer_test.cc): the options that change what is
// communicated or computed, and the parameters' values (a reducer averages
// over replicas: the TP communicator of a mesh, along which parameters are
// sharded, is refused with a message naming the communicator to use).
// Every failure is seen on every rank with the same message.
#include <cstring>
#include <string>
#include <vector>

#include "tests/dp/reducer_model.h"
#include "tests/test_util.h"

using namespace reducer_model;  // NOLINT: the fixture of every test here

namespace {

// Replicas that agree: every rank holds rank 0's values.
tpdp_reducer_options Strict(int view) {
  tpdp_reducer_options o = Opts(view);
  o.broadcast_from_rank0 = 0;
  return o;
}

struct OptionCase {
  const char *field;
  void (*set)(tpdp_reducer_options *o);  // rank 1's change
  const char *rank0, *rank1;             // the values the message lists
};

const OptionCase kCases[] = {
    {"first_bucket_bytes",
     [](tpdp_reducer_options *o) { o->first_bucket_bytes = 32; }, "64", "32"},
    {"bucket_cap_bytes",
     [](tpdp_reducer_options *o) { o->bucket_cap_bytes = 1u << 20; }, "100",
     "1048576"},
    {"gradient_as_bucket_view",
     [](tpdp_reducer_options *o) { o->gradient_as_bucket_view = 0; }, "1", "0"},
    {"find_unused_parameters",
     [](tpdp_reducer_options *o) { o->find_unused_parameters = 1; }, "0", "1"},
    {"static_graph", [](tpdp_reducer_options *o) { o->static_graph = 1; }, "0",
     "1"},
    {"comm_hook",
     [](tpdp_reducer_options *o) { o->comm_hook = TPDP_REDUCER_HOOK_BF16; },
     "TPDP_REDUCER_HOOK_NONE", "TPDP_REDUCER_HOOK_BF16"},
    {"divide_factor", [](tpdp_reducer_options *o) { o->divide_factor = 3.5; },
     "0", "3.5"},
    {"comm_thread", [](tpdp_reducer_options *o) { o->comm_thread = 0; }, "1",
     "0"},
    {"broadcast_from_rank0",
     [](tpdp_reducer_options *o) { o->broadcast_from_rank0 = 1; }, "0", "1"},
};

}  // namespace

// Each option differing on rank 1 only: every rank fails, naming the option
// and each rank's value; the caller's gradients are left as they were.
TEST(ReducerAgreement, DifferingOptionsFailEveryRankNamingTheField) {
  int rank = tpdp_test::WorldRank();
  Model m(0);  // replicas: the values agree
  for (const OptionCase &c : kCases) {
    SCOPED_TRACE(c.field);
    tpdp_reducer_options o = Strict(1);
    if (rank == 1) c.set(&o);
    tpdp_reducer *r = nullptr;
    std::string field =
        std::string("option ") + c.field + " differs across the ranks of world";
    std::string values =
        std::string("rank 0 has ") + c.rank0 + ", rank 1 has " + c.rank1;
    std::string me = "this is rank " + std::to_string(rank);
    EXPECT_TPDP_ERROR(
        tpdp_reducer_create(tpdp_test::World(), m.params.data(), kN, &o, &r),
        TPDP_ERR_INVALID_ARGUMENT, field.c_str(), values.c_str(), me.c_str(),
        "every rank must pass the same");
    EXPECT_EQ(r, nullptr);
    for (int p = 0; p < kN; p++)
      EXPECT_EQ(m.params[p].grad.data, (void *)m.gdata[p].data());
  }
}

// Replicas whose values agree need no broadcast: create succeeds and
// leaves the values as they are.
TEST(ReducerAgreement, ReplicasThatAgreeAreAccepted) {
  Model m(0);
  tpdp_reducer_options o = Strict(1);
  tpdp_reducer *r = Attach(m, o);
  ASSERT_NE(r, nullptr);
  for (int p = 0; p < kN; p++)
    for (int64_t i = 0; i < m.Numel(p); i++)
      ASSERT_EQ(m.pdata[p][i], (float)(p * 10 + i));
  EXPECT_TPDP_OK(tpdp_reducer_destroy(r));
}

// Parameters that differ between ranks (one element of l1.bias on the last
// rank) are refused by default, naming the parameter, the ranks, the
// communicator to use and the option that copies rank 0's values instead.
TEST(ReducerAgreement, DifferingValuesAreRefusedUnlessBroadcastIsAsked) {
  int rank = tpdp_test::WorldRank(), size = tpdp_test::WorldSize();
  Model m(0);
  if (rank == size - 1) m.pdata[3][4] += 1.0f;
  tpdp_reducer_options o = Strict(1);
  tpdp_reducer *r = nullptr;
  std::string ranks = "rank 0's differ from those of rank(s) " +
                      std::to_string(size - 1) + " (";
  EXPECT_TPDP_ERROR(
      tpdp_reducer_create(tpdp_test::World(), m.params.data(), kN, &o, &r),
      TPDP_ERR_INVALID_ARGUMENT,
      "parameter 3 'l1.bias' holds different values on the ranks of world",
      ranks.c_str(), "tpdp_mesh_dim_comm_by_name(mesh, \"dp\", &comm)",
      "not one along which they are sharded (the TP dim)",
      "options.broadcast_from_rank0 = 1");
  EXPECT_EQ(r, nullptr);
  for (int p = 0; p < kN; p++)  // nothing re-pointed
    EXPECT_EQ(m.params[p].grad.data, (void *)m.gdata[p].data());
  // Asked for: rank 0's values everywhere.
  o.broadcast_from_rank0 = 1;
  r = Attach(m, o);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(m.pdata[3][4], (float)(3 * 10 + 4));
  EXPECT_TPDP_OK(tpdp_reducer_destroy(r));
}

// A reducer on the TP communicator of a dp x tp=2 mesh: the parameters are
// TP shards (values that depend on the tp coordinate), so create refuses and
// says to use the DP communicator; there it succeeds. While that reducer
// lives, the mesh refuses to be destroyed.
TEST(ReducerAgreement, TpCommunicatorOfAMeshIsRefused) {
  int rank = tpdp_test::WorldRank(), size = tpdp_test::WorldSize();
  if (size % 2 != 0) GTEST_SKIP() << "needs an even number of ranks";
  std::string spec = "dp=" + std::to_string(size / 2) + ",tp=2";
  tpdp_mesh *mesh = nullptr;
  ASSERT_TPDP_OK(
      tpdp_mesh_create_from_string(tpdp_test::World(), spec.c_str(), &mesh));
  tpdp_comm *tp = nullptr, *dp = nullptr;
  ASSERT_TPDP_OK(tpdp_mesh_dim_comm_by_name(mesh, "tp", &tp));
  ASSERT_TPDP_OK(tpdp_mesh_dim_comm_by_name(mesh, "dp", &dp));
  Model m(rank % 2);  // the shard of tp coordinate rank % 2
  tpdp_reducer_options o = Strict(1);
  tpdp_reducer *r = nullptr;
  EXPECT_TPDP_ERROR(tpdp_reducer_create(tp, m.params.data(), kN, &o, &r),
                    TPDP_ERR_INVALID_ARGUMENT,
                    "parameter 0 'l0.weight' holds different values on the "
                    "ranks of mesh.tp",
                    "rank(s) 1 (", "the mesh's DP dim");
  EXPECT_EQ(r, nullptr);
  r = Attach(m, o, dp);
  ASSERT_NE(r, nullptr);
  EXPECT_TPDP_ERROR(tpdp_mesh_destroy(mesh), TPDP_ERR_STATE,
                    "still in use by 0 spec(s) and 1 reducer(s)",
                    "tpdp_reducer_destroy", "nothing was destroyed");
  // The mesh is intact: the reducer still reduces over its dp comm.
  ASSERT_TPDP_OK(tpdp_reducer_prepare(r));
  WriteGrads(m, rank, 0, false);
  MarkAll(r, kReverse);
  ASSERT_TPDP_OK(tpdp_reducer_finalize(r));
  std::vector<int> group;
  for (int q = 0; q < size; q++)
    if (q % 2 == rank % 2) group.push_back(q);
  ExpectMean(m, group, {0});
  EXPECT_TPDP_OK(tpdp_reducer_destroy(r));
  EXPECT_TPDP_OK(tpdp_mesh_destroy(mesh));
}
