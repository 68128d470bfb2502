"""What can be checked of the docs site without Quarto (which these machines cannot install; the deploy workflow renders
it): nbdev's configuration is stable, every page has a title and a description and is in the sidebar, the stored
outputs the site shows are tidy (figures as images, no progress bars, warnings or machine paths), internal links
resolve, and nbdev's own processing of the notebooks for the site succeeds."""
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import nbformat
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
NBS = ROOT / "nbs"
NOTEBOOKS = sorted(NBS.glob("*.ipynb"))
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
sys.path.insert(0, str(ROOT / "scripts"))
import tidy_outputs  # noqa: E402
from diffgeo.papers import PAPERS  # noqa: E402


def read(path):
    return nbformat.read(path, as_version=4)


def outputs(nb):
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            yield o


def experiment_notebooks() -> list[str]:
    "The notebooks of the registered experiments (their `notebook`), e.g. fig5.ipynb."
    from diffgeo.site import experiments
    return sorted({e.notebook for e in experiments()})


# ------------------------------------------------------------------------------------------------ configuration

def test_nbdev_yml_is_what_nbdev_writes(tmp_path, monkeypatch):
    "nbdev-docs rewrites nbs/nbdev.yml from pyproject.toml: the committed one must be that file, or every build leaves a diff."
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "nbs").mkdir()
    for f in ("nbdev.yml", "_quarto.yml", "sidebar.yml"): shutil.copy(NBS / f, tmp_path / "nbs" / f)
    monkeypatch.chdir(tmp_path)
    from nbdev.quarto import refresh_quarto_yml
    refresh_quarto_yml()
    for f in ("nbdev.yml", "_quarto.yml"):
        assert (tmp_path / "nbs" / f).read_text() == (NBS / f).read_text(), f"nbdev would rewrite nbs/{f}"


def test_sidebar_is_ours():
    "custom_sidebar: nbdev-docs must not overwrite the hand-made, layered nbs/sidebar.yml."
    assert PROJECT["tool"]["nbdev"].get("custom_sidebar") is True


def test_site_url_and_author_in_one_place():
    "pyproject.toml names the site, repository and author; the other files that state them agree with it."
    urls, author = PROJECT["project"]["urls"], PROJECT["project"]["authors"][0]["name"]
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["url"].rstrip("/") == urls["Documentation"].rstrip("/")
    assert cff["repository-code"] == urls["Repository"]
    assert author in cff["authors"][0]["name"]
    index = (NBS / "index.ipynb").read_text()
    assert set(re.findall(r"git\+(https://[^\s\"\\]+)", index)) == {urls["Repository"]}


# ------------------------------------------------------------------------------------------------ pages

@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_title_and_description(path):
    "Every page starts with `# Title` and a `> description` (the site's page title and summary)."
    first = read(path).cells[0]
    assert first.cell_type == "markdown" and first.source.startswith("# ")
    assert re.search(r"^> \S", first.source, re.MULTILINE), f"{path.name}: no '> description' line in its first cell"


def _sidebar_entries(node) -> list[str]:
    if isinstance(node, str): return [node]
    if isinstance(node, list): return [e for n in node for e in _sidebar_entries(n)]
    if isinstance(node, dict):
        return [e for k, v in node.items() if k in ("contents", "href") for e in _sidebar_entries(v)]
    return []


def test_sidebar_and_navbar_entries_exist_and_cover_every_page():
    side = _sidebar_entries(yaml.safe_load((NBS / "sidebar.yml").read_text())["website"]["sidebar"]["contents"])
    nav = _sidebar_entries(yaml.safe_load((NBS / "_quarto.yml").read_text())["website"]["navbar"]["left"])
    missing = [e for e in side + nav if not (NBS / e).exists()]
    assert not missing, f"sidebar or navbar entries without a file: {missing}"
    absent = sorted({p.name for p in NOTEBOOKS} - set(side))
    assert not absent, f"pages not in nbs/sidebar.yml: {absent}"


#: Pages for those who work on the package, not its readers: the compiled kernels, the site's builder, the template.
INTERNAL = ("10_diffeo_numba.ipynb", "11_cpab_numba.ipynb", "80_site.ipynb", "81_docparams.ipynb", "template.ipynb")


