"""Stability measures: known answers, recomputation from stored distances, invariances, bad inputs."""
import warnings

import numpy as np
import pytest
import torch
import xarray as xr
from hypothesis import given, strategies as st
from torch import nn

from diffgeo import stability
from diffgeo.stability import BorderReader, relative_stability, summarize


def images(n=24, size=16, channels=1, dtype=torch.float64, seed=0):
    return torch.rand(n, channels, size, size, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def small_cnn(channels=1, bn=False):
    torch.manual_seed(0)
    layers = [nn.Conv2d(channels, 8, 3, padding=1)] + ([nn.BatchNorm2d(8)] if bn else []) + \
             [nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(32, 5)]
    return nn.Sequential(*layers)


class TestKnownAnswers:
    @pytest.mark.parametrize("interp", ["bilinear", "nearest", "gaussian"])
    def test_identity_gives_one(self, interp):
        res = relative_stability(nn.Identity(), images(), delta=1, c=3, interp=interp)
        assert abs(res.R_f.item() - 1) < 1e-12
        np.testing.assert_allclose(res.d_noise, res.d_diffeo, rtol=1e-10)

    def test_identity_mean_radius_is_not_exactly_one(self):
        "With the paper's single radius the identity's R_f is a ratio of medians of different quantities."
        res = relative_stability(nn.Identity(), images(), delta=1, c=3, noise_radius="mean")
        np.testing.assert_allclose(res.r_noise, res.r_diffeo.mean(), rtol=1e-12)
        assert res.R_f.item() != 1.0

    def test_per_sample_radii_equal_deformation_radii(self):
        res = relative_stability(small_cnn().double(), images(), delta=1, c=3)
        np.testing.assert_array_equal(res.r_noise, res.r_diffeo)
        assert (res.r_diffeo > 0).all()

    @pytest.mark.parametrize("statistic", ["median", "mean"])
    def test_border_reader_is_blind_to_diffeomorphisms(self, statistic):
        res = relative_stability(BorderReader(), images(dtype=torch.float32), delta=1, c=3, statistic=statistic)
        assert res.D_f.item() == 0 and res.R_f.item() == 0 and res.G_f.item() > 0

    def test_identity_D_f_is_the_input_ratio(self):
        x = images()
        res = relative_stability(nn.Identity(), x, delta=1, c=3)
        d_pair = (x - x[res.partner.values]).flatten(1).pow(2).sum(1).numpy()
        np.testing.assert_allclose(res.d_pair[0], d_pair, rtol=1e-12)
        np.testing.assert_allclose(res.D_f.item(), np.median(res.r_diffeo**2) / np.median(d_pair), rtol=1e-12)


class TestRecomputation:
    @pytest.mark.parametrize("statistic", ["median", "mean"])
    def test_summaries_from_stored_distances(self, statistic):
        res = relative_stability(small_cnn().double(), images(), delta=1, c=3, statistic=statistic,
                                 layers=["2", "output"])
        f = np.median if statistic == "median" else np.mean
        for l in range(2):
            dd, dn, dp = (f(res[k].values[l]) for k in ("d_diffeo", "d_noise", "d_pair"))
            np.testing.assert_allclose([res.D_f[l], res.G_f[l], res.R_f[l]], [dd / dp, dn / dp, dd / dn], rtol=1e-12)
        xr.testing.assert_allclose(summarize(res, statistic)[["D_f", "G_f", "R_f"]], res[["D_f", "G_f", "R_f"]])

    def test_saved_and_reloaded(self, tmp_path):
        res = relative_stability(small_cnn(), images(dtype=torch.float32), delta=1, c=3)
        res.to_netcdf(tmp_path / "r.nc", engine="netcdf4")
        back = xr.load_dataset(tmp_path / "r.nc", engine="netcdf4")
        xr.testing.assert_allclose(summarize(back, "median")[["R_f"]], res[["R_f"]])

    def test_bootstrap_shapes(self):
        res = relative_stability(small_cnn().double(), images(), layers=["1", "output"])
        bs = stability.bootstrap(res, n=20)
        assert bs.R_f.dims == ("layer",) and (bs.R_f > 0).all()


class TestProperties:
    @given(scale=st.floats(0.01, 100))
    def test_invariant_to_output_scale(self, scale):
        net = small_cnn().double()
        a = relative_stability(net, images(), delta=1, c=3)
        b = relative_stability(nn.Sequential(net, _Scale(scale)), images(), delta=1, c=3)
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
        a = relative_stability(nn.Identity(), images(), delta=0.7, c=3)
        b = relative_stability(nn.Identity(), images(), T=a.attrs["T"], c=3)
        np.testing.assert_allclose(a.d_diffeo, b.d_diffeo, rtol=1e-10)
        assert abs(b.attrs["delta"] - 0.7) < 1e-9

    @pytest.mark.parametrize("delta", [0.5, 1.0])
    def test_measured_displacement_matches_delta(self, delta):
        "The fields drawn for a given delta move pixels by delta in root-mean-square over the draws."
        res = relative_stability(nn.Identity(), images(n=400, size=32), delta=delta, c=3)
        assert abs(np.sqrt((res.delta_measured**2).mean()) / delta - 1) < 0.1
        assert res.delta_measured.attrs["units"] == "pixel"


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
        with pytest.raises(ValueError, match="delta"): relative_stability(nn.Identity(), x, delta=0)
        with pytest.raises(ValueError, match="'sample', 'mean'"): relative_stability(nn.Identity(), x, noise_radius="median")
        with pytest.raises(ValueError, match="'auto', 'batch', 'running'"): relative_stability(nn.Identity(), x, batchnorm="eval")
        with pytest.raises(ValueError, match="model.named_modules"): relative_stability(small_cnn().double(), x, layers=["conv9"])
        with pytest.raises(TypeError, match="nn.Module"): relative_stability(lambda v: v, x)
        with pytest.raises(ValueError, match=r"\[B, C, H, W\]"): relative_stability(nn.Identity(), x[0, 0])
        with pytest.raises(ValueError, match="one radius per sample"): stability.sphere_noise((3, 4), torch.ones(2))

    def test_delta_outside_the_diffeomorphism_range_warns(self):
        with pytest.warns(UserWarning, match="diffeomorphism range"):
            res = relative_stability(nn.Identity(), images(), delta=6, c=3)
        assert res.is_diffeo.mean() < 1
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            relative_stability(nn.Identity(), images(), delta=1, c=3)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu():
    net, x = small_cnn(), images(dtype=torch.float32)
    a = relative_stability(net, x)
    b = relative_stability(net.cuda(), x.cuda())
    np.testing.assert_allclose(a.d_diffeo, b.d_diffeo, rtol=1e-3)


def test_features_are_copies_taken_before_in_place_operations():
    net = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(inplace=True), nn.Flatten())
    got = stability.features(net, torch.randn(8, 1, 6, 6), ["0", "output"])
    assert (got["0"] < 0).any() and (got["output"] >= 0).all()
