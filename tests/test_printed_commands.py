"""Issue 60: every command the documentation prints runs as printed.

The commands are read from the notebooks' prose (every markdown cell of nbs/), the README and the comments of
scripts/reproduce.sh: `papermill ...`, `bash scripts/reproduce.sh ...`, `diffgeo ...` (and `python -m diffgeo.cli ...`),
`scripts/long_job.sh ...`, `scripts/zoo_probes.py ...`, and in an experiment notebook's prose (or the README's, for the flagship) the bare papermill
options it prints (`-p profile long -p data_root /path/to/data`). Each is parsed by the program that would run it
(papermill's and diffgeo's own option parsers), its parameters are given to the notebook's parameters cell and its
`main` call as papermill would give them, and `Experiment.arguments`, what `main` does before it computes anything,
resolves them: a list passed as text, a yes-or-no word, a setting the profile lacks, a committed run's files written
over, a parameter the notebook does not declare, each fails here. A few run for real, cheaply: the README's direct
papermill command at the smoke profile, reproduce.sh's `--help-notebook`, and a wrong value, which must stop the main
job within seconds with a short traceback whose last line says how to give it.
"""
import ast
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NBS = ROOT / "nbs"
FLAGSHIP = "fig5"   # scripts/reproduce.sh's notebook when FLAGSHIP is not set, and the one the README's options are for
PLACEHOLDERS = ("/path/to/data", "DIR", "$DIFFGEO_DATA", None)   # the data folders the prose prints


def _cells(path:Path) -> list:
    return json.loads(path.read_text())["cells"]


def _source(cell) -> str:
    return "".join(cell["source"])


def _parameters_cell(nb:str) -> str|None:
    "The source of notebook `nb`'s parameters cell, or None."
    path = NBS / f"{nb}.ipynb"
    if not path.exists(): return None
    found = [_source(c) for c in _cells(path) if "parameters" in c.get("metadata", {}).get("tags", [])]
    return found[0] if found else None


def _texts():
    "(where, the notebook its bare options are for or None, markdown text) of every place that prints commands."
    for path in sorted(NBS.glob("*.ipynb")):
        context = FLAGSHIP if path.stem == "index" else path.stem if _parameters_cell(path.stem) else None
        for i, c in enumerate(_cells(path)):
            if c["cell_type"] == "markdown": yield f"nbs/{path.name}, cell {i}", context, _source(c)
            for o in c.get("outputs", []):   # a cell that writes prose (the README's Quickstart)
                if "text/markdown" in o.get("data", {}): yield f"nbs/{path.name}, cell {i}'s output", context, "".join(o["data"]["text/markdown"])
    yield "README.md", FLAGSHIP, (ROOT / "README.md").read_text()
    comments = [l.lstrip("#").strip() for l in (ROOT / "scripts/reproduce.sh").read_text().splitlines() if l.startswith("#")]
    yield "scripts/reproduce.sh", FLAGSHIP, "\n".join(f"`{l}`" for l in comments if "scripts/" in l and " " in l)


def _snippets(text:str) -> list[tuple[str, bool]]:
    "(code, whether it is an inline span) of a markdown text: the lines of its shell blocks, continuations joined, and its inline spans."
    out = []
    def block(m):
        if m[1] in ("sh", "bash", "shell", ""):
            out.extend((line, False) for line in m[2].replace("\\\n", " ").splitlines() if line.strip())
        return ""
    text = re.sub(r"^[ \t]*```(\w*)\n(.*?)^[ \t]*```", block, text, flags=re.M | re.S)   # a fence may be indented (in a list)
    out.extend((m.replace("\n", " "), True) for m in re.findall(r"`([^`]+)`", text))
    return out


def _segments(code:str) -> list[list[str]]:
    "The simple commands of a line of shell: its tokens split at ; & && | ||, `for ...; do` and `done` left out."
    lex = shlex.shlex(code, posix=True, punctuation_chars=";&|")
    lex.whitespace_split = True
    try: tokens = list(lex)
    except ValueError: return []      # not shell (an unclosed quote in prose)
    segments, cur = [], []
    for t in tokens + [";"]:
        if t and set(t) <= set(";&|"):
            if cur: segments.append(cur)
            cur = []
        else: cur.append(t)
    return [s[1:] if s[0] == "do" else s for s in segments if s[0] not in ("for", "done", "wait")]


