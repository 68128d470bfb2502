"""Tests of diffgeo.riemann and probes.jacobian_matrix beyond the notebook's examples: an independent high-precision
computation (sympy, 40 digits) of the Ricci scalar, the submersion volume against the dense SVD, chunked against
unchunked Jacobians, networks and named layers, properties (hypothesis), and bad inputs.

Tolerances: the float64 routes are compared with k units of ε times what the computation amplifies (said at each):
`riemann.log_volume_rounding` (here `svd_tol`) for log volumes (Weyl's inequality), `riemann.ricci_rounding_bounds` for the
two routes to the Ricci scalar (first-order bounds from the sizes of the terms each cancels, themselves checked against
50-digit references below).
"""

import math

import pytest
import sympy as sp
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from diffgeo.probes import jacobian_matrix, pullback_metric
from diffgeo.riemann import (feature_map, log_volume, log_volume_element, log_volume_estimate, nngp_log_volume_element,
                             nngp_metric, nngp_ricci_scalar, ricci_rounding_bounds, ricci_scalar, ricci_scalar_of_metric,
                             shallow_log_volume_element, shallow_ricci_scalar)
from diffgeo.riemann import log_volume_rounding as svd_tol

F64 = torch.float64
EPS = torch.finfo(F64).eps
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available")


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def erf_net(n, d=2, scale=1.0, seed=1):
    g = gen(seed)
    W, b = scale * torch.randn(n, d, dtype=F64, generator=g), scale * torch.randn(n, dtype=F64, generator=g)
    return W, b, (lambda z: torch.erf(z @ W.T + b) / math.sqrt(n))


def mp_ricci_tanh(net, x, digits=50):
    "The Ricci scalar of a two-layer tanh network on R², to `digits` digits (mpmath): R = 2 R_1212 / det g by Gauss's equation."
    import mpmath as mp
    with mp.workdps(digits):
        W1, b1, W2, b2 = ([[mp.mpf(v) for v in r] for r in t.tolist()] if t.ndim == 2 else [mp.mpf(v) for v in t.tolist()]
                          for t in (net[0].weight, net[0].bias, net[2].weight, net[2].bias))
        out = []
        for p in x.tolist():
            h1 = [W1[i][0] * p[0] + W1[i][1] * p[1] + b1[i] for i in range(len(b1))]
            a1 = [mp.tanh(h) for h in h1]
            d1, dd1 = [1 - a * a for a in a1], [-2 * a * (1 - a * a) for a in a1]
            y = [mp.tanh(sum(W2[j][i] * a1[i] for i in range(len(a1))) + b2[j]) for j in range(len(b2))]
            d2, dd2 = [1 - v * v for v in y], [-2 * v * (1 - v * v) for v in y]
            M = [[sum(W2[j][i] * d1[i] * W1[i][m] for i in range(len(a1))) for m in range(2)] for j in range(len(b2))]
            J = mp.matrix([[d2[j] * M[j][m] for m in range(2)] for j in range(len(b2))])
            H = {(m, n): mp.matrix([dd2[j] * M[j][m] * M[j][n] + d2[j] * sum(W2[j][i] * dd1[i] * W1[i][m] * W1[i][n]
                                                                          for i in range(len(a1))) for j in range(len(b2))])
                 for m in range(2) for n in range(2)}
            g = J.T * J
            P = mp.eye(len(b2)) - J * mp.inverse(g) * J.T
            out.append(float(2 * ((H[0, 0].T * P * H[1, 1])[0] - (H[0, 1].T * P * H[0, 1])[0]) / mp.det(g)))
    return torch.tensor(out, dtype=F64)


