"""Tests of the Moskalev et al. experiments' own functions beyond their notebooks: the neighbour statistics of Fig. 2
against a brute-force count (hypothesis), the penultimate representation of a weight-tied net, the offline drift target
of Fig. 4, and bad inputs; the cells' resume from the folder their context keeps (`ctx.kept()`, `moskalev.Measured`), and
the one cost model of their runs. Float64 where values are compared exactly."""

import os

import numpy as np
import pytest
import torch
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st

from diffgeo import data, invariance
from diffgeo.scaffold import CellContext
from diffgeo.experiments.moskalev_fig2 import orbit_neighbours, penultimate
from diffgeo.experiments.moskalev_fig4 import PHOTOS, cell, drift_target, image_patches


@settings(max_examples=30, deadline=None)
@given(n=st.integers(3, 40), F=st.integers(1, 5), block=st.integers(1, 50), seed=st.integers(0, 2**16))
def test_orbit_neighbours_matches_brute_force(n, F, block, seed):
    gen = torch.Generator().manual_seed(seed)
    z, zg = torch.randn(n, F, dtype=torch.float64, generator=gen), torch.randn(n, F, dtype=torch.float64, generator=gen)
    labels = torch.randint(3, (n,), generator=gen)
    k = min(3, n - 1)
    d, r, a = orbit_neighbours(z, zg, labels, k=k, block=block)
    for i in range(n):
        di = (zg[i] - z[i]).norm()
        others = [j for j in range(n) if j != i]
        assert d[i] == di
        assert r[i] == sum(bool((z[j] - z[i]).norm() < di) for j in others)
        near = sorted(others, key=lambda j: ((zg[i] - z[j]).norm().item(), j))[:k]
        votes = np.bincount(labels[near].numpy(), minlength=3)
        if (votes == votes.max()).sum() == 1:   # (ties: torch.mode's pick among equals is not specified)
            assert a[i] == float(votes.argmax() == labels[i])


def test_invariant_representation_has_rank_zero():
    z = torch.randn(20, 4, dtype=torch.float64)
    d, r, a = orbit_neighbours(z, z.clone(), torch.arange(20) % 2, k=3)
    assert (d == 0).all() and (r == 0).all()


def test_weight_tied_penultimate_is_invariant():
    G = invariance.Rotations(4)
    net = invariance.perceptron((1, 12, 12), 3, width=8, hidden=3, group=G).double()
    x = torch.randn(5, 1, 12, 12, dtype=torch.float64)
    z = penultimate(net, x)
    assert z.shape == (5, 8)
    for k in range(1, 4): torch.testing.assert_close(penultimate(net, G.act(x, k)), z, rtol=0, atol=1e-12)


def test_patches_and_drift_target():
    p = image_patches(30, size=20, seed=5)
    assert p.test.images.shape == (30, 1, 20, 20) and p.classes == PHOTOS
    torch.testing.assert_close(image_patches(30, size=20, seed=5).test.images, p.test.images, rtol=0, atol=0)  # seeded
    tm = invariance.transforming(data.load("mnist5k", normalize=False), invariance.CyclicShifts(3), 100, 20, 30)
    x2 = drift_target("patches", tm, 30, [9])
    assert x2.shape == tm.test.images.shape


def test_bad_inputs():
    with pytest.raises(ValueError, match="1 to"): orbit_neighbours(torch.zeros(3, 2), torch.zeros(3, 2), torch.zeros(3, dtype=torch.int64), k=5)
    with pytest.raises(ValueError, match="n"): image_patches(0)
    tm = invariance.transforming(data.load("mnist5k", normalize=False), invariance.Rotations(4), 50, 10, 10)
    with pytest.raises(ValueError, match="target"): drift_target("kmnist", tm, 10, [9])
    with pytest.raises(ValueError, match="start at 0"):
        cell(groups=["rot4"], dataset="mnist5k", target="patches", n_train=50, n_val=10, n_test=10, leave_out=[9], epochs=1,
                         seeds=[0], nus=[1.0], si_target=0.95, lr=1e-3, batch_size=16, steps=2, betas=[0.5, 1.0])


