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

}  // namespace
