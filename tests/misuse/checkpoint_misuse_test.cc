// SPDX-License-Identifier: BSD-3-Clause
// Misuse of include/tpdp/checkpoint.h (single process, comm NULL = this
// process alone): each case asserts the status and that the message names
// the tensor FQN, the file or the option at fault with expected and actual
// values.
// Cases:
//  - tpdp_state_dict_add: empty and reserved FQNs, a taken FQN, a local
//    tensor unlike its spec (shape, dtype), a Partial placement, NULL
//    arguments
//  - tpdp_state_dict_find of an unknown FQN; entry_at out of range;
//    set_meta with an empty key
//  - options: size 0, a larger unknown size, an unknown version (used to
//    be accepted)
//  - save / load / open: a missing directory, NULL arguments
//  - load: a tensor the checkpoint lacks (unknown FQN), one the dict lacks
//    (strict), another global shape, another dtype with convert_dtype = 0
//  - an opened checkpoint: unknown tensor name, slice and tensor indices
//    out of range
//  - tpdp_safetensors_open of a missing file
//  - tpdp_safetensors_read_box (boxes leaving the view, views of another
//    element count or rank, negative sizes, unknown names, dtypes that do
//    not convert, NULLs): in tests/ckpt/read_box_test.cc, beside the file
//    it writes
#include <sys/stat.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "tests/test_util.h"
#include "tpdp/checkpoint.h"

