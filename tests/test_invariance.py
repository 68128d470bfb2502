"""Tests of diffgeo.invariance beyond the notebook's examples: the group axioms on random images (hypothesis), exact
invariance of the weight-tied perceptron, the regulariser's gradient against finite differences, σ_max against the
dense Jacobian of a convolutional net, the measures' dataset, and bad inputs.

Tolerances: float64 throughout; "exact" means a few ε of the quantities compared."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from diffgeo.invariance import (CyclicShifts, GroupPooledLinear, InvariancePenalty, Rotations, choose_nu, invariance_error,
                                invariance_measures, perceptron, saliency, sigma_max, summarize_invariance, transforming)

F64 = torch.float64
GROUPS = [Rotations(4), Rotations(2), CyclicShifts(3), CyclicShifts(2)]


def images(B=4, C=1, S=12, seed=0):
    return torch.randn(B, C, S, S, dtype=F64, generator=torch.Generator().manual_seed(seed))


@settings(max_examples=25, deadline=None)
@given(g=st.sampled_from(GROUPS), a=st.integers(0, 3), b=st.integers(0, 3), C=st.integers(1, 3), k=st.integers(1, 4),
       seed=st.integers(0, 2**16))
def test_group_axioms(g, a, b, C, k, seed):
    a, b = a % g.order, b % g.order
    x = images(2, C, 6 * k, seed)                       # square, width a multiple of 2 and 3
    assert torch.equal(g.act(g.act(x, b), a), g.act(x, g.compose(a, b)))       # compatibility (closure)
    assert torch.equal(g.act(g.act(x, a), g.inverse(a)), x)                     # inverse
    assert torch.equal(g.act(x, 0), x)                                          # identity
    assert g.compose(a, g.compose(b, 1 % g.order)) == g.compose(g.compose(a, b), 1 % g.order)  # associativity
    orbit = g.orbit(x)
    assert orbit.shape == (2, g.order, C, 6 * k, 6 * k)
    assert torch.equal(orbit[:, a], g.act(x, a))


@pytest.mark.parametrize("g", GROUPS)
@pytest.mark.parametrize("pool", ["max", "mean"])
def test_weight_tied_perceptron_is_invariant(g, pool):
    torch.manual_seed(0)
    net = perceptron((2, 12, 12), 5, width=16, hidden=2, group=g, pool=pool).double()
    x = images(6, 2, 12)
    out = net(x)
    for k in range(g.order):
        assert (net(g.act(x, k)) - out).abs().max() <= 1e-13 * out.abs().max()


def test_measures_of_an_invariant_model_are_0_0_1():
    torch.manual_seed(0)
    g = Rotations(4)
    net = perceptron((1, 12, 12), 3, width=16, hidden=2, group=g).double()
    x, y = images(5), torch.tensor([0, 1, 2, 0, 1])
    ds = invariance_measures(net, x, y, g, steps=8)
    assert ds.LI.dims == ("sample", "group_element") and ds.sizes == {"sample": 5, "group_element": 4}
    assert float(ds.LI_f) < 1e-24 and float(ds.DI_f) < 1e-15 and abs(float(ds.SI_f) - 1) < 1e-12
    assert set(ds.correct.values.ravel()) <= {0.0, 1.0}
    again = summarize_invariance(ds)
    assert float(again.SI_f) == float(ds.SI_f) and ds.attrs["group"] == "rot4"


@pytest.mark.parametrize("form", ["l2", "kl", "l2_normalized"])
def test_penalty_gradient_against_finite_differences(form):
    torch.manual_seed(0)
    net = perceptron((1, 6, 6), 3, width=8, hidden=2).double()
    x = images(4, 1, 6)
    pen = InvariancePenalty(CyclicShifts(3), nu=0.7, form=form)
    value = lambda: pen(net, x, net(x), torch.Generator().manual_seed(5))     # the same drawn elements each call
    w = net[0][1].weight
    grad, = torch.autograd.grad(value(), w)
    h = 1e-6
    for i, j in [(0, 0), (3, 17), (7, 35)]:
        with torch.no_grad(): w[i, j] += h
        up = value().item()
        with torch.no_grad(): w[i, j] -= 2 * h
        down = value().item()
        with torch.no_grad(): w[i, j] += h
        fd = (up - down) / (2 * h)
        assert abs(fd - grad[i, j].item()) <= 1e-6 * max(1.0, abs(fd))       # central differences: O(h²) + ε/h


def test_sigma_max_of_a_conv_net_against_the_dense_jacobian():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 3, 3), nn.Tanh(), nn.Flatten(), nn.Linear(3 * 10 * 10, 4)).double()
    x = images(3, 1, 12)
    dense = torch.stack([torch.autograd.functional.jacobian(lambda z: net(z[None])[0], p).reshape(4, -1) for p in x])
    assert torch.allclose(sigma_max(net, x, iters=2000, rtol=1e-13), torch.linalg.matrix_norm(dense, 2), rtol=1e-8)


def test_saliency_is_nonnegative_and_keeps_the_top():
    torch.manual_seed(0)
    net = perceptron((1, 12, 12), 3, width=8, hidden=1).double()
    m = saliency(net, images(3), torch.tensor([0, 1, 2]), steps=8)
    assert m.shape == (3, 12, 12) and (m >= 0).all() and (m.flatten(1) > 0).any(1).all()


def test_transforming_is_seeded_and_disjoint():
    from diffgeo.data import load
    raw = load("mnist5k", normalize=False)
    a, b = transforming(raw, CyclicShifts(3), 300, 100, 200, seed=3), transforming(raw, CyclicShifts(3), 300, 100, 200, seed=3)
    assert torch.equal(a.test.images, b.test.images) and torch.equal(a.train.labels, b.train.labels)
    flat = torch.cat([a.train.images, a.val.images, a.test.images]).flatten(1)
    assert len(torch.unique(flat, dim=0)) == 600                                  # no image in two splits
    assert 9 not in set(a.train.labels.tolist()) and a.classes[-1] == "8"


def test_bad_inputs():
    x = images()
    with pytest.raises(ValueError, match="square"): Rotations(4).orbit(x[..., :10])
    with pytest.raises(ValueError, match="multiple of 3"): CyclicShifts(3).act(x[..., :10, :10], 1)
    with pytest.raises(ValueError, match="one per image"): Rotations(4).act(x, torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="integers in"): Rotations(4).act(x, torch.tensor([0, 1, 2, 7]))
    with pytest.raises(ValueError, match="form"): invariance_error(x[:, 0, 0], x[:, 0, 0], "cosine")
    with pytest.raises(TypeError, match="FiniteGroup"): InvariancePenalty("rot4", 1.0)
    with pytest.raises(TypeError, match="FiniteGroup"): GroupPooledLinear(4, 2, None)
    with pytest.raises(ValueError, match="one integer label"):
        invariance_measures(perceptron((1, 12, 12), 3).double(), x, torch.zeros(3, dtype=torch.int64), Rotations(4))
    with pytest.raises(ValueError, match="at least one"): choose_nu(lambda nu: 1.0, [])
    with pytest.warns(UserWarning, match="Extend the grid"): assert choose_nu(lambda nu: 0.5, [1, 2])[0] == 1   # equal SI: the smaller ν
    with pytest.raises(ValueError, match="n_train"):
        from diffgeo.data import load
        transforming(load("mnist5k", normalize=False), Rotations(4), 0)
