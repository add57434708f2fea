// SPDX-License-Identifier: BSD-3-Clause
// Topology, binding and placement advice on the synthetic hwloc XML
// fixtures of tests/data (layouts in tests/data/make_topo_fixtures.py).
// Every expectation below is worked out by hand from those layouts.
#include "tpdp/topo.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "tests/test_util.h"

namespace {

struct Topo {
  tpdp_topo *t = nullptr;
  explicit Topo(const char *file) {
    std::string p = tpdp_test::DataPath(file);
    EXPECT_EQ(tpdp_topo_load(p.c_str(), &t), TPDP_SUCCESS) << tpdp_last_error();
  }
  ~Topo() { (void)tpdp_topo_destroy(t); }
};

std::string Binding(tpdp_topo *t, int r, int n, int *gpu = nullptr) {
  tpdp_binding b;
  EXPECT_EQ(tpdp_topo_binding_for(t, r, n, &b), TPDP_SUCCESS)
      << tpdp_last_error();
  if (gpu) *gpu = b.gpu;
  return b.cpuset;
}

tpdp_placement_advice Advise(tpdp_topo *t, const char *mesh) {
  tpdp_placement_advice a;
  EXPECT_EQ(tpdp_topo_advise(t, mesh, &a), TPDP_SUCCESS) << tpdp_last_error();
  return a;
}

std::string Format(tpdp_topo *t) {
  size_t n = tpdp_topo_format(t, nullptr, 0);
  std::string s(n + 1, '\0');
  tpdp_topo_format(t, &s[0], n + 1);
  s.resize(n);
  return s;
}

std::string FormatAdvice(const tpdp_placement_advice &a) {
  size_t n = tpdp_topo_advice_format(&a, nullptr, 0);
  std::string s(n + 1, '\0');
  tpdp_topo_advice_format(&a, &s[0], n + 1);
  s.resize(n);
  return s;
}

// ------------------------------------------------ two sockets, 8 GPUs

TEST(TopoTwoSocket, Counts) {
  Topo t("topo_2s8gpu.xml");
  ASSERT_NE(t.t, nullptr);
  tpdp_topo_counts c;
  ASSERT_TPDP_OK(tpdp_topo_get_counts(t.t, &c));
  EXPECT_EQ(c.packages, 2);
  EXPECT_EQ(c.numa_nodes, 2);
  EXPECT_EQ(c.cores, 16);
  EXPECT_EQ(c.pus, 32);
  EXPECT_EQ(c.gpus, 8);  // the ASPEED VGA and the Mellanox NIC are not GPUs
  EXPECT_EQ(tpdp_topo_shows_switches(t.t), 1);
}

TEST(TopoTwoSocket, GpuInfo) {
  Topo t("topo_2s8gpu.xml");
  ASSERT_NE(t.t, nullptr);
  const char *bus[8] = {"0000:12:00.0", "0000:13:00.0", "0000:22:00.0",
                        "0000:23:00.0", "0000:92:00.0", "0000:93:00.0",
                        "0000:a2:00.0", "0000:a3:00.0"};
  for (int i = 0; i < 8; i++) {
    tpdp_gpu_info g;
    ASSERT_TPDP_OK(tpdp_topo_gpu(t.t, i, &g));
    EXPECT_EQ(std::string(g.pci_bus_id), bus[i]);
    EXPECT_EQ(g.vendor_id, 0x10deu);
    EXPECT_EQ(g.device_id, 0x2330u);
    EXPECT_EQ(g.class_id, 0x0302u);
    EXPECT_EQ(g.numa_node, i / 4);
    EXPECT_EQ(g.package, i / 4);
    EXPECT_EQ(g.switch_domain, i / 2);  // two GPUs per switch
    EXPECT_EQ(g.ncores, 8);
    EXPECT_EQ(std::string(g.cpuset), i < 4 ? "0-7,16-23" : "8-15,24-31");
  }
  tpdp_gpu_info g;
  EXPECT_TPDP_ERROR(tpdp_topo_gpu(t.t, 8, &g), TPDP_ERR_INVALID_ARGUMENT,
                    "GPU 8", "[0, 8)");
}

TEST(TopoTwoSocket, BindingOneRankPerGpu) {
  Topo t("topo_2s8gpu.xml");
  ASSERT_NE(t.t, nullptr);
  // Ranks 0-3 share package 0's 8 cores (2 each), ranks 4-7 package 1's.
  const char *want[8] = {"0-1,16-17",   "2-3,18-19",  "4-5,20-21",
                         "6-7,22-23",   "8-9,24-25",  "10-11,26-27",
                         "12-13,28-29", "14-15,30-31"};
  for (int r = 0; r < 8; r++) {
    int gpu = -2;
    EXPECT_EQ(Binding(t.t, r, 8, &gpu), want[r]) << "local rank " << r;
    EXPECT_EQ(gpu, r);
  }
}

TEST(TopoTwoSocket, BindingTwoRanksPerGpu) {
  Topo t("topo_2s8gpu.xml");
  ASSERT_NE(t.t, nullptr);
  // 16 ranks: GPU r%8; package 0 is shared by ranks 0-3 and 8-11 (8 ranks,
  // one core each, in local-rank order).
  int gpu = -1;
  EXPECT_EQ(Binding(t.t, 0, 16, &gpu), "0,16");
  EXPECT_EQ(gpu, 0);
  EXPECT_EQ(Binding(t.t, 3, 16), "3,19");
  EXPECT_EQ(Binding(t.t, 8, 16, &gpu), "4,20");
  EXPECT_EQ(gpu, 0);
  EXPECT_EQ(Binding(t.t, 11, 16), "7,23");
  EXPECT_EQ(Binding(t.t, 12, 16, &gpu), "12,28");
  EXPECT_EQ(gpu, 4);
}

TEST(TopoTwoSocket, BindingTwoRanks) {
  Topo t("topo_2s8gpu.xml");
  ASSERT_NE(t.t, nullptr);
  // GPUs 0 and 1, both on package 0: its cores split in halves.
  EXPECT_EQ(Binding(t.t, 0, 2), "0-3,16-19");
  EXPECT_EQ(Binding(t.t, 1, 2), "4-7,20-23");
}

TEST(TopoTwoSocket, AdviceTpInnermost) {
  Topo t("topo_2s8gpu.xml");
  ASSERT_NE(t.t, nullptr);
  tpdp_placement_advice a = Advise(t.t, "dp=4,tp=8");
  EXPECT_EQ(a.world_size, 32);
  EXPECT_EQ(a.ranks_per_host, 8);
  EXPECT_EQ(a.uses_gpus, 1);
  EXPECT_EQ(a.nhosts, 4);
  EXPECT_EQ(a.tp_dim, 1);
  EXPECT_EQ(a.tp_size, 8);
  EXPECT_EQ(a.tp_stride, 1);
  EXPECT_EQ(a.tp_in_host, 1);
  EXPECT_EQ(a.tp_in_switch, 0);  // 8 GPUs over 4 switches
  EXPECT_EQ(a.gpus_per_switch, 2);
  EXPECT_EQ(a.tp_in_numa, 0);  // over both sockets
  EXPECT_EQ(a.reorder, 0);
  EXPECT_EQ(a.fixable, 1);
  EXPECT_EQ(std::string(a.suggested), "dp=4,tp=8");
  std::string text = FormatAdvice(a);
  EXPECT_NE(text.find("keep dp=4,tp=8"), std::string::npos) << text;
  EXPECT_NE(text.find("crosses PCIe switches"), std::string::npos) << text;
}

TEST(TopoTwoSocket, AdviceTpOutermost) {
  Topo t("topo_2s8gpu.xml");
  ASSERT_NE(t.t, nullptr);
  // tp=8,dp=4: TP neighbours 4 apart: group {0,4,...,28} spans 4 hosts.
  tpdp_placement_advice a = Advise(t.t, "tp=8,dp=4");
  EXPECT_EQ(a.tp_dim, 0);
  EXPECT_EQ(a.tp_stride, 4);
  EXPECT_EQ(a.tp_in_host, 0);
  EXPECT_EQ(a.tp_in_switch, 0);
  EXPECT_EQ(a.tp_in_numa, 0);
  EXPECT_EQ(a.reorder, 1);
  EXPECT_EQ(a.fixable, 1);
  EXPECT_EQ(std::string(a.suggested), "dp=4,tp=8");
  std::string text = FormatAdvice(a);
  EXPECT_NE(text.find("put tp innermost: mesh dp=4,tp=8"), std::string::npos)
      << text;
}

TEST(TopoTwoSocket, AdviceSmallTpGroups) {
  Topo t("topo_2s8gpu.xml");
  ASSERT_NE(t.t, nullptr);
  tpdp_placement_advice a = Advise(t.t, "dp=16,tp=2");  // {0,1}: one switch
  EXPECT_EQ(a.tp_in_host, 1);
  EXPECT_EQ(a.tp_in_switch, 1);
  EXPECT_EQ(a.tp_in_numa, 1);
  a = Advise(t.t, "dp=8,tp=4");  // {0..3}: two switches, one socket
  EXPECT_EQ(a.tp_in_host, 1);
  EXPECT_EQ(a.tp_in_switch, 0);
  EXPECT_EQ(a.tp_in_numa, 1);
  // 3-D: pp=2,tp=4,dp=4: TP stride 4: {0,4,8,12} on hosts 0,0,1,1.
  a = Advise(t.t, "pp=2,tp=4,dp=4");
  EXPECT_EQ(a.tp_stride, 4);
  EXPECT_EQ(a.tp_in_host, 0);
  EXPECT_EQ(a.fixable, 1);
  EXPECT_EQ(std::string(a.suggested), "pp=2,dp=4,tp=4");
}

TEST(TopoTwoSocket, AdviceUnfixable) {
  Topo t("topo_2s8gpu.xml");
  ASSERT_NE(t.t, nullptr);
  tpdp_placement_advice a = Advise(t.t, "dp=2,tp=16");  // 16 > 8 GPUs
  EXPECT_EQ(a.tp_in_host, 0);
  EXPECT_EQ(a.fixable, 0);
  EXPECT_NE(FormatAdvice(a).find("use tp <= 8"), std::string::npos);
  a = Advise(t.t, "dp=2,tp=6");  // {6..11} straddles hosts 0 and 1
  EXPECT_EQ(a.tp_in_host, 0);
  EXPECT_EQ(a.fixable, 0);
  EXPECT_NE(FormatAdvice(a).find("does not divide"), std::string::npos);
  a = Advise(t.t, "dp=3,tp=4");  // 12 ranks: {0-3},{4-7} host 0, {8-11} host 1
  EXPECT_EQ(a.tp_in_host, 1);
  EXPECT_EQ(a.nhosts, 2);
}

TEST(TopoTwoSocket, AdviceWithoutTpName) {
  Topo t("topo_2s8gpu.xml");
  ASSERT_NE(t.t, nullptr);
  tpdp_placement_advice a = Advise(t.t, "a=4,b=8");  // innermost dim
  EXPECT_EQ(a.tp_dim, 1);
  EXPECT_EQ(std::string(a.tp_name), "b");
  EXPECT_EQ(a.tp_in_host, 1);
}

TEST(TopoTwoSocket, Format) {
  Topo t("topo_2s8gpu.xml");
  ASSERT_NE(t.t, nullptr);
  std::string s = Format(t.t);
  EXPECT_NE(
      s.find("2 package(s), 2 NUMA node(s), 16 core(s), 32 PU(s), 8 GPU(s)"),
      std::string::npos)
      << s;
  EXPECT_NE(s.find("Package 1: 8 core(s), PUs 8-15,24-31"), std::string::npos)
      << s;
  EXPECT_NE(s.find("GPU 7  0000:a3:00.0"), std::string::npos) << s;
  EXPECT_EQ(s.find("no GPUs found"), std::string::npos);
  // snprintf contract: a short buffer is NUL-terminated and the full
  // length still returned.
  char small[16];
  EXPECT_EQ(tpdp_topo_format(t.t, small, sizeof small), s.size());
  EXPECT_EQ(std::string(small), s.substr(0, 15));
}

// ------------------------------------------------ one socket, 2 GPUs

TEST(TopoOneSocket, GpusAndBinding) {
  Topo t("topo_1s2gpu.xml");
  ASSERT_NE(t.t, nullptr);
  tpdp_topo_counts c;
  ASSERT_TPDP_OK(tpdp_topo_get_counts(t.t, &c));
  EXPECT_EQ(c.packages, 1);
  EXPECT_EQ(c.cores, 6);
  EXPECT_EQ(c.gpus, 2);
  EXPECT_EQ(tpdp_topo_shows_switches(t.t), 0);  // one root port per GPU
  tpdp_gpu_info g;
  ASSERT_TPDP_OK(tpdp_topo_gpu(t.t, 0, &g));
  EXPECT_EQ(std::string(g.pci_bus_id), "0000:01:00.0");
  EXPECT_EQ(g.class_id, 0x0300u);  // VGA-class NVIDIA board counts
  EXPECT_EQ(std::string(g.cpuset), "0-5");
  ASSERT_TPDP_OK(tpdp_topo_gpu(t.t, 1, &g));
  EXPECT_EQ(std::string(g.pci_bus_id), "0000:02:00.0");
  EXPECT_NE(g.switch_domain, 0);

  EXPECT_EQ(Binding(t.t, 0, 1), "0-5");
  EXPECT_EQ(Binding(t.t, 0, 2), "0-2");
  EXPECT_EQ(Binding(t.t, 1, 2), "3-5");
  // 4 ranks on 6 cores: [0,1) [1,3) [3,4) [4,6).
  EXPECT_EQ(Binding(t.t, 0, 4), "0");
  EXPECT_EQ(Binding(t.t, 1, 4), "1-2");
  EXPECT_EQ(Binding(t.t, 2, 4), "3");
  EXPECT_EQ(Binding(t.t, 3, 4), "4-5");
}

TEST(TopoOneSocket, Advice) {
  Topo t("topo_1s2gpu.xml");
  ASSERT_NE(t.t, nullptr);
  tpdp_placement_advice a = Advise(t.t, "dp=2,tp=2");
  EXPECT_EQ(a.ranks_per_host, 2);
  EXPECT_EQ(a.tp_in_host, 1);
  EXPECT_EQ(a.tp_in_switch, -1);
  EXPECT_EQ(a.gpus_per_switch, 0);
  EXPECT_EQ(a.tp_in_numa, 1);
  EXPECT_NE(FormatAdvice(a).find("not shown"), std::string::npos);
}

// ------------------------------------------------ CPU only, 2 cores

TEST(TopoCpuOnly, BindingAndAdvice) {
  Topo t("topo_cpu2.xml");
  ASSERT_NE(t.t, nullptr);
  tpdp_topo_counts c;
  ASSERT_TPDP_OK(tpdp_topo_get_counts(t.t, &c));
  EXPECT_EQ(c.cores, 2);
  EXPECT_EQ(c.gpus, 0);
  int gpu = 0;
  EXPECT_EQ(Binding(t.t, 0, 1, &gpu), "0-1");
  EXPECT_EQ(gpu, -1);
  EXPECT_EQ(Binding(t.t, 0, 2), "0");
  EXPECT_EQ(Binding(t.t, 1, 2), "1");
  // More ranks than cores: rank j gets core floor(j*2/4).
  EXPECT_EQ(Binding(t.t, 1, 4), "0");
  EXPECT_EQ(Binding(t.t, 2, 4), "1");
  EXPECT_NE(Format(t.t).find("no GPUs found"), std::string::npos);

  tpdp_placement_advice a = Advise(t.t, "tp=2,dp=2");  // {0,2}: 2 hosts
  EXPECT_EQ(a.uses_gpus, 0);
  EXPECT_EQ(a.ranks_per_host, 2);
  EXPECT_EQ(a.tp_in_host, 0);
  EXPECT_EQ(a.tp_in_switch, -1);
  EXPECT_EQ(a.tp_in_numa, -1);
  EXPECT_EQ(std::string(a.suggested), "dp=2,tp=2");
  EXPECT_EQ(a.fixable, 1);
}

// ------------------------------------------------ errors, this machine

TEST(Topo, Errors) {
  tpdp_topo *t = nullptr;
  EXPECT_TPDP_ERROR(tpdp_topo_load("/nonexistent/topo.xml", &t), TPDP_ERR_IO,
                    "/nonexistent/topo.xml");
  EXPECT_EQ(t, nullptr);
  EXPECT_TPDP_ERROR(tpdp_topo_load(nullptr, nullptr), TPDP_ERR_NULL_POINTER,
                    "out");
  Topo x("topo_cpu2.xml");
  ASSERT_NE(x.t, nullptr);
  tpdp_binding b;
  EXPECT_TPDP_ERROR(tpdp_topo_binding_for(x.t, 2, 2, &b),
                    TPDP_ERR_INVALID_ARGUMENT, "local rank 2");
  EXPECT_TPDP_ERROR(tpdp_topo_binding_for(x.t, 0, 0, &b),
                    TPDP_ERR_INVALID_ARGUMENT, "[0, 0)");
  tpdp_placement_advice a;
  EXPECT_TPDP_ERROR(tpdp_topo_advise(x.t, "dp=2,,tp", &a), TPDP_ERR_PARSE, "");
  // Binding needs this machine's topology, not an XML one.
  unsetenv("TPDP_BIND");
  EXPECT_TPDP_ERROR(tpdp_topo_bind_self(x.t, 0, 1, &b), TPDP_ERR_STATE,
                    "topo_cpu2.xml");
  setenv("TPDP_BIND", "0", 1);
  b.applied = 7;
  EXPECT_TPDP_OK(tpdp_topo_bind_self(x.t, 0, 1, &b));
  EXPECT_EQ(b.applied, 0);
  unsetenv("TPDP_BIND");
}

TEST(Topo, ThisMachine) {
  tpdp_topo *t = nullptr;
  ASSERT_TPDP_OK(tpdp_topo_load(nullptr, &t));
  tpdp_topo_counts c;
  ASSERT_TPDP_OK(tpdp_topo_get_counts(t, &c));
  EXPECT_GE(c.cores, 1);
  EXPECT_GE(c.pus, c.cores);
  EXPECT_EQ(std::string(tpdp_topo_source(t)), "this machine");
  // Bind to this process's share when it is the only local rank: all
  // cores, which cannot disturb the test run.
  tpdp_binding b;
  unsetenv("TPDP_BIND");
  ASSERT_TPDP_OK(tpdp_topo_bind_self(t, 0, 1, &b));
  EXPECT_EQ(b.applied, 1);
  EXPECT_EQ(b.ncores, c.gpus > 0 ? b.ncores : c.cores);
  EXPECT_TPDP_OK(tpdp_topo_destroy(t));
}

}  // namespace
