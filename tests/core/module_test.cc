// SPDX-License-Identifier: BSD-3-Clause
// Module tree (core/module.c, param.c, module_hooks.c, module_state.c):
// structure and ownership, names, cycles, traversal, FQN maps, cleaning,
// root modules, states, management, hooks, attached state.
#include "tpdp/module.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "tests/test_util.h"

namespace {

float g_storage[64];

tpdp_tensor Vec(int64_t n) { return tpdp_tensor_1d(g_storage, TPDP_F32, n); }

tpdp_module *Make(const char *cls) {
  tpdp_module *m = nullptr;
  EXPECT_EQ(tpdp_module_create(cls, &m), TPDP_SUCCESS) << tpdp_last_error();
  return m;
}

tpdp_param *NewParam(int64_t n = 4) {
  tpdp_tensor t = Vec(n);
  tpdp_param *p = nullptr;
  EXPECT_EQ(tpdp_param_create(&t, &p), TPDP_SUCCESS) << tpdp_last_error();
  return p;
}

// Adds a fresh parameter and drops the caller's reference.
void AddParam(tpdp_module *m, const char *name, int64_t n = 4) {
  tpdp_param *p = NewParam(n);
  EXPECT_EQ(tpdp_module_add_param(m, name, p), TPDP_SUCCESS)
      << tpdp_last_error();
  tpdp_param_release(p);
}

tpdp_module *AddChild(tpdp_module *parent, const char *name, const char *cls) {
  tpdp_module *c = Make(cls);
  EXPECT_EQ(tpdp_module_add_child(parent, name, c), TPDP_SUCCESS)
      << tpdp_last_error();
  return c;
}

struct Visit {
  std::string cls, prefix;
  int level;
};

tpdp_status Record(tpdp_module *m, const char *prefix, int level, void *ctx) {
  static_cast<std::vector<Visit> *>(ctx)->push_back(
      {tpdp_module_class_name(m), prefix, level});
  return TPDP_SUCCESS;
}

TEST(ModuleTree, ChildrenParamsBuffersInOrder) {
  tpdp_module *root = Make("Net");
  tpdp_module *a = AddChild(root, "a", "A");
  tpdp_module *b = AddChild(root, "b", "B");
  AddParam(root, "w");
  AddParam(root, "v");
  tpdp_tensor buf = Vec(2);
  ASSERT_TPDP_OK(tpdp_module_add_buffer(root, "running_mean", &buf));
  EXPECT_EQ(tpdp_module_num_children(root), 2);
  const char *nm = nullptr;
  EXPECT_EQ(tpdp_module_child(root, 0, &nm), a);
  EXPECT_STREQ(nm, "a");
  EXPECT_EQ(tpdp_module_child(root, 1, &nm), b);
  EXPECT_STREQ(nm, "b");
  EXPECT_EQ(tpdp_module_child(root, 2, &nm), nullptr);
  EXPECT_EQ(tpdp_module_num_params(root), 2);
  tpdp_module_param(root, 0, &nm);
  EXPECT_STREQ(nm, "w");
  tpdp_module_param(root, 1, &nm);
  EXPECT_STREQ(nm, "v");
  EXPECT_EQ(tpdp_module_num_buffers(root), 1);
  EXPECT_EQ(tpdp_module_buffer(root, 0, &nm)->shape[0], 2);
  EXPECT_STREQ(nm, "running_mean");
  EXPECT_EQ(tpdp_module_parent(a), root);
  EXPECT_STREQ(tpdp_module_name(a), "a");
  EXPECT_STREQ(tpdp_module_name(root), "");
  EXPECT_STREQ(tpdp_module_class_name(b), "B");
  ASSERT_TPDP_OK(tpdp_module_destroy(root));
}

TEST(ModuleTree, SubmoduleLookupAndFqn) {
  tpdp_module *root = Make("Net");
  tpdp_module *u1 = AddChild(root, "u1", "Unit");
  tpdp_module *seq = AddChild(u1, "seq", "Sequential");
  tpdp_module *l = AddChild(seq, "1", "Linear");
  tpdp_module *got = nullptr;
  ASSERT_TPDP_OK(tpdp_module_get_submodule(root, "u1.seq.1", &got));
  EXPECT_EQ(got, l);
  ASSERT_TPDP_OK(tpdp_module_get_submodule(root, "", &got));
  EXPECT_EQ(got, root);
  EXPECT_TPDP_ERROR(tpdp_module_get_submodule(root, "u1.nope.1", &got),
                    TPDP_ERR_NOT_FOUND, "nope", "u1[Unit]");
  EXPECT_EQ(got, nullptr);
  char buf[64];
  EXPECT_EQ(tpdp_module_fqn(l, buf, sizeof buf), strlen("u1.seq.1"));
  EXPECT_STREQ(buf, "u1.seq.1");
  tpdp_module_fqn(root, buf, sizeof buf);
  EXPECT_STREQ(buf, "");
  // Truncation keeps a NUL and reports the full length.
  char small[5];
  EXPECT_EQ(tpdp_module_fqn(l, small, sizeof small), 8u);
  EXPECT_EQ(strlen(small), 4u);
  EXPECT_EQ(tpdp_module_root(l), root);
  // The label every message uses: "fqn[Class]", the root "[Class]".
  char lbl[64];
  tpdp_module_label(l, lbl, sizeof lbl);
  EXPECT_STREQ(lbl, "u1.seq.1[Linear]");
  tpdp_module_label(root, lbl, sizeof lbl);
  EXPECT_STREQ(lbl, "[Net]");
  char tiny[6];
  tpdp_module_label(l, tiny, sizeof tiny);
  EXPECT_STREQ(tiny, "u1.se");  // truncated, NUL-terminated
  ASSERT_TPDP_OK(tpdp_module_destroy(root));
}

TEST(ModuleTree, GenerationChangesWhenADTensorParameterCanAppear) {
  tpdp_module *root = Make("Net");
  tpdp_module *loose = Make("Loose");
  uint64_t g0 = tpdp_module_tree_generation();
  EXPECT_EQ(tpdp_module_tree_generation(), g0);  // reading changes nothing
  tpdp_param *p = NewParam();
  EXPECT_EQ(tpdp_module_tree_generation(), g0);  // not in a tree yet
  ASSERT_TPDP_OK(tpdp_module_add_param(loose, "w", p));
  uint64_t g1 = tpdp_module_tree_generation();
  EXPECT_NE(g1, g0);
  ASSERT_TPDP_OK(tpdp_module_add_child(root, "loose", loose));
  uint64_t g2 = tpdp_module_tree_generation();
  EXPECT_NE(g2, g1);
  const struct tpdp_spec *fake =
      reinterpret_cast<const struct tpdp_spec *>(g_storage);
  ASSERT_TPDP_OK(tpdp_param_set_spec(p, fake));
  uint64_t g3 = tpdp_module_tree_generation();
  EXPECT_NE(g3, g2);
  // Changes that cannot bring a DTensor parameter do not count.
  tpdp_tensor t = Vec(2);
  ASSERT_TPDP_OK(tpdp_param_set_tensor(p, &t));
  ASSERT_TPDP_OK(tpdp_param_set_form(p, TPDP_PARAM_LOCALIZED));
  ASSERT_TPDP_OK(tpdp_module_add_buffer(root, "buf", &t));
  EXPECT_EQ(tpdp_module_tree_generation(), g3);
  // Failed registrations do not count either.
  EXPECT_TPDP_ERROR(tpdp_module_add_param(loose, "w", p), TPDP_ERR_DUPLICATE,
                    "'w'");
  EXPECT_EQ(tpdp_module_tree_generation(), g3);
  tpdp_param_release(p);
  ASSERT_TPDP_OK(tpdp_module_destroy(root));
}

TEST(ModuleTree, CycleIsRejectedNamingModules) {
  tpdp_module *root = Make("Net");
  tpdp_module *a = AddChild(root, "a", "A");
  tpdp_module *b = AddChild(a, "b", "B");
  EXPECT_TPDP_ERROR(tpdp_module_add_child(b, "back", root), TPDP_ERR_CYCLE,
                    "[Net]", "a.b[B]", "cycle");
  EXPECT_TPDP_ERROR(tpdp_module_add_child(b, "back", a), TPDP_ERR_CYCLE, "a[A]",
                    "a.b[B]");
  EXPECT_TPDP_ERROR(tpdp_module_add_child(b, "self", b), TPDP_ERR_CYCLE,
                    "a.b[B]", "parent itself");
  // The failed calls changed nothing.
  EXPECT_EQ(tpdp_module_num_children(b), 0);
  EXPECT_EQ(tpdp_module_parent(root), nullptr);
  ASSERT_TPDP_OK(tpdp_module_destroy(root));
}

TEST(ModuleTree, DuplicateAndBadNames) {
  tpdp_module *root = Make("Net");
  tpdp_module *a = AddChild(root, "a", "A");
  tpdp_module *other = Make("Other");
  EXPECT_TPDP_ERROR(tpdp_module_add_child(root, "a", other), TPDP_ERR_DUPLICATE,
                    "'a'", "[Net]", "child");
  EXPECT_EQ(tpdp_module_parent(other), nullptr);  // still ours
  AddParam(a, "weight");
  tpdp_param *p = NewParam();
  EXPECT_TPDP_ERROR(tpdp_module_add_param(a, "weight", p), TPDP_ERR_DUPLICATE,
                    "'weight'", "a[A]");
  // A parameter name may not clash with a child name either.
  EXPECT_TPDP_ERROR(tpdp_module_add_param(root, "a", p), TPDP_ERR_DUPLICATE,
                    "child named 'a'");
  tpdp_tensor t = Vec(1);
  EXPECT_TPDP_ERROR(tpdp_module_add_buffer(a, "weight", &t), TPDP_ERR_DUPLICATE,
                    "parameter named 'weight'");
  EXPECT_TPDP_ERROR(tpdp_module_add_param(a, "", p), TPDP_ERR_EMPTY_NAME,
                    "a[A]");
  EXPECT_TPDP_ERROR(tpdp_module_add_param(a, "x.y", p),
                    TPDP_ERR_INVALID_ARGUMENT, "'x.y'", "contains '.'");
  EXPECT_TPDP_ERROR(tpdp_module_add_param(a, nullptr, p), TPDP_ERR_NULL_POINTER,
                    "NULL");
  EXPECT_EQ(tpdp_param_refcount(p), 1);  // no failed call took a reference
  tpdp_module *dummy = nullptr;
  EXPECT_TPDP_ERROR(tpdp_module_create("", &dummy), TPDP_ERR_EMPTY_NAME,
                    "class name");
  EXPECT_TPDP_ERROR(tpdp_module_create(nullptr, &dummy), TPDP_ERR_NULL_POINTER,
                    "class_name");
  tpdp_param_release(p);
  ASSERT_TPDP_OK(tpdp_module_destroy(other));
  ASSERT_TPDP_OK(tpdp_module_destroy(root));
}

TEST(ModuleTree, SecondParentAndDestroyingNonRoot) {
  tpdp_module *r1 = Make("R1");
  tpdp_module *r2 = Make("R2");
  tpdp_module *c = AddChild(r1, "c", "C");
  EXPECT_TPDP_ERROR(tpdp_module_add_child(r2, "c", c), TPDP_ERR_STATE, "c[C]",
                    "already has a parent");
  EXPECT_TPDP_ERROR(tpdp_module_destroy(c), TPDP_ERR_STATE, "c[C]",
                    "destroy the root");
  ASSERT_TPDP_OK(tpdp_module_destroy(r1));
  ASSERT_TPDP_OK(tpdp_module_destroy(r2));
  ASSERT_TPDP_OK(tpdp_module_destroy(nullptr));
}

TEST(ModuleTree, SharedParamRefcount) {
  tpdp_module *root = Make("Net");
  tpdp_module *enc = AddChild(root, "enc", "Embedding");
  tpdp_module *dec = AddChild(root, "dec", "Linear");
  tpdp_param *w = NewParam();
  ASSERT_TPDP_OK(tpdp_module_add_param(enc, "weight", w));
  ASSERT_TPDP_OK(tpdp_module_add_param(dec, "weight", w));
  ASSERT_TPDP_OK(tpdp_module_add_param(dec, "tied", w));
  EXPECT_EQ(tpdp_param_refcount(w), 4);  // ours + 3 registrations
  tpdp_param_retain(w);
  ASSERT_TPDP_OK(tpdp_module_destroy(root));
  EXPECT_EQ(tpdp_param_refcount(w), 2);  // registrations released
  tpdp_param_release(w);
  tpdp_param_release(w);  // freed here (ASan checks the rest)
}

TEST(ModuleTree, ParamViewsAndForms) {
  tpdp_param *p = NewParam(4);
  EXPECT_EQ(tpdp_param_get_form(p), TPDP_PARAM_PLAIN);
  EXPECT_EQ(tpdp_param_grad(p), nullptr);
  EXPECT_EQ(tpdp_param_spec(p), nullptr);
  EXPECT_TPDP_ERROR(tpdp_param_set_form(p, TPDP_PARAM_LOCALIZED),
                    TPDP_ERR_STATE, "no spec");
  float g[4];
  tpdp_tensor gt = tpdp_tensor_1d(g, TPDP_F32, 4);
  ASSERT_TPDP_OK(tpdp_param_set_grad(p, &gt));
  EXPECT_EQ(tpdp_param_grad(p)->data, g);
  ASSERT_TPDP_OK(tpdp_param_set_grad(p, nullptr));
  EXPECT_EQ(tpdp_param_grad(p), nullptr);
  // Core treats the spec as an opaque token.
  const struct tpdp_spec *fake = reinterpret_cast<const struct tpdp_spec *>(g);
  ASSERT_TPDP_OK(tpdp_param_set_spec(p, fake));
  EXPECT_EQ(tpdp_param_get_form(p), TPDP_PARAM_DTENSOR);
  ASSERT_TPDP_OK(tpdp_param_set_form(p, TPDP_PARAM_LOCALIZED));
  EXPECT_EQ(tpdp_param_get_form(p), TPDP_PARAM_LOCALIZED);
  EXPECT_EQ(tpdp_param_spec(p), fake);
  EXPECT_TPDP_ERROR(tpdp_param_set_form(p, TPDP_PARAM_PLAIN),
                    TPDP_ERR_INVALID_ARGUMENT, "form 0");
  ASSERT_TPDP_OK(tpdp_param_set_spec(p, nullptr));
  EXPECT_EQ(tpdp_param_get_form(p), TPDP_PARAM_PLAIN);
  tpdp_tensor big = Vec(8);
  ASSERT_TPDP_OK(tpdp_param_set_tensor(p, &big));
  EXPECT_EQ(tpdp_param_tensor(p)->shape[0], 8);
  tpdp_tensor bad = big;
  bad.ndim = TPDP_MAX_DIMS + 1;
  EXPECT_TPDP_ERROR(tpdp_param_set_tensor(p, &bad), TPDP_ERR_TOO_MANY_DIMS,
                    "ndim 9");
  tpdp_param_release(p);
}

// The tree of the traversal tests:
//   Root
//     a: A          (params w)
//       x: X        (params p, q)
//       y: Y
//     b: B          (params w again = shared, r)
tpdp_module *TraversalTree(tpdp_param **shared) {
  tpdp_module *root = Make("Root");
  tpdp_module *a = AddChild(root, "a", "A");
  tpdp_module *x = AddChild(a, "x", "X");
  AddChild(a, "y", "Y");
  tpdp_module *b = AddChild(root, "b", "B");
  *shared = NewParam();
  EXPECT_EQ(tpdp_module_add_param(a, "w", *shared), TPDP_SUCCESS);
  AddParam(x, "p");
  AddParam(x, "q");
  EXPECT_EQ(tpdp_module_add_param(b, "w", *shared), TPDP_SUCCESS);
  AddParam(b, "r");
  tpdp_param_release(*shared);
  return root;
}

TEST(Traversal, PreOrderWithDottedPrefixAndLevel) {
  tpdp_param *w;
  tpdp_module *root = TraversalTree(&w);
  std::vector<Visit> v;
  ASSERT_TPDP_OK(tpdp_module_apply(root, Record, &v));
  std::vector<Visit> want = {{"Root", "", 0},
                             {"A", "a.", 1},
                             {"X", "a.x.", 2},
                             {"Y", "a.y.", 2},
                             {"B", "b.", 1}};
  ASSERT_EQ(v.size(), want.size());
  for (size_t i = 0; i < v.size(); i++) {
    EXPECT_EQ(v[i].cls, want[i].cls) << i;
    EXPECT_EQ(v[i].prefix, want[i].prefix) << i;
    EXPECT_EQ(v[i].level, want[i].level) << i;
  }
  // Applied on a subtree, prefixes start from that subtree.
  v.clear();
  tpdp_module *a = tpdp_module_child(root, 0, nullptr);
  ASSERT_TPDP_OK(tpdp_module_apply(a, Record, &v));
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[0].prefix, "");
  EXPECT_EQ(v[1].prefix, "x.");
  EXPECT_EQ(v[2].level, 1);
  ASSERT_TPDP_OK(tpdp_module_destroy(root));
}

