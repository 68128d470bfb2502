"""Tests of diffgeo.results: profiles, paths, provenance, atomic netCDF and figure writes."""
import datetime as dt
import json
import os
import re
import stat
import subprocess
from pathlib import Path

import matplotlib
import numpy as np
import pytest
import torch
import xarray as xr

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import diffgeo  # noqa: E402
import diffgeo.results as results  # noqa: E402
from diffgeo.results import (COMMITTED_PROFILES, PROFILE_NAMES, check_cf, git_commit, load_dataset, now, parameters,  # noqa: E402
                             project_root, provenance, resolve_path, save_dataset, save_figure, select_profile, stamp)

TABLE = {"smoke": {"n": 8, "seeds": 1}, "cpu": {"n": 64, "seeds": 3}, "long": {"n": 128, "seeds": 3}, "paper": {"n": 320, "seeds": 10}}
PROVENANCE_KEYS = {"parameters", "diffgeo_version", "git_commit", "code_hash", "torch_version", "device", "processor", "cpu_threads", "start_time", "end_time"}


def make_dataset(stamped: bool = True) -> xr.Dataset:
    ds = xr.Dataset(
        {"err": (("arch", "T"), np.array([[0.1, 0.2, 0.3], [0.4, 0.5, 0.6]]), {"long_name": "test error", "units": "1"}),
         "count": ("arch", np.array([3, 4], dtype=np.int32), {"long_name": "number of runs", "units": "1"})},
        coords={"arch": ("arch", ["fc", "cnn"], {"long_name": "architecture", "units": "1"}),
                "T": ("T", np.array([1e-4, 1e-3, 1e-2]), {"long_name": "temperature", "units": "1"})},
        attrs={"title": "a test"})
    # fixed times: two calls must give identical datasets even when a second ticks between them
    when = "2026-01-01T00:00:00+00:00"
    return stamp(ds, {"profile": "smoke", "seed": 0, "T": [1e-4, 1e-3]}, "cpu", when, when) if stamped else ds


@pytest.fixture
def root(tmp_path, monkeypatch):
    "A stand-in working directory, so that relative paths never write into the checkout."
    r = tmp_path / "root"
    r.mkdir()
    monkeypatch.chdir(r)
    return r


# ------------------------------------------------------------------------------------------------ profiles

class TestSelectProfile:
    @pytest.mark.parametrize("profile", PROFILE_NAMES)
    def test_lookup(self, profile):
        assert select_profile(profile, TABLE) == TABLE[profile]

    def test_returns_a_copy(self):
        out = select_profile("cpu", TABLE)
        out["n"] = -1
        assert TABLE["cpu"]["n"] == 64

    def test_overrides(self):
        assert select_profile("smoke", TABLE, n=16) == {"n": 16, "seeds": 1}
        assert select_profile("smoke", TABLE, n=None, seeds=None) == TABLE["smoke"]  # None keeps the profile's value
        assert select_profile("smoke", TABLE, n=0) == {"n": 0, "seeds": 1}          # falsy but not None

    def test_unknown_profile_lists_names(self):
        with pytest.raises(ValueError, match=r"unknown profile 'laptop'; valid values are 'smoke', 'cpu', 'long', 'paper'"):
            select_profile("laptop", TABLE)

    def test_profile_missing_from_table_lists_table(self):
        with pytest.raises(ValueError, match=r"unknown profile 'paper'; valid values are 'smoke', 'cpu'"):
            select_profile("paper", {"smoke": {"n": 8}, "cpu": {"n": 64}})

    def test_unknown_setting_lists_valid(self):
        with pytest.raises(ValueError, match=re.escape("unknown setting(s) ['m']; valid ones are ['n', 'seeds']")):
            select_profile("cpu", TABLE, m=3)


# ------------------------------------------------------------------------------------------------ paths

