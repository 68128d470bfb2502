"""Tests of diffgeo.maps: one class per function, with the same method names across classes (kornia's layout).

Tolerances follow from the dtype: `tol(dtype, k)` allows k units of its machine epsilon ε, and each k says where it
comes from (how many roundings, and how much the computation amplifies them). The examples in nbs/05_maps.ipynb are
tests too; these add shapes, dtypes, devices, errors, gradchecks and second routes.
"""

import pytest
import torch
import torch.nn.functional as F

from diffgeo.maps import (FRAMES, INTERPOLATIONS, PADDING_MODES, check_size, condition_number, convert, convert_jacobian,
                          det, fraction_folded, jacobian, pixel_grid, warp)

DTYPES = [torch.float32, torch.float64]
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available")
DEVICES = ["cpu", pytest.param("cuda", marks=CUDA)]
EPS = {dt: torch.finfo(dt).eps for dt in DTYPES}


def tol(dtype, k: float) -> dict:
    "`assert_close` tolerances of k units of the dtype's ε (relative and absolute, for values of order 1)."
    return dict(rtol=k * EPS[dtype], atol=k * EPS[dtype])


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def rand(*shape, dtype=torch.float64, seed=0, low=0.0, high=1.0) -> torch.Tensor:
    return (low + (high - low) * torch.rand(*shape, generator=gen(seed), dtype=torch.float64)).to(dtype)


def smooth_map(p: torch.Tensor) -> torch.Tensor:
    "A smooth, non-linear, invertible-near-the-origin map of the plane, point by point."
    x, y = p[..., 0], p[..., 1]
    return torch.stack((x + 0.3 * torch.sin(y) + 0.1 * x * y, y - 0.2 * torch.cos(x) + 0.05 * y ** 2), -1)


def smooth_jacobian(p: torch.Tensor) -> torch.Tensor:
    "The Jacobian of `smooth_map`, by hand."
    x, y = p[..., 0], p[..., 1]
    J = torch.stack((torch.stack((1 + 0.1 * y, 0.3 * torch.cos(y) + 0.1 * x), -1),
                     torch.stack((0.2 * torch.sin(x), 1 + 0.1 * y), -1)), -2)
    return J


# ------------------------------------------------------------------------------------------------ frames

class TestCheckSize:
    def test_smoke(self):
        assert check_size((3, 4)) == (3, 4) and check_size(5) == (5, 5) and check_size(torch.Size([2, 7])) == (2, 7)

    @pytest.mark.parametrize("bad", [(0, 4), (4,), (4, 4, 4), "44", 2.0, True, (2.0, 3)])
    def test_exception(self, bad):
        with pytest.raises((ValueError, TypeError)):
            check_size(bad)

    def test_low_and_name(self):
        with pytest.raises(ValueError, match="out_size must be >= 2"):
            check_size((1, 4), "out_size", low=2)


