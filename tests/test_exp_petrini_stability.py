"""Tests of petrini_fig3, petrini_fig6, petrini_fig12 and petrini_tab2 beyond their notebooks: derived
quantities on known answers, cells independent of each other, the committed fig3 and fig6 runs against each other, and bad
settings."""

import inspect

import numpy as np
import pytest
import torch
import xarray as xr

from diffgeo import results
from diffgeo.experiments import petrini_fig3, petrini_fig6, petrini_fig12, petrini_tab2


def _fig6_dataset(exponents:dict) -> xr.Dataset:
    "Medians that follow R_f = A P^k per architecture (G_f = 1 exactly, D_f = R_f)."
    P = np.array([250, 500, 1000, 2000])
    archs, seeds = list(exponents), [0, 1]
    shape = (len(archs), len(P), len(seeds), 2, 1, 1, 3)  # arch, P, seed, state, c, interpolation, sample
    d = np.ones(shape)
    for i, a in enumerate(archs):
        for s in seeds: d[i, :, s] = (s + 2.0) * P[:, None, None, None, None].astype(float) ** exponents[a]
    dims = ("arch", "P", "seed", "state", "c", "interpolation", "sample")
    ds = xr.Dataset({"d_diffeo": (dims, d), "d_noise": (dims, np.ones(shape)), "d_pair": (dims, np.ones(shape)),
                     "test_error": (("arch", "P", "seed", "state"), np.full(shape[:4], 0.1) * np.arange(1, 5)[None, :, None, None] ** -0.5),
                     "in_fit": (("P",), (P >= 500).astype(float))},
                    coords={"arch": archs, "P": P, "seed": seeds, "state": ["init", "trained"], "c": [3], "interpolation": ["bilinear"]})
    return petrini_fig6.derive(ds)


def test_fig6_slopes_recover_power_laws():
    ds = _fig6_dataset({"A": -1.0, "B": 0.5})
    np.testing.assert_allclose(ds.slope_R_f.sel(arch="A"), -1.0)
    np.testing.assert_allclose(ds.slope_D_f.sel(arch="B"), 0.5)
    np.testing.assert_allclose(ds.slope_G_f, 0.0, atol=1e-12)
    np.testing.assert_allclose(ds.R_f_logmean.sel(arch="A", P=1000, state="trained").squeeze(), np.sqrt(6) * 1000.0 ** -1)
    np.testing.assert_allclose(ds.R_f_logstd.sel(arch="A", P=1000).squeeze(), np.log10(3 / 2) / np.sqrt(2))


def _smoke_cell(exp, **kw) -> dict:
    "The settings a smoke run hands each cell of `exp` (the profile is their one source: the cells declare no defaults), with `kw` over them."
    p, accepts = exp.resolve("smoke"), inspect.signature(exp._cell).parameters
    return {k: v for k, v in p.items() if k in accepts and k not in exp.grid(p)} | kw


def test_fig6_init_probe_is_the_same_for_every_P():
    kw = _smoke_cell(petrini_fig6.EXPERIMENT, n_val=128, steps=2, n_test=16, cs=[3], interps=["bilinear"], batch_size=32)
    a, b = (petrini_fig6.cell("FullConnL2", P, 0, **kw) for P in (64, 128))
    for k in ("d_diffeo", "d_noise", "d_pair"): xr.testing.assert_equal(a[k].sel(state="init"), b[k].sel(state="init"))
    assert not np.array_equal(a.d_diffeo.sel(state="trained"), b.d_diffeo.sel(state="trained"))


@pytest.mark.parametrize("bad, match", [(dict(P=[128, 64]), "increasing"), (dict(P=[64, 128], fit_from=128), "fit_from"),
                                        (dict(interps=["cubic"]), "interps"), (dict(cs=[3, 3]), "repeat"),
                                        (dict(archs=["NoSuchNet"]), "NoSuchNet")])
def test_fig6_bad_settings_fail_before_any_cell(bad, match):
    with pytest.raises(ValueError, match=match): petrini_fig6.EXPERIMENT.resolve("smoke", **bad)


