"""Issue 60 §3: bad inputs a held-out fuzz found silent (a wrong result, no error), cryptic (a raw PyTorch or xarray error
that does not name the fix) or disagreeing between two routes. Each test here failed before its fix."""
import json
import math
import warnings

import numpy as np
import pytest
import torch
import xarray as xr
from torch import nn

from diffgeo import diffeo, flows, invariance, probes, results, riemann, stability, stripe, style, transformers

F64 = torch.float64


def gen(seed):
    return torch.Generator().manual_seed(seed)


def quiet(fn):
    "fn(), its warnings recorded: (result, [messages])."
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn()
    return out, [str(w.message) for w in caught]


# ---------------------------------------------------------------------------------------------------- silent results

class TestSilent:
    @pytest.mark.parametrize("method", ["svd", "cholesky"])
    @pytest.mark.parametrize("bad", [math.inf, math.nan])
    def test_log_volume_refuses_non_finite_jacobians(self, method, bad):
        "Before: J = inf gave NaN silently (and J = NaN a raw LAPACK error); now an error naming the points."
        J = torch.eye(3).expand(2, 3, 3).clone(); J[1, 0, 2] = bad
        with pytest.raises(ValueError, match="J contains NaN or infinite values at point 1"):
            riemann.log_volume(J, method)

    def test_log_volume_of_huge_finite_jacobians_by_either_route(self):
        "The Gram of a 1e200 Jacobian overflows: the Cholesky route falls back to the SVD rather than return NaN."
        J = 1e200 * torch.eye(3, dtype=F64)[None]
        for method in ("svd", "cholesky"):
            assert riemann.log_volume(J, method).item() == pytest.approx(3 * math.log(1e200), rel=1e-14)

    @pytest.mark.parametrize("f", [lambda z: 0 * z, lambda z: z[:, :1].expand(-1, 3)], ids=["zero map", "rank one"])
    def test_log_volume_estimate_of_a_rank_deficient_map_is_minus_inf(self, f):
        """Before: the zero map gave NaN ± NaN; the rank-one map, whose probe (1, 1, 1) exhausts its Krylov space at once,
        cut every other probe short too and gave a finite -0.82 ± 0.82. The exact route says -inf; now so does the estimate."""
        x = torch.randn(2, 3, dtype=F64, generator=gen(0))
        with pytest.warns(UserWarning, match="degenerate metric at point 0, 1"):
            est, se = riemann.log_volume_estimate(f, x, probes=4, steps=4)
        assert (est == -math.inf).all() and (se == 0).all()
        with pytest.warns(UserWarning, match="degenerate metric"):
            assert (riemann.log_volume_element(f, x) == -math.inf).all()

    def test_nngp_log_volume_element_far_out_says_so(self):
        "Before: NaN at x = 1e200 with no word; now a warning naming the point and the fix (as nngp_ricci_scalar)."
        x = torch.tensor([[0.3, 0.1], [1e200, 1e200]], dtype=F64)
        with pytest.warns(UserWarning, match=r"log volume element is NaN or infinite at point 1 \(\|x\| up to 1.41e\+200\)"):
            out = riemann.nngp_log_volume_element(x)
        assert out[0].isfinite() and not out[1].isfinite()

    def test_saliency_similarity_of_zero_maps_is_undefined_not_zero(self):
        "Before: all-zero maps gave 0.0 ('not invariant'); the cosine of a zero map is undefined: NaN, with a warning."
        G = invariance.Rotations(4)
        m = torch.rand(3, 4, 4, generator=gen(0)); moved = m.clone()
        m[1] = 0; moved[2] = 0
        with pytest.warns(UserWarning, match="saliency map is zero everywhere at image 1, 2"):
            s = invariance.saliency_similarity(m, G.act(moved[:, None], 1)[:, 0], G, 1)
        assert s[0].item() == pytest.approx(1.0) and s[1:].isnan().all()
        ds = xr.Dataset({"SI": (("sample", "group_element"), np.array([[1.0, 0.5], [1.0, math.nan]]))})
        assert float(ds.SI.isel(group_element=slice(1, None)).mean()) == 0.5     # the summary skips it (xarray's skipna)

    def test_field_refuses_nan_coefficients(self):
        c = diffeo.sample_coefficients(2, 1e-3, 3, generator=gen(0)); c[1, 0, 0, 0] = math.nan
        with pytest.raises(ValueError, match=r"coeffs contains NaN or infinite values \(1 of"):
            diffeo.field(c, (8, 8))
        assert diffeo.field(c[:1], (8, 8)).isfinite().all()

    def test_legibility_refuses_a_nan_slack(self):
        import matplotlib; matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots()
        ax.text(0.5, 0.5, "a"); ax.text(0.5, 0.5, "b")
        try:
            with pytest.raises(ValueError, match="slack must be a finite number of pixels"): style.legibility(fig, slack=math.nan)
            assert style.legibility(fig).overlaps                           # the overlap NaN hid
        finally: plt.close(fig)


