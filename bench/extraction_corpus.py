"""Build the extraction corpus (``tests/data/extraction/pages.jsonl.xz``) from real pages.

The pages are the HTML documentation of Python 3.11 as Debian's ``python3-doc`` package installs it
(``/usr/share/doc/python3.11/html``; ``apt-get install python3-doc``): real pages of a real site
(Sphinx's template: a header, a navigation bar, a sidebar with the table of contents and related
links, a footer), 8-200 KB each. Their main text is marked by the site itself: Sphinx puts the
page's content, and only it, in ``<div class="body" role="main">``; the ground truth is that
element's text without the ``¶`` permalinks. Licence: the PSF License Version 2 (see
``tests/data/extraction/README.md``).

Every n-th page of the sorted list is taken so that the sample covers every part of the docs.

Run: ``.venv/bin/python bench/extraction_corpus.py [--pages 120]``.
"""

from __future__ import annotations

import argparse
import json
import lzma
import sys
from pathlib import Path

import lxml.html

DOCS = Path("/usr/share/doc/python3.11/html")
PARTS = ("library", "tutorial", "howto", "faq", "reference", "using", "extending", "c-api", "whatsnew")
OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "extraction" / "pages.jsonl.xz"


def main_text(html: str) -> str:
    """The text of the page's ``div[role=main]`` without its permalinks, one block per line."""
    tree = lxml.html.document_fromstring(html)
    body = tree.xpath("//div[@role='main']")[0]
    for link in body.xpath(".//a[contains(concat(' ', @class, ' '), ' headerlink ')]"):
        link.drop_tree()
    return " ".join(body.text_content().split())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=120)
    args = parser.parse_args()
    if not DOCS.is_dir():
        print(f"{DOCS} missing: apt-get install python3-doc", file=sys.stderr)
        return 2
    files = sorted(f for part in PARTS for f in (DOCS / part).rglob("*.html") if 8_000 <= f.stat().st_size <= 200_000)
    step = max(1, len(files) // args.pages)
    chosen = files[::step][: args.pages]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with lzma.open(OUT, "wt", encoding="utf-8", preset=9) as out:
        for f in chosen:
            html = f.read_text(encoding="utf-8")
            url = "https://docs.python.org/3.11/" + f.relative_to(DOCS).as_posix()
            out.write(json.dumps({"url": url, "html": html, "text": main_text(html)}, ensure_ascii=False) + "\n")
    print(f"{len(chosen)} pages of {len(files)} -> {OUT} ({OUT.stat().st_size // 1024} KB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
