"""Fig. 4 (a CPAB transformation): papermill smoke run, the committed cpu-profile result, and the dataset's internal consistency."""

import numpy as np
import pytest
import torch

from diffgeo import cpab, results
from diffgeo.experiments import detlefsen_fig4 as fig4_cpab


VARIABLES = {"image", "warped", "theta", "cell_matrix", "arrow_position", "velocity", "path", "roundtrip", "jacobian_det",
             "cell_edge", "displacement", "max_displacement", "median_displacement", "min_jacobian_det", "max_jacobian_det",
             "max_roundtrip_error"}


def test_dataset_is_consistent():
    "Paths start on their grid and end at T(x); the warped image is the input sampled at T; det > 0; round trip exact."
    ds = fig4_cpab.EXPERIMENT.run("smoke")
    tess = cpab.Tessellation(tuple(results.parameters(ds)["tess_size"]))
    theta = torch.as_tensor(ds.theta.values)[None]
    start = torch.as_tensor(ds.path.isel(time=0).values)
    end = torch.as_tensor(ds.path.isel(time=-1).values)
    torch.testing.assert_close(end, cpab.transform(start, theta, tess)[0], rtol=0, atol=1e-12)
    warped = cpab.warp(torch.as_tensor(ds.image.values), theta.float(), tess).clamp(0, 1)
    torch.testing.assert_close(torch.as_tensor(ds.warped.values), warped, rtol=0, atol=1e-6)
    assert ds.min_jacobian_det.item() > 0 and ds.max_roundtrip_error.item() < 1e-8
    np.testing.assert_allclose(ds.time.values[[0, -1]], [0, 1])


def test_explicit_theta_and_bad_inputs():
    "An explicit θ replaces the draw (θ = 0: nothing moves); bad names fail with the valid ones listed."
    ds = fig4_cpab.EXPERIMENT.run("smoke", theta=[0.0] * 14)
    assert ds.max_displacement.item() == 0 and np.allclose(ds.jacobian_det, 1, atol=1e-6)
    np.testing.assert_allclose(ds.warped.values, ds.image.values, atol=1e-5)
    with pytest.raises(ValueError, match="'smoke', 'cpu', 'long', 'paper'"):
        fig4_cpab.EXPERIMENT.run("laptop")
    with pytest.raises(ValueError, match="'astronaut', 'camera'"):
        fig4_cpab.EXPERIMENT.run("smoke", image="lena")
    with pytest.raises(ValueError, match=r"theta must have shape \[B, 14\]"):
        fig4_cpab.EXPERIMENT.run("smoke", theta=[0.0] * 3)
