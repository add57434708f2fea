// SPDX-License-Identifier: BSD-3-Clause
// Model descriptions (tools/planning/model_json.h): the tree, FQNs, leaf
// list and parameter counts (shared parameters once), calls, and every parse
// error naming the JSON path at fault. Expected values are worked by hand
// from the fixtures (tests/data/composite_model.json, tied_model.json,
// repeated_call_model.json).
#include "tools/planning/model_json.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "tests/tools/planning/planning_test_util.h"

namespace {

using tpdp_test::Desc;
using tpdp_test::LeafParams;

std::vector<std::string> LeafFqns(const planning_model_desc *d) {
  std::vector<std::string> v;
  for (int i = 0; i < d->nleaves; i++) v.push_back(d->leaves[i].module->fqn);
  return v;
}

TEST(ModelJson, Seed000Tree) {
  Desc m;
  ASSERT_MODEL_LOADED("composite_model.json", &m.d);
  const planning_model_desc *d = m.d;
  // PyTorch FSDP's tree report's tree, line by line: FQN[class] in pre-order.
  std::vector<std::string> want = {
      "[CompositeModel]", "l1[Linear]",         "u1[UnitModule]",
      "u1.l1[Linear]",    "u1.seq[Sequential]", "u1.seq.0[ReLU]",
      "u1.seq.1[Linear]", "u1.seq.2[ReLU]",     "u1.l2[Linear]",
      "u2[UnitModule]",   "u2.l1[Linear]",      "u2.seq[Sequential]",
      "u2.seq.0[ReLU]",   "u2.seq.1[Linear]",   "u2.seq.2[ReLU]",
      "u2.l2[Linear]",    "l2[Linear]"};
  ASSERT_EQ(d->nmodules, (int)want.size());
  std::vector<std::string> pre;
  for (int i = 0; i < d->nmodules; i++) {
    pre.push_back(std::string(d->modules[i]->fqn) + "[" +
                  d->modules[i]->class_name + "]");
    EXPECT_EQ(d->modules[i]->index, i);
  }
  EXPECT_EQ(pre, want);
  EXPECT_EQ(d->root, d->modules[0]);
  EXPECT_EQ(d->root->parent, nullptr);
  EXPECT_STREQ(d->root->name, "");

  // 8 Linear modules, weight [8, 8] + bias [8] = 72 each.
  EXPECT_EQ(d->nparams, 16);
  EXPECT_EQ(d->total_params, 8 * 72);
  EXPECT_EQ(LeafFqns(d),
            (std::vector<std::string>{"l1", "u1.l1", "u1.seq.0", "u1.seq.1",
                                      "u1.seq.2", "u1.l2", "u2.l1", "u2.seq.0",
                                      "u2.seq.1", "u2.seq.2", "u2.l2", "l2"}));
  EXPECT_EQ(LeafParams(d),
            (std::vector<int64_t>{72, 72, 0, 72, 0, 72, 72, 0, 72, 0, 72, 72}));

  const planning_model_module *u1 = planning_model_desc_find_module(d, "u1");
  ASSERT_NE(u1, nullptr);
  EXPECT_STREQ(u1->class_name, "UnitModule");
  EXPECT_EQ(u1->first_leaf, 1);
  EXPECT_EQ(u1->last_leaf, 5);
  EXPECT_EQ(u1->nchildren, 3);
  EXPECT_STREQ(u1->children[1]->fqn, "u1.seq");
  EXPECT_EQ(u1->children[1]->parent, u1);
  EXPECT_EQ(planning_model_desc_find_module(d, ""), d->root);
  EXPECT_EQ(planning_model_desc_find_module(d, "u3"), nullptr);

  const planning_model_param *w =
      planning_model_desc_find_param(d, "u2.seq.1.weight");
  ASSERT_NE(w, nullptr);
  EXPECT_STREQ(w->name, "weight");
  EXPECT_EQ(w->ndim, 2);
  EXPECT_EQ(w->shape[0], 8);
  EXPECT_EQ(w->shape[1], 8);
  EXPECT_EQ(w->numel, 64);
  EXPECT_EQ(w->dtype, TPDP_F32);
  EXPECT_EQ(w->canonical, w);
  EXPECT_STREQ(w->module->fqn, "u2.seq.1");
  // Parameters in pre-order: l1.weight, l1.bias, u1.l1.weight, ...
  EXPECT_STREQ(d->params[0]->fqn, "l1.weight");
  EXPECT_STREQ(d->params[1]->fqn, "l1.bias");
  EXPECT_STREQ(d->params[4]->fqn, "u1.seq.1.weight");
  EXPECT_STREQ(d->params[15]->fqn, "l2.bias");
  EXPECT_EQ(planning_model_desc_find_param(d, "u1.seq.0.weight"), nullptr);
}

TEST(ModelJson, SharedCountedOnceRootParamsToFirstLeaf) {
  Desc m;
  ASSERT_MODEL_LOADED("tied_model.json", &m.d);
  const planning_model_desc *d = m.d;
  EXPECT_EQ(LeafFqns(d),
            (std::vector<std::string>{"emb", "blocks.0.fc", "blocks.0.act",
                                      "blocks.1.fc", "blocks.1.act", "head"}));
  // emb: weight 40 + the root's scalar "scale" (1, charged to the first
  // leaf); fc: 16 + 4; head: weight tied to emb.weight (not counted) + 10.
  EXPECT_EQ(LeafParams(d), (std::vector<int64_t>{41, 20, 0, 20, 0, 10}));
  EXPECT_EQ(d->total_params, 91);
  const planning_model_param *scale =
      planning_model_desc_find_param(d, "scale");
  ASSERT_NE(scale, nullptr);
  EXPECT_EQ(scale->ndim, 0);
  EXPECT_EQ(scale->numel, 1);
  const planning_model_param *ew =
      planning_model_desc_find_param(d, "emb.weight");
  const planning_model_param *hw =
      planning_model_desc_find_param(d, "head.weight");
  ASSERT_NE(ew, nullptr);
  ASSERT_NE(hw, nullptr);
  EXPECT_EQ(ew->canonical, ew);
  EXPECT_EQ(hw->canonical, ew);
  const planning_model_param *b =
      planning_model_desc_find_param(d, "blocks.1.fc.bias");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->dtype, TPDP_BF16);
}