# ------------------------------------------------------------------------------ two routes to the log volume element

def _ill_conditioned(n, c):
    "An n × n unit upper-triangular J with -c above the diagonal: det J = 1 exactly (so Σ log s_i = 0), in float32 too, κ(J) large."
    return torch.eye(n) - c * torch.ones(n, n).triu(1)


class TestRoutesAgree:
    @pytest.mark.parametrize("n, c", [(200, 0.05), (100, 0.11)])
    def test_ill_conditioned_float32_jacobian_is_finite_by_both_routes(self, n, c):
        """κ(J) ≈ 5e4 and 1e5, beyond numpy's float32 rank tolerance max(m, d) ε₃₂ (2.4e-5 and 1.2e-5 of s_1) but far above
        J's own rounding. Before: the SVD said -inf ("the map loses rank"), the Cholesky route ~0. Now both give the float64
        value, 0 (det J = 1 exactly), and a warning that float32 cannot resolve the rank, naming float64."""
        J = _ill_conditioned(n, c)[None]
        s = torch.linalg.svdvals(J.double())[0]
        assert n * torch.finfo(torch.float32).eps > s[-1] / s[0] > math.sqrt(n) * torch.finfo(torch.float32).eps
        for method in ("svd", "cholesky"):
            with pytest.warns(UserWarning, match=r"rank unresolved at point 0.*To resolve it, compute J in float64"):
                v = riemann.log_volume(J, method)
            assert abs(v.item()) < 1e-9, (method, v)
        x = torch.randn(1, n, generator=gen(1))
        with pytest.warns(UserWarning, match=r"rank unresolved.*pass model.double\(\) and x.double\(\)"):
            assert abs(riemann.log_volume_element(lambda z: z @ J[0].T, x, method="cholesky").item()) < 1e-9
        with warnings.catch_warnings():
            warnings.simplefilter("error")                                     # float64 resolves it: nothing to say
            assert abs(riemann.log_volume(J.double(), "cholesky").item()) < 1e-9

    def test_known_float64_log_volume_of_a_float32_spectrum(self):
        "Singular values from 1 to 3e-5 (κ above 1/(max(m, d) ε₃₂)): both routes within float32's rounding of the exact sum."
        U, _ = torch.linalg.qr(torch.randn(400, 300, dtype=F64, generator=gen(2)))
        V, _ = torch.linalg.qr(torch.randn(300, 300, dtype=F64, generator=gen(3)))
        s = torch.logspace(0, -4.5, 300, dtype=F64)
        J = ((U * s) @ V.T).float()[None]
        err = torch.linalg.matrix_norm(J[0].double() - (U * s) @ V.T, 2)           # Weyl: each s_i moves by at most this
        tol = -torch.log1p(-err / s).sum().item() + 1e-9
        for method in ("svd", "cholesky"):
            v, said = quiet(lambda: riemann.log_volume(J, method))
            assert abs(v.item() - s.log().sum().item()) <= tol, (method, v)
            assert any("rank unresolved" in m for m in said)

    @pytest.mark.parametrize("method", ["svd", "cholesky"])
    def test_a_lost_rank_stays_minus_inf(self, method):
        "A float32 product of rank d − 1, and a ReLU network with dead hidden units (40 alive < d = 64): -inf, not 'unresolved'."
        A = torch.randn(300, 99, generator=gen(4)) @ torch.randn(99, 100, generator=gen(5))
        J = probes.jacobian_matrix(lambda z: z @ A.T, torch.randn(1, 100, generator=gen(6)))
        with pytest.warns(UserWarning, match="degenerate metric at point 0"):
            assert riemann.log_volume(J, method).item() == -math.inf
        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 100)).eval()
        with torch.no_grad(): net[0].bias[:88] = -100.0                        # 88 of 128 hidden units dead
        v, said = quiet(lambda: riemann.log_volume_element(net, torch.randn(1, 64, generator=gen(7)), method=method))
        assert v.item() == -math.inf and not any("rank unresolved" in m for m in said)

    def test_estimate_says_when_float32_cannot_resolve(self):
        """Before: -inf ± 0 ("the map loses rank") for the ill-conditioned float32 map (and a wrong finite value in float64,
        its Lanczos vectors reorthogonalised once); now NaN ± NaN with a warning in float32, finite in float64."""
        J = _ill_conditioned(200, 0.05)
        x = torch.randn(1, 200, generator=gen(8))
        with pytest.warns(UserWarning, match=r"rank unresolved at point 0.*model.double\(\) and x.double\(\)"):
            est, se = riemann.log_volume_estimate(lambda z: z @ J.T, x, probes=4, steps=30)
        assert est.isnan().all() and se.isnan().all()
        est, se = quiet(lambda: riemann.log_volume_estimate(lambda z: z @ J.double().T, x.double(), probes=4, steps=30))[0]
        assert est.isfinite().all() and (est.abs() < 4 * se + 1e-6).all()                    # the exact value is 0


