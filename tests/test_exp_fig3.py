"""Fig. 3 (destructive maps, learning-rate sensitivity): papermill smoke run, the committed cpu-profile result, the measure."""
import math

import numpy as np
import pytest
import torch

from diffgeo import results
from diffgeo.experiments import fig3_destructive as fig3

from _smoke import PNG, ROOT, load_checked, papermill_smoke

VARIABLES = {"cond", "min_det", "train_loss", "train_error", "test_accuracy", "diverged", "train_seconds", "invertible",
             "cond_median", "cond_max", "frac_destructive", "frac_ill_conditioned", "frac_folded", "ever_folded",
             "accuracy_mean", "accuracy_std"}


def test_papermill_smoke(tmp_path):
    "papermill with profile=smoke writes the dataset (shards included) and a PNG into a temporary folder only."
    nc, png = papermill_smoke("fig3_destructive", tmp_path)
    ds, params = load_checked(nc, VARIABLES)
    assert params["seeds"] == [0]
    assert ds.cond.dims == ("family", "lr", "seed", "step", "sample")
    assert list(ds.family.values) == [*fig3.FAMILIES, "none"]
    assert png.read_bytes()[:8] == PNG
    assert any((tmp_path / "fig3_destructive" / "shards" / "smoke").iterdir())
    fig3.draw(ds)


def test_committed_result_redraws():
    "The committed cpu-profile dataset is readable and redraws the figure."
    ds = results.load_dataset(ROOT / "data" / "fig3_destructive.nc")
    assert results.parameters(ds)["profile"] == "cpu"
    assert (ds.min_det.sel(family=["affine_diffeo", "cpab"]) > 0).all()  # invertible families never fold
    fig3.draw(ds)


def test_destructiveness_known_maps():
    "κ and min det of affine maps are those of A; expm maps have det = exp(tr A) > 0; θ = 0 is the identity for all."
    theta = torch.tensor([[2., 0, 0.1, 0, 0.5, 0], [1., 1, 0, 1, 1, 0], [-1., 0, 0, 0, 1, 0]])
    d = fig3.destructiveness(theta, "affine")
    np.testing.assert_allclose(d["cond"][[0, 2]].numpy(), [4, 1])
    assert d["cond"][1] > 1e7 and abs(d["min_det"][1]) < 1e-12 and d["min_det"][2] == -1
    A = torch.tensor([[0.3, -0.2, 0.1, 0.4, -0.5, 0.0]])
    np.testing.assert_allclose(fig3.destructiveness(A, "affine_diffeo")["min_det"].numpy(), [math.exp(-0.2)], rtol=1e-6)  # θ is float32
    for family, dim in (("affine_diffeo", 6), ("tps", 32), ("cpab", 34)):
        d = fig3.destructiveness(torch.zeros(3, dim), family)
        np.testing.assert_allclose(d["cond"].numpy(), 1, atol=1e-6)
        np.testing.assert_allclose(d["min_det"].numpy(), 1, atol=1e-6)


def test_probe_steps_and_bad_names():
    assert fig3.probe_steps(120, 10) == list(range(0, 121, 10))
    assert fig3.probe_steps(7, 3) == [0, 3, 6, 7]
    with pytest.raises(ValueError, match="'smoke', 'cpu', 'paper'"):
        fig3.run("laptop")
    with pytest.raises(ValueError, match="'affine_diffeo', 'cpab', 'affine', 'tps', 'none'"):
        fig3.run("smoke", families=["similarity"])
