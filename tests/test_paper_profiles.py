"""Every experiment's `paper` profile, run on the CPU in its smallest units (issue 28, section 5).

No paper profile runs anywhere else in the test suite (they take GPU-days), so a typo in one, a setting that crashes,
or a shape only the paper's data have would first show on a GPU, hours into a run. Here each experiment's paper profile
is resolved as a user resolves it (`Experiment.resolve("paper")`, then `Experiment.run("paper", **overrides)`), every
*kind* of cell its grid has runs (each architecture, data set, model, method; one seed), with the paper's shapes and
hyperparameters, and the overrides cut only the *amount* of work: one optimiser step (one epoch of one batch), the
fewest probed images, test points and samples that still take every code path. Data sets that are not on this machine
(MNIST, FashionMNIST, CIFAR-10, SVHN) are replaced by stand-in data of the real ones' shapes and dtype, served through
`diffgeo.data`'s own loader (`_find`, so that the checks, standardisation and splits run); nothing is downloaded or read
from a data folder. Each cell's dataset passes the experiment's schema as it is computed (`_call_cell`'s
`apply_schema(strict=False)`), and each merged run the full check (`Experiment.check`).

`UNITS` says, per experiment, what its runs override and what they leave out. The last tests show that the check
fails on a broken paper profile. With DIFFGEO_TEST_DEVICE=cuda the units run on a GPU: the check to make there before a
paper run."""
from __future__ import annotations

import os
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
import torch

from diffgeo import data, distort, models, results, train
from diffgeo.scaffold import REGISTRY, experiments

ROOT = Path(__file__).resolve().parents[1]
NAMES = sorted(e.name for e in experiments())   # every module of diffgeo.experiments imported; the per-paper recipes register none
EXPERIMENTS = {n: REGISTRY[n] for n in NAMES}

#: Where the units compute: "cpu", or "cuda" to check the paper profiles on a GPU before a paper run there.
DEVICE = os.environ.get("DIFFGEO_TEST_DEVICE", "cpu")
#: Image shapes of the real data sets as `diffgeo.data` reads them (uint8 [N, H, W] or [N, H, W, C], 10 classes).
SHAPES = {"mnist": (28, 28), "fashionmnist": (28, 28), "cifar10": (32, 32, 3), "svhn": (32, 32, 3)}
#: Images per optimiser step where the paper's batch is not affordable on one CPU thread (deep nets at full width).
B = 4
#: Validation images held out (Petrini et al.'s cells evaluate them after each epoch).
N_VAL = 2
#: Architectures cheap enough to probe at every δ, c, interpolation and noise radius of a paper profile.
LIGHT = ("FullConnL2", "FullConnL4", "FullConnL6", "LeNet")


@dataclass
class Unit:
    "How an experiment's paper profile is cut down to its smallest units."
    runs:list # functions (resolved paper settings) -> overrides of one `run`; together they cover every kind of cell
    standin:tuple = (0, 0) # (training, test) images of each stand-in data set ((0, 0): the experiment reads no data set)
    kinds:tuple = () # settings (lists) every value of which, in the paper profile, some run must keep
    extra:Callable|None = None # a check of what the runs cannot afford at the paper's shapes: extra(paper settings)
    uncovered:str = "" # what the unit leaves out, in words


def _light(p:dict, key:str="archs") -> list: return [a for a in p[key] if a in LIGHT]
def _heavy(p:dict, key:str="archs") -> list: return [a for a in p[key] if a not in LIGHT]


def _petrini(p:dict, light:bool, **extra) -> dict:
    """Petrini et al.'s training cells: one seed, one optimiser step (of the paper's batch for the light architectures, of
    B images for the deep ones), two probed test images (the pairs need two), `extra` besides."""
    batch = p["batch_size"] if light else B
    return {**dict(archs=(_light if light else _heavy)(p), seeds=[0], P=batch, n_val=N_VAL, steps=1, batch_size=batch, n_test=2),
            **({} if light else _main_probe(p)), **extra}


def _main_probe(p:dict) -> dict:
    "The probe grids cut to the main probe (the first c, δ = 1, the three smallest noise radii), every interpolation."
    cut = {"cs": p["cs"][:1]} if "cs" in p else {}
    if "deltas" in p: cut["deltas"] = [1.0]
    if "noise_scales" in p: cut["noise_scales"] = p["noise_scales"][:3]
    return cut


def _moskalev(p:dict, **extra) -> dict:
    "Moskalev et al.'s: one seed, one epoch of one batch (the paper's), the fewest validation and test images, one saliency step."
    return {**dict(seeds=[0], n_train=p["batch_size"], n_val=2, epochs=1, steps=1), **extra}


def _zavatoneveth_fig3_full_width(p:dict):
    "The paper's GELU ResNet at full width on CIFAR-10's shapes: the features `block_outputs` measures, one SGD step."
    from diffgeo.experiments import zavatoneveth_fig3 as z
    d = data.load(p["dataset"])
    net = z.gelu_resnet(p["arch"], d.n_channels, d.n_classes, max(d.size, models.MIN_SIZE), p["width"])
    net.eval()
    with torch.no_grad(): assert z.block_outputs(net, d.test.images[:2]).shape == (2, len(z.BLOCKS) * net.fc.in_features)
    train.train(net, d.train, epochs=1, optimizer="sgd", lr=p["lr"], momentum=p["momentum"], weight_decay=p["weight_decay"],
                batch_size=B, seed=p["seed"], progress=False)


