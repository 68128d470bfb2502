"""Tests of the Zavatone-Veth et al. experiments' own functions beyond their notebooks: `measure_during_training` resumes
an interrupted run from its checkpoint with the snapshots it had measured, and gives what an uninterrupted run gives; a
cell keeps both as its context's checkpoint files (`CellContext.checkpoint`) and deletes them when it ends."""

import numpy as np
import pytest
import torch
from torch import nn

from diffgeo import data
from diffgeo.core import seed_everything
from diffgeo.experiments import zavatoneveth as Z   # the slice method (measure_during_training) shared by Figs. 2 and 3


def _setup():
    g = torch.Generator().manual_seed(0)
    split = data.Split(torch.randn(64, 1, 4, 4, generator=g), torch.randint(3, (64,), generator=g))
    seed_everything(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(16, 8), nn.Tanh(), nn.Linear(8, 3))
    probe = torch.randn(5, 1, 4, 4, generator=g)
    def geometry(m):
        with torch.no_grad(): out = m(probe)
        return out.numpy()[:, :1].copy(), out.softmax(-1).numpy()
    return net, split, geometry


def _run(checkpoint=None, kept=None, stop=None, when="after"):
    "measure_during_training over 3 epochs with snapshots 0, 1, 3; `stop` raises at that epoch, after or before its measurement."
    net, split, geometry = _setup()
    orig = Z.train.train
    def train(*a, on_epoch=None, **k):
        def hook(e, row):
            if e == stop and when == "before": raise KeyboardInterrupt
            on_epoch(e, row)
            if e == stop and when == "after": raise KeyboardInterrupt
        return orig(*a, on_epoch=hook, **k)
    Z.train.train = train
    try: return Z.measure_during_training(net, split, split, [0, 1, 3], geometry, checkpoint, kept, optimizer="adam",
                                           lr=1e-2, batch_size=16, seed=0, progress=False)
    finally: Z.train.train = orig


@pytest.mark.parametrize("when", ["after", "before"])
def test_measure_during_training_resumes(tmp_path, when):
    "Stopped at epoch 1, after its snapshot was measured or between its checkpoint and its measurement: the resumed run equals the uninterrupted one."
    full = _run()
    ckpt, snaps = tmp_path / "run.pt", tmp_path / "run_snapshots.pt"
    with pytest.raises(KeyboardInterrupt): _run(ckpt, snaps, stop=1, when=when)
    kept = torch.load(snaps, weights_only=False)["rows"]
    assert ckpt.exists() and sorted(kept) == ([0, 1] if when == "after" else [0])
    again = _run(ckpt, snaps)
    assert sorted(again) == sorted(full) == [0, 1, 3]
    for e in full:
        for k in ("logv", "prob"): np.testing.assert_allclose(again[e][k], full[e][k], rtol=1e-6, atol=1e-7, err_msg=f"{k} at epoch {e}")
        for k in ("loss", "error"): assert again[e][k] == pytest.approx(full[e][k], rel=1e-6, abs=1e-7), (k, e)


def test_cell_resumes_from_its_own_checkpoints(tmp_path):
    "Fig. 2's cell keeps its training checkpoint and its snapshots as its context's checkpoint files, resumes from them, and deletes them when done."
    import contextlib, io
    from diffgeo.experiments import zavatoneveth_fig2 as F2
    orig = Z.train.train
    def stopping(*a, on_epoch=None, **k):
        def hook(e, row):
            on_epoch(e, row)
            if e == 1: raise KeyboardInterrupt
        return orig(*a, on_epoch=hook, **k)
    files = lambda: sorted(p.name for p in tmp_path.rglob("*") if p.is_file())
    with contextlib.redirect_stdout(io.StringIO()):
        full = F2.EXPERIMENT.run("smoke", work_dir=str(tmp_path / "full"), epochs=2, snapshots=[0, 1, 2])
        Z.train.train = stopping
        try:
            with pytest.raises(KeyboardInterrupt): F2.EXPERIMENT.run("smoke", work_dir=str(tmp_path / "cut"), epochs=2, snapshots=[0, 1, 2])
        finally: Z.train.train = orig
        assert files() == ["zavatoneveth_fig2_seed0.pt", "zavatoneveth_fig2_seed0_snapshots.pt"]
        again = F2.EXPERIMENT.run("smoke", work_dir=str(tmp_path / "cut"), epochs=2, snapshots=[0, 1, 2])
    assert files() == []
    for v in ("line_log_volume", "plane_log_volume", "line_prob", "test_error", "train_loss"):
        np.testing.assert_allclose(again[v], full[v], rtol=1e-6, atol=1e-7, err_msg=v)