tpdp_status StopAtX(tpdp_module *m, const char *, int, void *ctx) {
  ++*static_cast<int *>(ctx);
  if (std::string(tpdp_module_class_name(m)) == "X") return TPDP_ERR_NOT_FOUND;
  return TPDP_SUCCESS;
}

TEST(Traversal, VisitorErrorStops) {
  tpdp_param *w;
  tpdp_module *root = TraversalTree(&w);
  int calls = 0;
  EXPECT_EQ(tpdp_module_apply(root, StopAtX, &calls), TPDP_ERR_NOT_FOUND);
  EXPECT_EQ(calls, 3);  // Root, A, X
  ASSERT_TPDP_OK(tpdp_module_destroy(root));
}

TEST(Traversal, ParamToFqnsWithAndWithoutDedup) {
  tpdp_param *w;
  tpdp_module *root = TraversalTree(&w);
  tpdp_param_fqns *map = nullptr;
  // dedup: the shared w keeps only the FQN of its first encounter.
  ASSERT_TPDP_OK(tpdp_param_fqns_create(root, 1, nullptr, 0, &map));
  ASSERT_EQ(tpdp_param_fqns_count(map), 4);  // w, p, q, r
  EXPECT_EQ(tpdp_param_fqns_param(map, 0), w);
  ASSERT_EQ(tpdp_param_fqns_num(map, 0), 1);
  EXPECT_STREQ(tpdp_param_fqns_get(map, 0, 0), "a.w");
  EXPECT_STREQ(tpdp_param_fqns_get(map, 1, 0), "a.x.p");
  EXPECT_STREQ(tpdp_param_fqns_get(map, 2, 0), "a.x.q");
  EXPECT_STREQ(tpdp_param_fqns_get(map, 3, 0), "b.r");
  int idx = -1;
  ASSERT_TPDP_OK(tpdp_param_fqns_find(map, w, &idx));
  EXPECT_EQ(idx, 0);
  tpdp_param *stranger = NewParam();
  EXPECT_TPDP_ERROR(tpdp_param_fqns_find(map, stranger, &idx),
                    TPDP_ERR_NOT_FOUND, "not registered");
  tpdp_param_release(stranger);
  EXPECT_TPDP_OK(tpdp_param_fqns_destroy(map));
  // No dedup: every registration, in traversal order.
  ASSERT_TPDP_OK(tpdp_param_fqns_create(root, 0, nullptr, 0, &map));
  ASSERT_EQ(tpdp_param_fqns_count(map), 4);
  ASSERT_EQ(tpdp_param_fqns_num(map, 0), 2);
  EXPECT_STREQ(tpdp_param_fqns_get(map, 0, 0), "a.w");
  EXPECT_STREQ(tpdp_param_fqns_get(map, 0, 1), "b.w");
  EXPECT_EQ(tpdp_param_fqns_get(map, 0, 2), nullptr);
  EXPECT_STREQ(tpdp_param_fqns_get(map, 3, 0), "b.r");
  EXPECT_TPDP_OK(tpdp_param_fqns_destroy(map));
  ASSERT_TPDP_OK(tpdp_module_destroy(root));
}

