"""Stability measures: known answers, recomputation from stored distances, invariances, bad inputs."""
import warnings

import numpy as np
import pytest
import torch
import xarray as xr
from hypothesis import given, strategies as st
from torch import nn

from diffgeo import probes, stability
from diffgeo.stability import BorderReader, Diffeomorphism, relative_stability, summarize


def images(n=24, size=16, channels=1, dtype=torch.float64, seed=0):
    H, W = size if isinstance(size, tuple) else (size, size)
    return torch.rand(n, channels, H, W, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def small_cnn(channels=1, bn=False):
    torch.manual_seed(0)
    layers = [nn.Conv2d(channels, 8, 3, padding=1)] + ([nn.BatchNorm2d(8)] if bn else []) + \
             [nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(32, 5)]
    return nn.Sequential(*layers)


class TestKnownAnswers:
    @pytest.mark.parametrize("interp", ["bilinear", "nearest", "gaussian"])
    def test_identity_gives_one(self, interp):
        res = relative_stability(nn.Identity(), images(), perturbation=Diffeomorphism(delta=1, c=3, interp=interp))
        assert abs(res.R_f.item() - 1) < 1e-12
        np.testing.assert_allclose(res.d_noise, res.d_diffeo, rtol=1e-10)

    def test_identity_mean_radius_is_not_exactly_one(self):
        "With the paper's single radius the identity's R_f is a ratio of medians of different quantities."
        res = relative_stability(nn.Identity(), images(), perturbation=Diffeomorphism(delta=1, c=3), noise_radius="mean")
        np.testing.assert_allclose(res.r_noise, res.r_diffeo.mean(), rtol=1e-12)
        assert res.R_f.item() != 1.0

    def test_per_sample_radii_equal_deformation_radii(self):
        res = relative_stability(small_cnn().double(), images(), perturbation=Diffeomorphism(delta=1, c=3))
        np.testing.assert_array_equal(res.r_noise, res.r_diffeo)
        assert (res.r_diffeo > 0).all()

    @pytest.mark.parametrize("statistic", ["median", "mean"])
    def test_border_reader_is_blind_to_diffeomorphisms(self, statistic):
        res = relative_stability(BorderReader(), images(dtype=torch.float32), perturbation=Diffeomorphism(delta=1, c=3),
                                 statistic=statistic)
        assert res.D_f.item() == 0 and res.R_f.item() == 0 and res.G_f.item() > 0

    def test_identity_D_f_is_the_input_ratio(self):
        x = images()
        res = relative_stability(nn.Identity(), x, perturbation=Diffeomorphism(delta=1, c=3))
        d_pair = (x - x[res.partner.values]).flatten(1).pow(2).sum(1).numpy()
        np.testing.assert_allclose(res.d_pair[0], d_pair, rtol=1e-12)
        np.testing.assert_allclose(res.D_f.item(), np.median(res.r_diffeo**2) / np.median(d_pair), rtol=1e-12)


class TestRecomputation:
    @pytest.mark.parametrize("statistic", ["median", "mean"])
    def test_summaries_from_stored_distances(self, statistic):
        res = relative_stability(small_cnn().double(), images(), perturbation=Diffeomorphism(delta=1, c=3), statistic=statistic,
                                 layers=["2", "output"])
        f = np.median if statistic == "median" else np.mean
        for l in range(2):
            dd, dn, dp = (f(res[k].values[l]) for k in ("d_diffeo", "d_noise", "d_pair"))
            np.testing.assert_allclose([res.D_f[l], res.G_f[l], res.R_f[l]], [dd / dp, dn / dp, dd / dn], rtol=1e-12)
        xr.testing.assert_allclose(summarize(res, statistic)[["D_f", "G_f", "R_f"]], res[["D_f", "G_f", "R_f"]])

    def test_saved_and_reloaded(self, tmp_path):
        res = relative_stability(small_cnn(), images(dtype=torch.float32), perturbation=Diffeomorphism(delta=1, c=3))
        res.to_netcdf(tmp_path / "r.nc", engine="netcdf4")
        back = xr.load_dataset(tmp_path / "r.nc", engine="netcdf4")
        xr.testing.assert_allclose(summarize(back, "median")[["R_f"]], res[["R_f"]])

    def test_bootstrap_shapes(self):
        res = relative_stability(small_cnn().double(), images(), layers=["1", "output"])
        bs = stability.bootstrap(res, resamples=20)
        assert bs.R_f.dims == ("layer",) and (bs.R_f > 0).all()
        with pytest.warns(FutureWarning, match="now resamples"):   # the old name still works, once warned
            xr.testing.assert_identical(stability.bootstrap(res, n=20), bs)
        with pytest.raises(TypeError, match="resamples only"): stability.bootstrap(res, resamples=30, n=20)


class TestProperties:
    @given(scale=st.floats(0.01, 100))
    def test_invariant_to_output_scale(self, scale):
        net = small_cnn().double()
        a = relative_stability(net, images(), perturbation=Diffeomorphism(delta=1, c=3))
        b = relative_stability(nn.Sequential(net, _Scale(scale)), images(), perturbation=Diffeomorphism(delta=1, c=3))
        np.testing.assert_allclose(a.R_f, b.R_f, rtol=1e-9)
        np.testing.assert_allclose(a.D_f, b.D_f, rtol=1e-9)

    @given(batch_size=st.integers(2, 30))
    def test_batch_size_does_not_change_per_sample_moves(self, batch_size):
        "Without batch-norm, d_diffeo and d_noise do not depend on how images are batched."
        net, x = small_cnn().double(), images()
        a = relative_stability(net, x, batch_size=batch_size)
        b = relative_stability(net, x, batch_size=len(x))
        np.testing.assert_allclose(a.d_diffeo, b.d_diffeo, rtol=1e-10)
        np.testing.assert_allclose(a.d_noise, b.d_noise, rtol=1e-10)

    def test_same_seed_same_result_and_layers_agree_with_single_runs(self):
        net, x = small_cnn().double(), images()
        both = relative_stability(net, x, layers=["1", "output"], seed=3)
        alone = relative_stability(net, x, seed=3)
        np.testing.assert_array_equal(both.sel(layer="output").d_diffeo, alone.sel(layer="output").d_diffeo)
        assert not np.array_equal(relative_stability(net, x, seed=4).d_diffeo, alone.d_diffeo)

    def test_T_and_delta_agree(self):
        a = relative_stability(nn.Identity(), images(), perturbation=Diffeomorphism(delta=0.7, c=3))
        b = relative_stability(nn.Identity(), images(), perturbation=Diffeomorphism(T=a.attrs["T"], c=3))
        np.testing.assert_allclose(a.d_diffeo, b.d_diffeo, rtol=1e-10)
        assert abs(b.attrs["delta"] - 0.7) < 1e-9

    @pytest.mark.parametrize("delta", [0.5, 1.0])
    @pytest.mark.parametrize("method", ["asymptotic", "average", "center"])
    def test_measured_displacement_matches_delta(self, delta, method):
        "The drawn fields move pixels, in rms over 400 draws, by what the method promises (the grid average: × 31/32)."
        res = relative_stability(nn.Identity(), images(n=400, size=32), perturbation=Diffeomorphism(delta=delta, c=3, delta_method=method))
        rms = lambda v: np.sqrt((v**2).mean()).item()
        average, center = res.attrs["delta_average_expected"], res.attrs["delta_center_expected"]
        assert abs(rms(res.delta_measured) / (31 / 32 * average) - 1) < 0.1
        assert abs(rms(res.delta_center) / center - 1) < 0.1
        if method != "asymptotic": assert abs({"average": average, "center": center}[method] / delta - 1) < 1e-12
        else: assert abs(center / (1.0766 * delta) - 1) < 1e-4  # the authors' δ at c = 3 is the centre's, to 8%
        assert res.attrs["delta"] == delta and res.attrs["delta_method"] == method
        assert res.delta_measured.attrs["units"] == res.delta_center.attrs["units"] == "pixel"

    def test_non_square_images_use_the_mean_square_side(self):
        "On 32×64 images δ is set with n = √((32² + 64²)/2), and the measured average displacement follows."
        res = relative_stability(nn.Identity(), images(n=400, size=(32, 64)), perturbation=Diffeomorphism(delta=1, c=3, delta_method="average"))
        rms = np.sqrt((res.delta_measured**2).mean()).item()
        assert abs(rms / (np.sqrt(31 * 63 / (32 * 64)) * 1.0) - 1) < 0.1


class _Scale(nn.Module):
    def __init__(self, a): super().__init__(); self.a = a
    def forward(self, x): return self.a * x


class TestBatchNorm:
    def test_auto_uses_batch_statistics_at_init_and_running_after_training(self):
        net, x = small_cnn(bn=True), images(dtype=torch.float32)
        auto = relative_stability(net, x)
        xr.testing.assert_identical(auto.drop_attrs(), relative_stability(net, x, batchnorm="batch").drop_attrs())
        net.train(); net(x); net.eval()  # one training batch: the running statistics are now in use
        auto = relative_stability(net, x)
        xr.testing.assert_identical(auto.drop_attrs(), relative_stability(net, x, batchnorm="running").drop_attrs())

    def test_probing_leaves_the_model_unchanged(self):
        net, x = small_cnn(bn=True), images(dtype=torch.float32)
        net.train()
        state = {k: v.clone() for k, v in net.state_dict().items()}
        relative_stability(net, x, batchnorm="batch")
        assert net.training and all(torch.equal(state[k], v) for k, v in net.state_dict().items())


class TestBadInputs:
    def test_messages(self):
        x = images()
        with pytest.raises(ValueError, match="at least 2"): relative_stability(nn.Identity(), x[:1])
        with pytest.raises(ValueError, match="delta"): relative_stability(nn.Identity(), x, perturbation=Diffeomorphism(delta=0))
        with pytest.raises(ValueError, match="'sample', 'mean'"): relative_stability(nn.Identity(), x, noise_radius="median")
        with pytest.raises(ValueError, match="'auto', 'batch', 'running'"): relative_stability(nn.Identity(), x, batchnorm="eval")
        with pytest.raises(ValueError, match="model.named_modules"): relative_stability(small_cnn().double(), x, layers=["conv9"])
        with pytest.raises(TypeError, match="nn.Module"): relative_stability(lambda v: v, x)
        with pytest.raises(ValueError, match=r"\[B, C, H, W\]"): relative_stability(nn.Identity(), x[0, 0])
        with pytest.raises(ValueError, match="one radius per sample"): stability.sphere_noise((3, 4), torch.ones(2))

    def test_delta_outside_the_diffeomorphism_range_warns(self):
        with pytest.warns(UserWarning, match="diffeomorphism range"):
            res = relative_stability(nn.Identity(), images(), perturbation=Diffeomorphism(delta=6, c=3))
        assert res.is_diffeo.mean() < 1
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            relative_stability(nn.Identity(), images(), perturbation=Diffeomorphism(delta=1, c=3))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu():
    "In float64 (float32 convolutions on CUDA may use TF32): the draws are made on the CPU, so only rounding differs."
    net, x = small_cnn().double(), images(dtype=torch.float64)
    a = relative_stability(net, x)
    b = relative_stability(net.cuda(), x.cuda())
    np.testing.assert_array_equal(a.partner, b.partner)
    # each distance is a difference of outputs of size |f| ~ 1: rounding of order 1e3·eps64 relative to |f|² at most
    scale = float(a.d_pair.max())
    for k in ("d_diffeo", "d_noise", "d_pair"):
        np.testing.assert_allclose(a[k], b[k], rtol=0, atol=1e3 * np.finfo(np.float64).eps * scale)


def test_features_are_copies_taken_before_in_place_operations():
    net = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(inplace=True), nn.Flatten())
    got = probes.features(net, torch.randn(8, 1, 6, 6), ["0", "output"])
    assert (got["0"] < 0).any() and (got["output"] >= 0).all()


