// SPDX-License-Identifier: BSD-3-Clause
// tpdp_checkpoint_consolidate (ckpt/consolidate.c): a checkpoint saved on 2
// ranks becomes one safetensors file whose header (checked as text, not
// through the reader) lists every global tensor under its saved name, and
// whose values are the function of the global position that filled them.
#include <cstdio>
#include <string>

#include "tests/ckpt/ckpt_test_util.h"

using namespace ckpt_test;

namespace {

TEST(CheckpointConsolidate, WritesOneUnshardedFile) {
  std::vector<TensorDef> defs = {
      {"transformer.h.0.attn.c_attn.weight", {5, 3}, "S0"},
      {"transformer.wte.weight", {4, 6}, "S1"},
      {"lm_head.bias", {4}, ""}};
  std::string dir = TempDir(tpdp_test::World(), "consolidate");
  {
    Model m(tpdp_test::World(), "tp=2", defs, TPDP_F32, true);
    ASSERT_TPDP_OK(tpdp_state_dict_set_meta(m.sd(), "step", "9"));
    ASSERT_TPDP_OK(
        tpdp_checkpoint_save(m.sd(), dir.c_str(), tpdp_test::World(), nullptr));
  }
  if (tpdp_test::WorldRank() != 0) return;
  std::string out = dir + "/model.safetensors";
  ASSERT_TPDP_OK(tpdp_checkpoint_consolidate(dir.c_str(), out.c_str()));

  FILE *f = std::fopen(out.c_str(), "rb");
  ASSERT_NE(f, nullptr);
  unsigned char len[8];
  ASSERT_EQ(std::fread(len, 1, 8, f), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--) n = n << 8 | len[i];
  std::string header(n, '\0');
  ASSERT_EQ(std::fread(&header[0], 1, n, f), n);
  std::fclose(f);
  EXPECT_EQ((8 + n) % 8, 0u) << "data not aligned";
  const char *want[] = {
      R"("transformer.h.0.attn.c_attn.weight":{"dtype":"F32","shape":[5,3],"data_offsets":[0,60]})",
      R"("transformer.wte.weight":{"dtype":"F32","shape":[4,6],"data_offsets":[60,156]})",
      R"("lm_head.bias":{"dtype":"F32","shape":[4],"data_offsets":[156,172]})",
      R"("__metadata__":{"format":"pt","step":"9"})"};
  for (const char *w : want)
    EXPECT_NE(header.find(w), std::string::npos) << header << " lacks " << w;

  tpdp_safetensors *st = nullptr;
  ASSERT_TPDP_OK(tpdp_safetensors_open(out.c_str(), &st));
  ASSERT_EQ(tpdp_safetensors_count(st), 3);
  for (int i = 0; i < 3; i++) {
    tpdp_safetensors_tensor t;
    ASSERT_TPDP_OK(tpdp_safetensors_tensor_at(st, i, &t));
    EXPECT_EQ(t.name, defs[i].name);
    int64_t numel = 1;
    for (int64_t s : defs[i].shape) numel *= s;
    std::vector<float> v((size_t)numel);
    tpdp_tensor dst;
    ASSERT_TPDP_OK(tpdp_tensor_init(&dst, v.data(), TPDP_F32, kCpu,
                                    (int)defs[i].shape.size(),
                                    defs[i].shape.data()));
    ASSERT_TPDP_OK(tpdp_safetensors_read(st, i, &dst));
    for (int64_t k = 0; k < numel; k++)
      ASSERT_EQ(v[k], Value(i, k)) << defs[i].name << " element " << k;
  }
  tpdp_safetensors_close(st);
}

// The saver's rules: "consolidate_exclude" leaves training state out,
// "consolidate_shapes" writes a tensor under another row-major shape of the
// same elements (a head-sharded [C, 3, H, hd] as Hugging Face's [C, 3C]);
// neither key reaches the file's metadata.
TEST(CheckpointConsolidate, SaverRulesReshapeAndExclude) {
  std::vector<TensorDef> defs = {
      {"transformer.h.0.attn.c_attn.weight", {2, 3, 2, 2}, "S2"},
      {"optim.exp_avg.transformer.h.0.attn.c_attn.weight", {2, 3, 2, 2}, "S2"},
      {"transformer.ln_f.bias", {4}, ""}};
  std::string dir = TempDir(tpdp_test::World(), "consolidate_rules");
  {
    Model m(tpdp_test::World(), "tp=2", defs, TPDP_F32, true);
    ASSERT_TPDP_OK(tpdp_state_dict_set_meta(m.sd(), "step", "3"));
    ASSERT_TPDP_OK(tpdp_state_dict_set_meta(m.sd(), "consolidate_exclude",
                                            R"(["optim."])"));
    ASSERT_TPDP_OK(tpdp_state_dict_set_meta(
        m.sd(), "consolidate_shapes",
        R"({"transformer.h.0.attn.c_attn.weight":[2,12]})"));
    ASSERT_TPDP_OK(
        tpdp_checkpoint_save(m.sd(), dir.c_str(), tpdp_test::World(), nullptr));
  }
  if (tpdp_test::WorldRank() != 0) return;
  std::string out = dir + "/model.safetensors";
  ASSERT_TPDP_OK(tpdp_checkpoint_consolidate(dir.c_str(), out.c_str()));
  tpdp_safetensors *st = nullptr;
  ASSERT_TPDP_OK(tpdp_safetensors_open(out.c_str(), &st));
  ASSERT_EQ(tpdp_safetensors_count(st), 2);
  tpdp_safetensors_tensor t;
  ASSERT_TPDP_OK(tpdp_safetensors_tensor_at(st, 0, &t));
  EXPECT_STREQ(t.name, "transformer.h.0.attn.c_attn.weight");
  ASSERT_EQ(t.ndim, 2);
  EXPECT_EQ(t.shape[0], 2);
  EXPECT_EQ(t.shape[1], 12);
  // The same elements in the same order as the saved global tensor.
  std::vector<float> v(24);
  int64_t shape[2] = {2, 12};
  tpdp_tensor dst;
  ASSERT_TPDP_OK(tpdp_tensor_init(&dst, v.data(), TPDP_F32, kCpu, 2, shape));
  ASSERT_TPDP_OK(tpdp_safetensors_read(st, 0, &dst));
  for (int64_t k = 0; k < 24; k++) ASSERT_EQ(v[k], Value(0, k)) << k;
  ASSERT_TPDP_OK(tpdp_safetensors_tensor_at(st, 1, &t));
  EXPECT_STREQ(t.name, "transformer.ln_f.bias");
  EXPECT_STREQ(tpdp_safetensors_meta(st, "step"), "3");
  EXPECT_EQ(tpdp_safetensors_meta(st, "consolidate_shapes"), nullptr);
  EXPECT_EQ(tpdp_safetensors_meta(st, "consolidate_exclude"), nullptr);
  tpdp_safetensors_close(st);
}

// A shape rule with another element count is refused, naming the tensor.
TEST(CheckpointConsolidate, BadShapeRuleIsRefused) {
  std::vector<TensorDef> defs = {{"w", {2, 6}, "S0"}};
  std::string dir = TempDir(tpdp_test::World(), "consolidate_bad_rule");
  {
    Model m(tpdp_test::World(), "tp=2", defs, TPDP_F32, true);
    ASSERT_TPDP_OK(tpdp_state_dict_set_meta(m.sd(), "consolidate_shapes",
                                            R"({"w":[13]})"));
    ASSERT_TPDP_OK(
        tpdp_checkpoint_save(m.sd(), dir.c_str(), tpdp_test::World(), nullptr));
  }
  if (tpdp_test::WorldRank() != 0) return;
  std::string out = dir + "/model.safetensors";
  EXPECT_TPDP_ERROR(tpdp_checkpoint_consolidate(dir.c_str(), out.c_str()),
                    TPDP_ERR_PARSE, "consolidate_shapes", "tensor 'w'",
                    "12 elements");
}

}  // namespace