def _command(tokens:list[str]) -> tuple[dict, list[str]]|None:
    "(environment, argv from the program on) of a printed papermill, diffgeo, reproduce.sh, long_job.sh or zoo_probes.py command, or None."
    env = {}
    while tokens and re.match(r"^[A-Za-z_]\w*=", tokens[0]):
        k, _, v = tokens[0].partition("="); env[k] = v; tokens = tokens[1:]
    if tokens[:1] in (["srun"], ["sudo"]):                   # a wrapper and its options
        tokens = tokens[1:]
        while tokens and tokens[0].startswith("-"): tokens = tokens[1:]
    if tokens[:1] in (["bash"], ["python"], ["python3"]) and len(tokens) > 1 and tokens[1].startswith("scripts/"): tokens = tokens[1:]
    if len(tokens) > 2 and Path(tokens[0]).name.startswith("python") and tokens[1:3] == ["-m", "diffgeo.cli"]:
        return env, ["diffgeo", *tokens[3:]]
    if tokens and Path(tokens[0]).name in ("papermill", "diffgeo", "reproduce.sh", "long_job.sh", "zoo_probes.py"):
        return env, [Path(tokens[0]).name, *tokens[1:]]
    return None


def _options(tokens:list[str]) -> bool:
    "Whether `tokens` are papermill parameter options only, each whole: -p NAME VALUE, -r NAME VALUE, -y YAML."
    i = 0
    while i < len(tokens):
        n = {"-p": 3, "--parameters": 3, "-r": 3, "--parameters_raw": 3, "-y": 2, "--parameters_yaml": 2}.get(tokens[i])
        if n is None or i + n > len(tokens) or any(t.startswith("-") and not re.match(r"^-\d", t) for t in tokens[i + 1:i + n]): return False
        i += n
    return bool(tokens)


def printed_commands() -> list[tuple[str, str, dict, list[str]]]:
    "(where, the command as printed, environment, argv) of every printed command."
    found, seen = [], set()
    for where, context, text in _texts():
        for code, inline in _snippets(text):
            for seg in _segments(code):
                seg = [("/path/to/data" if i > 1 and seg[i - 2] in ("-p", "-r") else None) if t == "..." else t
                       for i, t in enumerate(seg)]          # `-p data_root ...`: a path left out; `papermill nb ...`: the rest
                seg = seg[:seg.index(None)] if None in seg else seg
                cmd = _command(seg)
                if cmd and cmd[1][0] == "papermill" and len(cmd[1]) == 2:   # `papermill nbs/X.ipynb ...`: its output path
                    cmd[1].append(f"out/{Path(cmd[1][1]).name}")
                if cmd and cmd[1][0] == "diffgeo" and len(cmd[1]) < 3: continue   # `diffgeo plan`: the program named, not run
                if cmd is None and inline and context and _options(seg):   # bare options, for the notebook of the prose
                    cmd = {}, ["papermill", f"nbs/{context}.ipynb", f"out/{context}.ipynb", "-k", "python3", *seg]
                if cmd is None: continue
                key = (json.dumps(cmd), where.split(",")[0])
                if key not in seen: seen.add(key); found.append((where, code, *cmd))
    return found


COMMANDS = printed_commands()


def _ids(cmds): return [f"{w}: {' '.join(a)[:90]}" for w, _, _, a in cmds]


def test_the_documented_commands_are_found():
    "The extraction finds the commands the issue names (so that the checks below cannot pass on nothing)."
    printed = [" ".join(a) for _, _, _, a in COMMANDS]
    for want in ('-p seeds [0, 1, 2, 3]', '-p lrs [0.004, 0.006, 0.008]', "reproduce.sh -p dataset cifar10", "diffgeo plan fig5"):
        assert any(want in p for p in printed), f"no printed command has {want!r}"
    assert any(e.get("FLAGSHIP") for _, _, e, _ in COMMANDS), "no FLAGSHIP=... command found"
    assert len(COMMANDS) > 40


