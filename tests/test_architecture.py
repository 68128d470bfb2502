"""The package's shape, read from its source (no import): every module-level import of one diffgeo module by another
points down the layers of the library page (nbs/library.ipynb; or stays inside a layer), the graph of those imports has no cycle, and no module
imports another module's private (`_name`) function, class or constant, at module level or inside a function."""
import ast
import collections
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "diffgeo"

# The layers, bottom first, as the library page (nbs/library.ipynb) groups the modules; a module may import its own layer
# and the ones below.
LAYERS = [
    ("foundations", {"core", "results", "data", "papers", "style", "_docparams"}),
    ("maps", {"maps", "_diffeo_numba"}),               # the Gaussian interpolation's kernel (diffeo uses its positions)
    ("transformations", {"diffeo", "cpab", "flows", "_cpab_numba"}),
    ("layers", {"transformers", "distort"}),
    ("networks and training", {"models", "train"}),
    ("probes", {"probes"}),
    ("measures", {"stability", "invariance", "riemann", "stripe"}),
    ("sweep", {"sweep"}),
    ("running experiments", {"scaffold", "claims", "site", "cli", "zoo"}),
    ("experiments", {"experiments.*"}),
]


def _rank(module: str) -> int:
    for i, (_, names) in enumerate(LAYERS):
        if module in names or (module.split(".")[0] == "experiments" and "experiments.*" in names): return i
    raise AssertionError(f"module diffgeo.{module} is in no layer of tests/test_architecture.py: add it to LAYERS")


def _modules() -> dict[str, Path]:
    return {".".join(p.relative_to(PKG).with_suffix("").parts): p for p in sorted(PKG.rglob("*.py"))
            if p.name not in ("__init__.py", "_modidx.py")}


def _in_functions(tree) -> set:
    "ids of the nodes inside a function (run when it is called, not when the module is imported)."
    inside = set()
    for f in ast.walk(tree):
        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            inside |= {id(n) for n in ast.walk(f) if n is not f}
    return inside


def _imports(module: str, path: Path):
    """(imported diffgeo module, imported names, at module level?, the name it is bound to) for every import of diffgeo in
    `module`'s source; module level includes imports under a top-level `try`, `if` or `with`."""
    tree, pkg = ast.parse(path.read_text()), module.split(".")[:-1]
    lazy = _in_functions(tree)
    for node in ast.walk(tree):
        top = id(node) not in lazy
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg[:len(pkg) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            elif node.module == "diffgeo" or (node.module or "").startswith("diffgeo."): target = node.module[len("diffgeo."):]
            else: continue
            for a in node.names:
                sub = f"{target}.{a.name}".strip(".")
                where = PKG / sub.replace(".", "/")
                if where.with_suffix(".py").exists() or where.is_dir(): yield sub, [], top, a.asname or a.name   # `from . import maps`
                else: yield target, [a.name], top, None
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("diffgeo."): yield a.name[len("diffgeo."):], [], top, a.asname


def _graph(top_only: bool = True) -> dict[str, set]:
    mods, g = _modules(), collections.defaultdict(set)
    for m, p in mods.items():
        for target, _, top, _ in _imports(m, p):
            if target and target != m and (top or not top_only) and (target in mods or (PKG / target).is_dir()): g[m].add(target)
    return g


def test_every_module_has_a_layer():
    for m in _modules(): _rank(m)


def test_no_upward_import():
    "A module-level import never reaches a higher layer (lazy imports inside functions may: the command line, the site)."
    up = [f"{m} ({LAYERS[_rank(m)][0]}) imports {t} ({LAYERS[_rank(t)][0]})"
          for m, ts in _graph().items() for t in sorted(ts) if _rank(t) > _rank(m)]
    assert not up, "imports up the layers:\n" + "\n".join(up)


def _no_cycle(g: dict):
    state, path = {}, []
    def visit(m):
        state[m] = "open"; path.append(m)
        for t in sorted(g.get(m, ())):
            if state.get(t) == "open": raise AssertionError("import cycle: " + " -> ".join(path[path.index(t):] + [t]))
            if t not in state: visit(t)
        state[m] = "done"; path.pop()
    for m in sorted(_modules()):
        if m not in state: visit(m)


def test_module_level_imports_have_no_cycle():
    _no_cycle(_graph())


def test_no_cycle_through_imports_inside_functions():
    """Counting the imports inside functions too, the graph has no cycle, except through the experiment modules: the scaffold
    imports them to fill its registry (`scaffold.experiments`), as the command line and the site do, and they import it."""
    _no_cycle({m: {t for t in ts if _rank(t) < len(LAYERS) - 1} for m, ts in _graph(top_only=False).items()})


def _private_uses(module: str, path: Path) -> list[str]:
    mods, found, aliases = _modules(), [], {}
    for target, names, _, bound in _imports(module, path):
        if target == module: continue
        found += [f"from {target} import {n}" for n in names if n.startswith("_") and not n.startswith("__")]
        if not names and target in mods and bound: aliases[bound] = target
    for node in ast.walk(ast.parse(path.read_text())):   # `maps._check_points(...)` through an imported module
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                and node.attr.startswith("_") and not node.attr.startswith("__")):
            found.append(f"{aliases[node.value.id]}.{node.attr}")
    return sorted(set(found))


