"""Issue 62 §2, the headline in minutes: the measuring stage of petrini_fig5 probes again the networks a run kept (its zoo)
instead of training them, on the probe images committed with the zoo, and reproduces the training stage's dataset: the
state at initialisation exactly, the trained state within what rounding the kept weights to half precision can move.
Everything here runs on a zoo a smoke run makes in a temporary folder (seconds); CIFAR-10's probe images are checked
where its data is present."""
import contextlib
import copy
import hashlib
import io
import json
import math
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from diffgeo import data, results, stability, zoo
from diffgeo.experiments.petrini_fig5 import EXPERIMENT as FIG5

ROOT = results.project_root()
PROBED = ("d_diffeo", "d_noise", "d_pair", "u_diffeo", "u_noise", "u_pair")   # the per-sample distances, in both states
STABILITIES = ("D_f", "G_f", "R_f")
TRAINED_WITH = ("lr", "init", "warmup", "batch_size", "n_val")   # the training settings a kept network records beyond arch, seed, ...


def quiet(fn, *args, **kwargs):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()): return fn(*args, **kwargs)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    "A smoke run of Fig. 5 that keeps its networks (main: dataset, figures, zoo), then its measuring stage, in one folder."
    out = tmp_path_factory.mktemp("fig5")
    trained = quiet(FIG5.main, "smoke", out_dir=str(out), show=False)
    before = FIG5.paths("smoke", out).dataset.read_bytes()
    measured = quiet(FIG5.main, "smoke", out_dir=str(out), show=False, stage="measure")
    return dict(out=out, trained=trained, measured=measured, before=before)


def copy_zoo(runs, to:Path) -> Path:
    "The smoke run's zoo copied into another output folder; its folder there."
    shutil.copytree(runs["out"] / "zoo", to / "zoo")
    return zoo.folder("petrini_fig5", "smoke", out_dir=to)


# ------------------------------------------------------------------------------------------------ the probe images

def test_the_run_keeps_its_probe_images_with_its_networks(runs):
    folder = zoo.folder("petrini_fig5", "smoke", out_dir=runs["out"])
    assert sorted(f.name for f in folder.iterdir()) == ["FullConnL2_seed0.pt", "LeNet_seed0.pt", zoo.PROBE_FILE]
    probe, info = zoo.load_probe_images(folder)
    mnist = data.load("mnist5k")
    idx = runs["trained"].test_index.isel(arch=0, seed=0).values
    assert info["dataset"] == "mnist5k" and info["test_size"] == len(mnist.test) and list(info["index"]) == list(idx)
    assert torch.equal(probe.images, mnist.test.images[torch.as_tensor(idx)])
    assert torch.equal(probe.labels, mnist.test.labels[torch.as_tensor(idx)])


def _bit_for_bit(ds_data, n, tmp_path):
    zoo.save_probe_images(tmp_path, ds_data, n)
    probe, info = zoo.load_probe_images(tmp_path)
    x = ds_data.test.images[ds_data.test.subset_indices(n, seed=0)]
    assert torch.equal(probe.images, x) and probe.images.stride() == x.stride() and probe.images.dtype == torch.float32
    f32 = lambda v: tuple(np.array(v, dtype=np.float32).tolist())   # the file keeps the statistics in float32, as they standardise
    assert info["mean"] == f32(ds_data.mean) and info["std"] == f32(ds_data.std) and info["n_classes"] == ds_data.n_classes
    return (tmp_path / zoo.PROBE_FILE).stat().st_size


def test_probe_images_are_the_data_loaders_bit_for_bit_mnist5k(tmp_path):
    "Every MNIST-5k test image, from its bytes, is the float32 image data.load gives, values and layout."
    _bit_for_bit(data.load("mnist5k"), 1000, tmp_path)


def test_probe_images_are_the_data_loaders_bit_for_bit_cifar10(tmp_path):
    "Fig. 5's 500 CIFAR-10 probe images likewise, where the data set is present (DIFFGEO_DATA)."
    try: data.locate("cifar10")
    except FileNotFoundError: pytest.skip("CIFAR-10 is not in DIFFGEO_DATA")
    size = _bit_for_bit(data.load("cifar10"), FIG5.profiles["long"]["n_test"], tmp_path)
    assert size < 2e6   # about 1.5 MB of bytes, compressed


# ------------------------------------------------------------------------------------------------ the measuring stage

