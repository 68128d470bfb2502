"""diffgeo's Slurm executor against a real single-node Slurm (munged, MariaDB, slurmdbd, slurmctld, slurmd, started by
scripts/minislurm.py and stopped by PID, also when a test fails): Fig. 5's smoke sweep as a job array, one job cancelled
mid-run, the sweep run again, and the merged dataset equal to a local run's.

Runs only where CI is set or the user opts in with DIFFGEO_TEST_SLURM=1: then scripts/test.sh installs Debian's Slurm,
munge and MariaDB (scripts/install_slurm.sh, as root); a user's test run installs no system services. Skipped, saying
why and how to run it, otherwise and where Slurm cannot run (not root, or the packages absent)."""
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
import xarray as xr

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import minislurm  # noqa: E402

import diffgeo.sweep as sweep  # noqa: E402
from diffgeo.experiments import petrini_fig5  # noqa: E402
from diffgeo.scaffold import CELL_RECORD  # noqa: E402

OPT_IN = (os.environ.get("CI", "").lower() not in ("", "0", "false")) or os.environ.get("DIFFGEO_TEST_SLURM") == "1"   # as scripts/test.sh
WHY = (minislurm.missing() if OPT_IN else
       "the Slurm test runs where CI is set or with DIFFGEO_TEST_SLURM=1 (as root: DIFFGEO_TEST_SLURM=1 bash scripts/test.sh "
       "installs Debian's Slurm, munge and MariaDB, starts them for the test and stops them)")
# one xdist worker holds the module's cluster and runs its tests (scripts/test.sh: pytest -n 2 --dist loadgroup)
pytestmark = [pytest.mark.skipif(WHY is not None, reason=f"no Slurm test: {WHY}"), pytest.mark.xdist_group("slurm")]
OPTIONS = {"timeout_min": 10, "cpus_per_task": 1}


@pytest.fixture(scope="module")
def slurm():
    "A fresh single-node Slurm for this module; every daemon stopped by its PID at the end, also after a failure."
    folder = Path(tempfile.mkdtemp(prefix="minislurm-", dir="/tmp"))
    cluster = minislurm.MiniSlurm(folder)
    with cluster as env:
        yield cluster, env
        started = cluster.pids()
    assert len(started) == len(minislurm.DAEMONS)
    assert not [p for p in started if minislurm.alive(p)], "a daemon outlived the cluster"
    assert not minislurm.MiniSlurm.leftovers(folder), "a job process (slurmstepd) outlived the cluster"


def squeue(env):
    out = subprocess.run(["squeue", "-h", "-o", "%i %t"], env=env, capture_output=True, text=True, check=True).stdout
    return dict(line.split() for line in out.splitlines())


def test_fig5_sweep_through_slurm(slurm, tmp_path, monkeypatch):
    cluster, env = slurm
    monkeypatch.setenv("SLURM_CONF", env["SLURM_CONF"])
    monkeypatch.setenv("OMP_NUM_THREADS", "1")             # the jobs compute as the local run below does
    monkeypatch.setattr(sweep, "SLURM_POLL", 1.0)
    exp = petrini_fig5.EXPERIMENT
    run = lambda **kw: exp.run("smoke", work_dir=str(tmp_path / "slurm"), executor="slurm", executor_options=OPTIONS, **kw)

    # 1. the sweep as a job array; one job cancelled while it runs
    outcome = {}
    def first():
        try: outcome["ds"] = run()
        except Exception as e: outcome["error"] = e
    thread = threading.Thread(target=first)
    thread.start()
    deadline, cancelled = time.monotonic() + 120, None
    while cancelled is None and time.monotonic() < deadline:
        running = [j for j, state in squeue(env).items() if state == "R" and "_" in j]
        if running:
            cancelled = max(running, key=lambda j: int(j.split("_")[1]))
            subprocess.run(["scancel", cancelled], env=env, check=True)
        time.sleep(0.05)
    thread.join(timeout=300)
    assert cancelled is not None, "no array task was seen running"
    assert "error" in outcome, f"the sweep did not report the cancelled job {cancelled}"
    assert "1 of 2 cells failed" in str(outcome["error"]) and "running the sweep again" in str(outcome["error"])
    states = subprocess.run(["sacct", "-n", "-X", "-j", cancelled, "-o", "State"], env=env, capture_output=True,
                            text=True).stdout
    assert "CANCELLED" in states, f"sacct says {states!r} for the cancelled job"
    shards = sorted((tmp_path / "slurm").rglob("shards/*.nc"))
    assert len(shards) == 1
    kept = shards[0].stat().st_mtime_ns

    # 2. the same call again: only the cancelled cell is computed (its job's claim taken over), then the merge
    ds = run()
    assert shards[0].stat().st_mtime_ns == kept, "the finished cell was computed again"
    assert not list((tmp_path / "slurm").rglob("shards/*.lock"))
    assert ds.attrs["device"] == "cpu" and ds.cell_device.values.ravel().tolist()[0].startswith("cpu (")   # where the jobs ran

    # 3. equal to a run in this process
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try: local = exp.run("smoke", work_dir=str(tmp_path / "local"))
    finally: torch.set_num_threads(threads)
    timings = [*CELL_RECORD, "train_seconds"]                # when, where and how long: differ from run to run
    xr.testing.assert_equal(ds.drop_vars(timings), local.drop_vars(timings))