class TestConvert:
    def test_smoke(self):
        p = torch.tensor([[0.0, 0.0], [2.0, 1.0]])
        torch.testing.assert_close(convert(p, (2, 3), "pixel", "unit"), torch.tensor([[1 / 6, 1 / 4], [5 / 6, 3 / 4]]))

    @pytest.mark.parametrize("shape", [(2,), (7, 2), (3, 4, 2), (2, 3, 4, 2)])
    def test_cardinality(self, shape):
        p = rand(*shape)
        for dst in FRAMES:
            assert convert(p, (5, 6), "unit", dst).shape == shape

    @pytest.mark.parametrize("dtype", DTYPES)
    def test_round_trip(self, dtype):
        "Two affine maps per axis and back: a few roundings of values up to n, so k = 4n."
        p = rand(100, 2, dtype=dtype, low=-1, high=12)
        for a in FRAMES:
            for b in FRAMES:
                torch.testing.assert_close(convert(convert(p, (9, 11), a, b), (9, 11), b, a), p, **tol(dtype, 4 * 12))

    @pytest.mark.parametrize("src", FRAMES)
    @pytest.mark.parametrize("dst", FRAMES)
    def test_pixel_centres(self, src, dst):
        "The pixel grid of one frame, converted, is the pixel grid of the other (in float64, to a few ε)."
        g = convert(pixel_grid((6, 9), src, torch.float64), (6, 9), src, dst)
        torch.testing.assert_close(g, pixel_grid((6, 9), dst, torch.float64), **tol(torch.float64, 4 * 9))

    @pytest.mark.parametrize("frame", FRAMES)
    def test_grid_sample_reads_the_pixel_it_names(self, frame):
        "A point converted to grid_sample's frame lands where grid_sample reads: an image equal to its x pixel coordinate."
        H, W = 5, 8
        ramp = torch.arange(W, dtype=torch.float64).expand(1, 1, H, W)
        p = rand(4, 6, 2, seed=1, low=0, high=1) * torch.tensor([W - 1, H - 1], dtype=torch.float64)   # inside, in pixels
        q = convert(p, (H, W), "pixel", frame)
        out = warp(ramp, q, frame, padding_mode="border")
        torch.testing.assert_close(out[0, 0], p[..., 0], **tol(torch.float64, 8 * W))

    def test_twins_need_no_size(self):
        p = rand(5, 2)
        torch.testing.assert_close(convert(p, None, "unit", "normalised"), 2 * p - 1, rtol=0, atol=0)
        torch.testing.assert_close(convert(p, None, "normalised_corners", "unit_corners"), (p + 1) / 2, rtol=0, atol=0)

    def test_gradcheck(self):
        p = rand(6, 2).requires_grad_()
        assert torch.autograd.gradcheck(lambda q: convert(q, (5, 7), "normalised", "unit_corners"), (p,))

    @pytest.mark.parametrize("device", DEVICES)
    @pytest.mark.parametrize("dtype", DTYPES)
    def test_dtype_device(self, dtype, device):
        p = rand(4, 2, dtype=dtype).to(device)
        out = convert(p, (3, 5), "pixel", "normalised")
        assert out.dtype == dtype and out.device == p.device

    def test_exception(self):
        with pytest.raises(ValueError, match="unknown src 'grid'.*'pixel', 'unit'"):
            convert(rand(3, 2), (4, 4), "grid", "unit")
        with pytest.raises(ValueError, match=r"\[\.\.\., 2\]"):
            convert(rand(3, 3), (4, 4), "pixel", "unit")
        with pytest.raises(ValueError, match="size must be >= 2"):
            convert(rand(3, 2), (1, 4), "pixel", "unit_corners")
        with pytest.raises(TypeError, match="floating-point"):
            convert(torch.zeros(3, 2, dtype=torch.long), (4, 4), "pixel", "unit")