// The pair order does not matter: the count stays at the first FQN in
// pre-order. Chains tie transitively.
TEST(ModelJson, SharedReversedAndChained) {
  const char *json = R"({
    "class": "M",
    "children": {
      "a": {"class": "L", "params": {"w": {"shape": [3, 2]}}},
      "b": {"class": "L", "params": {"w": {"shape": [3, 2]}, "v": {"shape": [5]}}},
      "c": {"class": "L", "params": {"w": {"shape": [3, 2]}}}
    },
    "shared": [["c.w", "b.w"], ["b.w", "a.w"]]
  })";
  Desc m;
  ASSERT_PLANNING_OK(planning_model_desc_parse(json, &m.d));
  EXPECT_EQ(LeafParams(m.d), (std::vector<int64_t>{6, 5, 0}));
  EXPECT_EQ(m.d->total_params, 11);
  const planning_model_param *a = planning_model_desc_find_param(m.d, "a.w");
  EXPECT_EQ(planning_model_desc_find_param(m.d, "b.w")->canonical, a);
  EXPECT_EQ(planning_model_desc_find_param(m.d, "c.w")->canonical, a);
}

// "calls": the leaves in the order forward calls them; without it, every
// leaf once in pre-order.
TEST(ModelJson, Calls) {
  Desc m;
  ASSERT_MODEL_LOADED("repeated_call_model.json", &m.d);
  std::vector<std::string> calls;
  for (int c = 0; c < m.d->ncalls; c++) calls.push_back(m.d->calls[c]->fqn);
  EXPECT_EQ(calls, (std::vector<std::string>{"embed", "cell", "act", "cell",
                                             "act", "cell", "act", "head"}));
  // Calls change no count: each parameter once (32 + 8, 64 + 8, 16 + 2).
  EXPECT_EQ(LeafParams(m.d), (std::vector<int64_t>{40, 72, 0, 18}));
  EXPECT_EQ(m.d->total_params, 130);

  Desc s;
  ASSERT_MODEL_LOADED("composite_model.json", &s.d);
  ASSERT_EQ(s.d->ncalls, s.d->nleaves);
  for (int c = 0; c < s.d->ncalls; c++)
    EXPECT_EQ(s.d->calls[c], s.d->leaves[c].module);
}

