// SPDX-License-Identifier: BSD-3-Clause
// The index parser (ckpt/index.c) on hand-written index.json files: a valid
// one opened and listed, then each inconsistency refused with a message
// naming the index and the tensor.
#include <sys/stat.h>

#include <cstdio>
#include <string>
#include <vector>

#include "tests/test_util.h"
#include "tpdp/checkpoint.h"

namespace {

struct Parts {
  std::string head = R"("format":"tpdp-checkpoint","version":1,)"
                     R"("generation":3,"world_size":2,)";
  std::string meta = R"("metadata":{"step":"5"},)";
  std::string name = R"("name":"w",)";
  std::string dtype = R"("dtype":"F32",)";
  std::string shape = R"("shape":[4,2],)";
  std::string s1 = R"({"file":"f1.safetensors","offsets":[0,0],)"
                   R"("shape":[2,2],"nbytes":16,"xxh64":"00000000000000ab",)"
                   R"("rank":0})";
  std::string s2 = R"({"file":"f2.safetensors","offsets":[2,0],)"
                   R"("shape":[2,2],"nbytes":16,"xxh64":"00000000000000cd",)"
                   R"("rank":1})";
  std::string extra; /* another tensor, with its leading comma */
};

std::string Json(const Parts &p) {
  return R"({"metadata":{"total_size":32},"weight_map":{},"tpdp":{)" + p.head +
         p.meta + R"("tensors":[{)" + p.name + p.dtype + p.shape +
         R"("spec":null,"slices":[)" + p.s1 + "," + p.s2 + "]}" + p.extra +
         "]}}";
}

std::string Write(const std::string &tag, const std::string &text) {
  const char *t = std::getenv("TEST_TMPDIR");
  std::string dir = std::string(t ? t : "/tmp") + "/" + tag;
  mkdir(dir.c_str(), 0777);
  FILE *f = std::fopen((dir + "/index.json").c_str(), "w");
  EXPECT_NE(f, nullptr);
  std::fputs(text.c_str(), f);
  std::fclose(f);
  return dir;
}

TEST(CheckpointIndex, OpensAValidIndex) {
  std::string dir = Write("valid", Json(Parts()));
  tpdp_checkpoint *ck = nullptr;
  ASSERT_TPDP_OK(tpdp_checkpoint_open(dir.c_str(), nullptr, &ck));
  EXPECT_EQ(tpdp_checkpoint_generation(ck), 3);
  EXPECT_EQ(tpdp_checkpoint_world_size(ck), 2);
  EXPECT_STREQ(tpdp_checkpoint_meta(ck, "step"), "5");
  ASSERT_EQ(tpdp_checkpoint_num_meta(ck), 1);
  ASSERT_EQ(tpdp_checkpoint_num_tensors(ck), 1);
  tpdp_checkpoint_tensor_info t;
  ASSERT_TPDP_OK(tpdp_checkpoint_tensor_at(ck, 0, &t));
  EXPECT_STREQ(t.name, "w");
  EXPECT_EQ(t.nslices, 2);
  EXPECT_EQ(t.nbytes, 32u);
  EXPECT_EQ(t.spec_json, nullptr);
  tpdp_checkpoint_slice_info s;
  ASSERT_TPDP_OK(tpdp_checkpoint_slice_at(ck, 0, 1, &s));
  EXPECT_STREQ(s.file, "f2.safetensors");
  EXPECT_EQ(s.offsets[0], 2);
  EXPECT_EQ(s.xxh64, 0xcdu);
  EXPECT_EQ(s.rank, 1);
  // The data files do not exist: verifying a slice says so.
  EXPECT_TPDP_ERROR(tpdp_checkpoint_verify_slice(ck, 0, 0), TPDP_ERR_IO,
                    "f1.safetensors");
  EXPECT_TPDP_ERROR(tpdp_checkpoint_slice_at(ck, 0, 2, &s),
                    TPDP_ERR_INVALID_ARGUMENT, "slice 2", "'w'");
  tpdp_checkpoint_close(ck);
}

TEST(CheckpointIndex, RefusesInconsistentIndexes) {
  struct Bad {
    const char *tag;
    Parts p;
    std::vector<const char *> needles;
  };
  std::vector<Bad> cases;
  auto add = [&](const char *tag, std::vector<const char *> needles,
                 auto mutate) {
    Parts p;
    mutate(p);
    cases.push_back({tag, p, needles});
  };
  add("version", {"version 2", "reads 'tpdp-checkpoint' version 1"},
      [](Parts &p) {
        p.head = R"("format":"tpdp-checkpoint","version":2,"generation":1,)"
                 R"("world_size":1,)";
      });
  add("noname", {"tensors[0]", "\"name\" missing"},
      [](Parts &p) { p.name = ""; });
  add("dtype", {"'w'", "dtype 'Q4'"},
      [](Parts &p) { p.dtype = R"("dtype":"Q4",)"; });
  add("ninedims", {"'w'", "\"shape\"", "at most 8"},
      [](Parts &p) { p.shape = R"("shape":[1,1,1,1,1,1,1,1,1],)"; });
  add("outside", {"'w'", "slices[1]", "outside the global shape [4, 2]"},
      [](Parts &p) {
        p.s2 = R"({"file":"f2.safetensors","offsets":[3,0],"shape":[2,2],)"
               R"("nbytes":16,"xxh64":"0000000000000000","rank":1})";
      });
  add("overlap", {"'w'", "slices 0 and 1 overlap"}, [](Parts &p) {
    p.s2 = R"({"file":"f2.safetensors","offsets":[1,0],"shape":[2,2],)"
           R"("nbytes":16,"xxh64":"0000000000000000","rank":1})";
  });
  add("gap", {"'w'", "hold 6 of its 8 elements"}, [](Parts &p) {
    p.s2 = R"({"file":"f2.safetensors","offsets":[2,0],"shape":[1,2],)"
           R"("nbytes":8,"xxh64":"0000000000000000","rank":1})";
  });
  add("nbytes", {"'w'", "slices[0]", "\"nbytes\" is 15", "needs 16"},
      [](Parts &p) {
        p.s1 = R"({"file":"f1.safetensors","offsets":[0,0],"shape":[2,2],)"
               R"("nbytes":15,"xxh64":"0000000000000000","rank":0})";
      });
  add("path", {"'w'", "'../f1.safetensors' is not a plain file name"},
      [](Parts &p) {
        p.s1 = R"({"file":"../f1.safetensors","offsets":[0,0],)"
               R"("shape":[2,2],"nbytes":16,"xxh64":"0000000000000000",)"
               R"("rank":0})";
      });
  add("hash", {"'w'", "\"xxh64\" 'xyz' is not 16 hex digits"}, [](Parts &p) {
    p.s1 = R"({"file":"f1.safetensors","offsets":[0,0],"shape":[2,2],)"
           R"("nbytes":16,"xxh64":"xyz","rank":0})";
  });
  add("twice", {"tensor 'w' appears twice"}, [](Parts &p) {
    p.extra = R"(,{"name":"w","dtype":"F32","shape":[0],"slices":[]})";
  });
  add("meta", {"metadata 'step' is not a string"},
      [](Parts &p) { p.meta = R"("metadata":{"step":5},)"; });
  // No data file could hold a tensor of that name.
  add("reserved", {"tensors[0]", "'__metadata__' is reserved"},
      [](Parts &p) { p.name = R"("name":"__metadata__",)"; });
  add("bigshape", {"'w'", "shape [4294967296, 4294967296, 8] of F32 overflows"},
      [](Parts &p) { p.shape = R"("shape":[4294967296,4294967296,8],)"; });
  // A zero size does not excuse the others: their strides would wrap.
  add("emptyhuge",
      {"'w'", "shape [0, 1099511627776, 1099511627776] of F32 overflows"},
      [](Parts &p) {
        p.shape = R"("shape":[0,1099511627776,1099511627776],)";
      });
  for (const Bad &b : cases) {
    SCOPED_TRACE(b.tag);
    std::string dir = Write(b.tag, Json(b.p));
    tpdp_checkpoint *ck = nullptr;
    tpdp_clear_error();
    EXPECT_EQ(tpdp_checkpoint_open(dir.c_str(), nullptr, &ck), TPDP_ERR_PARSE)
        << tpdp_last_error();
    EXPECT_EQ(ck, nullptr);
    std::string msg = tpdp_last_error();
    EXPECT_NE(msg.find(dir + "/index.json"), std::string::npos) << msg;
    for (const char *n : b.needles)
      EXPECT_NE(msg.find(n), std::string::npos)
          << "'" << msg << "' lacks '" << n << "'";
  }
  std::string dir = Write("notjson", "{\"tpdp\": [");
  tpdp_checkpoint *ck = nullptr;
  EXPECT_TPDP_ERROR(tpdp_checkpoint_open(dir.c_str(), nullptr, &ck),
                    TPDP_ERR_PARSE, "index.json", "not valid JSON");
  dir = Write("foreign", R"({"weight_map":{}})");
  EXPECT_TPDP_ERROR(tpdp_checkpoint_open(dir.c_str(), nullptr, &ck),
                    TPDP_ERR_PARSE, "not a tpdp checkpoint index");
}

// Overlaps are looked for among at most 4096 slices of a tensor; past
// that, slices each as large as the tensor must not wrap the element count
// into a match: 4097 slices of 2^53 elements sum past INT64_MAX.
TEST(CheckpointIndex, RefusesSliceCountsThatOverflow) {
  std::string slices;
  for (int j = 0; j < 4097; j++)
    slices +=
        std::string(j ? "," : "") +
        R"({"file":"f.safetensors","offsets":[0],"shape":[9007199254740992],)"
        R"("nbytes":9007199254740992,"xxh64":"0000000000000000","rank":0})";
  std::string dir =
      Write("manyslices",
            R"({"tpdp":{"format":"tpdp-checkpoint","version":1,"generation":1,)"
            R"("world_size":1,"tensors":[{"name":"big","dtype":"U8",)"
            R"("shape":[9007199254740992],"slices":[)" +
                slices + "]}]}}");
  tpdp_checkpoint *ck = nullptr;
  EXPECT_TPDP_ERROR(tpdp_checkpoint_open(dir.c_str(), nullptr, &ck),
                    TPDP_ERR_PARSE, "tpdp_checkpoint_open", "'big'",
                    "slices hold more elements than int64 counts");
  EXPECT_EQ(ck, nullptr);
}

}  // namespace
