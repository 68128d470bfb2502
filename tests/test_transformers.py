"""Tests of diffgeo.transformers (spatial-transformer layers over transformation families).

Properties shared by every family (θ = identity is the identity, batched = looped, grid = points on the pixel
centres, float64 gradchecks) run over all of `FAMILIES`; each family is also checked against a second,
independent route: `F.affine_grid` and the matrix exponential for the affine families, an 8×8 DLT solve for
homographies, scipy's thin-plate `RBFInterpolator` for TPS, and `diffgeo.cpab` itself for CPAB.
"""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from scipy.interpolate import RBFInterpolator
from torch import nn

from diffgeo import cpab, maps
from diffgeo.transformers import (FAMILIES, LAYERS, LOC_NETS, MATRIX_FAMILIES, PADDING_MODES, TPS, Family,
                                  SpatialTransformer, base_grid, check_theta, condition_number, get_family, jacobian,
                                  st_layer, transform_grid, transform_matrix, transform_points, warp)

NAMES = list(FAMILIES)
DTYPES = [torch.float32, torch.float64]
EPS = {dt: torch.finfo(dt).eps for dt in DTYPES}


def tol(dtype, k: float) -> dict:
    "Tolerances of k units of the dtype's ε (relative and absolute), for quantities of order 1."
    return dict(rtol=k * EPS[dtype], atol=k * EPS[dtype])


# Two computations of the same map by different routes differ by a few roundings of coordinates of order 1 (16 ε), or,
# for CPAB, by its integration error (exact steps, each to the series' remainder and Newton's 16 ε, through a flow with
# a Lipschitz constant of a few units: 128 ε). Measured on the CPU: at most 4 ε and 20 ε.
K = {"cpab": 128}
def k_of(fam) -> float: return K.get(fam.name, 16)


def read(size) -> float:
    "Reading an image with values in [0, 1] at positions rounded ~n ε pixels off (maps: Warping images): 4 n ε."
    return 4 * max(size)
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available")
DEVICES = ["cpu", pytest.param("cuda", marks=CUDA)]
# Scale of a random θ around the identity that keeps every family well inside its invertible range.
SCALE = {"affine": 0.2, "affine_diffeo": 0.3, "homography": 0.1, "tps": 0.08, "cpab": 0.5}


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def random_theta(fam: Family, batch: int, dtype=torch.float64, seed: int = 0) -> torch.Tensor:
    noise = torch.randn(batch, fam.dim, generator=gen(seed), dtype=torch.float64)
    return (fam.identity(torch.float64) + SCALE[fam.name] * noise).to(dtype)


def images(*shape, dtype=torch.float64, seed=0) -> torch.Tensor:
    return torch.rand(*shape, generator=gen(seed), dtype=torch.float64).to(dtype)


@pytest.fixture(scope="module", params=NAMES)
def fam(request) -> Family:
    return get_family(request.param)


# ------------------------------------------------------------------------------------------------ every family