TEST(ModelJson, KeyOrderPreservedAndRootLeaf) {
  Desc m;
  ASSERT_PLANNING_OK(planning_model_desc_parse(
      R"({"class": "M", "children": {"z": {"class": "A"}, "a": {"class": "B",
          "params": {"y": {"shape": [2]}, "b": {"shape": [3]}}}}})",
      &m.d));
  EXPECT_EQ(LeafFqns(m.d), (std::vector<std::string>{"z", "a"}));
  EXPECT_STREQ(m.d->params[0]->fqn, "a.y");
  EXPECT_STREQ(m.d->params[1]->fqn, "a.b");

  Desc r;  // a root without children is the only leaf
  ASSERT_PLANNING_OK(planning_model_desc_parse(
      R"({"class": "Linear", "params": {"weight": {"shape": [4, 3]}}, "children": {}})",
      &r.d));
  ASSERT_EQ(r.d->nleaves, 1);
  EXPECT_EQ(r.d->leaves[0].module, r.d->root);
  EXPECT_EQ(r.d->leaves[0].params, 12);
  EXPECT_STREQ(r.d->params[0]->fqn, "weight");
}

// One case per error: status, and the JSON path in the message.
struct BadCase {
  const char *json;
  tpdp_status status;
  const char *needle1;
  const char *needle2;
};

class ModelJsonErrors : public ::testing::TestWithParam<BadCase> {};

TEST_P(ModelJsonErrors, NamesThePath) {
  const BadCase &c = GetParam();
  planning_model_desc *d = reinterpret_cast<planning_model_desc *>(0x1);
  EXPECT_PLANNING_ERROR(planning_model_desc_parse(c.json, &d), c.status,
                        c.needle1, c.needle2, "planning_model_desc_parse");
  EXPECT_EQ(d, nullptr);
}