def test_it_writes_files_of_its_own_with_its_provenance(runs):
    paths = FIG5.paths("smoke", runs["out"], "measured")
    assert paths.dataset.exists() and all(f.exists() for f in paths.figures.values())
    assert FIG5.paths("smoke", runs["out"]).dataset.read_bytes() == runs["before"]          # the training run's: untouched
    assert not paths.artifacts.exists()                                                     # it keeps no network
    p = results.parameters(FIG5.load(paths.dataset))
    assert (p["stage"], p["zoo_tag"], p["tag"]) == ("measure", "", "measured")
    m = runs["measured"]
    assert set(m.test_error_source.values.ravel()) == {"measured"}
    assert "train_loss" not in m and "train_seconds" not in m and "epoch" not in m.dims   # nothing trained
    assert (m.best_epoch == runs["trained"].best_epoch).all()


def test_the_state_at_initialisation_is_probed_identically(runs):
    "The network at initialisation is built from its seed as training builds it, on the same images: every number equal."
    t, m = runs["trained"], runs["measured"]
    init = lambda ds, k: ds[k].sel(state="init").values
    for k in (*PROBED, *STABILITIES, "D_f_mean", "R_f_mean", "R_f_unit", "test_error"):
        np.testing.assert_array_equal(init(m, k), init(t, k), err_msg=k)
    for k in ("r_diffeo", "r_noise", "is_diffeo", "delta_measured", "delta_center", "test_index", "n_test_images"):   # the same draws
        np.testing.assert_array_equal(m[k].values, t[k].values, err_msg=k)


def test_the_network_at_initialisation_is_the_one_training_started_from(tmp_path, monkeypatch):
    """The measuring stage rebuilds each network at initialisation from its seed; every parameter and buffer of it is, bit
    for bit and dtype for dtype, the one the training stage's cell handed to training (taken as `train_network` received
    it), for two seeds, PyTorch's default initialisation (FullConnL2) and the long profile's kaiming one (LeNet)."""
    from diffgeo.experiments import petrini, petrini_fig5
    started, rebuilt = {}, {}
    state = lambda net: {k: v.detach().cpu().clone() for k, v in net.state_dict().items()}
    real_train, real_setup = petrini.train_network, petrini_fig5.measure_setup   # (cells train through petrini.Setup.train)
    def train_network(net, arch, dataset, ds_data, fit, val, steps, seed, **kwargs):
        started[arch, seed] = state(net)
        return real_train(net, arch, dataset, ds_data, fit, val, steps, seed, **kwargs)
    def measure_setup(arch, seed, *args, **kwargs):
        s = real_setup(arch, seed, *args, **kwargs)
        rebuilt[s.info.name, seed] = state(s.net)
        return s
    monkeypatch.setattr(petrini, "train_network", train_network)
    monkeypatch.setattr(petrini_fig5, "measure_setup", measure_setup)
    monkeypatch.setitem(FIG5.profiles["smoke"], "init", {"LeNet": "kaiming"})
    quiet(FIG5.run, "smoke", out_dir=str(tmp_path), seeds=[0, 1])
    quiet(FIG5.run, "smoke", out_dir=str(tmp_path), seeds=[0, 1], stage="measure")
    cells = [(a, s) for a in ("FullConnL2", "LeNet") for s in (0, 1)]
    assert sorted(started) == sorted(rebuilt) == cells
    for cell in cells:
        a, b = started[cell], rebuilt[cell]
        assert list(a) == list(b), cell
        for k in a: assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), f"{cell} {k}: not the weights training started from"
    differ = lambda a, b: not all(torch.equal(a[k], b[k]) for k in a)
    assert differ(started["LeNet", 0], started["LeNet", 1])                       # the seed reached the network
    assert differ(state(petrini.initial_network("LeNet", 0, (1, 28), 10)), started["LeNet", 0])   # and the initialisation
    kept = {(r["arch"], r["seed"]): r["init"] for r in zoo.index("petrini_fig5", "smoke", out_dir=tmp_path)}
    assert kept == {c: "kaiming" if c[0] == "LeNet" else "pytorch" for c in cells}


def _files(folder:Path) -> dict:
    "Every file and folder under `folder` by its relative path: a file's SHA-256, a folder's None."
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None
            for p in sorted(folder.rglob("*"))}