# ------------------------------------------------------------------------------------------------ perturbations

from diffgeo import diffeo
from diffgeo.stability import CallablePerturbation, Diffeomorphism, GroupAction, Perturbation, as_perturbation

ROTATIONS = [lambda v, k=k: torch.rot90(v, k, (-2, -1)) for k in (1, 2, 3)]


class SortedPixels(nn.Module):
    "Invariant to every permutation of the pixels, so exactly to rotations by multiples of 90°."
    def forward(self, x): return x.flatten(1).sort(1).values


def interior_noise(v, generator):
    eta = torch.zeros_like(v)
    eta[..., 1:-1, 1:-1] = 0.1 * torch.randn(v[..., 1:-1, 1:-1].shape, generator=generator, dtype=torch.float64).to(v)
    return v + eta, {"eta_norm": eta.flatten(1).norm(dim=1)}


class Brightness(Perturbation):
    "A per-sample brightness offset drawn up front: a subclass with its own draw and a record from it."
    name, records = "brightness", {"offset": {"long_name": "brightness offset", "units": "1"}}
    def draw(self, shape, generator):
        return {"offset": 0.1 * torch.randn(shape[0], generator=generator, dtype=torch.float64)}, {"scale": 0.1}
    def apply(self, x, params, generator):
        return x + params["offset"].to(x).view(-1, 1, 1, 1), x, {}


