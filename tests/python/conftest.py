# SPDX-License-Identifier: BSD-3-Clause
"""Shared by the tests/python pytest files: every rank runs the same tests
in the same order. mpi4py, when installed, is imported before tpdp (tpdp
then leaves MPI's initialisation and finalisation to it) and gives rank 0's
free port to torch.distributed's gloo group, the reference DDP runs on."""
import os
import socket

import pytest

# Under --config=asan, pytest_rank.sh preloads the sanitizer runtimes and
# names them here: they must be in this process, else a use-after-free in
# libtpdp would go unseen (a library built with ASan but run without its
# runtime does not even load, so this also guards the preload itself).
for _lib in os.environ.get("TPDP_TEST_PRELOADED", "").split():
    with open("/proc/self/maps") as _maps:
        if os.path.realpath(_lib) not in _maps.read():
            raise RuntimeError("tests/python: %s was to be preloaded "
                               "(LD_PRELOAD) but is not mapped" % _lib)

torch = pytest.importorskip("torch", reason="PyTorch is not installed "
                            "(bash scripts/install-deps --bench)")
try:
    from mpi4py import MPI  # noqa: F401 - imported first on purpose
except ImportError:
    MPI = None

import tpdp.torch as tt  # noqa: E402

torch.set_num_threads(1)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def gloo():
    """torch.distributed on gloo over the same ranks (the reference)."""
    import torch.distributed as dist
    if not dist.is_available():
        pytest.skip("torch.distributed is not available")
    rank, size = tt.rank(), tt.world_size()
    if MPI is not None:
        port = MPI.COMM_WORLD.bcast(_free_port() if rank == 0 else None)
    else:
        port = 29500 + int(os.environ.get("TPDP_TEST_PORT_OFFSET", "17"))
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port,
                            rank=rank, world_size=size)
    yield dist
    dist.destroy_process_group()


def rel_err(a, b):
    """||a - b|| / ||b|| (0 when both are 0)."""
    d = (a.detach().double() - b.detach().double()).norm().item()
    n = b.detach().double().norm().item()
    return d / n if n else d


def assert_params_close(m1, m2, tol):
    for (n, a), (_, b) in zip(m1.named_parameters(), m2.named_parameters()):
        e = rel_err(a, b)
        assert e <= tol, "parameter %s differs: relative error %.3g > %g" % (
            n, e, tol)
