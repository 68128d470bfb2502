"""Tests of the distorted-MNIST experiment (Detlefsen et al. 2018, §5.1, Table 2, Fig. 5) and of the parameter budgets
of `models.st_classifier`: a papermill smoke run into a temporary folder, the committed cpu-profile dataset, the
seeded data generation, and the equal-budget rule of §5. About 30 s on two CPU cores, most of it the smoke run."""
import math
import os
import subprocess
import sys
from pathlib import Path

import matplotlib
import numpy as np
import pytest
import torch

from diffgeo import data, models, results
from diffgeo.experiments import tab2_distorted_mnist as tab2

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
VARIABLES = {"test_accuracy", "train_seconds", "train_loss", "train_error", "test_accuracy_epoch", "st_view",
             "fig5_input", "fig5_label", "fig5_index", "paper_accuracy", "paper_train_seconds", "n_train_images",
             "n_test_images", "test_accuracy_mean", "test_accuracy_std", "train_seconds_mean"}
COORDS = {"n_params", "width", "transformer", "loc_net", "base"}


def _check_dataset(ds, profile):
    "What every Table 2 dataset holds, whatever its profile."
    assert VARIABLES <= set(ds.data_vars) and COORDS <= set(ds.coords)
    results.check_cf(ds)
    assert list(ds.model.values) == list(tab2.MODELS) and list(ds.distortion.values) == list(tab2.DISTORTIONS)
    assert ds.test_accuracy.dims == ("model", "distortion", "seed")
    assert ds.st_view.dims == ("model", "distortion", "seed", "example", "y", "x") and ds.sizes["y"] == ds.sizes["x"] == 42
    assert ds.fig5_label.values.tolist() == list(tab2.FIG5_DIGITS)
    assert ((ds.test_accuracy >= 0) & (ds.test_accuracy <= 1)).all() and (ds.train_seconds > 0).all()
    assert np.all(np.abs(ds.n_params.values / models.ST_BUDGETS["cnn"] - 1) < 0.005)  # §5: one budget for all
    np.testing.assert_allclose(ds.paper_accuracy.sel(model="ST-Affine+CPAB CNN").values, [0.996, 0.993])
    for m in ("FCN", "CNN"):  # no transformer: the classifier sees the input itself
        np.testing.assert_array_equal(ds.st_view.sel(model=m).isel(seed=0).values, ds.fig5_input.values)
    params = results.parameters(ds)
    assert params["profile"] == profile
    for key in ("diffgeo_version", "git_commit", "torch_version", "device", "start_time", "end_time"):
        assert ds.attrs[key]
    for fig in (tab2.draw(ds), tab2.draw_fig5(ds)): plt.close(fig)  # redrawn from the file alone
    table = tab2.table(ds)
    assert list(table.index) == list(tab2.MODELS) and ("RTS", "paper") in table.columns