def test_fig6_cell_refuses_a_training_set_larger_than_the_split():
    with pytest.raises(ValueError, match="exceeds"): petrini_fig6.cell("FullConnL2", 10_000, 0, **_smoke_cell(petrini_fig6.EXPERIMENT, n_test=8, steps=1))


def test_fig3_noise_slope_is_two_for_a_linear_response():
    eta = np.geomspace(1e-3, 10, 6)
    G = np.stack([3 * eta ** 2, 3 * eta ** 2 / (1 + eta ** 2)])  # two states: linear, saturating at large noise
    ones = np.ones((1, 1, 2, 1, 1, 1))
    ds = xr.Dataset({"m_diffeo": (("arch", "seed", "state", "c", "interpolation", "delta"), ones),
                     "m_noise": (("arch", "seed", "state", "c", "interpolation", "delta"), ones),
                     "m_pair": (("arch", "seed", "state", "c", "interpolation", "delta"), ones),
                     "G_f_eta": (("arch", "seed", "state", "noise_scale"), G[None, None]),
                     "eta_norm": (("arch", "seed", "noise_scale"), eta[None, None])},
                    coords={"arch": ["A"], "seed": [0], "state": ["init", "trained"], "c": [3], "interpolation": ["bilinear"],
                            "delta": [1.0], "noise_scale": np.arange(6)})
    out = petrini_fig3.derive(ds)
    np.testing.assert_allclose(out.noise_slope.sel(state="init"), 2.0)
    np.testing.assert_allclose(out.noise_slope.sel(state="trained"), 2.0, atol=1e-3)


@pytest.mark.parametrize("bad, match", [(dict(deltas=[0.5, 2.0]), "include 1"), (dict(noise_scales=[1.0, 0.1, 10.0]), "increasing"),
                                        (dict(every=0), "every")])
def test_fig3_bad_settings_fail_before_any_cell(bad, match):
    with pytest.raises(ValueError, match=match): petrini_fig3.EXPERIMENT.resolve("smoke", **bad)