class TestPixelGrid:
    def test_smoke(self):
        g = pixel_grid((2, 3))
        assert g.shape == (2, 3, 2) and g.dtype == torch.float32
        torch.testing.assert_close(g[1, 2], torch.tensor([2.0, 1.0]))

    @pytest.mark.parametrize("frame", FRAMES)
    def test_formula(self, frame):
        "Each frame's formula from the Conventions table, written out independently."
        H, W = 4, 7
        i, j = torch.meshgrid(torch.arange(H, dtype=torch.float64), torch.arange(W, dtype=torch.float64), indexing="ij")
        f = {"pixel": lambda k, n: k, "unit": lambda k, n: (k + 0.5) / n, "unit_corners": lambda k, n: k / (n - 1),
             "normalised": lambda k, n: (2 * k + 1) / n - 1, "normalised_corners": lambda k, n: 2 * k / (n - 1) - 1}[frame]
        torch.testing.assert_close(pixel_grid((H, W), frame, torch.float64), torch.stack((f(j, W), f(i, H)), -1),
                                   **tol(torch.float64, 2))

    @pytest.mark.parametrize("align_corners", [False, True])
    def test_is_affine_grid(self, align_corners):
        frame = "normalised_corners" if align_corners else "normalised"
        ref = F.affine_grid(torch.eye(2, 3, dtype=torch.float64)[None], (1, 1, 5, 7), align_corners=align_corners)[0]
        torch.testing.assert_close(pixel_grid((5, 7), frame, torch.float64), ref, **tol(torch.float64, 4))

    @pytest.mark.parametrize("frame", FRAMES)
    def test_correctly_rounded(self, frame):
        "Computed in float64 and rounded once: the float32 grid is the float64 grid rounded to float32."
        assert torch.equal(pixel_grid((13, 17), frame, torch.float32), pixel_grid((13, 17), frame, torch.float64).float())

    @pytest.mark.parametrize("device", DEVICES)
    def test_device(self, device):
        assert pixel_grid(4, "unit", device=device).device.type == device

    def test_exception(self):
        with pytest.raises(ValueError, match="unknown frame"):
            pixel_grid((4, 4), "corners")
        with pytest.raises(ValueError, match="size must be >= 2"):
            pixel_grid((4, 1), "normalised_corners")


class TestConvertJacobian:
    @pytest.mark.parametrize("src, dst", [("pixel", "normalised"), ("unit", "pixel"), ("normalised_corners", "unit")])
    def test_is_the_jacobian_of_the_converted_map(self, src, dst):
        "J of q ↦ conv(T(conv⁻¹(q))) at conv(p) is D J(p) D⁻¹."
        size = (6, 11)
        p = rand(3, 8, 2, low=0.1, high=0.9)
        T_dst = lambda q: convert(smooth_map(convert(q, size, dst, src)), size, src, dst)
        J = convert_jacobian(jacobian(smooth_map, p), size, src, dst)
        torch.testing.assert_close(J, jacobian(T_dst, convert(p, size, src, dst)), **tol(torch.float64, 64))

    def test_det_invariant_condition_number_not(self):
        J = rand(10, 2, 2, seed=3) + torch.eye(2, dtype=torch.float64)
        Jn = convert_jacobian(J, (4, 8), "pixel", "normalised")
        torch.testing.assert_close(det(Jn), det(J), **tol(torch.float64, 8))
        assert not torch.allclose(condition_number(Jn), condition_number(J))
        Ju = convert_jacobian(J, (4, 8), "unit", "normalised")          # isotropic: D = 2 I
        torch.testing.assert_close(Ju, J, **tol(torch.float64, 2))

    def test_exception(self):
        with pytest.raises(ValueError, match=r"\[\.\.\., 2, 2\]"):
            convert_jacobian(torch.eye(3), (4, 4), "pixel", "unit")


# ------------------------------------------------------------------------------------------------ Jacobians

