"""Tests of `diffgeo.distort`, the distorted-MNIST generator of Detlefsen et al. (2018, §5.1): bad inputs and their
errors, determinism per seed, independence of the chunk size (to the dtype's rounding bound, `tolerance`), shapes and
ranges, and the documented ranges of the RTS draws. About 25 s on two shared CPU cores, most of it the CPAB warps."""
import math

import pytest
import torch

from diffgeo import data, distort as D


@pytest.fixture(scope="module")
def digits():
    return data.load("mnist5k", normalize=False).test.images[:40]


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


class TestRtsParams:
    def test_ranges(self):
        p = D.rts_params(5000, gen())
        assert p["angle"].abs().max() <= math.radians(45)
        assert 0.7 <= p["scale"].min() and p["scale"].max() <= 1.2
        assert p["shift"].abs().max() <= (D.CANVAS - 28) // 2
        assert all(v.dtype == torch.float64 for v in p.values())
        assert p["angle"].shape == (5000,) and p["shift"].shape == (5000, 2)

    def test_custom_ranges(self):
        p = D.rts_params(2000, gen(), size=20, canvas=30, rotation=10.0, scale=(1.0, 1.0))
        assert p["angle"].abs().max() <= math.radians(10) and torch.all(p["scale"] == 1.0)
        assert p["shift"].abs().max() <= 5

    def test_determinism(self):
        a, b = D.rts_params(10, gen(3)), D.rts_params(10, gen(3))
        assert all(torch.equal(a[k], b[k]) for k in a)

    @pytest.mark.parametrize("kwargs, match", [
        (dict(n=-1), "n must be >= 0"), (dict(n=2.5), "n must be an integer"),
        (dict(scale=(1.2, 0.7)), "low <= high"), (dict(scale=(0.0, 1.0)), "scale must be > 0"),
        (dict(scale=0.7), "pair"), (dict(rotation=270), "rotation must be <= 180"),
        (dict(canvas=20), "at least as large"), (dict(generator=3), "torch.Generator")])
    def test_bad_inputs(self, kwargs, match):
        args = dict(n=3, generator=gen()) | kwargs
        with pytest.raises((ValueError, TypeError), match=match): D.rts_params(**args)


class TestCpabParams:
    def test_shapes_and_ranges(self):
        p = D.cpab_params(2000, gen())
        assert p["theta"].shape == (2000, 34) and p["theta"].dtype == torch.float32
        assert p["shift"].dtype == torch.int64 and p["shift"].abs().max() == 7

    def test_bad_inputs(self):
        with pytest.raises(ValueError, match="tess_size"): D.cpab_params(3, gen(), tess_size=3)
        with pytest.raises(ValueError, match="n_steps must be >= 1"): D.cpab_params(3, gen(), n_steps=0)


class TestPlace:
    def test_exact_paste(self, digits):
        out = D.place(digits[:2], torch.tensor([[0, 0], [-7, 7]]))
        assert out.shape == (2, 1, 42, 42)
        assert torch.equal(out[0, 0, 7:35, 7:35], digits[0, 0]) and torch.equal(out[1, 0, 14:42, 0:28], digits[1, 0])
        assert out.sum() == digits[:2].sum()

    def test_bad_inputs(self, digits):
        with pytest.raises(ValueError, match="±7 pixels"): D.place(digits[:1], torch.tensor([[8, 0]]))
        with pytest.raises(TypeError, match="integers"): D.place(digits[:1], torch.tensor([[1.0, 0.0]]))
        with pytest.raises(ValueError, match=r"shape \[2, 2\]"): D.place(digits[:2], torch.tensor([[1, 0]]))
        with pytest.raises(ValueError, match="square"): D.place(digits[:1, :, :, :20], torch.tensor([[0, 0]]))


class TestWarps:
    def test_identity(self, digits):
        shift = torch.tensor([[-7, 3], [5, -7]])
        pasted = D.place(digits[:2], shift)
        one, zero = torch.ones(2, dtype=torch.float64), torch.zeros(2, dtype=torch.float64)
        torch.testing.assert_close(D.rts_warp(digits[:2], zero, one, shift.double()), pasted, atol=1e-5, rtol=0)
        torch.testing.assert_close(D.cpab_warp(digits[:2], torch.zeros(2, 34), shift), pasted, atol=1e-5, rtol=0)

    def test_bad_inputs(self, digits):
        one = torch.ones(2, dtype=torch.float64)
        with pytest.raises(ValueError, match=r"angle must be a tensor of shape \[2\]"):
            D.rts_warp(digits[:2], one[:1], one, torch.zeros(2, 2, dtype=torch.float64))
        with pytest.raises(ValueError, match="scale factors must be > 0"):
            D.rts_warp(digits[:2], one, -one, torch.zeros(2, 2, dtype=torch.float64))
        with pytest.raises(ValueError, match="batch"): D.rts_warp(digits[0], one[:1], one[:1], torch.zeros(1, 2))
        with pytest.raises(ValueError, match=r"theta must be a tensor of shape \[2, 34\]"):
            D.cpab_warp(digits[:2], torch.zeros(2, 5), torch.zeros(2, 2, dtype=torch.long))
        with pytest.raises(ValueError, match="n_steps must be >= 1"):
            D.cpab_warp(digits[:2], torch.zeros(2, 34), torch.zeros(2, 2, dtype=torch.long), n_steps=0)


