# SPDX-License-Identifier: BSD-3-Clause
"""tpdp.torch under the wrong launcher: processes that torchrun (or srun
without PMIx) started as N, each of which MPI would make a world of 1, get
tpdp_init's refusal as a TpdpError (TPDP_ERR_INVALID_ARGUMENT naming the
launcher's variable and the MPI world of 1) from the first call that
initialises tpdp, instead of training alone. Each case runs in a fresh
Python process with the launcher's environment and none of an MPI
launcher's; this file's own process (one rank under mpirun) only starts
them."""
import json
import os
import subprocess
import sys

import pytest

CHILD = r'''
import json, sys
if sys.argv[1] == "mpi4py":
    from mpi4py import MPI  # MPI initialised first, as a singleton
import tpdp.torch as tt
try:
    if sys.argv[2] == "init":
        tt.init()
    else:  # the implicit initialisation of the first use
        tt.init_device_mesh("cpu", (2,), mesh_dim_names=("dp",))
    print(json.dumps({"raised": None}))
except tt.TpdpError as e:
    print(json.dumps({"raised": type(e).__name__, "status": e.status,
                      "message": e.message}))
'''


def run_child(env_vars, first="tpdp", how="init"):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_", "PMIX_", "PMI_", "SLURM_"))}
    env.update(env_vars)
    p = subprocess.run([sys.executable, "-c", CHILD, first, how], env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


TORCHRUN = {"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1",
            "LOCAL_WORLD_SIZE": "2"}


@pytest.mark.parametrize("how", ["init", "init_device_mesh"])
def test_torchrun_processes_get_a_tpdp_error(how):
    got = run_child(TORCHRUN, how=how)
    assert got["raised"] == "TpdpError", got
    assert got["status"] == "TPDP_ERR_INVALID_ARGUMENT"
    for needle in ["tpdp_init:", "WORLD_SIZE=2", "RANK=1, LOCAL_RANK=1",
                   "MPI world would be 1 rank", "mpirun -np 2"]:
        assert needle in got["message"], got["message"]


def test_mpi4py_first_changes_nothing():
    pytest.importorskip("mpi4py", reason="python3-mpi4py is not installed")
    got = run_child(TORCHRUN, first="mpi4py")
    assert got["raised"] == "TpdpError", got
    assert "WORLD_SIZE=2" in got["message"]


def test_srun_without_pmix_gets_a_tpdp_error():
    got = run_child({"SLURM_NTASKS": "4", "SLURM_STEP_ID": "0",
                     "SLURM_PROCID": "3"})
    assert got["raised"] == "TpdpError", got
    assert got["status"] == "TPDP_ERR_INVALID_ARGUMENT"
    assert "SLURM_NTASKS=4" in got["message"]
    assert "srun --mpi=pmix -n 4" in got["message"]


def test_one_process_is_fine():
    assert run_child({"WORLD_SIZE": "1", "RANK": "0"}) == {"raised": None}