class TestJacobian:
    def test_smoke(self):
        J = jacobian(lambda p: 2 * p, rand(3, 2))
        torch.testing.assert_close(J, 2 * torch.eye(2, dtype=torch.float64).expand(3, 2, 2), rtol=0, atol=0)

    @pytest.mark.parametrize("shape", [(5, 1), (5, 2), (2, 5, 3), (2, 3, 4, 2)])
    def test_cardinality(self, shape):
        A = rand(shape[-1], shape[-1], seed=1)
        J = jacobian(lambda p: p @ A.T, rand(*shape))
        assert J.shape == (*shape, shape[-1])
        torch.testing.assert_close(J, A.expand_as(J), rtol=0, atol=0)

    @pytest.mark.parametrize("dtype", DTYPES)
    def test_against_closed_form(self, dtype):
        "A few operations per entry of a map with derivatives of order 1: k = 8."
        p = rand(4, 30, 2, dtype=dtype, low=-1, high=1)
        torch.testing.assert_close(jacobian(smooth_map, p), smooth_jacobian(p), **tol(dtype, 8))

    def test_against_finite_differences(self):
        "Central differences with step h: error h² |T'''|/6 ≈ 1e-12 at h = 1e-6, plus rounding ε/h ≈ 2e-10."
        p, h = rand(20, 2, low=-1, high=1), 1e-6
        e = torch.eye(2, dtype=torch.float64) * h
        fd = torch.stack([(smooth_map(p + e[j]) - smooth_map(p - e[j])) / (2 * h) for j in range(2)], -1)
        torch.testing.assert_close(jacobian(smooth_map, p), fd, rtol=0, atol=1e-9)

    def test_single_point_route(self):
        p = rand(3, 4, 2, low=-1, high=1)
        torch.testing.assert_close(jacobian(smooth_map, p, batched=False), jacobian(smooth_map, p), rtol=0, atol=0)

    def test_gradcheck_points(self):
        "Second derivatives: the Jacobian is differentiable in the points."
        p = rand(5, 2, low=-1, high=1).requires_grad_()
        assert torch.autograd.gradcheck(lambda q: jacobian(smooth_map, q), (p,))

    def test_gradcheck_parameters(self):
        "The Jacobian is differentiable in what the map closes over (torch.func composes with autograd)."
        p = rand(5, 2, low=-1, high=1)
        a = torch.tensor([0.7, -0.3], dtype=torch.float64, requires_grad=True)
        assert torch.autograd.gradcheck(lambda t: jacobian(lambda q: torch.tanh(q * t) + q.flip(-1) * t.sum(), p), (a,))

    def test_under_no_grad(self):
        p = rand(5, 2)
        with torch.no_grad():
            J = jacobian(smooth_map, p)
        torch.testing.assert_close(J, smooth_jacobian(p), **tol(torch.float64, 8))

    def test_batched_maps(self):
        "B maps on their own points [B, N, d]: every map's Jacobian in the same d passes."
        A = rand(3, 2, 2, seed=4)
        p = rand(3, 6, 2, seed=5)
        J = jacobian(lambda q: q @ A.transpose(-1, -2), p)
        torch.testing.assert_close(J, A[:, None].expand(3, 6, 2, 2), rtol=0, atol=0)

    @pytest.mark.parametrize("device", DEVICES)
    @pytest.mark.parametrize("dtype", DTYPES)
    def test_dtype_device(self, dtype, device):
        J = jacobian(smooth_map, rand(4, 2, dtype=dtype).to(device))
        assert J.dtype == dtype and J.device.type == device

    def test_exception(self):
        with pytest.raises(ValueError, match="point by point"):
            jacobian(lambda p: p.sum(0), rand(4, 2))
        with pytest.raises(ValueError, match="point by point.*expand"):
            jacobian(lambda p: p.expand(3, -1, -1), rand(4, 2))
        with pytest.raises(TypeError, match="floating-point"):
            jacobian(lambda p: p, torch.zeros(4, 2, dtype=torch.long))


class TestDet:
    def test_smoke(self):
        assert det(torch.tensor([[2.0, 1.0], [1.0, 3.0]])) == 5.0

    @pytest.mark.parametrize("d", [1, 2, 3])
    @pytest.mark.parametrize("dtype", DTYPES)
    def test_against_linalg(self, d, dtype):
        "Two products and a difference of entries of order 1 against LU: k = 8 (16 for d = 3, pivoting)."
        J = rand(4, 5, d, d, dtype=dtype, seed=d)
        torch.testing.assert_close(det(J), torch.linalg.det(J), **tol(dtype, 8 * d))

    def test_cardinality(self):
        assert det(rand(2, 3, 4, 2, 2)).shape == (2, 3, 4)

    def test_gradcheck(self):
        J = rand(3, 2, 2).requires_grad_()
        assert torch.autograd.gradcheck(det, (J,))

    def test_exception(self):
        with pytest.raises(ValueError, match=r"\[\.\.\., d, d\]"):
            det(torch.zeros(3, 2, 3))
        with pytest.raises(ValueError, match=r"\[\.\.\., d, d\]"):
            det(torch.zeros(3, 2, 2, dtype=torch.long))