class TestProjectRoot:
    def test_is_the_checkout(self):
        r = project_root()
        assert (r / "pyproject.toml").exists() and (r / "nbs").is_dir()
        assert Path(diffgeo.__file__).resolve().parent == r / "diffgeo"

    def test_independent_of_cwd(self, tmp_path, monkeypatch):
        before = project_root()
        monkeypatch.chdir(tmp_path)
        assert project_root() == before != tmp_path

    def test_installed_package_falls_back_to_cwd(self, tmp_path, monkeypatch):
        "Installed from a wheel (no pyproject.toml beside the package): relative paths are taken from the cwd."
        fake = tmp_path / "site-packages" / "diffgeo" / "__init__.py"
        fake.parent.mkdir(parents=True)
        fake.touch()
        monkeypatch.setattr(diffgeo, "__file__", str(fake))
        monkeypatch.chdir(tmp_path)
        assert project_root() == tmp_path


class TestResolvePath:
    @pytest.mark.parametrize("rel", ["data/x.nc", "x.nc", Path("figures") / "a" / "b.png"])
    def test_relative_under_the_working_directory(self, rel, tmp_path, monkeypatch):
        "A user's own folder, not the diffgeo checkout, receives `save_dataset(ds, 'out/my.nc')`."
        monkeypatch.chdir(tmp_path)
        out = resolve_path(rel)
        assert out == tmp_path / rel and out.is_absolute()
        assert project_root() not in out.parents

    def test_absolute_unchanged(self, tmp_path):
        assert resolve_path(tmp_path / "x.nc") == tmp_path / "x.nc"
        assert resolve_path(str(tmp_path / "x.nc")) == tmp_path / "x.nc"

    def test_home(self, tmp_path, monkeypatch):
        monkeypatch.setenv("HOME", str(tmp_path))
        assert resolve_path("~/x.nc") == tmp_path / "x.nc"


class TestOutputRoot:
    "Default outputs go under the project root from anywhere inside the checkout, else under the working directory."
    def test_at_the_root_relative(self, monkeypatch):
        monkeypatch.chdir(project_root())
        assert results.output_root() == Path(".")

    @pytest.mark.parametrize("sub", ["nbs", "tests", "diffgeo/experiments"])
    def test_inside_the_checkout_the_root(self, sub, monkeypatch):
        monkeypatch.chdir(project_root() / sub)
        assert results.output_root() == project_root() and results.output_root().is_absolute()

    def test_outside_the_checkout_the_working_directory(self, tmp_path, monkeypatch):
        monkeypatch.chdir(tmp_path)
        assert results.output_root() == Path(".")


ROOT = Path(__file__).resolve().parents[1]


def _toy_experiment(figure: str):
    "A one-axis sweep experiment with one figure, registered under `petrini_<figure>` (remove it from REGISTRY after use)."
    from diffgeo.scaffold import Experiment, Var
    exp = Experiment("petrini", figure, {"smoke": {"n": 3}, "cpu": {"n": 5}},
                     {"x": Var(("seed", "draw"), "draws"), "seed": Var(("seed",), "seed"), "draw": Var(("draw",), "draw")},
                     grid=lambda p: {"seed": [0, 1]})

    @exp.cell
    def cell(seed: int, n: int):
        return xr.Dataset({"x": ("draw", np.random.default_rng(seed).standard_normal(n))}, coords={"draw": np.arange(n)})

    @exp.figure(figure)
    def draw(ds):
        fig, ax = plt.subplots()
        ax.plot(ds.x.mean("draw"))
        return fig
    return exp