namespace {

const tpdp_device kCpu = {TPDP_DEVICE_CPU, 0};

std::string Tmp(const char *name) {
  return std::string(getenv("TEST_TMPDIR")) + "/" + name;
}

struct Dict {
  tpdp_state_dict *sd = nullptr;
  Dict() { EXPECT_TPDP_OK(tpdp_state_dict_create(&sd)); }
  ~Dict() { EXPECT_TPDP_OK(tpdp_state_dict_destroy(sd)); }
};

// A 4x3 f32 tensor.
struct T43 {
  std::vector<float> v = std::vector<float>(12, 0.5f);
  tpdp_tensor t;
  explicit T43(tpdp_dtype dtype = TPDP_F32) {
    int64_t s[2] = {4, 3};
    EXPECT_TPDP_OK(tpdp_tensor_init(&t, v.data(), dtype, kCpu, 2, s));
  }
};

TEST(CheckpointMisuse, StateDictAddBadNames) {
  Dict d;
  T43 a;
  EXPECT_TPDP_ERROR(tpdp_state_dict_add(d.sd, "", &a.t, nullptr),
                    TPDP_ERR_EMPTY_NAME, "tpdp_state_dict_add: ");
  EXPECT_TPDP_ERROR(tpdp_state_dict_add(d.sd, "__metadata__", &a.t, nullptr),
                    TPDP_ERR_INVALID_ARGUMENT, "__metadata__", "reserved");
  ASSERT_TPDP_OK(tpdp_state_dict_add(d.sd, "fc.weight", &a.t, nullptr));
  EXPECT_TPDP_ERROR(tpdp_state_dict_add(d.sd, "fc.weight", &a.t, nullptr),
                    TPDP_ERR_DUPLICATE, "'fc.weight'");
  EXPECT_TPDP_ERROR(tpdp_state_dict_add(d.sd, nullptr, &a.t, nullptr),
                    TPDP_ERR_NULL_POINTER, "'fqn' is NULL");
}

TEST(CheckpointMisuse, StateDictAddLocalUnlikeItsSpec) {
  tpdp_mesh *mesh = nullptr;
  ASSERT_TPDP_OK(tpdp_mesh_create_from_string(nullptr, "tp=2", &mesh));
  tpdp_placement s0 = tpdp_shard(0), p = tpdp_partial(TPDP_OP_SUM);
  int64_t g[2] = {4, 3};
  tpdp_spec *spec = nullptr, *partial = nullptr;
  ASSERT_TPDP_OK(tpdp_spec_create(mesh, &s0, 1, 2, g, TPDP_F32, kCpu, &spec));
  ASSERT_TPDP_OK(tpdp_spec_create(mesh, &p, 1, 2, g, TPDP_F32, kCpu, &partial));
  Dict d;
  T43 whole, whole64(TPDP_F64);
  EXPECT_TPDP_ERROR(tpdp_state_dict_add(d.sd, "fc.weight", &whole.t, spec),
                    TPDP_ERR_SHAPE_MISMATCH, "'fc.weight'", "[4, 3]", "[2, 3]");
  tpdp_tensor half64 = whole64.t;
  half64.shape[0] = 2;
  EXPECT_TPDP_ERROR(tpdp_state_dict_add(d.sd, "fc.weight", &half64, spec),
                    TPDP_ERR_DTYPE_MISMATCH, "'fc.weight'", "f64", "f32");
  EXPECT_TPDP_ERROR(tpdp_state_dict_add(d.sd, "fc.bias", &whole.t, partial),
                    TPDP_ERR_UNSUPPORTED, "'fc.bias'", "Partial(sum)", "'tp'");
  EXPECT_EQ(tpdp_state_dict_count(d.sd), 0);
  EXPECT_TPDP_OK(tpdp_spec_destroy(spec));
  EXPECT_TPDP_OK(tpdp_spec_destroy(partial));
  EXPECT_TPDP_OK(tpdp_mesh_destroy(mesh));
}

TEST(CheckpointMisuse, StateDictLookupsAndMeta) {
  Dict d;
  T43 a;
  ASSERT_TPDP_OK(tpdp_state_dict_add(d.sd, "fc.weight", &a.t, nullptr));
  int i = -1;
  EXPECT_TPDP_ERROR(tpdp_state_dict_find(d.sd, "fc.wieght", &i),
                    TPDP_ERR_NOT_FOUND,
                    "tpdp_state_dict_find: ", "'fc.wieght'");
  tpdp_state_dict_entry e;
  EXPECT_TPDP_ERROR(tpdp_state_dict_entry_at(d.sd, 1, &e),
                    TPDP_ERR_INVALID_ARGUMENT, "entry 1");
  EXPECT_TPDP_ERROR(tpdp_state_dict_set_meta(d.sd, "", "1"),
                    TPDP_ERR_EMPTY_NAME, "tpdp_state_dict_set_meta: ");
}

TEST(CheckpointMisuse, OptionsOfTheWrongSizeOrVersion) {
  Dict d;
  T43 a;
  ASSERT_TPDP_OK(tpdp_state_dict_add(d.sd, "w", &a.t, nullptr));
  const std::string dir = Tmp("opts");
  tpdp_checkpoint_options o;
  std::memset(&o, 0, sizeof o);
  EXPECT_TPDP_ERROR(tpdp_checkpoint_save(d.sd, dir.c_str(), nullptr, &o),
                    TPDP_ERR_INVALID_ARGUMENT,
                    "tpdp_checkpoint_save: ", "options.size is 0",
                    "TPDP_CHECKPOINT_OPTIONS_INIT");
  o = TPDP_CHECKPOINT_OPTIONS_INIT;
  o.size = sizeof o + 8;  // a caller built against a newer tpdp
  const std::string sizes =
      "options.size is " + std::to_string(o.size) + ": expected between";
  EXPECT_TPDP_ERROR(tpdp_checkpoint_load(d.sd, dir.c_str(), nullptr, &o),
                    TPDP_ERR_INVALID_ARGUMENT,
                    "tpdp_checkpoint_load: ", sizes.c_str(),
                    "TPDP_CHECKPOINT_OPTIONS_INIT");
  // Used to be accepted: an unknown version is refused like the reducer's.
  o = TPDP_CHECKPOINT_OPTIONS_INIT;
  o.version = 9;
  const std::string versions =
      "options.version is 9 but this library knows versions 1 to " +
      std::to_string(TPDP_CHECKPOINT_OPTIONS_VERSION);
  EXPECT_TPDP_ERROR(tpdp_checkpoint_save(d.sd, dir.c_str(), nullptr, &o),
                    TPDP_ERR_INVALID_ARGUMENT, versions.c_str());
}

TEST(CheckpointMisuse, MissingDirectoryAndNulls) {
  Dict d;
  T43 a;
  ASSERT_TPDP_OK(tpdp_state_dict_add(d.sd, "w", &a.t, nullptr));
  EXPECT_TPDP_ERROR(
      tpdp_checkpoint_load(d.sd, "/nonexistent/ckpt", nullptr, nullptr),
      TPDP_ERR_IO, "tpdp_checkpoint_load: ", "/nonexistent/ckpt", "index.json");
  tpdp_checkpoint *ck = nullptr;
  EXPECT_TPDP_ERROR(tpdp_checkpoint_open("/nonexistent/ckpt", nullptr, &ck),
                    TPDP_ERR_IO, "tpdp_checkpoint_open: ", "/nonexistent/ckpt");
  EXPECT_EQ(ck, nullptr);
  EXPECT_TPDP_ERROR(tpdp_checkpoint_save(nullptr, "x", nullptr, nullptr),
                    TPDP_ERR_NULL_POINTER,
                    "tpdp_checkpoint_save: ", "'sd' is NULL");
  tpdp_safetensors *f = nullptr;
  EXPECT_TPDP_ERROR(tpdp_safetensors_open("/nonexistent/m.safetensors", &f),
                    TPDP_ERR_IO,
                    "tpdp_safetensors_open: ", "/nonexistent/m.safetensors");
}

// A checkpoint of "fc.weight" [4, 3] f32 and "fc.bias" [3] f32 in dir.
void SaveSmall(const std::string &dir) {
  Dict d;
  T43 w;
  std::vector<float> b(3, 1.f);
  tpdp_tensor bt = tpdp_tensor_1d(b.data(), TPDP_F32, 3);
  ASSERT_TPDP_OK(tpdp_state_dict_add(d.sd, "fc.weight", &w.t, nullptr));
  ASSERT_TPDP_OK(tpdp_state_dict_add(d.sd, "fc.bias", &bt, nullptr));
  ASSERT_TPDP_OK(tpdp_checkpoint_save(d.sd, dir.c_str(), nullptr, nullptr));
}

TEST(CheckpointMisuse, LoadUnknownAndMissingFqns) {
  const std::string dir = Tmp("small1");
  SaveSmall(dir);
  Dict d;
  T43 w;
  ASSERT_TPDP_OK(tpdp_state_dict_add(d.sd, "fc.weight", &w.t, nullptr));
  ASSERT_TPDP_OK(tpdp_state_dict_add(d.sd, "head.weight", &w.t, nullptr));
  EXPECT_TPDP_ERROR(tpdp_checkpoint_load(d.sd, dir.c_str(), nullptr, nullptr),
                    TPDP_ERR_NOT_FOUND, "'head.weight'");
  Dict d2;
  ASSERT_TPDP_OK(tpdp_state_dict_add(d2.sd, "fc.weight", &w.t, nullptr));
  tpdp_checkpoint_options o = TPDP_CHECKPOINT_OPTIONS_INIT;
  o.strict = 1;
  EXPECT_TPDP_ERROR(tpdp_checkpoint_load(d2.sd, dir.c_str(), nullptr, &o),
                    TPDP_ERR_INVALID_ARGUMENT, "'fc.bias'");
}

TEST(CheckpointMisuse, LoadAnotherShapeOrDtype) {
  const std::string dir = Tmp("small2");
  SaveSmall(dir);
  Dict d;
  std::vector<float> b(4);
  tpdp_tensor b4 = tpdp_tensor_1d(b.data(), TPDP_F32, 4);
  ASSERT_TPDP_OK(tpdp_state_dict_add(d.sd, "fc.bias", &b4, nullptr));
  EXPECT_TPDP_ERROR(tpdp_checkpoint_load(d.sd, dir.c_str(), nullptr, nullptr),
                    TPDP_ERR_SHAPE_MISMATCH, "'fc.bias'", "[3]", "[4]");
  Dict d2;
  T43 w64(TPDP_F64);
  std::vector<double> wd(12);
  w64.t.data = wd.data();
  ASSERT_TPDP_OK(tpdp_state_dict_add(d2.sd, "fc.weight", &w64.t, nullptr));
  tpdp_checkpoint_options o = TPDP_CHECKPOINT_OPTIONS_INIT;
  o.convert_dtype = 0;
  EXPECT_TPDP_ERROR(tpdp_checkpoint_load(d2.sd, dir.c_str(), nullptr, &o),
                    TPDP_ERR_DTYPE_MISMATCH, "'fc.weight'",
                    "is F32 in checkpoint", "but f64 in the state dict");
}

TEST(CheckpointMisuse, OpenedCheckpointLookups) {
  const std::string dir = Tmp("small3");
  SaveSmall(dir);
  tpdp_checkpoint *ck = nullptr;
  ASSERT_TPDP_OK(tpdp_checkpoint_open(dir.c_str(), nullptr, &ck));
  int i = -1;
  EXPECT_TPDP_ERROR(tpdp_checkpoint_find(ck, "fc.wieght", &i),
                    TPDP_ERR_NOT_FOUND,
                    "tpdp_checkpoint_find: ", "'fc.wieght'");
  tpdp_checkpoint_tensor_info ti;
  EXPECT_TPDP_ERROR(tpdp_checkpoint_tensor_at(ck, 2, &ti),
                    TPDP_ERR_INVALID_ARGUMENT,
                    "tpdp_checkpoint_tensor_at: ", "2");
  tpdp_checkpoint_slice_info si;
  EXPECT_TPDP_ERROR(tpdp_checkpoint_slice_at(ck, 0, 5, &si),
                    TPDP_ERR_INVALID_ARGUMENT,
                    "tpdp_checkpoint_slice_at: ", "5");
  EXPECT_TPDP_OK(tpdp_checkpoint_close(ck));
}

}  // namespace
