"""Bad inputs to public functions end as a clear error naming the fix, a warning, or a correct result (issue 10's list).

Each case was found by passing bad inputs to the public API; before the fix it was silently wrong, cryptic or a hang."""
import math

import pytest
import torch
import xarray as xr
from torch import nn

from diffgeo import cpab, diffeo, results, stability
from diffgeo.core import resolve_device

X = torch.rand(2, 1, 16, 16, generator=torch.Generator().manual_seed(0))
TESS = cpab.Tessellation((3, 3))
THETA = cpab.sample(TESS, 1, generator=torch.Generator().manual_seed(0))
MLP = lambda dtype=torch.float32: nn.Sequential(nn.Flatten(), nn.Linear(256, 3)).to(dtype)


class Apply(nn.Module):
    "Applies `fn` to its input: here, turns a model's tensor output into a tuple or a dict."
    def __init__(self, fn): super().__init__(); self.fn = fn
    def forward(self, y): return self.fn(y)


class TestSilentlyWrong:
    def test_nan_field_is_refused(self):
        tau = torch.zeros(2, 2, 16, 16); tau[0, 0, 3, 3] = math.nan
        with pytest.raises(ValueError, match="tau contains NaN"): diffeo.warp(X, tau)

    def test_delta_measured_needs_a_batch_of_fields(self):
        with pytest.raises(ValueError, match=r"tau must be a field \[B, 2, H, W\]"): diffeo.delta_measured(torch.rand(2, 16, 16))

    def test_integer_dtypes_are_refused(self):
        with pytest.raises(TypeError, match="floating-point torch.dtype"): diffeo.sample_coefficients(2, 1e-3, 3, dtype=torch.int64)
        with pytest.raises(TypeError, match="floating-point torch.dtype"):
            stability.sphere_noise((2, 1, 4, 4), torch.ones(2), torch.Generator(), torch.int64)

    @pytest.mark.skipif(torch.backends.mps.is_available(), reason="this machine has MPS")
    def test_unavailable_mps_is_refused(self):
        with pytest.raises(ValueError, match="no mps backend"): resolve_device("mps")


class TestCrypticBecomesClear:
    @pytest.mark.parametrize("size, match", [((0, 0), "size must be >= 2"), ((-3, 4), "size must be >= 2"),
                                             ((3.5, 4), "size must be an integer")])
    def test_field_sizes(self, size, match):
        with pytest.raises((ValueError, TypeError), match=match): diffeo.field(diffeo.sample_coefficients(1, 1e-3, 3), size)

    def test_nan_theta(self):
        bad = THETA.clone(); bad[0, 0] = math.nan
        with pytest.raises(ValueError, match="theta contains NaN"): cpab.warp(X, bad.expand(2, -1), TESS)

    def test_nan_points(self):
        with pytest.raises(ValueError, match="points contain NaN"): cpab.transform(torch.tensor([[math.nan, 0.5]]), THETA, TESS)

    def test_random_diffeo_one_element_list(self):
        with pytest.raises(ValueError, match=r"a \(low, high\) pair, got \[0.001\]; for one value pass T=0.001"):
            diffeo.RandomDiffeo(T=[1e-3], c=3)

    def test_temperature_as_a_string(self):
        with pytest.raises(TypeError, match=r"use float\('1e-3'\)"): diffeo.deform(X, "1e-3", 3)

    def test_empty_batches_give_empty_results(self):
        empty = torch.rand(0, 1, 16, 16)
        assert diffeo.deform(empty, 1e-3, 3).shape == empty.shape
        assert cpab.warp(empty, THETA[:0], TESS).shape == empty.shape

    def test_model_outputs_that_are_not_a_tensor(self):
        "A dict, a too-short tuple or a non-tensor element named the fix (it was \"'dict' object has no attribute 'flatten'\")."
        as_dict = nn.Sequential(MLP(), Apply(lambda y: {"logits": y, "features": y.detach()}))
        with pytest.raises(TypeError, match=r"keys \['logits', 'features'\]; pass output='logits' \(one of them\) or .* layers="):
            stability.relative_stability(as_dict, X)
        with pytest.raises(ValueError, match=r"its keys are \['logits', 'features'\]"): stability.relative_stability(as_dict, X, output="logit")
        as_tuple = nn.Sequential(MLP(), Apply(lambda y: (y, None)))
        with pytest.raises(ValueError, match=r"out of range: .* tuple of 2 elements \(indices 0 to 1\)"):
            stability.relative_stability(as_tuple, X, output=2)
        with pytest.raises(TypeError, match="element 1 of the tuple the model returns is a NoneType, not a tensor"):
            stability.relative_stability(as_tuple, X, output=1)
        with pytest.raises(TypeError, match=r"an index \(int\) or a key \(str\)"): stability.relative_stability(as_tuple, X, output=1.0)

    def test_save_dataset_given_a_dataarray(self, tmp_path):
        with pytest.raises(TypeError, match=r"da.to_dataset\(name="): results.save_dataset(xr.DataArray([1, 2]), tmp_path / "x.nc")


class TestNoHangs:
    def test_cut_off_beyond_the_image(self):
        "c = 1e4 is refused at once (it hung for > 20 s); a c the grid cannot resolve warns, with its cost."
        with pytest.raises(ValueError, match="MAX_C"): diffeo.deform(X, 1e-9, 1e4)
        with pytest.warns(UserWarning, match="resolves sine modes only up to 14"): diffeo.deform(X, 1e-9, 20)

    def test_huge_theta_is_capped_with_a_warning(self):
        big = THETA * 720 / THETA.norm()
        with pytest.warns(UserWarning, match="capped at MAX_STEPS"): out = cpab.warp(X, big.expand(2, -1), TESS)
        assert torch.isfinite(out).all()


class TestMeasureEdges:
    def test_inputs_that_require_grad(self):
        x = torch.rand(4, 1, 16, 16, requires_grad=True)
        assert stability.relative_stability(MLP(), x).R_f.notnull().all()

    @pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
    def test_models_in_another_precision(self, dtype):
        res = stability.relative_stability(MLP(dtype), torch.rand(8, 1, 16, 16))
        assert res.R_f.notnull().all()

    def test_constant_images_warn(self):
        with pytest.warns(UserWarning, match="moved no input"):
            stability.relative_stability(MLP(), torch.ones(4, 1, 16, 16))

    def test_identical_images_warn(self):
        with pytest.warns(UserWarning, match="identical outputs"):
            stability.relative_stability(MLP(), torch.rand(1, 1, 16, 16).expand(4, -1, -1, -1))

    @pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
    def test_cpab_under_autocast(self, dtype):
        with torch.autocast("cpu", dtype=dtype):
            out = cpab.warp(X, THETA.expand(2, -1), TESS)
        torch.testing.assert_close(out, cpab.warp(X, THETA.expand(2, -1), TESS))