def test_measuring_leaves_the_zoo_as_it_was(runs, tmp_path):
    "The measuring stage only reads the zoo: after a measuring run (main: dataset, figures, report) every byte is the same."
    folder = copy_zoo(runs, tmp_path)
    before = _files(tmp_path / "zoo")
    assert sorted(k for k, v in before.items() if v) == [f"{folder.name}/{n}" for n in ("FullConnL2_seed0.pt", "LeNet_seed0.pt", zoo.PROBE_FILE)]
    quiet(FIG5.main, "smoke", out_dir=str(tmp_path), show=False, stage="measure")
    assert FIG5.paths("smoke", tmp_path, "measured").dataset.exists()   # it did measure
    assert _files(tmp_path / "zoo") == before                            # no byte changed, no file added or removed


def _stabilities(net, probe, deform, seed) -> dict:
    "D_f, G_f, R_f of `net` as the cell measures the trained network: the same draws, running batch-norm statistics, medians."
    r = stability.relative_stability(net, probe, deform, seed=seed, batch_size=250, batchnorm="running", units=True)
    s = stability.summarize(r, "median")
    return {k: float(s[k].squeeze()) for k in STABILITIES}


def _rounding_spread(net16, probe, deform, seed, draws:int=16) -> dict:
    """How far D_f, G_f, R_f move (largest |log ratio| over `draws`) between the half-precision network and networks drawn
    uniformly among the float32 ones whose weights round to its own: each weight w16 stands for every float32 within
    half a unit in the last place of half precision of it, the trained network's own among them."""
    base, spread = _stabilities(net16, probe, deform, seed), dict.fromkeys(STABILITIES, 0.0)
    gen = torch.Generator().manual_seed(0)
    for _ in range(draws):
        net, sd = copy.deepcopy(net16), {}
        for k, v in net16.state_dict().items():
            if v.is_floating_point():
                half_ulp = torch.from_numpy(np.spacing(np.abs(v.numpy()).astype(np.float16)).astype(np.float32)) / 2
                v = v + half_ulp * (2 * torch.rand(v.shape, generator=gen) - 1)
            sd[k] = v
        net.load_state_dict(sd)
        for k, x in _stabilities(net, probe, deform, seed).items(): spread[k] = max(spread[k], abs(math.log(x / base[k])))
    return base, spread


def test_the_trained_state_within_the_rounding_of_the_kept_weights(runs):
    """The measuring stage probes the kept half-precision network; the training stage probed the float32 one, somewhere in
    the box of networks that round to it. The tolerance is derived per network and quantity from that box: four times the
    largest change over 16 networks drawn uniformly in it (a rounding error, uniform and independent per weight, is such a
    draw; for a quantity linear in the weights the chance that it lies beyond four times the largest of 16 is 5e-7)."""
    t, m = runs["trained"], runs["measured"]
    p = FIG5.resolve("smoke")
    deform = stability.Diffeomorphism(delta=p["delta"], c=p["c"], interp=p["interp"], cutoff=p["cutoff"], delta_method=p["delta_method"])
    probe, _ = zoo.load_probe_images(zoo.folder("petrini_fig5", "smoke", out_dir=runs["out"]))
    for arch in m.arch.values:
        for seed in m.seed.values.tolist():
            net16, _ = zoo.load("petrini_fig5", str(arch), seed, profile="smoke", out_dir=runs["out"])
            base, spread = _rounding_spread(net16, probe.images, deform, seed)
            for k in STABILITIES:
                got, want = (float(ds[k].sel(arch=arch, seed=seed, state="trained")) for ds in (m, t))
                assert got == base[k], f"{arch} {k}: the measuring stage's {got} is not the kept network's {base[k]}"
                tol = 4 * spread[k]
                assert 0 < tol < 0.01, f"{arch} {k}: rounding tolerance {tol:.2g} (log ratio): not a rounding's"
                assert abs(math.log(got / want)) <= tol, f"{arch} {k}: measured {got}, trained {want}, tolerance {tol:.2g} (log ratio)"


def test_without_the_data_set_the_recorded_errors_stand_and_it_says_so(runs, monkeypatch):
    from diffgeo.experiments import petrini
    def absent(name, root=None, **kw): raise FileNotFoundError(f"no {name} here")
    monkeypatch.setattr(petrini.data, "load", absent)
    m = quiet(FIG5.run, "smoke", out_dir=str(runs["out"]), stage="measure", rerun=True)
    kept = {(r["arch"], r["seed"]): r for r in zoo.index("petrini_fig5", "smoke", out_dir=runs["out"])}
    assert set(m.test_error_source.values.ravel()) == {"recorded"}
    for (arch, seed), r in kept.items():
        assert float(m.test_error.sel(arch=arch, seed=seed, state="trained")) == r["test_error"]
    assert np.isnan(m.test_error.sel(state="init").values).all()
    assert (m.n_test_images == runs["trained"].n_test_images).all()
    for k in STABILITIES: np.testing.assert_array_equal(m[k].values, runs["measured"][k].values)   # the probes need no data set
    assert "the one recorded when each was trained" in FIG5.reporter(m)


