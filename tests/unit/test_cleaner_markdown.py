"""Markdown in cleaned records (docs/contract.md §20.6): one parse gives both ``text`` and
``markdown``; ``text`` is what it is without Markdown."""

from __future__ import annotations

from crawlhive.cleaner.extractor import extract

PAGE = """<html><head><title>Rivers</title></head><body><nav><a href="/">Home</a> | <a href="/news">News</a></nav>
<article><h1>Rivers of the North</h1><h2>The valleys</h2>
<p>The rivers of the north run <b>cold</b> and clear through the valleys, and every spring the melting
snow <a href="/floods">turns them into torrents</a> that carry stones the size of houses to the sea.</p>
<ul><li>Salmon return in early spring these years</li><li>Trout stay in the upper valleys all year</li></ul>
<table><tr><th>River</th><th>Length</th></tr><tr><td>Tana</td><td>361 km</td></tr></table>
<p>Fishermen who have worked these waters for decades say the seasons are changing, and that the salmon
now return weeks earlier than their fathers remember.</p></article>
<footer>Copyright 2024. <a href="/privacy">Privacy</a></footer></body></html>"""


def test_markdown_has_headings_lists_emphasis_and_tables_and_text_is_unchanged() -> None:
    plain = extract(PAGE, "http://news.example/rivers", markdown=False)
    both = extract(PAGE, "http://news.example/rivers", markdown=True)
    assert "markdown" not in plain
    assert both["text"] == plain["text"] and "**" not in both["text"]
    markdown = both["markdown"]
    assert markdown.startswith("# Rivers of the North\n\n## The valleys\n\n")
    assert "run **cold** and clear" in markdown
    assert "snow [turns them into torrents](http://news.example/floods) that" in markdown  # its link (§20.6)
    assert "- Salmon return in early spring these years\n- Trout stay" in markdown
    assert "| River | Length |" in markdown and "| Tana | 361 km |" in markdown
    assert "Home" not in markdown and "Privacy" not in markdown  # boilerplate stays out


def test_a_page_without_main_text_has_no_markdown() -> None:
    fields = extract("<html><head><script>var a = 1;</script></head><body> </body></html>", "http://a/", True)
    assert fields.get("markdown") is None


def test_a_page_of_links_keeps_its_text() -> None:
    """Asking trafilatura for links would drop this paragraph of links: text stays the same (and the
    Markdown has the links: tests/unit/test_markdown_links.py)."""
    page = '<h1>Home</h1> <p>Welcome to a tiny site.</p> <a href="about.html">About</a> <a href="b.html">First post</a>'
    assert extract(page, "http://a/", True)["text"] == extract(page, "http://a/", False)["text"]
    assert "About First post" in extract(page, "http://a/", True)["text"]