def test_internal_pages_are_out_of_the_readers_path():
    "The sidebar keeps the internal pages in its last section, 'For contributors', and nowhere else."
    contents = yaml.safe_load((NBS / "sidebar.yml").read_text())["website"]["sidebar"]["contents"]
    last = contents[-1]
    assert isinstance(last, dict) and last.get("section") == "For contributors", "the sidebar's last section must be 'For contributors'"
    assert sorted(_sidebar_entries(last)) == sorted(INTERNAL)
    leaked = [e for e in _sidebar_entries(contents[:-1]) if e in INTERNAL]
    assert not leaked, f"internal pages in the readers' part of the sidebar: {leaked}"


LINK = re.compile(r"\]\(([\w./-]+\.(?:ipynb|html|md|qmd|png|pdf))(#[\w-]+)?\)")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_internal_links_resolve(path):
    "Relative links between pages (to x.ipynb or x.html) and to files point at something that exists."
    bad = []
    for cell in read(path).cells:
        if cell.cell_type != "markdown": continue
        for target, _ in LINK.findall(cell.source):
            base = target.rsplit(".", 1)[0]
            if not ((NBS / target).exists() or (NBS / f"{base}.ipynb").exists() or (NBS / f"{base}.qmd").exists()):
                bad.append(target)
    assert not bad, f"{path.name}: links to nothing: {bad}"


# ------------------------------------------------------------------------------------------------ stored outputs

MACHINE_PATH = re.compile(r"(?<![\w.])/(?:work|tmp|root|home|Users|private/var)/\S+|[A-Z]:\\\\\w")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_stored_outputs_are_clean(path):
    "No machine paths, carriage-return fragments, progress bars, warnings or errors in what the site shows."
    nb, problems = read(path), []
    for o in outputs(nb):
        if o.output_type == "error": problems.append(f"an error output ({o.ename})")
        texts = [o.get("text", "")] if o.output_type == "stream" else [v for k, v in o.get("data", {}).items() if k.startswith("text/")]
        for t in texts:
            t = "".join(t) if isinstance(t, list) else t
            if "\r" in t: problems.append(f"a \\r fragment: {t[:60]!r}")
            if (m := MACHINE_PATH.search(t)): problems.append(f"a machine path: {m.group(0)[:80]}")
    if tidy_outputs.tidy(read(path)): problems.append("progress-bar lines, warnings or figures stored as text: run scripts/tidy_outputs.py")
    assert not problems, f"{path.name}: " + "; ".join(problems)


def test_every_experiment_page_shows_a_figure():
    "Each experiment notebook's stored outputs (its cpu-profile run) contain an image."
    names = experiment_notebooks()
    without = [n for n in names if not any("image/png" in o.get("data", {}) or "image/svg+xml" in o.get("data", {})
                                           for o in outputs(read(NBS / n)))]
    assert not without, f"experiment pages with no figure in their stored outputs: {without}"


# ------------------------------------------------------------------------------------------------ nbdev's processing

@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("DIFFGEO_DOCS_BUILD") != "1",
                    reason="nbdev's processing of every notebook (tens of seconds) runs where the site is built: the deploy "
                           "workflow sets DIFFGEO_DOCS_BUILD=1 for the docs tests before nbdev-docs; set it to run it here")
def test_nbdev_processes_every_notebook(tmp_path):
    """nbdev's docs processing (what nbdev-docs runs before Quarto: show_doc, the cells it executes, links) succeeds on
    every notebook; run on a copy of the project, so that nothing is written here."""
    copy = tmp_path / "project"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(".git", ".venv", "_proc", "_docs", "out", "__pycache__"))
    env = {**os.environ, "PYTHONPATH": str(copy), "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-c", "from nbdev.serve import proc_nbs; proc_nbs(n_workers=2)"],
                       cwd=copy, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    assert len(list((copy / "_proc").glob("*.ipynb"))) == len(NOTEBOOKS)


# ------------------------------------------------------------------------------------------------ the site's own pages

PAPER_KEYS = tuple(PAPERS)   # from the one list (diffgeo.papers), not typed here


def test_landing_page_reaches_everything_in_one_click():
    "From the home page: the two commands, the use-it-in-your-code page, each paper's page, the gallery, the API."
    text = (NBS / "index.ipynb").read_text()
    for page in ["use", "gallery", "library", "conventions", *(f"paper_{k}" for k in PAPER_KEYS)]:
        assert f"]({page}.ipynb)" in text, f"index.ipynb does not link {page}.ipynb"
        assert (NBS / f"{page}.ipynb").exists()
    assert "bash scripts/reproduce.sh" in text and "bash scripts/test.sh" in text