class TestConditionNumber:
    def test_smoke(self):
        torch.testing.assert_close(condition_number(torch.diag(torch.tensor([4.0, 0.5]))), torch.tensor(8.0))

    @pytest.mark.parametrize("dtype", DTYPES)
    def test_similarity_is_one(self, dtype):
        "A rotation times a scale: σ's equal to the SVD's accuracy, a few ε."
        a = rand(10, dtype=dtype, seed=2) * 6
        R = torch.stack((torch.stack((a.cos(), -a.sin()), -1), torch.stack((a.sin(), a.cos()), -1)), -2) * 3
        torch.testing.assert_close(condition_number(R), torch.ones(10, dtype=dtype), **tol(dtype, 16))

    def test_invariances(self):
        "κ(cJ) = κ(J), κ(Jᵀ) = κ(J), κ(J⁻¹) = κ(J), κ ≥ 1."
        J = rand(20, 2, 2, seed=6) + 0.5 * torch.eye(2, dtype=torch.float64)
        k = condition_number(J)
        assert (k >= 1).all()
        for other in (-3 * J, J.transpose(-1, -2), torch.linalg.inv(J)):
            torch.testing.assert_close(condition_number(other), k, **tol(torch.float64, 64 * k.max().item()))

    def test_singular_is_inf(self):
        J = torch.tensor([[[1.0, 0.0], [2.0, 0.0]], [[0.0, 0.0], [0.0, 0.0]]])
        assert torch.isinf(condition_number(J)).all()

    def test_against_linalg_cond(self):
        J = rand(6, 3, 3, seed=7) + torch.eye(3, dtype=torch.float64)
        torch.testing.assert_close(condition_number(J), torch.linalg.cond(J), **tol(torch.float64, 64))

    def test_gradcheck(self):
        J = (rand(3, 2, 2, seed=8) + torch.eye(2, dtype=torch.float64)).requires_grad_()
        assert torch.autograd.gradcheck(condition_number, (J,))

    def test_exception(self):
        with pytest.raises(ValueError, match=r"\[\.\.\., d, d\]"):
            condition_number(torch.zeros(2, 3))


class TestFractionFolded:
    def fold(self, side=8):
        "x ↦ x³ − ¾x folds on |x| ≤ ½: half of the pixel centres of an even-sided image in the normalised frame."
        g = pixel_grid((side, side), "normalised", torch.float64)
        return jacobian(lambda q: torch.stack((q[..., 0] ** 3 - 0.75 * q[..., 0], q[..., 1]), -1), g)

    def test_smoke(self):
        assert fraction_folded(self.fold()[None]).tolist() == [0.5]

    def test_batch_dims(self):
        J = torch.stack((self.fold(), torch.eye(2, dtype=torch.float64).expand(8, 8, 2, 2), -self.fold()))  # [3, 8, 8, 2, 2]
        assert fraction_folded(J).tolist() == [0.5, 0.0, 0.5]
        assert fraction_folded(J, batch_dims=2).shape == (3, 8)
        assert fraction_folded(J, batch_dims=0).item() == pytest.approx(1 / 3)
        assert fraction_folded(J, batch_dims=3).shape == (3, 8, 8)   # one point each: 0 or 1

    def test_reflection_folds_everywhere(self):
        assert fraction_folded(torch.diag(torch.tensor([1.0, -1.0])).expand(2, 5, 2, 2)).tolist() == [1.0, 1.0]

    def test_exception(self):
        with pytest.raises(ValueError, match="batch_dims must be <= 1"):
            fraction_folded(torch.eye(2).expand(4, 2, 2), batch_dims=2)


# ------------------------------------------------------------------------------------------------ warps

