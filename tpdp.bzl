# SPDX-License-Identifier: BSD-3-Clause
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

# Who may depend on each layer's own targets (//core, //comm, ...):
# DESIGN.md's arrows, which point down only, so that a dependency against
# them is a build error ("target '//dp:dp' is not visible from target
# '//tp:tp'"). A layer's headers include the internal ones (core/check.h,
# comm/services.h, *_internal.h), so programs (tools/, examples/, bench/)
# link //:tpdp and see the API of include/tpdp/ only. Beside each layer
# that may use it, its probe package under tests/layering/ (the same rights:
# //tests/layering:check builds deliberately bad targets there and passes
# only if Bazel refuses them).
_LAYERS_ABOVE = {
    "core": ["comm", "topo", "tp", "dp", "ckpt"],
    "comm": ["topo", "tp", "dp", "ckpt"],
    "topo": ["tp", "dp", "ckpt"],
    "tp": ["ckpt"],  # specs; tp and dp never see each other
    "dp": [],
    "ckpt": [],  # never dp
}

def tpdp_layer_visibility(layer):
    """The visibility of `layer`'s targets: the layers above it (and their
    probes in tests/layering/), the root package (//:tpdp, libtpdp.a) and
    the tests (//:tests: every package under tests/ but the probes)."""
    return ["//%s:__pkg__" % above for above in _LAYERS_ABOVE[layer]] + [
        "//tests/layering/%s:__pkg__" % above
        for above in _LAYERS_ABOVE[layer]
    ] + ["//:__pkg__", "//:tests"]

# Programs built on the library (tools/, examples/, bench/) and their
# tests: nothing in the library (nor its probes in tests/layering/) may
# depend on them.
TPDP_PROGRAM_VISIBILITY = [
    "//:tests",
    "//bench:__subpackages__",
    "//examples:__subpackages__",
    "//tools:__subpackages__",
]

def tpdp_layer(name, deps = [], srcs = None, hdrs = None, copts = [],
               cuda_srcs = [], cuda_deps = [], local_defines = [], **kwargs):
    """The library target of one layer (core/, comm/, topo/, tp/, dp/,
    ckpt/), with the settings every layer shares.

    `srcs` and `hdrs` default to the folder's *.c and *.h files. `deps`
    come on top of //:headers (the public headers), `copts` on top of
    TPDP_COPTS. `cuda_srcs` and `cuda_deps` are added in --config=cuda
    builds only (through a select on //:cuda), so that the default build
    never needs the CUDA toolkit. The layer's own sources are compiled
    with TPDP_LAYER_<FOLDER> defined (TPDP_LAYER_TP in tp/ and in its probe
    tests/layering/tp/), on top of `local_defines`: an internal header
    that a dependency cannot hide from the layers above (comm/backend.h)
    refuses to compile there. Other arguments (defines, visibility...) go
    to cc_library as they are."""
    layer = native.package_name().split("/")[-1]
    local_defines = ["TPDP_LAYER_" + layer.upper()] + local_defines
    srcs = native.glob(["*.c"]) if srcs == None else srcs
    deps = ["//:headers"] + deps
    if cuda_srcs:
        srcs = srcs + select({"//:cuda": cuda_srcs, "//conditions:default": []})
    if cuda_deps:
        deps = deps + select({"//:cuda": cuda_deps, "//conditions:default": []})
    native.cc_library(
        name = name,
        # Static only: the layers are parts of libtpdp.so and libtpdp.a,
        # built with hidden visibility; a .so per layer could not link.
        linkstatic = True,
        # Every object goes into libtpdp.so, referenced or not.
        alwayslink = True,
        srcs = srcs,
        hdrs = native.glob(["*.h"]) if hdrs == None else hdrs,
        copts = TPDP_COPTS + copts,
        deps = deps,
        local_defines = local_defines,
        **kwargs
    )

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

def _tpdp_launched_test(name, srcs, runner, runner_args, deps, data, args,
                        tags, **kwargs):
    """A GoogleTest binary (NAME_bin, with tests/mpi_main.cc) and the
    sh_test that runs it through `runner` (RUNNER RUNNER_ARGS... BINARY
    ARGS...), tagged exclusive and mpi."""
    native.cc_binary(
        name = name + "_bin",
        srcs = srcs,
        copts = TPDP_TEST_COPTS,
        deps = deps + ["//tests:test_util", "//tests:mpi_main", "@gtest//:gtest"],
        testonly = True,
        # Other launchers run the same binaries (tests/slurm: under srun).
        visibility = ["//tests:__subpackages__"],
    )
    native.sh_test(
        name = name,
        srcs = [runner],
        args = runner_args + ["$(location :%s_bin)" % name] + args,
        data = data + [":%s_bin" % name],
        tags = tags + ["exclusive", "mpi"],
        **kwargs
    )

