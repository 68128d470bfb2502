"""Write README.md from nbs/index.ipynb (nbdev's own `nbdev-readme` needs Quarto, which these machines lack).

Cells marked `#| hide` are left out and `#|` directives are stripped; outputs are kept."""
from pathlib import Path

import nbformat
from nbconvert import MarkdownExporter

root = Path(__file__).resolve().parents[1]
nb = nbformat.read(root / "nbs" / "index.ipynb", as_version=4)
cells = []
for cell in nb.cells:
    lines = cell.source.splitlines()
    if any(l.strip().replace(" ", "") == "#|hide" for l in lines): continue
    cell.source = "\n".join(l for l in lines if not l.lstrip().startswith("#|")).strip()
    if cell.source: cells.append(cell)
nb.cells = cells
body, _ = MarkdownExporter().from_notebook_node(nb)
text = "<!-- Generated from nbs/index.ipynb by scripts/readme.py: edit the notebook, not this file. -->\n\n" + body.strip() + "\n"
out = root / "README.md"
if not out.exists() or out.read_text() != text: out.write_text(text)
