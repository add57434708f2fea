// SPDX-License-Identifier: BSD-3-Clause
// Run by scripts/multihost on 2 simulated hosts x 2 ranks: what tpdp learns
// about hosts against what Open MPI itself says (OMPI_COMM_WORLD_LOCAL_RANK
// and _LOCAL_SIZE, set by the launcher) and against the host names the ranks
// report: host-local ranks, the device each rank would choose, meshes with
// a dim inside each host and one across the hosts (both orders), and the
// topology advice keeping TP inside a host.
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tests/test_util.h"

namespace {

using tpdp_test::World;
using tpdp_test::WorldRank;
using tpdp_test::WorldSize;

int EnvInt(const char *name) {
  const char *v = std::getenv(name);
  return v ? std::atoi(v) : -1;
}

std::string Hostname() {
  char h[256] = {0};
  gethostname(h, sizeof h - 1);
  return h;
}

// Every rank's host name, in rank order of `comm`.
std::vector<std::string> Hostnames(tpdp_comm *comm) {
  char mine[64] = {0};
  std::strncpy(mine, Hostname().c_str(), sizeof mine - 1);
  int n = tpdp_comm_size(comm);
  std::vector<char> all(64 * n);
  tpdp_tensor s = tpdp_tensor_1d(mine, TPDP_U8, 64);
  tpdp_tensor r = tpdp_tensor_1d(all.data(), TPDP_U8, 64 * n);
  EXPECT_TPDP_OK(tpdp_allgather(comm, &s, &r));
  std::vector<std::string> out;
  for (int q = 0; q < n; q++) out.push_back(std::string(&all[64 * q]));
  return out;
}

TEST(Hosts, TwoHostsWithTheirOwnNames) {
  auto names = Hostnames(World());
  ASSERT_EQ(WorldSize(), 4);
  // mpirun fills hosts by slot: ranks 0-1 on the first, 2-3 on the second.
  EXPECT_EQ(names[0], names[1]);
  EXPECT_EQ(names[2], names[3]);
  EXPECT_NE(names[0], names[2]);
}

TEST(Hosts, LocalRankIsOpenMpisOwn) {
  int lr = -1, ls = -1;
  ASSERT_TPDP_OK(tpdp_comm_local_rank(World(), &lr, &ls));
  EXPECT_EQ(lr, EnvInt("OMPI_COMM_WORLD_LOCAL_RANK"));
  EXPECT_EQ(ls, EnvInt("OMPI_COMM_WORLD_LOCAL_SIZE"));
  EXPECT_EQ(lr, WorldRank() % 2);
  EXPECT_EQ(ls, 2);
}

// The device choice of the CPU build (the CUDA path picks GPU = local rank,
// tpdp_comm_create_nccl with -1): on a host like tests/data/topo_1s2gpu.xml
// each host's two ranks take GPUs 0 and 1, whatever the host.
TEST(Hosts, EachHostsRanksChooseItsOwnGpus) {
  tpdp_topo *topo = nullptr;
  ASSERT_TPDP_OK(
      tpdp_topo_load(tpdp_test::DataPath("topo_1s2gpu.xml").c_str(), &topo));
  int lr = -1, ls = -1;
  ASSERT_TPDP_OK(tpdp_comm_local_rank(World(), &lr, &ls));
  tpdp_binding b;
  EXPECT_TPDP_OK(tpdp_topo_binding_for(topo, lr, ls, &b));
  EXPECT_EQ(b.gpu, EnvInt("OMPI_COMM_WORLD_LOCAL_RANK"));
  tpdp_topo_destroy(topo);
}

// A dim's ranks all on one host, or each on another host, as the mesh's
// row-major layout says; its allreduce sums the world ranks of its group.
void CheckMesh(const char *spec, const char *dim, bool in_host) {
  tpdp_mesh *mesh = nullptr;
  ASSERT_TPDP_OK(tpdp_mesh_create_from_string(World(), spec, &mesh));
  tpdp_comm *c = nullptr;
  ASSERT_TPDP_OK(tpdp_mesh_dim_comm_by_name(mesh, dim, &c));
  auto names = Hostnames(c);
  ASSERT_EQ(names.size(), 2u);
  EXPECT_EQ(names[0] == names[1], in_host) << spec << " dim " << dim;
  int d = tpdp_mesh_dim_index(mesh, dim);
  std::vector<int> group(2);
  ASSERT_TPDP_OK(tpdp_mesh_group_ranks(mesh, d, WorldRank(), group.data()));
  double x[3] = {WorldRank() + 0.5, 1.0, -2.0 * WorldRank()};
  tpdp_tensor t = tpdp_tensor_1d(x, TPDP_F64, 3);
  ASSERT_TPDP_OK(tpdp_allreduce(c, &t, &t, TPDP_OP_SUM));
  EXPECT_EQ(x[0], group[0] + group[1] + 1.0);
  EXPECT_EQ(x[1], 2.0);
  EXPECT_EQ(x[2], -2.0 * (group[0] + group[1]));
  EXPECT_TPDP_OK(tpdp_mesh_destroy(mesh));
}

TEST(Hosts, DpAcrossHostsTpWithin) {
  CheckMesh("dp=2,tp=2", "tp", true);
  CheckMesh("dp=2,tp=2", "dp", false);
}

TEST(Hosts, TpAcrossHostsDpWithin) {
  CheckMesh("tp=2,dp=2", "tp", false);
  CheckMesh("tp=2,dp=2", "dp", true);
}

// tpdp topo's advice on hosts like tests/data/topo_cpu2.xml (2 cores, so 2
// ranks a host, as here): "tp=2,dp=2" would put TP across the hosts, and
// the suggested mesh puts every TP group inside one host, which the ranks'
// host names confirm.
TEST(Hosts, TopoAdviceKeepsTpInsideAHost) {
  tpdp_topo *topo = nullptr;
  ASSERT_TPDP_OK(
      tpdp_topo_load(tpdp_test::DataPath("topo_cpu2.xml").c_str(), &topo));
  tpdp_placement_advice a;
  ASSERT_TPDP_OK(tpdp_topo_advise(topo, "tp=2,dp=2", &a));
  EXPECT_EQ(a.ranks_per_host, 2);
  EXPECT_EQ(a.nhosts, 2);
  EXPECT_EQ(a.tp_in_host, 0);
  EXPECT_EQ(a.reorder, 1);
  EXPECT_STREQ(a.suggested, "dp=2,tp=2");
  CheckMesh(a.suggested, "tp", true);
  tpdp_topo_destroy(topo);
}

}  // namespace
