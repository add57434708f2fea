"""Shared build settings and macros for tpdp."""

# Library code: C11, all warnings are errors.
TPDP_COPTS = [
    "-std=c11",
    "-Wall",
    "-Wextra",
    "-Werror",
    "-D_GNU_SOURCE",
    # Only the API (TPDP_API in include/tpdp/*.h) leaves libtpdp.so.
    "-fvisibility=hidden",
]

# Tests: C++17 GoogleTest.
TPDP_TEST_COPTS = [
    "-std=c++17",
    "-Wall",
    "-Wno-sign-compare",
]

def tpdp_test(name, srcs, deps = [], data = [], args = [], **kwargs):
    """A single-process GoogleTest calling the C API.

    `deps` names the tpdp libraries under test (e.g. "//tp"), so that a
    broken layer does not stop the tests of the others from building."""
    native.cc_test(
        name = name,
        srcs = srcs,
        copts = TPDP_TEST_COPTS,
        deps = deps + ["//tests:test_util", "//tests:gtest_main", "@gtest//:gtest"],
        data = data,
        args = args,
        **kwargs
    )

def tpdp_mpi_test(name, srcs, np, deps = [], data = [], args = [], tags = [], **kwargs):
    """A GoogleTest run on `np` MPI ranks through tests/mpirun_test.sh.

    Tagged exclusive: several oversubscribed mpirun jobs at once on a
    2-core machine would starve each other."""
    native.cc_binary(
        name = name + "_bin",
        srcs = srcs,
        copts = TPDP_TEST_COPTS,
        deps = deps + ["//tests:test_util", "//tests:mpi_main", "@gtest//:gtest"],
        testonly = True,
    )
    native.sh_test(
        name = name,
        srcs = ["//tests:mpirun_test.sh"],
        args = [str(np), "$(location :%s_bin)" % name] + args,
        data = data + [":%s_bin" % name],
        tags = tags + ["exclusive", "mpi"],
        **kwargs
    )
