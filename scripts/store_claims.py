"""Store the output of every `claims.show(...)` cell (the ledger's tables) and every `EXPERIMENT.show_report(...)` cell (what a
committed run shows), which the docs pages show.

    python scripts/store_claims.py                      # every notebook under nbs/ with such a cell, in place
    python scripts/store_claims.py nbs/petrini_fig3.ipynb
    python scripts/store_claims.py --check              # change nothing; exit 1 and list the stale ones

A cell whose code is `claims.show(...)` (after an optional `from diffgeo import claims` line) gets, as its only output,
the Markdown that `claims.show` displays, computed here from the committed datasets; so does a cell whose code is
`EXPERIMENT.show_report(...)` in an experiment notebook (the report of the notebook's experiment, from its committed file); the experiment notebooks need not
be executed again (their cells train networks for minutes to hours). `tests/test_claims.py` checks that every stored
table is current. Run it after changing a claim or a committed dataset, then nbdev-clean."""
import argparse
import ast
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]


def _call(source: str, call: str, imports=()):
    "The arguments of the cell's one line `call(...)` as (args, kwargs) (after the lines `imports`), or None if the cell is not such a cell."
    lines = [l for l in source.splitlines() if l.strip() and not l.lstrip().startswith("#") and l.strip() not in imports]
    if len(lines) != 1 or not lines[0].startswith(call + "("): return None
    node = ast.parse(lines[0]).body[0].value                            # a trailing comment is no part of the call
    return [ast.literal_eval(a) for a in node.args], {k.arg: ast.literal_eval(k.value) for k in node.keywords}


def show_call(source: str):
    "The arguments of the cell's `claims.show(...)` call as (args, kwargs), or None if the cell is not such a cell."
    return _call(source, "claims.show", imports=("from diffgeo import claims",))


def report_call(source: str):
    "The arguments of the cell's `EXPERIMENT.show_report(...)` call as (args, kwargs), or None if the cell is not such a cell."
    return _call(source, "EXPERIMENT.show_report")


def rendered(args, kwargs) -> str:
    from diffgeo import claims
    return claims.render(*args, **kwargs)


def reported(notebook: Path, args, kwargs) -> str:
    "The Markdown that the notebook's experiment's `show_report(*args, **kwargs)` displays (printed outside IPython: kept quiet)."
    import contextlib, io
    from diffgeo.scaffold import experiments
    found = [e for e in experiments() if e.notebook == notebook.name]
    if len(found) != 1: raise ValueError(f"{notebook.name} is the notebook of {len(found)} experiments; show_report needs one")
    with contextlib.redirect_stdout(io.StringIO()): return found[0].show_report(*args, **kwargs)


def output(md: str) -> dict:
    return nbformat.v4.new_output("display_data", data={"text/markdown": md, "text/plain": "<IPython.core.display.Markdown object>"})


def stored(cell) -> str:
    return "".join(o.get("data", {}).get("text/markdown", "") for o in cell.get("outputs", []))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("notebooks", nargs="*", type=Path)
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args(argv)
    paths = a.notebooks or sorted((ROOT / "nbs").glob("*.ipynb"))
    stale, failed = [], []
    for path in paths:
        nb, changed = nbformat.read(path, as_version=4), False
        for cell in nb.cells:
            call = show_call(cell.source) if cell.cell_type == "code" else None
            report = report_call(cell.source) if cell.cell_type == "code" and call is None else None
            if call is None and report is None: continue
            try: md = rendered(*call) if call is not None else reported(path, *report)
            except Exception as e:  # a broken claim: say which, and go on to the other notebooks
                print(f"{path.name}: {e}", file=sys.stderr); failed.append(str(path)); continue
            if stored(cell) != md:
                changed = True
                cell.outputs = [output(md)]
        if changed:
            stale.append(str(path))
            if not a.check: nbformat.write(nb, path)
    if stale: print(("stale: " if a.check else "stored: ") + ", ".join(stale))
    if failed: print("could not render: " + ", ".join(failed), file=sys.stderr)
    return 1 if failed or (a.check and stale) else 0


if __name__ == "__main__":
    sys.exit(main())
