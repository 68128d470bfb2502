"Shared by the experiment tests: a papermill run on the smoke profile in a temporary folder, and provenance checks."
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PNG = b"\x89PNG\r\n\x1a\n"


def papermill_smoke(name, tmp_path, *extra):
    "Run nbs/<name>.ipynb with profile=smoke, writing <name>.nc and <name>.png into `tmp_path`; return both paths."
    nc, png = tmp_path / f"{name}.nc", tmp_path / f"{name}.png"
    cmd = [sys.executable, "-m", "papermill", str(ROOT / "nbs" / f"{name}.ipynb"), str(tmp_path / "out.ipynb"), "-k", "python3",
           "-p", "profile", "smoke", "-p", "out_nc", str(nc), "-p", "out_png", str(png), *extra]
    env = {**os.environ, "DIFFGEO_PROGRESS": "0", "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1"}
    env.pop("IN_TEST", None)
    subprocess.run(cmd, check=True, cwd=tmp_path, env=env, capture_output=True, timeout=300)
    return nc, png


def check_provenance(ds):
    "The provenance attributes every results dataset carries."
    for key in ("diffgeo_version", "git_commit", "torch_version", "device", "start_time", "end_time"):
        assert ds.attrs[key], key


def load_checked(nc, variables, profile="smoke"):
    "Load a results dataset and check what every one carries: `variables`, CF attributes, its profile, provenance."
    from diffgeo import results
    ds = results.load_dataset(nc)
    assert set(variables) <= set(ds.data_vars), set(variables) - set(ds.data_vars)
    results.check_cf(ds)
    params = results.parameters(ds)
    assert params["profile"] == profile
    check_provenance(ds)
    return ds, params