class TestDefaultOutputs:
    "An experiment run from anywhere inside the checkout writes to the same folders, each ignored by git or committed on purpose."
    @pytest.fixture
    def fake_checkout(self, tmp_path, monkeypatch):
        "A stand-in checkout (results.project_root() is it), so that runs never write into the real one."
        root = tmp_path / "checkout"
        (root / "nbs").mkdir(parents=True)
        (root / "pyproject.toml").touch()
        monkeypatch.setattr(results, "project_root", lambda: root)
        return root

    @pytest.fixture
    def toy(self):
        from diffgeo.scaffold import REGISTRY
        exp = _toy_experiment("outputs_toy")
        yield exp
        del REGISTRY[exp.name]

    def test_main_from_nbs_and_from_the_root_writes_the_same_files(self, fake_checkout, toy, monkeypatch, capsys):
        monkeypatch.chdir(fake_checkout / "nbs")   # JupyterLab's kernel, nbdev-test
        from_nbs = toy.paths("smoke")
        a = toy.main("smoke", show=False)
        plt.close("all")
        assert not any((fake_checkout / "nbs").iterdir())  # nothing beside the notebooks
        assert (fake_checkout / "out" / "smoke" / "results" / "petrini_outputs_toy.nc").exists()
        assert (fake_checkout / "out" / "smoke" / "figures" / "petrini_outputs_toy.png").exists()
        monkeypatch.chdir(fake_checkout)            # papermill from the root
        from_root = toy.paths("smoke")
        for x, y in [(from_nbs.dataset, from_root.dataset), (from_nbs.work, from_root.work), *zip(from_nbs.figures.values(), from_root.figures.values())]:
            assert resolve_path(x) == resolve_path(y)
        b = toy.main("smoke", show=False)
        plt.close("all")
        np.testing.assert_array_equal(a.cell_start.values, b.cell_start.values)   # the same shards, read back
        assert sorted(p.name for p in fake_checkout.iterdir()) == ["nbs", "out", "pyproject.toml"]
        assert toy.paths("cpu").dataset == Path("results/petrini_outputs_toy.nc")  # from the root: relative, as before
        monkeypatch.chdir(fake_checkout / "nbs")
        assert toy.paths("cpu").dataset == fake_checkout / "results" / "petrini_outputs_toy.nc"
        assert toy.paths("smoke", out_dir="run").dataset == Path("run/results/petrini_outputs_toy.nc")  # explicit: from the cwd

    def test_outside_a_checkout_the_working_directory(self, toy, tmp_path, monkeypatch):
        monkeypatch.chdir(tmp_path)
        assert toy.paths("smoke").dataset == Path("out/smoke/results/petrini_outputs_toy.nc")
        assert toy.paths("cpu").work.parts[:3] == ("out", "work", "petrini_outputs_toy")

    @pytest.mark.skipif(not (ROOT / ".git").exists(), reason="not a git checkout")
    def test_every_output_folder_is_ignored_or_committed(self, monkeypatch):
        "Every file or folder an experiment run (from the root or nbs/) or nbdev-test creates is ignored by git, or is a committed profile's (cpu, long, paper) results/ and figures/."
        import importlib
        from diffgeo.scaffold import REGISTRY
        for f in sorted((ROOT / "diffgeo" / "experiments").glob("[a-z]*.py")): importlib.import_module(f"diffgeo.experiments.{f.stem}")
        made, committed = [], []
        for cwd in (ROOT, ROOT / "nbs"):
            monkeypatch.chdir(cwd)
            for exp in REGISTRY.values():
                for profile in exp.profiles:
                    p = exp.paths(profile, settings={"n": 1})
                    for path in [p.dataset, *p.figures.values(), p.work / "shards" / "x.nc", p.work / "checkpoints" / "x.pt",
                                 p.work / "submitit" / "1" / "log.out"]:
                        rel = resolve_path(path).relative_to(ROOT)
                        (committed if profile in COMMITTED_PROFILES and rel.parts[0] in ("results", "figures") and len(rel.parts) == 2 else made).append(rel)
        # what runs from nbs/ wrote before default outputs went to the root, and nbdev-test's outputs
        made += [Path("nbs/out/smoke/results/x.nc"), Path("nbs/results/x.nc"), Path("nbs/figures/x.png"), Path("out/x")]
        listed = subprocess.run(["git", "check-ignore", "--no-index", "--stdin"], cwd=ROOT, input="\n".join(map(str, made)),
                                capture_output=True, text=True).stdout.split()
        assert sorted(set(map(str, made)) - set(listed)) == []
        assert {p.parts[0] for p in committed} == {"results", "figures"}
        tracked = subprocess.run(["git", "ls-files", "results", "figures"], cwd=ROOT, capture_output=True, text=True).stdout
        assert "results/petrini_fig5.nc" in tracked and "figures/petrini_fig15.png" in tracked


# ------------------------------------------------------------------------------------------------ provenance

