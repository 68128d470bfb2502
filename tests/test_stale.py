"""Results cannot go stale: after an edit of the package, a rerun does not silently reuse the shards of the old code.

The package is copied to a temporary git checkout and each run is a fresh process importing that copy, as a rerun after
an edit would be: the copy is edited between runs (one comment appended to a module the sweep does not even call)."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

RUN = r'''
import contextlib, io, json, os, sys
from pathlib import Path
import numpy as np
import xarray as xr
import diffgeo
from diffgeo import results
from diffgeo.scaffold import Experiment, Var
from diffgeo.sweep import ShardError

work, modes = Path(sys.argv[1]), sys.argv[2].split("+")
assert Path(diffgeo.__file__).resolve().is_relative_to(Path(sys.argv[3]).resolve()), diffgeo.__file__  # the copy

exp = Experiment("petrini", "stale_toy", {"smoke": {"n": 3}}, {"x": Var(("seed", "draw"), "draws"),
                 "seed": Var(("seed",), "seed"), "draw": Var(("draw",), "draw")}, grid=lambda p: {"seed": [0, 1]})

@exp.cell
def cell(seed, n):
    with open(work / "computed.log", "a") as f: f.write(f"{os.getpid()} {seed}\n")
    return xr.Dataset({"x": ("draw", np.random.default_rng(seed).standard_normal(n))}, coords={"draw": np.arange(n)})

for mode in modes:                     # several runs of the same code in one process, one RESULT line each
    out = {"code": results.code_version() if hasattr(results, "code_version") else None}
    if mode != "default":
        with contextlib.redirect_stdout(io.StringIO()):
            out["states"] = exp.plan("smoke", work_dir=str(work), estimate=False).state.tolist()
    said = io.StringIO()
    try:
        with contextlib.redirect_stdout(said):
            ds = exp.run("smoke", work_dir=str(work)) if mode == "default" else exp.run("smoke", work_dir=str(work), code_changed=mode)
        out["attrs"] = {k: ds.attrs.get(k) for k in ("git_commit", "code_hash", "cell_commits", "other_code_cells", "code_changed")}
    except ShardError as e:
        out["error"] = str(e)
    out["said"] = said.getvalue()
    print("RESULT " + json.dumps(out))
'''


@pytest.fixture
def checkout(tmp_path):
    "A git checkout holding a copy of the package (and what `results.project_root` looks for), committed."
    co = tmp_path / "checkout"
    shutil.copytree(ROOT / "diffgeo", co / "diffgeo", ignore=shutil.ignore_patterns("__pycache__"))
    (co / "nbs").mkdir()
    (co / "pyproject.toml").write_text("[project]\nname = 'diffgeo'\n")
    git = lambda *a: subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *a], cwd=co, check=True,
                                    capture_output=True, text=True).stdout.strip()
    git("init", "-q"); git("add", "-A"); git("commit", "-q", "-m", "copy")
    return co, git("rev-parse", "HEAD")


def _run(co: Path, work: Path, mode: str = "default") -> dict:
    "One run of the toy sweep in a fresh process that imports the copy; what it computed, said and recorded."
    script = co.parent / "run.py"
    script.write_text(RUN)
    log = work / "computed.log"
    before = log.read_text().splitlines() if log.exists() else []
    env = {**os.environ, "PYTHONPATH": str(co), "DIFFGEO_PROGRESS": "0", "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    r = subprocess.run([sys.executable, str(script), str(work), mode, str(co)], cwd=co, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    outs = [json.loads(line[len("RESULT "):]) for line in r.stdout.splitlines() if line.startswith("RESULT ")]
    computed = sorted(int(line.split()[1]) for line in (log.read_text().splitlines() if log.exists() else [])[len(before):])
    for out in outs: out["computed"] = computed                      # what the process computed, all its runs together
    return outs[0] if len(outs) == 1 else outs


def _edit(co: Path, module: str):
    "Append a comment to one module of the copy, as a one-line edit of the package would change it."
    with open(co / "diffgeo" / module, "a") as f: f.write("# an edit\n")


def test_an_edit_of_the_package_is_not_silently_reused(checkout, tmp_path):
    co, commit = checkout
    work = tmp_path / "work"
    first = _run(co, work)
    assert first["computed"] == [0, 1]
    assert _run(co, work)["computed"] == []                          # the same code, in a new process: read back

    _edit(co, "core.py")
    after = _run(co, work)                                           # the default, after an edit: computed again
    assert after["computed"] == [0, 1], "the shards of the old code were reused silently"
    assert after["code"]["source_hash"] != first["code"]["source_hash"] and after["code"]["commit"] == commit + "-dirty"
    assert "2 of 2 shards" in after["said"] and "other code" in after["said"] and "code_changed='reuse'" in after["said"]
    attrs = after["attrs"]
    assert json.loads(attrs["cell_commits"]) == [{**after["code"], "cells": 2}]
    assert attrs["code_hash"] == after["code"]["source_hash"] and attrs["other_code_cells"] is None and attrs["code_changed"] is None

    _edit(co, "papers.py")
    refused, kept = _run(co, work, "error+reuse")                    # one process: refused, naming the options; then kept on request
    assert refused["computed"] == [] and refused["states"] == ["stale", "stale"]
    assert "code_changed='recompute'" in refused["error"] and "code_changed='reuse'" in refused["error"]
    assert kept["computed"] == [] and kept["states"] == ["stale", "stale"]
    attrs = kept["attrs"]
    assert attrs["code_changed"] == "reuse" and json.loads(attrs["other_code_cells"]) == ["seed-0", "seed-1"]
    assert json.loads(attrs["cell_commits"]) == [{**after["code"], "cells": 2}]   # the code that computed the cells
    assert attrs["code_hash"] == kept["code"]["source_hash"] != after["code"]["source_hash"]  # the run's own code


EDITED = r'''
import json, sys, time, warnings
from pathlib import Path
from diffgeo import results
co = Path(sys.argv[1])
for f in (co / "diffgeo").glob("*.py"): f.write_bytes(f.read_bytes())   # rewritten unchanged, as nbdev-export does
touched = results.code_version()
with open(co / "diffgeo" / "core.py", "a") as f: f.write("# an edit, saved after the import\n")   # Jupyter + nbdev-export
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    first, again = results.code_version(), results.code_version()
print("RESULT " + json.dumps({"touched": touched, "first": first, "again": again, "on_disk": results._source_hash(),
                              "warnings": [str(w.message) for w in caught]}))
'''


def test_an_edit_after_the_import_is_not_labelled_as_the_new_code(checkout):
    "A process that imported diffgeo runs the old code after the source is edited on disk: it never claims the new hash."
    co, _ = checkout
    script = co.parent / "edited.py"
    script.write_text(EDITED)
    env = {**os.environ, "PYTHONPATH": str(co), "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    before = subprocess.run([sys.executable, "-c", "from diffgeo import results; print(results.code_version()['source_hash'])"],
                            cwd=co, env=env, capture_output=True, text=True, timeout=300)
    assert before.returncode == 0, before.stderr[-3000:]
    r = subprocess.run([sys.executable, str(script), str(co)], cwd=co, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.split("RESULT ", 1)[1])
    imported = before.stdout.strip()
    assert out["on_disk"] != imported                                   # the edit changed the source
    assert out["touched"]["source_hash"] == imported                     # files rewritten unchanged: the same code
    assert out["first"]["source_hash"] != out["on_disk"], "the old code in memory is labelled with the new source's hash"
    assert out["first"]["source_hash"] == imported + "+edited-since-import" == out["again"]["source_hash"]
    assert len(out["warnings"]) == 1 and "restart the process" in out["warnings"][0].lower()   # said once