# ------------------------------------------------------------------------------------------------ cryptic errors

class TestCryptic:
    def test_deform_with_a_device_name_as_generator(self):
        x = torch.rand(1, 1, 8, 8)
        with pytest.raises(TypeError, match=r"got the device 'cuda'.*torch.Generator\(\).manual_seed"):
            diffeo.deform(x, T=1e-3, generator="cuda")
        with pytest.raises(TypeError, match="for seed 3, pass torch.Generator"):
            diffeo.sample_coefficients(1, 1e-3, 3, generator=3)

    def test_is_diffeomorphism_on_an_empty_grid(self):
        c = diffeo.sample_coefficients(2, 1e-3, 3, generator=gen(0))
        for size in ((0, 0), (8, 0)):
            with pytest.raises(ValueError, match="size must be >= 1"): diffeo.is_diffeomorphism(c, size)

    def test_delta_measured_of_an_integer_field(self):
        with pytest.raises(TypeError, match=r"tau must be a floating-point field.*tau.float\(\)"):
            diffeo.delta_measured(torch.ones(1, 2, 4, 4, dtype=torch.long))

    def test_features_of_an_array(self):
        net = nn.Sequential(nn.Flatten(), nn.Linear(16, 3)).eval()
        for features in (stability.features, probes.features):
            with pytest.raises(TypeError, match=r"x must be a torch.Tensor.*torch.as_tensor"):
                features(net, np.zeros((2, 1, 4, 4), np.float32))

    def test_empty_batches_through_transformers(self):
        assert transformers.warp(torch.zeros(0, 1, 8, 8), torch.zeros(0, 6), "affine").shape == (0, 1, 8, 8)
        assert transformers.warp(torch.zeros(0, 2, 8, 8), torch.zeros(0, 6), "affine", size=(4, 5)).shape == (0, 2, 4, 5)
        st = transformers.SpatialTransformer("affine", (1, 16, 16), out_size=8)
        assert st(torch.zeros(0, 1, 16, 16)).shape == (0, 1, 8, 8) and st.last_theta.shape == (0, 6)
        with pytest.raises(ValueError, match="built for images of shape"): st(torch.zeros(0, 3, 16, 16))

    def test_channel_affine_of_a_linear_layer(self):
        with pytest.raises(TypeError, match=r"bn must be a batch norm.*got Linear"): probes.ChannelAffine(nn.Linear(2, 3))

    def test_integer_layer_names(self):
        net = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3)).eval()
        with pytest.raises(TypeError, match=r"got int 0; pass the name as a str: '0'"): riemann.feature_map(net, layer=0)
        with pytest.raises(TypeError, match=r"got int 5\."): probes.features(net, torch.zeros(2, 4), layers=5)
        with pytest.raises(TypeError, match=r"got int 1; pass the name as a str: '1'"):
            probes.features(net, torch.zeros(2, 4), layers=["0", 1])
        x = torch.randn(2, 4, generator=gen(0))
        for fn in (riemann.log_volume_element, riemann.log_volume_estimate):
            with pytest.raises(TypeError, match="pass the name as a str: '1'"): fn(net, x, layer=1)
        assert set(probes.features(net, x, ("0", "output"))) == {"0", "output"}        # a tuple of names still reads

    def test_riemann_suggests_the_users_own_layer_names(self):
        "Before: 'no submodule named foo ... e.g. [0, 1, 1.act, 2]', '1.act' being a name of jacobian_ready's copy."
        net = nn.Sequential(nn.Linear(4, 6), nn.GELU(), nn.Linear(6, 3)).eval()
        x = torch.randn(2, 4, generator=gen(0))
        for fn in (riemann.log_volume_element, riemann.log_volume_estimate):
            with pytest.raises(ValueError, match=r"e.g. \['0', '1', '2'\]\.$"): fn(net, x, layer="foo")

    def test_riemann_names_unbatched_points_and_mixed_dtypes(self):
        net = nn.Sequential(nn.Linear(4, 6), nn.GELU(), nn.Linear(6, 3)).eval()
        x = torch.randn(2, 4, generator=gen(0))
        for fn in (riemann.log_volume_element, riemann.log_volume_estimate):
            with pytest.raises(ValueError, match=r"a single point p is p\[None\]"): fn(net, x[0])
            with pytest.raises(TypeError, match=r"x is torch.float64 but Sequential's weights are torch.float32.*model.double\(\)"):
                fn(net, x.double())
        net2 = nn.Sequential(nn.Linear(2, 6), nn.GELU(), nn.Linear(6, 3)).eval()
        with pytest.raises(TypeError, match="x is torch.float64 but"): riemann.ricci_scalar(net2, torch.randn(2, 2, dtype=F64))
        with pytest.raises(ValueError, match=r"a single point p is p\[None\]"): riemann.ricci_scalar(net2.double(), torch.randn(2, dtype=F64))

    def test_saliency_with_a_bad_target_or_a_tuple_output(self):
        net = nn.Sequential(nn.Flatten(), nn.Linear(16, 3)).eval()
        x = torch.rand(2, 1, 4, 4, generator=gen(0))
        for target in ([0, 3], [-1, 0]):
            with pytest.raises(ValueError, match=r"target must hold classes in \[0, 3\)"): invariance.saliency(net, x, torch.tensor(target))

        class Pair(nn.Module):
            def __init__(self):
                super().__init__()
                self.net = net

            def forward(self, x): return self.net(x), x
        with pytest.raises(TypeError, match=r"model must return logits \[B, K\], got tuple.*model\(x\)\[0\]"):
            invariance.saliency(Pair(), x, torch.tensor([0, 1]))

    def test_a_diverging_adaptive_flow(self):
        pytest.importorskip("torchdiffeq")
        f = flows.VelocityField(dim=1, basis=1, units=1, activation="linear")
        with torch.no_grad(): f.weight.fill_(1.0); f.nu.fill_(1.0)             # dx/dt = x: e^800 overflows
        with pytest.raises(RuntimeError, match=r"step shrank to nothing across unit 0.*the points diverge.*shorten the horizon"):
            flows.Flow(f, horizon=800.0, method="adaptive")(torch.ones(3, 1))

    def test_integer_dtypes(self):
        for fn in (lambda: flows.uniform_points(4, dtype=torch.int64), lambda: flows.grid(size=3, dtype=torch.int32)):
            with pytest.raises(TypeError, match="dtype must be a floating-point torch.dtype"): fn()
        for fn in (lambda: stripe.StripeNet(3, 4, 0.1, dtype=torch.int64), lambda: stripe.stripe_data(10, 3, dtype=torch.int64)):
            with pytest.raises(TypeError, match="dtype must be a floating-point torch.dtype"): fn()

    def test_results_without_times_or_json_parameters(self):
        with pytest.raises(ValueError, match="lacks start_time, end_time"): results.minutes(xr.Dataset())
        ok = xr.Dataset(attrs=dict(start_time="2024-01-01T00:00:00", end_time="2024-01-01T00:03:00"))
        assert results.minutes(ok) == 3.0
        for attrs, says in [({"parameters": "{bad"}, "parameters attribute is not JSON"), ({}, "has no parameters attribute"),
                            ({"parameters": "[1, 2]"}, "must be a JSON object")]:
            with pytest.raises(ValueError, match=says): results.parameters(xr.Dataset(attrs=attrs))
        assert results.parameters(xr.Dataset(attrs={"parameters": json.dumps({"a": 1})})) == {"a": 1}

    def test_style_arguments(self):
        with pytest.raises(TypeError, match=r"index of the colour cycle.*got float 1.5"): style.cycle_color(1.5)
        with pytest.raises(TypeError, match="got bool"): style.cycle_color(True)
        with pytest.raises(ValueError, match="colour name such as 'C0'"): style.cycle_color("C1.5")
        assert style.cycle_color(0) == style.cycle_color("C0")
        for fn in (style.tidy_labels, style.thin_ticks, style.place_labels, style.layout):
            with pytest.raises(TypeError, match="fig must be a matplotlib Figure, got NoneType"): fn(None)

    def test_bootstrap_without_distances_names_them(self):
        "A regression: it raised xarray's \"Dimensions {'sample'} do not exist\"; it names the missing variables again."
        for ds in (xr.Dataset({"x": ("sample", np.ones(3))}), xr.Dataset()):
            with pytest.raises(ValueError, match=r"ds lacks \['d_diffeo', 'd_noise', 'd_pair'\]"): stability.bootstrap(ds)
        per_sample = xr.Dataset({f"d_{k}": (("layer", "sample"), np.random.default_rng(0).random((1, 5)))
                                 for k in ("diffeo", "noise", "pair")})
        assert set(stability.bootstrap(per_sample, resamples=3).data_vars) == {"D_f", "G_f", "R_f"}
        flat = per_sample.median("sample")
        with pytest.raises(ValueError, match="no sample dimension"): stability.bootstrap(flat)