class TestProvenance:
    def test_keys(self):
        attrs = provenance({"seed": 0}, "cpu", now())
        assert PROVENANCE_KEYS <= set(attrs)
        assert all(isinstance(v, str) for v in attrs.values())  # netCDF attributes

    def test_values(self):
        start = now()
        attrs = provenance({"seed": 0, "T": 1e-3, "profile": "smoke"}, torch.device("cpu"), start)
        assert json.loads(attrs["parameters"]) == {"seed": 0, "T": 1e-3, "profile": "smoke"}
        assert attrs["diffgeo_version"] == diffgeo.__version__
        assert attrs["torch_version"] == torch.__version__
        assert attrs["device"] == "cpu"
        assert attrs["start_time"] == start
        t0, t1 = dt.datetime.fromisoformat(attrs["start_time"]), dt.datetime.fromisoformat(attrs["end_time"])
        assert t0.tzinfo is not None and t0 <= t1
        assert re.fullmatch(r"[0-9a-f]{40}(-dirty)?|unknown", attrs["git_commit"])

    def test_parameters_json_sorted_and_lenient(self):
        "Keys are sorted (stable files) and values that JSON cannot hold are stored as strings."
        attrs = provenance({"b": 1, "a": torch.device("cpu"), "p": Path("/tmp/x")}, "cpu", now())
        assert attrs["parameters"] == '{"a": "cpu", "b": 1, "p": "/tmp/x"}'

    def test_stamp_in_place(self):
        ds = xr.Dataset()
        assert stamp(ds, {"seed": 1}, "cuda:0", now()) is ds
        assert PROVENANCE_KEYS <= set(ds.attrs) and ds.attrs["device"] == "cuda:0"
        assert parameters(ds) == {"seed": 1}


class TestGitCommit:
    def git(self, repo, *args):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "commit.gpgsign=false",
                        *args], cwd=repo, check=True, capture_output=True)

    def committed(self, repo):
        "A new repository at `repo` with one commit of a.txt."
        repo.mkdir()
        self.git(repo, "init", "-q")
        (repo / "a.txt").write_text("1")
        self.git(repo, "add", "a.txt")
        self.git(repo, "commit", "-q", "-m", "first")
        return repo

    def test_clean_dirty_untracked(self, tmp_path, monkeypatch):
        repo = self.committed(tmp_path / "repo")
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
        assert git_commit(repo) == sha
        (repo / "new.txt").write_text("untracked files do not make the tree dirty")
        assert git_commit(repo) == sha
        (repo / "a.txt").write_text("2")
        assert git_commit(repo) == sha + "-dirty"

    def test_the_checkout_by_default(self):
        assert git_commit() == git_commit(project_root()) != "unknown"

    def test_outside_git(self, tmp_path, monkeypatch):
        monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
        assert git_commit(tmp_path) == "unknown"

    def test_git_missing(self, monkeypatch):
        def no_git(*args, **kwargs): raise FileNotFoundError("git")
        monkeypatch.setattr(results.subprocess, "run", no_git)
        assert git_commit() == "unknown"

    def test_installed_package_records_no_commit_of_the_working_directory(self, tmp_path, monkeypatch):
        "Installed from a wheel, the package is in no checkout: the repository the user happens to be in is not its commit."
        repo = self.committed(tmp_path / "users_repo")
        fake = tmp_path / "site-packages" / "diffgeo" / "__init__.py"
        fake.parent.mkdir(parents=True)
        fake.touch()
        monkeypatch.setattr(diffgeo, "__file__", str(fake))
        monkeypatch.chdir(repo)
        assert project_root() == repo          # relative paths still go to the working directory
        assert git_commit() == "unknown"


