"""Issue 32, the fuzz pass (/work/runs/fuzz): its cases in maps, riemann, invariance, flows and stripe that ended in a
cryptic error, a silent NaN or a hang. One test per case id; each failed (or hung) before its fix."""
import itertools
import math
import signal

import pytest
import torch

from diffgeo import flows, invariance, maps, probes, riemann, stripe


# ---- cryptic: an error from inside torch or Python, naming not the user's mistake ----

def test_maps05_jacobian_leaves_torch():
    with pytest.raises(ValueError, match="does not depend differentiably on its input: it leaves torch"):
        maps.jacobian(lambda p: torch.from_numpy(p.numpy()), torch.rand(5, 2))

def test_maps08_jacobian_class_not_instance():
    with pytest.raises(TypeError, match=r"got the class Linear; pass an instance, e.g. torch.nn.Linear\(2, 3\)"):
        maps.jacobian(torch.nn.Linear, torch.rand(3, 2))

def test_riem01_lve_class_not_instance():
    with pytest.raises(TypeError, match=r"model must be a map .* got the class Linear; pass an instance"):
        riemann.log_volume_element(torch.nn.Linear, torch.rand(3, 2))

def test_inv09_sigma_max_class_not_instance():
    with pytest.raises(TypeError, match=r"model must be a map .* got the class Linear; pass an instance"):
        invariance.sigma_max(torch.nn.Linear, torch.rand(2, 3))

def test_maps12_jacobian_matrix_bn_train_B1():
    net = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.BatchNorm1d(3))
    with pytest.raises(ValueError, match=r"training mode.*call model\.eval\(\) first"): probes.jacobian_matrix(net, torch.rand(1, 3))

def test_inv06_invariance_error_int_logits():
    with pytest.raises(TypeError, match="fx and fgx must be floating-point logits"):
        invariance.invariance_error(torch.ones(2, 3, dtype=torch.int64), torch.zeros(2, 3, dtype=torch.int64), "kl")

def test_inv12_perceptron_wrong_image_size():
    net = invariance.perceptron((1, 36, 36))
    with pytest.raises(ValueError, match=r"built for images of \(C, H, W\) = \(1, 36, 36\).*got images \[2, 1, 28, 28\]"):
        net(torch.rand(2, 1, 28, 28))
    assert net(torch.rand(2, 1, 36, 36)).shape == (2, 9)
    assert net(torch.rand(2, 36 * 36)).shape == (2, 9)              # flattened images of its size still pass

def test_inv13_group_pooled_wrong_in_features():
    layer = invariance.GroupPooledLinear(10, 5, invariance.Rotations(4))
    with pytest.raises(ValueError, match=r"in_features = 10 .*C·H·W = 16; build it with in_features=16"):
        layer(torch.rand(2, 1, 4, 4))
    assert invariance.GroupPooledLinear(16, 5, invariance.Rotations(4))(torch.rand(2, 1, 4, 4)).shape == (2, 5)

def test_flow10_squarings_1e6():
    with pytest.raises(ValueError, match=f"squarings must be <= {flows.MAX_SQUARINGS}, got 1000000"):
        flows.scaling_and_squaring(flows.VelocityField(stationary=True), squarings=10**6)

def test_flow11_determinant_map_nondiff():
    with pytest.raises(ValueError, match="does not depend differentiably on its input"):
        flows.determinant_map(lambda p: p.detach() * 2, size=3)

def test_strp13_gradient_ratio_d1():
    with pytest.raises(ValueError, match=r"d >= 2 .*invariant subspace .* is empty for d = 1"):
        stripe.gradient_ratio(torch.nn.Linear(1, 1), torch.randn(5, 1))

def test_strp14_gradient_ratio_empty():
    with pytest.raises(ValueError, match="x is an empty batch"):
        stripe.gradient_ratio(torch.nn.Linear(3, 1), torch.zeros(0, 3))


# ---- silent: NaN without a word ----

def test_riem13_nngp_ricci_huge_x():
    x = torch.tensor([[0.5, 0.0], [1e200, 1e200], [1e200, 0.0]], dtype=torch.float64)
    with pytest.warns(UserWarning, match=r"Ricci scalar is NaN or infinite at point 1, 2 \(\|x\| up to 1.41e\+200\)"):
        R = riemann.nngp_ricci_scalar(x)
    assert torch.isfinite(R[0])

def test_flow03_linear_field_horizon_1e6():
    f = flows.Flow(flows.VelocityField(activation="linear", generator=torch.Generator().manual_seed(0)), horizon=1e6)
    with pytest.warns(UserWarning, match=r"the flow overflowed: .* at 5 of 5 points with horizon T = 1e\+06") as rec:
        f(torch.rand(5, 2))
    assert all(w.filename == __file__ for w in rec)                 # pointed at the caller, not at torch's __call__

def test_strp10_flow_nan_point():
    net = stripe.StripeNet(3, 4, 1e-2, generator=torch.Generator().manual_seed(0))
    x, y = stripe.stripe_data(8, 3); x[0, 0] = math.nan
    with pytest.raises(ValueError, match=r"x contains NaN or infinite values \(1 of 24\)"):
        stripe.gradient_flow(net, x, y, max_steps=200)


# ---- hang: sizes refused up front (nothing is allocated here) ----

def test_maps03_pixel_grid_huge():
    with pytest.raises(ValueError, match=r"100,000 × 100,000 pixels needs 224 GiB, more than maps.PIXEL_GRID_BYTES"):
        maps.pixel_grid(10**5)

def test_riem14_simplex_grid_8_corners():
    def ref(anchors, D):                                             # the enumeration it replaced, on a small case
        k = len(anchors)
        n = torch.tensor([[D - sum(c), *c] for c in itertools.product(range(D + 1), repeat=k - 1) if sum(c) <= D],
                         dtype=anchors.dtype)
        return (n / D @ anchors.reshape(k, -1)).reshape(len(n), *anchors.shape[1:]), n / D
    a = torch.randn(4, 2, 3, dtype=torch.float64)
    for got, want in zip(riemann.simplex_grid(a, 5), ref(a, 5)): assert torch.equal(got, want)
    old = signal.signal(signal.SIGALRM, lambda *_: pytest.fail("simplex_grid enumerated more than its points"))
    signal.alarm(5)
    try: points, weights = riemann.simplex_grid(torch.eye(20), 2)   # 210 points; 3^19 ≈ 1.2e9 tuples before
    finally: signal.alarm(0); signal.signal(signal.SIGALRM, old)
    assert points.shape == (math.comb(21, 19), 20) and torch.allclose(weights.sum(1), torch.ones(210))

def test_flow08_grid_huge():
    with pytest.raises(ValueError, match=r"a grid of 100,000² points needs 74.5 GiB, more than flows.GRID_BYTES"):
        flows.grid(size=10**5)

def test_flow12_determinant_map_huge():
    with pytest.raises(ValueError, match=r"determinant map on 100,000² points needs at least .* GiB, more than flows.GRID_BYTES"):
        flows.determinant_map(lambda p: p, size=10**5)

def test_strp05_data_P_1e10():
    with pytest.raises(ValueError, match=r"P = 10,000,000,000 points in d = 3 dimensions need 447 GiB, more than stripe.MAX_DATA_BYTES"):
        stripe.stripe_data(10**10, 3)