class TestPerturbations:
    def test_default_is_the_diffeomorphism_bit_for_bit(self):
        "The flat arguments of the old call (deprecated) and the default are `Diffeomorphism(...)`, draw for draw."
        net, x = small_cnn(), images(dtype=torch.float32)
        for kw in ({}, dict(delta=0.5, c=5, interp="gaussian"), dict(T=1e-3, cutoff="code", interp="nearest")):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                a = relative_stability(net, x, **kw)
            b = relative_stability(net, x, perturbation=Diffeomorphism(**kw))
            xr.testing.assert_identical(a, b)
            assert a.attrs["perturbation"] == "diffeo"

    def test_default_distances_by_a_second_route(self):
        "r_diffeo rebuilt from the generator's first draw (the fields) with diffeo's own functions, image by image."
        x = images()
        res = relative_stability(nn.Identity(), x, perturbation=Diffeomorphism(delta=1, c=3), seed=5)
        T = diffeo.temperature_for_delta(1, 16, 3)
        coeffs = diffeo.sample_coefficients(len(x), T, 3, "paper", torch.Generator().manual_seed(5), torch.float64, torch.device("cpu"))
        r = [(diffeo.warp(x[i:i + 1], diffeo.field(coeffs[i:i + 1], (16, 16)), "bilinear") - x[i:i + 1]).norm().item()
             for i in range(len(x))]
        np.testing.assert_allclose(res.r_diffeo, r, rtol=1e-12)  # float64; per-image and batched warps may round differently
        np.testing.assert_array_equal(res.is_diffeo, diffeo.is_diffeomorphism(coeffs, (16, 16)).numpy())
        assert res.attrs["T"] == T

    def test_group_action_on_a_rotation_invariant_model(self):
        x = images(dtype=torch.float32)
        res = relative_stability(SortedPixels(), x, perturbation=ROTATIONS)
        assert res.D_f.item() == 0 and res.R_f.item() == 0 and res.G_f.item() > 0
        assert set(res.element.values) == {0, 1, 2} and res.attrs["perturbation"] == "group"
        assert (res.r_diffeo > 0).all()
        ident = relative_stability(nn.Identity(), x.double(), perturbation=GroupAction(ROTATIONS, names=["a", "b", "c"]))
        assert abs(ident.R_f.item() - 1) < 1e-12 and ident.attrs["group_elements"] == "a, b, c"

    def test_group_action_applies_the_drawn_element(self):
        x, g = images(), torch.Generator().manual_seed(0)
        rot = GroupAction(ROTATIONS)
        params, _ = rot.draw(x.shape, g)
        moved, ref, rec = rot.apply(x, params, g)
        assert ref is x and rec == {}
        for i in range(len(x)): assert torch.equal(moved[i], torch.rot90(x[i], int(params["element"][i]) + 1, (-2, -1)))

    def test_custom_callable(self):
        inner = CallablePerturbation(interior_noise, records={"eta_norm": "norm of the interior noise"})
        res = relative_stability(BorderReader(), images(), perturbation=inner)
        assert res.D_f.item() == 0 and res.G_f.item() > 0 and res.attrs["perturbation"] == "interior_noise"
        ident = relative_stability(nn.Identity(), images(), perturbation=inner)
        assert abs(ident.R_f.item() - 1) < 1e-12
        np.testing.assert_allclose(ident.eta_norm, ident.r_diffeo, rtol=1e-12)
        assert ident.eta_norm.attrs["long_name"] == "norm of the interior noise"
        plain = relative_stability(nn.Identity(), images(), perturbation=lambda v, g: v.flip(-1))  # a bare callable
        assert plain.attrs["perturbation"] == "custom" and (plain.r_diffeo > 0).all()

    def test_callable_draws_from_the_measures_generator(self):
        inner = CallablePerturbation(interior_noise, records={"eta_norm": "norm"})
        a, b, c = (relative_stability(small_cnn().double(), images(), perturbation=inner, seed=s) for s in (1, 1, 2))
        xr.testing.assert_identical(a, b)
        assert not np.array_equal(a.d_diffeo, c.d_diffeo)

    def test_subclass_draws_up_front_so_batch_size_does_not_matter(self):
        a = relative_stability(nn.Identity(), images(), perturbation=Brightness(), batch_size=5)
        b = relative_stability(nn.Identity(), images(), perturbation=Brightness(), batch_size=250)
        np.testing.assert_array_equal(a["offset"], b["offset"])
        np.testing.assert_allclose(a.r_diffeo, np.abs(a["offset"]) * 16, rtol=1e-12)  # a constant shift s over 16×16 pixels
        assert a.attrs["scale"] == 0.1 and a["offset"].attrs["long_name"] == "brightness offset"

    def test_as_perturbation(self):
        p = Diffeomorphism()
        assert as_perturbation(p) is p
        assert isinstance(as_perturbation(ROTATIONS), GroupAction) and isinstance(as_perturbation(tuple(ROTATIONS)), GroupAction)
        assert isinstance(as_perturbation(interior_noise), CallablePerturbation)


