"""The links of the main content in the cleaner's Markdown (docs/contract.md §20.6), read back with
a CommonMark parser (markdown-it-py): absolute URLs, boilerplate and non-web links left as text,
hostile link text and URLs kept inside their link; ``text`` the same as without them."""

from __future__ import annotations

import re
import sys
from random import Random
from typing import Any

import pytest
from markdown_it import MarkdownIt

from crawlhive.cleaner import extractor
from crawlhive.cleaner.extractor import extract
from crawlhive.cleaner.markdown_links import (
    MAX_URL_LENGTH,
    _blank,
    _code_spans,
    _next_words,
    _resolver,
    _skip,
    link_url,
)
from crawlhive.cleaner.plugins.extract import cut_markdown

URL = "http://news.example/rivers/north.html"
LONG = "/archive/" + "a" * 2100
PARAGRAPH = "The rivers of the north run cold and clear through the valleys of the old country, year after year."

PAGE = f"""<html><head><title>Rivers</title></head><body>
<header><a href="/">News home</a> <a href="/rivers/">Rivers desk</a></header>
<nav><ul><li><a href="/world">World</a></li><li><a href="/sport">Sport</a></li></ul></nav>
<div class="menu" role="navigation"><a href="/weather">Weather today</a></div>
<div class="topics"><ul><li><a href="/rivers/">Rivers</a></li><li><a href="/fish/salmon">Salmon</a></li></ul></div>
<article><h1>Rivers of the North</h1>
<p>{PARAGRAPH} Every spring the melting snow <a href="/floods">turns them into torrents</a> that carry
stones the size of houses to the sea, as <a href="../maps/tana.html">the map of the Tana</a> shows and
<a href="https://survey.example/report?year=2024&amp;region=north">a survey of <b>2024</b></a> confirms.</p>
<p>{PARAGRAPH} Readers can jump to the <a href="#valleys">valleys section</a>, <a href="javascript:alert(1)">click
here</a> for nothing, <a href="mailto:editor@news.example">write to the editor</a>, <a href="tel:+4712345678">call
the desk</a>, fetch <a href="ftp://files.example/tana.csv">the raw data</a> or reload <a
href="{URL}#top">this very page</a>.</p>
<p>{PARAGRAPH} Odd links stay inside their brackets: <a href="/odd path/(draft) v2.html">notes ] on (the
[draft</a> of the study, <a href="{LONG}">an archive far too long</a> and <a
href="http://reader:secret@data.example/set">the open data set</a> with the <a href="/api/open"><code>open()</code></a>
function.</p>
<ul><li>Salmon return in early spring, says <a href="/people/ola">Ola Nordmann</a> of the river board</li>
<li>Trout stay in the upper valleys all year long, as they always did before</li></ul>
<table><tr><th>River</th><th>Length</th></tr><tr><td><a href="/rivers/tana">Tana</a></td><td>361 km</td></tr>
<tr><td><a href="/rivers/glomma">Glomma</a></td><td>621 km</td></tr></table>
<p>{PARAGRAPH} Fishermen who have worked these waters for decades say the seasons are changing.</p>
</article>
<aside><a href="/related">Related stories</a></aside>
<footer>Copyright 2024. <a href="/privacy">Privacy</a> <a href="/terms">Terms of use</a></footer>
</body></html>"""


def links_of(markdown: str) -> list[tuple[str, str]]:
    """The links of *markdown* as a CommonMark parser reads them: (text, URL), in order."""
    found = []
    for token in MarkdownIt("commonmark").enable("table").parse(markdown):
        children = token.children or []
        for i, child in enumerate(children):
            if child.type == "link_open":
                end = next(j for j in range(i, len(children)) if children[j].type == "link_close")
                text = "".join(" " if c.type == "softbreak" else c.content for c in children[i + 1 : end])
                found.append((text, str(child.attrs["href"])))
    return found


def without_links(monkeypatch: pytest.MonkeyPatch, html: str, url: str) -> dict[str, Any]:
    """The fields the extraction gives *html* without mapping links onto its Markdown."""
    with monkeypatch.context() as patch:
        patch.setattr(extractor, "add_links", lambda markdown, *args: markdown)
        return extract(html, url, True)


