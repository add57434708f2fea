// SPDX-License-Identifier: BSD-3-Clause
// Misuse of include/tpdp/module.h: each case asserts the status and that the
// message names the module ("fqn[Class]"), the name or index at fault and
// the expected and actual values.
// Cases:
//  - tpdp_module_create: NULL and empty class name
//  - tpdp_module_destroy of a child (owned by its parent)
//  - tpdp_module_add_child: a cycle (itself, an ancestor), a child that has
//    a parent already, names that are empty, contain '.', or are taken
//  - tpdp_module_add_param / _add_buffer: duplicate and NULL names
//  - tpdp_module_get_submodule: unknown FQN component
//  - tpdp_param_create: NULL tensor, ndim 9
//  - tpdp_param_set_form on a plain parameter, a bad form
//  - tpdp_param_set_state / tpdp_module_set_state out of range
//  - tpdp_params_set_form_state: negative count, NULL entry, no spec
//  - tpdp_param_check_state / tpdp_module_check_state: wrong state named
//  - tpdp_module_root_modules: negative count, NULL entry
//  - tpdp_module_set_unit twice, empty kind; tpdp_module_clear_unit of a
//    module that is no unit
//  - tpdp_hook_remove twice, of an id never issued, of an empty handle
//  - tpdp_param_fqns_find of a parameter not in the tree
#include <cstdint>

#include "tests/test_util.h"

