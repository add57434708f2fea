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