# ------------------------------------------------------------------------------------------------ papermill's parameters

def _papermill_parameters(argv:list[str]) -> tuple[str, dict, dict]:
    "(the notebook's name, papermill's parameters, its other options) of a papermill command line, parsed as papermill's CLI does."
    import yaml
    from papermill import cli
    ctx = cli.papermill.make_context("papermill", list(argv[1:]))
    p = ctx.params
    final = {}
    for params in p["parameters_yaml"] or []: final.update(yaml.load(params, Loader=cli.NoDatesSafeLoader) or {})
    for name, value in p["parameters"] or []: final[name] = cli._resolve_type(value)
    for name, value in p["parameters_raw"] or []: final[name] = value
    assert not p["parameters_file"] and not p["parameters_base64"], "a parameters file: not checked here"
    return p["notebook_path"], final, p


def _notebook_call(nb:str, params:dict) -> dict:
    """The arguments notebook `nb` gives its `EXPERIMENT.main` call with papermill's `params`: its parameters cell run
    with them injected after it, as papermill does, and the call's arguments evaluated (nothing computed)."""
    ns = {}
    exec("import os\nfrom typing import Any, Optional, Union", ns)
    exec(_parameters_cell(nb), ns)
    declared = set(ns)
    unknown = sorted(set(params) - declared)
    assert not unknown, f"nbs/{nb}.ipynb declares no parameter {unknown}: papermill would pass it to nothing"
    ns.update(params)
    (call,) = [c for c in (_source(c) for c in _cells(NBS / f"{nb}.ipynb")) if ".main(" in c and "EXPERIMENT" in c and "def " not in c]
    node = next(n for n in ast.walk(ast.parse(call)) if isinstance(n, ast.Call) and getattr(n.func, "attr", None) == "main")
    node.func = ast.Name("_capture", ast.Load())
    for k in node.keywords:   # **X.EXPERIMENT.notebook_arguments(globals()): the parameters cell's annotated names, now
        if k.arg is None and isinstance(k.value, ast.Call) and getattr(k.value.func, "attr", None) == "notebook_arguments":
            k.value = ast.Call(ast.Name("_declared", ast.Load()), [], [])
    ns["_declared"] = lambda: {k: ns[k] for k in ns["__annotations__"]}
    ns["_capture"] = lambda *args, **kwargs: dict(zip(("profile", "out_dir"), args), **kwargs)
    return eval(compile(ast.fix_missing_locations(ast.Expression(node)), nb, "eval"), ns)


def _experiment(nb:str):
    from diffgeo import scaffold
    found = [e for e in scaffold.experiments() if e.notebook == f"{nb}.ipynb"]
    return found[0] if found else None


def check_papermill(argv:list[str]):
    "A papermill command: parsed as papermill parses it; its parameters resolved by the experiment, as `main` starts."
    path, params, options = _papermill_parameters(argv)
    nb = Path(path).stem
    assert Path(path).parent == Path("nbs") and (NBS / f"{nb}.ipynb").exists(), f"no notebook {path}"
    assert _parameters_cell(nb) is not None, f"{path} has no parameters cell"
    if options["help_notebook"]: return
    call = _notebook_call(nb, params)
    exp = _experiment(nb)
    if exp is None: return                      # the template: its experiment is declared in the notebook itself
    try: a = exp.arguments(**call)              # refuses what `main` would refuse
    except FileNotFoundError as e:              # a data set the settings need is not in the printed placeholder folder
        assert call.get("data_root") in PLACEHOLDERS or "data_root" not in call, e
        return
    if a["profile"] != "smoke" and a["out_dir"] is None and not a["tag"] and not a["redraw"]:
        # the committed run of the profile: the settings it resolves to are the profile's own, and nothing else writes its files
        assert a["settings"] == exp.resolve(a["profile"], a["run"].get("data_root")), "settings other than the committed run's"