def sympy_ricci(W, b, points, digits=40):
    "Ricci scalar of Φ = erf(Wx + b)/√n on R², symbolically: metric, inverse, Christoffel symbols, Riemann, Ricci."
    x, y = sp.symbols("x y", real=True)
    co = (x, y)
    n = len(W)
    Phi = [sp.erf(sp.Float(W[i][0], digits) * x + sp.Float(W[i][1], digits) * y + sp.Float(b[i], digits)) / sp.sqrt(n)
           for i in range(n)]
    J = sp.Matrix([[sp.diff(f, c) for c in co] for f in Phi])
    g = J.T * J
    gi = g.inv()
    Gam = [[[sum(gi[k, l] * (sp.diff(g[l, i], co[j]) + sp.diff(g[l, j], co[i]) - sp.diff(g[i, j], co[l]))
                 for l in range(2)) / 2 for j in range(2)] for i in range(2)] for k in range(2)]

    def riemann(r, s, m, q):  # R^r_{smq}
        return (sp.diff(Gam[r][q][s], co[m]) - sp.diff(Gam[r][m][s], co[q])
                + sum(Gam[r][m][l] * Gam[l][q][s] - Gam[r][q][l] * Gam[l][m][s] for l in range(2)))

    R = sum(gi[s, q] * riemann(r, s, r, q) for r in range(2) for s in range(2) for q in range(2))
    return [float(sp.N(R.subs({x: sp.Float(p[0], digits), y: sp.Float(p[1], digits)}), digits)) for p in points]


class TestRicciHighPrecision:
    def test_closed_form_and_gauss_against_sympy(self):
        W, b, phi = erf_net(3)
        x = torch.tensor([[0.3, -0.4], [1.1, 0.2], [-0.7, 0.9]], dtype=F64)
        ref = torch.tensor(sympy_ricci(W.tolist(), b.tolist(), x.tolist()), dtype=F64)
        # the closed form has no cancellation between large terms here: a few hundred ε
        torch.testing.assert_close(shallow_ricci_scalar(W, b, x), ref, rtol=1e3 * EPS, atol=0)
        # the Gauss route cancels two sums: within its rounding bound
        assert ((ricci_scalar(phi, x) - ref).abs() <= ricci_rounding_bounds(phi, x)[0] + 2 * EPS * ref.abs()).all()

    def test_saturated_network_gauss_beats_christoffel(self):
        """Weights ×8 (the notebook's figure): each route within its rounding bound, which guarantees the Gauss route 5
        digits and the metric route none (its terms are 10¹² times R)."""
        W0 = torch.tensor([[1.0, 0.0], [-0.5, 0.75**0.5], [-0.5, -0.75**0.5]], dtype=F64)
        W, b = 8 * W0, torch.full((3,), 1.6, dtype=F64)
        x = torch.tensor([[0.3, 0.2]], dtype=F64)
        ref = torch.tensor(sympy_ricci(W.tolist(), b.tolist(), x.tolist()), dtype=F64)
        torch.testing.assert_close(shallow_ricci_scalar(W, b, x), ref, rtol=1e-12, atol=0)
        phi = lambda z: torch.erf(z @ W.T + b) / math.sqrt(3)
        bound_gauss, bound_christoffel = ricci_rounding_bounds(phi, x)
        assert (ricci_scalar(phi, x) - ref).abs() <= bound_gauss and bound_gauss < 1e-5 * ref.abs()
        assert (ricci_scalar(phi, x, method="christoffel") - ref).abs() <= bound_christoffel and bound_christoffel > ref.abs()

    def test_both_routes_within_their_rounding_bounds(self):
        """Random two-layer tanh networks against a 50-digit reference: both routes within the bounds that the notebook's
        comparisons use as tolerances (in 120 points of 40 networks the largest error was 0.08 of the Gauss bound and
        0.02 of the Christoffel one); so the two routes lie within the sum of the bounds of each other."""
        for seed in range(6):
            torch.manual_seed(seed)
            net = nn.Sequential(nn.Linear(2, 5, dtype=F64), nn.Tanh(), nn.Linear(5, 4, dtype=F64), nn.Tanh())
            x = 1.5 * torch.randn(3, 2, dtype=F64, generator=gen(seed))
            ref = mp_ricci_tanh(net, x)
            with torch.no_grad():
                gauss, christoffel = ricci_scalar(net, x), ricci_scalar(net, x, method="christoffel")
            bound_gauss, bound_christoffel = ricci_rounding_bounds(net, x)
            assert ((gauss - ref).abs() <= bound_gauss + 2 * EPS * ref.abs()).all(), (seed, gauss - ref, bound_gauss)
            assert ((christoffel - ref).abs() <= bound_christoffel + 2 * EPS * ref.abs()).all(), (seed, christoffel - ref, bound_christoffel)