class TestCodeVersion:
    def package(self, tmp_path, monkeypatch):
        "A stand-in package folder that `diffgeo.__path__` names."
        pkg = tmp_path / "pkg"
        (pkg / "sub").mkdir(parents=True)
        (pkg / "__init__.py").write_text("x = 1\n")
        (pkg / "sub" / "mod.py").write_text("y = 2\n")
        monkeypatch.setattr(diffgeo, "__path__", [str(pkg)])
        return pkg

    def test_editor_lock_files_and_caches_are_not_source(self, tmp_path, monkeypatch):
        "Emacs's lock file (a dangling symlink .#name.py), hidden files and __pycache__ are not hashed (nor crash it)."
        pkg = self.package(tmp_path, monkeypatch)
        before = results._source_hash()
        (pkg / ".#__init__.py").symlink_to("user@host.1234:1700000000")       # dangling, as Emacs makes it
        (pkg / "sub" / ".#mod.py").symlink_to(pkg / "sub" / "mod.py")
        (pkg / ".hidden.py").write_text("z = 3\n")
        (pkg / "__pycache__").mkdir()
        (pkg / "__pycache__" / "stray.py").write_text("w = 4\n")
        (pkg / "folder.py").mkdir()                                             # not a regular file
        assert results._source_hash() == before
        (pkg / "sub" / "mod.py").write_text("y = 3\n")
        assert results._source_hash() != before

    def test_provenance_commit_is_the_code_versions(self, monkeypatch):
        "`git_commit` and `code_hash` of the provenance describe the same code: the commit is not looked up afresh."
        code = results.code_version()
        monkeypatch.setattr(results, "git_commit", lambda *a, **k: "a commit made after the import")
        attrs = provenance({"seed": 0}, "cpu", now())
        assert (attrs["git_commit"], attrs["code_hash"]) == (code["commit"], code["source_hash"])


# ------------------------------------------------------------------------------------------------ netCDF

class TestCheckCf:
    def test_complete(self):
        check_cf(make_dataset())

    @pytest.mark.parametrize("name, attr", [("err", "units"), ("count", "long_name"), ("arch", "units"), ("T", "long_name")])
    def test_names_the_culprit(self, name, attr):
        ds = make_dataset()
        del ds[name].attrs[attr]
        with pytest.raises(ValueError, match=re.escape(f"variables ['{name}'] need 'long_name' and 'units'")):
            check_cf(ds)


