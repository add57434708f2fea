// SPDX-License-Identifier: BSD-3-Clause
// Use of a destroyed module (core/module.c): refused with
// TPDP_ERR_INVALID_ARGUMENT naming the argument, as far as a magic field
// cleared on destroy goes (the freed memory is read on purpose, so the
// tests skip under ASan and valgrind, which report that read).
#include "tests/test_util.h"

TEST(ModuleLifetime, DestroyedModuleIsRefused) {
  if (tpdp_test::FreedMemoryChecked())
    GTEST_SKIP() << "reads a freed module on purpose: not under ASan or "
                    "valgrind";
  tpdp_module *root = nullptr, *child = nullptr;
  ASSERT_TPDP_OK(tpdp_module_create("Net", &root));
  ASSERT_TPDP_OK(tpdp_module_create("Linear", &child));
  ASSERT_TPDP_OK(tpdp_module_add_child(root, "fc", child));
  tpdp_hook_handle h;
  ASSERT_TPDP_OK(tpdp_module_register_forward_hook(
      child, [](tpdp_module *, void *) { return TPDP_SUCCESS; }, nullptr, &h));
  ASSERT_TPDP_OK(tpdp_module_destroy(root));
  EXPECT_TPDP_ERROR(tpdp_module_destroy(root), TPDP_ERR_INVALID_ARGUMENT,
                    "tpdp_module_destroy: argument 'm' (",
                    "is a module that has been destroyed (tpdp_module_destroy "
                    "of its root)");
  // The subtree went with the root.
  EXPECT_TPDP_ERROR(
      tpdp_module_set_state(child, TPDP_STATE_IDLE), TPDP_ERR_INVALID_ARGUMENT,
      "tpdp_module_set_state: argument 'm' (", "has been destroyed");
  EXPECT_TPDP_ERROR(tpdp_module_forward_begin(child), TPDP_ERR_INVALID_ARGUMENT,
                    "has been destroyed");
  EXPECT_TPDP_ERROR(tpdp_hook_remove(h), TPDP_ERR_INVALID_ARGUMENT,
                    "argument 'h.module' (", "has been destroyed");
  tpdp_module *other = nullptr;
  ASSERT_TPDP_OK(tpdp_module_create("Other", &other));
  EXPECT_TPDP_ERROR(tpdp_module_add_child(root, "x", other),
                    TPDP_ERR_INVALID_ARGUMENT, "argument 'parent' (",
                    "has been destroyed");
  EXPECT_TPDP_OK(tpdp_module_destroy(other));
}

// A live module is never mistaken for a destroyed one, and NULL stays a
// NULL-pointer error.
TEST(ModuleLifetime, LiveAndNullModules) {
  tpdp_module *m = nullptr;
  ASSERT_TPDP_OK(tpdp_module_create("Net", &m));
  EXPECT_TPDP_OK(tpdp_module_set_state(m, TPDP_STATE_FORWARD_BACKWARD));
  EXPECT_TPDP_ERROR(tpdp_module_set_state(nullptr, TPDP_STATE_IDLE),
                    TPDP_ERR_NULL_POINTER, "argument 'm' is NULL");
  EXPECT_TPDP_OK(tpdp_module_destroy(m));
  EXPECT_TPDP_OK(tpdp_module_destroy(nullptr));
}