def test_fig12_diffeo_augmentation_at_zero_temperature_is_the_identity():
    x = torch.rand(3, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(petrini_fig12.diffeo_augment(x, torch.Generator().manual_seed(1), T=0.0), x)


@pytest.mark.parametrize("bad, match", [(dict(augmentations=["none", "rotation"]), "augmentations"), (dict(T=-1.0), "T"),
                                        (dict(c_augment=0.5), "c_augment")])
def test_fig12_bad_settings_fail_before_any_cell(bad, match):
    with pytest.raises(ValueError, match=match): petrini_fig12.EXPERIMENT.resolve("smoke", **bad)


def test_tab2_correlations_match_numpy():
    rng = np.random.default_rng(0)
    err, R = rng.uniform(0.01, 0.5, (5, 2)), rng.uniform(0.1, 2.0, (5, 2))  # arch, seed
    dims = ("dataset", "arch", "seed", "delta", "c", "interpolation")
    shape = (1, 5, 2, 1, 1, 1)
    ds = xr.Dataset({"m_diffeo": (dims, R.reshape(shape)), "m_noise": (dims, np.ones(shape)), "m_pair": (dims, np.ones(shape) * 2),
                     "test_error": (("dataset", "arch", "seed"), err[None])},
                    coords={"dataset": ["mnist5k"], "arch": list("abcde"), "seed": [0, 1], "delta": [1.0], "c": [3],
                            "interpolation": ["bilinear"]})
    out = petrini_tab2.derive(ds)
    gm = lambda v: 10 ** np.log10(v).mean(1)
    expected = np.corrcoef(np.log10(gm(err)), np.log10(gm(R)))[0, 1]
    np.testing.assert_allclose(out.corr_R_f.item(), expected)
    np.testing.assert_allclose(out.corr_D_f.item(), expected)  # D_f = R_f / 2 here
    np.testing.assert_allclose(out.corr_R_f_seed.sel(seed=1).item(), np.corrcoef(np.log10(err[:, 1]), np.log10(R[:, 1]))[0, 1])
    t = petrini_tab2.table2(out)
    assert t.loc["mnist5k", "R_f (paper)"] == 0.75 and np.isclose(t.loc["mnist5k", "R_f (ours)"], expected)


@pytest.mark.parametrize("bad, match", [(dict(datasets=["mnist5k", "mnist5k"]), "repeat"), (dict(datasets=["imagenet"]), "unknown dataset"),
                                        (dict(archs=["LeNet", "FullConnL2"]), "three"), (dict(deltas=[2.0]), "include 1")])
def test_tab2_bad_settings_fail_before_any_cell(bad, match):
    with pytest.raises(ValueError, match=match): petrini_tab2.EXPERIMENT.resolve("smoke", **bad)


def test_fig3_trained_the_networks_of_fig6_at_its_largest_P():
    "Same seeds, same recipe: the committed fig3 and fig6 results hold the same networks, to the last digit."
    from pathlib import Path
    root = Path(__file__).parents[1]
    a = petrini_fig3.EXPERIMENT.load(root / petrini_fig3.EXPERIMENT.paths("cpu").dataset)
    b = petrini_fig6.EXPERIMENT.load(root / petrini_fig6.EXPERIMENT.paths("cpu").dataset)
    common = sorted(set(a.arch.values) & set(b.arch.values))
    assert len(common) == 3 and int(results.parameters(a)["P"]) == int(b.P.max())
    probe = dict(c=3, interpolation="bilinear")
    for k in ("R_f", "D_f", "G_f"):
        np.testing.assert_allclose(a[k].sel(arch=common, delta=1.0, **probe), b[k].sel(arch=common, P=b.P.max(), **probe), rtol=1e-12)
    np.testing.assert_array_equal(a.test_error.sel(arch=common), b.test_error.sel(arch=common, P=b.P.max()))


def test_fig12_translation_networks_are_those_of_fig6():
    "Translations are the standard recipe: fig12's translation-trained ResNets are fig6's at its largest P, to the last digit."
    from pathlib import Path
    root = Path(__file__).parents[1]
    a = petrini_fig12.EXPERIMENT.load(root / petrini_fig12.EXPERIMENT.paths("cpu").dataset)
    b = petrini_fig6.EXPERIMENT.load(root / petrini_fig6.EXPERIMENT.paths("cpu").dataset)
    probe = dict(arch="ResNet18", interpolation="bilinear")
    np.testing.assert_allclose(a.R_f.sel(augmentation="translation", **probe), b.R_f.sel(P=b.P.max(), **probe), rtol=1e-12)


def test_tab2_networks_are_those_of_fig6_and_fig3():
    "Same seeds, same recipe: tab2's FullConnL4, LeNet, ResNet18 are fig6's at its largest P, its EfficientNetB0 is fig3's."
    from pathlib import Path
    root = Path(__file__).parents[1]
    load = lambda m: m.EXPERIMENT.load(root / m.EXPERIMENT.paths("cpu").dataset)
    t, six, three = load(petrini_tab2), load(petrini_fig6), load(petrini_fig3)
    probe = dict(c=3, interpolation="bilinear")
    t = t.sel(dataset="mnist5k", delta=1.0, **probe)
    for arch in ("FullConnL4", "LeNet", "ResNet18"):
        np.testing.assert_allclose(t.R_f.sel(arch=arch), six.R_f.sel(arch=arch, P=six.P.max(), state="trained", **probe), rtol=1e-12)
    np.testing.assert_allclose(t.R_f.sel(arch="EfficientNetB0"),
                               three.R_f.sel(arch="EfficientNetB0", state="trained", delta=1.0, **probe), rtol=1e-12)


def test_an_undefined_fit_says_why():
    "A run with fewer than three trained networks (a smoke run's two) gets NaN correlations and a sentence saying why."
    from diffgeo.experiments import petrini_fig5
    ds = petrini_fig5.EXPERIMENT.load("results/petrini_fig5.nc")          # from the checkout's root, wherever pytest runs
    assert petrini_fig5.fit_note(ds) == "" and np.isfinite(ds.corr_R_f.item())
    two = petrini_fig5.derive(ds.isel(arch=[0, 1]))
    assert np.isnan(two.corr_R_f.item()) and np.isnan(two.fit_exponent.item())
    assert "at least 3 trained networks" in petrini_fig5.fit_note(two) and "has 2" in petrini_fig5.fit_note(two)
