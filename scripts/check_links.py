"""Check every internal link of a rendered site: each relative href or src of every HTML page points at a file of the site.

    python scripts/check_links.py _docs          # after nbdev-docs; exit 1 and list the broken links

The deploy workflow runs it before publishing (Quarto is not installable on the development machines, so the rendered
site exists only there). External links (http:, https:, mailto:, ...) and in-page anchors (#...) are not checked; a
link to a folder is resolved to its index.html."""
import argparse
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit


class _Links(HTMLParser):
    "The href and src attributes of a page."
    def __init__(self):
        super().__init__()
        self.links = []

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name in ("href", "src") and value: self.links.append(value)


def broken_links(site: Path) -> list[tuple[str, str]]:
    "(page, link) for each relative link of the site's HTML pages whose target does not exist."
    site = Path(site)
    if not site.is_dir(): raise FileNotFoundError(f"{site} is not a folder: give the rendered site (nbdev-docs writes _docs/).")
    bad = []
    for page in sorted(site.rglob("*.html")):
        parser = _Links()
        parser.feed(page.read_text(errors="replace"))
        for link in parser.links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc or link.startswith(("#", "data:", "javascript:")) or not parts.path: continue
            target = (site / parts.path.lstrip("/")) if parts.path.startswith("/") else (page.parent / unquote(parts.path))
            if target.is_dir(): target = target / "index.html"
            if not target.exists(): bad.append((str(page.relative_to(site)), link))
    return bad


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("site", nargs="?", default="_docs", help="the rendered site's folder")
    bad = broken_links(Path(ap.parse_args().site))
    for page, link in bad: print(f"{page}: broken link {link}")
    print(f"{len(bad)} broken internal link(s)" if bad else "every internal link resolves")
    sys.exit(1 if bad else 0)