@pytest.mark.parametrize("module", sorted(_modules()))
def test_no_private_name_of_another_module(module):
    "What two modules share is public, in the module below both (DESIGN.md)."
    used = _private_uses(module, _modules()[module])
    assert not used, f"diffgeo.{module} uses private names of other modules: {used}; make them public where they live"


def test_the_checks_can_fail(tmp_path):
    "The source scan finds a private import, an attribute reach and an upward edge when one is planted."
    src = tmp_path / "diffgeo"
    (src / "experiments").mkdir(parents=True)
    (src / "maps.py").write_text("from .probes import features\nfrom .core import _hidden\n")
    (src / "core.py").write_text("def _hidden(): pass\n")
    (src / "probes.py").write_text("from . import core\nx = core._hidden\n")
    (src / "stability.py").write_text("from . import core as _c\ny = _c._hidden\ntry:\n    from . import sweep\nexcept ImportError: pass\n")
    (src / "sweep.py").write_text("")
    global PKG
    saved, PKG = PKG, src
    try:
        assert _private_uses("maps", src / "maps.py") == ["from core import _hidden"]
        assert _private_uses("probes", src / "probes.py") == ["core._hidden"]
        assert _private_uses("stability", src / "stability.py") == ["core._hidden"]      # through an alias
        assert "sweep" in _graph()["stability"]                                            # under a top-level try: module level
        with pytest.raises(AssertionError, match="maps .maps. imports probes .probes."): test_no_upward_import()
        (src / "core.py").write_text("def _hidden():\n    from . import maps\n")              # a cycle through a lazy import
        with pytest.raises(AssertionError, match="import cycle: core -> maps -> core"): test_no_cycle_through_imports_inside_functions()
        test_module_level_imports_have_no_cycle()                                          # which the module-level scan allows
    finally:
        PKG = saved


#: Experiments that import a sibling experiment, and why; everything else a paper's figures share lives in the paper's
#: own module (diffgeo.experiments.<paper>, exported from nbs/paper_<paper>.ipynb).
SIBLING_IMPORTS:dict = {   # (importer, imported) -> why
    ("experiments.petrini_zoo", "experiments.petrini_fig5"):
        "it measures the networks petrini_fig5 keeps, with Fig. 5's diffeomorphisms (COMMON) and order of architectures",
}


def test_experiments_import_their_papers_module_not_each_other():
    "An experiment module (a paper's figure or table) imports the paper's shared module, not another experiment, but where listed above."
    from diffgeo import papers
    mods = _modules()
    shared = {f"experiments.{p}" for p in papers.PAPERS}
    paper = lambda m: m.split(".")[1].split("_")[0]
    edges = {(m, t) for m, targets in _graph(top_only=False).items() for t in targets   # imports in functions too
             if m.startswith("experiments.") and t.startswith("experiments.")}
    assert all(paper(m) == paper(t) for m, t in edges), f"imports across papers: {[e for e in edges if paper(e[0]) != paper(e[1])]}"
    assert not [e for e in edges if e[0] in shared], f"a paper's module imports an experiment: {[e for e in edges if e[0] in shared]}"
    found = {(m, t) for m, t in edges if t not in shared}
    assert not found - set(SIBLING_IMPORTS), f"sibling imports not listed in SIBLING_IMPORTS: {found - set(SIBLING_IMPORTS)}; move what they share into the paper's module"
    assert not set(SIBLING_IMPORTS) - found, f"stale SIBLING_IMPORTS entries (no such import now): {set(SIBLING_IMPORTS) - found}; remove them"
    assert {f"experiments.{p}" for p in ("petrini", "moskalev")} <= set(mods)