@pytest.mark.parametrize("where,printed,env,argv", [c for c in COMMANDS if c[3][0] == "papermill"],
                         ids=_ids([c for c in COMMANDS if c[3][0] == "papermill"]))
def test_printed_papermill_command(where, printed, env, argv, monkeypatch):
    monkeypatch.delenv("IN_TEST", raising=False); monkeypatch.delenv("DIFFGEO_REDRAW", raising=False)
    check_papermill(argv)


@pytest.mark.parametrize("where,printed,env,argv", [c for c in COMMANDS if c[3][0] == "reproduce.sh"],
                         ids=_ids([c for c in COMMANDS if c[3][0] == "reproduce.sh"]))
def test_printed_reproduce_command(where, printed, env, argv, monkeypatch):
    "scripts/reproduce.sh runs `papermill nbs/$FLAGSHIP.ipynb out/$FLAGSHIP.ipynb -k python3 --log-output ARGS`."
    monkeypatch.delenv("IN_TEST", raising=False); monkeypatch.delenv("DIFFGEO_REDRAW", raising=False)
    nb = env.get("FLAGSHIP", FLAGSHIP)
    assert _parameters_cell(nb) is not None, f"FLAGSHIP={nb}: no experiment notebook nbs/{nb}.ipynb"
    check_papermill(["papermill", f"nbs/{nb}.ipynb", f"out/{nb}.ipynb", "-k", "python3", "--log-output", *argv[1:]])


@pytest.mark.parametrize("where,printed,env,argv", [c for c in COMMANDS if c[3][0] in ("diffgeo", "long_job.sh")],
                         ids=_ids([c for c in COMMANDS if c[3][0] in ("diffgeo", "long_job.sh")]))
def test_printed_diffgeo_command(where, printed, env, argv):
    "`diffgeo plan` and `diffgeo stability` parse; a plan's experiment, profile and --set settings resolve; long_job.sh's too."
    from diffgeo import cli
    if argv[0] == "long_job.sh":
        args = [a for a in argv[1:] if a not in ("--park", "--checkpoints")]
        assert len(args) in (2, 3), f"usage: long_job.sh [--park [--checkpoints]] EXPERIMENT PROFILE [TAG], got {args}"
        exp = cli.experiment(args[0])
        assert args[1] in exp.profiles, f"{exp.name} has no profile {args[1]!r}"
        if len(args) == 3: assert (args[1], args[2]) in exp.variants, f"{exp.name} declares no variant {args[1:]}"
        return
    try: args = cli.build_parser().parse_args(argv[1:])
    except SystemExit as e:
        assert e.code == 0, f"diffgeo's parser refuses {argv}"     # `--help` exits 0
        return
    if args.command == "plan":
        exp = cli.experiment(args.experiment)
        exp.resolve(args.profile, **cli._pairs(args.set, "--set"))
        cli._pairs(args.option, "--option")


@pytest.mark.parametrize("where,printed,env,argv", [c for c in COMMANDS if c[3][0] == "zoo_probes.py"],
                         ids=_ids([c for c in COMMANDS if c[3][0] == "zoo_probes.py"]))
def test_printed_zoo_probes_command(where, printed, env, argv):
    "scripts/zoo_probes.py's arguments parse by its own parser, and name an experiment with a profile and a declared variant."
    import importlib.util
    from diffgeo import cli
    spec = importlib.util.spec_from_file_location("zoo_probes", ROOT / "scripts" / "zoo_probes.py")
    script = importlib.util.module_from_spec(spec); spec.loader.exec_module(script)
    args = script.build_parser().parse_args(argv[1:])
    exp = cli.experiment(args.experiment)
    assert args.profile in exp.profiles, f"{exp.name} has no profile {args.profile!r}"
    if args.tag: assert (args.profile, args.tag) in exp.variants, f"{exp.name} declares no variant {args.profile} {args.tag}"
    assert args.data_root in PLACEHOLDERS, f"a machine's data folder printed: {args.data_root}"