class TestWarp:
    def test_smoke(self):
        x = rand(2, 3, 5, 6, dtype=torch.float32)
        out = warp(x, pixel_grid((5, 6), "normalised"))
        assert out.shape == x.shape and out.dtype == x.dtype

    @pytest.mark.parametrize("img, pts, out", [((2, 3, 5, 6), (4, 7, 2), (2, 3, 4, 7)), ((2, 3, 5, 6), (2, 4, 7, 2), (2, 3, 4, 7)),
                                               ((2, 3, 5, 6), (1, 4, 7, 2), (2, 3, 4, 7)), ((3, 5, 6), (4, 7, 2), (3, 4, 7)),
                                               ((3, 5, 6), (2, 4, 7, 2), (2, 3, 4, 7)), ((1, 3, 5, 6), (2, 4, 7, 2), (2, 3, 4, 7))])
    def test_cardinality(self, img, pts, out):
        assert warp(rand(*img), rand(*pts, low=-1, high=1)).shape == out

    @pytest.mark.parametrize("dtype", DTYPES)
    @pytest.mark.parametrize("frame", FRAMES)
    def test_identity(self, dtype, frame):
        "Positions are rounded a few times on the way to grid_sample's pixel indices, each time by ~nε pixels: k = 4n; nearest is exact."
        x = rand(2, 3, 9, 13, dtype=dtype)
        torch.testing.assert_close(warp(x, lambda p: p, frame), x, **tol(dtype, 4 * 13))
        assert torch.equal(warp(x, lambda p: p, frame, interp="nearest"), x)

    @pytest.mark.parametrize("frame", FRAMES)
    def test_translation_direction(self, frame):
        "T(p) = p + t moves the picture by −t: a shift of one column to the right in T reads the next column."
        H, W = 5, 8
        x = rand(1, 1, H, W)
        t = convert(torch.tensor([1.0, 0.0], dtype=torch.float64), (H, W), "pixel", frame) - \
            convert(torch.zeros(2, dtype=torch.float64), (H, W), "pixel", frame)
        out = warp(x, lambda p: p + t, frame, padding_mode="zeros")
        torch.testing.assert_close(out[..., :-1], x[..., 1:], **tol(torch.float64, 4 * W))

    def test_callable_is_points_on_the_grid(self):
        x = rand(2, 1, 6, 7)
        for frame in FRAMES:
            g = pixel_grid((6, 7), frame, torch.float64)
            torch.testing.assert_close(warp(x, smooth_map, frame), warp(x, smooth_map(g), frame), rtol=0, atol=0)

    @pytest.mark.parametrize("interp", [i for i in INTERPOLATIONS if i != "gaussian"])
    @pytest.mark.parametrize("padding_mode", PADDING_MODES)
    def test_is_grid_sample(self, interp, padding_mode):
        x, g = rand(2, 3, 6, 7), rand(2, 4, 5, 2, seed=1, low=-1.3, high=1.3)
        ref = F.grid_sample(x, g, mode=interp, padding_mode=padding_mode, align_corners=False)
        torch.testing.assert_close(warp(x, g, "normalised", interp, padding_mode), ref, rtol=0, atol=0)
        ref = F.grid_sample(x, g, mode=interp, padding_mode=padding_mode, align_corners=True)
        torch.testing.assert_close(warp(x, g, "normalised_corners", interp, padding_mode), ref, rtol=0, atol=0)

    def test_points_follow_the_images_dtype(self):
        x = rand(1, 1, 4, 4, dtype=torch.float32)
        assert warp(x, pixel_grid((4, 4), "unit", torch.float64), "unit").dtype == torch.float32

    def test_gradcheck(self):
        x = rand(2, 1, 5, 6).requires_grad_()
        p = rand(2, 3, 4, 2, seed=2, low=0.3, high=3.7).requires_grad_()
        assert torch.autograd.gradcheck(lambda a, q: warp(a, q, "pixel", padding_mode="border"), (x, p))

    @pytest.mark.parametrize("device", DEVICES)
    def test_device(self, device):
        x = rand(2, 3, 6, 7, dtype=torch.float32)
        out = warp(x.to(device), smooth_map, "unit")
        assert out.device.type == device
        torch.testing.assert_close(out.cpu(), warp(x, smooth_map, "unit"), **tol(torch.float32, 4 * 7))

    def test_exception(self):
        x = rand(2, 1, 5, 6)
        with pytest.raises(ValueError, match="unknown interp"):
            warp(x, pixel_grid((5, 6)), "pixel", interp="area")
        with pytest.raises(ValueError, match="unknown padding_mode"):
            warp(x, pixel_grid((5, 6)), "pixel", padding_mode="wrap")
        with pytest.raises(ValueError, match="unknown frame"):
            warp(x, pixel_grid((5, 6)), "pixels")
        with pytest.raises(ValueError, match=r"\[B, H', W', 2\].*B = 2"):
            warp(x, rand(3, 5, 6, 2))
        with pytest.raises(ValueError, match=r"\[B, H', W', 2\]"):
            warp(x, rand(30, 2))
        with pytest.raises(ValueError, match=r"\[B, C, H, W\]"):
            warp(rand(5, 6), pixel_grid((5, 6)))


