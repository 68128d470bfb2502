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
    "fig5": {"d_diffeo", "d_noise", "d_pair", "r_diffeo", "r_noise", "is_diffeo", "test_index", "test_error",
             "train_loss", "val_error", "best_epoch", "train_seconds", "D_f", "G_f", "R_f", "D_f_mean", "G_f_mean", "R_f_mean",
             "R_f_logmean", "R_f_logstd", "test_error_logmean", "fit_prefactor", "fit_exponent", "fit_prefactor_half",
             "corr_R_f", "corr_D_f", "corr_G_f"},
}
EXTRA_PNGS = {"fig5": ["fig15", "fig16", "fig17", "fig19"]}


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
    assert params["profile"] == "smoke" and (params.get("seed") == 0 or params.get("seeds") == [0])
    for key in ("diffgeo_version", "git_commit", "torch_version", "device", "start_time", "end_time"):
        assert ds.attrs[key]
    for path in [png] + [tmp_path / f"{name}_{extra}.png" for extra in EXTRA_PNGS.get(name, [])]:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    module = __import__(f"diffgeo.experiments.{name}", fromlist=["draw"])
    module.draw(ds)  # the figure is redrawn from the file alone


def test_unknown_profile_fails_fast():
    from diffgeo.experiments import fig1, fig5
    for module in (fig1, fig5):
        with pytest.raises(ValueError, match="'smoke', 'cpu', 'paper'"):
            module.run(profile="laptop")


def test_fig5_bad_names_fail_fast(tmp_path):
    from diffgeo.experiments import fig5
    with pytest.raises(ValueError, match="ResNet18"):
        fig5.run("smoke", archs=["ResNet19"], shard_dir=tmp_path)
    with pytest.raises(ValueError, match="'mnist5k'"):
        fig5.run("smoke", dataset="imagenet", shard_dir=tmp_path)


def test_fig5_resumes_from_shards(tmp_path):
    "A second run reads the finished shards back and gives the same dataset."
    from diffgeo.experiments import fig5
    shards = tmp_path / "fig5" / "shards" / "smoke"
    a = fig5.run("smoke", archs=["FullConnL2"], shard_dir=shards)
    assert [p.name for p in shards.iterdir()] == ["arch-FullConnL2_seed-0.nc"]
    assert not any((tmp_path / "fig5" / "checkpoints" / "smoke").iterdir())  # checkpoints are gone once the shard exists
    b = fig5.run("smoke", archs=["FullConnL2"], shard_dir=shards)
    xr.testing.assert_identical(a.drop_attrs(), b.drop_attrs())


def test_committed_results_are_readable():
    "The committed cpu-profile datasets redraw their figures."
    from diffgeo.experiments import fig1, fig5, fig8
    for name, module in (("fig1", fig1), ("fig5", fig5), ("fig8", fig8)):
        ds = results.load_dataset(ROOT / "data" / f"{name}.nc")
        assert results.parameters(ds)["profile"] == "cpu"
        module.draw(ds)