# ------------------------------------------------------------------------------------------------ refusals

def test_refuses_without_the_zoo_naming_the_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"does not exist: train them first \(stage 'train' at profile smoke"):
        quiet(FIG5.run, "smoke", out_dir=str(tmp_path), stage="measure")
    with pytest.raises(FileNotFoundError, match=r"the cpu profile keeps no networks \(keep_networks False\)"):
        quiet(FIG5.run, "cpu", out_dir=str(tmp_path), stage="measure")


def test_refuses_a_missing_network_naming_the_fix(runs, tmp_path):
    (copy_zoo(runs, tmp_path) / "LeNet_seed0.pt").unlink()
    with pytest.raises(FileNotFoundError, match=r"no kept network LeNet_seed0.pt .*\(it holds FullConnL2_seed0\): .*train it"):
        quiet(FIG5.run, "smoke", out_dir=str(tmp_path), stage="measure")


def test_refuses_a_missing_probe_file_naming_the_fix(runs, tmp_path):
    (copy_zoo(runs, tmp_path) / zoo.PROBE_FILE).unlink()
    with pytest.raises(FileNotFoundError, match=r"has no probe images .*python scripts/zoo_probes.py"):
        quiet(FIG5.run, "smoke", out_dir=str(tmp_path), stage="measure")


def test_refuses_networks_of_other_settings(runs, tmp_path):
    copy_zoo(runs, tmp_path)
    with pytest.raises(ValueError, match=r"kept by a run of other settings \(steps 4 kept, 8 asked\)"):
        quiet(FIG5.run, "smoke", out_dir=str(tmp_path), stage="measure", steps=8)
    with pytest.raises(ValueError, match=r"holds 32 mnist5k images, these settings probe 16"):
        quiet(FIG5.run, "smoke", out_dir=str(tmp_path), stage="measure", n_test=16)


def test_the_kept_networks_record_their_training_settings(runs):
    p = FIG5.resolve("smoke")
    for r in zoo.index("petrini_fig5", "smoke", out_dir=runs["out"]):
        assert {k: r[k] for k in TRAINED_WITH} == dict(lr=p["lr"][r["arch"]], init="pytorch", warmup=p["warmup"],
                                                       batch_size=p["batch_size"], n_val=p["n_val"]), r["arch"]


def test_refuses_networks_trained_with_other_training_settings(runs, tmp_path, monkeypatch):
    "Learning rate, initialisation, warm-up, batch size and n_val: each refused by name, with the fix."
    copy_zoo(runs, tmp_path)
    monkeypatch.setitem(FIG5.profiles["smoke"], "init", "pytorch")   # (the smoke profile leaves it to the cell's default)
    for k, v, said in (("lr", 0.05, "lr None kept, 0.05 asked"), ("init", "kaiming", "init 'pytorch' kept, 'kaiming' asked"),
                       ("warmup", 0.1, "warmup 0.2 kept, 0.1 asked"), ("batch_size", 32, "batch_size 64 kept, 32 asked"),
                       ("n_val", 64, "n_val 128 kept, 64 asked")):
        with pytest.raises(ValueError, match=re.escape(f"kept by a run of other settings ({said}): probe it with the settings of "
                                                       "the run that kept it (its profile and tag), or train one with these")):
            quiet(FIG5.run, "smoke", out_dir=str(tmp_path), stage="measure", **{k: v})


def test_networks_kept_before_the_training_settings_were_recorded_still_measure(runs, tmp_path):
    "A zoo kept by code that recorded no lr, init, warmup, batch_size or n_val loads and measures as before."
    folder = copy_zoo(runs, tmp_path)
    for f in folder.glob("*.pt"):
        blob = torch.load(f, weights_only=True)
        for k in TRAINED_WITH: del blob["provenance"][k]
        torch.save(blob, f)
    m = quiet(FIG5.run, "smoke", out_dir=str(tmp_path), stage="measure")
    for k in STABILITIES: np.testing.assert_array_equal(m[k].values, runs["measured"][k].values)