def test_the_main_contents_links_are_in_the_markdown_with_absolute_urls(monkeypatch: pytest.MonkeyPatch) -> None:
    fields = extract(PAGE, URL, True)
    markdown = fields["markdown"]
    assert links_of(markdown) == [
        ("turns them into torrents", "http://news.example/floods"),
        ("the map of the Tana", "http://news.example/maps/tana.html"),
        ("a survey of 2024", "https://survey.example/report?year=2024&region=north"),
        ("notes ] on (the [draft", "http://news.example/odd%20path/%28draft%29%20v2.html"),
        ("the open data set", "http://data.example/set"),
        ("open()", "http://news.example/api/open"),
        ("Ola Nordmann", "http://news.example/people/ola"),
        ("Tana", "http://news.example/rivers/tana"),
        ("Glomma", "http://news.example/rivers/glomma"),
    ]
    assert "[a survey of **2024**](https://survey.example/report?year=2024&region=north)" in markdown
    assert "with the [`open()`](http://news.example/api/open)" in markdown
    # Fragments, javascript:, mailto:, tel:, ftp:, the page itself and a URL over the cap: their text, unlinked.
    flat = " ".join(markdown.split())
    for words in ("the valleys section,", "click here for", "write to the editor,", "call the desk,", "the raw data or",
                  "reload this very page.", "an archive far too long and"):  # fmt: skip
        assert words in flat
    assert "javascript" not in markdown and "mailto" not in markdown and "secret" not in markdown
    # Navigation, header, aside and footer stay out, as they did; a menu the extraction dropped
    # links none of its words where the content has them ("# Rivers of the North", "Salmon return").
    for boilerplate in ("World", "Weather", "News home", "Related", "Privacy", "Terms"):
        assert boilerplate not in markdown
    # text is what it was; the Markdown too, but for its links.
    before = without_links(monkeypatch, PAGE, URL)
    assert fields["text"] == before["text"] and "](" not in fields["text"]
    unlinked = markdown
    for _, url in links_of(markdown):
        unlinked = unlinked.replace(f"]({url})", "", 1)
    assert unlinked.replace("[", "").replace("\\", "") == before["markdown"].replace("[", "").replace("\\", "")


def test_relative_links_resolve_against_base_href() -> None:
    page = PAGE.replace("<head>", '<head><base href="https://cdn.example/mirror/">')
    links = dict(links_of(extract(page, URL, True)["markdown"]))
    assert links["turns them into torrents"] == "https://cdn.example/floods"
    assert links["the map of the Tana"] == "https://cdn.example/maps/tana.html"
    assert links["a survey of 2024"].startswith("https://survey.example/")


def test_a_page_whose_links_are_all_boilerplate_has_none() -> None:
    page = PAGE.replace("<article>", "<article><h2>Front</h2>").replace('href="/', 'href="#')
    page = page.replace('href="../', 'href="#').replace('href="https://survey', 'href="#survey')
    page = page.replace('href="http://reader', 'href="#reader')
    assert links_of(extract(page, URL, True)["markdown"]) == []


@pytest.mark.parametrize(
    ("href", "expected"),
    [
        ("/a b/(c)<d>", "http://news.example/a%20b/%28c%29%3Cd%3E"),
        (" /spaced \n", "http://news.example/spaced"),
        ("//other.example/x", "http://other.example/x"),
        ("HTTPS://Other.Example/Ünïcode?q=å", "https://other.example/%C3%9Cn%C3%AFcode?q=%C3%A5"),
        ("http://bücher.example/", "http://xn--bcher-kva.example/"),
        ("page.html#part", "http://news.example/rivers/page.html#part"),
        ("#part", None),
        ("", None),
        ("north.html#other-part", None),  # the page itself
        ("JavaScript:alert(1)", None),
        ("java\nscript:alert(1)", None),
        ("mailto:a@b.example", None),
        ("data:text/html,<b>x</b>", None),
        ("file:///etc/passwd", None),
        ("http://", None),
        ("http://[::1", None),
        ("/" + "x" * 2083, None),
    ],
)
def test_link_urls(href: str, expected: str | None) -> None:
    assert link_url(href, URL, URL) == expected