// PyTorch FSDP's _get_param_to_fqns iterates named_parameters(recurse=False),
// which yields a parameter object once per module even when the module
// registers it under two names. Tree:
//   Root: emb (E), tied_again (E)    -- E twice in one module
//     dec: weight (E), bias (B), out (E)
//     enc: weight (E)
TEST(Traversal, ParamToFqnsListsAParameterOncePerModule) {
  tpdp_module *root = Make("Root");
  tpdp_module *dec = AddChild(root, "dec", "Linear");
  tpdp_module *enc = AddChild(root, "enc", "Embedding");
  tpdp_param *e = NewParam();
  ASSERT_TPDP_OK(tpdp_module_add_param(root, "emb", e));
  ASSERT_TPDP_OK(tpdp_module_add_param(root, "tied_again", e));
  ASSERT_TPDP_OK(tpdp_module_add_param(dec, "weight", e));
  AddParam(dec, "bias");
  ASSERT_TPDP_OK(tpdp_module_add_param(dec, "out", e));
  ASSERT_TPDP_OK(tpdp_module_add_param(enc, "weight", e));
  tpdp_param_release(e);
  tpdp_param_fqns *map = nullptr;
  ASSERT_TPDP_OK(tpdp_param_fqns_create(root, 0, nullptr, 0, &map));
  ASSERT_EQ(tpdp_param_fqns_count(map), 2);  // E, then dec.bias
  EXPECT_EQ(tpdp_param_fqns_param(map, 0), e);
  // Once per module, under the module's first name for it; each module in
  // traversal order.
  std::vector<std::string> got;
  for (int j = 0; j < tpdp_param_fqns_num(map, 0); j++)
    got.push_back(tpdp_param_fqns_get(map, 0, j));
  EXPECT_EQ(got, (std::vector<std::string>{"emb", "dec.weight", "enc.weight"}));
  ASSERT_EQ(tpdp_param_fqns_num(map, 1), 1);
  EXPECT_STREQ(tpdp_param_fqns_get(map, 1, 0), "dec.bias");
  EXPECT_TPDP_OK(tpdp_param_fqns_destroy(map));
  // With dedup: only the first encounter.
  ASSERT_TPDP_OK(tpdp_param_fqns_create(root, 1, nullptr, 0, &map));
  ASSERT_EQ(tpdp_param_fqns_num(map, 0), 1);
  EXPECT_STREQ(tpdp_param_fqns_get(map, 0, 0), "emb");
  EXPECT_EQ(tpdp_param_fqns_destroy(map), TPDP_SUCCESS);
  EXPECT_EQ(tpdp_param_fqns_destroy(nullptr), TPDP_SUCCESS);
  ASSERT_TPDP_OK(tpdp_module_destroy(root));
}