def test_help_texts_commands():
    "The commands the `diffgeo` help texts print (their examples of values too) parse as they say."
    from diffgeo import cli
    parser = cli.build_parser()
    subs = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction").choices
    texts = [parser.format_help(), *(p.format_help() for p in subs.values())]
    for text in texts:
        for code, _ in _snippets(text):
            for seg in _segments(code):
                if (cmd := _command(seg)) and cmd[1][0] == "diffgeo": cli.build_parser().parse_args(cmd[1][1:])
    assert "seeds=[0,1]" in subs["plan"].format_help().replace("\n", " ").replace(" ", "")
    assert cli._pairs(["seeds=[0,1]"], "--set") == {"seeds": [0, 1]}


# ------------------------------------------------------------------------------------------------ what the issue found

def test_list_and_yes_no_parameters(monkeypatch):
    "Issue 60's cases: lists passed as text are read, yes/no words are, anything else is refused showing the -y form."
    from diffgeo.scaffold import ParameterError
    monkeypatch.delenv("IN_TEST", raising=False)
    pm = lambda *opts: _notebook_call("fig5", _papermill_parameters(["papermill", "nbs/fig5.ipynb", "out.ipynb", *opts])[1])
    exp = _experiment("fig5")
    a = exp.arguments(**pm("-p", "profile", "paper", "-p", "tag", "gpu", "-p", "seeds", "[0, 1, 2, 3]", "-p", "archs", '["LeNet", "AlexNet"]'))
    assert a["run"]["seeds"] == [0, 1, 2, 3] and a["settings"]["archs"] == ["LeNet", "AlexNet"]
    assert exp.arguments(**pm("-p", "redraw", "no", "-p", "rerun", "no"))["redraw"] is False
    assert exp.arguments(**pm("-p", "rerun", "no"))["run"]["rerun"] is False
    assert exp.arguments(**pm("-p", "rerun", "yes"))["run"]["rerun"] is True
    with pytest.raises(ParameterError, match="-p redraw True or -p redraw False"): exp.arguments(**pm("-p", "redraw", "nope"))
    with pytest.raises(ParameterError, match=re.escape("""-y 'archs: ["LeNet"]'""")): exp.arguments(**pm("-p", "archs", "LeNet"))
    with pytest.raises(ParameterError, match=re.escape('-y "seeds: [1]"')): exp.arguments(**pm("-p", "seeds", "1", "-p", "tag", "s"))
    with pytest.raises(ParameterError, match="cannot read"): exp.arguments(**pm("-p", "seeds", "[0, 1", "-p", "tag", "s"))
    # another data set at the committed cpu profile: tagged with its name, never over results/petrini_fig5.nc
    a = exp.arguments(**pm("-p", "dataset", "cifar10", "-p", "data_root", "/path/to/data"))
    assert a["tag"] == "cifar10" and exp.paths(a["profile"], None, a["tag"]).dataset.name == "petrini_fig5_cifar10.nc"
    a = exp.arguments(**pm("-p", "steps", "50"))   # other settings at the committed profile: tagged by them
    assert a["tag"] == "steps-50" and "files are tagged _steps-50" in a["note"]
    lrs = _notebook_call("detlefsen_fig3", _papermill_parameters(
        ["papermill", "nbs/detlefsen_fig3.ipynb", "o.ipynb", "-p", "profile", "long", "-p", "lrs", "[0.004, 0.006, 0.008]", "-p", "tag", "fine"])[1])
    assert _experiment("detlefsen_fig3").arguments(**lrs)["settings"]["lrs"] == [0.004, 0.006, 0.008]


