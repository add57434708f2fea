// SPDX-License-Identifier: BSD-3-Clause
// The state dict (ckpt/state_dict.c) on one process: entries and their
// checks, building from a module tree (cleaned FQNs, shared parameters
// once, buffers, prefix), metadata, the options struct's layout and size
// rule, and a save/load round trip with no communicator.
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "tests/test_util.h"
#include "tpdp/checkpoint.h"

namespace {

const tpdp_device kCpu = {TPDP_DEVICE_CPU, 0};

struct Fixture : ::testing::Test {
  tpdp_state_dict *sd = nullptr;
  void SetUp() override { ASSERT_TPDP_OK(tpdp_state_dict_create(&sd)); }
  void TearDown() override { EXPECT_TPDP_OK(tpdp_state_dict_destroy(sd)); }
};

using StateDict = Fixture;

TEST_F(StateDict, AddChecksEntries) {
  float w[42] = {0};
  int64_t shape[2] = {6, 7};
  tpdp_tensor t;
  ASSERT_TPDP_OK(tpdp_tensor_init(&t, w, TPDP_F32, kCpu, 2, shape));
  ASSERT_TPDP_OK(tpdp_state_dict_add(sd, "w", &t, nullptr));
  EXPECT_TPDP_ERROR(tpdp_state_dict_add(sd, "w", &t, nullptr),
                    TPDP_ERR_DUPLICATE, "tpdp_state_dict_add", "'w'");
  EXPECT_TPDP_ERROR(tpdp_state_dict_add(sd, "", &t, nullptr),
                    TPDP_ERR_EMPTY_NAME, "non-empty");
  EXPECT_TPDP_ERROR(tpdp_state_dict_add(sd, "__metadata__", &t, nullptr),
                    TPDP_ERR_INVALID_ARGUMENT, "reserved");
  tpdp_tensor nodata = t;
  nodata.data = nullptr;
  EXPECT_TPDP_ERROR(tpdp_state_dict_add(sd, "x", &nodata, nullptr),
                    TPDP_ERR_NULL_POINTER, "'x'", "NULL data");
  // A view written by hand whose size tpdp_tensor_init would refuse.
  tpdp_tensor huge = t;
  huge.shape[0] = int64_t{1} << 62;
  EXPECT_TPDP_ERROR(tpdp_state_dict_add(sd, "huge", &huge, nullptr),
                    TPDP_ERR_INVALID_ARGUMENT,
                    "tensor 'huge' has shape [4611686018427387904, 7] of f32, "
                    "which overflows");
  // A spec on a layout-only 2-rank mesh: rank 0 holds 6 of 12 rows.
  tpdp_mesh *mesh = nullptr;
  ASSERT_TPDP_OK(tpdp_mesh_create_from_string(nullptr, "tp=2", &mesh));
  tpdp_spec *spec = nullptr, *partial = nullptr;
  tpdp_placement s0 = tpdp_shard(0), p = tpdp_partial(TPDP_OP_SUM);
  int64_t g[2] = {12, 7}, wrong[2] = {12, 7};
  ASSERT_TPDP_OK(tpdp_spec_create(mesh, &s0, 1, 2, g, TPDP_F32, kCpu, &spec));
  ASSERT_TPDP_OK(tpdp_spec_create(mesh, &p, 1, 2, g, TPDP_F32, kCpu, &partial));
  ASSERT_TPDP_OK(tpdp_state_dict_add(sd, "sharded", &t, spec));
  tpdp_tensor whole;
  std::vector<float> big(84);
  ASSERT_TPDP_OK(
      tpdp_tensor_init(&whole, big.data(), TPDP_F32, kCpu, 2, wrong));
  EXPECT_TPDP_ERROR(tpdp_state_dict_add(sd, "bad", &whole, spec),
                    TPDP_ERR_SHAPE_MISMATCH, "'bad'", "[12, 7]", "[6, 7]");
  EXPECT_TPDP_ERROR(tpdp_state_dict_add(sd, "part", &whole, partial),
                    TPDP_ERR_UNSUPPORTED, "'part'", "Partial(sum)", "'tp'");
  EXPECT_EQ(tpdp_state_dict_count(sd), 2);
  tpdp_state_dict_entry e;
  ASSERT_TPDP_OK(tpdp_state_dict_entry_at(sd, 1, &e));
  EXPECT_STREQ(e.fqn, "sharded");
  EXPECT_EQ(e.spec, spec);
  EXPECT_EQ(e.local.data, (void *)w);
  int i = -1;
  ASSERT_TPDP_OK(tpdp_state_dict_find(sd, "sharded", &i));
  EXPECT_EQ(i, 1);
  EXPECT_TPDP_ERROR(tpdp_state_dict_find(sd, "nope", &i), TPDP_ERR_NOT_FOUND,
                    "'nope'");
  EXPECT_TPDP_ERROR(tpdp_state_dict_entry_at(sd, 2, &e),
                    TPDP_ERR_INVALID_ARGUMENT, "entry 2");
  tpdp_spec_destroy(spec);
  tpdp_spec_destroy(partial);
  tpdp_mesh_destroy(mesh);
}

TEST_F(StateDict, FromAModuleTree) {
  // root -> _fsdp_wrapped_module -> lin (weight, bias, buffer running_mean)
  //      -> head (weight shared with lin.weight, its own bias)
  float w[6], b[2], rm[2], hb[2];
  int64_t ws[2] = {2, 3}, bs[1] = {2};
  tpdp_tensor tw, tb, trm, thb;
  tpdp_tensor_init(&tw, w, TPDP_F32, kCpu, 2, ws);
  tpdp_tensor_init(&tb, b, TPDP_F32, kCpu, 1, bs);
  tpdp_tensor_init(&trm, rm, TPDP_F32, kCpu, 1, bs);
  tpdp_tensor_init(&thb, hb, TPDP_F32, kCpu, 1, bs);
  tpdp_module *root, *wrap, *lin, *head;
  ASSERT_TPDP_OK(tpdp_module_create("Net", &root));
  ASSERT_TPDP_OK(tpdp_module_create("FSDP", &wrap));
  ASSERT_TPDP_OK(tpdp_module_create("Linear", &lin));
  ASSERT_TPDP_OK(tpdp_module_create("Linear", &head));
  ASSERT_TPDP_OK(tpdp_module_add_child(root, "_fsdp_wrapped_module", wrap));
  ASSERT_TPDP_OK(tpdp_module_add_child(wrap, "lin", lin));
  ASSERT_TPDP_OK(tpdp_module_add_child(root, "head", head));
  tpdp_param *pw, *pb, *phb;
  ASSERT_TPDP_OK(tpdp_param_create(&tw, &pw));
  ASSERT_TPDP_OK(tpdp_param_create(&tb, &pb));
  ASSERT_TPDP_OK(tpdp_param_create(&thb, &phb));
  ASSERT_TPDP_OK(tpdp_module_add_param(lin, "weight", pw));
  ASSERT_TPDP_OK(tpdp_module_add_param(lin, "bias", pb));
  ASSERT_TPDP_OK(tpdp_module_add_buffer(lin, "running_mean", &trm));
  ASSERT_TPDP_OK(tpdp_module_add_param(head, "weight", pw));
  ASSERT_TPDP_OK(tpdp_module_add_param(head, "bias", phb));
  tpdp_param_release(pw);
  tpdp_param_release(pb);
  tpdp_param_release(phb);

  ASSERT_TPDP_OK(tpdp_state_dict_add_module(sd, root, "model."));
  std::vector<std::string> names;
  for (int i = 0; i < tpdp_state_dict_count(sd); i++) {
    tpdp_state_dict_entry e;
    ASSERT_TPDP_OK(tpdp_state_dict_entry_at(sd, i, &e));
    names.push_back(e.fqn);
  }
  std::vector<std::string> want = {"model.lin.weight", "model.lin.bias",
                                   "model.lin.running_mean", "model.head.bias"};
  EXPECT_EQ(names, want);
  // A second add collides: nothing is added.
  EXPECT_TPDP_ERROR(tpdp_state_dict_add_module(sd, root, "model."),
                    TPDP_ERR_DUPLICATE, "'model.lin.weight'");
  EXPECT_EQ(tpdp_state_dict_count(sd), 4);
  ASSERT_TPDP_OK(tpdp_module_destroy(root));
}

TEST_F(StateDict, Metadata) {
  EXPECT_EQ(tpdp_state_dict_get_meta(sd, "step"), nullptr);
  ASSERT_TPDP_OK(tpdp_state_dict_set_meta(sd, "step", "3"));
  ASSERT_TPDP_OK(tpdp_state_dict_set_meta(sd, "config", "{\"a\":1}"));
  ASSERT_TPDP_OK(tpdp_state_dict_set_meta(sd, "step", "4"));
  EXPECT_STREQ(tpdp_state_dict_get_meta(sd, "step"), "4");
  EXPECT_STREQ(tpdp_state_dict_get_meta(sd, "config"), "{\"a\":1}");
  EXPECT_TPDP_ERROR(tpdp_state_dict_set_meta(sd, "", "x"), TPDP_ERR_EMPTY_NAME,
                    "non-empty");
}

// The layout is ABI: fields only ever added at the end.
TEST(CheckpointOptions, LayoutIsPinned) {
  EXPECT_EQ(offsetof(tpdp_checkpoint_options, size), 0u);
  EXPECT_EQ(offsetof(tpdp_checkpoint_options, version), 8u);
  EXPECT_EQ(offsetof(tpdp_checkpoint_options, verify), 12u);
  EXPECT_EQ(offsetof(tpdp_checkpoint_options, strict), 16u);
  EXPECT_EQ(offsetof(tpdp_checkpoint_options, convert_dtype), 20u);
  EXPECT_EQ(sizeof(tpdp_checkpoint_options), 24u);
  tpdp_checkpoint_options o = TPDP_CHECKPOINT_OPTIONS_INIT;
  EXPECT_EQ(o.size, sizeof o);
  EXPECT_EQ(o.version, (unsigned)TPDP_CHECKPOINT_OPTIONS_VERSION);
  EXPECT_EQ(o.verify, 1);
  EXPECT_EQ(o.strict, 0);
  EXPECT_EQ(o.convert_dtype, 1);
}

std::string Tmp(const char *name) {
  const char *t = std::getenv("TEST_TMPDIR");
  return std::string(t ? t : "/tmp") + "/" + name;
}

// One process, no communicator: save, load into f16, and the size rule.
TEST_F(StateDict, SavesAndLoadsWithoutACommunicator) {
  float w[6] = {1, 2, 3, 4, 5, 6};
  int64_t shape[2] = {2, 3};
  tpdp_tensor t;
  ASSERT_TPDP_OK(tpdp_tensor_init(&t, w, TPDP_F32, kCpu, 2, shape));
  ASSERT_TPDP_OK(tpdp_state_dict_add(sd, "w", &t, nullptr));
  ASSERT_TPDP_OK(tpdp_state_dict_set_meta(sd, "step", "7"));
  std::string dir = Tmp("single");
  tpdp_checkpoint_options o = TPDP_CHECKPOINT_OPTIONS_INIT;
  o.size = sizeof o + 8; /* a newer library's struct */
  EXPECT_TPDP_ERROR(tpdp_checkpoint_save(sd, dir.c_str(), nullptr, &o),
                    TPDP_ERR_INVALID_ARGUMENT, "options.size is 32",
                    "TPDP_CHECKPOINT_OPTIONS_INIT");
  o.size = 8;
  EXPECT_TPDP_ERROR(tpdp_checkpoint_save(sd, dir.c_str(), nullptr, &o),
                    TPDP_ERR_INVALID_ARGUMENT, "options.size is 8");
  ASSERT_TPDP_OK(tpdp_checkpoint_save(sd, dir.c_str(), nullptr, nullptr));

  tpdp_state_dict *dst = nullptr;
  ASSERT_TPDP_OK(tpdp_state_dict_create(&dst));
  uint16_t h[6] = {0};
  tpdp_tensor th;
  ASSERT_TPDP_OK(tpdp_tensor_init(&th, h, TPDP_F16, kCpu, 2, shape));
  ASSERT_TPDP_OK(tpdp_state_dict_add(dst, "w", &th, nullptr));
  // An older, smaller struct (up to verify): the rest takes the defaults
  // (convert_dtype 1, so f32 -> f16 converts).
  tpdp_checkpoint_options old = TPDP_CHECKPOINT_OPTIONS_INIT;
  old.size = offsetof(tpdp_checkpoint_options, strict);
  old.convert_dtype = 0; /* past the old size: ignored */
  ASSERT_TPDP_OK(tpdp_checkpoint_load(dst, dir.c_str(), nullptr, &old));
  // 1..6 in f16: sign 0, exponent 15 + e, 10 bits of mantissa.
  const uint16_t want[6] = {0x3C00, 0x4000, 0x4200, 0x4400, 0x4500, 0x4600};
  for (int i = 0; i < 6; i++) EXPECT_EQ(h[i], want[i]) << i;
  EXPECT_STREQ(tpdp_state_dict_get_meta(dst, "step"), "7");
  // Conversion refused when asked.
  tpdp_checkpoint_options strict = TPDP_CHECKPOINT_OPTIONS_INIT;
  strict.convert_dtype = 0;
  EXPECT_TPDP_ERROR(tpdp_checkpoint_load(dst, dir.c_str(), nullptr, &strict),
                    TPDP_ERR_DTYPE_MISMATCH, "'w'", "F32", "f16",
                    "convert_dtype is 0");
  tpdp_state_dict_destroy(dst);
}

}  // namespace