class TestFamilies:
    @pytest.mark.parametrize("dtype", DTYPES)
    def test_identity_points(self, fam, dtype):
        p = base_grid((7, 9), dtype).view(-1, 2)
        out = transform_points(p, fam.identity(dtype), fam)
        torch.testing.assert_close(out[0], p, **tol(dtype, 2))   # exact, but CPAB's (p + 1) / 2 and back: two roundings

    @pytest.mark.parametrize("dtype", DTYPES)
    @pytest.mark.parametrize("size", [(8, 8), (5, 11)])
    def test_identity_warp(self, fam, dtype, size):
        x = images(2, 3, *size, dtype=dtype)
        out = warp(x, fam.identity(dtype), fam)
        torch.testing.assert_close(out, x, **tol(dtype, read(size)))

    def test_identity_is_a_vector(self, fam):
        theta0 = fam.identity()
        assert theta0.shape == (fam.dim,) and theta0.dtype == torch.float32

    def test_grid_is_points_on_pixel_centres(self, fam):
        theta = random_theta(fam, 3)
        g = fam.grid(theta, (6, 5))
        assert g.shape == (3, 6, 5, 2)
        torch.testing.assert_close(g.view(3, -1, 2), fam.points(theta, base_grid((6, 5), torch.float64).view(-1, 2)),
                                   **tol(torch.float64, k_of(fam)))
        torch.testing.assert_close(transform_grid(theta, fam, (6, 5)), g)

    def test_shared_and_batched_points(self, fam):
        theta = random_theta(fam, 3)
        p = 1.6 * torch.rand(10, 2, generator=gen(1), dtype=torch.float64) - 0.8
        shared = transform_points(p, theta, fam)
        batched = transform_points(p.expand(3, 10, 2), theta, fam)
        torch.testing.assert_close(shared, batched, **tol(torch.float64, k_of(fam)))

    def test_one_point_set_for_many_maps(self, fam):
        theta = random_theta(fam, 3)
        p = 1.6 * torch.rand(1, 10, 2, generator=gen(1), dtype=torch.float64) - 0.8
        torch.testing.assert_close(transform_points(p, theta, fam), transform_points(p[0], theta, fam), **tol(torch.float64, k_of(fam)))

    def test_batched_equals_looped(self, fam):
        x, theta = images(4, 2, 9, 7), random_theta(fam, 4)
        out = warp(x, theta, fam)
        looped = torch.cat([warp(x[i:i + 1], theta[i:i + 1], fam) for i in range(4)])
        torch.testing.assert_close(out, looped, **tol(torch.float64, k_of(fam)))

    def test_shared_theta_broadcasts(self, fam):
        x, theta = images(3, 1, 8, 8), random_theta(fam, 1)
        torch.testing.assert_close(warp(x, theta[0], fam), warp(x, theta.expand(3, -1), fam))

    def test_single_image(self, fam):
        x, theta = images(2, 8, 8), random_theta(fam, 1)
        torch.testing.assert_close(warp(x, theta, fam), warp(x[None], theta, fam)[0])

    @pytest.mark.parametrize("dtype", DTYPES)
    def test_dtype_follows_input(self, fam, dtype):
        x = images(2, 1, 8, 8, dtype=dtype)
        out = warp(x, random_theta(fam, 2, torch.float64), fam)   # θ in float64 is moved to x's dtype
        assert out.dtype == dtype

    def test_out_size(self, fam):
        out = warp(images(2, 3, 10, 12), random_theta(fam, 2), fam, size=(5, 7))
        assert out.shape == (2, 3, 5, 7)

    def test_gradcheck_grid(self, fam):
        theta = random_theta(fam, 2).requires_grad_(True)
        assert torch.autograd.gradcheck(lambda t: fam.grid(t, (4, 5)), (theta,), fast_mode=True)

    def test_gradcheck_warp(self, fam):
        x = images(2, 1, 5, 6)
        theta = random_theta(fam, 2, seed=3).requires_grad_(True)
        assert torch.autograd.gradcheck(lambda t: warp(x, t, fam, padding_mode="border"), (theta,), atol=1e-6, fast_mode=True)

    @pytest.mark.parametrize("device", DEVICES)
    def test_device(self, fam, device):
        x = images(2, 1, 8, 8, dtype=torch.float32).to(device)
        out = warp(x, random_theta(fam, 2, torch.float32), fam)
        assert out.device == x.device
        # another device rounds the map differently (k ε of the frame, k n/2 ε pixels), then reads: (k + 4) n ε
        torch.testing.assert_close(out.cpu(), warp(x.cpu(), random_theta(fam, 2, torch.float32), fam),
                                   **tol(torch.float32, (k_of(fam) + 4) * 8))

    @pytest.mark.parametrize("interp", ["nearest", "bicubic"])
    def test_interp(self, fam, interp):
        "`interp` reaches the sampler: the identity reads the pixels back, and a shifted grid reads them as maps.warp does."
        x, theta = images(2, 1, 8, 8), random_theta(fam, 2)
        torch.testing.assert_close(warp(x, fam.identity(torch.float64), fam, interp=interp), x, **tol(torch.float64, read((8, 8))))
        torch.testing.assert_close(warp(x, theta, fam, interp=interp), maps.warp(x, fam.grid(theta, (8, 8)), "normalised", interp))

    @pytest.mark.parametrize("padding_mode", PADDING_MODES)
    def test_padding_modes(self, fam, padding_mode):
        x = images(1, 1, 8, 8)
        torch.testing.assert_close(warp(x, fam.identity(torch.float64), fam, padding_mode=padding_mode), x,
                                   **tol(torch.float64, read((8, 8))))