def _rewrite_probe_file(folder:Path, **fields):
    "The zoo's probe file with `fields` replaced (its other bytes as they are)."
    f = dict(np.load(folder / zoo.PROBE_FILE)) | {k: np.asarray(v) for k, v in fields.items()}
    with open(folder / zoo.PROBE_FILE, "wb") as fh: np.savez_compressed(fh, **f)


def test_refuses_probe_images_that_are_not_the_cells_draw(runs, tmp_path, monkeypatch):
    from diffgeo.experiments import petrini
    folder = copy_zoo(runs, tmp_path)
    measure, mnist = lambda: quiet(FIG5.run, "smoke", out_dir=str(tmp_path), stage="measure"), data.load("mnist5k")
    zoo.save_probe_images(folder, mnist, 32, seed=1)                     # another draw of 32 MNIST-5k test images
    _rewrite_probe_file(folder, seed=0)                                  # that says it is the cells' (seed 0)
    with pytest.raises(ValueError, match=r"holds test image \d+ at its place \d+ of 32, where the cells' draw "
                                         r"\(test.subset_indices\(32, seed=0\)\) has \d+: .*python scripts/zoo_probes.py"):
        measure()                                                        # the data set is here: its indices are compared
    def absent(name, root=None, **kw): raise FileNotFoundError(f"no {name} here")
    monkeypatch.setattr(petrini.data, "load", absent)                   # without the data set: its seed and count
    zoo.save_probe_images(folder, mnist, 32, seed=1)
    with pytest.raises(ValueError, match=r"records 32 test images drawn with seed 1; the cells probe 32 drawn with seed 0 "
                                         r"\(petrini.PROBE_SEED\).*python scripts/zoo_probes.py"):
        measure()
    zoo.save_probe_images(folder, mnist, 32, seed=0)
    _rewrite_probe_file(folder, index=np.load(folder / zoo.PROBE_FILE)["index"][:16])
    with pytest.raises(ValueError, match=r"records 16 test images drawn with seed 0; the cells probe 32"):
        measure()


def test_bad_input():
    from diffgeo.experiments.petrini_fig3 import EXPERIMENT as FIG3
    from diffgeo.scaffold import ParameterError
    with pytest.raises(ValueError, match="stage"): FIG5.run("smoke", stage="weigh")
    with pytest.raises(ValueError, match="has no 'measure' stage"): FIG3.run("smoke", stage="measure")
    with pytest.raises(ParameterError, match="has no 'measure' stage"): FIG3.arguments("smoke", stage="measure")
    with pytest.raises(TypeError, match="must be a path"): zoo.load_probe_images(None)
    with pytest.raises(TypeError, match="must be a data.DataSet"): zoo.save_probe_images("x", None, 10)
    with pytest.raises(ValueError, match="seed"): zoo.save_probe_images("x", data.load("mnist5k"), 10, seed=-1)
    with pytest.raises(FileNotFoundError, match="holds no kept network"): zoo.write_probe_images("petrini_fig5", "smoke", out_dir="/nonexistent")
    with pytest.raises(ValueError, match="no experiment"): zoo.write_probe_images("petrini_fig99", "smoke")
    from diffgeo.experiments import petrini
    with pytest.raises(ValueError, match="starts a cell of the measuring stage"): petrini.measure_setup("LeNet", 0, "mnist5k", 32)
    with pytest.raises(ValueError, match=r"shape is \(channels, side\)"): petrini.initial_network("LeNet", 0, (1,), 10)


# ------------------------------------------------------------------------------------------------ the commands

