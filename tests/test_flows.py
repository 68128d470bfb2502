"""Tests of diffgeo.flows beyond the notebook's examples: the schemes on random fields (hypothesis), the ResNet identity
for time-varying fields, round trips, the inverse-consistency penalty of an exactly invertible map, the determinant map
against the closed form of an affine field, and bad inputs. Float64 throughout; tolerances follow from each scheme's
order (stated per test), not from a run."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from diffgeo.flows import (Flow, VelocityField, determinant_map, grid, inverse_consistency, scaling_and_squaring,
                           uniform_points)

F64 = torch.float64


def field(seed=0, stationary=False, units=5, basis=6, dim=2, activation="tanh", scale=0.5):
    f = VelocityField(dim, basis, units, stationary, activation, generator=torch.Generator().manual_seed(seed)).to(F64)
    with torch.no_grad(): f.nu.mul_(scale)
    return f.requires_grad_(False)


def pts(n=40, dim=2, seed=1):
    return 2 * torch.rand(n, dim, dtype=F64, generator=torch.Generator().manual_seed(seed)) - 1


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**16), stationary=st.booleans(), units=st.integers(1, 6), dim=st.integers(1, 4))
def test_euler_is_the_residual_stack(seed, stationary, units, dim):
    f, x = field(seed, stationary, units, dim=dim), pts(dim=dim, seed=seed)
    r = x.clone()
    for k in range(units): r = r + f(r, k)
    torch.testing.assert_close(Flow(f)(x), r, rtol=0, atol=0)
    traj = Flow(f).trajectory(x)
    assert traj.shape == (units + 1, 40, dim) and torch.equal(traj[0], x) and torch.equal(traj[-1], r)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**16), stationary=st.booleans())
def test_rk4_round_trip(seed, stationary):
    "RK4 with 8 substeps per unit: forward then backward is the identity to its truncation error (≪ 1e-8 for these fields)."
    f, x = field(seed, stationary), pts(seed=seed)
    fl = Flow(f, 1.0, "rk4", 8)
    torch.testing.assert_close(fl.inverse(fl(x)), x, rtol=0, atol=1e-8)
    torch.testing.assert_close(fl.trajectory(fl(x), inverse=True)[-1], x, rtol=0, atol=1e-8)


def test_schemes_agree_on_a_time_varying_field():
    "Euler (first order), RK4 and the adaptive scheme converge to the same flow, unit by unit (the field jumps between units)."
    f, x = field(3), pts()
    ref = Flow(f, 1.0, "rk4", 64)(x)
    assert (Flow(f, 1.0, "adaptive", rtol=1e-10, atol=1e-12)(x) - ref).abs().max() < 1e-8
    e1, e2 = ((Flow(f, 1.0, "euler", s)(x) - ref).abs().max().item() for s in (64, 128))
    assert 1.8 < e1 / e2 < 2.2


def test_inverse_consistency_of_an_exact_flow_is_zero():
    "An affine field's flow integrated by RK4 with many steps is invertible by its backward integration to rounding."
    f = field(4, stationary=True, activation="linear", units=1)
    assert inverse_consistency(Flow(f, 1.0, "rk4", 64), pts()).item() < 1e-24
    assert inverse_consistency(Flow(field(4), 1.0, "euler"), pts()).item() > 1e-8      # Euler is not


def test_determinant_of_an_affine_field():
    "V(x) = A x + c has flow det = exp(T tr A) everywhere; the map's fraction folded is 0."
    f = field(5, stationary=True, activation="linear", units=1)
    with torch.no_grad(): f.bias.normal_(generator=torch.Generator().manual_seed(6))
    A = f.nu[0] @ f.weight[0]
    g, d, folded = determinant_map(Flow(f, 2.0, "rk4", 32), size=9, dtype=F64)
    M = 2.0 / 32 * A                                                    # one RK4 step maps x to P(hA) x + const
    P = torch.eye(2, dtype=F64) + M + M @ M / 2 + M @ M @ M / 6 + M @ M @ M @ M / 24
    exact_rk4 = torch.linalg.det(P).item() ** 32
    torch.testing.assert_close(d, torch.full((9, 9), exact_rk4, dtype=F64), rtol=1e-12, atol=0)   # the scheme's own map, to rounding
    torch.testing.assert_close(d, torch.full((9, 9), torch.exp(2 * torch.trace(A)).item(), dtype=F64), rtol=1e-6, atol=0)  # the flow's
    assert folded.item() == 0 and g.shape == (9, 9, 2)


def test_grid_and_uniform_points():
    g = grid(-2, 3, 6, dtype=F64)
    assert torch.equal(g[0, :, 0], torch.linspace(-2, 3, 6, dtype=F64)) and torch.equal(g[:, 0, 1], torch.linspace(-2, 3, 6, dtype=F64))
    u = uniform_points(1000, -2, 3, dim=3, generator=torch.Generator().manual_seed(0))
    assert u.shape == (1000, 3) and u.min() >= -2 and u.max() <= 3


def test_bad_inputs():
    f = field()
    with pytest.raises(ValueError, match=r"\[\.\.\., 2\]"): Flow(f)(torch.zeros(3, 3, dtype=F64))
    with pytest.raises(ValueError, match=r"\[\.\.\., 2\]"): Flow(f).inverse(torch.zeros(3, 1, dtype=F64))
    with pytest.raises(TypeError, match="floating-point"): Flow(f)(torch.zeros(3, 2, dtype=torch.int64))
    with pytest.raises(ValueError, match="units"): VelocityField(2, 10, 0)
    with pytest.raises(ValueError, match="basis"): VelocityField(2, -1)
    with pytest.raises(ValueError, match="substeps"): Flow(f, substeps=0)
    with pytest.raises(ValueError, match="horizon"): Flow(f, horizon=0.0)
    with pytest.raises(ValueError, match="method"): Flow(f, method="midpoint")
    with pytest.raises(ValueError, match="activation"): VelocityField(activation="gelu")
    with pytest.raises(TypeError, match="VelocityField"): Flow(torch.nn.Linear(2, 2))
    with pytest.raises(IndexError, match="unit"): f(torch.zeros(1, 2, dtype=F64), 7)
    with pytest.raises(ValueError, match="stationary"): scaling_and_squaring(f)
    with pytest.raises(ValueError, match="squarings"): scaling_and_squaring(field(stationary=True), squarings=-1)
    with pytest.raises(ValueError, match="high must exceed low"): grid(1, 1)