def test_the_cap_on_a_links_url_is_the_callers() -> None:
    assert link_url("/" + "x" * 50, URL, URL, max_length=40) is None
    assert link_url("/" + "x" * 10, URL, URL, max_length=40) == "http://news.example/" + "x" * 10
    links = links_of(extract(PAGE, URL, True, max_url_length=30)["markdown"])
    assert ("turns them into torrents", "http://news.example/floods") in links
    assert all(len(url) <= 30 for _, url in links) and len(links) < 9


def test_a_link_the_cut_of_the_markdown_ends_is_its_text() -> None:
    markdown = "A river [runs \\] cold](http://news.example/a-very-long-address/of/the/rivers) all year."
    assert cut_markdown(markdown, 1000) == markdown
    assert cut_markdown(markdown, 50) == "A river runs \\] cold"
    assert cut_markdown(markdown, 20) == "A river [runs \\] col"  # its text cut: a bracket, no link
    assert cut_markdown(markdown[:12], 1000) == markdown[:12]  # not cut: as it is


# The fast paths of the mapping, each against what it stands for: a page's resolver against
# link_url, the blanked text against the regular expression of words, the code spans against a
# walk over the runs of backticks, the skipping of words against the words' own offsets.

BASES = [
    URL,
    "https://cdn.example/mirror/",
    "http://news.example/rivers/north.html?page=2#top",  # a query and a fragment of its own
    "http://reader:secret@news.example/rivers/north.html",  # user info
    "http://news.example/a b/(c)/north.html",  # characters safe_url_string changes
    "http://bücher.example/rivers/",  # a host IDNA changes
    "http://[::1]:8080/rivers/north.html",
    "http://[::1/rivers/",  # a broken host
    "http://news.example/rivers/north.html?q=\x0b",  # a control character safe_url_string strips at the end only
    "http://news.example",  # no path
    "HTTPS://News.Example:8443/Rivers/",  # capitals, a port, a directory
    "http://news.example/a//b/./c/../north.html",  # empty and dot segments
    "http://news.example/a;x/b;y",  # parameters
    "mailto:desk@news.example",  # no web URL
]
PAGES = [URL, "http://news.example/rivers/_", "http://news.example/rivers/page.html", "http://news.example/"]
HREFS = [
    "page.html", "a/b/c.html", "a/", "/a/b", "/a/", "/", "...", ".hidden", "a..b/c", "x", "_", "/_", "a//b", "a/./b",
    "rivers/north.html", "/rivers/north.html", "a/../b", "./a", "../a", "a/.", "//a/b", "/" + "z" * 38,
    "page.html#part", "page.html#part-2.b_c~d", "../maps/tana.html#north", "/floods#2024", "./#x", ".#x", "..#x",
    "?#x", "?q=1#x", "//other.example/p#x", "//other.example#x", "https://other.example/p?a=1#x", "HTTPS://Other.Example/p#x",
    "north.html#other-part", "north.html", "page.html", "page.html#", "page.html#a b", "page.html#%41", "page.html#ü",
    "page.html#a#b", "page.html#(x)", " page.html #x", "page.html\t#x", "page.html\u3000#x", "pa ge.html#x",
    "(draft).html#x", "ünï.html#x", "page.html?q=å#x", "javascript:alert(1)#x", "mailto:a@b.example#x", "data:,x#y",
    "ftp://files.example/x#y", "http://reader:secret@data.example/set#x", "http://[::1#x", "http://#x", "http:#x",
    "http:page.html#x", "#only", "", "   ", None, "/" + "x" * 30 + "#" + "y" * 8, "/" + "x" * 2070 + "#frag",
    "/" + "x" * 2075 + "#frag", "a/" * 40 + "../" * 40 + "page.html#x", "a/../" * 7 + "x#abcd",
]  # fmt: skip