def test_zoo_probes_writes_the_runs_own_probe_file(runs, tmp_path):
    "scripts/zoo_probes.py, for a zoo kept without a probe file, writes the very file the run wrote (checked on every network)."
    folder = copy_zoo(runs, tmp_path)
    written = dict(np.load(folder / zoo.PROBE_FILE))
    (folder / zoo.PROBE_FILE).unlink()
    r = subprocess.run([str(ROOT / ".venv/bin/python"), "scripts/zoo_probes.py", "fig5", "smoke", "--out-dir", str(tmp_path)],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "32 mnist5k test images" in r.stdout and "each of the 2 networks there scores its recorded error" in r.stdout
    again = dict(np.load(folder / zoo.PROBE_FILE))
    assert sorted(again) == sorted(written) and all(np.array_equal(again[k], written[k]) for k in written)


def test_the_notebook_measures_a_smoke_zoo_through_papermill(runs, tmp_path):
    "The fig5 notebook's `-p profile smoke -p stage measure`, run for real on the smoke zoo (in a folder of its own)."
    copy_zoo(runs, tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "IN_TEST"}
    r = subprocess.run([str(ROOT / ".venv/bin/papermill"), "nbs/fig5.ipynb", str(tmp_path / "fig5.ipynb"), "-k", "python3",
                        "-p", "profile", "smoke", "-p", "stage", "measure", "-p", "out_dir", str(tmp_path)],
                       cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    out = FIG5.load(FIG5.paths("smoke", tmp_path, "measured").dataset)
    assert results.parameters(out)["stage"] == "measure"
    for k in STABILITIES: np.testing.assert_array_equal(out[k].values, runs["measured"][k].values)


def _main_job(tmp_path, *args) -> list[str]:
    "What scripts/reproduce.sh says and would run (DIFFGEO_DRY_RUN), in a copy laid out as the repository."
    for name in ("reproduce.sh", "setup.sh"):
        (tmp_path / "scripts").mkdir(exist_ok=True); shutil.copy(ROOT / "scripts" / name, tmp_path / "scripts" / name)
    for name in ("nbs", ".venv", "pyproject.toml"):
        if not (tmp_path / name).exists(): (tmp_path / name).symlink_to(ROOT / name)
    r = subprocess.run(["bash", "scripts/reproduce.sh", *args], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "DIFFGEO_DRY_RUN": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout.strip().splitlines()


def test_the_main_job_measures_by_default_where_the_zoo_is(tmp_path):
    said, command = _main_job(tmp_path)
    assert said.startswith("reproduce.sh: the training stage: no committed zoo at zoo/petrini_fig5_long_x4/") and "stage" not in command
    kept = tmp_path / "zoo" / "petrini_fig5_long_x4"
    kept.mkdir(parents=True)
    for i in range(3): (kept / f"net{i}.pt").touch()
    said, command = _main_job(tmp_path)                 # a zoo being landed (3 of 24 networks, no probe images): trains, says why
    assert said.startswith("reproduce.sh: the training stage: the zoo zoo/petrini_fig5_long_x4/ lacks 21 of its 24 networks and "
                           f"{zoo.PROBE_FILE}") and "stage" not in command
    for i in range(3, 24): (kept / f"net{i}.pt").touch()
    said, command = _main_job(tmp_path)                 # every network, still no probe images
    assert said.endswith(f"lacks {zoo.PROBE_FILE} (the measuring stage once it is complete)") and "stage" not in command
    (kept / zoo.PROBE_FILE).touch()
    said, command = _main_job(tmp_path)
    assert said.startswith("reproduce.sh: the measuring stage (-p profile long -p tag x4 -p stage measure): the committed zoo "
                           "zoo/petrini_fig5_long_x4/ holds 24 networks") and "-p stage train trains instead" in said
    assert command.endswith("--log-output -p profile long -p tag x4 -p stage measure")
    said, command = _main_job(tmp_path, "-p", "data_root", "/path/to/data")   # where the data is: still the measuring stage
    assert "-p stage measure -p data_root /path/to/data" in command
    said, command = _main_job(tmp_path, "-p", "executor", "inline")           # how the cells run: still the measuring stage
    assert "-p stage measure -p executor inline" in command
    said, command = _main_job(tmp_path, "-p", "stage", "train")                # one parameter away: the training stage
    assert said == "reproduce.sh: the training stage, as the parameters given say" and "profile" not in command


def test_the_ledger_leaves_out_a_measuring_stage_dataset(tmp_path):
    "A measured dataset probes again the networks its training run's column judges: it is no column of its own."
    from diffgeo import claims
    (tmp_path / "results").mkdir()
    shutil.copy(ROOT / "results" / "petrini_fig5.nc", tmp_path / "results" / "petrini_fig5.nc")
    ds = results.load_dataset(ROOT / "results" / "petrini_fig5.nc").load()
    p = results.parameters(ds) | {"stage": "measure", "zoo_tag": "", "tag": "measured"}
    ds.attrs["parameters"] = json.dumps(p, sort_keys=True)
    ds.to_netcdf(tmp_path / "results" / "petrini_fig5_measured.nc")
    assert list(claims.committed(FIG5, tmp_path)) == ["cpu"]
