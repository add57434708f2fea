# SPDX-License-Identifier: BSD-3-Clause
"""cuda_configure: the CUDA toolkit + NCCL as the @cuda repository.

The toolkit root is $TPDP_CUDA_HOME, or /usr/local/cuda when unset. The
rule re-runs when TPDP_CUDA_HOME changes. Only targets built with
--config=cuda depend on @cuda, so the default build never needs a toolkit;
a missing toolkit still yields a loadable (empty) repository so that
`bazel query //...` works everywhere."""

def _cuda_configure_impl(ctx):
    home = ctx.os.environ.get("TPDP_CUDA_HOME", "") or "/usr/local/cuda"
    home = home.rstrip("/") or "/"
    found = ctx.path(home + "/include/cuda_runtime_api.h").exists
    if found:
        ctx.symlink(home + "/include", "include")
    else:
        ctx.file("include/MISSING", "no CUDA toolkit at %s (TPDP_CUDA_HOME)\n" % home)

    # nvcc finds its configuration next to the real binary, so call it
    # through a wrapper rather than a symlink.
    ctx.file("nvcc.sh", "#!/bin/sh\nexec '%s/bin/nvcc' \"$@\"\n" % home, executable = True)
    ctx.template("BUILD.bazel", ctx.attr.build_file, {
        "%{cuda_home}": home,
    })

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    attrs = {"build_file": attr.label(allow_single_file = True)},
    environ = ["TPDP_CUDA_HOME"],
    local = True,
)