def tpdp_mpi_test(name, srcs, np, deps = [], data = [], args = [], tags = [], **kwargs):
    """A GoogleTest run on `np` MPI ranks through tests/mpirun_test.sh.

    Tagged exclusive: several oversubscribed mpirun jobs at once on a
    2-core machine would starve each other."""
    _tpdp_launched_test(name, srcs, "//tests:mpirun_test.sh", [str(np)],
                        deps, data, args, tags, **kwargs)

def tpdp_multihost_test(name, srcs, ranks_per_host = 2, deps = [], data = [],
                        args = [], tags = [], **kwargs):
    """A GoogleTest run on 2 simulated hosts x `ranks_per_host` MPI ranks
    (scripts/multihost: network, UTS and mount namespaces on this machine)
    through tests/multihost_test.sh. Where namespaces cannot be made (not
    root, no privileges) its cases report skipped, with the reason.

    Tagged exclusive and "multihost" (`bazel test --test_tag_filters=multihost`
    runs them alone)."""
    _tpdp_launched_test(name, srcs, "//tests:multihost_test.sh",
                        [str(ranks_per_host)], deps,
                        data + ["//scripts:multihost"], args,
                        tags + ["multihost"], **kwargs)

# nvcc, for every .cu file (tpdp_cuda_object). scripts/gpu-check builds the
# same objects without Bazel and reads both lists from this file: keep the
# `NAME = [` ... `]` form with one quoted flag per line.
TPDP_NVCC_FLAGS = [
    "-O2",
    "-std=c++17",
    # -fPIC: the objects also go into libtpdp.so.
    "-Xcompiler",
    "-fPIC",
    # As TPDP_COPTS: the kernel launchers stay inside libtpdp.so.
    "-Xcompiler",
    "-fvisibility=hidden",
    # libtpdp.so needs no C++ runtime (tests/lib/exports_test.sh). nvcc's
    # host stubs would otherwise call libstdc++ (__cxa_guard_*) and libgcc_s
    # (the exception personality): the code never throws, and the one
    # function-local static per kernel (CUDA's host_runtime.h, its launch
    # handle) is set by an idempotent __cudaGetKernel: two threads
    # launching a kernel for the first time at once both store the same
    # handle. On x86-64 a thread that sees it initialised sees the handle;
    # on a weakly ordered CPU (aarch64) such a racing first launch could
    # read it unset and fail with a CUDA error, reported as TPDP_ERR_CUDA.
    "-Xcompiler",
    "-fno-exceptions",
    "-Xcompiler",
    "-fno-threadsafe-statics",
]

# The GPUs the device code is built for: sm_80 (A100) and sm_90 (H100,
# H200), plus sm_90 PTX that the driver compiles for newer GPUs.
TPDP_CUDA_GENCODE = [
    "-gencode=arch=compute_80,code=sm_80",
    "-gencode=arch=compute_90,code=sm_90",
    "-gencode=arch=compute_90,code=compute_90",
]

def tpdp_cuda_object(name, src, hdrs = [], extra_flags = []):
    """`name`.o: nvcc -c of `src` (a .cu file) for TPDP_CUDA_GENCODE.

    `hdrs`: the headers it includes (paths from the repository root, with
    the root and include/ on the include path). `extra_flags` follow the
    common TPDP_NVCC_FLAGS (e.g. -fmad=false). Tagged "manual": only
    --config=cuda builds reach it (through a select on //:cuda), so a
    default `bazel build //...` never needs the CUDA toolkit."""
    native.genrule(
        name = name,
        srcs = [src] + hdrs,
        outs = [name + ".o"],
        cmd = " ".join(
            ["$(location @cuda//:nvcc)", "-c"] + TPDP_NVCC_FLAGS +
            TPDP_CUDA_GENCODE + extra_flags +
            ["-I.", "-Iinclude", "-o", "$@", "$(location %s)" % src],
        ),
        tags = ["manual"],
        tools = ["@cuda//:nvcc"],
    )