const BadCase kBad[] = {
    {"{\"class\": \"M\",\n  \"children\": {,}}", TPDP_ERR_PARSE,
     "not valid JSON", "line 2"},
    {"[1, 2]", TPDP_ERR_PARSE, "root must be an object", "module"},
    {R"({"params": {}})", TPDP_ERR_PARSE, "root: missing \"class\"", "class"},
    {R"({"class": "M", "children": {"u1": {"class": "U", "children":
        {"l1": {"params": {}}}}}})",
     TPDP_ERR_PARSE, "children.u1.children.l1: missing \"class\"", "class"},
    {R"({"class": "M", "children": {"a": {"class": 3}}})", TPDP_ERR_PARSE,
     "children.a.class must be a non-empty string", "class"},
    {R"({"class": ""})", TPDP_ERR_PARSE, "class must be a non-empty string",
     "class"},
    {R"({"class": "M", "children": {"u1": {"class": "U",
        "params": {"w": {"shape": [4, 0]}}}}})",
     TPDP_ERR_BAD_DIM_SIZE,
     "children.u1.params.w.shape[1] must be a positive integer", "got 0"},
    {R"({"class": "M", "params": {"w": {"shape": [2.5]}}})",
     TPDP_ERR_BAD_DIM_SIZE, "params.w.shape[0] must be a positive integer",
     "2.5"},
    {R"({"class": "M", "params": {"w": {"shape": [-3]}}})",
     TPDP_ERR_BAD_DIM_SIZE, "params.w.shape[0]", "-3"},
    {R"({"class": "M", "params": {"w": {"shape": [4, "8"]}}})",
     TPDP_ERR_BAD_DIM_SIZE, "params.w.shape[1]", "non-number"},
    {R"({"class": "M", "params": {"w": {"shape": 8}}})", TPDP_ERR_PARSE,
     "params.w.shape must be an array", "shape"},
    {R"({"class": "M", "params": {"w": {"dtype": "f32"}}})", TPDP_ERR_PARSE,
     "params.w: missing \"shape\"", "shape"},
    {R"({"class": "M", "params": {"w": {"shape": [1,1,1,1,1,1,1,1,1]}}})",
     TPDP_ERR_TOO_MANY_DIMS, "params.w.shape has 9 dims", "at most 8"},
    {R"({"class": "M", "children": {"a": {"class": "L",
        "params": {"w": {"shape": [2], "dtype": "f8"}}}}})",
     TPDP_ERR_PARSE, "children.a.params.w.dtype must be one of", "\"f8\""},
    {R"({"class": "M", "params": {"w": {"shape": [2], "dtyp": "f32"}}})",
     TPDP_ERR_PARSE, "params.w: unknown key \"dtyp\"", "shape"},
    {R"({"class": "M", "params": {"w": [2]}})", TPDP_ERR_PARSE,
     "params.w must be an object", "shape"},
    {R"({"class": "M", "children": {"a": {"class": "L", "parms": {}}}})",
     TPDP_ERR_PARSE, "children.a: unknown key \"parms\"", "children"},
    {R"({"class": "M", "call": []})", TPDP_ERR_PARSE,
     "root: unknown key \"call\"", "\"calls\""},
    {R"({"class": "M", "children": {"a": {"class": "L", "shared": []}}})",
     TPDP_ERR_PARSE, "children.a: \"shared\" is only allowed on the root",
     "shared"},
    {R"({"class": "M", "params": [1]})", TPDP_ERR_PARSE,
     "params must be an object", "(parameter name -> {\"shape\": ...})"},
    {R"({"class": "M", "children": {"a": {"class": "L", "children": []}}})",
     TPDP_ERR_PARSE, "children.a.children must be an object",
     "(child name -> module)"},
    {R"({"class": "M", "children": {"a": 5}})", TPDP_ERR_PARSE,
     "children.a must be an object", "module"},
    {R"({"class": "M", "class": "N"})", TPDP_ERR_DUPLICATE,
     "root: key \"class\" appears twice", "class"},
    {R"({"class": "M", "children": {"a": {"class": "L"}, "a": {"class": "L"}}})",
     TPDP_ERR_DUPLICATE, "children.a", "already used by a child"},
    {R"({"class": "M", "params": {"a": {"shape": [1]}},
        "children": {"a": {"class": "L"}}})",
     TPDP_ERR_DUPLICATE, "children.a", "already used by a parameter"},
    {R"({"class": "M", "children": {"": {"class": "L"}}})", TPDP_ERR_EMPTY_NAME,
     "children: a child has an empty name", "child"},
    {R"({"class": "M", "children": {"x": {"class": "L",
        "params": {"a.b": {"shape": [1]}}}}})",
     TPDP_ERR_INVALID_ARGUMENT, "children.x.params", "\"a.b\" contains '.'"},
    {R"({"class": "M", "params": {"w": {"shape": [4294967296, 4294967296]}}})",
     TPDP_ERR_INVALID_ARGUMENT, "params.w.shape", "overflows"},
    {R"({"class": "M", "children": {"a": {"class": "L",
        "params": {"w": {"shape": [2]}}}}, "shared": [["a.w", "b.w"]]})",
     TPDP_ERR_NOT_FOUND, "shared[0][1]: no parameter named \"b.w\"", "b.w"},
    {R"({"class": "M", "children": {"a": {"class": "L",
        "params": {"w": {"shape": [2]}}}}, "shared": [["a", "a.w"]]})",
     TPDP_ERR_NOT_FOUND, "shared[0][0]: no parameter named \"a\"",
     "that is a module"},
    {R"({"class": "M", "children": {"a": {"class": "L",
        "params": {"w": {"shape": [2]}}}}, "shared": [["a.w", "a.w"]]})",
     TPDP_ERR_INVALID_ARGUMENT, "shared[0]", "paired with itself"},
    {R"({"class": "M", "children": {
        "a": {"class": "L", "params": {"w": {"shape": [2, 3]}}},
        "b": {"class": "L", "params": {"w": {"shape": [3, 2]}}}},
        "shared": [["a.w", "b.w"]]})",
     TPDP_ERR_SHAPE_MISMATCH, "shared[0]",
     "\"a.w\" has shape [2, 3] but \"b.w\" has shape [3, 2]"},
    {R"({"class": "M", "children": {
        "a": {"class": "L", "params": {"w": {"shape": [2]}}},
        "b": {"class": "L", "params": {"w": {"shape": [2], "dtype": "f16"}}}},
        "shared": [["a.w", "b.w"]]})",
     TPDP_ERR_DTYPE_MISMATCH, "shared[0]",
     "dtype f32 but \"b.w\" has dtype f16"},
    {R"({"class": "M", "children": {"a": {"class": "L",
        "params": {"w": {"shape": [2]}, "v": {"shape": [2]}}}},
        "shared": [["a.w", "a.v"], ["a.w"]]})",
     TPDP_ERR_PARSE, "shared[1] must be an array of two parameter FQNs",
     "shared[1]"},
    {R"({"class": "M", "shared": {"a": "b"}})", TPDP_ERR_PARSE,
     "shared must be an array", "pairs"},
    // Above 2^53 - 1 a JSON number is no longer an exact integer.
    {R"({"class": "M", "params": {"w": {"shape": [4611686018427387904]}}})",
     TPDP_ERR_BAD_DIM_SIZE, "params.w.shape[0] is too large",
     "(max 9007199254740991)"},
    // 2^60 f64 elements fit in int64; their 2^63 bytes do not.
    {R"({"class": "M", "params": {"w": {"shape": [1073741824, 1073741824],
        "dtype": "f64"}}})",
     TPDP_ERR_INVALID_ARGUMENT,
     "params.w.shape: 1152921504606846976 elements of f64 overflow",
     "above INT64_MAX"},
    {R"({"class": "M", "params": {"w": {"shape": [2, 1e30]}}})",
     TPDP_ERR_BAD_DIM_SIZE, "params.w.shape[1] is too large",
     "(max 9007199254740991)"},
    {R"({"class": "M", "children": {"a": {"class": "L"}}, "calls": "a"})",
     TPDP_ERR_PARSE, "calls must be an array", "leaf module FQNs"},
    {R"({"class": "M", "children": {"a": {"class": "L"}}, "calls": ["a", 3]})",
     TPDP_ERR_PARSE, "calls[1] must be a string", "leaf module"},
    {R"({"class": "M", "children": {"a": {"class": "L"}}, "calls": ["a", "b"]})",
     TPDP_ERR_NOT_FOUND, "calls[1]: no module named \"b\"", "calls[1]"},
    {R"({"class": "M", "children": {"a": {"class": "L",
        "params": {"w": {"shape": [1]}}}}, "calls": ["a.w"]})",
     TPDP_ERR_NOT_FOUND, "calls[0]: no module named \"a.w\"",
     "that is a parameter"},
    {R"({"class": "M", "children": {"a": {"class": "L", "children":
        {"b": {"class": "L"}}}}, "calls": ["a"]})",
     TPDP_ERR_INVALID_ARGUMENT, "calls[0]: \"a\" is not a leaf module",
     "1 children"},
    {R"({"class": "M", "children": {"a": {"class": "L"}}, "calls": []})",
     TPDP_ERR_INVALID_ARGUMENT, "calls is empty", "omit it"},
    {R"({"class": "M", "children": {"a": {"class": "L", "calls": ["a"]}}})",
     TPDP_ERR_PARSE, "children.a: \"calls\" is only allowed on the root",
     "calls"},
};