class TestSaveDataset:
    def test_round_trip(self, tmp_path):
        ds = make_dataset()
        path = save_dataset(ds, tmp_path / "sub" / "r.nc")
        assert path == tmp_path / "sub" / "r.nc"
        back = load_dataset(path)
        xr.testing.assert_identical(back, results.cf_conventions(ds))  # values, coords, attributes, and the CF ones added
        assert back["count"].dtype == np.int32 and back["err"].dtype == np.float64
        assert list(back["arch"].values) == ["fc", "cnn"]
        assert parameters(back) == {"profile": "smoke", "seed": 0, "T": [1e-4, 1e-3]}
        assert {k: back.attrs[k] for k in ds.attrs} == ds.attrs
        assert os.listdir(path.parent) == ["r.nc"]  # no temporary left behind

    def test_compressed_and_lossless(self, tmp_path):
        "Numeric variables are stored with zlib: a file of repeated values is small, random float64 values come back bit for bit."
        ds = make_dataset()
        rng = np.random.default_rng(0)
        ds["noise"] = (("n",), rng.standard_normal(50_000), {"long_name": "noise", "units": "1"})
        ds["flat"] = (("n",), np.where(rng.random(50_000) < 0.1, np.nan, 0.5), {"long_name": "mostly one value", "units": "1"})
        path = save_dataset(ds, tmp_path / "c.nc")
        back = load_dataset(path)
        np.testing.assert_array_equal(back.noise.values, ds.noise.values)
        np.testing.assert_array_equal(back.flat.values, ds.flat.values)   # NaN where NaN
        assert path.stat().st_size < 0.75 * 2 * 50_000 * 8, "numeric variables are not compressed"

    def test_a_variables_own_encoding_is_kept(self, tmp_path):
        "A packing the variable asks for (dtype, scale) survives the compression."
        ds = make_dataset()
        ds["err"].encoding.update(dtype="int16", scale_factor=0.001, _FillValue=-1)
        back = load_dataset(save_dataset(ds, tmp_path / "e.nc"))
        assert back["err"].encoding["dtype"] == np.int16 and back["err"].encoding["scale_factor"] == 0.001
        np.testing.assert_allclose(back["err"].values, ds["err"].values, atol=5e-4)

    def test_overwrites(self, tmp_path):
        path = tmp_path / "r.nc"
        save_dataset(make_dataset(), path)
        ds = make_dataset()
        ds["err"] = ds["err"] * 2
        save_dataset(ds, path)
        np.testing.assert_array_equal(load_dataset(path)["err"].values, ds["err"].values)
        assert os.listdir(tmp_path) == ["r.nc"]

    def test_relative_path_under_the_working_directory(self, root):
        path = save_dataset(make_dataset(), "out/r.nc")
        assert path == root / "out" / "r.nc" and path.exists()
        xr.testing.assert_identical(load_dataset("out/r.nc"), results.cf_conventions(make_dataset()))

    @pytest.mark.parametrize("previous", [True, False])
    def test_atomic(self, tmp_path, monkeypatch, previous):
        "A write that fails half-way leaves the previous file untouched and no temporary file behind."
        path = tmp_path / "r.nc"
        if previous:
            save_dataset(make_dataset(), path)
        before = path.read_bytes() if previous else None

        def broken(self, target, *args, **kwargs):
            Path(target).write_bytes(b"CDF\x01 half a file")  # part of a file, then the failure
            raise OSError("disk full")

        monkeypatch.setattr(xr.Dataset, "to_netcdf", broken)
        with pytest.raises(OSError, match="disk full"):
            save_dataset(make_dataset(), path)
        assert os.listdir(tmp_path) == (["r.nc"] if previous else [])
        if previous:
            assert path.read_bytes() == before

    def test_interrupted(self, tmp_path, monkeypatch):
        "Also for KeyboardInterrupt (Ctrl-C during a long write)."
        path = tmp_path / "r.nc"
        save_dataset(make_dataset(), path)
        before = path.read_bytes()

        def interrupted(self, target, *args, **kwargs):
            Path(target).write_bytes(b"CDF")
            raise KeyboardInterrupt

        monkeypatch.setattr(xr.Dataset, "to_netcdf", interrupted)
        with pytest.raises(KeyboardInterrupt):
            save_dataset(make_dataset(), path)
        assert os.listdir(tmp_path) == ["r.nc"] and path.read_bytes() == before

    @pytest.mark.parametrize("name, attr", [("err", "long_name"), ("arch", "units")])
    def test_refuses_missing_cf(self, tmp_path, name, attr):
        ds = make_dataset()
        del ds[name].attrs[attr]
        with pytest.raises(ValueError, match=re.escape(f"['{name}'] need 'long_name' and 'units'")):
            save_dataset(ds, tmp_path / "r.nc")
        assert os.listdir(tmp_path) == []

    def test_refuses_missing_provenance(self, tmp_path):
        with pytest.raises(ValueError, match=r"no provenance; call results.stamp\(ds, params, device, start\) first"):
            save_dataset(make_dataset(stamped=False), tmp_path / "r.nc")
        assert os.listdir(tmp_path) == []

    def test_permissions_follow_umask(self, tmp_path):
        "The temporary file of mkstemp is 0600; the saved file must get the usual permissions, as a plain write would."
        save_dataset(make_dataset(), tmp_path / "r.nc")
        save_figure(plt.figure(), tmp_path / "f.png")
        plt.close("all")
        (tmp_path / "plain").write_text("x")  # what open() gives under the current umask
        mode = lambda p: stat.S_IMODE(os.stat(p).st_mode)
        assert mode(tmp_path / "r.nc") == mode(tmp_path / "plain")
        assert mode(tmp_path / "f.png") == mode(tmp_path / "plain")


class TestLoadDataset:
    def test_in_memory_and_closed(self, tmp_path):
        "The data are loaded and the file closed: it can be replaced or removed while the dataset is in use."
        path = save_dataset(make_dataset(), tmp_path / "r.nc")
        back = load_dataset(path)
        save_dataset(make_dataset(), path)  # overwrite while `back` is alive
        path.unlink()
        np.testing.assert_array_equal(back["err"].values, make_dataset()["err"].values)

    def test_missing_file(self, tmp_path):
        with pytest.raises(FileNotFoundError):
            load_dataset(tmp_path / "nothing.nc")


# ------------------------------------------------------------------------------------------------ figures