@pytest.mark.kernel_free   # the resume logic; its numbers are compared within one kernel path: the portable pass skips it
@pytest.mark.filterwarnings("ignore:no ν in")
def test_table1_cell_resumes_without_the_seeds_it_measured(tmp_path, monkeypatch):
    "An IR cell stopped while measuring its second seed resumes from its kept folder (ctx.kept()): no search, no seed measured twice, the same result."
    from diffgeo.experiments import moskalev_tab1 as M
    kw = dict(group="shift3", model="IR", dataset="mnist5k", n_train=60, n_val=20, n_test=10, leave_out=[9], epochs=2,
              seeds=[0, 1], nus=[0.1, 1.0], si_target=0.95, lr=8e-4, batch_size=32, steps=2, panels=2)
    ref = M.cell(**kw)
    real, calls = invariance.invariance_measures, []
    def stop_on_the_second_seed(*a, **k):
        calls.append(1)
        if len(calls) == 4: raise KeyboardInterrupt   # calls: ν = 0.1, ν = 1.0, seed 0, seed 1
        return real(*a, **k)
    monkeypatch.setattr(invariance, "invariance_measures", stop_on_the_second_seed)
    ctx = CellContext(checkpoints=str(tmp_path), cell="group-shift3_model-IR", experiment=M.EXPERIMENT.name)   # as the sweep gives it
    with pytest.raises(KeyboardInterrupt): M.cell(**kw, ctx=ctx)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.done.pt")) == [
        "group-shift3_model-IR/seed0.done.pt", "group-shift3_model-IR/tune.done.pt"]   # in the cell's own folder (ctx.kept())
    calls.clear()
    again = M.cell(**kw, ctx=ctx)
    assert len(calls) == 1                                  # seed 1 only
    xr.testing.assert_identical(again, ref)
    assert not list(tmp_path.iterdir())                     # the cell's work files are gone with it


def _stopped_and_resumed(M, kw:dict, tmp_path, monkeypatch, stop_at:int) -> tuple:
    """Run `M.cell(**kw)` with `tmp_path` as its run's checkpoint folder (its context's), interrupted (KeyboardInterrupt) at the `stop_at`-th call of
    `invariance.invariance_measures`, then again to the end: (the `.done.pt` files the stopped run left, sorted; the
    measures the resumed run called; its dataset; the resumed run's trainings as (kind, seed, whether its checkpoint
    existed))."""
    real, calls, stop = invariance.invariance_measures, [], [stop_at]
    def interrupting(*a, **k):
        calls.append(1)
        if len(calls) == stop[0]: raise KeyboardInterrupt
        return real(*a, **k)
    monkeypatch.setattr(invariance, "invariance_measures", interrupting)
    ctx = CellContext(checkpoints=str(tmp_path), experiment=M.EXPERIMENT.name)   # a one-cell run's: its folder named after the experiment
    with pytest.raises(KeyboardInterrupt): M.cell(**kw, ctx=ctx)
    assert [p.name for p in tmp_path.iterdir()] == [M.EXPERIMENT.name]
    left = sorted(p.name for p in (tmp_path / M.EXPERIMENT.name).glob("*.done.pt"))
    calls.clear(); stop[0] = None
    import inspect
    real_fit, trainings = M.fit, []
    def recording(*a, **k):
        args = inspect.signature(real_fit).bind(*a, **k).arguments
        trainings.append((args["kind"], args["seed"], args.get("checkpoint") is not None and os.path.exists(args["checkpoint"])))
        return real_fit(*a, **k)
    monkeypatch.setattr(M, "fit", recording)
    again = M.cell(**kw, ctx=ctx)
    return left, len(calls), again, trainings


@pytest.mark.kernel_free   # the resume logic; its numbers are compared within one kernel path: the portable pass skips it
@pytest.mark.filterwarnings("ignore:no ν in")
def test_fig5_cell_resumes_without_the_models_it_measured(tmp_path, monkeypatch):
    "Fig. 5's one cell stopped after an IR form's search, while measuring its first seed, resumes from its kept folder (ctx.kept()): no "
    "search again (the chosen ν's model from its checkpoint), no model measured twice, the same result, its work files gone."
    from diffgeo.experiments import moskalev_fig5 as M
    kw = dict(groups=["rot4"], dataset="mnist5k", n_train=60, n_val=20, n_test=10, leave_out=[9], epochs=2, seeds=[0, 1],
              nus={"kl": [1.0, 3.0], "l2": [1.0], "l2_normalized": [1.0]}, si_target=0.95, lr=8e-4, batch_size=32, steps=2,
              linear_steps=5, linear_images=8)
    ref = M.cell(**kw)
    left, calls, again, trainings = _stopped_and_resumed(M, kw, tmp_path, monkeypatch, 5)   # DA seeds 0, 1; IR-kl: ν = 1, ν = 3, seed 0
    assert left == ["rot4_DA_seed0.done.pt", "rot4_DA_seed1.done.pt", "rot4_IR-kl_tune.done.pt"]
    assert calls == 2 + 2 * 3                               # IR-kl's two seeds, then the other two forms' search (one ν) and two seeds
    assert ("IR", 0, True) in trainings                     # IR-kl's first seed: the search's model, from its checkpoint
    xr.testing.assert_identical(again, ref)
    assert not list(tmp_path.iterdir())                     # the cell's work files are gone with it


