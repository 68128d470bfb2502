"""Write the docs' notebooks as HTML pages to read offline, without Quarto: `_pages/index.html` is the home page.

    python scripts/pages.py                       # every notebook of nbs/ into _pages/ (a few minutes)
    python scripts/pages.py index petrini_fig3    # only these pages
    python scripts/pages.py --out /tmp/pages      # elsewhere

The same pages as the site, from the same processing of the notebooks (see "Reading the pages offline" in nbs/80_site.ipynb);
equations are typeset by a local MathJax, figures embedded, and no network is needed.
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # this checkout's diffgeo, wherever it is run from
from diffgeo import site  # noqa: E402

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("names", nargs="*", help="notebook names without .ipynb (default: every notebook of nbs/)")
    ap.add_argument("--out", default="_pages", help="the folder of pages (default: _pages)")
    a = ap.parse_args()
    pages = site.render_pages(a.out, a.names or None)
    print(f"{len(pages)} pages in {Path(a.out).resolve()}; open {Path(a.out).resolve() / 'index.html'} in a browser")
