"""detlefsen_fig3 (destructive maps, learning-rate sensitivity): the measure of destructiveness, probes, bad names.
The notebook's smoke run and the committed result are checked in test_experiments."""
import math

import numpy as np
import pytest
import torch

from diffgeo.experiments import detlefsen_fig3 as fig3



def test_destructiveness_known_maps():
    "κ and min det of affine maps are those of A; expm maps have det = exp(tr A) > 0; θ = 0 is the identity for all."
    theta = torch.tensor([[2., 0, 0.1, 0, 0.5, 0], [1., 1, 0, 1, 1, 0], [-1., 0, 0, 0, 1, 0]])
    d = fig3.destructiveness(theta, "affine")
    np.testing.assert_allclose(d["cond"][[0, 2]].numpy(), [4, 1])
    assert d["cond"][1] > 1e7 and abs(d["min_det"][1]) < 1e-12 and d["min_det"][2] == -1
    A = torch.tensor([[0.3, -0.2, 0.1, 0.4, -0.5, 0.0]])
    np.testing.assert_allclose(fig3.destructiveness(A, "affine_diffeo")["min_det"].numpy(), [math.exp(-0.2)], rtol=1e-6)  # θ is float32
    for family, dim in (("affine_diffeo", 6), ("tps", 32), ("cpab", 34)):
        d = fig3.destructiveness(torch.zeros(3, dim), family)
        np.testing.assert_allclose(d["cond"].numpy(), 1, atol=1e-6)
        np.testing.assert_allclose(d["min_det"].numpy(), 1, atol=1e-6)


def test_probe_steps_and_bad_names():
    assert fig3.probe_steps(120, 10) == list(range(0, 121, 10))
    assert fig3.probe_steps(7, 3) == [0, 3, 6, 7]
    with pytest.raises(ValueError, match="'smoke', 'cpu', 'long', 'paper'"):
        fig3.EXPERIMENT.run("laptop")
    with pytest.raises(ValueError, match="'affine_diffeo', 'cpab', 'affine', 'tps', 'none'"):
        fig3.EXPERIMENT.run("smoke", families=["similarity"])
