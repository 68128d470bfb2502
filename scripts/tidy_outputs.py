"""Tidy the stored outputs of executed notebooks, which are what the docs site shows.

    python scripts/tidy_outputs.py                 # every notebook under nbs/, in place
    python scripts/tidy_outputs.py nbs/fig5.ipynb  # some
    python scripts/tidy_outputs.py --check         # change nothing; exit 1 and list what it would change

What it does, and nothing else:
- drops progress-bar lines (`cut-offs:  40%|####      | 4/10 [...]`) and Python warnings (a `...Warning: ...` line
  and the source line Python prints under it) from stderr outputs, and the outputs left empty;
- where an experiment's `main` displayed its figures as text only (`<Figure size ...>`: the kernel ran with
  matplotlib's Agg backend, before `scaffold.main` displayed PNGs), puts in each the PNG that the same call saved:
  the call's "wrote" list names the files, in the order the figures were displayed.
Run it after executing a notebook to store its outputs (then nbdev-clean).
"""
import argparse
import base64
import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
BAR = re.compile(r"^.*\d+%\|.*\|.*$|^.*\|\s*\d+/\d+ \[.*\]$")
WARNING = re.compile(r"^\S*:\d+: \w*Warning: ")


def _tidy_stderr(text: str) -> str:
    out, skip_next = [], False
    for line in text.splitlines(keepends=True):
        if skip_next: skip_next = False; continue
        if BAR.match(line.strip("\r\n")): continue
        if WARNING.match(line): skip_next = True; continue   # "path:line: XWarning: message", then the source line
        out.append(line)
    return "".join(out)


def _written_figures(outputs) -> list[Path]:
    text = "".join("".join(o.get("text", "")) for o in outputs if o.get("output_type") == "stream" and o.get("name") == "stdout")
    if "wrote" not in text: return []
    return [ROOT / line.strip() for line in text.split("wrote", 1)[1].splitlines() if line.strip().endswith(".png")]


def tidy(nb) -> list[str]:
    "Tidy `nb` in place; return what changed."
    changes = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or not cell.get("outputs"): continue
        kept = []
        for o in cell.outputs:
            if o.output_type == "stream" and o.name == "stderr":
                text = _tidy_stderr(o.text)
                if text != o.text: changes.append(f"cell {i}: stderr lines dropped")
                if not text.strip(): continue
                o.text = text
            kept.append(o)
        cell.outputs = kept
        pngs = _written_figures(cell.outputs)
        placeholders = [o for o in cell.outputs if o.output_type == "display_data" and set(o.data) == {"text/plain"}
                        and o.data["text/plain"].startswith("<Figure")]
        if placeholders and len(placeholders) == len(pngs) and all(p.exists() for p in pngs):
            for o, png in zip(placeholders, pngs):
                o.data = {"image/png": base64.b64encode(png.read_bytes()).decode(), "text/plain": o.data["text/plain"]}
            changes.append(f"cell {i}: {len(pngs)} figures put in from {', '.join(p.name for p in pngs)}")
    return changes


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("notebooks", nargs="*", type=Path, help="notebooks (default: every one under nbs/)")
    p.add_argument("--check", action="store_true", help="change nothing; exit 1 if something would change")
    args = p.parse_args(argv)
    todo, status = 0, 0
    for path in args.notebooks or sorted((ROOT / "nbs").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        changes = tidy(nb)
        if not changes: continue
        todo += 1
        print(f"{path}: " + "; ".join(changes))
        if args.check: status = 1
        else: nbformat.write(nb, path)
    if args.check and status: print(f"{todo} notebooks have untidy outputs: run python scripts/tidy_outputs.py (then nbdev-clean)")
    return status


if __name__ == "__main__":
    sys.exit(main())
