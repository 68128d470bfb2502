"""Tests of petrini_fig7 beyond its notebook: the derived slopes recover a known power law; the sweep of one cell per
(P, seed) gives the numbers of the experiment's former single cell (kept below as the reference) and resumes from its
shards; the dataset-wide variables carry no grid dimension; bad settings are refused before any cell runs."""

import functools

import numpy as np
import pytest
import torch
import xarray as xr

from diffgeo import stripe
from diffgeo.experiments.petrini_fig7 import EXPERIMENT, cell, derive
from test_stripe import reference_gradient_flow  # the previous gradient_flow (tests/ is on the path: no __init__.py)


@pytest.mark.parametrize("exponent", [-1.0, -0.5, -2.0])
def test_derived_slopes_recover_a_power_law(exponent):
    P = np.array([64, 128, 256, 512, 1024])
    prefactor = np.array([3.0, 7.0])                       # two seeds, different constants
    R = prefactor[None, :] * P[:, None].astype(float) ** exponent
    R[0] = 1.0                                              # outside the fitted range: ignored by the fit
    ds = xr.Dataset({"R_f": (("P", "seed"), R), "in_fit": (("P",), (P >= 128).astype(float))},
                    coords={"P": P, "seed": [0, 1]})
    out = derive(ds)
    np.testing.assert_allclose(out.slope, exponent)
    np.testing.assert_allclose(out.local_slope.isel(P_mid=slice(1, None)), exponent)
    np.testing.assert_allclose(out.P_mid, np.sqrt(P[1:] * P[:-1]))


def reference_cell(d, P, seeds, h, alpha, boundaries, max_steps, n_test, radius, flow, **unused) -> dict:
    """The experiment's former single cell, its loops over seeds and P inside (the nested training sets: the first P of one
    draw of max(P) points per seed), with the gradient flow `flow`: {variable: [P, seed] array}."""
    P = sorted(P)
    xt, yt = stripe.stripe_data(n_test, d, boundaries, seed=10_000)
    out = {k: np.zeros((len(P), len(seeds))) for k in ("R_f", "R_f_limit", "test_error", "steps", "converged")}
    for si, seed in enumerate(seeds):
        x_all, y_all = stripe.stripe_data(max(P), d, boundaries, seed=seed)
        for pi, p in enumerate(P):
            net = stripe.StripeNet(d, h, alpha, generator=torch.Generator().manual_seed(1000 + seed))
            run = flow(net, x_all[:p], y_all[:p], max_steps=max_steps)
            with torch.no_grad(): err = ((net(xt) > 0).double() * 2 - 1 != yt).double().mean().item()
            vals = dict(R_f=stripe.stripe_stability(net, xt, radius), R_f_limit=stripe.gradient_ratio(net, xt),
                        test_error=err, steps=run["steps"], converged=float(run["converged"]))
            for k, v in vals.items(): out[k][pi, si] = v
    return out


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    "The smoke profile run as a sweep, its shards in a fresh work folder."
    work = tmp_path_factory.mktemp("fig7_work")
    return EXPERIMENT.run("smoke", work_dir=str(work)), work


def test_the_sweep_gives_the_former_single_cells_numbers(smoke):
    ds, _ = smoke
    p = EXPERIMENT.resolve("smoke")
    # the same gradient flow: the same numbers, bit for bit
    same = reference_cell(**p, flow=stripe.gradient_flow)
    for k, v in same.items(): np.testing.assert_array_equal(ds[k].transpose("P", "seed").values, v, err_msg=k)
    # the former gradient flow (autograd at every step): the same steps, and the rest equal to float64 rounding (the
    # weights agree to ~1e-15 of their displacement, tests/test_stripe.py; R_f is a ratio of their outputs' changes)
    former = reference_cell(**p, flow=reference_gradient_flow)
    np.testing.assert_array_equal(ds.steps.transpose("P", "seed").values, former["steps"])
    np.testing.assert_array_equal(ds.converged.transpose("P", "seed").values, former["converged"])
    for k in ("R_f", "R_f_limit", "test_error"):
        np.testing.assert_allclose(ds[k].transpose("P", "seed").values, former[k], rtol=1e-9, err_msg=k)


def test_dataset_wide_variables_carry_no_grid_dimension(smoke):
    ds, _ = smoke
    assert ds.picture_points.dims == ("picture_point", "coord") and ds.picture_label.dims == ("picture_point",)
    assert ds.in_fit.dims == ("P",) and ds.d.dims == () and ds.boundary.dims == ("boundary",)
    assert ds.R_f.dims == ("P", "seed") and list(ds.P.values) == [64, 128, 256]
    np.testing.assert_array_equal(ds.in_fit.values, [0.0, 1.0, 1.0])


def test_a_second_run_reads_the_cells_back(smoke, monkeypatch):
    ds, work = smoke
    @functools.wraps(cell)  # the same signature: the run's settings, and so its work folder, stay the same
    def refuse(**kwargs): raise AssertionError("a finished cell was computed again")
    monkeypatch.setattr(EXPERIMENT, "_cell", refuse)
    # reuse: another process editing the package between the two runs would make the shards "other code" (recompute)
    again = EXPERIMENT.run("smoke", work_dir=str(work), code_changed="reuse")
    xr.testing.assert_equal(again[["R_f", "steps"]], ds[["R_f", "steps"]])


def test_settings_reject_bad_arguments():
    with pytest.raises(ValueError, match="fit_from"): EXPERIMENT.resolve("smoke", fit_from=256)
    with pytest.raises(ValueError, match="seed"): EXPERIMENT.resolve("smoke", seeds=[])
    with pytest.raises(ValueError, match="P"): EXPERIMENT.resolve("smoke", P=[1, 128, 256])
    with pytest.raises(ValueError, match="repeat"): EXPERIMENT.resolve("smoke", P=[128, 128, 256])
    with pytest.raises(ValueError, match="increasing"): EXPERIMENT.resolve("smoke", boundaries=[1.0, 0.0])
    assert EXPERIMENT.resolve("smoke", P=[256, 64, 128])["P_max"] == 256


def test_cell_rejects_a_training_set_beyond_its_draw():
    args = dict(d=5, h=4, alpha=0.1, boundaries=[0.0], max_steps=5, n_test=20, radius=1e-3)
    with pytest.raises(ValueError, match="P_max"): cell(P=64, seed=0, P_max=32, **args)
