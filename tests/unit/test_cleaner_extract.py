"""The extraction step's parts (cleaner/extractor.py, cleaner/plugins/extract.py): the visible
text of a page without main text, the size cut, and the child process's deadline."""

from __future__ import annotations

import re
import time

import pytest

from crawlhive.cleaner.extractor import ExtractionTimeout, Extractor, visible_text
from crawlhive.cleaner.plugins.extract import cut, normalise


def test_the_visible_text_leaves_out_what_a_reader_does_not_see() -> None:
    html = (
        "<?xml version='1.0' encoding='utf-8'?><html><head><title>T</title><style>p {}</style></head>"
        "<body><h1>About</h1> <a href='/'>Home</a><script>var x = 1;</script><p>a<br>b</p></body></html>"
    )
    assert visible_text(html).split() == ["About", "Home", "a", "b"]
    assert "About\n" in visible_text(html)
    assert visible_text("") == visible_text("   ") == ""


def test_normalise_makes_each_run_of_spaces_one_and_drops_blank_lines() -> None:
    def by_its_definition(text: str) -> str | None:  # per line: runs of the four spaces, then strip
        lines = (re.sub(r"[ \t\u00a0\u200b]+", " ", line).strip() for line in text.splitlines())
        return "\n".join(line for line in lines if line) or None

    samples = [
        "a  b", "a b", "a\tb", "a \tb", "a\t b", "a\u00a0b", "a \u00a0 b", "a\u200bb", "a\u200b\u200bb",
        " lead", "trail\t", "  \n\n \u00a0\n", "one\r\ntwo\rthree\u2028four\x0bfive\x1csix\x85seven",
        "em\u2003space \u2003 kept", "x" + " " * 50 + "y\t\t\n\n\nz",
    ]  # fmt: skip
    for text in samples:
        assert normalise(text) == by_its_definition(text), repr(text)
    assert normalise("") is None and normalise(" \t\n\u00a0") is None
    assert normalise("a \t b\n\n  c  ") == "a b\nc"


def test_cut_keeps_whole_lines_or_characters_within_the_byte_limit() -> None:
    assert cut("short", 10) == "short" and cut(None, 10) is None
    assert cut("line one\nline two", 12) == "line one"
    assert cut("é" * 10, 5) == "éé"  # 2 bytes each: never half a character
    text = "x" * 300_000
    assert len(cut(text, 262144) or "") == 262144


def test_an_extraction_past_its_deadline_is_stopped_and_the_next_page_is_extracted() -> None:
    page = "<html><body>" + "<div><p>Office: call +1 202-555-0143</p></div>\n" * 20000 + "</body></html>"
    extractor = Extractor()
    try:
        extractor.start()
        started = time.monotonic()
        with pytest.raises(ExtractionTimeout):
            extractor.extract(page, "http://big.example/", 0.3)
        assert time.monotonic() - started < 15  # 0.3 s, then a new child started (a few seconds at most)
        fields = extractor.extract("<h1>About</h1> <a href='/'>Home</a>", "http://small.example/", 10)
        assert fields["text"].split() == ["About", "Home"]
    finally:
        extractor.close()


def test_one_parse_gives_the_metadata_and_the_main_text() -> None:
    """extract(): title, description, date and the declared language from the page's one tree,
    the main text by trafilatura's fast path (cleaner/extractor.py)."""
    from crawlhive.cleaner.extractor import extract

    html = (
        "<html lang='fr-FR'><head><title>Les vendanges | Journal</title>"
        "<meta name='description' content='Le point sur les vendanges.'>"
        "<meta property='article:published_time' content='2022-07-04T08:00:00Z'></head><body>"
        "<nav><a href='/'>Accueil</a> <a href='/a'>Archives</a></nav><article><h1>Les vendanges</h1>"
        + "<p>Les vendanges commencent tôt cette année dans toute la région, disent les vignerons.</p>" * 4
        + "</article><footer>Mentions légales</footer></body></html>"
    )
    fields = extract(html, "https://journal.example/2022/vendanges")
    assert fields["title"] == "Les vendanges" or fields["title"].startswith("Les vendanges")
    assert fields["description"] == "Le point sur les vendanges."
    assert fields["date"] == "2022-07-04"
    assert fields["language"] == "fr-FR"
    assert "vendanges commencent" in fields["text"] and "Mentions légales" not in fields["text"]
    assert "Archives" not in fields["text"]
    # Not HTML at all, or nothing: no crash, the visible text (empty).
    assert extract("", "https://journal.example/")["text"] == ""
    assert extract("\x00\x01", "https://journal.example/")["text"] is not None


def test_two_children_share_a_batch_keep_its_order_and_stop_only_the_page_past_its_deadline() -> None:
    """CLEANER_EXTRACT_PROCESSES 2: the batch's pages go to whichever child answers first; each
    page gets the fields one child gives it, in the batch's order; a page past its deadline (from
    its hand-over; this one takes about 5 s alone) is stopped as too long while the other child
    goes on with the rest."""
    from crawlhive.cleaner.page import Page, Reject
    from crawlhive.cleaner.plugins.extract import ExtractPlugin

    def page(i: int, html: str) -> Page:
        return Page(item={"url": f"http://site{i}.example/", "response_url": None}, html=html, origin=f"t/0/{i}")

    small = [f"<html><body><article><h1>Page {i}</h1>" + f"<p>Paragraph {i} of this page, long enough.</p>" * 5
             + "</article></body></html>" for i in range(8)]  # fmt: skip
    slow = "<html><body>" + "<div><p>Office: call +1 202-555-0143</p></div>\n" * 80000 + "</body></html>"
    one = ExtractPlugin(1.5, 262144, processes=1)
    two = ExtractPlugin(1.5, 262144, processes=2)
    try:
        assert len({e.answers.fileno() for e in two.extractors}) == 2  # two children, each ready
        alone = [page(i, html) for i, html in enumerate(small)]
        assert one.process_batch(alone) == alone
        shared = [page(i, html) for i, html in enumerate(small[:3])] + [page(99, slow)]
        shared += [page(i, html) for i, html in enumerate(small[3:], start=3)]
        filled: dict[str, float] = {}
        fill = two._fill

        def timed_fill(page: Page, fields: dict[str, object]) -> None:
            fill(page, fields)
            filled[page.origin] = time.monotonic()

        two._fill = timed_fill  # type: ignore[method-assign]
        started = time.monotonic()
        kept = two.process_batch(shared)
        assert time.monotonic() - started < 15
        # the pages after the slow one were extracted by the other child while it ran, not after
        assert max(filled.values()) < started + 1.5
        assert [p.origin for p in kept] == [f"t/0/{i}" for i in range(8)]  # the batch's order, the slow one out
        assert [p.record for p in kept] == [p.record for p in alone]  # what one child gives, page for page
        stopped = shared[3]
        assert isinstance(stopped.extra["outcome"], Reject) and "CLEANER_MAX_SECONDS" in str(stopped.extra["outcome"])
        assert stopped.spent >= 1.5 and all(p.spent < 1.5 for p in kept)
        again = [page(i, html) for i, html in enumerate(small)]  # the killed child was replaced
        assert [p.record for p in two.process_batch(again)] == [p.record for p in alone]
    finally:
        one.close()
        two.close()