def test_flagship_must_name_a_notebook():
    "`FLAGSHIP=fig1` (the README's old example) stops at once, listing the experiment notebooks, instead of a traceback."
    r = subprocess.run(["bash", "scripts/reproduce.sh"], cwd=ROOT, env={**os.environ, "FLAGSHIP": "fig1"}, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "FLAGSHIP=fig1 names no experiment notebook" in r.stderr and "petrini_fig1" in r.stderr and " fig5 " in r.stderr


def test_reproduce_help_notebook():
    "`bash scripts/reproduce.sh --help-notebook` (the README's) lists the flagship's parameters and runs nothing."
    r = subprocess.run(["bash", "scripts/reproduce.sh", "--help-notebook"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "Parameters inferred for notebook 'nbs/fig5.ipynb'" in r.stdout and "seeds: Optional[list]" in r.stdout
    assert "Executed notebook" not in r.stdout


def _copy_of_the_scripts(tmp_path:Path) -> Path:
    "A folder laid out as the repository, with scripts/ copied and the rest linked: reproduce.sh's out/ goes there."
    for name in ("reproduce.sh", "setup.sh"):
        (tmp_path / "scripts").mkdir(exist_ok=True); shutil.copy(ROOT / "scripts" / name, tmp_path / "scripts" / name)
    for name in ("nbs", ".venv", "pyproject.toml"): (tmp_path / name).symlink_to(ROOT / name)
    return tmp_path


def test_a_wrong_value_stops_the_main_job_at_once_with_a_short_message(tmp_path):
    "A wrong value stops the main job before any cell, within seconds, and its message is the last line, under a short traceback."
    repo = _copy_of_the_scripts(tmp_path)
    start = time.monotonic()
    r = subprocess.run(["bash", "scripts/reproduce.sh", "-p", "profile", "smoke", "-p", "redraw", "nope"], cwd=repo,
                       capture_output=True, text=True, timeout=300, env={k: v for k, v in os.environ.items() if k != "IN_TEST"})
    took = time.monotonic() - start
    said = (r.stdout + r.stderr).strip().splitlines()
    assert r.returncode != 0
    assert said[-1].startswith("reproduce.sh: out/fig5.ipynb stopped: ParameterError: petrini_fig5 (nbs/fig5.ipynb): redraw is yes or no"), said[-5:]
    assert "-p redraw True" in said[-1]
    # papermill's traceback (a kernel shutting down may print an unrelated zmq one before it: "Socket operation on non-socket")
    traceback = said[next(i for i, l in enumerate(said) if l.startswith("Traceback") and any("papermill" in m for m in said[i + 1:i + 3])):]
    assert len(traceback) < 60, "\n".join(traceback)   # papermill's own frames, then the cell's: main's hidden
    assert took < 120, f"{took:.0f} s"   # about 5 s on an idle 2-core machine: the notebook's imports, no cell of the experiment
    assert not (repo / "out" / "smoke").exists()


def test_readme_direct_papermill_command_runs(tmp_path):
    "The README's direct papermill command runs as printed (its outputs sent to a temporary folder)."
    (cmd,) = [a for w, _, _, a in COMMANDS if w == "README.md" and a[0] == "papermill" and a[1] == "nbs/petrini_fig8.ipynb"]
    argv = [str(ROOT / ".venv/bin/papermill"), cmd[1], str(tmp_path / "out.ipynb"), *cmd[3:], "-p", "out_dir", str(tmp_path)]
    r = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300,
                       env={k: v for k, v in os.environ.items() if k != "IN_TEST"})
    assert r.returncode == 0, r.stderr[-3000:]
    assert (tmp_path / "results" / "petrini_fig8.nc").exists()


def test_readme_quickstart_numbers_are_current():
    "The Quickstart's account of the main job is the stored output of its cell, formatted from the committed datasets: still current."
    import IPython.display
    (cell,) = [c for c in _cells(NBS / "index.ipynb") if c["cell_type"] == "code" and "What it shows and prints" in _source(c)]
    stored = "".join(cell["outputs"][0]["data"]["text/markdown"])
    shown = []
    real = IPython.display.display
    IPython.display.display = lambda m: shown.append(m.data)
    try: exec(_source(cell), {})
    finally: IPython.display.display = real
    assert shown == [stored], "nbs/index.ipynb's Quickstart numbers are stale: run its cell again, then python scripts/readme.py"
    assert stored in (ROOT / "README.md").read_text(), "README.md is stale: python scripts/readme.py"
    for n in ("0.72", "0.76", "0.96"): assert n in stored
