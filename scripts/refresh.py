"""Refresh every generated file and stored page of the docs, in one command, after changing an experiment, a claim or a
committed dataset (or adding an experiment):

    python scripts/refresh.py           # all: the navigation, the ledger's tables, the site's pages, the README; then nbdev-clean
    python scripts/refresh.py --quick   # only the files written without executing a notebook: navigation and README

In order: the sidebar and the navigation bar's Papers menu (`site.write_navigation`, from the registry); every stored
ledger table (`scripts/store_claims.py`); the outputs of the pages built from the committed files (the gallery, the five
paper pages and the home page: `scripts/store_outputs.py`, seconds each); README.md (`scripts/readme.py`); nbdev-clean.
Experiment notebooks are not executed (their outputs are their runs': papermill at the cpu profile). The test command
runs `--quick` and fails where it changes a file.
"""
import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def run(*cmd):
    print("$", " ".join(str(c) for c in cmd), flush=True)
    subprocess.run([str(c) for c in cmd], cwd=ROOT, check=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="only the navigation and the README (no notebook executed)")
    a = ap.parse_args(argv)
    from diffgeo import site
    for f in site.write_navigation(): print("wrote", f.relative_to(ROOT))
    if not a.quick:
        run(sys.executable, "scripts/store_claims.py")
        pages = ["nbs/gallery.ipynb", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "nbs").glob("paper_*.ipynb")), "nbs/index.ipynb"]
        run(sys.executable, "scripts/store_outputs.py", *pages)
    run(sys.executable, "scripts/readme.py")
    if not a.quick: run("nbdev-clean")
    return 0


if __name__ == "__main__":
    sys.exit(main())