INSTANTIATE_TEST_SUITE_P(All, ModelJsonErrors, ::testing::ValuesIn(kBad));

TEST(ModelJson, NullPointers) {
  planning_model_desc *d = nullptr;
  EXPECT_PLANNING_ERROR(planning_model_desc_parse(nullptr, &d),
                        TPDP_ERR_NULL_POINTER, "json");
  EXPECT_PLANNING_ERROR(planning_model_desc_parse("{}", nullptr),
                        TPDP_ERR_NULL_POINTER, "out");
  EXPECT_PLANNING_ERROR(planning_model_desc_load(nullptr, &d),
                        TPDP_ERR_NULL_POINTER, "path");
  planning_model_desc_destroy(nullptr);  // no-op
}

TEST(ModelJson, LoadErrorsNameTheFile) {
  planning_model_desc *d = nullptr;
  EXPECT_PLANNING_ERROR(planning_model_desc_load("/nonexistent/model.json", &d),
                        TPDP_ERR_IO, "/nonexistent/model.json");
  EXPECT_EQ(d, nullptr);
  const char *tmp = std::getenv("TEST_TMPDIR");
  std::string path = std::string(tmp ? tmp : "/tmp") + "/bad_model.json";
  {
    std::ofstream f(path);
    f << R"({"class": "M", "children": {"u1": {"class": "U",
        "params": {"w": {"shape": [4, 0]}}}}})";
  }
  EXPECT_PLANNING_ERROR(
      planning_model_desc_load(path.c_str(), &d), TPDP_ERR_BAD_DIM_SIZE,
      path.c_str(), "children.u1.params.w.shape[1] must be a positive integer",
      "planning_model_desc_load");
  // Named once, after the function called, then the file, then the path.
  EXPECT_EQ(std::string(planning_last_error()),
            "planning_model_desc_load: " + path +
                ": children.u1.params.w.shape[1] must be a positive integer "
                "(got 0)");
  EXPECT_EQ(d, nullptr);
  std::remove(path.c_str());
}

}  // namespace
