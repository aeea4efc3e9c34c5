"""crawlhive.cleaner.discard: the Python selectors choose exactly what trafilatura's pruning
expressions choose, and step aside when trafilatura's expressions change."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from typing import Any

import lxml.html
import pytest
from lxml.etree import XPath
from support import corpus
from trafilatura import xpaths

from crawlhive.cleaner import discard, extractor


@pytest.fixture
def trafilatura_own() -> Iterator[dict[str, list[Any]]]:
    """trafilatura's own expressions per replaced list, from a fresh import of its module (this
    process may have installed the selectors already); the shared lists are restored after."""
    saved = {name: list(getattr(xpaths, name)) for name in discard.TEMPLATES}
    spec = importlib.util.find_spec("trafilatura.xpaths")
    assert spec is not None and spec.loader is not None
    fresh = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fresh)
    yield {name: list(getattr(fresh, name)) for name in discard.TEMPLATES}
    for name, expressions in saved.items():
        getattr(xpaths, name)[:] = expressions


def made(own: dict[str, list[Any]]) -> dict[str, list[discard.Selector]]:
    selectors = {name: discard.selectors(name, [e.path for e in expressions]) for name, expressions in own.items()}
    # If this fails after an upgrade of trafilatura, the cleaner still works (the changed list
    # keeps its expressions) but is slower: write the new expressions' selectors.
    assert all(selectors.values()), [name for name, made in selectors.items() if made is None]
    return {name: made for name, made in selectors.items() if made is not None}


def test_on_every_element_of_the_corpus_the_selectors_choose_what_trafilatura_chooses(trafilatura_own) -> None:
    mine = made(trafilatura_own)
    chosen = {name: 0 for name in mine}
    for sample in corpus.load():
        tree = extractor.parse(sample.html)
        for name, expressions in trafilatura_own.items():
            for own, selector in zip(expressions, mine[name], strict=True):
                expected = own(tree)
                assert selector(tree) == expected, (name, sample.url)
                chosen[name] += len(expected)
    assert chosen["OVERALL_DISCARD_XPATH"] > 500, chosen  # the corpus exercises them (871 today)


PAGE = """<html><body>
<div id="x" class="cookie-note">id first, class matches the consent pattern: kept by @id|@class</div>
<div class="cookie-note" id="x">class first: chosen</div>
<div id="cookie" class="plain">id first and matching: chosen</div>
<span role="NAVIGATION">role, N lowered</span><span role="Navigation">role, N only</span>
<p data-lp-replacement-content="">empty attribute still counts</p>
<section data-component="xMostPopularStoriesx">data-component</section>
<div id="footer-1">id token</div><div class="article-footer">class token</div>
<div class="ad-slot">^ad- class</div><div id="ad-slot">^ad- id</div><div class="big ad-slot">space ad-</div>
<b class="comments-title">any tag</b><b class="comments-title x">not equal</b>
<em id="reply-3" class="r">reply id first</em><em class="r" id="reply-3">class first</em>
<i style="color: red" id="hidden-x">style first, no match</i><i id="hidden-x" style="color: red">id first</i>
<i style="display:none">style</i><i style="a; display: none">style</i>
<u aria-hidden="true">aria</u><u aria-hidden="false">aria false</u>
<a class="x hide">class token</a><a id="akismet-1">id token</a>
<!-- a comment --><?pi x?>
<h2 class="sidebar">not one of the first expression's tags, not hidden</h2>
<div><div class="navbar"><p class="button">nested</p></div></div>
<div class="infinite-scroll"><p>appended, no h1: chosen</p></div>
<section id="infinitescroll"><h1>a title inside: kept</h1></section>
<aside class="mvp-post-add-box"><h1>exact: chosen even with an h1</h1></aside>
<div class="elementor-share-buttons x">share buttons</div>
<div id="comments">comments</div><div class="Commentary">not comments</div>
<ul class="post-comments"><li>a list of comments</li></ul><ol id="disqus_thread"><li>kept: not for lists</li></ol>
<details id="comment-form">details</details>
<span class="TeaserBox">teaser, T lowered</span><p id="figcaption">caption</p><p class="Caption">not: case</p>
<div><div class="entry">first entry child</div><div class="entry">second: not chosen</div></div>
<section itemprop="articleBody"><div class="post-body">a nested match is a first child too</div></section>
<article>first article</article><article>second</article>
<div class="FullText">fulltext, any case</div><div id="story-body-2">story</div>
<section class="Page-Content">page content, C and P lowered</section><div id="Main-Content">main content</div>
<div id="main-column">starts with main</div><main>main</main><div class="mainly">later</div>
</body></html>"""


def test_attribute_order_tags_and_odd_values_are_read_as_xpath_reads_them(trafilatura_own) -> None:
    mine = made(trafilatura_own)
    tree = lxml.html.document_fromstring(PAGE)
    for name, expressions in trafilatura_own.items():
        for own, selector in zip(expressions, mine[name], strict=True):
            expected = own(tree)
            assert expected, name  # each expression chooses something here
            assert selector(tree) == expected, name
    texts = [element.text for element in mine["OVERALL_DISCARD_XPATH"][0](tree)]
    assert (
        "class first: chosen" in texts
        and "id first, class matches the consent pattern: kept by @id|@class" not in texts
    )


def test_a_changed_expression_keeps_trafilatura_own(trafilatura_own) -> None:
    own = trafilatura_own["OVERALL_DISCARD_XPATH"]
    paths = [expression.path for expression in own]
    changed = [paths[0].replace("self::section", "self::article"), paths[1]]
    assert discard.selectors("OVERALL_DISCARD_XPATH", changed) is None
    assert discard.selectors("OVERALL_DISCARD_XPATH", paths[:1]) is None
    assert discard.selectors("NO_SUCH_XPATH", paths) is None
    for name, expressions in trafilatura_own.items():
        getattr(xpaths, name)[:] = expressions
    xpaths.OVERALL_DISCARD_XPATH[:] = [XPath(path, namespaces={"re": xpaths.REGEXP_NS}) for path in changed]
    done = discard.install()
    assert done == {name: name != "OVERALL_DISCARD_XPATH" for name in discard.TEMPLATES}
    assert all(isinstance(expression, XPath) for expression in xpaths.OVERALL_DISCARD_XPATH)
    assert not any(isinstance(expression, XPath) for expression in xpaths.TEASER_DISCARD_XPATH)
    xpaths.OVERALL_DISCARD_XPATH[:] = own
    assert all(discard.install().values())
    assert all(discard.install().values())  # twice is once


def test_the_extraction_uses_the_selectors_and_its_text_is_the_same(trafilatura_own) -> None:
    samples = corpus.load()[:30]
    for name, expressions in trafilatura_own.items():
        getattr(xpaths, name)[:] = expressions
    extractor._INSTALLED.update(discard={})  # as if done: the first extraction keeps trafilatura's XPaths
    with_xpaths = [extractor.extract(sample.html, sample.url)["text"] for sample in samples]
    assert all(isinstance(expression, XPath) for expression in xpaths.OVERALL_DISCARD_XPATH)
    extractor._INSTALLED.clear()
    extractor.parse("<p>x</p>")  # installs them, as the extraction child does on its first page
    assert extractor._INSTALLED["discard"] == {name: True for name in discard.TEMPLATES}
    assert [extractor.extract(sample.html, sample.url)["text"] for sample in samples] == with_xpaths