@pytest.mark.parametrize("distortion", D.DISTORTIONS)
class TestDistort:
    def test_shapes_and_range(self, digits, distortion):
        out, params = D.distort(digits, distortion, seed=0)
        assert out.shape == (40, 1, 42, 42) and out.dtype == torch.float32
        assert 0 <= out.min() and out.max() <= 1 and out.flatten(1).amax(1).min() > 0.5  # every digit still visible
        assert all(len(v) == 40 for v in params.values())

    def test_determinism_per_seed(self, digits, distortion):
        a, pa = D.distort(digits[:12], distortion, seed=7)
        b, pb = D.distort(digits[:12], distortion, seed=7)
        assert torch.equal(a, b) and all(torch.equal(pa[k], pb[k]) for k in pa)
        assert not torch.equal(a, D.distort(digits[:12], distortion, seed=8)[0])

    def test_batch_independence_float64(self, digits, distortion):
        a, params = D.distort(digits[:12], distortion, seed=1, chunk=5, dtype=torch.float64)
        b, _ = D.distort(digits[:12], distortion, seed=1, chunk=12, dtype=torch.float64)
        tol = D.tolerance(params, torch.float64)
        assert tol < 1e-10
        torch.testing.assert_close(a, b, atol=2 * tol, rtol=0)

    def test_float32_within_its_bound(self, digits, distortion):
        a32, params = D.distort(digits[:12], distortion, seed=1, chunk=5)
        b32, _ = D.distort(digits[:12], distortion, seed=1, chunk=12)
        a64, _ = D.distort(digits[:12], distortion, seed=1, dtype=torch.float64)
        tol32, tol64 = D.tolerance(params, torch.float32), D.tolerance(params, torch.float64)
        torch.testing.assert_close(a32, b32, atol=2 * tol32, rtol=0)
        torch.testing.assert_close(a32.double(), a64, atol=tol32 + tol64, rtol=0)

    def test_empty(self, digits, distortion):
        out, _ = D.distort(digits[:0], distortion, seed=0)
        assert out.shape == (0, 1, 42, 42)

    def test_bad_inputs(self, digits, distortion):
        with pytest.raises(ValueError, match="normalize=False"): D.distort(digits - 0.5, distortion, seed=0)
        with pytest.raises(ValueError, match="chunk must be >= 1"): D.distort(digits, distortion, seed=0, chunk=0)
        with pytest.raises(ValueError, match="seed must be >= 0"): D.distort(digits, distortion, seed=-1)
        with pytest.raises(ValueError, match="unknown dtype"): D.distort(digits, distortion, seed=0, dtype=torch.float16)
        with pytest.raises(ValueError, match="valid ones are"): D.distort(digits, distortion, seed=0, elastic=1.0)
        with pytest.raises(ValueError, match="batch"): D.distort(digits[0], distortion, seed=0)
        with pytest.raises(TypeError, match="torch.Tensor"): D.distort(digits.numpy(), distortion, seed=0)


def test_unknown_distortion(digits):
    with pytest.raises(ValueError, match="'RTS', 'CPAB'"): D.distort(digits, "elastic", seed=0)


class TestTolerance:
    def test_scales_with_eps(self):
        p = D.cpab_params(50, gen())
        t32, t64 = D.tolerance(p, torch.float32), D.tolerance(p, torch.float64)
        ratio = torch.finfo(torch.float32).eps / torch.finfo(torch.float64).eps
        assert t32 == pytest.approx(ratio * t64) and t32 < 1e-2
        assert D.tolerance(D.rts_params(5, gen()), torch.float64) == 12 * 28 * torch.finfo(torch.float64).eps

    def test_bad_inputs(self):
        with pytest.raises(ValueError, match="dict of drawn parameters"): D.tolerance({"x": 1})
        with pytest.raises(ValueError, match="unknown dtype"): D.tolerance(D.cpab_params(2, gen()), torch.int32)


class TestDistortedMnist:
    def test_smoke_size(self):
        train, test = D.distorted_mnist("RTS", n_train=100, n_test=60)
        assert train.images.shape == (100, 1, 42, 42) and test.images.shape == (60, 1, 42, 42)
        assert D.distorted_mnist("RTS", n_train=100, n_test=60)[1] is test
        assert test.labels[D.fig5_indices(test)].tolist() == list(D.FIG5_DIGITS)

    def test_bad_inputs(self):
        with pytest.raises(ValueError, match="valid values are 'RTS', 'CPAB'"): D.distorted_mnist("rts")
        with pytest.raises(ValueError, match="valid values are 'mnist5k', 'mnist'"): D.distorted_mnist("RTS", "cifar")
        with pytest.raises(ValueError, match="n_test must be >= 1"): D.distorted_mnist("RTS", n_test=0)
        with pytest.raises(TypeError, match="data.Split"): D.fig5_indices(torch.zeros(3))
