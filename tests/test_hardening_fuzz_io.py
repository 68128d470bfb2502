"""Issue 32, the fuzz pass (/work/runs/fuzz): its cases of `cpab`, `sweep`, `results`, `scaffold` and `cli` that ended
in a cryptic error, a silently wrong result or a hang. One test per case id of the fuzz pass's results; each failed
before its fix. Each is fast: it tests the refusal, never the allocation or the wait."""
import os
import runpy
import time
import warnings

import numpy as np
import pytest
import torch
import xarray as xr

from diffgeo import cli, cpab, results, sweep
from diffgeo.scaffold import REGISTRY, Experiment, Var


def _cell(seed):
    return xr.Dataset({"x": ((), float(seed), {"long_name": "x", "units": "1"})})


def _dataset():
    return results.stamp(xr.Dataset({"x": ("i", np.arange(3.0), {"long_name": "x", "units": "1"})}), {}, "cpu", results.now())


@pytest.fixture
def toy():
    "A two-cell experiment, as in the fuzz pass's scaffold cases (removed from the registry afterwards)."
    e = Experiment("petrini", "fuzz_toy", {"smoke": {"n": 3}}, {"x": Var(("seed",), "x"), "seed": Var(("seed",), "seed")},
                   grid=lambda p: {"seed": [0, 1]})
    e.cell(lambda seed, n: xr.Dataset({"x": ((), float(seed + n))}))
    yield e
    REGISTRY.pop(e.name, None)


@pytest.fixture
def t22():
    return cpab.Tessellation((2, 2))


# ---- cpab

def test_cpab04_tess_256x256():
    with pytest.raises(ValueError, match=r"Tessellation\(\(256, 256\)\) would need [\d,.]+ GiB .* MAX_BUILD_BYTES = 4 GiB; use fewer cells"):
        cpab.Tessellation((256, 256))
    assert cpab._build_bytes((3, 3), True, False)[1:] == cpab.Tessellation((3, 3)).constraints().shape   # the count is L's


def test_cpab08_n_steps_1e9(t22):
    theta = cpab.sample(t22, 1, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match=r"n_steps must be <= 65536, got 1000000000\. \(MAX_N_STEPS"):
        cpab.transform(torch.rand(4, 2), theta, t22, n_steps=10**9)


