// SPDX-License-Identifier: BSD-3-Clause
// Ranks that see different TPDP_PIECES_MSG_BYTES would cut the fully
// sharded units' messages at different places (a truncation error or a
// hang): tpdp_fully_shard fails on every rank instead, naming both
// values. Its own binary: the value is read once, at the first unit.
#include <stdlib.h>

#include "tests/dp/fsdp_model.h"
#include "tests/test_util.h"

namespace {

TEST(FsdpEnv, RanksWithDifferentMessageSizesFailAtCreation) {
  // Rank 1 cuts at 64 KiB, rank 0 keeps the default (1 MiB).
  if (tpdp_test::WorldRank() == 1)
    ASSERT_EQ(setenv("TPDP_PIECES_MSG_BYTES", "65536", 1), 0);
  else
    ASSERT_EQ(unsetenv("TPDP_PIECES_MSG_BYTES"), 0);
  fsdp_model::Model m;
  tpdp_fsdp_unit *u = nullptr;
  EXPECT_TPDP_ERROR(
      tpdp_fully_shard(m.blocks[0], tpdp_test::World(), nullptr, &u),
      TPDP_ERR_SHAPE_MISMATCH, "blocks.0[Block]", "disagree",
      "TPDP_PIECES_MSG_BYTES 1048576", "TPDP_PIECES_MSG_BYTES 65536");
  EXPECT_EQ(u, nullptr);
  // The parameters still view the caller's memory.
  EXPECT_EQ(tpdp_param_tensor(m.params[1])->data, m.data[1].data());
}

}  // namespace
