"""End-to-end runs of the experiment notebooks through papermill on the smoke profile."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import xarray as xr

from diffgeo import results

ROOT = Path(__file__).resolve().parents[1]
EXPECTED = {
    "fig1": {"image", "panel", "T_crit_xi", "T_crit_det", "delta_unit", "p_diffeo", "p_bijective",
             "T_half_measured", "T_delta_half", "T_delta_one", "T_max", "T_min"},
    "fig8": {"delta_unit", "max_xi_unit", "delta2_measured", "delta2_exact", "delta2_eq3", "max_xi_median", "max_xi_eq13"},
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_papermill_smoke(name, tmp_path):
    "papermill with profile=smoke writes a readable, self-describing dataset and a PNG, outside the repo."
    nc, png = tmp_path / f"{name}.nc", tmp_path / f"{name}.png"
    cmd = [sys.executable, "-m", "papermill", str(ROOT / "nbs" / f"{name}.ipynb"), str(tmp_path / "out.ipynb"),
           "-k", "python3", "-p", "profile", "smoke", "-p", "out_nc", str(nc), "-p", "out_png", str(png)]
    env = {**os.environ, "DIFFGEO_PROGRESS": "0", "MPLBACKEND": "Agg"}
    env.pop("IN_TEST", None)
    subprocess.run(cmd, check=True, cwd=tmp_path, env=env, capture_output=True, timeout=600)
    ds = results.load_dataset(nc)
    assert EXPECTED[name] <= set(ds.data_vars)
    results.check_cf(ds)
    params = results.parameters(ds)
    assert params["profile"] == "smoke" and params["seed"] == 0
    for key in ("diffgeo_version", "git_commit", "torch_version", "device", "start_time", "end_time"):
        assert ds.attrs[key]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    module = __import__(f"diffgeo.experiments.{name}", fromlist=["draw"])
    module.draw(ds)  # the figure is redrawn from the file alone


def test_unknown_profile_fails_fast():
    from diffgeo.experiments import fig1
    with pytest.raises(ValueError, match="'smoke', 'cpu', 'paper'"):
        fig1.run(profile="laptop")


def test_committed_results_are_readable():
    "The committed cpu-profile datasets redraw their figures."
    from diffgeo.experiments import fig1, fig8
    for name, module in (("fig1", fig1), ("fig8", fig8)):
        ds = results.load_dataset(ROOT / "data" / f"{name}.nc")
        assert results.parameters(ds)["profile"] == "cpu"
        module.draw(ds)