class TestJacobianReady:
    "probes.jacobian_ready: the same function and Jacobian as the network it copies; names kept; bad inputs refused."

    def net(self):
        from diffgeo.models import build
        torch.manual_seed(0)
        m = build("ResNet18", in_channels=3, n_classes=10, width=0.25)
        for parent in list(m.modules()):
            for name, child in list(parent.named_children()):
                if isinstance(child, torch.nn.ReLU): setattr(parent, name, torch.nn.GELU())
        with torch.no_grad():
            for bn in (b for b in m.modules() if isinstance(b, torch.nn.BatchNorm2d)):
                bn.running_mean.uniform_(-0.5, 0.5); bn.running_var.uniform_(0.5, 2.0)
        return m.double().eval()

    def test_same_jacobian_at_a_named_layer(self):
        from diffgeo.probes import jacobian_matrix, jacobian_ready
        from diffgeo.riemann import feature_map
        m = self.net()
        x = torch.randn(2, 3, 8, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
        ready = jacobian_ready(m)
        assert {n for n, _ in m.named_modules()} <= {n for n, _ in ready.named_modules()}   # every name still there
        for layer in ("layer2", None):
            a = jacobian_matrix(feature_map(ready, layer), x, 2**24)   # in chunks (each pass a full forward: 10x slower)
            b = jacobian_matrix(feature_map(m, layer), x)              # in one pass
            assert (a - b).abs().max() <= 1e-12 * b.abs().max()   # float64: rounding of a few dozen layers

    def test_original_untouched_and_batchnorm_without_statistics_kept(self):
        from diffgeo.probes import ChannelAffine, jacobian_ready
        m = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.BatchNorm2d(2), torch.nn.BatchNorm2d(2, track_running_stats=False)).eval()
        ready = jacobian_ready(m)
        assert isinstance(ready[1], ChannelAffine) and isinstance(ready[2], torch.nn.BatchNorm2d)
        assert isinstance(m[1], torch.nn.BatchNorm2d)   # the original is not modified

    def test_bad_inputs(self):
        from diffgeo.probes import ChannelAffine, KeptDerivative, jacobian_ready
        with pytest.raises(ValueError, match="model.eval"):
            jacobian_ready(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout()))
        with pytest.raises(TypeError, match="nn.Module"):
            jacobian_ready(lambda x: x)
        with pytest.raises(TypeError, match="act must be one of"):
            KeptDerivative(torch.nn.ReLU())
        with pytest.raises(ValueError, match="running statistics"):
            ChannelAffine(torch.nn.BatchNorm2d(2, track_running_stats=False))