@pytest.mark.parametrize("compiled", [False, True])
def test_cpab10_t_1e6(t22, monkeypatch, compiled):
    monkeypatch.setattr(cpab, "COMPILED", compiled)
    theta = cpab.sample(t22, 1, generator=torch.Generator().manual_seed(0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # the MAX_STEPS warning, which comes first
        with pytest.raises(ValueError, match=r"at t = 1e\+06 contains NaN or infinite values .* the flow overflowed the float range"):
            cpab.transform(torch.rand(4, 2, generator=torch.Generator().manual_seed(1)), theta, t22, t=1e6)


def test_cpab11_theta_from_matrices_int_tess(t22):
    with pytest.raises(TypeError, match=r"tess must be a cpab.Tessellation, got int 4; .*cpab\.Tessellation\(\(4, 4\)\)"):
        cpab.theta_from_matrices(torch.zeros(1, 16, 2, 3), 4)
    with pytest.raises(ValueError, match=r"A must have shape \[B, 16, 2, 3\]"):
        cpab.theta_from_matrices(torch.zeros(1, 15, 2, 3), t22)
    theta = cpab.sample(t22, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(cpab.theta_from_matrices(cpab.cell_matrices(theta, t22), t22), theta)


def test_cpab12_locate_int_tess(t22):
    with pytest.raises(TypeError, match=r"tess must be a cpab.Tessellation, got int 4; .*cpab\.Tessellation\(\(4, 4\)\)"):
        cpab.locate(torch.rand(4, 2), 4)
    with pytest.raises(ValueError, match=r"points must have shape \[\.\.\., 2\]"):
        cpab.locate(torch.rand(4, 3), t22)


def test_cpab13_grid_int_size(t22):
    theta = cpab.sample(t22, 1, generator=torch.Generator().manual_seed(0))
    g = cpab.grid(theta, t22, 8)                                        # an int n is n × n, as for maps.pixel_grid
    assert g.shape == (1, 8, 8, 2)
    torch.testing.assert_close(g, cpab.grid(theta, t22, (8, 8)))
    with pytest.raises(ValueError, match="size must be an int n"): cpab.grid(theta, t22, "8")


def test_cpab15_warp_empty_batch(t22):
    theta = cpab.sample(t22, 1, generator=torch.Generator().manual_seed(0))
    assert cpab.warp(torch.zeros(0, 1, 8, 8), theta, t22).shape == (0, 1, 8, 8)
    assert cpab.warp(torch.zeros(0, 1, 8, 8), theta, t22, size=(4, 6)).shape == (0, 1, 4, 6)
    with pytest.raises(ValueError, match="theta has 2 rows but x has 3 images"):
        cpab.warp(torch.zeros(3, 1, 8, 8), cpab.sample(t22, 2), t22)


# ---- sweep

def test_swp05_shard_dir_is_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    open("f", "w").close()
    with pytest.raises(NotADirectoryError, match=r"cannot write the sweep's shards in .*/f: .*/f is a file, not a folder"):
        sweep.run_sweep(_cell, {"seed": [0]}, "f", progress=False)
    with pytest.raises(NotADirectoryError, match=r"/f is a file, not a folder"):   # further up
        sweep.run_sweep(_cell, {"seed": [0]}, "f/sub", progress=False)


def test_swp13_empty_lock_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.makedirs("s")
    lock = tmp_path / "s" / "seed-0.lock"
    lock.touch()
    assert sweep._claim_state(lock)[0] == "held"                          # a claim being written: judged by its age
    old = time.time() - 2 * sweep.UNREADABLE_AFTER
    os.utime(lock, (old, old))
    assert sweep._claim_state(lock)[0] == "abandoned"                     # no writer: stale after UNREADABLE_AFTER, not STALE_AFTER
    start = time.time()
    ds = sweep.run_sweep(_cell, {"seed": [0]}, "s", progress=False)
    assert time.time() - start < 2 and ds.x.values.tolist() == [0.0]


def test_swp15_shard_dir_none():
    with pytest.raises(TypeError, match=r"shard_dir must be a path \(a str or os.PathLike .*\), got NoneType None"):
        sweep.run_sweep(_cell, {"seed": [0]}, None)


# ---- results

def test_res06_save_grandparent_is_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    open("f", "w").close()
    with pytest.raises(NotADirectoryError, match=r"cannot write .*/f/sub/a\.nc: .*/f is a file, not a folder"):
        results.save_dataset(_dataset(), "f/sub/a.nc")
    assert results.save_dataset(_dataset(), "g/sub/a.nc").is_file()      # missing folders are still made


def test_res07_save_onto_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.mkdir("d")
    with pytest.raises(IsADirectoryError, match=r"cannot write .*/d: it is a folder; give the path of a file"):
        results.save_dataset(_dataset(), "d")
    assert os.listdir("d") == [] and os.listdir(".") == ["d"]             # no temporary file left behind


def test_res15_load_none():
    with pytest.raises(TypeError, match=r"path must be a path \(a str or os.PathLike .*\), got NoneType None"):
        results.load_dataset(None)


# ---- scaffold

def test_scaf10_work_dir_is_file(toy, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    open("f", "w").close()
    with pytest.raises(NotADirectoryError, match=r"cannot write the sweep's shards in .*: .*/f is a file, not a folder"):
        toy.run("smoke", work_dir="f")


def test_scaf13_fig8_samples0(toy, tmp_path):
    from diffgeo.experiments import petrini_fig8 as m
    with pytest.raises(ValueError, match=r"samples must be >= 1, got 0"):
        m.EXPERIMENT.run("smoke", samples=0, work_dir=str(tmp_path))
    # and in general: a run whose dataset has an empty dimension is refused, not left to NaN statistics
    toy.cell(lambda seed, n: xr.Dataset({"x": (("k",), np.zeros(n))}))
    toy.variables["x"] = Var(("seed", "k"), "x")
    with pytest.raises(ValueError, match=r"dataset has no values along \['k'\] \(size 0\).*overrides: n=0"):
        toy.run("smoke", n=0, work_dir=str(tmp_path))


def test_scaf14_fig8_c_grid_scalar(tmp_path):
    from diffgeo.experiments import petrini_fig8 as m
    with pytest.raises(TypeError, match=r"setting c_grid must be a list, as in profile 'smoke' .*got int 3; for a single value pass c_grid=\[3\]"):
        m.EXPERIMENT.run("smoke", c_grid=3, work_dir=str(tmp_path))
    with pytest.raises(TypeError, match=r"setting n must be a number \(int\), as in profile 'smoke' \(n=32\), got list"):
        m.EXPERIMENT.resolve("smoke", n=[32])
    assert m.EXPERIMENT.resolve("smoke", c_grid=(3, 5))["c_grid"] == (3, 5)


def test_scaf15_fig8_n_1e5(tmp_path):
    from diffgeo.experiments import petrini_fig8 as m
    with pytest.raises(ValueError, match=r"n = 100000 with samples = 16 would take about [\d,]+ GiB .* MAX_CELL_BYTES = 64 GiB"):
        m.EXPERIMENT.run("smoke", n=10**5, work_dir=str(tmp_path))
    assert m.EXPERIMENT.resolve("paper")["n"] == 320                    # the paper's sizes pass


# ---- cli

def test_cli01_python_m_cli_n0(monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", ["diffgeo", "stability", "FullConnL2", "-n", "0"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)               # runpy: diffgeo.cli is imported already
        with pytest.raises(SystemExit) as e: runpy.run_module("diffgeo.cli", run_name="__main__")
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err == "diffgeo stability: error: --n-images must be at least 2, got 0.\n"


def test_cli02_bootstrap_1e9(capsys):
    assert cli.main(["stability", "FullConnL2", "--device", "cpu", "--no-progress", "-n", "4", "--bootstrap", "1000000000"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--bootstrap 1000000000 is more resamples than the maximum, MAX_BOOTSTRAP = 10,000" in err


def test_cli11_size_1e5(tmp_path, capsys):
    for c in "ab": (tmp_path / c).mkdir()
    assert cli.main(["stability", "FullConnL2", "--device", "cpu", "--no-progress", "-n", "2", "--bootstrap", "0",
                     "--data", str(tmp_path), "--size", "100000"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "size must be <= 1024, got 100000" in err and "MAX_SIZE" in err