def _rows(html: str) -> list[tuple[str, str]]:
    "(page, figure, the claims' status counts) of each row of a figure table."
    return re.findall(r'<td><a href="([\w-]+\.html)">[\w-]+</a><br><code>([\w-]+)</code><br><small>([^<]*)</small></td>', html)


@pytest.mark.parametrize("page,paper", [("gallery", None), *((f"paper_{k}", k) for k in PAPER_KEYS)])
def test_figure_tables_are_current(page, paper):
    "The gallery's and each paper page's stored table lists the figures the experiments declare now, each with a picture and its experiment's claim counts as the ledger gives them now."
    from diffgeo import site
    stored = "".join(o.data.get("text/html", "") for o in outputs(read(NBS / f"{page}.ipynb")) if "data" in o)
    assert _rows(stored) == _rows(site.figure_table(paper, width=16)), \
        f"{page}.ipynb lists other figures than the experiments declare: execute it again (see tidy_outputs.py)"
    assert stored.count("data:image/png;base64,") == len(_rows(stored)), f"{page}.ipynb: a figure without its picture"


def test_every_paper_has_a_link_in_readme_citation_and_its_page():
    "Issue 35: every paper's arXiv or DOI link, from `papers.PAPERS`, is in README.md, CITATION.cff and its page."
    import json
    from diffgeo.papers import PAPERS
    root = Path(__file__).resolve().parents[1]
    readme, cff = (root / "README.md").read_text(), (root / "CITATION.cff").read_text()
    for p in PAPERS.values():
        assert p.url.startswith("https://"), p.key
        assert p.url in readme, f"README.md lacks {p.key}'s link {p.url} (nbs/index.ipynb's table, then scripts/readme.py)"
        assert f'url: "{p.url}"' in cff, f"CITATION.cff lacks {p.key}'s link {p.url}"
        if p.doi: assert f'doi: "{p.doi}"' in cff, p.key
        page = "".join("".join(c["source"]) for c in json.load(open(root / "nbs" / f"paper_{p.key}.ipynb"))["cells"])
        assert p.url in page, f"nbs/paper_{p.key}.ipynb lacks its link {p.url}"


# ------------------------------------------------------------------------------------------------ the README's install section

def test_the_requirements_shown_are_pyprojects():
    "The home page's (and so the README's) requirements are the stored output of site.show_dependencies, current."
    from diffgeo import site
    cells = [c for c in read(NBS / "index.ipynb").cells if c.cell_type == "code" and "site.show_dependencies()" in c.source]
    assert len(cells) == 1, "index.ipynb must have one cell calling site.show_dependencies()"
    stored = "".join(o.get("data", {}).get("text/markdown", "") for o in cells[0].outputs)
    assert stored == site.dependencies_markdown(), "index.ipynb's requirements are stale: store the cell's output again"
    assert site.dependencies_markdown() in (ROOT / "README.md").read_text()


def test_the_requirements_from_an_installed_wheel(monkeypatch, tmp_path):
    "Outside a checkout the requirements come from the package metadata, split by extra; an undescribed extra is refused."
    from importlib import metadata
    from diffgeo import results, site
    monkeypatch.setattr(results, "project_root", lambda: tmp_path)
    monkeypatch.setattr(metadata, "requires", lambda name: ["torch>=2.2", 'numba>=0.59; extra == "fast"',
                                                            "diffgeo[data]; extra == 'experiments'"])
    assert site.requirements() == {"": ["torch>=2.2"], "fast": ["numba>=0.59"], "experiments": ["diffgeo[data]"]}
    assert "| `experiments` | `data` |" in site.dependencies_markdown()
    monkeypatch.setattr(metadata, "requires", lambda name: ['x>=1; extra == "gpu"'])
    with pytest.raises(ValueError, match=r"extras \['gpu'\].*EXTRAS_FOR"):
        site.dependencies_markdown()


