# SPDX-License-Identifier: BSD-3-Clause
"""tpdp_pytest: a pytest file of tests/python run on each of `nps` rank
counts, one sh_test each (NAME_npN), through tests/mpirun_test.sh."""

def tpdp_pytest(name, nps, srcs = None, data = [], size = "medium"):
    srcs = srcs or [name + ".py"]
    for np in nps:
        native.sh_test(
            name = "%s_np%d" % (name, np),
            srcs = ["//tests:mpirun_test.sh"],
            args = [
                str(np),
                "$(location :pytest_rank.sh)",
                "$(location //:libtpdp.so)",
                "$(location %s)" % srcs[0],
            ],
            data = srcs + data + [
                ":conftest.py",
                ":pytest_rank.sh",
                "//:libtpdp.so",
                "//python:tpdp",
            ],
            size = size,
            tags = ["exclusive", "mpi"],
        )

def tpdp_pytest_chain(name, phases, srcs = None, data = [], env = {},
                      size = "large"):
    """A pytest file run in phases, one after the other, each on its own
    rank count (phases: [(phase name, ranks)]), sharing one folder
    ($TPDP_TEST_DIR): e.g. a checkpoint saved on 8 ranks and loaded on 4.
    One sh_test (NAME) through chain_test.sh; each phase sees its name in
    $TPDP_TEST_PHASE. `env`: more variables, $(location) expanded."""
    srcs = srcs or [name + ".py"]
    args = [
        "$(location :pytest_rank.sh)",
        "$(location //:libtpdp.so)",
        "$(location %s)" % srcs[0],
    ]
    for k, v in env.items():
        args.append("%s=%s" % (k, v))
    args.append("--")
    for phase, np in phases:
        args += [phase, str(np)]
    native.sh_test(
        name = name,
        srcs = ["chain_test.sh"],
        args = args,
        data = srcs + data + [
            ":conftest.py",
            ":pytest_rank.sh",
            "//tests:mpirun_test.sh",
            "//:libtpdp.so",
            "//python:tpdp",
        ],
        size = size,
        tags = ["exclusive", "mpi"],
    )