TEST(Fqn, CleanStripsEveryOccurrenceOfEachPrefix) {
  char buf[128];
  // Defaults: the FSDP and checkpoint wrapper prefixes.
  size_t n = tpdp_fqn_clean(
      "_fsdp_wrapped_module.layers.0._checkpoint_wrapped_module."
      "_fsdp_wrapped_module.attn.weight",
      nullptr, 0, buf, sizeof buf);
  EXPECT_STREQ(buf, "layers.0.attn.weight");
  EXPECT_EQ(n, strlen("layers.0.attn.weight"));
  // A configurable list, applied in order.
  const char *mine[] = {"wrap.", "module."};
  tpdp_fqn_clean("module.wrap.l1.module.bias", mine, 2, buf, sizeof buf);
  EXPECT_STREQ(buf, "l1.bias");
  // Order matters: after removing "ab", a new "ab" is not removed again by
  // the same prefix (str.replace is one left-to-right pass).
  const char *ab[] = {"ab"};
  tpdp_fqn_clean("aabb", ab, 1, buf, sizeof buf);
  EXPECT_STREQ(buf, "ab");
  // Disabled with an empty list.
  tpdp_fqn_clean("_fsdp_wrapped_module.x", mine, 0, buf, sizeof buf);
  EXPECT_STREQ(buf, "_fsdp_wrapped_module.x");
  // Truncated output still reports the full cleaned length.
  char small[4];
  EXPECT_EQ(tpdp_fqn_clean("_fsdp_wrapped_module.abcdef", nullptr, 0, small,
                           sizeof small),
            6u);
  EXPECT_STREQ(small, "abc");
  int nd = 0;
  const char *const *d = tpdp_fqn_default_prefixes(&nd);
  ASSERT_EQ(nd, 2);
  EXPECT_STREQ(d[0], "_fsdp_wrapped_module.");
  EXPECT_STREQ(d[1], "_checkpoint_wrapped_module.");
}

TEST(Fqn, ParamFqnsAreCleaned) {
  tpdp_module *root = Make("FSDP");
  tpdp_module *inner = AddChild(root, "_fsdp_wrapped_module", "Net");
  tpdp_module *l = AddChild(inner, "l", "Linear");
  AddParam(l, "weight");
  tpdp_param_fqns *map = nullptr;
  ASSERT_TPDP_OK(tpdp_param_fqns_create(root, 1, nullptr, 0, &map));
  EXPECT_STREQ(tpdp_param_fqns_get(map, 0, 0), "l.weight");
  EXPECT_TPDP_OK(tpdp_param_fqns_destroy(map));
  const char *none[] = {""};
  ASSERT_TPDP_OK(tpdp_param_fqns_create(root, 1, none, 0, &map));
  EXPECT_STREQ(tpdp_param_fqns_get(map, 0, 0), "_fsdp_wrapped_module.l.weight");
  EXPECT_TPDP_OK(tpdp_param_fqns_destroy(map));
  ASSERT_TPDP_OK(tpdp_module_destroy(root));
}