class TestSaveFigure:
    @pytest.mark.parametrize("suffix, magic", [(".png", b"\x89PNG"), (".pdf", b"%PDF"), (".svg", b"<?xml")])
    def test_formats(self, tmp_path, suffix, magic):
        fig, ax = plt.subplots()
        ax.plot([0, 1], [0, 1])
        path = save_figure(fig, tmp_path / "figs" / f"f{suffix}")
        plt.close(fig)
        assert path.read_bytes().startswith(magic)
        assert os.listdir(path.parent) == [f"f{suffix}"]

    def test_relative_path_under_the_working_directory(self, root):
        fig = plt.figure()
        path = save_figure(fig, "figures/f.png")
        plt.close(fig)
        assert path == root / "figures" / "f.png" and path.exists()

    def test_atomic(self, tmp_path, monkeypatch):
        path = tmp_path / "f.png"
        fig = plt.figure()
        save_figure(fig, path)
        before = path.read_bytes()

        def broken(self, target, *args, **kwargs):
            Path(target).write_bytes(b"\x89PNG half")
            raise RuntimeError("renderer crashed")

        monkeypatch.setattr(type(fig), "savefig", broken)
        with pytest.raises(RuntimeError, match="renderer crashed"):
            save_figure(fig, path)
        plt.close(fig)
        assert os.listdir(tmp_path) == ["f.png"] and path.read_bytes() == before


def test_a_committed_dataset_loads_from_anywhere(tmp_path, monkeypatch):
    "A relative path missing from the working directory is read from the checkout's root: the README's examples run anywhere."
    monkeypatch.chdir(tmp_path)
    ds = results.load_dataset("results/petrini_fig5.nc")
    assert ds.attrs["experiment"] == "petrini_fig5" and "d_diffeo" in ds            # the committed file, read from the root
    with pytest.raises(FileNotFoundError, match=r"(?s)working directory .*checkout .*results/ folder"):
        results.load_dataset("results/no_such_experiment.nc")
    (tmp_path / "results").mkdir()
    with pytest.raises(FileNotFoundError, match="no dataset at"):      # an absolute path is taken as it is
        results.load_dataset(tmp_path / "results" / "petrini_fig5.nc")


def test_saved_files_declare_cf_conventions_and_flags(tmp_path):
    "A saved dataset says Conventions = CF-1.x; an indicator variable ('1 if ...') carries flag_values and flag_meanings."
    ds = xr.Dataset({"skip": ("arch", np.array([0, 1, 1])), "x": ("arch", np.arange(3.0))},
                    coords={"arch": ["a", "b", "c"], "bn": ("arch", np.array([True, False, True]))})
    ds.skip.attrs.update(results.cf_attrs("1 if the net has skip connections"))
    ds.bn.attrs.update(results.cf_attrs("1 where the net has batch-norm"))
    ds.x.attrs.update(results.cf_attrs("a measure")); ds.arch.attrs.update(results.cf_attrs("architecture"))
    results.stamp(ds, {"seed": 0}, "cpu", results.now())
    back = results.load_dataset(results.save_dataset(ds, tmp_path / "r.nc"))
    assert re.fullmatch(r"CF-1\.\d+", back.attrs["Conventions"])
    for name in ("skip", "bn"):
        assert list(back[name].attrs["flag_values"]) == [0, 1] and back[name].attrs["flag_meanings"] == "false true", name
    assert "flag_values" not in back.x.attrs and "Conventions" not in ds.attrs and "flag_values" not in ds.skip.attrs  # ds unchanged


def test_core_hours_of_a_sweep_and_of_one_cell():
    "A sweep's core-hours sum its cells' times; a one-cell run's is its provenance's wall time; neither: a clear error."
    sweep = xr.Dataset({"cell_start": ("arch", ["2026-01-01T00:00:00+00:00", "2026-01-01T00:00:00+00:00"]),
                        "cell_end": ("arch", ["2026-01-01T01:00:00+00:00", "2026-01-01T00:30:00+00:00"])})
    assert results.core_hours(sweep) == 1.5
    one = xr.Dataset(attrs={"start_time": "2026-01-01T00:00:00+00:00", "end_time": "2026-01-01T02:15:00+00:00"})
    assert results.core_hours(one) == 2.25
    with pytest.raises(ValueError, match="start_time and end_time"): results.core_hours(xr.Dataset())