# ------------------------------------------------------------------------------------------------ affine families

class TestAffine:
    def test_is_affine_grid(self):
        theta = random_theta(get_family("affine"), 3)
        ref = F.affine_grid(theta.view(3, 2, 3), (3, 1, 6, 7), align_corners=False)
        torch.testing.assert_close(transform_grid(theta, "affine", (6, 7)), ref)

    def test_translation_direction(self):
        "T(p) = p + (2/W, 0) reads one pixel to the right: the picture moves one pixel left."
        x = images(1, 1, 6, 8)
        theta = torch.tensor([1.0, 0.0, 2 / 8, 0.0, 1.0, 0.0], dtype=torch.float64)
        out = warp(x, theta, "affine")
        torch.testing.assert_close(out[..., :-1], x[..., 1:], **tol(torch.float64, read((6, 8))))
        assert (out[..., -1] == 0).all()

    def test_matrix_and_condition_number(self):
        theta = torch.tensor([[2.0, 0.0, 0.1, 0.0, 0.5, 0.0]], dtype=torch.float64)
        M = transform_matrix(theta, "affine")
        torch.testing.assert_close(M[0], torch.tensor([[2.0, 0.0, 0.1], [0.0, 0.5, 0.0], [0.0, 0.0, 1.0]], dtype=torch.float64))
        torch.testing.assert_close(condition_number(theta, "affine"), torch.tensor([4.0], dtype=torch.float64))

    def test_singular_map_has_infinite_condition(self):
        theta = torch.tensor([1.0, 2.0, 0.0, 0.5, 1.0, 0.0], dtype=torch.float64)  # rank 1
        assert condition_number(theta, "affine")[0] > 1e12

    @given(st.lists(st.floats(-1.0, 1.0), min_size=6, max_size=6))
    def test_diffeo_is_expm(self, values):
        theta = torch.tensor([values], dtype=torch.float64)
        A = torch.cat((theta.view(1, 2, 3), torch.zeros(1, 1, 3, dtype=torch.float64)), dim=1)
        ref = torch.from_numpy(_expm(A[0].numpy()))
        torch.testing.assert_close(transform_matrix(theta, "affine_diffeo")[0], ref, rtol=1e-10, atol=1e-10)
        p = base_grid((5, 4), torch.float64).view(-1, 2)
        torch.testing.assert_close(transform_points(p, theta, "affine_diffeo"),
                                   transform_points(p, ref[:2].reshape(1, 6), "affine"), rtol=1e-10, atol=1e-10)

    @given(st.lists(st.floats(-1.5, 1.5), min_size=6, max_size=6))
    def test_diffeo_inverse_is_minus_theta(self, values):
        theta = torch.tensor([values], dtype=torch.float64)
        p = base_grid((5, 6), torch.float64).view(-1, 2)
        there = transform_points(p, theta, "affine_diffeo")
        back = transform_points(there[0], -theta, "affine_diffeo")
        torch.testing.assert_close(back[0], p, rtol=1e-9, atol=1e-9)
        M = transform_matrix(theta, "affine_diffeo")
        assert torch.linalg.det(M)[0] > 0

    @pytest.mark.parametrize("name", MATRIX_FAMILIES)
    def test_jacobian_at_centre(self, name):
        theta = random_theta(get_family(name), 3)
        M = transform_matrix(theta, name)
        J = jacobian(torch.zeros(1, 2, dtype=torch.float64), theta, name)[:, 0]
        # at p = 0 the projective denominator is 1: J = A − b c^T with c the last row's first two entries
        ref = M[:, :2, :2] - M[:, :2, 2, None] * M[:, None, 2, :2]
        torch.testing.assert_close(J, ref, **tol(torch.float64, 16))

    def test_jacobian_of_tps_by_finite_differences(self):
        fam = get_family("tps")
        theta, p = random_theta(fam, 1), torch.tensor([[0.3, -0.2], [-0.55, 0.7]], dtype=torch.float64)
        J = jacobian(p, theta, fam)[0]
        h = 1e-6
        for j in range(2):
            e = torch.zeros(2, dtype=torch.float64); e[j] = h
            fd = (transform_points(p + e, theta, fam) - transform_points(p - e, theta, fam))[0] / (2 * h)
            torch.testing.assert_close(J[:, :, j], fd, rtol=1e-6, atol=1e-6)


