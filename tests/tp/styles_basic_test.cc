// SPDX-License-Identifier: BSD-3-Clause
// Single-process tests of tpdp/tp.h: FQN pattern matching and style names.
#include <string>

#include "tests/test_util.h"
#include "tpdp/tp.h"

namespace {

TEST(FqnMatch, StarMatchesExactlyOneComponent) {
  EXPECT_EQ(tpdp_fqn_match("layers.*.fc1", "layers.3.fc1"), 1);
  EXPECT_EQ(tpdp_fqn_match("layers.*.fc1", "layers.12.fc1"), 1);
  EXPECT_EQ(tpdp_fqn_match("layers.*.fc1", "layers.fc1"), 0);
  EXPECT_EQ(tpdp_fqn_match("layers.*.fc1", "layers.3.x.fc1"), 0);
  EXPECT_EQ(tpdp_fqn_match("layers.*.fc1", "layers.3.fc2"), 0);
  EXPECT_EQ(tpdp_fqn_match("layers.*.fc1", "layers.3.fc1.x"), 0);
  EXPECT_EQ(tpdp_fqn_match("layers.*.fc1", "layers..fc1"), 0);
  EXPECT_EQ(tpdp_fqn_match("*.fc1", "a.fc1"), 1);
  EXPECT_EQ(tpdp_fqn_match("*.*", "a.b"), 1);
  EXPECT_EQ(tpdp_fqn_match("*.*", "a"), 0);
  EXPECT_EQ(tpdp_fqn_match("*.*", "a.b.c"), 0);
  EXPECT_EQ(tpdp_fqn_match("layers.*", "layers.0"), 1);
  EXPECT_EQ(tpdp_fqn_match("layers.*", "layers"), 0);
  EXPECT_EQ(tpdp_fqn_match("layers.*", "layers.0.fc1"), 0);
}

TEST(FqnMatch, ExactNames) {
  EXPECT_EQ(tpdp_fqn_match("fc1", "fc1"), 1);
  EXPECT_EQ(tpdp_fqn_match("u1.seq.1", "u1.seq.1"), 1);
  EXPECT_EQ(tpdp_fqn_match("fc1", "fc10"), 0);
  EXPECT_EQ(tpdp_fqn_match("fc10", "fc1"), 0);
  EXPECT_EQ(tpdp_fqn_match("fc1", "fc1.weight"), 0);
  EXPECT_EQ(tpdp_fqn_match("u1.fc1", "fc1"), 0);
  EXPECT_EQ(tpdp_fqn_match("fc1", "u1.fc1"), 0);
  // '*' is a wildcard only as a whole component.
  EXPECT_EQ(tpdp_fqn_match("fc*", "fc1"), 0);
  EXPECT_EQ(tpdp_fqn_match("fc*", "fc*"), 1);
}

TEST(FqnMatch, EmptyAndRoot) {
  // The root's FQN is "": only the empty pattern names it.
  EXPECT_EQ(tpdp_fqn_match("", ""), 1);
  EXPECT_EQ(tpdp_fqn_match("*", ""), 0);
  EXPECT_EQ(tpdp_fqn_match("*", "a"), 1);
  EXPECT_EQ(tpdp_fqn_match("*", "a.b"), 0);
  EXPECT_EQ(tpdp_fqn_match("", "a"), 0);
  EXPECT_EQ(tpdp_fqn_match("a", ""), 0);
  EXPECT_EQ(tpdp_fqn_match(nullptr, "a"), 0);
  EXPECT_EQ(tpdp_fqn_match("a", nullptr), 0);
}

TEST(StyleName, FormatAndParseRoundTrip) {
  const char *names[] = {"colwise", "rowwise", "sequence_parallel",
                         "replicate"};
  const tpdp_tp_style styles[] = {TPDP_STYLE_COLWISE, TPDP_STYLE_ROWWISE,
                                  TPDP_STYLE_SEQUENCE_PARALLEL,
                                  TPDP_STYLE_REPLICATE};
  ASSERT_EQ((int)TPDP_STYLE_COUNT, 4);
  for (int i = 0; i < 4; i++) {
    EXPECT_EQ(std::string(tpdp_tp_style_name(styles[i])), names[i]);
    tpdp_tp_style s = TPDP_STYLE_COUNT;
    ASSERT_TPDP_OK(tpdp_tp_style_parse(names[i], &s));
    EXPECT_EQ(s, styles[i]);
  }
  EXPECT_EQ(std::string(tpdp_tp_style_name(TPDP_STYLE_COUNT)), "?");
  EXPECT_EQ(std::string(tpdp_tp_style_name((tpdp_tp_style)-1)), "?");
}

TEST(StyleName, ParseErrors) {
  tpdp_tp_style s = TPDP_STYLE_REPLICATE;
  EXPECT_TPDP_ERROR(tpdp_tp_style_parse("colwize", &s), TPDP_ERR_PARSE,
                    "colwize");
  EXPECT_EQ(s, TPDP_STYLE_REPLICATE);  // untouched
  EXPECT_TPDP_ERROR(tpdp_tp_style_parse("", &s), TPDP_ERR_PARSE, "");
  EXPECT_TPDP_ERROR(tpdp_tp_style_parse("Colwise", &s), TPDP_ERR_PARSE,
                    "Colwise");
  EXPECT_TPDP_ERROR(tpdp_tp_style_parse(nullptr, &s), TPDP_ERR_NULL_POINTER,
                    "");
  EXPECT_TPDP_ERROR(tpdp_tp_style_parse("rowwise", nullptr),
                    TPDP_ERR_NULL_POINTER, "");
}

}  // namespace
