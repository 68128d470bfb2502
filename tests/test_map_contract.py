"""The maps contract (`maps.CONTRACT`, nbs/05_maps.ipynb: the family protocol) on every family of maps of the plane
that diffgeo ships: each module builds its own `maps.MapFamily` (`diffeo.map_family`, `cpab.map_family`,
`flows.map_family`, `transformers.map_family` for every registered spatial-transformer family), and every check runs
on every family in float32 and float64 (a check that is float64 only, or that does not apply, is skipped, saying why).

Tolerances are in units of the dtype's ε, from each family's `k` (see the maps notebook); on the CPU they are met with a
margin of 5-50 (the largest errors measured were 9ε for CPAB's round trip and 180ε for CPAB's inverse Jacobian).
"""
from __future__ import annotations

import pytest
import torch

from diffgeo import cpab, diffeo, flows, maps, transformers

FAMILIES = {f.name: f for f in [diffeo.map_family(), cpab.map_family(), flows.map_family(),
                                *(transformers.map_family(n) for n in transformers.FAMILIES)]}
DTYPES = [torch.float32, torch.float64]


def test_registry():
    "The families the issue names are all here, each in a frame of maps."
    assert {"diffeo", "cpab", "flow", "st_affine", "st_affine_diffeo", "st_homography", "st_tps"} <= set(FAMILIES)
    assert all(f.frame in maps.FRAMES for f in FAMILIES.values())


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("check", list(maps.CONTRACT))
@pytest.mark.parametrize("name", list(FAMILIES))
def test_contract(name, check, dtype):
    skipped = maps.CONTRACT[check](FAMILIES[name], dtype)
    if skipped: pytest.skip(skipped)


def test_check_family_names_what_failed():
    "A family that names the wrong frame fails the warp check, and the error says which family, check and dtype."
    fam = transformers.map_family("affine")
    wrong = maps.MapFamily(**{**{f: getattr(fam, f) for f in fam.__dataclass_fields__}, "frame": "unit", "name": "liar"})
    with pytest.raises(AssertionError, match=r"liar fails the maps contract's 'warp_is_maps_warp' in torch.float64"):
        maps.check_family(wrong, dtypes=(torch.float64,), checks=["warp_is_maps_warp"])
    with pytest.raises(TypeError, match="maps.MapFamily"): maps.check_family(lambda p: p)


def test_a_folding_family_fails_det_positive():
    "A family that claims to be diffeomorphic but folds (T(x, y) = (x³ − x/2 scaled by θ, y)) is caught."
    fold = maps.MapFamily(name="fold", frame="normalised", size=(8, 8),
                          forward=lambda th, p: torch.stack([p[..., 0] + th[:, :1] * (p[..., 0] ** 3 - p[..., 0]), p[..., 1]], -1)
                          if p.ndim == 3 else torch.stack([p[None, :, 0] + th[:, :1] * (p[None, :, 0] ** 3 - p[None, :, 0]),
                                                           p[None, :, 1].expand(len(th), -1)], -1),
                          identity=lambda B, dtype: torch.zeros(B, 1, dtype=dtype),
                          sample=lambda B, dtype, g: torch.full((B, 1), 3.0, dtype=dtype),
                          low=-1.0, high=1.0, diffeomorphic=True)
    with pytest.raises(AssertionError, match="fold fails the maps contract's 'det_positive'"):
        maps.check_family(fold, dtypes=(torch.float64,), checks=["det_positive"])