TEST(RootModules, ThoseWithoutAncestorInSet) {
  tpdp_param *w;
  tpdp_module *root = TraversalTree(&w);
  tpdp_module *a, *x, *y, *b;
  ASSERT_TPDP_OK(tpdp_module_get_submodule(root, "a", &a));
  ASSERT_TPDP_OK(tpdp_module_get_submodule(root, "a.x", &x));
  ASSERT_TPDP_OK(tpdp_module_get_submodule(root, "a.y", &y));
  ASSERT_TPDP_OK(tpdp_module_get_submodule(root, "b", &b));
  tpdp_module *out[8];
  int n = -1;
  // x lies under a; y under a; b stands alone.
  tpdp_module *set1[] = {x, b, a, y};
  ASSERT_TPDP_OK(tpdp_module_root_modules(set1, 4, out, &n));
  ASSERT_EQ(n, 2);
  EXPECT_EQ(out[0], b);
  EXPECT_EQ(out[1], a);
  // Siblings without their parent are all roots; duplicates once.
  tpdp_module *set2[] = {y, x, y};
  ASSERT_TPDP_OK(tpdp_module_root_modules(set2, 3, out, &n));
  ASSERT_EQ(n, 2);
  EXPECT_EQ(out[0], y);
  EXPECT_EQ(out[1], x);
  // The tree root dominates everything.
  tpdp_module *set3[] = {x, root, b};
  ASSERT_TPDP_OK(tpdp_module_root_modules(set3, 3, out, &n));
  ASSERT_EQ(n, 1);
  EXPECT_EQ(out[0], root);
  ASSERT_TPDP_OK(tpdp_module_root_modules(set3, 0, out, &n));
  EXPECT_EQ(n, 0);
  tpdp_module *set4[] = {x, nullptr};
  EXPECT_TPDP_ERROR(tpdp_module_root_modules(set4, 2, out, &n),
                    TPDP_ERR_NULL_POINTER, "set[1]");
  ASSERT_TPDP_OK(tpdp_module_destroy(root));
}

TEST(States, ModuleStateCheckNamesModuleExpectedActual) {
  tpdp_module *root = Make("Net");
  tpdp_module *u = AddChild(root, "u1", "UnitModule");
  EXPECT_EQ(tpdp_module_get_state(u), TPDP_STATE_IDLE);
  tpdp_training_state ok[] = {TPDP_STATE_IDLE, TPDP_STATE_FORWARD_BACKWARD};
  ASSERT_TPDP_OK(tpdp_module_check_state(u, ok, 2));
  ASSERT_TPDP_OK(tpdp_module_set_state(u, TPDP_STATE_SUMMON_FULL_PARAMS));
  EXPECT_TPDP_ERROR(tpdp_module_check_state(u, ok, 2), TPDP_ERR_STATE,
                    "u1[UnitModule]", "{IDLE, FORWARD_BACKWARD}",
                    "current state is SUMMON_FULL_PARAMS");
  EXPECT_TPDP_ERROR(
      tpdp_module_set_state(u, static_cast<tpdp_training_state>(7)),
      TPDP_ERR_INVALID_ARGUMENT, "7");
  EXPECT_STREQ(tpdp_training_state_name(TPDP_STATE_FORWARD_BACKWARD),
               "FORWARD_BACKWARD");
  ASSERT_TPDP_OK(tpdp_module_destroy(root));
}

TEST(States, SetFormAndStateOfAGroup) {
  const struct tpdp_spec *fake =
      reinterpret_cast<const struct tpdp_spec *>(g_storage);
  tpdp_param *a = NewParam(), *b = NewParam(), *plain = NewParam();
  ASSERT_TPDP_OK(tpdp_param_set_spec(a, fake));
  ASSERT_TPDP_OK(tpdp_param_set_spec(b, fake));
  tpdp_param *both[] = {a, b};
  ASSERT_TPDP_OK(tpdp_params_set_form_state(both, 2, TPDP_PARAM_LOCALIZED,
                                            TPDP_HANDLE_BACKWARD_PRE));
  for (tpdp_param *p : both) {
    EXPECT_EQ(tpdp_param_get_form(p), TPDP_PARAM_LOCALIZED);
    EXPECT_EQ(tpdp_param_get_state(p), TPDP_HANDLE_BACKWARD_PRE);
  }
  // A parameter without spec in the group: refused, naming its index, and
  // the others before it are not changed.
  tpdp_param *mixed[] = {a, plain, b};
  EXPECT_TPDP_ERROR(tpdp_params_set_form_state(mixed, 3, TPDP_PARAM_DTENSOR,
                                               TPDP_HANDLE_FORWARD),
                    TPDP_ERR_STATE, "params[1]", "no spec");
  EXPECT_EQ(tpdp_param_get_form(a), TPDP_PARAM_LOCALIZED);
  EXPECT_EQ(tpdp_param_get_state(a), TPDP_HANDLE_BACKWARD_PRE);
  EXPECT_EQ(tpdp_param_get_form(plain), TPDP_PARAM_PLAIN);
  tpdp_param *holes[] = {a, nullptr};
  EXPECT_TPDP_ERROR(tpdp_params_set_form_state(holes, 2, TPDP_PARAM_DTENSOR,
                                               TPDP_HANDLE_FORWARD),
                    TPDP_ERR_NULL_POINTER, "params[1]");
  EXPECT_TPDP_ERROR(tpdp_params_set_form_state(both, 2, TPDP_PARAM_PLAIN,
                                               TPDP_HANDLE_FORWARD),
                    TPDP_ERR_INVALID_ARGUMENT, "form 0");
  EXPECT_TPDP_ERROR(
      tpdp_params_set_form_state(both, 2, TPDP_PARAM_DTENSOR,
                                 static_cast<tpdp_handle_state>(9)),
      TPDP_ERR_INVALID_ARGUMENT, "handle state 9");
  EXPECT_EQ(tpdp_param_get_state(b), TPDP_HANDLE_BACKWARD_PRE);
  ASSERT_TPDP_OK(tpdp_params_set_form_state(nullptr, 0, TPDP_PARAM_DTENSOR,
                                            TPDP_HANDLE_IDLE));
  tpdp_param_release(a);
  tpdp_param_release(b);
  tpdp_param_release(plain);
}

TEST(States, HandleStateCheck) {
  tpdp_param *p = NewParam();
  EXPECT_EQ(tpdp_param_get_state(p), TPDP_HANDLE_IDLE);
  ASSERT_TPDP_OK(tpdp_param_set_state(p, TPDP_HANDLE_BACKWARD_PRE));
  tpdp_handle_state ok[] = {TPDP_HANDLE_FORWARD, TPDP_HANDLE_BACKWARD_POST};
  EXPECT_TPDP_ERROR(tpdp_param_check_state(p, ok, 2, "u1.l1.weight"),
                    TPDP_ERR_STATE, "u1.l1.weight", "{FORWARD, BACKWARD_POST}",
                    "current state is BACKWARD_PRE");
  tpdp_handle_state ok2[] = {TPDP_HANDLE_BACKWARD_PRE};
  ASSERT_TPDP_OK(tpdp_param_check_state(p, ok2, 1, "x"));
  const char *names[] = {"IDLE", "FORWARD", "BACKWARD_PRE", "BACKWARD_POST",
                         "SUMMON_FULL_PARAMS"};
  for (int i = 0; i < 5; i++)
    EXPECT_STREQ(tpdp_handle_state_name(static_cast<tpdp_handle_state>(i)),
                 names[i]);
  tpdp_param_release(p);
}

