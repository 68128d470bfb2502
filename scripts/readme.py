"""Write README.md from nbs/index.ipynb (nbdev's own `nbdev-readme` needs Quarto, which these machines lack).

Cells marked `#| hide` are left out and `#|` directives are stripped; outputs are kept. A code cell marked `#| echo: false`
(the claims ledger's summary) gives its Markdown output alone, as on the site. The first markdown cell's
frontmatter lines (`- key: value`, e.g. `- skip_showdoc: true`, which nbdev reads as settings of the page) are dropped.
Links to the site's pages (`[text](cluster.ipynb)`, as the site itself wants them) become links to the published site,
whose address is pyproject.toml's `Documentation` URL (the one place it is written)."""
import re
import tomllib
from pathlib import Path

import nbformat
from nbconvert import MarkdownExporter

root = Path(__file__).resolve().parents[1]
nb = nbformat.read(root / "nbs" / "index.ipynb", as_version=4)
first_md = next((c for c in nb.cells if c.cell_type == "markdown"), None)
cells = []
for cell in nb.cells:
    lines = cell.source.splitlines()
    if cell is first_md: lines = [l for l in lines if not re.match(r"^-\s+\S.*:.*\S\s*$", l)]  # as md_frontmatter
    if any(l.strip().replace(" ", "") == "#|hide" for l in lines): continue
    if cell.cell_type == "code" and any(l.strip().replace(" ", "") == "#|echo:false" for l in lines):  # its output alone
        shown = "\n\n".join(o.get("data", {}).get("text/markdown", "") for o in cell.get("outputs", []))
        if shown.strip(): cells.append(nbformat.v4.new_markdown_cell(shown))
        continue
    cell.source = "\n".join(l for l in lines if not l.lstrip().startswith("#|")).strip()
    if cell.source: cells.append(cell)
nb.cells = cells
nb.metadata["language_info"] = {"name": "python"}   # nbdev-clean drops it; without it the code blocks carry no language tag
body, _ = MarkdownExporter().from_notebook_node(nb)
docs = tomllib.loads((root / "pyproject.toml").read_text())["project"]["urls"]["Documentation"].rstrip("/")
body = re.sub(r"\]\(([\w-]+)\.(?:ipynb|html)(#[\w-]+)?\)", lambda m: f"]({docs}/{m[1]}.html{m[2] or ''})", body)
text = "<!-- Generated from nbs/index.ipynb by scripts/readme.py: edit the notebook, not this file. -->\n\n" + body.strip() + "\n"
out = root / "README.md"
if not out.exists() or out.read_text() != text: out.write_text(text)
