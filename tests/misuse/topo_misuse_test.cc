// Misuse of include/tpdp/topo.h (single process, on the hwloc XML fixtures
// of tests/data): each case asserts the status and that the message names
// the file, the index or the mesh at fault with the allowed range.
// Cases:
//  - tpdp_topo_load: NULL out, a missing XML file, a file that is not XML
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
