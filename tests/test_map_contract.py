"""The contract every family of maps of the plane in diffgeo keeps (the Conventions of nbs/05_maps.ipynb).

Each family is described once, by a `MapFamily` adapter in `FAMILIES`: how to draw parameters near the identity, the
parameters of the identity, the map on points in its native frame, its inverse if it has one, whether it is a
diffeomorphism for every parameter, and its own image warp. Every test below runs over every adapter:

- the identity at the identity parameters (zero for all but the affine family);
- T⁻¹ ∘ T = id, and ∇T⁻¹(T(p)) ∇T(p) = I, where an inverse exists;
- det ∇T > 0 for the diffeomorphic families;
- batched = looped (over parameters, and over per-map points);
- `maps.jacobian` has the maps layout and agrees with central differences;
- the family's warp is `maps.warp` by its map in its frame, and the identity map warps an image to itself (which
  fails if an adapter names the wrong frame);
- float64 gradchecks with respect to the parameters and the points.

To add a family (the ResNet flows of 12_flows, say), write one adapter and `register` it: the whole suite runs on it.

Tolerances are in units of the dtype's ε: `tol(dtype, k)` (relative and absolute). Each adapter carries `k`, a bound
on the error of one evaluation of its map in ε: a few roundings for a closed-form map (16), a sum of many terms for TPS
and the max-entropy field (32), and for CPAB the integration error, a few steps each accurate to the series' remainder
and Newton's 16ε, carried through a flow whose Lipschitz constant is a few units (128). Tests that combine two
evaluations, or read an image at the positions, scale `k` accordingly (said in each test). On the CPU these bounds are
met with a margin of 5-50: the largest errors measured were 9ε (CPAB's round trip) and 180ε (CPAB's inverse Jacobian).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pytest
import torch

from diffgeo import cpab, diffeo, flows, maps, transformers

DTYPES = [torch.float32, torch.float64]
EPS = {dt: torch.finfo(dt).eps for dt in DTYPES}


def tol(dtype, k: float) -> dict:
    return dict(rtol=k * EPS[dtype], atol=k * EPS[dtype])


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@dataclass(frozen=True)
class MapFamily:
    "How the contract suite drives one family of maps of the plane."
    name: str
    frame: str                                  # the frame of `maps` its points are in
    size: tuple[int, int]                       # (H, W) of the image that frame refers to
    sample: Callable                            # (batch, dtype, generator) -> parameters [B, ...] near the identity
    identity: Callable                          # (batch, dtype) -> parameters of the identity map [B, ...]
    forward: Callable                           # (params [B, ...], points [N, 2] or [B, N, 2]) -> T(points) [B, N, 2]
    low: float                                  # points are drawn uniformly in [low, high]² (in `frame`) ...
    high: float                                 # ... inside the image, where every family is defined
    inverse: Callable | None = None             # (params, points) -> T⁻¹(points), where the family has one
    diffeomorphic: bool = False                 # det ∇T > 0 for every parameter the adapter draws
    warp: Callable | None = None                # (images, params) -> the family's own warp
    sampled: Callable | None = None             # (params, points) -> where its warp reads, if not T(points)
    padding_mode: str = "zeros"                 # the padding its warp uses
    k: float = 16                               # tolerance, in ε, for two computations of T(p) of order 1


FAMILIES: dict[str, MapFamily] = {}


def register(family: MapFamily) -> MapFamily:
    FAMILIES[family.name] = family
    return family


# ------------------------------------------------------------------------------------------------ adapters

# max-entropy diffeomorphisms at small T: max Ξ ≈ (c/2)√(π³T ln c) ≈ 0.1 here, so det(I − ∇τ) > 0 (Eq. 12-13)
_DIFFEO = dict(T=1e-4, c=3, size=(12, 10))
register(MapFamily(
    name="diffeo", frame="pixel", size=_DIFFEO["size"],
    sample=lambda B, dtype, g: diffeo.sample_coefficients(B, _DIFFEO["T"], _DIFFEO["c"], generator=g, dtype=dtype),
    identity=lambda B, dtype: torch.zeros(B, 2, 2, 2, dtype=dtype),
    forward=lambda C, p: diffeo.transform(p, C, _DIFFEO["size"]),
    low=0.0, high=min(_DIFFEO["size"]) - 1.0, diffeomorphic=True,
    warp=lambda x, C: diffeo.warp(x, diffeo.field(C, x.shape[-2:])),
    sampled=lambda C, p: torch.minimum(diffeo.transform(p, C, _DIFFEO["size"]).clamp_min(0),
                                       torch.tensor(_DIFFEO["size"][::-1], dtype=C.dtype) - 1),
    padding_mode="border", k=32))   # a sum over the m² modes

_TESS = cpab.Tessellation((3, 3))
register(MapFamily(
    name="cpab", frame="unit", size=(9, 11),
    sample=lambda B, dtype, g: 0.5 * cpab.sample(_TESS, B, generator=g, dtype=dtype),
    identity=lambda B, dtype: torch.zeros(B, _TESS.dim, dtype=dtype),
    forward=lambda th, p: cpab.transform(p, th, _TESS),
    low=0.0, high=1.0, inverse=lambda th, q: cpab.inverse(q, th, _TESS), diffeomorphic=True,
    warp=lambda x, th: cpab.warp(x, th, _TESS),
    k=128))   # exact integration to the series' and Newton's tolerances, over ≥ 4 steps and every edge crossing


# ResNet mapping blocks (12_flows): a stationary field of 4 basis functions, 8 Euler steps over [0, 1]; θ packs (w, b, ν).
# With θ ~ 0.2 N(0, 1) (and 3x that) each step's h‖∇V‖ stays well below 1, so no step folds; Euler's backward
# integration is not its exact inverse, so the family declares none. k: 8 steps, each a few roundings.
_FLOW = flows.Flow(flows.VelocityField(2, 4, 8, stationary=True), horizon=1.0)
_FLOW_SHAPES = {"field.weight": (1, 4, 2), "field.bias": (1, 4), "field.nu": (1, 2, 4)}


def _flow_forward(th, p):
    out = []
    for b, t in enumerate(th):
        sizes = [torch.Size(s).numel() for s in _FLOW_SHAPES.values()]
        params = {k: v.view(s) for (k, s), v in zip(_FLOW_SHAPES.items(), torch.split(t, sizes))}
        out.append(torch.func.functional_call(_FLOW, params, (p if p.ndim == 2 else p[b],)))
    return torch.stack(out)


register(MapFamily(
    name="flow", frame="normalised", size=(8, 10),
    sample=lambda B, dtype, g: 0.2 * torch.randn(B, 20, generator=g, dtype=torch.float64).to(dtype),
    identity=lambda B, dtype: torch.zeros(B, 20, dtype=dtype),
    forward=_flow_forward, low=-1.0, high=1.0, diffeomorphic=True, k=64))


def _matrix_inverse(fam):
    "θ of the inverse of an affine or projective map, from the inverse of its 3×3 matrix."
    def inverse(th, q):
        Hi = torch.linalg.inv(transformers.transform_matrix(th, fam))
        if fam.name == "affine": th_i = Hi[:, :2].reshape(len(th), 6)
        else: th_i = ((Hi / Hi[:, 2:, 2:]) - torch.eye(3, dtype=th.dtype)).reshape(len(th), 9)[:, :8]
        return transformers.transform_points(q, th_i, fam)
    return inverse


# the spatial-transformer families, each with its inverse where it has one; a family registered in transformers
# later joins the suite with neither (add it here to test its inverse)
_ST_SCALE = {"affine": 0.2, "affine_diffeo": 0.3, "homography": 0.1, "tps": 0.08, "cpab": 0.5}
_ST_INVERSE = {"affine": _matrix_inverse, "homography": _matrix_inverse,
               "affine_diffeo": lambda fam: (lambda th, q: transformers.transform_points(q, -th, fam)),
               "cpab": lambda fam: (lambda th, q: transformers.transform_points(q, -th, fam))}
_ST_DIFFEOMORPHIC = {"affine_diffeo", "cpab"}   # invertible for every θ; affine and homography only away from singular
_ST_K = {"cpab": 128, "tps": 32}               # TPS: a 19-term sum of r² log r² terms; CPAB: as above

for _name in transformers.FAMILIES:
    _fam = transformers.get_family(_name)
    register(MapFamily(
        name=f"st_{_name}", frame="normalised", size=(8, 10),
        sample=lambda B, dtype, g, f=_fam: (f.identity(torch.float64) + _ST_SCALE.get(f.name, 0.05)
                                            * torch.randn(B, f.dim, generator=g, dtype=torch.float64)).to(dtype),
        identity=lambda B, dtype, f=_fam: f.identity(dtype).expand(B, -1),
        forward=lambda th, p, f=_fam: transformers.transform_points(p, th, f),
        low=-1.0, high=1.0,
        inverse=_ST_INVERSE[_name](_fam) if _name in _ST_INVERSE else None,
        diffeomorphic=_name in _ST_DIFFEOMORPHIC,
        warp=lambda x, th, f=_fam: transformers.warp(x, th, f),
        k=_ST_K.get(_name, 16)))

NAMES = list(FAMILIES)


@pytest.fixture(params=NAMES)
def fam(request) -> MapFamily:
    return FAMILIES[request.param]


def points(fam: MapFamily, *shape, dtype=torch.float64, seed=0) -> torch.Tensor:
    u = torch.rand(*shape, 2, generator=gen(seed), dtype=torch.float64)
    return (fam.low + (fam.high - fam.low) * u).to(dtype)


def images(fam: MapFamily, batch: int, dtype=torch.float64, seed=0) -> torch.Tensor:
    return torch.rand(batch, 2, *fam.size, generator=gen(seed), dtype=torch.float64).to(dtype)


def scale(fam: MapFamily) -> float:
    "Size of the coordinates in the family's frame (tolerances are relative to it)."
    return max(abs(fam.low), abs(fam.high), 1.0)


# ------------------------------------------------------------------------------------------------ the contract

class TestContract:
    def test_registry(self):
        "The families the issue names are all here."
        assert {"diffeo", "cpab", "flow", "st_affine", "st_affine_diffeo", "st_homography", "st_tps"} <= set(FAMILIES)
        for f in FAMILIES.values():
            assert f.frame in maps.FRAMES

    @pytest.mark.parametrize("dtype", DTYPES)
    def test_identity_at_identity_parameters(self, fam, dtype):
        "Every family is the identity at its identity parameters, to one rounding of the coordinates."
        p = points(fam, 50, dtype=dtype)
        out = fam.forward(fam.identity(3, dtype), p)
        assert out.shape == (3, 50, 2) and out.dtype == dtype
        torch.testing.assert_close(out, p.expand(3, -1, -1), **tol(dtype, 2))

    @pytest.mark.parametrize("dtype", DTYPES)
    def test_inverse_round_trip(self, fam, dtype):
        if fam.inverse is None: pytest.skip(f"{fam.name} has no inverse")
        th, p = fam.sample(3, dtype, gen(1)), points(fam, 40, dtype=dtype, seed=2)
        q = fam.forward(th, p)
        torch.testing.assert_close(fam.inverse(th, q), p.expand(3, -1, -1), **tol(dtype, 2 * fam.k))   # two evaluations

    def test_inverse_jacobian(self, fam):
        "∇T⁻¹ at T(p) is the inverse of ∇T at p (the chain rule, exact for every family with an inverse)."
        if fam.inverse is None: pytest.skip(f"{fam.name} has no inverse")
        th, p = fam.sample(2, torch.float64, gen(3)), points(fam, 2, 30, seed=4)
        J = maps.jacobian(lambda z: fam.forward(th, z), p)
        Ji = maps.jacobian(lambda z: fam.inverse(th, z), fam.forward(th, p))
        kappa = maps.condition_number(J).max().item()                     # each Jacobian to k ε, amplified by κ in the product
        torch.testing.assert_close(Ji @ J, torch.eye(2, dtype=torch.float64).expand_as(J), **tol(torch.float64, 2 * fam.k * kappa))

    def test_det_positive(self, fam):
        "Diffeomorphic families never fold; three times the usual parameters included for those diffeomorphic for every θ."
        if not fam.diffeomorphic: pytest.skip(f"{fam.name} is not a diffeomorphism for every parameter")
        p = points(fam, 4, 200, seed=5)
        for factor in ((1.0,) if fam.name == "diffeo" else (1.0, 3.0)):
            th = factor * fam.sample(4, torch.float64, gen(6))
            J = maps.jacobian(lambda z: fam.forward(th, z), p)
            assert (maps.det(J) > 0).all() and (maps.fraction_folded(J) == 0).all()

    @pytest.mark.parametrize("dtype", DTYPES)
    def test_batched_equals_looped(self, fam, dtype):
        th = fam.sample(3, dtype, gen(7))
        shared, own = points(fam, 25, dtype=dtype, seed=8), points(fam, 3, 25, dtype=dtype, seed=9)
        for p in (shared, own):
            out = fam.forward(th, p)
            looped = torch.cat([fam.forward(th[b:b + 1], p if p.ndim == 2 else p[b]) for b in range(3)])
            torch.testing.assert_close(out, looped, **tol(dtype, fam.k))

    def test_jacobian(self, fam):
        "maps.jacobian of the family's map: the maps layout [B, N, 2, 2], and central differences where the map is smooth."
        th, p = fam.sample(2, torch.float64, gen(10)), points(fam, 2, 20, seed=11)
        f = lambda z: fam.forward(th, z)
        J = maps.jacobian(f, p)
        assert J.shape == (2, 20, 2, 2)
        h = 1e-6 * scale(fam)
        e = torch.eye(2, dtype=torch.float64) * h
        fd = torch.stack([(f(p + e[j]) - f(p - e[j])) / (2 * h) for j in range(2)], -1)
        # central differences: rounding k ε |T| / h ≈ 4e-9 for k = 16 at h = 1e-6 |T|, truncation h² |T‴| / 6 far below;
        # CPAB is C¹ only (first order within h of a kink, which random points almost surely are not)
        torch.testing.assert_close(J, fd, rtol=0, atol=1e-8)

    @pytest.mark.parametrize("dtype", DTYPES)
    def test_identity_warp(self, fam, dtype):
        "The identity map, evaluated on the pixel grid of the adapter's frame, warps an image to itself."
        x = images(fam, 2, dtype)
        g = maps.pixel_grid(fam.size, fam.frame, dtype)
        T = fam.forward(fam.identity(2, dtype), g.view(-1, 2)).view(2, *fam.size, 2)
        # the positions are rounded a few times on the way to pixel indices, by ~n ε pixels each (maps: Warping images)
        torch.testing.assert_close(maps.warp(x, T, fam.frame), x, **tol(dtype, 4 * max(fam.size)))

    @pytest.mark.parametrize("dtype", DTYPES)
    def test_warp_is_maps_warp(self, fam, dtype):
        "The family's own warp reads the image where its map sends the pixel centres, in its frame (maps' Conventions)."
        if fam.warp is None: pytest.skip(f"{fam.name} has no warp")
        th, x = fam.sample(2, dtype, gen(12)), images(fam, 2, dtype, seed=13)
        g = maps.pixel_grid(fam.size, fam.frame, dtype).view(-1, 2)
        q = (fam.sampled or fam.forward)(th, g).view(2, *fam.size, 2)
        # two routes to the same positions (e.g. F.affine_grid against the points) differ by up to k ε of the frame's
        # extent, that is k n ε pixels; plus the 4 n ε of the reads themselves; times the image's slope (≤ 1 per pixel)
        torch.testing.assert_close(fam.warp(x, th), maps.warp(x, q, fam.frame, padding_mode=fam.padding_mode),
                                   **tol(dtype, (fam.k + 4) * max(fam.size)))

    def test_gradcheck(self, fam):
        "float64 gradcheck with respect to the parameters and the points."
        th = fam.sample(2, torch.float64, gen(14)).requires_grad_()
        p = points(fam, 6, seed=15).requires_grad_()
        assert torch.autograd.gradcheck(lambda a, z: fam.forward(a, z), (th, p), eps=1e-6, atol=1e-6)