def _expm(A: np.ndarray, terms: int = 60) -> np.ndarray:
    "Matrix exponential by scaling and squaring of a plain Taylor series (independent of torch)."
    s = max(0, int(np.ceil(np.log2(max(np.abs(A).sum(1).max(), 1e-12)))) + 1)
    B, out, term = A / 2 ** s, np.eye(3), np.eye(3)
    for k in range(1, terms):
        term = term @ B / k
        out = out + term
    for _ in range(s):
        out = out @ out
    return out


# ------------------------------------------------------------------------------------------------ homography

def dlt(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    "The homography (H₃₃ = 1) sending 4 points src to dst, from the 8×8 direct linear transform."
    rows, rhs = [], []
    for (x, y), (u, v) in zip(src, dst):
        rows += [[x, y, 1, 0, 0, 0, -u * x, -u * y], [0, 0, 0, x, y, 1, -v * x, -v * y]]
        rhs += [u, v]
    return np.append(np.linalg.solve(np.array(rows), np.array(rhs)), 1.0).reshape(3, 3)


class TestHomography:
    @given(st.integers(0, 10_000))
    def test_against_dlt(self, seed):
        rng = np.random.default_rng(seed)
        src = rng.uniform(-0.9, 0.9, (4, 2))
        dst = src + rng.uniform(-0.15, 0.15, (4, 2))
        H = dlt(src, dst)
        theta = torch.from_numpy((H - np.eye(3)).ravel()[:8])
        torch.testing.assert_close(transform_points(torch.from_numpy(src), theta, "homography")[0].numpy(), dst,
                                   rtol=1e-8, atol=1e-8)
        torch.testing.assert_close(transform_matrix(theta, "homography")[0].numpy(), H, rtol=1e-12, atol=1e-12)

    def test_no_perspective_is_affine(self):
        theta = random_theta(get_family("homography"), 2)
        theta[:, 6:] = 0
        aff = theta[:, :6] + get_family("affine").identity(torch.float64)
        p = base_grid((4, 4), torch.float64).view(-1, 2)
        torch.testing.assert_close(transform_points(p, theta, "homography"), transform_points(p, aff, "affine"))

    def test_horizon_stays_finite(self):
        theta = torch.zeros(8, dtype=torch.float64)
        theta[6] = -1.0  # w = 1 − x vanishes on the right edge x = 1
        q = transform_points(torch.tensor([[1.0, 0.0], [0.0, 0.0]], dtype=torch.float64), theta, "homography")
        assert torch.isfinite(q).all()


# ------------------------------------------------------------------------------------------------ TPS

class TestTPS:
    @given(st.integers(0, 10_000), st.floats(0.01, 0.3))
    def test_against_scipy(self, seed, scale):
        "scipy's kernel is r² log r, ours r² log r²: the weights differ by a factor 2, the interpolant is the same."
        fam = get_family("tps")
        g = gen(seed)
        theta = scale * torch.randn(1, 32, generator=g, dtype=torch.float64)
        p = 2.4 * torch.rand(50, 2, generator=g, dtype=torch.float64) - 1.2   # inside and a little outside the square
        ref = RBFInterpolator(fam.ctrl.numpy(), theta.view(16, 2).numpy(), kernel="thin_plate_spline", degree=1)(p.numpy())
        torch.testing.assert_close((transform_points(p, theta, fam) - p)[0].numpy(), ref, rtol=1e-9, atol=1e-9)

    def test_control_points(self):
        fam = get_family("tps")
        assert fam.ctrl.shape == (16, 2)
        torch.testing.assert_close(fam.ctrl[:4, 0], torch.tensor([-1, -1 / 3, 1 / 3, 1], dtype=torch.float64))
        torch.testing.assert_close(fam.ctrl[::4, 1], torch.tensor([-1, -1 / 3, 1 / 3, 1], dtype=torch.float64))
        theta = random_theta(fam, 2)
        torch.testing.assert_close(transform_points(fam.ctrl, theta, fam), fam.ctrl + theta.view(2, 16, 2))

    def test_affine_displacements_give_the_affine_map(self):
        fam = get_family("tps")
        M = torch.tensor([[1.1, -0.2], [0.15, 0.9]], dtype=torch.float64)
        t = torch.tensor([0.1, -0.05], dtype=torch.float64)
        theta = (fam.ctrl @ (M - torch.eye(2, dtype=torch.float64)).T + t).reshape(1, 32)
        p = base_grid((6, 6), torch.float64).view(-1, 2)
        torch.testing.assert_close(transform_points(p, theta, fam)[0], p @ M.T + t)

    def test_other_grid_size(self):
        fam = get_family("tps", grid_size=(3, 5))
        assert fam.dim == 30 and fam.ctrl.shape == (15, 2)
        theta = random_theta(get_family("tps"), 1)[:, :30]
        torch.testing.assert_close(transform_points(fam.ctrl, theta, fam)[0], fam.ctrl + theta.view(15, 2))

    def test_bad_grid_size(self):
        with pytest.raises(ValueError, match=r"at least \(2, 2\)"):
            TPS(grid_size=(1, 4))

    def test_system_is_a_buffer(self):
        layer = SpatialTransformer("tps", (1, 12, 12), loc_net="fcn")
        names = dict(layer.named_buffers())
        assert "family.system_inv" in names and "family.system_inv" not in layer.state_dict()
        assert layer.double().family.system_inv.dtype == torch.float64


# ------------------------------------------------------------------------------------------------ CPAB

class TestCPAB:
    def test_dim_is_the_tessellation(self):
        fam = get_family("cpab", tess_size=(2, 2), zero_boundary=False)
        tess = cpab.Tessellation((2, 2), zero_boundary=False, volume_preservation=False)
        assert fam.dim == tess.dim
        assert get_family("cpab").dim == cpab.Tessellation((3, 3), zero_boundary=True, volume_preservation=False).dim

    def test_bad_tess_size(self):
        with pytest.raises(ValueError, match="tess_size"):
            get_family("cpab", tess_size=(3, 3, 3))
        assert get_family("cpab", tess_size=2).tess_size == (2, 2)

    def test_points_are_cpab_in_other_coordinates(self):
        fam = get_family("cpab")
        theta = random_theta(fam, 2)
        u = torch.rand(20, 2, generator=gen(2), dtype=torch.float64)
        torch.testing.assert_close(transform_points(2 * u - 1, theta, fam), 2 * cpab.transform(u, theta, fam.tess) - 1)

    def test_warp_is_cpab_warp(self):
        fam = get_family("cpab")
        x, theta = images(2, 1, 9, 8), random_theta(fam, 2)
        torch.testing.assert_close(warp(x, theta, fam), cpab.warp(x, theta, fam.tess), rtol=0, atol=0)   # the same grid

    def test_zero_boundary_keeps_the_square(self):
        fam = get_family("cpab")
        theta = random_theta(fam, 2)
        q = transform_points(base_grid((16, 16), torch.float64).view(-1, 2), theta, fam)
        assert (q.abs() <= 1 + 1e-9).all()


# ------------------------------------------------------------------------------------------------ the layer

class TestSpatialTransformer:
    @pytest.mark.parametrize("name", LAYERS)
    @pytest.mark.parametrize("loc_net", LOC_NETS)
    def test_starts_at_identity(self, name, loc_net):
        torch.manual_seed(0)
        x = images(3, 2, 16, 12, dtype=torch.float32)
        layer = st_layer(name, (2, 16, 12), loc_net=loc_net)
        torch.testing.assert_close(layer(x), x, **tol(torch.float32, 2 * read((16, 12))))   # two layers for affine+cpab
        for st_ in (layer if isinstance(layer, nn.Sequential) else [layer]):
            assert (st_.head.weight == 0).all() and (st_.head.bias == 0).all()
            torch.testing.assert_close(st_.last_theta, st_.family.identity().expand(3, -1))

    def test_affine_cpab_is_two_layers(self):
        layer = st_layer("affine+cpab", (1, 16, 16), loc_net="fcn", out_size=(8, 8), tess_size=(2, 2))
        assert isinstance(layer, nn.Sequential) and len(layer) == 2
        assert layer[0].family.name == "affine" and layer[1].family.name == "cpab"
        assert layer[0].body is not layer[1].body and layer[1].family.tess_size == (2, 2)
        assert layer(images(2, 1, 16, 16, dtype=torch.float32)).shape == (2, 1, 8, 8)
        assert SpatialTransformer.affine_cpab((1, 16, 16), "fcn")[1].out_size is None

    def test_keyword_construction(self):
        layer = SpatialTransformer(family="tps", in_shape=(1, 12, 12), loc_net="fcn", out_size=8, grid_size=(3, 3))
        assert layer.family.dim == 18 and layer.out_size == (8, 8)

    def test_custom_body(self):
        body = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2))  # [B, 4, 2, 2]
        layer = SpatialTransformer("homography", (3, 10, 10), loc_net=body)
        assert layer.head.in_features == 16 and layer.head.out_features == 8
        x = images(2, 3, 10, 10, dtype=torch.float32)
        torch.testing.assert_close(layer(x), x, **tol(torch.float32, read((10, 10))))

    def test_batchnorm_body_keeps_its_mode(self):
        body = nn.Sequential(nn.Flatten(), nn.Linear(64, 8), nn.BatchNorm1d(8))
        layer = SpatialTransformer("affine", (1, 8, 8), loc_net=body)
        assert layer.training and body.training

    def test_transform_with_given_theta(self):
        layer = SpatialTransformer("affine_diffeo", (1, 12, 12), loc_net="fcn", out_size=(6, 6))
        x, theta = images(2, 1, 12, 12, dtype=torch.float32), random_theta(get_family("affine_diffeo"), 2, torch.float32)
        torch.testing.assert_close(layer.transform(x, theta), warp(x, theta, "affine_diffeo", size=(6, 6)))

    def test_learns(self):
        "After a few steps θ has left the identity and the body receives gradients."
        torch.manual_seed(0)
        net = nn.Sequential(st_layer("tps", (1, 12, 12), loc_net="fcn"), nn.Flatten(), nn.Linear(144, 3))
        x, y = images(6, 1, 12, 12, dtype=torch.float32), torch.tensor([0, 1, 2, 0, 1, 2])
        for _ in range(3):  # plain gradient descent (torch.optim takes seconds to import)
            net.zero_grad(); F.cross_entropy(net(x), y).backward()
            with torch.no_grad():
                for p in net.parameters(): p -= 0.1 * p.grad
        assert (net[0].last_theta - net[0].theta0).abs().max() > 1e-4
        assert net[0].body[1].weight.grad.abs().max() > 0

    def test_gradcheck_through_the_layer(self):
        layer = SpatialTransformer("affine_diffeo", (1, 6, 6), loc_net="fcn").double()
        nn.init.normal_(layer.head.weight, std=0.1)
        x = images(2, 1, 6, 6).requires_grad_(True)
        assert torch.autograd.gradcheck(lambda t: layer(t), (x,), atol=1e-6, fast_mode=True)

    def test_float64_and_single_image(self):
        layer = SpatialTransformer("tps", (1, 12, 12), loc_net="fcn").double()
        x = images(1, 12, 12)
        out = layer(x)
        assert out.shape == (1, 12, 12) and out.dtype == torch.float64

    def test_theta0_not_in_state_dict(self):
        layer = SpatialTransformer("affine", (1, 12, 12), loc_net="fcn")
        assert "theta0" not in layer.state_dict()
        clone = SpatialTransformer("affine", (1, 12, 12), loc_net="fcn")
        clone.load_state_dict(layer.state_dict())

    @pytest.mark.parametrize("device", DEVICES)
    def test_device(self, device):
        layer = st_layer("affine_diffeo", (1, 12, 12)).to(device)
        x = images(2, 1, 12, 12, dtype=torch.float32).to(device)
        assert layer(x).device == x.device