class BadDraw(Perturbation):
    def draw(self, shape, generator): return {"k": torch.zeros(shape[0] + 1)}, {}
    def apply(self, x, params, generator): return x, x, {}


class TestPerturbationBadInputs:
    @pytest.mark.parametrize("perturbation, error, match", [
        ("rot90", TypeError, "Perturbation"),
        (nn.Identity, TypeError, "Perturbation"),
        (Perturbation(), NotImplementedError, "must define apply"),
        (BadDraw(), ValueError, "one row per sample"),
        (lambda v, g: v[..., 1:, :], ValueError, "keep the shape"),
        (lambda v, g: (v, {"n": v.flatten(1).sum(1)}), ValueError, "declare every record"),
        (CallablePerturbation(lambda v, g: (v, {"n": v.sum()}), records={"n": "sum"}), ValueError, "one value per sample"),
        (lambda v, g: (v, v), TypeError, "must return"),
    ])
    def test_bad_perturbation(self, perturbation, error, match):
        with pytest.raises(error, match=match):
            relative_stability(nn.Identity(), images(), perturbation=perturbation)

    def test_diffeo_settings_with_another_perturbation(self):
        with pytest.raises(ValueError, match=r"Diffeomorphism\(delta=\.\.\., interp=\.\.\.\)"):
            relative_stability(nn.Identity(), images(), perturbation=ROTATIONS, delta=2, interp="nearest")

    def test_group_elements_must_keep_the_shape(self):
        with pytest.raises(ValueError, match="keep the shape"):
            relative_stability(nn.Identity(), images()[..., :10], perturbation=ROTATIONS)

    def test_group_action_arguments(self):
        with pytest.raises(TypeError, match="non-empty list"): GroupAction([])
        with pytest.raises(TypeError, match="non-empty list"): GroupAction(torch.rot90)
        with pytest.raises(TypeError, match=r"elements \[1\] are not callable"): GroupAction([torch.neg, 3])
        with pytest.raises(ValueError, match="one per element"): GroupAction(ROTATIONS, names=["a"])
        with pytest.raises(TypeError, match="fn must be callable"): CallablePerturbation(3)

    def test_diffeomorphism_arguments(self):
        with pytest.raises(ValueError, match="'bilinear'"): Diffeomorphism(interp="cubic")
        with pytest.raises(ValueError, match="delta"): Diffeomorphism(delta=0)
        with pytest.raises(ValueError, match="'paper'"): Diffeomorphism(cutoff="both")