class TestCommandLine:
    def test_negative_seed(self, capsys):
        from diffgeo import cli
        assert cli.main(["stability", "LeNet", "-n", "4", "--seed", "-1", "--no-progress"]) == 2
        assert "--seed must be an integer in [0, 2^63), got -1" in capsys.readouterr().err

    def test_messages_name_the_flags(self, capsys, monkeypatch):
        from diffgeo import cli
        if torch.cuda.is_available(): pytest.skip("needs a machine without CUDA")
        assert cli.main(["stability", "LeNet", "-n", "4", "--no-progress", "--device", "cuda"]) == 2
        err = capsys.readouterr().err
        assert "use --device cpu or --device auto" in err and "device='cpu'" not in err
        monkeypatch.delenv("DIFFGEO_DATA", raising=False)
        assert cli.main(["stability", "LeNet", "-n", "4", "--no-progress", "--data", "cifar10"]) == 2
        err = capsys.readouterr().err
        assert "pass --data-root /path/to/folder" in err and "root=" not in err and "download=True)" not in err

    def test_help_says_no_default_none(self):
        from diffgeo import cli
        text = cli.build_parser()._subparsers._group_actions[0].choices["stability"].format_help()
        assert "(default: None)" not in text and "(default: False)" not in text
        assert "(default: 500)" in text and text.count("DIFFGEO_DATA environment variable") == 1


