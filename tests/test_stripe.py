"""Tests of the stripe model beyond its notebook: the labels depend on x_∥ alone and flip at each interface
(hypothesis), the subspace noise has the asked norm and stays in its subspace, training is seeded and deterministic,
R_f is zero for a network blind to x_⊥, bad inputs; and `gradient_flow` follows its previous implementation
(autograd through F = α(f_w − f_w0) at every step, kept below as the reference) step for step, its gradient by hand
being autograd's (hypothesis)."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from diffgeo import stability, stripe
from diffgeo.stripe import QUARTILES, StripeNet, gradient_flow, gradient_ratio, stripe_data, stripe_labels, stripe_stability


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**16), d=st.integers(2, 12), m=st.integers(1, 4))
def test_labels_depend_on_x_parallel_only_and_flip_at_each_interface(seed, d, m):
    g = torch.Generator().manual_seed(seed)
    b = torch.sort(torch.randn(m, generator=g, dtype=torch.float64)).values
    if (b.diff() <= 1e-6).any(): return
    x = torch.randn(50, d, generator=g, dtype=torch.float64)
    y = stripe_labels(x, b.tolist())
    moved = x.clone(); moved[:, 1:] = torch.randn(50, d - 1, generator=g, dtype=torch.float64)
    assert torch.equal(stripe_labels(moved, b.tolist()), y)
    # just below and above each interface the label flips
    for bj in b:
        pts = torch.zeros(2, d, dtype=torch.float64); pts[0, 0], pts[1, 0] = bj - 1e-9, bj + 1e-9
        lab = stripe_labels(pts, b.tolist())
        assert lab[0] == -lab[1]


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**16), k=st.integers(1, 5), extra=st.integers(1, 5), radius=st.floats(1e-4, 10.0))
def test_subspace_noise_has_the_norm_and_stays_in_its_subspace(seed, k, extra, radius):
    D = k + extra
    g = torch.Generator().manual_seed(seed)
    U = torch.linalg.qr(torch.randn(D, k, generator=g, dtype=torch.float64)).Q.T     # k orthonormal rows
    p = stability.SubspaceNoise(U, radius)
    params, settings_ = p.draw((7, D), g)
    x = torch.randn(7, D, generator=g, dtype=torch.float64)
    moved, ref, rec = p.apply(x, params, g)
    nu = moved - x
    torch.testing.assert_close(nu.norm(dim=1), torch.full((7,), radius, dtype=torch.float64))
    torch.testing.assert_close(nu - nu @ U.T @ U, torch.zeros_like(nu), rtol=0, atol=1e-9 * max(1.0, radius))
    assert torch.equal(ref, x) and rec == {} and settings_["subspace_dim"] == k


def test_training_is_seeded():
    x, y = stripe_data(128, 10, seed=3)
    runs = []
    for _ in range(2):
        net = StripeNet(10, 16, 1e-2, generator=torch.Generator().manual_seed(5))
        runs.append((gradient_flow(net, x, y, max_steps=200), net.W.detach().clone()))
    assert runs[0][0] == runs[1][0] and torch.equal(runs[0][1], runs[1][1])


def test_a_network_blind_to_x_perp_has_zero_R_f():
    net = StripeNet(8, 12, 1.0, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        net.W[:, 1:] = 0; net.W0.copy_(net.W); net.W0[:, 0] *= -1      # both f_w and f_w0 read x_∥ only
    x, _ = stripe_data(300, 8, seed=1)
    assert stripe_stability(net, x) == 0.0 and gradient_ratio(net, x) == 0.0


def test_bad_inputs():
    with pytest.raises(ValueError, match="increasing"): stripe_labels(torch.zeros(3, 2), [0.5, 0.5])
    with pytest.raises(ValueError, match=r"\[P, d\]"): stripe_labels(torch.zeros(3), QUARTILES)
    with pytest.raises(ValueError, match="P"): stripe_data(0, 5)
    with pytest.raises(ValueError, match="alpha"): StripeNet(5, 4, 0.0)
    net = StripeNet(5, 4, 0.1)
    x, y = stripe_data(10, 5)
    with pytest.raises(ValueError, match="max_steps"): gradient_flow(net, x, y, max_steps=0)
    with pytest.raises(ValueError, match=r"y \[P\]"): gradient_flow(net, x, y[:5])
    with pytest.warns(FutureWarning, match="now progress"): gradient_flow(net, x, y, max_steps=1, show_progress=False)
    with pytest.raises(ValueError, match="orthonormal"): stability.SubspaceNoise(2 * torch.eye(5)[1:], 1.0)
    with pytest.raises(ValueError, match="radius"): stability.SubspaceNoise(torch.eye(5)[1:], 0.0)
    with pytest.raises(TypeError, match="directions"): stability.SubspaceNoise(torch.eye(5)[1], 1.0)


# ---- gradient_flow against its previous implementation (autograd through F = α(f_w − f_w0) at every step)

def reference_gradient_flow(net, x, y, max_steps=40000, loss="softhinge", sharpness=10.0, dt=1.0):
    "The reference: `gradient_flow` as it was before f_w0 was cached and the gradient written by hand (checks left out)."
    params = [net.W, net.b, net.beta]
    def objective():
        margin = y * net(x)
        per_point = torch.relu(1 - margin) if loss == "hinge" else torch.nn.functional.softplus(sharpness * (1 - margin)) / sharpness
        return per_point.mean() / net.alpha ** 2, margin.min().item()
    L, margin = objective()
    grads = torch.autograd.grad(L, params)
    steps = 0
    for _ in range(max_steps):
        if margin >= 1: break
        old = [p.detach().clone() for p in params]
        with torch.no_grad():
            for p, g in zip(params, grads): p -= dt * g
        new, new_margin = objective()
        if new.item() <= L.item():
            L, margin, dt = new, new_margin, dt * 1.1
            if margin < 1: grads = torch.autograd.grad(L, params)
        else:
            with torch.no_grad():
                for p, o in zip(params, old): p.copy_(o)
            dt /= 2
        steps += 1
    return dict(steps=steps, converged=margin >= 1, dt=dt, loss=L.item(), min_margin=margin)


def same_trajectory(P, d, h, alpha, seed, max_steps, **kwargs):
    """Train the same network on the same points with both implementations; assert the same steps and outcome, and final
    weights equal to rounding: float64's ε times √P (a sum over the training points, in another order, per gradient)
    times the steps (errors that at worst add up), relative to how far the weights moved."""
    x, y = stripe_data(P, d, seed=seed)
    runs = []
    for flow in (reference_gradient_flow, gradient_flow):
        net = StripeNet(d, h, alpha, generator=torch.Generator().manual_seed(100 + seed))
        runs.append((flow(net, x, y, max_steps=max_steps, **kwargs), net))
    (ref, net_ref), (ours, net_ours) = runs
    assert ours["steps"] == ref["steps"] and ours["converged"] == ref["converged"], (ref, ours)
    tol = torch.finfo(torch.float64).eps * math.sqrt(P) * max(ref["steps"], 1)
    for name in ("W", "b", "beta"):
        w_ref, w_ours, w0 = getattr(net_ref, name).detach(), getattr(net_ours, name).detach(), getattr(net_ref, name + "0")
        moved = (w_ref - w0).abs().max().item()
        assert (w_ours - w_ref).abs().max().item() <= tol * moved, (name, (w_ours - w_ref).abs().max().item() / moved, tol)
    for k in ("dt", "loss", "min_margin"): assert math.isclose(ours[k], ref[k], rel_tol=tol), (k, ref[k], ours[k])
    return ref


@pytest.mark.parametrize("P, d, h, alpha, seed, max_steps", [
    (64, 30, 20, 1e-2, 0, 300),        # the smoke profile's network, stopped before a margin of 1
    (256, 30, 100, 1e-2, 1, 40000),    # the cpu profile's network, to a margin of 1
    (128, 30, 1000, 1e-3, 3, 40000),   # the paper's network (h = 1000, α = 1e-3)
    (300, 5, 30, 1.0, 4, 40000),       # lazier (α√h ≈ 5), low dimension
])
def test_gradient_flow_follows_the_reference_trajectory(P, d, h, alpha, seed, max_steps):
    same_trajectory(P, d, h, alpha, seed, max_steps)


def test_gradient_flow_follows_the_reference_with_the_hinge_and_other_options():
    same_trajectory(96, 8, 16, 1e-1, 5, 400, loss="hinge")          # its kinks, as autograd takes them
    same_trajectory(96, 8, 16, 1e-1, 6, 400, sharpness=3.0, dt=0.01)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 40), st.integers(2, 6), st.integers(1, 12),
       st.sampled_from([1e-3, 1e-1, 1.0]), st.sampled_from(["softhinge", "hinge"]))
def test_the_gradient_by_hand_is_autograds(seed, P, d, h, alpha, loss):
    g = torch.Generator().manual_seed(seed)
    net = StripeNet(d, h, alpha, generator=g)
    with torch.no_grad():
        for p in (net.W, net.b, net.beta): p.add_(torch.randn(p.shape, generator=g, dtype=torch.float64))  # away from w0
    x, y = torch.randn(P, d, generator=g, dtype=torch.float64), torch.randn(P, generator=g, dtype=torch.float64).sign()
    L = stripe._loss(y * net(x), alpha, loss, 10.0)
    auto = torch.autograd.grad(L, [net.W, net.b, net.beta])
    margin = (y * net(x)).detach().requires_grad_()
    c, = torch.autograd.grad(stripe._loss(margin, alpha, loss, 10.0), margin)
    a = stripe._hidden(x, net.W.detach(), net.b.detach(), torch.empty(P, h, dtype=torch.float64))
    by_hand = stripe._gradient(a, c * y * alpha / math.sqrt(h), torch.cat([x, torch.ones(P, 1, dtype=torch.float64)], 1), net.beta.detach())
    for ours, ref in zip(by_hand, auto):
        torch.testing.assert_close(ours, ref, rtol=1e-10, atol=1e-12 * max(1.0, ref.abs().max().item()))