class TestLogVolume:
    @pytest.mark.parametrize("d,m", [(12, 5), (5, 12), (7, 7)])
    def test_against_dense_svd(self, d, m):
        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(d, 9), nn.Tanh(), nn.Linear(9, m), nn.Softplus()).double().eval()
        x = torch.randn(3, d, dtype=F64, generator=gen(2))
        J = torch.stack([torch.autograd.functional.jacobian(lambda z: net(z[None])[0], p) for p in x])
        ref = torch.linalg.svdvals(J).log().sum(-1)
        # two Jacobians by different passes (each within a few max(m, d) ε ‖J‖) and two SVDs: twice svd_tol
        assert ((log_volume_element(net, x) - ref).abs() <= 2 * svd_tol(J)).all()

    @pytest.mark.parametrize("memory", [1, 5_000, 2**30])
    def test_chunked_equals_unchunked(self, memory):
        torch.manual_seed(0)
        net = nn.Sequential(nn.Conv2d(1, 3, 3, padding=1), nn.GELU(), nn.Flatten(), nn.Linear(3 * 36, 10)).eval()
        x = torch.randn(2, 1, 6, 6, generator=gen(3))
        J = jacobian_matrix(net, x, memory)
        ref = torch.func.vmap(torch.func.jacrev(lambda z: net(z[None])[0]))(x).reshape(2, 10, 36)
        torch.testing.assert_close(J, ref, rtol=0, atol=1e-6)  # float32 sums in another order: a few ε of the entries
        assert not J.requires_grad  # a chunk's autograd graph, kept alive by its rows, held ~10 MB per chunk on a ResNet

    @pytest.mark.parametrize("m,d", [(300, 40), (40, 300)])
    @pytest.mark.parametrize("spread", [1.0, 1e-2, 1e-8])
    def test_cholesky_route(self, m, d, spread):
        "Equal to the SVD where J is well conditioned, and the SVD's value (it falls back) where J spans 8 decades."
        k = min(m, d)
        U, _ = torch.linalg.qr(torch.randn(m, k, dtype=F64, generator=gen(4)))
        V, _ = torch.linalg.qr(torch.randn(d, k, dtype=F64, generator=gen(5)))
        s = torch.logspace(0, math.log10(spread), k, dtype=F64)
        J = (U * s) @ V.T
        exact = s.log().sum()
        torch.testing.assert_close(log_volume(J[None], "cholesky")[0], exact, rtol=1e-9, atol=1e-11)
        torch.testing.assert_close(log_volume(J[None])[0], exact, rtol=1e-9, atol=1e-11)

    @pytest.mark.parametrize("d,m", [(40, 12), (5, 20)])
    def test_stochastic_estimate_within_its_error(self, d, m):
        "The Lanczos estimate lies within 4 standard errors of the exact value, and a seeded generator repeats it."
        torch.manual_seed(1)
        net = nn.Sequential(nn.Linear(d, 16), nn.Tanh(), nn.Linear(16, m), nn.Softplus()).double().eval()
        x = torch.randn(4, d, dtype=F64, generator=gen(6))
        exact = log_volume_element(net, x)
        est, err = log_volume_estimate(net, x, probes=32, steps=min(d, m), generator=gen(7))
        assert ((est - exact).abs() < 4 * err).all() and (err > 0).all()
        torch.testing.assert_close(log_volume_estimate(net, x, probes=32, steps=min(d, m), generator=gen(7))[0], est)

    def test_named_layer_and_dict_output(self):
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.body = nn.Sequential(nn.Linear(4, 6), nn.Tanh())
                self.head = nn.Linear(6, 2)

            def forward(self, x):
                h = self.body(x)
                return {"features": h, "logits": self.head(h)}

        torch.manual_seed(0)
        net = Net().double().eval()
        x = torch.randn(3, 4, dtype=F64, generator=gen(4))
        torch.testing.assert_close(log_volume_element(net, x, layer="body"), log_volume_element(net, x, output="features"))
        torch.testing.assert_close(log_volume_element(net, x, output="logits"),
                                   log_volume_element(lambda z: net.head(net.body(z)), x))

    @given(st.integers(2, 5), st.integers(0, 10**6))
    def test_linear_map_is_log_abs_det(self, d, seed):
        A = torch.randn(d, d, dtype=F64, generator=gen(seed)) + 3 * torch.eye(d, dtype=F64)
        x = torch.randn(2, d, dtype=F64, generator=gen(seed + 1))
        ref = torch.linalg.slogdet(A)[1]
        assert ((log_volume_element(lambda z: z @ A.T, x) - ref).abs() <= 2 * svd_tol(A)).all()   # SVD and LU

    @given(st.integers(3, 7), st.integers(0, 10**6))
    def test_shallow_closed_form_3d(self, n, seed):
        W, b, phi = erf_net(n, d=3, seed=seed)
        x = torch.randn(2, 3, dtype=F64, generator=gen(seed + 1))
        ours, ref = shallow_log_volume_element(W, b, x), log_volume_element(phi, x)
        # the SVD gives each singular value to about ε s_1, so the log volume to about d κ(J) ε; the closed form sums
        # positive terms (a few ε of the largest, 1e-12 covers them)
        J = jacobian_matrix(phi, x)
        cond = torch.linalg.cond(J)
        finite = torch.isfinite(ref) & (cond < 1e12)
        assert ((ours - ref).abs()[finite] <= svd_tol(J)[finite] + 1e-12).all(), (ours, ref, cond)

    @given(st.integers(2, 6), st.integers(2, 6), st.integers(0, 10**6))
    def test_known_rank_is_minus_inf(self, m, d, seed):
        "A linear map of rank min(m, d) − 1, a product of random factors: its lost singular value is rounding, not 0."
        k = min(m, d)
        A = torch.randn(m, k - 1, dtype=F64, generator=gen(seed)) @ torch.randn(k - 1, d, dtype=F64, generator=gen(seed + 1))
        x = torch.randn(2, d, dtype=F64, generator=gen(seed + 2))
        J = jacobian_matrix(lambda z: z @ A.T, x)
        for method in ("svd", "cholesky"):
            assert torch.equal(log_volume(J, method), torch.full((2,), -math.inf, dtype=F64)), (m, d, seed, method)

    def test_rank_tolerance_is_that_of_the_jacobians_dtype(self):
        """s_min = 1e-6 s_1 of a 100 x 100 J: below float32's rank tolerance 100 ε₃₂ s_1 ≈ 1.2e-5 s_1 (its rounding), above
        float64's; 1e-4 s_1 is above both. The logs are taken in float64 either way."""
        U, _ = torch.linalg.qr(torch.randn(100, 100, dtype=F64, generator=gen(8)))
        V, _ = torch.linalg.qr(torch.randn(100, 100, dtype=F64, generator=gen(9)))
        for low, finite32 in ((-6, False), (-4, True)):
            s = torch.logspace(0, low, 100, dtype=F64)
            J = ((U * s) @ V.T)[None]
            assert torch.isfinite(log_volume(J)).item() and torch.isfinite(log_volume(J, "cholesky")).item()
            assert (log_volume(J) - s.log().sum()).abs() <= svd_tol(J)
            for method in ("svd", "cholesky"):
                assert torch.isfinite(log_volume(J.float(), method)).item() == finite32, (low, method)

    def test_relu_resnet_with_dead_units_is_minus_inf(self):
        """A random ReLU ResNet-18 (width 1/4) at a 16 x 16 input: two of its 128 pooled features are dead units, so its
        float32 Jacobian has rank 126. Its lost singular values come out at 1e-16 s_1 and below, not 0; their logs once gave a
        finite log volume element (-790), rounding noise. At a 32 x 32 input no unit is dead: full rank, a finite value."""
        from diffgeo.probes import jacobian_ready
        from diffgeo.models import build
        torch.manual_seed(0)
        net = build("ResNet18", in_channels=3, n_classes=10, width=0.25).eval()
        for size, dead in ((16, True), (32, False)):
            x = torch.randn(1, 3, size, size, generator=gen(1))
            with pytest.warns(UserWarning, match="piecewise constant"):
                J = jacobian_matrix(feature_map(jacobian_ready(net), "avgpool"), x)   # as log_volume_element computes it
            assert ((J[0].abs().amax(1) == 0).sum() > 0) == dead                     # dead units: rows of zeros
            assert (torch.linalg.matrix_rank(J[0]) < 128) == dead                    # numpy's rule, in float32
            for method, power in (("svd", 1), ("cholesky", 2)):
                with pytest.warns(UserWarning, match="piecewise constant"):
                    v = log_volume_element(net, x, layer="avgpool", method=method)
                if dead: assert v.item() == -math.inf, (method, v)
                else: assert (v - torch.linalg.svdvals(J.double()).log().sum()).abs() <= svd_tol(J, power=power), (method, v)

    @CUDA
    def test_cuda_matches_cpu(self):
        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(8, 5), nn.Tanh()).double()
        x = torch.randn(4, 8, dtype=F64, generator=gen(5))
        torch.testing.assert_close(log_volume_element(net.cuda(), x.cuda()).cpu(), log_volume_element(net.cpu(), x))