TEST(Management, MarkAllButIgnoredWithSetting) {
  tpdp_param *w;
  tpdp_module *root = TraversalTree(&w);
  tpdp_module *a, *x, *y, *b;
  tpdp_module_get_submodule(root, "a", &a);
  tpdp_module_get_submodule(root, "a.x", &x);
  tpdp_module_get_submodule(root, "a.y", &y);
  tpdp_module_get_submodule(root, "b", &b);
  tpdp_module *ignored[] = {a, b};
  ASSERT_TPDP_OK(tpdp_module_mark_managed(root, ignored, 2, 1));
  // Only the listed modules are skipped, not their subtrees (PyTorch FSDP's dynamo utils).
  EXPECT_TRUE(tpdp_module_is_managed(root));
  EXPECT_FALSE(tpdp_module_is_managed(a));
  EXPECT_TRUE(tpdp_module_is_managed(x));
  EXPECT_TRUE(tpdp_module_is_managed(y));
  EXPECT_FALSE(tpdp_module_is_managed(b));
  EXPECT_EQ(tpdp_module_managed_setting(x), 1);
  EXPECT_EQ(tpdp_module_managed_setting(a), 0);
  ASSERT_TPDP_OK(tpdp_module_mark_managed(root, nullptr, 0, 0));
  EXPECT_TRUE(tpdp_module_is_managed(a));
  EXPECT_EQ(tpdp_module_managed_setting(x), 0);
  ASSERT_TPDP_OK(tpdp_module_destroy(root));
}

TEST(Management, UnitMarks) {
  tpdp_module *root = Make("Net");
  tpdp_module *u = AddChild(root, "u", "Block");
  EXPECT_EQ(tpdp_module_unit_kind(u), nullptr);
  ASSERT_TPDP_OK(tpdp_module_set_unit(u, "DP", nullptr));
  EXPECT_STREQ(tpdp_module_unit_kind(u), "DP");
  EXPECT_TPDP_ERROR(tpdp_module_set_unit(u, "TP", " TP"), TPDP_ERR_ALREADY,
                    "u[Block]", "'DP'");
  ASSERT_TPDP_OK(tpdp_module_clear_unit(u));
  EXPECT_TPDP_ERROR(tpdp_module_clear_unit(u), TPDP_ERR_NOT_FOUND, "u[Block]");
  EXPECT_TPDP_ERROR(tpdp_module_set_unit(u, "", nullptr), TPDP_ERR_EMPTY_NAME,
                    "kind");
  ASSERT_TPDP_OK(tpdp_module_destroy(root));
}

// ------------------------------------------------------------------ hooks

struct Log {
  std::vector<std::string> calls;
  tpdp_hook_handle self{};
  tpdp_hook_handle other{};
};

struct HookCtx {
  Log *log;
  const char *tag;
  tpdp_status ret;
  int remove_self;
  int remove_other;
};

tpdp_status Hook(tpdp_module *m, void *vctx) {
  HookCtx *c = static_cast<HookCtx *>(vctx);
  c->log->calls.push_back(std::string(c->tag) + "@" +
                          tpdp_module_class_name(m));
  if (c->remove_self) tpdp_hook_remove(c->log->self);
  if (c->remove_other) tpdp_hook_remove(c->log->other);
  return c->ret;
}

TEST(Hooks, RunInRegistrationOrderAndRemove) {
  tpdp_module *m = Make("Block");
  Log log;
  HookCtx p1{&log, "pre1", TPDP_SUCCESS, 0, 0};
  HookCtx p2{&log, "pre2", TPDP_SUCCESS, 0, 0};
  HookCtx f1{&log, "post1", TPDP_SUCCESS, 0, 0};
  tpdp_hook_handle h1, h2, h3;
  ASSERT_TPDP_OK(tpdp_module_register_forward_pre_hook(m, Hook, &p1, &h1));
  ASSERT_TPDP_OK(tpdp_module_register_forward_hook(m, Hook, &f1, &h3));
  ASSERT_TPDP_OK(tpdp_module_register_forward_pre_hook(m, Hook, &p2, &h2));
  EXPECT_EQ(tpdp_module_num_hooks(m), 3);
  ASSERT_TPDP_OK(tpdp_module_forward_begin(m));
  ASSERT_TPDP_OK(tpdp_module_forward_end(m));
  std::vector<std::string> want = {"pre1@Block", "pre2@Block", "post1@Block"};
  EXPECT_EQ(log.calls, want);
  ASSERT_TPDP_OK(tpdp_hook_remove(h1));
  EXPECT_TPDP_ERROR(tpdp_hook_remove(h1), TPDP_ERR_ALREADY, "[Block]",
                    "already removed");
  tpdp_hook_handle bogus{m, 999};
  EXPECT_TPDP_ERROR(tpdp_hook_remove(bogus), TPDP_ERR_NOT_FOUND, "[Block]",
                    "999");
  log.calls.clear();
  ASSERT_TPDP_OK(tpdp_module_forward_begin(m));
  EXPECT_EQ(log.calls, std::vector<std::string>{"pre2@Block"});
  EXPECT_EQ(tpdp_module_num_hooks(m), 2);
  ASSERT_TPDP_OK(tpdp_module_destroy(m));
}

