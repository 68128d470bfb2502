"""The offline pages (`scripts/pages.py`, `site.render_pages`) as a reader sees them: opened in headless Chromium, each
shows its equations typeset, its figures loaded and its tables, and no raw directive (issue 60 §2).

Chromium is Debian's (scripts/install_chromium.sh, run by scripts/test.sh where CI is set). Without it the test is
skipped, except where CI is set: there a missing browser fails, so the pages are never silently unchecked."""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from diffgeo import site

ROOT = Path(__file__).resolve().parent.parent
BROWSER = next((shutil.which(c) for c in ("chromium", "chromium-browser", "google-chrome") if shutil.which(c)), None)
IN_CI = os.environ.get("CI", "") not in ("", "0", "false", "False", "FALSE")

#: page: the least a reader must see on it (typeset equations, loaded images, tables)
PAGES = {"index": dict(math=1, images=1, tables=1), "10_diffeo": dict(math=100, images=1, tables=0),
         "11_cpab": dict(math=100, images=1, tables=0),   # it had a TeX error (a brace left open) that only a browser showed
         "petrini_fig3": dict(math=20, images=3, tables=3), "paper_petrini": dict(math=20, images=5, tables=2)}

def seen(page:Path) -> dict:
    "What Chromium shows of `page`: the report its check script appends once MathJax has typeset it (`?check`)."
    if BROWSER is None:
        if IN_CI: pytest.fail("no Chromium under CI: scripts/install_chromium.sh should have installed it (see its log)")
        pytest.skip("no Chromium here (apt-get install chromium, or scripts/install_chromium.sh as root)")
    dom = subprocess.run([BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=20000",
                          "--dump-dom", page.as_uri() + "?check"], capture_output=True, text=True, timeout=120).stdout
    m = re.search(r'<pre id="diffgeo-check">([^<]*)</pre>', dom)
    assert m, f"{page.name}: Chromium showed no report (the page did not finish loading): {dom[-500:]!r}"
    return json.loads(m[1].replace("&quot;", '"').replace("&amp;", "&"))

@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    out = tmp_path_factory.mktemp("pages")
    site.render_pages(out, list(PAGES), progress=False)
    return out

@pytest.mark.parametrize("name", list(PAGES))
def test_a_page_shows_its_equations_figures_and_tables_and_no_raw_directive(pages, name):
    got, least = seen(pages / f"{name}.html"), PAGES[name]
    assert got["raw"] == [], f"{name}: raw directives in the text a reader sees: {got['raw']}"
    assert got["broken"] == [] and got["images"] >= least["images"], f"{name}: images {got}"
    assert got["math_errors"] == 0 and got["math"] >= least["math"], f"{name}: equations {got}"
    assert got["tables"] >= least["tables"], f"{name}: tables {got}"

def test_the_check_sees_a_raw_directive_a_broken_image_and_untypeset_math(pages, tmp_path):
    "The check itself fails a page that shows a cell option in its prose or a code cell, a missing figure and TeX that MathJax could not typeset."
    page = (pages / "index.html").read_text()
    bad = page.replace("</h1>", "</h1><p>#| echo: false</p><img src='no-such-figure.png'><p>$$\\frac{1}{$$</p>"
                       "<div class='jp-InputArea'><pre>#| export\nx = 1</pre></div>", 1)
    shutil.copytree(pages / "mathjax", tmp_path / "mathjax")
    (tmp_path / "bad.html").write_text(bad)
    got = seen(tmp_path / "bad.html")
    assert "#|" in got["raw"] and "#| in a code cell" in got["raw"] and len(got["broken"]) == 1 and got["math_errors"] >= 1

def test_the_contents_page_links_every_rendered_page(pages):
    contents = (pages / "contents.html").read_text()
    assert all(f'href="{n}.html"' in contents for n in PAGES)

def test_the_script_says_where_the_pages_are(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "pages.py"), "06_style", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=300, env={**os.environ, "DIFFGEO_PROGRESS": "0"})
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"1 pages in {tmp_path}; open {tmp_path / 'index.html'}" in r.stdout and (tmp_path / "06_style.html").is_file()
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "pages.py"), "nope", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "no notebooks ['nope']" in r.stderr