namespace {

const tpdp_device kCpu = {TPDP_DEVICE_CPU, 0};

// A root "[Net]" with child "enc[Block]" holding parameter "weight".
struct Tree {
  tpdp_module *root = nullptr, *enc = nullptr;
  tpdp_param *w = nullptr;
  float data[6] = {0};
  Tree() {
    EXPECT_TPDP_OK(tpdp_module_create("Net", &root));
    EXPECT_TPDP_OK(tpdp_module_create("Block", &enc));
    EXPECT_TPDP_OK(tpdp_module_add_child(root, "enc", enc));
    int64_t shape[2] = {2, 3};
    tpdp_tensor t;
    EXPECT_TPDP_OK(tpdp_tensor_init(&t, data, TPDP_F32, kCpu, 2, shape));
    EXPECT_TPDP_OK(tpdp_param_create(&t, &w));
    EXPECT_TPDP_OK(tpdp_module_add_param(enc, "weight", w));
  }
  ~Tree() {
    tpdp_param_release(w);
    EXPECT_TPDP_OK(tpdp_module_destroy(root));
  }
};

tpdp_status Ok(void *) { return TPDP_SUCCESS; }
tpdp_status OkHook(tpdp_module *, void *) { return TPDP_SUCCESS; }

TEST(ModuleMisuse, CreateNullAndEmptyClassName) {
  tpdp_module *m = nullptr;
  EXPECT_TPDP_ERROR(tpdp_module_create(nullptr, &m), TPDP_ERR_NULL_POINTER,
                    "tpdp_module_create: ", "'class_name' is NULL");
  EXPECT_TPDP_ERROR(tpdp_module_create("", &m), TPDP_ERR_EMPTY_NAME,
                    "empty class name");
  EXPECT_EQ(m, nullptr);
}

TEST(ModuleMisuse, DestroyOfAChildNamesItAndTheFix) {
  Tree t;
  EXPECT_TPDP_ERROR(tpdp_module_destroy(t.enc), TPDP_ERR_STATE,
                    "tpdp_module_destroy: ", "module 'enc[Block]'",
                    "owned by its parent; destroy the root");
}

TEST(ModuleMisuse, AddChildCycle) {
  Tree t;
  EXPECT_TPDP_ERROR(tpdp_module_add_child(t.enc, "loop", t.root),
                    TPDP_ERR_CYCLE, "adding module '[Net]' as child 'loop'",
                    "of 'enc[Block]'", "an ancestor of the parent");
  EXPECT_TPDP_ERROR(tpdp_module_add_child(t.enc, "self", t.enc), TPDP_ERR_CYCLE,
                    "the parent itself");
}

TEST(ModuleMisuse, AddChildThatHasAParent) {
  Tree t;
  tpdp_module *other = nullptr;
  ASSERT_TPDP_OK(tpdp_module_create("Other", &other));
  EXPECT_TPDP_ERROR(tpdp_module_add_child(other, "again", t.enc),
                    TPDP_ERR_STATE, "module 'enc[Block]' already has a parent",
                    "child 'again' of '[Other]'");
  EXPECT_TPDP_OK(tpdp_module_destroy(other));
}

TEST(ModuleMisuse, ChildNamesEmptyDottedTaken) {
  Tree t;
  tpdp_module *c = nullptr;
  ASSERT_TPDP_OK(tpdp_module_create("Leaf", &c));
  EXPECT_TPDP_ERROR(tpdp_module_add_child(t.root, "", c), TPDP_ERR_EMPTY_NAME,
                    "empty child name in module '[Net]'");
  EXPECT_TPDP_ERROR(tpdp_module_add_child(t.root, "a.b", c),
                    TPDP_ERR_INVALID_ARGUMENT,
                    "child name 'a.b' in module '[Net]' contains '.'");
  EXPECT_TPDP_ERROR(tpdp_module_add_child(t.root, "enc", c), TPDP_ERR_DUPLICATE,
                    "module '[Net]' already has a child named 'enc'");
  EXPECT_TPDP_OK(tpdp_module_destroy(c));  // still ours: every add failed
}

TEST(ModuleMisuse, ParamAndBufferNameTakenOrNull) {
  Tree t;
  EXPECT_TPDP_ERROR(tpdp_module_add_param(t.enc, "weight", t.w),
                    TPDP_ERR_DUPLICATE,
                    "module 'enc[Block]' already has a parameter named "
                    "'weight' (adding parameter)");
  tpdp_tensor b = tpdp_tensor_1d(t.data, TPDP_F32, 2);
  EXPECT_TPDP_ERROR(
      tpdp_module_add_buffer(t.enc, "weight", &b), TPDP_ERR_DUPLICATE,
      "already has a parameter named 'weight'", "(adding buffer)");
  EXPECT_TPDP_ERROR(tpdp_module_add_param(t.enc, nullptr, t.w),
                    TPDP_ERR_NULL_POINTER, "parameter name is NULL");
}

TEST(ModuleMisuse, GetSubmoduleUnknownFqn) {
  Tree t;
  tpdp_module *out = nullptr;
  EXPECT_TPDP_ERROR(tpdp_module_get_submodule(t.root, "enc.attn.q", &out),
                    TPDP_ERR_NOT_FOUND, "tpdp_module_get_submodule: ",
                    "path 'enc.attn.q': module 'enc[Block]' has no child "
                    "'attn'");
  EXPECT_EQ(out, nullptr);
}

TEST(ModuleMisuse, ParamCreateNullAndTooManyDims) {
  tpdp_param *p = nullptr;
  EXPECT_TPDP_ERROR(tpdp_param_create(nullptr, &p), TPDP_ERR_NULL_POINTER,
                    "tpdp_param_create: ", "'tensor' is NULL");
  tpdp_tensor t = tpdp_tensor_1d(nullptr, TPDP_F32, 0);
  t.ndim = 9;
  EXPECT_TPDP_ERROR(tpdp_param_create(&t, &p), TPDP_ERR_TOO_MANY_DIMS,
                    "tensor ndim 9 outside [0, 8]");
  EXPECT_EQ(p, nullptr);
}

TEST(ModuleMisuse, SetFormOfAPlainParameter) {
  Tree t;
  EXPECT_TPDP_ERROR(tpdp_param_set_form(t.w, TPDP_PARAM_LOCALIZED),
                    TPDP_ERR_STATE, "tpdp_param_set_form: ",
                    "parameter has no spec: it cannot become LOCALIZED");
  EXPECT_TPDP_ERROR(tpdp_param_set_form(t.w, TPDP_PARAM_PLAIN),
                    TPDP_ERR_INVALID_ARGUMENT,
                    "form 0 is not DTENSOR (1) or LOCALIZED (2)",
                    "tpdp_param_set_spec(p, NULL)");
}

TEST(ModuleMisuse, StatesOutOfRange) {
  Tree t;
  EXPECT_TPDP_ERROR(tpdp_param_set_state(t.w, (tpdp_handle_state)7),
                    TPDP_ERR_INVALID_ARGUMENT, "handle state 7 outside [0, 4]");
  EXPECT_TPDP_ERROR(tpdp_module_set_state(t.root, (tpdp_training_state)-1),
                    TPDP_ERR_INVALID_ARGUMENT,
                    "training state -1 outside [0, 2]");
}

TEST(ModuleMisuse, SetFormStateBadArguments) {
  Tree t;
  tpdp_param *ps[2] = {t.w, nullptr};
  EXPECT_TPDP_ERROR(
      tpdp_params_set_form_state(ps, -1, TPDP_PARAM_DTENSOR, TPDP_HANDLE_IDLE),
      TPDP_ERR_INVALID_ARGUMENT, "parameter count n = -1 is negative");
  EXPECT_TPDP_ERROR(
      tpdp_params_set_form_state(ps, 2, TPDP_PARAM_DTENSOR, TPDP_HANDLE_IDLE),
      TPDP_ERR_STATE, "params[0] has no spec");
  ps[0] = nullptr;
  EXPECT_TPDP_ERROR(
      tpdp_params_set_form_state(ps, 1, TPDP_PARAM_DTENSOR, TPDP_HANDLE_IDLE),
      TPDP_ERR_NULL_POINTER, "params[0] is NULL");
}

TEST(ModuleMisuse, CheckStateNamesExpectedAndActual) {
  Tree t;
  ASSERT_TPDP_OK(tpdp_param_set_state(t.w, TPDP_HANDLE_SUMMON_FULL_PARAMS));
  tpdp_handle_state ok[2] = {TPDP_HANDLE_IDLE, TPDP_HANDLE_BACKWARD_PRE};
  EXPECT_TPDP_ERROR(tpdp_param_check_state(t.w, ok, 2, "enc.weight"),
                    TPDP_ERR_STATE, "parameter 'enc.weight'", "IDLE",
                    "BACKWARD_PRE", "current state is SUMMON_FULL_PARAMS");
  ASSERT_TPDP_OK(tpdp_module_set_state(t.enc, TPDP_STATE_FORWARD_BACKWARD));
  tpdp_training_state idle = TPDP_STATE_IDLE;
  EXPECT_TPDP_ERROR(tpdp_module_check_state(t.enc, &idle, 1), TPDP_ERR_STATE,
                    "module 'enc[Block]'", "IDLE",
                    "current state is FORWARD_BACKWARD");
}

TEST(ModuleMisuse, RootModulesBadArguments) {
  Tree t;
  tpdp_module *set[2] = {t.root, nullptr}, *out[2];
  int n = -1;
  EXPECT_TPDP_ERROR(tpdp_module_root_modules(set, -3, out, &n),
                    TPDP_ERR_INVALID_ARGUMENT,
                    "module count n = -3 is negative");
  EXPECT_TPDP_ERROR(tpdp_module_root_modules(set, 2, out, &n),
                    TPDP_ERR_NULL_POINTER, "set[1] is NULL");
}

TEST(ModuleMisuse, UnitTwiceEmptyKindAndClearOfNoUnit) {
  Tree t;
  ASSERT_TPDP_OK(tpdp_module_set_unit(t.enc, "TP", nullptr));
  EXPECT_TPDP_ERROR(tpdp_module_set_unit(t.enc, "DP", nullptr),
                    TPDP_ERR_ALREADY,
                    "module 'enc[Block]' is already a managed unit (kind "
                    "'TP')");
  EXPECT_TPDP_ERROR(tpdp_module_set_unit(t.root, "", nullptr),
                    TPDP_ERR_EMPTY_NAME, "empty unit kind");
  EXPECT_TPDP_ERROR(tpdp_module_clear_unit(t.root), TPDP_ERR_NOT_FOUND,
                    "module '[Net]' is not a managed unit");
}

TEST(ModuleMisuse, HookRemovedTwiceOrNeverIssued) {
  Tree t;
  tpdp_hook_handle h;
  ASSERT_TPDP_OK(tpdp_module_register_forward_hook(t.enc, OkHook, nullptr, &h));
  ASSERT_TPDP_OK(tpdp_hook_remove(h));
  EXPECT_TPDP_ERROR(tpdp_hook_remove(h), TPDP_ERR_ALREADY,
                    "of module 'enc[Block]' was already removed");
  tpdp_hook_handle bogus = {t.enc, 999};
  EXPECT_TPDP_ERROR(tpdp_hook_remove(bogus), TPDP_ERR_NOT_FOUND,
                    "module 'enc[Block]' never registered a hook with id 999");
  tpdp_hook_handle empty = {nullptr, 1};
  EXPECT_TPDP_ERROR(tpdp_hook_remove(empty), TPDP_ERR_NULL_POINTER,
                    "hook handle has no module");
  (void)Ok;
}

TEST(ModuleMisuse, FqnsFindOfAParameterNotInTheTree) {
  Tree t;
  tpdp_param_fqns *map = nullptr;
  ASSERT_TPDP_OK(tpdp_param_fqns_create(t.root, 1, nullptr, 0, &map));
  tpdp_tensor x = tpdp_tensor_1d(t.data, TPDP_F32, 1);
  tpdp_param *stranger = nullptr;
  ASSERT_TPDP_OK(tpdp_param_create(&x, &stranger));
  int idx = -1;
  EXPECT_TPDP_ERROR(tpdp_param_fqns_find(map, stranger, &idx),
                    TPDP_ERR_NOT_FOUND,
                    "tpdp_param_fqns_find: ", "is not registered in the tree");
  tpdp_param_release(stranger);
  EXPECT_TPDP_OK(tpdp_param_fqns_destroy(map));
}

}  // namespace