#: Moskalev et al. drop the 9s, then split what is left into training, validation and test images.
MOSKALEV_DATA = (600, 20)
PETRINI_DATA = (128 + N_VAL, 4)
PETRINI_NOTE = "the deep nets with a batch of 4 (the paper's 128)"
UNITS = {
    "petrini_fig5": Unit([lambda p: _petrini(p, True), lambda p: _petrini(p, False)], PETRINI_DATA, kinds=("archs",),
                         uncovered=PETRINI_NOTE),
    "petrini_fig3": Unit([lambda p: _petrini(p, True), lambda p: _petrini(p, False)], PETRINI_DATA, kinds=("archs", "interps"),
                         uncovered=PETRINI_NOTE + ", probed at the main c and δ and the three smallest noise radii only"),
    "petrini_fig6": Unit([lambda p: _petrini(p, True, P=[64, 128], fit_from=64),
                          lambda p: _petrini(p, False, P=[B // 2, B], fit_from=B // 2)], PETRINI_DATA, kinds=("archs", "interps"),
                         uncovered=PETRINI_NOTE + ", probed at the main c only; P = 64, 128 (light nets), 2, 4 (deep nets)"),
    "petrini_fig12": Unit([lambda p: _petrini(p, False)], PETRINI_DATA, kinds=("archs", "augmentations", "interps"),
                          uncovered="a batch of 4 (the paper's 128); probed at the main c only"),
    "petrini_tab2": Unit([lambda p: _petrini(p, True, P=None),  # P = None: every training image left after n_val
                          lambda p: _petrini(p, False, datasets=p["datasets"][:1])],
                         PETRINI_DATA, kinds=("datasets", "archs", "interps"),
                         uncovered=PETRINI_NOTE + " and P = 4, on MNIST's shapes only (Fig. 5's unit runs them on CIFAR-10's), "
                                   "probed at the main δ and c"),
    "petrini_fig1": Unit([lambda p: dict(samples=2, T_points=3)]),
    "petrini_fig7": Unit([lambda p: dict(P=[2, 4], fit_from=2, seeds=[0], max_steps=1, n_test=2)]),
    "petrini_fig8": Unit([lambda p: dict(samples=2)]),
    "petrini_zoo": Unit([lambda p: dict(archs=["LeNet"], seeds=[0], n_probe=2, n_sigma=1, n_inv=1, si_steps=1, n_lines=1, n_same=1,
                                        divisions=2)], uncovered="one kept network of the committed zoo, two probe images, one path of each kind"),
    "detlefsen_fig3": Unit([lambda p: dict(n_train=p["batch_size"], n_test=None, epochs=1, lrs=p["lrs"][-1:], seeds=[0],
                                           probe_every=1, n_probe=2)], (100, 10), kinds=("families",),
                           uncovered="the largest learning rate only"),
    "detlefsen_fig4": Unit([lambda p: {}]),  # the whole paper profile: one picture, a second on one thread
    "detlefsen_tab2": Unit([lambda p: dict(n_train=p["batch_size"], n_test=None, epochs=1, seeds=[0])], (100, 10),
                           kinds=("models", "distortions")),
    "detlefsen_tab3": Unit([lambda p: dict(n_train=p["batch_size"], n_test=None, epochs={d: 1 for d in p["datasets"]},
                                           seeds=[0])], (100, 10), kinds=("models", "datasets")),
    "moskalev_fig2": Unit([lambda p: _moskalev(p, n_test=p["neighbours"] + 1)], MOSKALEV_DATA, kinds=("nus", "traces"),),
    "moskalev_fig4": Unit([lambda p: _moskalev(p, n_test=2)], MOSKALEV_DATA, kinds=("groups", "nus", "betas"),),
    "moskalev_fig5": Unit([lambda p: _moskalev(p, n_test=2, linear_steps=2)], MOSKALEV_DATA, kinds=("groups",),
                          uncovered="2 steps of the linear network of Proposition 3.1 (the paper's 2000)"),
    "moskalev_tab1": Unit([lambda p: _moskalev(p, n_test=p["panels"])], MOSKALEV_DATA, kinds=("groups", "nus"),),
    "rousseau_spiral": Unit([lambda p: dict(epochs=1, seeds=[0], n_train=p["batch_size"], n_test=2, size=2)],
                            kinds=("trained_with",)),
    "zavatoneveth_fig1": Unit([lambda p: dict(sinusoid_epochs=1, xor_epochs=1, side=2)],
                              kinds=("sinusoid_widths", "xor_widths")),
    "zavatoneveth_fig2": Unit([lambda p: dict(epochs=1, snapshots=[0, 1], n_lines=1, n_same=1, line_divisions=1,
                                              plane_divisions=1)], (1000, 20)),
    "zavatoneveth_fig3": Unit([lambda p: dict(epochs=1, snapshots=[0, 1], batch_size=B, n_lines=1, n_same=1,
                                              line_divisions=1, plane_divisions=1, width=1 / 16)], (B, 20),
                              extra=_zavatoneveth_fig3_full_width,
                              uncovered="the geometry at a sixteenth of the channels (its Jacobians at full width take hours "
                                        "on a CPU; the full-width network is built, its features measured once and trained one "
                                        "step), a batch of 4 (the paper's 1024)"),
    "zavatoneveth_fige1": Unit([lambda p: dict(radii=1, angles=1, draws=1)], kinds=("widths", "activations")),
}


def _standin(sizes:tuple[int, int]) -> Callable:
    "A replacement for `diffgeo.data._find`: seeded random uint8 images of the real data set's shape, every class in each split."
    n_train, n_test = sizes
    def find(name, root, download):
        rng = np.random.default_rng(zlib.crc32(name.encode()))
        arrays = []
        for n in (n_train, n_test):
            arrays += [rng.integers(0, 256, (n, *SHAPES[name]), dtype=np.uint8), rng.permutation(np.arange(n) % 10)]
        return tuple(arrays), data.CLASSES[name], f"stand-in {name} (tests/test_paper_profiles.py)"
    return find


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    "One torch thread, as the test's time budget assumes (two threads on two busy cores mostly wait for each other)."
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def standin(monkeypatch):
    "`use((n_train, n_test))` serves stand-in data sets of that many images; torchvision and the data folder are never read."
    def use(sizes:tuple[int, int]):
        monkeypatch.delenv("DIFFGEO_DATA", raising=False)
        monkeypatch.setattr(data, "_find", _standin(sizes))
        def refuse(*args, **kwargs): raise AssertionError("the paper-profile test must not read or download real data")
        monkeypatch.setattr(data, "_torchvision", refuse)
        distort.distorted_mnist.cache_clear()  # cached per process: drop another test's stand-in digits
    yield use
    distort.distorted_mnist.cache_clear()


def run_unit(name:str, tmp_path:Path):
    "Run experiment `name`'s paper profile cut down to its unit: each run's merged dataset is checked, every kind of cell ran."
    exp, unit = EXPERIMENTS[name], UNITS[name]
    paper = exp.resolve("paper")  # the paper profile as it stands, checked and completed by the experiment
    ran = {k: [] for k in unit.kinds}
    for i, overrides in enumerate(unit.runs):
        o = overrides(paper)
        ds = exp.check(exp.run("paper", device=DEVICE, work_dir=str(tmp_path / f"work{i}"), out_dir=str(tmp_path / f"out{i}"), **o))   # (kept networks under out_dir: never in the checkout)
        exp.load(results.save_dataset(ds, tmp_path / f"run{i}.nc"))  # what `main` writes and figures are drawn from
        settings = exp.resolve("paper", **o)
        for k in unit.kinds: ran[k] += [str(v) for v in settings[k]]
    for k in unit.kinds:
        assert sorted(set(ran[k])) == sorted(map(str, paper[k])), f"{name} ran {k} {sorted(set(ran[k]))}, the paper has {paper[k]}"
    if unit.extra is not None: unit.extra(paper)


@pytest.mark.parametrize("name", NAMES)
def test_paper_profile(name, tmp_path, standin):
    "Every kind of cell of the paper profile runs in its smallest unit on the CPU and passes the experiment's schema."
    standin(UNITS[name].standin)
    run_unit(name, tmp_path)


def test_every_experiment_has_a_unit():
    assert sorted(UNITS) == NAMES
    from diffgeo.experiments.petrini import _SHAPES  # the project's own record of the real data sets' shapes
    for name, shape in SHAPES.items():
        assert (shape[2] if len(shape) == 3 else 1, shape[0]) == _SHAPES[name][:2], name


#: Broken paper profiles the units must refuse: experiment -> (setting, its broken value, what the error says). Petrini
#: et al.'s are refused when the profile is resolved, Zavatone-Veth et al.'s only when a cell runs (no settings check sees them).
BROKEN = {
    "petrini_fig5": ("archs", lambda v: [*v[:-1], "EfficientNetB9"], "EfficientNetB9"),  # an unknown architecture
    "petrini_fig12": ("interps", lambda v: ["bilinaer"], "bilinaer"),  # a misspelt interpolation
    "zavatoneveth_fig2": ("activation", lambda v: "sigmiod", "sigmiod"),  # a misspelt activation
    "zavatoneveth_fig3": ("arch", lambda v: "VGG11bn", "must be a ResNet"),  # an architecture the cell cannot measure
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_broken_paper_profile_fails(name, tmp_path, standin, monkeypatch):
    "A typo monkeypatched into a paper profile makes the unit fail, naming it."
    key, broken, says = BROKEN[name]
    paper = EXPERIMENTS[name].profiles["paper"]
    monkeypatch.setitem(paper, key, broken(paper[key]))
    standin(UNITS[name].standin)
    with pytest.raises(ValueError, match=says): run_unit(name, tmp_path)
