"""crawlhive.cleaner.datesearch: the replacements return what htmldate's own functions return, and
find_date the same date, on every page of the extraction corpus; they step aside when htmldate's
functions or expressions change."""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterator
from copy import deepcopy
from types import ModuleType
from typing import Any

import htmldate.core
import lxml.html
import pytest
from htmldate import extractors
from support import corpus
from trafilatura.settings import set_date_params

from crawlhive.cleaner import datesearch, extractor

REPLACED = datesearch.REPLACED


def fresh_core() -> ModuleType:
    """A new htmldate.core, as htmldate has it (this process may have installed the replacements
    in the imported one already); it shares htmldate.extractors."""
    spec = importlib.util.find_spec("htmldate.core")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def own() -> ModuleType:
    return fresh_core()


@pytest.fixture
def mine() -> ModuleType:
    module = fresh_core()
    # If this fails after an upgrade of htmldate, the date search still works (htmldate keeps
    # its own functions) but is slower: check the replacements against the new code.
    assert datesearch.install(module) == dict.fromkeys(REPLACED, True)
    return module


def options(core: ModuleType, original: bool = True) -> Any:
    return core.Extractor(False, core.get_max_date("2030-01-01"), core.get_min_date(None), original, "%Y-%m-%d")


def search_tree(core: ModuleType, tree: Any) -> Any:
    """The tree find_date searches for candidates: a copy, cleaned and pruned as it does."""
    return extractors.discard_unwanted(core.clean_html(deepcopy(tree), core.CLEANING_LIST))


def test_on_every_page_of_the_corpus_the_replacements_return_what_htmldate_returns(own, mine) -> None:
    params = set_date_params(False)
    chosen = probed = 0
    for sample in corpus.load():
        tree = extractor.parse(sample.html)
        pruned = search_tree(own, tree)
        for where in (tree, pruned):
            expected = own.date_candidates(where, False)
            assert mine.date_candidates(where, False) == expected, sample.url
            chosen += len(expected)
        html = own.serialize(pruned)
        own.clean_html(pruned, ["script", "style"])
        text = " ".join(pruned.itertext())
        for original in (True, False):
            opts = options(own, original)
            assert mine.idiosyncrasies_search(html, opts) == own.idiosyncrasies_search(html, opts), sample.url
            for string, pattern in ((html, own.TIMESTAMP_PATTERN), (text, own.TIMESTAMP_LOOSE_PATTERN)):
                assert mine.pattern_search(string, pattern, opts) == own.pattern_search(string, pattern, opts)
        probed += extractors.DATE_CORE_PATTERN.search(html) is not None
        assert mine.find_date(tree, url=sample.url, **params) == own.find_date(tree, url=sample.url, **params)
        assert mine.find_date(tree, original_date=False, extensive_search=False) == own.find_date(
            tree, original_date=False, extensive_search=False
        ), sample.url
    assert chosen > 100 and probed, (chosen, probed)  # the corpus exercises them (262 and 2 today)


def test_the_process_wide_install_is_the_one_find_date_uses(own) -> None:
    """htmldate.core as imported (installed by the extraction's parse) gives the same dates."""
    extractor.parse("<html><body><p>installs</p></body></html>")
    assert htmldate.core.date_candidates.__module__ == datesearch.__name__
    params = set_date_params(False)
    for sample in corpus.load()[:20]:
        tree = extractor.parse(sample.html)
        assert htmldate.core.find_date(tree, url=sample.url, **params) == own.find_date(tree, url=sample.url, **params)


PAGE = """<html><body>
<div id="x" class="date">id first: the class is not read for date</div>
<div class="date" id="x">class first: chosen</div>
<div class="x" id="published">id second: not read for the cues</div>
<span itemprop="DateCreated">itemprop, D folded: chosen</span>
<p itemprop="DATE">only D folds: not chosen</p>
<p class="Datum">Datum: chosen</p>
<time class="Meta">Meta: chosen</time>
<div id="x" class="byline">a class cue with the id first: chosen</div>
<div id="x" class="meta">an id-or-class cue on the second: not chosen</div>
<div id="footer-info-lastmod">footer-info-lastmod: chosen</div>
<div class="x" id="footer-info-lastmod">footer-info-lastmod, id second: chosen</div>
<ul class="" itemprop="x">an empty first: not chosen</ul>
<li data-when="date">another attribute: not chosen</li>
<h1 class="date">not one of the tags: not chosen</h1><section class="published">neither</section>
<footer>footer: always</footer><p><small>small: always</small></p>
<div><span class="x"><h2 class="post-info">nested: chosen</h2></span></div>
<div class="published">Published 12.3.2021, updated 2021-04-05 10:11:12</div>
</body></html>"""


def test_attribute_order_itemprop_and_the_tags_are_read_as_htmldate_reads_them(own, mine) -> None:
    tree = lxml.html.document_fromstring(PAGE)
    expected = own.date_candidates(tree, False)
    assert mine.date_candidates(tree, False) == expected
    assert [element.text.split(":")[0] for element in expected] == [
        "class first",
        "itemprop, D folded",
        "Datum",
        "Meta",
        "a class cue with the id first",
        "footer-info-lastmod",
        "footer-info-lastmod, id second",
        "footer",
        "small",
        "nested",
        "Published 12.3.2021, updated 2021-04-05 10",
    ]
    assert mine.date_candidates(tree, True) == own.date_candidates(tree, True)  # htmldate's own
    without = lxml.html.document_fromstring(PAGE.replace("footer>", "div>").replace("small>", "b>"))
    assert mine.date_candidates(without, False) == own.date_candidates(without, False)
    for extensive in (False, True):
        assert mine.find_date(PAGE, extensive_search=extensive) == own.find_date(PAGE, extensive_search=extensive)