# ------------------------------------------------------------------------------------------------ bad inputs

class TestValidation:
    def test_unknown_family(self):
        with pytest.raises(ValueError, match="valid families are 'affine', 'affine_diffeo', 'homography', 'tps', 'cpab'"):
            get_family("similarity")

    def test_affine_cpab_is_not_a_family(self):
        with pytest.raises(ValueError, match=r"st_layer\('affine\+cpab'"):
            get_family("affine+cpab")

    def test_unknown_layer(self):
        with pytest.raises(ValueError, match="'affine\\+cpab'"):
            st_layer("rts", (1, 28, 28))

    def test_unknown_option(self):
        with pytest.raises(ValueError, match="its options are tess_size, zero_boundary, volume_preservation"):
            get_family("cpab", grid_size=(4, 4))
        with pytest.raises(ValueError, match="takes no options"):
            SpatialTransformer("affine", (1, 28, 28), tess_size=(3, 3))

    def test_options_with_built_family(self):
        with pytest.raises(ValueError, match="already-built family"):
            get_family(get_family("tps"), grid_size=(3, 3))

    @pytest.mark.parametrize("name", NAMES)
    def test_wrong_theta_length(self, name):
        fam = get_family(name)
        with pytest.raises(ValueError, match=rf"\[B, {fam.dim}\]"):
            warp(images(2, 1, 8, 8), torch.zeros(2, fam.dim + 1, dtype=torch.float64), fam)

    def test_wrong_theta_rank_and_type(self):
        with pytest.raises(ValueError, match=r"\[B, 6\]"):
            check_theta(torch.zeros(2, 2, 3), get_family("affine"))
        with pytest.raises(TypeError, match="theta.float()"):
            check_theta(torch.zeros(6, dtype=torch.long), get_family("affine"))
        with pytest.raises(TypeError, match="torch.as_tensor"):
            check_theta([0.0] * 6, get_family("affine"))

    def test_theta_batch_mismatch(self):
        with pytest.raises(ValueError, match="theta has 3 rows but the batch has 2 images"):
            warp(images(2, 1, 8, 8), torch.zeros(3, 6, dtype=torch.float64), "affine_diffeo")

    @pytest.mark.parametrize("bad", [(0, 4), (4, -1), (4.5, 4), (4, 4, 4), "8x8", True])
    def test_bad_out_size(self, bad):
        with pytest.raises((ValueError, TypeError), match="size"):
            warp(images(1, 1, 8, 8), torch.zeros(6, dtype=torch.float64), "affine_diffeo", size=bad)
        with pytest.raises((ValueError, TypeError), match="out_size"):
            SpatialTransformer("affine", (1, 12, 12), loc_net="fcn", out_size=bad)

    def test_bad_images(self):
        with pytest.raises(ValueError, match=r"\[B, C, H, W\]"):
            warp(torch.zeros(8, 8), torch.zeros(6), "affine_diffeo")
        with pytest.raises(TypeError, match="x.float()"):
            warp(torch.zeros(1, 1, 8, 8, dtype=torch.uint8), torch.zeros(6), "affine_diffeo")

    def test_layer_wrong_image_shape(self):
        layer = SpatialTransformer("affine", (1, 28, 28))
        with pytest.raises(ValueError, match=r"in_shape=x.shape\[1:\]"):
            layer(torch.zeros(2, 3, 28, 28))

    @pytest.mark.parametrize("bad", [(28, 28), (1, 0, 28), "1x28x28"])
    def test_bad_in_shape(self, bad):
        with pytest.raises((ValueError, TypeError), match="in_shape"):
            SpatialTransformer("affine", bad)

    def test_cnn_too_small(self):
        with pytest.raises(ValueError, match="loc_net='fcn'"):
            SpatialTransformer("affine", (1, 9, 9))

    def test_bad_loc_net(self):
        with pytest.raises(ValueError, match="'cnn', 'fcn'"):
            SpatialTransformer("affine", (1, 28, 28), loc_net="resnet")
        with pytest.raises(TypeError, match="nn.Module"):
            SpatialTransformer("affine", (1, 28, 28), loc_net=3)
        with pytest.raises(ValueError, match="must map"):
            SpatialTransformer("affine", (1, 28, 28), loc_net=nn.Linear(5, 5))
        with pytest.raises(ValueError, match="two localisation nets"):
            st_layer("affine+cpab", (1, 28, 28), loc_net=nn.Flatten())

    def test_bad_padding_mode(self):
        with pytest.raises(ValueError, match="'zeros', 'border', 'reflection'"):
            warp(images(1, 1, 8, 8), torch.zeros(6), "affine_diffeo", padding_mode="wrap")

    def test_bad_interp(self):
        with pytest.raises(ValueError, match="unknown interp 'cubic'.*'bilinear', 'nearest', 'bicubic', 'gaussian'"):
            warp(images(1, 1, 8, 8), torch.zeros(6), "affine_diffeo", interp="cubic")

    def test_gaussian_interpolation(self):
        "interp='gaussian' is maps' Gaussian sampler on the family's grid; it clamps positions, so only border padding."
        x, theta = images(2, 3, 12, 10), 0.1 * torch.randn(2, 6, generator=torch.Generator().manual_seed(0))
        out = warp(x, theta, "affine", interp="gaussian")
        torch.testing.assert_close(out, maps.warp(x, transform_grid(theta.to(x.dtype), "affine", (12, 10)), "normalised", "gaussian"), rtol=0, atol=0)
        with pytest.raises(ValueError, match="padding_mode='border'"):
            warp(x, theta, "affine", interp="gaussian", padding_mode="zeros")

    def test_bad_points(self):
        with pytest.raises(ValueError, match=r"\[N, 2\]"):
            transform_points(torch.zeros(5, 3), torch.zeros(6), "affine_diffeo")
        with pytest.raises(ValueError, match="theta has 2 rows but the batch has 3"):
            transform_points(torch.zeros(3, 5, 2), torch.zeros(2, 6), "affine_diffeo")

    def test_no_matrix(self):
        with pytest.raises(ValueError, match="'affine', 'affine_diffeo', 'homography'"):
            transform_matrix(torch.zeros(32), "tps")