class TestCPABFirstCompileIsSaid:
    "Issue 60 §4: the first compiled CPAB call takes tens of seconds in a fresh clone (the forward kernel's inlined trajectory); it says so first."

    def test_a_cold_cache_is_said_once_before_the_compile(self, monkeypatch, capsys):
        from diffgeo import cpab
        kernels = cpab._kernels()
        if kernels is None: pytest.skip("numba is not installed: no compiled path")
        monkeypatch.setattr(cpab, "_SAID", set())
        monkeypatch.setattr(kernels.forward_kernel._cache._cache_file, "_load_index", lambda: {})   # as in a fresh clone
        cpab._compiling("forward_kernel", "forward"); cpab._compiling("forward_kernel", "forward")
        err = capsys.readouterr().err
        assert err.count("compiling the forward kernel for this CPU, once") == 1 and "numba caches it in" in err

    def test_a_warm_cache_says_nothing(self, monkeypatch, capsys):
        from diffgeo import cpab
        kernels = cpab._kernels()
        if kernels is None: pytest.skip("numba is not installed: no compiled path")
        monkeypatch.setattr(cpab, "_SAID", set())
        monkeypatch.setattr(kernels.backward_kernel._cache._cache_file, "_load_index", lambda: {"sig": "entry"})
        cpab._compiling("backward_kernel", "gradient")
        assert capsys.readouterr().err == ""