TEST(Param, RowShardRecordsWhichRowsTheViewHolds) {
  std::vector<float> d(12);
  int64_t shape[2] = {3, 4};  // rows 2..4 of a 6-row local tensor
  tpdp_tensor t;
  ASSERT_TPDP_OK(tpdp_tensor_init(&t, d.data(), TPDP_F32,
                                  tpdp_device{TPDP_DEVICE_CPU, 0}, 2, shape));
  tpdp_param *p = nullptr;
  ASSERT_TPDP_OK(tpdp_param_create(&t, &p));
  int64_t row0 = -7, total = -7;
  EXPECT_EQ(tpdp_param_row_shard(p, &row0, &total), 0);
  EXPECT_EQ(row0, -7);  // untouched when unset
  ASSERT_TPDP_OK(tpdp_param_set_row_shard(p, 2, 6));
  EXPECT_EQ(tpdp_param_row_shard(p, &row0, &total), 1);
  EXPECT_EQ(row0, 2);
  EXPECT_EQ(total, 6);
  // Rows 4..6 do not fit in 6 rows; nothing changes.
  EXPECT_TPDP_ERROR(tpdp_param_set_row_shard(p, 4, 6), TPDP_ERR_SHAPE_MISMATCH,
                    "rows [4, 7) of a 6-row local tensor", "has 3 rows");
  EXPECT_EQ(tpdp_param_row_shard(p, &row0, &total), 1);
  EXPECT_EQ(row0, 2);
  ASSERT_TPDP_OK(tpdp_param_set_row_shard(p, 0, -1));
  EXPECT_EQ(tpdp_param_row_shard(p, nullptr, nullptr), 0);
  EXPECT_EQ(tpdp_param_set_row_shard(nullptr, 0, 1), TPDP_ERR_NULL_POINTER);
  tpdp_param_release(p);
}

TEST(Hooks, BackwardHooksRunAroundBackwardAndAreRemovable) {
  tpdp_module *m = Make("Block");
  Log log;
  HookCtx fwd{&log, "fwd", TPDP_SUCCESS, 0, 0};
  HookCtx bpre{&log, "bpre", TPDP_SUCCESS, 0, 0};
  HookCtx bpost{&log, "bpost", TPDP_SUCCESS, 0, 0};
  HookCtx bad{&log, "bad", TPDP_ERR_STATE, 0, 0};
  tpdp_hook_handle hf, hb1, hb2, hbad;
  ASSERT_TPDP_OK(tpdp_module_register_forward_hook(m, Hook, &fwd, &hf));
  ASSERT_TPDP_OK(tpdp_module_register_backward_pre_hook(m, Hook, &bpre, &hb1));
  ASSERT_TPDP_OK(tpdp_module_register_backward_hook(m, Hook, &bpost, &hb2));
  EXPECT_EQ(tpdp_module_num_hooks(m), 3);
  // Backward hooks run only from backward_begin/end, forward ones only from
  // forward_begin/end.
  ASSERT_TPDP_OK(tpdp_module_backward_begin(m));
  ASSERT_TPDP_OK(tpdp_module_backward_end(m));
  EXPECT_EQ(log.calls, (std::vector<std::string>{"bpre@Block", "bpost@Block"}));
  EXPECT_EQ(tpdp_module_in_forward(m), 0);
  log.calls.clear();
  ASSERT_TPDP_OK(tpdp_module_forward_begin(m));
  ASSERT_TPDP_OK(tpdp_module_forward_end(m));
  EXPECT_EQ(log.calls, std::vector<std::string>{"fwd@Block"});
  // A failing pre-backward hook stops the run with its status.
  ASSERT_TPDP_OK(tpdp_module_register_backward_pre_hook(m, Hook, &bad, &hbad));
  log.calls.clear();
  EXPECT_EQ(tpdp_module_backward_begin(m), TPDP_ERR_STATE);
  EXPECT_EQ(log.calls, (std::vector<std::string>{"bpre@Block", "bad@Block"}));
  ASSERT_TPDP_OK(tpdp_hook_remove(hbad));
  ASSERT_TPDP_OK(tpdp_hook_remove(hb1));
  EXPECT_TPDP_ERROR(tpdp_hook_remove(hb1), TPDP_ERR_ALREADY, "[Block]",
                    "already removed");
  log.calls.clear();
  ASSERT_TPDP_OK(tpdp_module_backward_begin(m));
  ASSERT_TPDP_OK(tpdp_module_backward_end(m));
  EXPECT_EQ(log.calls, std::vector<std::string>{"bpost@Block"});
  EXPECT_EQ(tpdp_module_num_hooks(m), 2);
  EXPECT_EQ(tpdp_module_backward_begin(nullptr), TPDP_ERR_NULL_POINTER);
  ASSERT_TPDP_OK(tpdp_module_destroy(m));
}

TEST(Hooks, ErrorStopsTheRunAndPropagates) {
  tpdp_module *root = Make("Net");
  tpdp_module *c = AddChild(root, "c", "Child");
  Log log;
  HookCtx ok{&log, "a", TPDP_SUCCESS, 0, 0};
  HookCtx bad{&log, "b", TPDP_ERR_SHAPE_MISMATCH, 0, 0};
  HookCtx never{&log, "c", TPDP_SUCCESS, 0, 0};
  tpdp_hook_handle h;
  ASSERT_TPDP_OK(tpdp_module_register_forward_hook(c, Hook, &ok, &h));
  ASSERT_TPDP_OK(tpdp_module_register_forward_hook(c, Hook, &bad, &h));
  ASSERT_TPDP_OK(tpdp_module_register_forward_hook(c, Hook, &never, &h));
  EXPECT_EQ(tpdp_module_forward_end(c), TPDP_ERR_SHAPE_MISMATCH);
  EXPECT_EQ(log.calls, (std::vector<std::string>{"a@Child", "b@Child"}));
  // Pre-hooks of the child and hooks of the root are separate lists.
  log.calls.clear();
  ASSERT_TPDP_OK(tpdp_module_forward_begin(c));
  ASSERT_TPDP_OK(tpdp_module_forward_end(root));
  EXPECT_TRUE(log.calls.empty());
  ASSERT_TPDP_OK(tpdp_module_destroy(root));
}

TEST(Hooks, RemovalFromInsideAHook) {
  tpdp_module *m = Make("M");
  Log log;
  HookCtx first{&log, "first", TPDP_SUCCESS, 1, 1};  // removes self, second
  HookCtx second{&log, "second", TPDP_SUCCESS, 0, 0};
  HookCtx third{&log, "third", TPDP_SUCCESS, 0, 0};
  tpdp_hook_handle h3;
  ASSERT_TPDP_OK(
      tpdp_module_register_forward_pre_hook(m, Hook, &first, &log.self));
  ASSERT_TPDP_OK(
      tpdp_module_register_forward_pre_hook(m, Hook, &second, &log.other));
  ASSERT_TPDP_OK(tpdp_module_register_forward_pre_hook(m, Hook, &third, &h3));
  ASSERT_TPDP_OK(tpdp_module_forward_begin(m));
  EXPECT_EQ(log.calls, (std::vector<std::string>{"first@M", "third@M"}));
  EXPECT_EQ(tpdp_module_num_hooks(m), 1);
  EXPECT_TPDP_ERROR(tpdp_hook_remove(log.self), TPDP_ERR_ALREADY, "[M]");
  log.calls.clear();
  ASSERT_TPDP_OK(tpdp_module_forward_begin(m));
  EXPECT_EQ(log.calls, std::vector<std::string>{"third@M"});
  ASSERT_TPDP_OK(tpdp_module_destroy(m));
}