@pytest.mark.parametrize("base", BASES)
@pytest.mark.parametrize("max_length", [MAX_URL_LENGTH, 40])
def test_a_pages_resolver_gives_what_link_url_gives(base: str, max_length: int) -> None:
    for page in PAGES:
        for hrefs in (HREFS, HREFS[::-1]):  # the part before a fragment resolved before it, and after
            resolve = _resolver(base, page, max_length)
            for href in hrefs + hrefs:  # (the second time from what it keeps)
                assert resolve(href) == link_url(href, base, page, max_length), (base, page, href)


def blanked(text: str) -> str:
    """What :func:`_blank` stands for: each character not of a word (``[^\\W_]``) a space."""
    return re.sub(r"[\W_]", " ", text)


def test_the_blanked_text_has_the_words_of_the_regular_expression_at_their_offsets() -> None:
    alphanumeric = [chr(c) for c in range(0x80, sys.maxunicode + 1) if chr(c).isalnum()]
    others = [chr(c) for c in range(0x80, sys.maxunicode + 1) if not chr(c).isalnum()]  # (surrogates too)
    random = Random(11)
    texts = ["", "plain words, snake_case and 42 (x) [y]", "café ¶ naïve “quoted” — 東京 ﬁsh Ωmega", "\ud800 lone"]
    texts += ["é" * 40, "".join(map(chr, range(sys.maxunicode + 1)))]  # (every character at once)
    # every alphanumeric character outside ASCII, among enough ASCII to be blanked byte by byte
    for i in range(0, len(alphanumeric), 300):
        texts.append("ab_c, " * 500 + " ".join(alphanumeric[i : i + 300]) + "x.y")
    # characters outside ASCII that are not of words: a few kinds (replaced), many (the expression)
    for kinds in (1, 16, 17, 40):
        for _ in range(30):
            chosen = random.sample(others, kinds)
            texts.append("".join(random.choice(["word ", "x_y ", "é", *chosen]) for _ in range(2000)))
    for text in texts:
        blank = _blank(text)
        assert blank == blanked(text), text[:80]
        assert blank.split() == re.findall(r"[^\W_]+", text)


def code_spans(markdown: str) -> list[tuple[int, int]]:
    """The code spans by their definition: each run of backticks not after a backslash opens one
    (when none is open), the next run of as many closes it."""
    spans = []
    opened: re.Match[str] | None = None
    for run in re.finditer(r"`+", markdown):
        if opened is None:
            if not run.start() or markdown[run.start() - 1] != "\\":
                opened = run
        elif len(run.group()) == len(opened.group()):
            spans.append((opened.start(), run.end()))
            opened = None
    return spans


def test_code_spans_are_runs_of_backticks_to_the_next_run_of_as_many() -> None:
    random = Random(7)
    texts = ["", "`a`", "``a`b``", "\\`a` `b`", "`a``", "``` x ``` `y`", "a`b\\``c`"]
    texts += ["".join(random.choice("```\\ab\n") for _ in range(random.randint(1, 40))) for _ in range(20000)]
    for text in texts:
        assert _code_spans(text) == code_spans(text), text


def test_words_are_skipped_in_the_blanked_text_as_the_regular_expression_finds_them() -> None:
    random = Random(3)
    pieces = ["word", "x_y", "é", "東京", "42", " ", "  ", "**", "`", "\\[", "¶", "\n", "—"]
    for _ in range(50):
        text = "".join(random.choice(pieces) for _ in range(random.randint(0, 400)))
        blank = _blank(text)
        words = list(re.finditer(r"[^\W_]+", text))
        for position in {0, *(word.end() for word in words[::7])}:
            after = [word for word in words if word.start() >= position]
            for count in {0, 1, 2, 3, 63, 64, 65, 100, len(after)}:
                if count <= len(after):
                    assert _skip(blank, position, count) == (after[count - 1].end() if count else position)
                    if after:
                        expected = (after[0].start(), after[count - 1].end()) if count else (after[0].start(),) * 2
                        assert _next_words(count).match(blank, position).span(1) == expected  # type: ignore[union-attr]
                else:
                    with pytest.raises(LookupError):
                        _skip(blank, position, count)