def test_readme_code_blocks_name_their_language():
    "Every fenced code block of the README opens with a language tag (python, sh, ...)."
    fences = re.findall(r"^```(\S*)", (ROOT / "README.md").read_text(), flags=re.M)
    assert len(fences) % 2 == 0, "an unclosed code fence in README.md"
    untagged = [i // 2 for i, tag in enumerate(fences) if i % 2 == 0 and not tag]
    assert not untagged, f"README.md's code blocks number {untagged} have no language tag"


def test_the_link_checker_finds_broken_links(tmp_path):
    "scripts/check_links.py, which the deploy workflow runs on the rendered site, passes good links and names broken ones."
    import subprocess, sys
    (tmp_path / "sub").mkdir()
    (tmp_path / "index.html").write_text('<a href="sub/page.html#x">a</a> <img src="fig.png"> <a href="https://x.org/">e</a> '
                                         '<a href="#top">t</a> <a href="sub/">folder</a>')
    (tmp_path / "fig.png").write_bytes(b"")
    (tmp_path / "sub" / "index.html").write_text('<a href="../index.html">up</a>')
    (tmp_path / "sub" / "page.html").write_text('<a href="../missing.html">m</a> <script src="../site_libs/x.js"></script>')
    run = lambda: subprocess.run([sys.executable, str(ROOT / "scripts" / "check_links.py"), str(tmp_path)], capture_output=True, text=True)
    r = run()
    assert r.returncode == 1 and "sub/page.html: broken link ../missing.html" in r.stdout and "site_libs/x.js" in r.stdout
    assert "index.html: broken" not in r.stdout
    (tmp_path / "missing.html").write_text(""); (tmp_path / "site_libs").mkdir(); (tmp_path / "site_libs" / "x.js").write_text("")
    assert run().returncode == 0


def test_the_deploy_workflow_tests_the_docs_and_checks_links():
    "The only place the site is rendered checks it: the docs tests before nbdev-docs, every internal link after it."
    text = (ROOT / ".github" / "workflows" / "deploy.yaml").read_text()
    assert "tests/test_docs.py" in text and "scripts/check_links.py _docs" in text and "DIFFGEO_DOCS_BUILD: 1" in text
    steps = text[text.index("steps:"):]
    assert steps.index("tests/test_docs.py") < steps.index("\n          nbdev-docs") < steps.index("check_links.py") < steps.index("gh-pages")


def test_every_benchmark_says_its_machine():
    "Each bench/ script prints the CPU model (and its thread count) beside its timings: the docs quote ratios from these lines."
    scripts = [p for p in sorted((ROOT / "bench").glob("*.py")) if not p.name.startswith("_")]
    assert scripts
    silent = [p.name for p in scripts if not re.search(r"\bmachine\(|\bcpu_model\(|\bprocessor\(", p.read_text())]
    assert not silent, f"bench scripts that do not print the CPU model: {silent} (use bench/_common.py's machine())"
    assert all(re.search(r"thread", p.read_text()) for p in scripts)


@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if '"parameters"' in p.read_text()], ids=lambda p: p.name)
def test_the_docs_build_runs_no_cell_that_needs_the_papermill_parameters(path):
    """nbdev's docs build runs a notebook's exported cells and every cell holding an import, but not the parameters
    cell: such a cell must not read a papermill parameter (a NameError there fails the site's build, as fig5's run cell
    did with an import of resolve_device in it)."""
    import ast
    from nbdev.process import NBProcessor
    from nbdev.processors import _do_eval
    cells = NBProcessor(path).nb.cells
    params = set()
    for c in cells:
        if "parameters" in (c.get("metadata") or {}).get("tags", []):
            params |= {t.id for n in ast.parse(c.source).body if isinstance(n, (ast.Assign, ast.AnnAssign))
                       for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}
    for c in cells:
        if c.cell_type != "code" or "parameters" in (c.get("metadata") or {}).get("tags", []) or not _do_eval(c): continue
        used, todo = set(), list(ast.parse(c.source).body)   # names read when the cell runs (not inside defs or lambdas)
        while todo:
            n = todo.pop()
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.ListComp, ast.SetComp,
                              ast.DictComp, ast.GeneratorExp)):
                todo += [d for d in getattr(n, "decorator_list", [])]; continue
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load): used.add(n.id)
            todo += list(ast.iter_child_nodes(n))
        assert not used & params, (f"{path.name}: the docs build runs the cell starting {c.source[:60]!r} (it holds an import "
                                   f"or is exported), which reads the papermill parameters {sorted(used & params)}; move the import out")


# ------------------------------------------------------------------------------------------------ statuses in prose

#: Words and punctuation that may stand between a claim's key and a status typed after it.
_CONNECT = r"(?:\s*[:,;\u2014\u2013(-]\s*|\s+(?:is|stays|remains|was|therefore|still|now|marked|as)\b)*\s*"
#: A status typed after a claim's key: "(`key`: reproduced)", "(`key`, partly)", "`key` stays *partly*", "`key` is therefore
#: partly reproduced", "`key` (reproduced)", "`key` not)"; "not" only where it ends the phrase or reads "not reproduced", so
#: that "`key` is not above the controls" or "`key`, not `other`" pass.
_TYPED_AFTER = re.compile(r"^`" + _CONNECT + r"\**(?:(?:reproduced|partly)\b|not\**\s*(?:reproduced\b|[),;.]|$))", re.I)
#: ... or just before it: "the ledger's `partly` records for `key`", "*not* (`key`)", "reproduced (`key`)".
_TYPED_BEFORE = re.compile(r"(?:(?:`(?:reproduced|partly|not)`|\*+(?:reproduced|partly|not)\*+)[^.`]{0,30}|\b(?:reproduced|partly)\s*\()`$", re.I)