struct AddCtx {
  int runs = 0;
  int added_runs = 0;
  tpdp_hook_handle added{};
};

tpdp_status Added(tpdp_module *, void *ctx) {
  static_cast<AddCtx *>(ctx)->added_runs++;
  return TPDP_SUCCESS;
}

tpdp_status Adder(tpdp_module *m, void *ctx) {
  AddCtx *c = static_cast<AddCtx *>(ctx);
  if (c->runs++ == 0)
    return tpdp_module_register_forward_pre_hook(m, Added, c, &c->added);
  return TPDP_SUCCESS;
}

TEST(Hooks, RegisteredDuringARunWaitsForTheNextRun) {
  tpdp_module *m = Make("M");
  AddCtx c;
  tpdp_hook_handle h;
  ASSERT_TPDP_OK(tpdp_module_register_forward_pre_hook(m, Adder, &c, &h));
  ASSERT_TPDP_OK(tpdp_module_forward_begin(m));
  EXPECT_EQ(c.added_runs, 0);
  EXPECT_EQ(tpdp_module_num_hooks(m), 2);
  ASSERT_TPDP_OK(tpdp_module_forward_begin(m));
  EXPECT_EQ(c.added_runs, 1);
  ASSERT_TPDP_OK(tpdp_hook_remove(c.added));
  ASSERT_TPDP_OK(tpdp_module_destroy(m));
}

struct InForwardSeen {
  tpdp_module *m;
  std::vector<int> seen;
  tpdp_status ret = TPDP_SUCCESS;
};

tpdp_status SeeInForward(tpdp_module *, void *ctx) {
  auto *c = static_cast<InForwardSeen *>(ctx);
  c->seen.push_back(tpdp_module_in_forward(c->m));
  return c->ret;
}

TEST(Hooks, InForwardBetweenBeginAndEnd) {
  tpdp_module *root = Make("Net");
  tpdp_module *child = AddChild(root, "c", "Child");
  EXPECT_EQ(tpdp_module_in_forward(nullptr), 0);
  EXPECT_EQ(tpdp_module_in_forward(root), 0);
  InForwardSeen pre{root}, post{root};
  tpdp_hook_handle h1, h2;
  ASSERT_TPDP_OK(
      tpdp_module_register_forward_pre_hook(root, SeeInForward, &pre, &h1));
  ASSERT_TPDP_OK(
      tpdp_module_register_forward_hook(root, SeeInForward, &post, &h2));
  ASSERT_TPDP_OK(tpdp_module_forward_begin(root));
  EXPECT_EQ(tpdp_module_in_forward(root), 1);
  EXPECT_EQ(tpdp_module_in_forward(child), 0);  // only m's own calls count
  // A nested forward of the same module (called again inside its forward).
  ASSERT_TPDP_OK(tpdp_module_forward_begin(root));
  ASSERT_TPDP_OK(tpdp_module_forward_end(root));
  EXPECT_EQ(tpdp_module_in_forward(root), 1);  // the outer one goes on
  ASSERT_TPDP_OK(tpdp_module_forward_end(root));
  EXPECT_EQ(tpdp_module_in_forward(root), 0);
  // Hooks of both kinds run inside the forward.
  EXPECT_EQ(pre.seen, (std::vector<int>{1, 1}));
  EXPECT_EQ(post.seen, (std::vector<int>{1, 1}));
  // forward_end without forward_begin runs the hooks and stays at 0.
  ASSERT_TPDP_OK(tpdp_module_forward_end(root));
  EXPECT_EQ(tpdp_module_in_forward(root), 0);
  // A failing pre-hook: the forward did not start.
  pre.ret = TPDP_ERR_STATE;
  EXPECT_EQ(tpdp_module_forward_begin(root), TPDP_ERR_STATE);
  EXPECT_EQ(tpdp_module_in_forward(root), 0);
  pre.ret = TPDP_SUCCESS;
  // A failing forward hook: the forward ends anyway.
  ASSERT_TPDP_OK(tpdp_module_forward_begin(root));
  post.ret = TPDP_ERR_STATE;
  EXPECT_EQ(tpdp_module_forward_end(root), TPDP_ERR_STATE);
  EXPECT_EQ(tpdp_module_in_forward(root), 0);
  ASSERT_TPDP_OK(tpdp_module_destroy(root));
}

TEST(Hooks, BadArguments) {
  tpdp_module *m = Make("M");
  tpdp_hook_handle h;
  EXPECT_TPDP_ERROR(tpdp_module_register_forward_hook(m, nullptr, nullptr, &h),
                    TPDP_ERR_NULL_POINTER, "fn");
  EXPECT_TPDP_ERROR(tpdp_hook_remove(tpdp_hook_handle{nullptr, 1}),
                    TPDP_ERR_NULL_POINTER, "no module");
  EXPECT_TPDP_ERROR(tpdp_module_forward_begin(nullptr), TPDP_ERR_NULL_POINTER,
                    "m");
  EXPECT_TPDP_ERROR(tpdp_module_apply(m, nullptr, nullptr),
                    TPDP_ERR_NULL_POINTER, "fn");
  ASSERT_TPDP_OK(tpdp_module_destroy(m));
}

// --------------------------------------------------------- attached state

int g_freed = 0;
void FreeCounter(void *p) { g_freed += *static_cast<int *>(p); }

TEST(AttachedState, AttachReplaceRemoveAndFreeOnDestroy) {
  tpdp_module *m = Make("M");
  int one = 1, ten = 10, hundred = 100;
  g_freed = 0;
  EXPECT_EQ(tpdp_module_attached_state(m, "k"), nullptr);
  ASSERT_TPDP_OK(tpdp_module_attach_state(m, "k", &one, FreeCounter));
  EXPECT_EQ(tpdp_module_attached_state(m, "k"), &one);
  // Replacing frees the old state, removing (NULL) the current one.
  ASSERT_TPDP_OK(tpdp_module_attach_state(m, "k", &ten, FreeCounter));
  EXPECT_EQ(g_freed, 1);
  ASSERT_TPDP_OK(tpdp_module_attach_state(m, "k", nullptr, nullptr));
  EXPECT_EQ(g_freed, 11);
  EXPECT_EQ(tpdp_module_attached_state(m, "k"), nullptr);
  ASSERT_TPDP_OK(tpdp_module_attach_state(m, "j", &hundred, FreeCounter));
  ASSERT_TPDP_OK(tpdp_module_destroy(m));  // frees 100
  EXPECT_EQ(g_freed, 111);
}

}  // namespace