@pytest.mark.kernel_free   # the resume logic; its numbers are compared within one kernel path: the portable pass skips it
@pytest.mark.filterwarnings("ignore:no ν in")
def test_fig4_cell_resumes_without_the_models_it_measured(tmp_path, monkeypatch):
    "Fig. 4's one cell stopped while measuring DA's first seed resumes from its kept folder (ctx.kept()): no search again (IR's first "
    "seed is the chosen ν's model, from its checkpoint), no model measured twice, the same result, its work files gone."
    from diffgeo.experiments import moskalev_fig4 as M
    kw = dict(groups=["rot4"], dataset="mnist5k", target="patches", n_train=60, n_val=20, n_test=10, leave_out=[9], epochs=2,
              seeds=[0, 1], nus=[1.0, 3.0], si_target=0.95, lr=8e-4, batch_size=32, steps=2, betas=[0.0, 1.0])
    ref = M.cell(**kw)
    left, calls, again, trainings = _stopped_and_resumed(M, kw, tmp_path, monkeypatch, 8)   # the search (ν = 1, 3), WT seeds 0, 1 (two β each), DA seed 0
    assert left == ["rot4_WT_seed0.done.pt", "rot4_WT_seed1.done.pt", "rot4_tune.done.pt"]
    assert calls == 4 * 2                                   # DA's and IR's two seeds at two β; no search
    assert ("IR", 0, True) in trainings and ("IR", 0, False) not in trainings   # IR's first seed: the search's model, from its checkpoint
    xr.testing.assert_identical(again, ref)
    assert not list(tmp_path.iterdir())                     # the cell's work files are gone with it


@pytest.mark.kernel_free   # arithmetic on fixed times (the notebooks' smoke runs time the real ones)
def test_one_cost_model_counts_every_training(monkeypatch):
    "At fixed step and image times, each experiment's cost counts its trainings (the search's, the seeds', the search's seed-0 model reused) and its measures."
    from diffgeo.experiments import moskalev as K, moskalev_fig4, moskalev_fig5, moskalev_tab1
    monkeypatch.setattr(K, "_step", lambda group, model, batch_size, device: 1.0)
    monkeypatch.setattr(K, "image_seconds", lambda what, group, model, steps, device: {"measures": 1e-3, "drift": 1e-4, "sigma": 1e-5}[what])
    s = dict(groups=["rot4", "shift3"], seeds=[0, 1, 2], epochs=10, n_train=1000, n_val=300, n_test=200, batch_size=100, steps=4,
             nus=[0.1, 1.0], betas=[0.0, 0.5, 1.0])
    fit = 10 * (10 + 300 / 300)              # 10 epochs of 10 steps, and each epoch's validation at a third of a step per image
    search = 2 * 300 * 1e-3                  # the validation SI of the search's two ν
    assert moskalev_tab1.cost(s, dict(group="rot4", model="DA"), "cpu") == pytest.approx(3 * fit + 3 * 200 * 1e-3)
    assert moskalev_tab1.cost(s, dict(group="rot4", model="IR"), "cpu") == pytest.approx(4 * fit + search + 3 * 200 * 1e-3)
    assert moskalev_fig4.cost(s, {}, "cpu") == pytest.approx(2 * ((3 + 3 + 4) * fit + search + 3 * 3 * 200 * 3 * 1e-4))
    s5 = dict(s, nus={"kl": [1.0, 3.0], "l2": [1.0], "l2_normalized": [1.0, 3.0, 10.0]})
    fits = 3 + (2 + 2) + (1 + 2) + (3 + 2)   # DA's seeds; each form's search and its other seeds
    assert moskalev_fig5.cost(s5, {}, "cpu") == pytest.approx(2 * (fits * fit + 6 * 300 * 1e-3 + 4 * 3 * 200 * (1e-3 + 1e-5)))