STRINGS = [
    "",
    "no date at all",
    "Python 3.11.7, 3.12/ and 1/2/3",
    "updated 1/2/34",
    "Datum: 12.3.2021",
    "released on 2021/04/05 at noon",
    "v.12.34 and /1.23 and .1/23",
    "<p>2021-04-05T10:11:12Z</p>",
    "2021-4-5 10:11:12",
    "at 10:11:12 on 2021-04-05",
    "2021-04-05",
    "1999-12-31 23:59:59+01:00",
    "date-1-2 and 12-3-4",
    "yayımlanma tarihi: 05.04.2021",
]


def test_the_probes_find_what_htmldate_patterns_need(own, mine) -> None:
    dot, slash = datesearch._CORE_DOT.search, datesearch._CORE_SLASH.search
    for string in STRINGS:
        core_found = extractors.DATE_CORE_PATTERN.search(string) is not None
        assert (dot(string) is not None or slash(string) is not None) == core_found, string
        for name, probe in datesearch._PROBES.items():
            if getattr(own, name).search(string):
                assert probe.search(string), (name, string)
        for original in (True, False):
            opts = options(own, original)
            assert mine.idiosyncrasies_search(string, opts) == own.idiosyncrasies_search(string, opts), string
            for pattern in (own.TIMESTAMP_PATTERN, own.TIMESTAMP_LOOSE_PATTERN, re.compile(r"(\d{4})")):
                assert mine.pattern_search(string, pattern, opts) == own.pattern_search(string, pattern, opts)
    found = [mine.idiosyncrasies_search(string, options(own)) for string in STRINGS]
    assert "2021-03-12" in found and "2021-04-05" in found


@pytest.mark.parametrize(
    ("module", "name", "value", "stepping_aside"),
    [
        ("core", "ID_CLASS_CUES", re.compile("[Mm]eta|time|publish|footer|stamp"), "date_candidates"),
        ("core", "CLASS_CUES", re.compile("info|byline", re.IGNORECASE), "date_candidates"),
        ("core", "FAST_TAGS", ["div", "p"], "date_candidates"),
        ("core", "is_date_candidate", lambda element: True, "date_candidates"),
        ("core", "date_candidates", lambda tree, extensive_search: [], "date_candidates"),
        ("core", "TIMESTAMP_LOOSE_PATTERN", re.compile(r"(\d{4}-\d{2}-\d{2})"), "pattern_search"),
        ("core", "pattern_search", lambda text, pattern, options: None, "pattern_search"),
        (
            "extractors",
            "DATE_CORE_PATTERN",
            re.compile(r"[0-9]{1,4}[./-][0-9]{1,2}[./-][0-9]{2,4}"),
            "idiosyncrasies_search",
        ),
        ("core", "idiosyncrasies_search", lambda htmlstring, options: None, "idiosyncrasies_search"),
    ],
)
def test_a_changed_function_or_expression_keeps_htmldate_own(
    monkeypatch: pytest.MonkeyPatch, module: str, name: str, value: Any, stepping_aside: str
) -> None:
    """What a replacement relies on is read from the module the function reads it from: a change
    there makes it step aside (the others are installed)."""
    if module == "extractors":  # shared by every htmldate.core: changed before the module is made
        monkeypatch.setattr(extractors, name, value)
    core = fresh_core()
    if module == "core":
        setattr(core, name, value)
    kept = getattr(core, stepping_aside)
    assert datesearch.replacements(core)[stepping_aside] is None
    assert datesearch.install(core) == {replaced: replaced != stepping_aside for replaced in REPLACED}
    assert getattr(core, stepping_aside) is kept


def test_a_function_without_source_keeps_htmldate_own(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_source(function: Any) -> str:
        raise OSError("could not get source code")

    monkeypatch.setattr(datesearch.inspect, "getsource", no_source)
    assert datesearch.install(fresh_core()) == dict.fromkeys(REPLACED, False)


def test_twice_is_once(mine) -> None:
    installed = [getattr(mine, name) for name in REPLACED]
    assert datesearch.install(mine) == dict.fromkeys(REPLACED, True)
    assert [getattr(mine, name) for name in REPLACED] == installed


@pytest.fixture
def htmldate_restored() -> Iterator[None]:
    saved = {name: getattr(htmldate.core, name) for name in REPLACED}
    yield
    for name, function in saved.items():
        setattr(htmldate.core, name, function)


def test_the_extraction_installs_them_on_its_first_parse(htmldate_restored, own) -> None:
    for name in REPLACED:
        setattr(htmldate.core, name, getattr(own, name))
    extractor._INSTALLED.clear()
    extractor.parse("<html><body><p>x</p></body></html>")
    assert extractor._INSTALLED["datesearch"] == dict.fromkeys(REPLACED, True)
    assert all(getattr(htmldate.core, name).__module__ == datesearch.__name__ for name in REPLACED)