class TestNNGP:
    @given(st.integers(2, 6), st.floats(0.3, 2.0), st.floats(0.0, 1.5), st.integers(0, 10**6))
    def test_rotation_invariance(self, d, sw, sb, seed):
        x = torch.randn(3, d, dtype=F64, generator=gen(seed))
        Q, _ = torch.linalg.qr(torch.randn(d, d, dtype=F64, generator=gen(seed + 1)))
        for f in (nngp_log_volume_element, nngp_ricci_scalar):
            torch.testing.assert_close(f(x @ Q.T, "erf", sw, sb), f(x, "erf", sw, sb), rtol=1e-9, atol=1e-12)
        # the metric itself turns with the input, g(Qx) = Q g(x) Qᵀ (the scalars above see x through |x| only)
        torch.testing.assert_close(nngp_metric(x @ Q.T, "erf", sw, sb), Q @ nngp_metric(x, "erf", sw, sb) @ Q.T, rtol=1e-9, atol=1e-12)

    def test_finite_width_converges(self):
        "The metric of a random erf network of width n is within a few 1/√n of the infinite-width one."
        x = torch.tensor([[0.5, -0.3], [1.2, 0.4]], dtype=F64)
        ref = nngp_metric(x, "erf", 1.0, 0.5)
        errs = []
        for n in (100, 10_000):
            g = gen(n)
            W, b = torch.randn(n, 2, dtype=F64, generator=g), 0.5 * torch.randn(n, dtype=F64, generator=g)
            errs.append((pullback_metric(lambda z: torch.erf(z @ W.T + b) / math.sqrt(n), x) - ref).abs().max().item())
        assert errs[1] < errs[0] and errs[1] < 5 * ref.abs().max().item() / math.sqrt(10_000), errs

    def test_origin_without_bias(self):
        "σ_b = 0 at x = 0: √q has an infinite derivative there; the quadrature route stays finite and equals erf's closed form."
        o, p = torch.zeros(1, 2, dtype=F64), torch.tensor([[0.3, 0.1]], dtype=F64)
        for x in (o, p):
            torch.testing.assert_close(nngp_log_volume_element(x, torch.erf, 1.0, 0.0), nngp_log_volume_element(x, "erf", 1.0, 0.0))
        assert torch.isfinite(nngp_metric(o, "tanh", 1.0, 0.0)).all()

    def test_ricci_matches_metric_route_at_small_radius(self):
        x = torch.tensor([[1e-2, 0.0], [0.0, 3e-3]], dtype=F64)
        metric = lambda p: nngp_metric(p[None], "erf", 1.0, 0.3)[0]
        torch.testing.assert_close(nngp_ricci_scalar(x, "erf", 1.0, 0.3), ricci_scalar_of_metric(metric, x),
                                   rtol=1e-6, atol=1e-12)


