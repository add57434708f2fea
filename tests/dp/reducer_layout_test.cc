// SPDX-License-Identifier: BSD-3-Clause
// Pins the layout of the versioned tpdp_reducer_options (include/tpdp/
// reducer.h): a field moving breaks programs built against an older header,
// so a change here must be deliberate (append fields, bump the version).
// Also: TPDP_REDUCER_OPTIONS_INIT and tpdp_reducer_options_default() give
// the documented defaults. Single process, LP64.
#include <cstddef>

#include "tests/test_util.h"

TEST(ReducerOptionsLayout, OffsetsAndSizeArePinned) {
  static_assert(sizeof(void *) == 8, "the pinned layout is LP64's");
  EXPECT_EQ(offsetof(tpdp_reducer_options, size), 0u);
  EXPECT_EQ(offsetof(tpdp_reducer_options, version), 8u);
  EXPECT_EQ(offsetof(tpdp_reducer_options, first_bucket_bytes), 16u);
  EXPECT_EQ(offsetof(tpdp_reducer_options, bucket_cap_bytes), 24u);
  EXPECT_EQ(offsetof(tpdp_reducer_options, gradient_as_bucket_view), 32u);
  EXPECT_EQ(offsetof(tpdp_reducer_options, find_unused_parameters), 36u);
  EXPECT_EQ(offsetof(tpdp_reducer_options, static_graph), 40u);
  EXPECT_EQ(offsetof(tpdp_reducer_options, comm_hook), 44u);
  EXPECT_EQ(offsetof(tpdp_reducer_options, divide_factor), 48u);
  EXPECT_EQ(offsetof(tpdp_reducer_options, hook_fn), 56u);
  EXPECT_EQ(offsetof(tpdp_reducer_options, hook_user_data), 64u);
  EXPECT_EQ(offsetof(tpdp_reducer_options, producer_stream), 72u);
  EXPECT_EQ(offsetof(tpdp_reducer_options, comm_thread), 80u);
  EXPECT_EQ(offsetof(tpdp_reducer_options, module), 88u);
  // Version 2 appended broadcast_from_rank0 (and tail padding).
  EXPECT_EQ(offsetof(tpdp_reducer_options, broadcast_from_rank0), 96u);
  EXPECT_EQ(sizeof(tpdp_reducer_options), 104u);
  EXPECT_EQ(TPDP_REDUCER_OPTIONS_VERSION, 2u);
}

TEST(ReducerOptionsLayout, InitAndDefaultGiveTheDocumentedDefaults) {
  tpdp_reducer_options a = TPDP_REDUCER_OPTIONS_INIT;
  tpdp_reducer_options b = tpdp_reducer_options_default();
  for (const tpdp_reducer_options &o : {a, b}) {
    EXPECT_EQ(o.size, sizeof(tpdp_reducer_options));
    EXPECT_EQ(o.version, 2u);
    EXPECT_EQ(o.first_bucket_bytes, 1048576u);
    EXPECT_EQ(o.bucket_cap_bytes, 26214400u);
    EXPECT_EQ(o.gradient_as_bucket_view, 1);
    EXPECT_EQ(o.find_unused_parameters, 0);
    EXPECT_EQ(o.static_graph, 0);
    EXPECT_EQ(o.comm_hook, TPDP_REDUCER_HOOK_NONE);
    EXPECT_EQ(o.divide_factor, 0.0);
    EXPECT_EQ(o.hook_fn, nullptr);
    EXPECT_EQ(o.hook_user_data, nullptr);
    EXPECT_EQ(o.producer_stream, nullptr);
    EXPECT_EQ(o.comm_thread, 1);
    EXPECT_EQ(o.module, nullptr);
    EXPECT_EQ(o.broadcast_from_rank0, 0);
  }
}
