"""End-to-end tests of the `diffgeo` commands: `stability` (the installed entry point, --help, a weights file, an image
folder, the written dataset, and bad names that list the valid ones) and `plan` (shards of other code)."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import xarray as xr

from diffgeo import cli, models, stability


EXE = Path(sys.executable).parent / "diffgeo"   # the entry point pip installs beside the interpreter


def _run(*args):
    assert EXE.exists(), f"{EXE} is missing: install the package (pip install -e .) to get the diffgeo command"
    return subprocess.run([str(EXE), *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "DIFFGEO_PROGRESS": "0"})


def test_help_explains_every_option():
    out = _run("stability", "--help")
    assert out.returncode == 0
    for action in cli.build_parser()._subparsers._group_actions[0].choices["stability"]._actions:
        if action.help == "==SUPPRESS==": continue
        assert action.help and (action.dest in out.stdout.replace("-", "_") or action.dest == "help")


def test_weights_file_and_dataset(tmp_path):
    net = models.build("LeNet", 1, 10, 28)
    torch.save({"state_dict": net.state_dict()}, tmp_path / "lenet.pt")
    out_nc = tmp_path / "lenet.nc"
    r = _run("stability", "LeNet", "--weights", str(tmp_path / "lenet.pt"), "--data", "mnist5k", "-n", "30",
             "--bootstrap", "10", "--out", str(out_nc), "--no-progress")
    assert r.returncode == 0, r.stderr
    assert "R_f =" in r.stdout and out_nc.exists()
    assert "about a 95% interval" in r.stdout and "over 10 bootstrap resamples of the images" in r.stdout   # says what [a, b] is
    ds = xr.open_dataset(out_nc)
    assert {"D_f", "G_f", "R_f", "R_f_log10_sd"} <= set(ds.data_vars) and ds.attrs["model_name"] == "LeNet"
    # the same measure in Python on the same images and weights
    x, _ = cli.load_images("mnist5k", 30, seed=0)
    direct = stability.relative_stability(net.eval(), x, seed=0)
    np.testing.assert_allclose(ds.R_f.values.ravel(), direct.R_f.values.ravel(), rtol=1e-5)


def test_image_folder(tmp_path):
    from PIL import Image
    rng = np.random.default_rng(0)
    for c in ("a", "b"):
        (tmp_path / c).mkdir()
        for i in range(3): Image.fromarray(rng.integers(0, 255, (40, 36, 3), dtype=np.uint8)).save(tmp_path / c / f"{i}.png")
    x, n_classes = cli.load_images(str(tmp_path), 5, size=32)
    assert x.shape == (5, 3, 32, 32) and n_classes == 2
    r = _run("stability", "LeNet", "--data", str(tmp_path), "--size", "32", "-n", "6", "--bootstrap", "5", "--no-progress")
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("args, says", [
    (("stability", "lenett"), "resnet18"),
    (("stability", "LeNet", "--data", "imagenet"), "mnist5k"),
    (("stability", "LeNet", "--weights", "IMAGENET1K_V1", "-n", "4"), "not found"),
    (("stability", "resnet18", "--weights", "NOPE", "-n", "4"), "DEFAULT"),
    (("stability", "resnet18", "-n", "4"), "3 channels"),
    (("stability", "LeNet", "-n", "1"), "at least 2"),
])
def test_bad_names_list_the_valid_ones(args, says, capsys):
    assert cli.main(list(args)) == 2
    err = capsys.readouterr().err
    assert says in err, err


def test_plan_counts_shards_of_other_code_as_the_run_would(tmp_path, capsys, monkeypatch):
    "diffgeo plan --code-changed: a shard of other code is 'stale', to run again under recompute and kept under reuse."
    from diffgeo import results
    from diffgeo.experiments import petrini_fig5
    work = str(tmp_path / "work")
    petrini_fig5.EXPERIMENT.run("smoke", archs=["FullConnL2"], work_dir=work)
    monkeypatch.setattr(results, "_code_version", lambda: ("other", "0" * 64))   # as after an edit of the package
    args = ["plan", "fig5", "--profile", "smoke", "--set", 'archs=["FullConnL2"]', "--work-dir", work, "--no-estimate"]
    assert cli.main(args) == 0
    assert "1 stale (computed by other code: to run again" in capsys.readouterr().out
    assert cli.main([*args, "--code-changed", "reuse"]) == 0
    assert "1 stale (computed by other code: kept" in capsys.readouterr().out
    with pytest.raises(SystemExit): cli.main([*args, "--code-changed", "keep"])
    assert "recompute" in capsys.readouterr().err


@pytest.mark.parametrize("args", [("--help",), ("stability", "--help"), ("plan", "--help")])
def test_help_imports_no_heavy_module(args):
    "Issue 35: `--help` took 9-10 s importing torch; the command line parses without torch, torchvision, xarray, pandas."
    code = ("import sys, runpy\n"
            f"sys.argv = ['diffgeo', *{list(args)!r}]\n"
            "try: runpy.run_module('diffgeo.cli', run_name='__main__')\n"
            "except SystemExit as e: assert e.code == 0, e.code\n"
            "heavy = sorted(m for m in ('torch', 'torchvision', 'xarray', 'pandas') if m in sys.modules)\n"
            "print('HEAVY', heavy)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "usage: diffgeo" in out and "HEAVY []" in out, out[-500:]


def test_pretrained_weights_get_their_own_preprocessing(monkeypatch):
    "torchvision weight enums: images resized and centre-cropped in [0, 1], normalised inside the net by the weights' mean and std."
    import torchvision.models as tvm
    pre = cli.weight_transforms("resnet18", "IMAGENET1K_V1")
    assert pre == {"resize": 256, "size": 224, "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}
    assert cli.weight_transforms("resnet18", None) is None and cli.weight_transforms("LeNet", "DEFAULT") is None
    with pytest.raises(ValueError, match="IMAGENET1K_V1"): cli.weight_transforms("resnet18", "IMAGENET")
    plain = tvm.resnet18(num_classes=1000).eval()                               # stands for the cached weights: no download
    monkeypatch.setattr(tvm, "get_model", lambda name, weights=None, **kw: plain)
    net = cli.load_model("resnet18", "IMAGENET1K_V1")
    x = torch.rand(2, 3, 32, 32)
    mean, std = torch.tensor(pre["mean"]).view(1, 3, 1, 1), torch.tensor(pre["std"]).view(1, 3, 1, 1)
    with torch.no_grad(): torch.testing.assert_close(net(x), plain.__class__.forward(plain, (x - mean) / std))
    small = dict(pre, resize=40, size=36)                                        # the same steps at a small size
    images, _ = cli.load_images("mnist5k", 2, preprocess=small)
    assert images.shape == (2, 1, 36, 36) and 0 <= images.min() and images.max() <= 1    # pixels, not standardised


def test_an_offline_download_names_the_file_option(monkeypatch, capsys, tmp_path):
    "Without a network, a weight enum's download fails with a message naming --weights FILE, not a traceback."
    import urllib.error
    import torchvision.models as tvm
    from PIL import Image
    (tmp_path / "a").mkdir()
    for i in range(2): Image.fromarray(np.full((20, 20, 3), 40 * i, dtype=np.uint8)).save(tmp_path / "a" / f"{i}.png")
    def offline(name, weights=None, **kw): raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")
    monkeypatch.setattr(tvm, "get_model", offline)
    with pytest.raises(ValueError, match=r"could not download resnet18's IMAGENET1K_V1 weights .*--weights FILE"):
        cli.load_model("resnet18", "DEFAULT")
    assert cli.main(["stability", "resnet18", "--weights", "DEFAULT", "--data", str(tmp_path), "-n", "2", "--no-progress"]) == 2
    out = capsys.readouterr()
    assert "--weights FILE" in out.err and "centre crop 224 x 224" in out.out        # and it said what preprocessing it chose


def test_new_makes_a_working_experiment_in_one_command(tmp_path):
    """Issue 61: `diffgeo new NAME --paper KEY` in a fresh clone gives an exported experiment whose notebook runs at the smoke
    profile, listed in the sidebar, whose claim is judged (reproduced on its run, not on its mutation) and whose report shows."""
    import shutil
    root = Path(__file__).resolve().parents[1]
    clone = tmp_path / "clone"   # the working tree's files (tracked, and new ones git does not ignore), as a fresh clone has them
    files = subprocess.run(["git", "-C", str(root), "ls-files", "--cached", "--others", "--exclude-standard"], capture_output=True,
                           text=True, check=True).stdout.splitlines()
    for f in files:
        if (root / f).is_file():
            (clone / f).parent.mkdir(parents=True, exist_ok=True); shutil.copy2(root / f, clone / f)
    env = {**os.environ, "PYTHONPATH": str(clone), "DIFFGEO_PROGRESS": "0"}
    r = subprocess.run([sys.executable, "-m", "diffgeo.cli", "new", "zavatoneveth_figx", "--paper", "zavatoneveth"], cwd=clone,
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "wrote nbs/zavatoneveth_figx.ipynb and diffgeo/experiments/zavatoneveth_figx.py" in r.stdout
    assert (clone / "diffgeo" / "experiments" / "zavatoneveth_figx.py").is_file()
    assert "zavatoneveth_figx.ipynb" in (clone / "nbs" / "sidebar.yml").read_text()
    again = subprocess.run([sys.executable, "-m", "diffgeo.cli", "new", "zavatoneveth_figx", "--paper", "zavatoneveth"], cwd=clone,
                           env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 2 and "exists" in again.stderr
    run = subprocess.run([sys.executable, "-m", "papermill", "nbs/zavatoneveth_figx.ipynb", str(tmp_path / "out.ipynb"), "-k", "python3",
                          "-p", "profile", "smoke", "-p", "out_dir", str(tmp_path / "o")], cwd=clone, env=env, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    check = ("from diffgeo import claims, results\nfrom diffgeo.experiments.zavatoneveth_figx import EXPERIMENT as E\n"
             f"ds = E.load({str(tmp_path / 'o' / 'results' / 'zavatoneveth_figx.nc')!r})\n"
             "c = E.claims['delta_grows_with_c']\n"
             "print(claims.evaluate(c, ds).status, [claims.evaluate(c, m(ds)).status for m in c.mutations.values()])\n"
             "print(E.show_report('smoke', out_dir=" + repr(str(tmp_path / "o")) + "))")
    out = subprocess.run([sys.executable, "-c", check], cwd=clone, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.splitlines()[0] == "reproduced ['not']", out.stdout
    assert "the mean δ grows from" in out.stdout
