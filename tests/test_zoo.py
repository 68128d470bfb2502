"""Trained networks kept as results (issue 62): a run keeps each network it trained, and the committed ones load and score."""
import contextlib
import io
import os

import pytest
import torch

from diffgeo import data, results, zoo
from diffgeo.experiments.petrini_fig5 import EXPERIMENT as FIG5

ROOT = results.project_root()


def probed(ds, arch, seed):
    "The test-set indices of the images a network of `ds` was probed on (and its kept copy checked on)."
    t = ds.test_index
    return t.sel({k: v for k, v in (("arch", arch), ("seed", seed)) if k in t.dims}).values


def committed_zoos():
    "Every committed run's zoo folder: zoo/<experiment><suffix>/ under the checkout."
    return sorted(p for p in (ROOT / "zoo").glob("*") if p.is_dir()) if (ROOT / "zoo").is_dir() else []


def test_a_smoke_run_keeps_its_networks_and_they_come_back(tmp_path):
    with contextlib.redirect_stdout(io.StringIO()):
        ds = FIG5.run("smoke", out_dir=str(tmp_path))
    rows = zoo.index("petrini_fig5", "smoke", out_dir=tmp_path)
    assert [(r["arch"], r["seed"]) for r in rows] == [(a, s) for a in sorted(ds.arch.values) for s in ds.seed.values.tolist()]
    for r in rows:
        net, prov = zoo.load("petrini_fig5", r["arch"], r["seed"], profile="smoke", out_dir=tmp_path)
        assert not net.training and prov["test_error"] == pytest.approx(float(ds.test_error.sel(arch=r["arch"], seed=r["seed"], state="trained")))
        mnist = data.load("mnist5k")
        idx = torch.as_tensor(probed(ds, r["arch"], r["seed"]))
        assert zoo.check_network(r["path"], mnist.test.images[idx], mnist.test.labels[idx]) == prov["slice_error"]


def test_the_cpu_profile_keeps_none(tmp_path):
    assert FIG5.profiles["cpu"]["keep_networks"] is False and FIG5.profiles["long"]["keep_networks"] is True


@pytest.mark.parametrize("folder", committed_zoos(), ids=lambda p: p.name)
def test_every_committed_network_loads_with_its_provenance(folder):
    for f in sorted(folder.glob("*.pt")):
        net, prov = zoo.load_network(f)
        assert all(k in prov for k in (*zoo.BUILD, "seed", "steps", "dataset", "test_error", "commit", "slice_error"))
        x = torch.zeros(2, prov["in_channels"], prov["size"], prov["size"])
        assert net(x).shape == (2, prov["n_classes"])


@pytest.mark.parametrize("folder", committed_zoos(), ids=lambda p: p.name)
def test_every_committed_network_scores_what_it_recorded_where_the_data_is(folder):
    root = os.environ.get("DIFFGEO_DATA")
    if not root: pytest.skip("DIFFGEO_DATA is not set: the test images are not here")
    for f in sorted(folder.glob("*.pt")):
        prov = zoo.load_network(f)[1]
        ds = results.load_dataset(ROOT / "results" / f"{folder.name}.nc")
        test = data.load(prov["dataset"], root).test
        idx = torch.as_tensor(probed(ds, prov["arch"], prov["seed"]))
        zoo.check_network(f, test.images[idx], test.labels[idx])
