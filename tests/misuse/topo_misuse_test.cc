// SPDX-License-Identifier: BSD-3-Clause
// Misuse of include/tpdp/topo.h (single process, on the hwloc XML fixtures
// of tests/data): each case asserts the status and that the message names
// the file, the index or the mesh at fault with the allowed range.
// Cases:
//  - tpdp_topo_load: NULL out, a missing XML file, a file that is not XML,
//    an object with half of a set pair (hwloc's import crashes on it)
//  - tpdp_topo_gpu: index out of range (naming the GPU count), NULL out
//  - tpdp_topo_binding_for: nlocal 0, local rank past nlocal
//  - tpdp_topo_bind_self on a topology read from XML (not this machine)
//  - tpdp_topo_advise: malformed mesh spec, a spec longer than the advice
//    holds (it used to be truncated into a wrong suggestion), a mesh whose
//    rank count overflows (it used to wrap), NULL pointers
//  - tpdp_topo_get_counts: NULL out
#include <cstdio>
#include <string>

#include "tests/test_util.h"

namespace {

struct Topo {
  tpdp_topo *t = nullptr;
  explicit Topo(const char *file) {
    std::string p = tpdp_test::DataPath(file);
    EXPECT_TPDP_OK(tpdp_topo_load(p.c_str(), &t));
  }
  ~Topo() { EXPECT_TPDP_OK(tpdp_topo_destroy(t)); }
};

TEST(TopoMisuse, LoadNullOutMissingAndNotXml) {
  tpdp_topo *t = nullptr;
  EXPECT_TPDP_ERROR(tpdp_topo_load(nullptr, nullptr), TPDP_ERR_NULL_POINTER,
                    "tpdp_topo_load: ", "'out' is NULL");
  EXPECT_TPDP_ERROR(tpdp_topo_load("/nonexistent/topo.xml", &t), TPDP_ERR_IO,
                    "cannot open topology XML '/nonexistent/topo.xml'",
                    "No such file");
  std::string junk = std::string(getenv("TEST_TMPDIR")) + "/junk.xml";
  FILE *f = fopen(junk.c_str(), "w");
  ASSERT_NE(f, nullptr);
  fputs("this is not xml\n", f);
  fclose(f);
  tpdp_status st = tpdp_topo_load(junk.c_str(), &t);
  EXPECT_EQ(st, TPDP_ERR_IO) << tpdp_last_error();
  EXPECT_NE(std::string(tpdp_last_error()).find(junk), std::string::npos)
      << tpdp_last_error();
  EXPECT_EQ(t, nullptr);
}

// The fixture with one attribute of its root object removed (the first
// `name="..."` on its line 4), written to TEST_TMPDIR.
static std::string RootWithout(const std::string &name) {
  std::string in = tpdp_test::DataPath("topo_cpu2.xml");
  FILE *f = fopen(in.c_str(), "r");
  EXPECT_NE(f, nullptr);
  std::string text;
  char buf[4096];
  size_t n;
  while (f && (n = fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  if (f) fclose(f);
  size_t root = text.find("<object type=\"Machine\"");
  size_t at = text.find(" " + name + "=\"", root);
  EXPECT_NE(at, std::string::npos) << name;
  size_t close = text.find('"', at + name.size() + 3);
  text.erase(at, close + 1 - at);
  std::string out =
      std::string(getenv("TEST_TMPDIR")) + "/root-without-" + name + ".xml";
  FILE *g = fopen(out.c_str(), "w");
  EXPECT_NE(g, nullptr);
  if (g) {
    fputs(text.c_str(), g);
    fclose(g);
  }
  return out;
}

// hwloc's XML import dereferences NULL on a root object with a nodeset but
// no complete_nodeset, or a cpuset but no complete_cpuset (found by
// tests/fuzz/topo_xml_fuzz; hwloc itself writes both of each pair): the
// load refuses such a file, naming the object and the missing set, before
// hwloc reads it.
TEST(TopoMisuse, LoadObjectWithHalfASetPair) {
  tpdp_topo *t = nullptr;
  std::string p = RootWithout("complete_nodeset");
  EXPECT_TPDP_ERROR(tpdp_topo_load(p.c_str(), &t), TPDP_ERR_IO,
                    "tpdp_topo_load: ", p.c_str(),
                    "the object of type 'Machine' at line 4 has a nodeset but "
                    "no complete_nodeset");
  EXPECT_EQ(t, nullptr);
  p = RootWithout("complete_cpuset");
  EXPECT_TPDP_ERROR(tpdp_topo_load(p.c_str(), &t), TPDP_ERR_IO,
                    "the object of type 'Machine' at line 4 has a cpuset but "
                    "no complete_cpuset");
  // allowed_nodeset is no pair's half: that file loads.
  p = RootWithout("allowed_nodeset");
  ASSERT_TPDP_OK(tpdp_topo_load(p.c_str(), &t));
  tpdp_topo_counts c;
  ASSERT_TPDP_OK(tpdp_topo_get_counts(t, &c));
  EXPECT_EQ(c.pus, 2);
  EXPECT_TPDP_OK(tpdp_topo_destroy(t));
}

TEST(TopoMisuse, GpuIndexOutOfRange) {
  Topo topo("topo_1s2gpu.xml");
  tpdp_gpu_info g;
  EXPECT_TPDP_ERROR(tpdp_topo_gpu(topo.t, 2, &g), TPDP_ERR_INVALID_ARGUMENT,
                    "tpdp_topo_gpu: ", "GPU 2 outside [0, 2) of",
                    "topo_1s2gpu.xml");
  EXPECT_TPDP_ERROR(tpdp_topo_gpu(topo.t, 0, nullptr), TPDP_ERR_NULL_POINTER,
                    "'out' is NULL");
  EXPECT_TPDP_ERROR(tpdp_topo_get_counts(topo.t, nullptr),
                    TPDP_ERR_NULL_POINTER, "tpdp_topo_get_counts: ");
}

TEST(TopoMisuse, BindingForBadLocalRanks) {
  Topo topo("topo_2s8gpu.xml");
  tpdp_binding b;
  EXPECT_TPDP_ERROR(tpdp_topo_binding_for(topo.t, 0, 0, &b),
                    TPDP_ERR_INVALID_ARGUMENT,
                    "tpdp_topo_binding_for: ", "local rank 0 outside [0, 0)");
  EXPECT_TPDP_ERROR(tpdp_topo_binding_for(topo.t, 4, 4, &b),
                    TPDP_ERR_INVALID_ARGUMENT, "local rank 4 outside [0, 4)");
}

TEST(TopoMisuse, BindSelfToATopologyReadFromXml) {
  Topo topo("topo_cpu2.xml");
  tpdp_binding b;
  EXPECT_TPDP_ERROR(tpdp_topo_bind_self(topo.t, 0, 1, &b), TPDP_ERR_STATE,
                    "tpdp_topo_bind_self: ", "topo_cpu2.xml",
                    "not from this machine: cannot bind to it");
}

TEST(TopoMisuse, AdviseMalformedMesh) {
  Topo topo("topo_2s8gpu.xml");
  tpdp_placement_advice a;
  EXPECT_TPDP_ERROR(
      tpdp_topo_advise(topo.t, "dp=4;tp=8", &a), TPDP_ERR_PARSE,
      "tpdp_topo_advise: ", "size '4;tp=8' of dim 'dp' is not an integer");
  EXPECT_TPDP_ERROR(tpdp_topo_advise(topo.t, nullptr, &a),
                    TPDP_ERR_NULL_POINTER, "'mesh_spec' is NULL");
}

TEST(TopoMisuse, AdviseSpecLongerThanTheAdviceHolds) {
  Topo topo("topo_2s8gpu.xml");
  tpdp_placement_advice a;
  // 128 characters: a valid spec that the 128-byte fields cannot hold.
  std::string spec =
      "data_parallel_replicas_of_the_model_" + std::string(80, 'x') + "=2,tp=8";
  spec.insert(0, 128 - spec.size(), 'd');
  ASSERT_EQ(spec.size(), 128u);
  EXPECT_TPDP_ERROR(tpdp_topo_advise(topo.t, spec.c_str(), &a),
                    TPDP_ERR_INVALID_ARGUMENT,
                    "has 128 characters; the advice holds at most 127");
}

TEST(TopoMisuse, AdviseRankCountOverflow) {
  Topo topo("topo_2s8gpu.xml");
  tpdp_placement_advice a;
  const char *huge = "a=2147483647,b=2147483647,c=2147483647,d=2147483647,tp=8";
  EXPECT_TPDP_ERROR(tpdp_topo_advise(topo.t, huge, &a),
                    TPDP_ERR_INVALID_ARGUMENT,
                    "has more than 16777216 ranks, the most advice handles");
}

}  // namespace