class TestBadInputs:
    def test_training_mode_batchnorm(self):
        net = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
        with pytest.raises(ValueError, match=r"model.eval\(\)"):
            log_volume_element(net, torch.randn(2, 3))

    def test_relu_warns_for_volume_and_refuses_curvature(self):
        net = nn.Sequential(nn.Linear(2, 4), nn.ReLU()).double()
        with pytest.warns(UserWarning, match="piecewise constant"):
            log_volume_element(net, torch.randn(2, 2, dtype=F64))
        with pytest.raises(ValueError, match="smooth activation"):
            ricci_scalar(net, torch.randn(2, 2, dtype=F64))

    def test_float32_curvature_warns(self):
        with pytest.warns(UserWarning, match="double"):
            ricci_scalar(lambda z: torch.tanh(z @ torch.ones(2, 3)), torch.randn(2, 2))

    @pytest.mark.parametrize("x,match", [
        (torch.zeros(2, 0), "non-empty"),                                 # points with no coordinates (an empty batch gives empty results)
        (torch.zeros(2, 3, dtype=torch.long), "floating-point"),
        (torch.tensor([[float("nan"), 0.0, 0.0]]), "NaN"),
        ([[0.0, 1.0]], "floating-point"),
    ])
    def test_bad_points(self, x, match):
        with pytest.raises((TypeError, ValueError), match=match):
            log_volume_element(lambda z: z, x)

    def test_curvature_needs_low_dimension(self):
        with pytest.raises(ValueError, match="d <= 8"):
            ricci_scalar(lambda z: z, torch.zeros(1, 20, dtype=F64))

    def test_unknown_layer_and_method(self):
        net = nn.Sequential(nn.Linear(2, 3), nn.Tanh()).double()
        with pytest.raises(ValueError, match="no submodule"):
            log_volume_element(net, torch.zeros(1, 2, dtype=F64), layer="nope")
        with pytest.raises(ValueError, match="gauss"):
            ricci_scalar(net, torch.zeros(1, 2, dtype=F64), method="exact")
        with pytest.raises(ValueError, match="layer= and output="):
            feature_map(lambda z: z, layer="a")

    def test_bad_shallow_and_nngp_arguments(self):
        W, b, _ = erf_net(3)
        with pytest.raises(ValueError, match=r"W \[n, d\]"):
            shallow_log_volume_element(W, b[:2], torch.zeros(1, 2, dtype=F64))
        with pytest.raises(ValueError, match="unknown activation"):
            shallow_ricci_scalar(W, b, torch.zeros(1, 2, dtype=F64), "swishy")
        with pytest.raises(ValueError, match="sigma_w"):
            nngp_metric(torch.zeros(1, 2, dtype=F64), "erf", sigma_w=0.0)
        with pytest.raises(ValueError, match="d >= 2"):
            nngp_ricci_scalar(torch.ones(1, 1, dtype=F64))
        with pytest.raises(ValueError, match="k >= 1"):
            nngp_metric(torch.ones(1, 2, dtype=F64), 0)

    def test_bad_jacobians(self):
        with pytest.raises(ValueError, match=r"\[B, m, d\]"):
            log_volume(torch.zeros(3, 3))
        with pytest.raises(ValueError, match="cholesky"):
            log_volume(torch.eye(3)[None], "qr")

    def test_bad_estimate_arguments(self):
        with pytest.raises(ValueError, match="probes"):
            log_volume_estimate(lambda z: z, torch.zeros(1, 3), probes=0)

    def test_wrong_output_batch(self):
        with pytest.raises(ValueError, match="same B"):
            jacobian_matrix(lambda z: z.sum(0), torch.zeros(3, 2))


def test_rounding_helpers_refuse_bad_input():
    with pytest.raises(ValueError, match=r"J must be a tensor \[..., m, d\]"): svd_tol(torch.ones(3))
    with pytest.raises(ValueError, match="power must be 1"): svd_tol(torch.eye(2), power=3)
    with pytest.raises(ValueError, match="d <= 8"): ricci_rounding_bounds(lambda p: p, torch.zeros(1, 9, dtype=F64))
