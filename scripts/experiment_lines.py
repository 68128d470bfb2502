"""How the experiment layer's lines divide: per module of `diffgeo/experiments/` (or of a commit's), its lines by kind.

    python scripts/experiment_lines.py               # this checkout
    python scripts/experiment_lines.py --rev d91e726 # the tree of a commit, for a before/after table

Kinds, from each top-level statement (decorators included) of the exported module:
  science       cells, derivations, settings hooks, finish hooks, cost models (`@EXPERIMENT.cell`, `.derive`, `.settings`,
                `.finish`, `.cost`), and the helpers only they use
  figures       `@EXPERIMENT.figure` and the helpers only figures use
  claims        `@EXPERIMENT.claim`, `.regime`, `.regression`, `.quoted` and their helpers
  reports       `@EXPERIMENT.report` and its helpers
  shared        helpers used by more than one of these kinds
  recipe        a paper's shared module's definitions used by sibling modules (nothing of its own module uses them)
  declarations  module-level assignments and calls: profiles, variables schema, `EXPERIMENT = Experiment(...)`, constants
  header        module docstring, imports, `__all__`
  blank         blank lines and comment-only lines (nbdev's `# %%` markers)
and, counted inside the kinds above, `generated`: the "Args:"/"Returns:" sections nbdev's export writes into docstrings
from the parameters' comments (`diffgeo._docparams`), which no one types.
"""
import argparse
import ast
import statistics
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HOOKS = {"cell": "science", "derive": "science", "settings": "science", "finish": "science", "cost": "science",
         "figure": "figures", "claim": "claims", "regime": "claims", "regression": "claims", "quoted": "claims",
         "report": "reports"}
KINDS = ["science", "figures", "claims", "reports", "shared", "recipe", "declarations", "header", "blank"]


def sources(rev:str|None) -> dict:
    "{module name: source} of diffgeo/experiments/ in this checkout or at commit `rev`."
    if rev is None:
        return {p.stem: p.read_text() for p in sorted((ROOT / "diffgeo/experiments").glob("*.py")) if p.stem != "__init__"}
    names = subprocess.run(["git", "-C", str(ROOT), "ls-tree", "--name-only", rev, "diffgeo/experiments/"],
                           capture_output=True, text=True, check=True).stdout.split()
    return {Path(n).stem: subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{n}"], capture_output=True, text=True,
                                         check=True).stdout for n in names if n.endswith(".py") and not n.endswith("__init__.py")}


def _hook(node) -> str|None:
    for d in getattr(node, "decorator_list", []):
        f = d.func if isinstance(d, ast.Call) else d
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "EXPERIMENT" and f.attr in HOOKS:
            return HOOKS[f.attr]
    return None


def _generated(node) -> int:
    "Lines of the Args:/Returns: sections in the docstrings of `node` and its methods."
    n = 0
    for f in ast.walk(node):
        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and f.body and isinstance(f.body[0], ast.Expr) \
                and isinstance(f.body[0].value, ast.Constant) and isinstance(f.body[0].value.value, str):
            doc = f.body[0].value.value.split("\n")
            start = next((i for i, l in enumerate(doc) if l.strip() in ("Args:", "Returns:")), None)
            if start is not None: n += len(doc) - start - (1 if not doc[-1].strip() else 0)
    return n


def classify(src:str) -> dict:
    "{kind: lines} of one module, with 'generated' and 'total'."
    tree, lines = ast.parse(src), src.split("\n")
    kinds, users, span, names = {}, {}, {}, {}
    for i, node in enumerate(tree.body):
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        span[i] = (first, node.end_lineno)
        if isinstance(node, (ast.Import, ast.ImportFrom)) or (i == 0 and isinstance(node, ast.Expr)
                                                              and isinstance(getattr(node, "value", None), ast.Constant)):
            kinds[i] = "header"; continue
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and any(getattr(t, "id", "") == "__all__" for t in
                                                                  (node.targets if isinstance(node, ast.Assign) else [node.target])):
            kinds[i] = "header"; continue
        hook = _hook(node)
        if hook: kinds[i] = hook
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)): names[node.name] = i
        else: kinds[i] = "declarations"
    refs = {i: {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} for i, node in enumerate(tree.body)}
    # a helper's kind: the kinds of the hooks that use it, directly or through other helpers
    def kinds_of(helper:str, seen:set) -> set:
        out = set()
        for i, r in refs.items():
            if helper not in r or i == names.get(helper): continue
            if i in kinds and kinds[i] in HOOKS.values(): out.add(kinds[i])
            elif i in kinds: continue
            else:
                name = next(n for n, j in names.items() if j == i)
                if name not in seen: out |= kinds_of(name, seen | {name})
        return out
    for name, i in names.items():
        k = kinds_of(name, {name})
        kinds[i] = k.pop() if len(k) == 1 else "shared" if k else "recipe"
    count = dict.fromkeys(KINDS, 0)
    covered = set()
    for i, (a, b) in span.items():
        body = [ln for ln in range(a, b + 1) if lines[ln - 1].strip() and not lines[ln - 1].strip().startswith("#")]
        count[kinds[i]] += len(body); covered |= set(body)
    count["blank"] = len(lines) - len(covered) - (1 if lines and lines[-1] == "" else 0)
    count["generated"] = sum(_generated(node) for node in tree.body)
    count["total"] = sum(count[k] for k in KINDS)
    return count


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rev", help="a commit to read diffgeo/experiments/ from (default: this checkout)")
    a = ap.parse_args(argv)
    rows = {name: classify(src) for name, src in sources(a.rev).items()}
    cols = ["total", *KINDS, "generated"]
    print("| module | " + " | ".join(cols) + " |\n|---|" + "---|" * len(cols))
    for name, c in sorted(rows.items(), key=lambda kv: kv[1]["total"]):
        print(f"| {name} | " + " | ".join(str(c[k]) for k in cols) + " |")
    tot = {k: sum(c[k] for c in rows.values()) for k in cols}
    print("| **all** | " + " | ".join(str(tot[k]) for k in cols) + " |")
    print("| **share** | " + " | ".join(f"{100 * tot[k] / tot['total']:.0f} %" for k in cols) + " |")
    med = statistics.median(c["total"] for c in rows.values())
    typed = statistics.median(c["total"] - c["generated"] for c in rows.values())
    print(f"\n{len(rows)} modules, {tot['total']} lines; median module {med:g} lines ({typed:g} without the generated "
          f"Args sections); science {100 * tot['science'] / tot['total']:.0f} % of all lines")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