def typed_statuses(text: str, keys: set[str]) -> list[str]:
    "The places in `text` where a claim's status is typed beside its key (`keys`: the ledger's claim keys)."
    found = []
    for m in re.finditer(r"`([A-Za-z0-9_]+)`", text):
        if m.group(1) not in keys: continue
        if _TYPED_AFTER.search(text[m.end() - 1:m.end() + 30]) or _TYPED_BEFORE.search(text[max(0, m.start() - 60):m.start() + 1]):
            found.append(text[max(0, m.start() - 40):m.end() + 40].replace("\n", " "))
    return found


def _claim_keys() -> set[str]:
    from diffgeo import claims
    from diffgeo.scaffold import REGISTRY
    claims.registered()
    return {k for e in REGISTRY.values() for k in getattr(e, "claims", {})}


def test_typed_statuses_are_found():
    "The check below finds a status typed beside a claim's key, and leaves prose that only names the claim alone."
    keys = {"triangle", "accuracy"}
    for bad in ("(`triangle`, reproduced)", "(`triangle`: partly)", "`triangle` stays *partly*,", "(`accuracy` partly, `triangle` not)",
                "which is what the ledger's `partly`\nrecords for `triangle`", "the run says *not* (`accuracy`)",
                "(`triangle`: reproduced on both runs)", "`triangle` is reproduced in every seed", "`accuracy`: **partly**",
                "`triangle` \u2014 partly", "`triangle` (reproduced)", "`triangle` was reproduced", "`triangle` remains partly reproduced",
                "`accuracy` is therefore *partly* reproduced.", "the ledger marks `triangle` as reproduced", "reproduced (`triangle`)",
                "`triangle` is not reproduced here"):
        assert typed_statuses(bad, keys), bad
    for fine in ("(`triangle`)", "the ledger's `triangle` below", "`accuracy` is not a claim of Fig. 3", "`triangle`, not the block contrast",
                 "criterion must say *not*. `accuracy` above", "`triangle` is not above the controls", "`triangle`; not every seed agrees",
                 "`accuracy` not met", "`triangle`, not `accuracy`, is the test", "with `accuracy` not set"):
        assert not typed_statuses(fine, keys), fine


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_prose_types_no_claim_status(path):
    "Claim statuses come from the ledger (`claims.show`, stored and checked current), never typed: a status typed in prose goes stale when a dataset or a criterion changes."
    keys = _claim_keys()
    found = [s for c in read(path).cells if c.cell_type == "markdown" for s in typed_statuses(c.source, keys)]
    assert not found, f"{path.name}: a claim status typed beside its key; name the claim and let the ledger's table grade it: {found}"


def test_the_navigation_is_generated_and_current():
    "Issue 61: the sidebar and the navigation bar's Papers menu are what `site.write_navigation` writes from the registry now."
    import shutil, tempfile
    from diffgeo import site
    with tempfile.TemporaryDirectory() as d:
        for f in NBS.glob("*"):
            if f.is_file(): shutil.copy(f, d)
        assert site.write_navigation(d) == [], "nbs/sidebar.yml or nbs/_quarto.yml is stale: python scripts/refresh.py --quick"


def test_the_stored_headline_is_current(monkeypatch):
    "The home page's (and README's) headline gives the ledger's verdicts as they are now, not as they were when it was stored."
    import IPython.display as shown
    from diffgeo import site
    out = []
    monkeypatch.setattr(shown, "display", lambda *objs, **kw: out.extend(objs))
    site.headline()
    fresh = [o.data for o in out if type(o).__name__ == "Markdown"]
    cell = next(c for c in json.loads((NBS / "index.ipynb").read_text())["cells"] if "".join(c["source"]).strip().splitlines()[-1:] == ["site.headline()"])
    stored = ["".join(o["data"]["text/markdown"]) for o in cell["outputs"] if "text/markdown" in o.get("data", {})]
    assert stored == fresh, "nbs/index.ipynb's headline is stale: python scripts/refresh.py"