def test_papermill_smoke(tmp_path):
    "papermill with profile=smoke writes the dataset, both PNGs and the shards, all inside the given folder."
    cmd = [sys.executable, "-m", "papermill", str(ROOT / "nbs" / "tab2_distorted_mnist.ipynb"), str(tmp_path / "out.ipynb"),
           "-k", "python3", "-p", "profile", "smoke", "-p", "out_dir", str(tmp_path),
           "-p", "out_nc", "tab2.nc", "-p", "out_png", "tab2.png"]
    env = {**os.environ, "DIFFGEO_PROGRESS": "0", "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1"}
    env.pop("IN_TEST", None)
    subprocess.run(cmd, check=True, cwd=tmp_path, env=env, capture_output=True, timeout=300)
    ds = results.load_dataset(tmp_path / "tab2.nc")
    _check_dataset(ds, "smoke")
    assert ds.sizes["seed"] == 1 and ds.sizes["epoch"] == 1 and int(ds.n_test_images) == 60
    for png in ("tab2.png", "tab2_fig5.png"):
        assert (tmp_path / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(list((tmp_path / "tab2" / "shards" / "smoke").glob("*.nc"))) == 14


def test_committed_results_are_readable():
    "The committed cpu-profile dataset is complete and redraws Table 2 and Fig. 5."
    ds = results.load_dataset(ROOT / "data" / "tab2_distorted_mnist.nc")
    _check_dataset(ds, "cpu")
    assert int(ds.n_train_images) == 4000 and int(ds.n_test_images) == 1000
    assert np.isfinite(ds.test_accuracy_epoch).all()


@pytest.fixture(scope="module")
def digits():
    return data.load("mnist5k", normalize=False).test.images[:24]


@pytest.mark.parametrize("distortion", tab2.DISTORTIONS)
def test_distortion_is_seeded(digits, distortion):
    "The same seed draws the same images (whatever the chunk size), another seed others; values stay in [0, 1]."
    a, pa = tab2.distort(digits, distortion, seed=5)
    b, pb = tab2.distort(digits, distortion, seed=5)
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    torch.testing.assert_close(a, tab2.distort(digits, distortion, seed=5, chunk=7)[0], rtol=0, atol=1e-5)
    assert not torch.equal(a, tab2.distort(digits, distortion, seed=6)[0])
    assert a.shape == (24, 1, 42, 42) and 0 <= a.min() and a.max() <= 1
    shift = pa["shift"]
    assert shift.abs().max() <= 7 and shift.abs().max() > 0


def test_rts_draws_follow_the_recipe(digits):
    "Angles within ±45°, scales within [0.7, 1.2]; a scale s shrinks the ink by s², a quarter turn is rot90."
    p = tab2.rts_params(1000, torch.Generator().manual_seed(0))
    assert p["angle"].abs().max() <= math.radians(45) and p["angle"].abs().max() > math.radians(44)
    assert 0.7 <= p["scale"].min() and p["scale"].max() <= 1.2
    x, n = digits[:4], 4
    zero, one, centre = torch.zeros(n, dtype=torch.float64), torch.ones(n, dtype=torch.float64), torch.zeros(n, 2, dtype=torch.float64)
    ink = tab2.rts_warp(x, zero, one, centre).sum()
    for s in (0.7, 1.2):  # bilinear resampling keeps the ink only approximately
        assert abs(tab2.rts_warp(x, zero, s * one, centre).sum() / ink / s**2 - 1) < 0.03
    turned = tab2.rts_warp(x, torch.full((n,), math.pi / 2, dtype=torch.float64), one, centre)
    placed = tab2.place(x, torch.zeros(n, 2, dtype=torch.long))
    assert min((turned - placed.rot90(k, (-2, -1))).abs().max() for k in (1, -1)) < 1e-4


def test_distorted_sets_are_deterministic():
    "The cached data-set builder recomputes the same images and labels from its arguments."
    build = tab2.distorted_mnist.__wrapped__  # bypass the cache
    for distortion in tab2.DISTORTIONS:
        (tr1, te1), (tr2, te2) = (build(distortion, "mnist5k", None, 30, 20, 0) for _ in range(2))
        assert tr1.images.shape == (30, 1, 42, 42) and te1.images.shape == (20, 1, 42, 42)
        assert torch.equal(tr1.images, tr2.images) and torch.equal(te1.labels, te2.labels)
        assert torch.equal(te1.labels, data.load("mnist5k").test.subset(20, seed=0).labels)
    assert not torch.equal(build("RTS", "mnist5k", None, 30, 20, 0)[0].images, build("RTS", "mnist5k", None, 30, 20, 1)[0].images)


@pytest.mark.parametrize("st_base", tab2.ST_BASE_CHOICES)
def test_table2_networks_share_one_budget(st_base):
    "§5: the seven networks have Table 1's 400K parameters within 0.5%, the ST ones giving some to localisation."
    counts = {}
    for name, (base, transformer, loc) in tab2.MODELS.items():
        m = tab2.build(name, st_base)
        counts[name] = models.n_params(m)
        assert abs(counts[name] / 400_000 - 1) < 0.005, (name, counts[name])
        assert (models.n_params(m.st) > 0) == (transformer is not None)
        assert m(torch.zeros(2, 1, 42, 42)).shape == (2, 10)
    assert max(counts.values()) / min(counts.values()) - 1 < 0.01


@pytest.mark.parametrize("base,in_shape", [("fcn", (1, 28, 28)), ("cnn", (1, 28, 28)), ("cifar", (3, 32, 32))])
def test_st_classifier_matches_the_budget_for_every_family(base, in_shape):
    "Every transformer of Table 3 on MNIST-like and CIFAR-like inputs; the chosen width is the closest one."
    budget = models.ST_BUDGETS[base]
    for transformer in models.ST_TRANSFORMERS:
        m = models.st_classifier(base, transformer, "cnn", in_shape)
        total, st = models.n_params(m), models.n_params(m.st)
        assert abs(total / budget - 1) < 0.005, (base, transformer, total)
        count = lambda w: st + models.n_params(models.st_base(base, in_shape, 10, w))
        assert abs(total - budget) <= min(abs(count(m.width - 1) - budget), abs(count(m.width + 1) - budget))
    m = models.st_classifier(base, "affine", "cnn", in_shape, budget=budget // 2)
    assert abs(models.n_params(m) / (budget // 2) - 1) < 0.01 and m.budget == budget // 2


def test_bad_names_fail_fast():
    with pytest.raises(ValueError, match="'smoke', 'cpu', 'paper'"):
        tab2.run(profile="laptop")
    with pytest.raises(ValueError, match="ST-Affine CNN"):
        tab2.run("smoke", models_=["ST-TPS CNN"])
    with pytest.raises(ValueError, match="'RTS', 'CPAB'"):
        tab2.run("smoke", distortions=["elastic"])
    with pytest.raises(ValueError, match="'cnn', 'loc'"):
        tab2.build("CNN", st_base="fcn")
