// SPDX-License-Identifier: BSD-3-Clause
// The sharded tree report (as PyTorch FSDP prints it) on its docstring's toy model.
#include <gtest/gtest.h>

#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tests/test_util.h"
#include "tpdp/module.h"

namespace {

float g_storage[16];

tpdp_module *Make(const char *cls) {
  tpdp_module *m = nullptr;
  EXPECT_EQ(tpdp_module_create(cls, &m), TPDP_SUCCESS) << tpdp_last_error();
  return m;
}

tpdp_module *AddChild(tpdp_module *parent, const char *name, const char *cls) {
  tpdp_module *c = Make(cls);
  EXPECT_EQ(tpdp_module_add_child(parent, name, c), TPDP_SUCCESS)
      << tpdp_last_error();
  return c;
}

void AddParam(tpdp_module *m, const char *name) {
  tpdp_tensor t = tpdp_tensor_1d(g_storage, TPDP_F32, 4);
  tpdp_param *p = nullptr;
  ASSERT_EQ(tpdp_param_create(&t, &p), TPDP_SUCCESS);
  ASSERT_EQ(tpdp_module_add_param(m, name, p), TPDP_SUCCESS);
  tpdp_param_release(p);
}

tpdp_module *Linear(tpdp_module *parent, const char *name) {
  tpdp_module *l = AddChild(parent, name, "Linear");
  AddParam(l, "weight");
  AddParam(l, "bias");
  return l;
}

tpdp_module *Unit(tpdp_module *parent, const char *name) {
  tpdp_module *u = AddChild(parent, name, "UnitModule");
  Linear(u, "l1");
  tpdp_module *seq = AddChild(u, "seq", "Sequential");
  AddChild(seq, "0", "ReLU");
  Linear(seq, "1");
  AddChild(seq, "2", "ReLU");
  Linear(u, "l2");
  return u;
}

// CompositeModel of PyTorch FSDP's tree report: l1, u1, u2, l2; root, u1, u2 managed.
tpdp_module *CompositeModel(bool mark) {
  tpdp_module *root = Make("CompositeModel");
  Linear(root, "l1");
  tpdp_module *u1 = Unit(root, "u1");
  tpdp_module *u2 = Unit(root, "u2");
  Linear(root, "l2");
  if (mark) {
    EXPECT_EQ(tpdp_module_set_unit(root, "DP", " FULLY SHARDED"), TPDP_SUCCESS);
    EXPECT_EQ(tpdp_module_set_unit(u1, "DP", " FULLY SHARDED"), TPDP_SUCCESS);
    EXPECT_EQ(tpdp_module_set_unit(u2, "DP", " FULLY SHARDED"), TPDP_SUCCESS);
  }
  return root;
}

std::vector<std::string> Lines(const std::string &s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

// PyTorch FSDP's tree report's docstring, typed in by hand.
const char *kDocstringTree =
    "[CompositeModel] FULLY SHARDED\n"
    "    l1[Linear]\n"
    "    u1[UnitModule] FULLY SHARDED\n"
    "        u1.l1[Linear]\n"
    "        u1.seq[Sequential]\n"
    "            u1.seq.0[ReLU]\n"
    "            u1.seq.1[Linear]\n"
    "            u1.seq.2[ReLU]\n"
    "        u1.l2[Linear]\n"
    "    u2[UnitModule] FULLY SHARDED\n"
    "        u2.l1[Linear]\n"
    "        u2.seq[Sequential]\n"
    "            u2.seq.0[ReLU]\n"
    "            u2.seq.1[Linear]\n"
    "            u2.seq.2[ReLU]\n"
    "        u2.l2[Linear]\n"
    "    l2[Linear]\n";

TEST(TreeReport, MatchesDocstringLineByLine) {
  tpdp_module *root = CompositeModel(true);
  tpdp_tree_report *r = nullptr;
  ASSERT_TPDP_OK(tpdp_tree_report_create(root, nullptr, 0, &r));
  std::string text = tpdp_tree_report_text(r);
  std::vector<std::string> got = Lines(text), want = Lines(kDocstringTree);
  ASSERT_EQ(got.size(), want.size()) << text;
  for (size_t i = 0; i < want.size(); i++)
    EXPECT_EQ(got[i], want[i]) << "line " << i;
  EXPECT_EQ(text, kDocstringTree);  // including the final newline
  EXPECT_TPDP_OK(tpdp_tree_report_destroy(r));
  ASSERT_TPDP_OK(tpdp_module_destroy(root));
}

TEST(TreeReport, UnitMapMatchesDocstringDict) {
  tpdp_module *root = CompositeModel(true);
  tpdp_tree_report *r = nullptr;
  ASSERT_TPDP_OK(tpdp_tree_report_create(root, nullptr, 0, &r));
  std::vector<std::pair<std::string, std::vector<std::string>>> want = {
      {"[CompositeModel]", {"l1.weight", "l1.bias", "l2.weight", "l2.bias"}},
      {"u1[UnitModule]",
       {"u1.l1.weight", "u1.l1.bias", "u1.seq.1.weight", "u1.seq.1.bias",
        "u1.l2.weight", "u1.l2.bias"}},
      {"u2[UnitModule]",
       {"u2.l1.weight", "u2.l1.bias", "u2.seq.1.weight", "u2.seq.1.bias",
        "u2.l2.weight", "u2.l2.bias"}},
  };
  ASSERT_EQ(tpdp_tree_report_num_units(r), 3);
  for (int i = 0; i < 3; i++) {
    EXPECT_EQ(tpdp_tree_report_unit(r, i), want[i].first);
    std::vector<std::string> got;
    for (int j = 0; j < tpdp_tree_report_num_fqns(r, i); j++)
      got.push_back(tpdp_tree_report_fqn(r, i, j));
    EXPECT_EQ(got, want[i].second) << want[i].first;
  }
  EXPECT_EQ(tpdp_tree_report_unit(r, 3), nullptr);
  // The JSON text, built here from the expected dict.
  std::string json = "{";
  for (size_t i = 0; i < want.size(); i++) {
    if (i) json += ",";
    json += "\"" + want[i].first + "\":[";
    for (size_t j = 0; j < want[i].second.size(); j++)
      json += (j ? ",\"" : "\"") + want[i].second[j] + "\"";
    json += "]";
  }
  json += "}";
  EXPECT_EQ(std::string(tpdp_tree_report_json(r)), json);
  EXPECT_TPDP_OK(tpdp_tree_report_destroy(r));
  ASSERT_TPDP_OK(tpdp_module_destroy(root));
}

TEST(TreeReport, NoUnitsMeansNoSuffixAndEmptyMap) {
  tpdp_module *root = CompositeModel(false);
  tpdp_tree_report *r = nullptr;
  ASSERT_TPDP_OK(tpdp_tree_report_create(root, nullptr, 0, &r));
  std::vector<std::string> got = Lines(tpdp_tree_report_text(r));
  ASSERT_EQ(got.size(), 17u);
  EXPECT_EQ(got[0], "[CompositeModel]");
  EXPECT_EQ(got[2], "    u1[UnitModule]");
  EXPECT_EQ(tpdp_tree_report_num_units(r), 0);
  EXPECT_STREQ(tpdp_tree_report_json(r), "{}");
  EXPECT_TPDP_OK(tpdp_tree_report_destroy(r));
  ASSERT_TPDP_OK(tpdp_module_destroy(root));
}

TEST(TreeReport, SuffixFromKindSharedParamsAndEmptyUnits) {
  // Net (unit TP, default suffix " TP")
  //   a: Block (unit DP, suffix " [dp]")   params w (shared), b
  //   e: Empty (unit DP, no params)        -> no suffix, no key
  //   c: Linear                            params w (shared again), z
  tpdp_module *root = Make("Net");
  tpdp_module *a = AddChild(root, "a", "Block");
  tpdp_module *e = AddChild(root, "e", "Empty");
  tpdp_module *c = AddChild(root, "c", "Linear");
  tpdp_tensor t = tpdp_tensor_1d(g_storage, TPDP_F32, 2);
  tpdp_param *w = nullptr;
  ASSERT_TPDP_OK(tpdp_param_create(&t, &w));
  ASSERT_TPDP_OK(tpdp_module_add_param(a, "w", w));
  AddParam(a, "b");
  ASSERT_TPDP_OK(tpdp_module_add_param(c, "w", w));
  AddParam(c, "z");
  tpdp_param_release(w);
  ASSERT_TPDP_OK(tpdp_module_set_unit(root, "TP", nullptr));
  ASSERT_TPDP_OK(tpdp_module_set_unit(a, "DP", " [dp]"));
  ASSERT_TPDP_OK(tpdp_module_set_unit(e, "DP", " [dp]"));
  tpdp_tree_report *r = nullptr;
  ASSERT_TPDP_OK(tpdp_tree_report_create(root, nullptr, 0, &r));
  EXPECT_EQ(std::string(tpdp_tree_report_text(r)),
            "[Net] TP\n"
            "    a[Block] [dp]\n"
            "    e[Empty]\n"
            "    c[Linear]\n");
  // w is managed by a (first encounter); the root keeps only c.z.
  EXPECT_STREQ(tpdp_tree_report_json(r),
               "{\"[Net]\":[\"c.z\"],\"a[Block]\":[\"a.w\",\"a.b\"]}");
  EXPECT_TPDP_OK(tpdp_tree_report_destroy(r));
  ASSERT_TPDP_OK(tpdp_module_destroy(root));
}

TEST(TreeReport, WrapperPrefixesCleanedAndJsonEscaped) {
  tpdp_module *root = Make("Q\"uote");
  tpdp_module *w = AddChild(root, "_fsdp_wrapped_module", "Inner");
  AddParam(w, "weight");
  ASSERT_TPDP_OK(tpdp_module_set_unit(root, "DP", nullptr));
  tpdp_tree_report *r = nullptr;
  ASSERT_TPDP_OK(tpdp_tree_report_create(root, nullptr, 0, &r));
  // Module names in the text are not cleaned; parameter FQNs are.
  EXPECT_EQ(std::string(tpdp_tree_report_text(r)),
            "[Q\"uote] DP\n    _fsdp_wrapped_module[Inner]\n");
  EXPECT_STREQ(tpdp_tree_report_json(r), "{\"[Q\\\"uote]\":[\"weight\"]}");
  EXPECT_TPDP_OK(tpdp_tree_report_destroy(r));
  ASSERT_TPDP_OK(tpdp_module_destroy(root));
}

TEST(TreeReport, DestroyReturnsAStatusAndNullIsANoOp) {
  tpdp_module *root = CompositeModel(true);
  tpdp_tree_report *r = nullptr;
  ASSERT_TPDP_OK(tpdp_tree_report_create(root, nullptr, 0, &r));
  EXPECT_EQ(tpdp_tree_report_destroy(r), TPDP_SUCCESS);
  EXPECT_EQ(tpdp_tree_report_destroy(nullptr), TPDP_SUCCESS);
  ASSERT_TPDP_OK(tpdp_module_destroy(root));
}

}  // namespace
