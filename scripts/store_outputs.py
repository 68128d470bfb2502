"""Execute notebooks in place so that they store their outputs, which are what the docs site shows; then tidy them.

    python scripts/store_outputs.py nbs/10_diffeo.ipynb nbs/gallery.ipynb   # some
    python scripts/store_outputs.py --library                                # every library notebook (nbs/NN_*.ipynb)

For library notebooks and the site's own pages (gallery, paper_*): seconds each. Experiment notebooks store the
outputs of their cpu-profile run, made by executing them with papermill or nbclient at that profile (minutes to hours);
do not run them through this script unless that is what you mean.

Each notebook runs in a fresh kernel with its own folder as working directory, with matplotlib's inline backend (so that
figures are stored as PNGs), progress bars off (`DIFFGEO_PROGRESS=0`), and without the cells that nbdev skips
(`#| eval: false`), whose stored outputs stay empty. Then `tidy_outputs.py` runs on it; run nbdev-clean afterwards.
"""
import argparse
import copy
import os
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

import tidy_outputs

ROOT = Path(__file__).resolve().parents[1]


def _skipped(cell) -> bool:
    return cell.cell_type == "code" and any(l.replace(" ", "").startswith("#|eval:false") for l in cell.source.splitlines())


def store(path: Path, timeout: int = 1800):
    "Execute the notebook `path` in place, the `eval: false` cells left out, and tidy its outputs."
    nb = nbformat.read(path, as_version=4)
    run = copy.deepcopy(nb)
    for c in run.cells:
        if _skipped(c): c.source = "pass"
    NotebookClient(run, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    for c, r in zip(nb.cells, run.cells):
        if c.cell_type != "code": continue
        c.outputs, c.execution_count = ([], None) if _skipped(c) else (r.outputs, r.execution_count)
    tidy_outputs.tidy(nb)
    nbformat.write(nb, path)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("notebooks", nargs="*", type=Path)
    p.add_argument("--library", action="store_true", help="every library notebook, nbs/NN_*.ipynb")
    args = p.parse_args(argv)
    paths = list(args.notebooks) + (sorted((ROOT / "nbs").glob("[0-9][0-9]_*.ipynb")) if args.library else [])
    if not paths: p.error("name notebooks, or pass --library")
    os.environ.pop("MPLBACKEND", None)
    os.environ["DIFFGEO_PROGRESS"] = "0"
    for path in paths:
        print(path.name, flush=True)
        store(path.resolve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
