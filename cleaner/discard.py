"""trafilatura's XPaths of the main-text search (where the text is, what to prune) as Python
selectors: one pass over the tree each, the same elements chosen.

Why not trafilatura's own XPaths: they test ``id``, ``class`` and ``style`` with EXSLT regular
expressions (``re:test``), which lxml runs as a Python callback for every element the expression
reaches, attribute or not, and they walk every descendant (``.//*``) to test its tag. On the
extraction corpus they were 40 % of the extraction's CPU (about 22 ms of a 50 KB documentation
page, whose code samples are thousands of ``<span>``). The selectors walk only the tags an
expression names (lxml's C iterator), read the attributes with ``Element.get``, run the same
regular expressions only where there is a value, and return the same elements in the same
(document) order: the extraction is 1.7 times faster, its text the same on every page of the
extraction corpus and of a public news benchmark (181 pages).

They are built from trafilatura's own expressions: the regular expressions are read out of them,
and the rest of each expression must be, word for word, the one its selector was written for
(:data:`TEMPLATES`). A list of trafilatura whose expressions differ keeps its own (see
:func:`install`), so an upgrade can make the cleaner slower but never make a selection differ from
trafilatura's own; ``tests/unit/test_discard.py`` compares both on every element of the extraction
corpus.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

Selector = Callable[[Any], list[Any]]
Search = Callable[[str], "re.Match[str] | None"]
Test = Callable[[str], bool]

#: A ``re:test(attribute, 'pattern')`` or ``re:test(attribute, 'pattern', 'flags')``.
_PATTERN = re.compile(r"(re:test\([^,]+, ')([^']*)('(?:, '([a-z]*)')?\))")
#: The tags of ``self::div or self::item or self::list or self::p or self::section or self::span``.
_BLOCKS = ("div", "item", "list", "p", "section", "span")


def patterns_of(path: str, template: str) -> list[Search] | None:
    """The ``re:test`` patterns of XPath *path*, compiled (with their flags), if, with them taken
    out (``{}``; the flags stay) and its white space collapsed, it is *template*; else None.
    None too if one of them matches an empty string (a missing attribute, which the selectors
    never test)."""
    flat = " ".join(path.split())
    found = [_search(m.group(2), re.IGNORECASE if "i" in (m.group(4) or "") else 0) for m in _PATTERN.finditer(flat)]
    skeleton = _PATTERN.sub(lambda m: m.group(1) + "{}" + m.group(3), flat)
    if skeleton != template or any(search("") is not None for search in found):
        return None
    return found


def _search(pattern: str, flags: int = 0) -> Search:
    """EXSLT ``re:test`` of *pattern* as lxml runs it (``re.search``), for a present attribute: a
    missing one (an empty string to XPath) is never tested, so :func:`patterns_of` refuses
    patterns that match an empty string."""
    return re.compile(pattern, flags).search


def _remembering(*searches: Search) -> tuple[Test, ...]:
    """Each of *searches* as a test whose answer is remembered per value, for one pass over one
    tree (so what is kept is at most that tree's values): a page repeats its ``class`` values
    thousands of times (a documentation page's code samples are ``<span class="n">`` …), and a
    lookup costs a third of a search. With the class tests remembered, the OVERALL_DISCARD_XPATH
    selectors cost a fifth less on the extraction corpus (1.91 to 1.53 ms a page). Ids are mostly
    unique: their tests are not remembered."""
    return tuple(
        functools.lru_cache(maxsize=None)(lambda value, search=search: search(value) is not None) for search in searches
    )


def _first(element: Any, one: str, one_value: str, other: str, other_value: str) -> str:
    """XPath's string of ``@one|@other`` when both are present: the value of the one that comes
    first on the element."""
    names = element.keys()
    return one_value if names.index(one) < names.index(other) else other_value


def _navigation(consent_search: Search, by_id: Search, class_search: Search) -> Selector:
    def select(tree: Any) -> list[Any]:
        consent, by_class = _remembering(consent_search, class_search)
        chosen = []
        for element in tree.iterdescendants(*_BLOCKS):
            get = element.get
            ident, cls = get("id"), get("class")
            if ident is not None:
                if (
                    by_id(ident)
                    or consent(ident if cls is None else _first(element, "id", ident, "class", cls))
                    or (cls is not None and by_class(cls))
                ):
                    chosen.append(element)
                    continue
            elif cls is not None and (by_class(cls) or consent(cls)):
                chosen.append(element)
                continue
            if (
                get("data-lp-replacement-content") is not None
                or "nav" in (get("role") or "").replace("N", "n")
                or "MostPopularStories" in (get("data-component") or "")
            ):
                chosen.append(element)
        return chosen

    return select


def _hidden(hidden: Search, by_id: Search, class_search: Search) -> Selector:
    def select(tree: Any) -> list[Any]:
        from lxml.etree import Element

        (by_class,) = _remembering(class_search)
        chosen = []
        for element in tree.iterdescendants(Element):  # elements only, as ``*``
            get = element.get
            ident, cls, style = get("id"), get("class"), get("style")
            if cls is not None and (cls == "comments-title" or by_class(cls)):
                chosen.append(element)
            elif ident is not None and (
                by_id(ident)
                or (ident if cls is None else _first(element, "id", ident, "class", cls)).startswith("reply-")
                or hidden(ident if style is None else _first(element, "id", ident, "style", style))
            ):
                chosen.append(element)
            elif ident is None and cls is not None and cls.startswith("reply-"):
                chosen.append(element)
            elif style is not None and (
                "display:none" in style or "display: none" in style or (ident is None and hidden(style))
            ):
                chosen.append(element)
            elif get("aria-hidden") == "true":
                chosen.append(element)
        return chosen

    return select


def _has(search: Search, value: str | None) -> bool:
    return value is not None and search(value) is not None


def _appended(by_id: Search, by_class: Search, exact_id: Search, exact_class: Search) -> Selector:
    def select(tree: Any) -> list[Any]:
        chosen = []
        for element in tree.iterdescendants("div", "section", "aside"):
            ident, cls = element.get("id"), element.get("class")
            if (_has(by_id, ident) or _has(by_class, cls)) and (
                next(element.iterdescendants("h1"), None) is None or _has(exact_id, ident) or _has(exact_class, cls)
            ):
                chosen.append(element)
        return chosen

    return select


def _share_buttons() -> Selector:
    def select(tree: Any) -> list[Any]:
        return [
            element
            for element in tree.iterdescendants("div", "section", "aside")
            if "elementor-share-buttons" in (element.get("class") or "")
        ]

    return select


def _comments(by_id: Search, by_class: Search, list_id: Search, list_class: Search) -> Selector:
    def select(tree: Any) -> list[Any]:
        chosen = []
        for element in tree.iterdescendants("div", "list", "section", "details", "ol", "ul"):
            ident, cls = element.get("id"), element.get("class")
            if (_has(by_id, ident) or _has(by_class, cls)) and (
                element.tag not in ("ol", "ul") or _has(list_id, ident) or _has(list_class, cls)
            ):
                chosen.append(element)
        return chosen

    return select


def _containing(word: str, lower: str | None = None) -> Selector:
    """``contains(@id, word) or contains(@class, word)`` on the block tags, with *lower* (a capital)
    lowered first as ``translate`` does."""

    def select(tree: Any) -> list[Any]:
        chosen = []
        for element in tree.iterdescendants(*_BLOCKS):
            ident, cls = element.get("id") or "", element.get("class") or ""
            if lower is not None:
                ident, cls = ident.replace(lower, lower.lower()), cls.replace(lower, lower.lower())
            if word in ident or word in cls:
                chosen.append(element)
        return chosen

    return select


_CONTENT = ("article", "div", "main", "section")


def _first_child_matches(test: Callable[[Any], bool]) -> Selector:
    """``.//*[self::article or self::div or self::main or self::section][test][1]``: for every
    element, its first child that is one of those and passes *test* (in document order)."""

    def select(tree: Any) -> list[Any]:
        chosen, parents = [], set()
        for element in tree.iterdescendants(*_CONTENT):
            if test(element):
                parent = element.getparent()
                if parent not in parents:
                    parents.add(parent)
                    chosen.append(element)
        return chosen

    return select


def _first_match(test: Callable[[Any], bool], tags: tuple[str, ...] = _CONTENT) -> Selector:
    """``(.//*[self::… ][test])[1]``: the first such element in document order, if any."""

    def select(tree: Any) -> list[Any]:
        return next(([element] for element in tree.iterdescendants(*tags) if test(element)), [])

    return select


def _article_body(by_id: Search, by_class: Search) -> Selector:
    def test(element: Any) -> bool:
        get = element.get
        cls, ident = get("class"), get("id")
        return (
            cls in ("post", "entry")
            or get("itemprop") == "articleBody"
            or ident == "articleContent"
            or _has(by_id, ident)
            or _has(by_class, cls)
        )

    return _first_child_matches(test)


def _story(by_id: Search, fulltext: Search, by_class: Search) -> Selector:
    def test(element: Any) -> bool:
        get = element.get
        cls, ident = get("class"), get("id")
        return (
            get("role") == "article"
            or ident in ("article", "story")
            or cls in ("postarea", "art-postcontent", "text", "cell", "story")
            or _has(by_id, ident)
            or _has(fulltext, cls)
            or _has(by_class, cls)
        )

    return _first_match(test)


def _main_content(by_id: Search, by_class: Search) -> Selector:
    def test(element: Any) -> bool:
        get = element.get
        cls, ident = get("class"), get("id")
        return (
            ident == "content"
            or cls == "content"
            or _has(by_id, ident)
            or _has(by_class, cls)
            or (ident is not None and "main-content" in ident.replace("C", "c").replace("M", "m"))
            or (cls is not None and "main-content" in cls.replace("C", "c").replace("M", "m"))
            or (cls is not None and "page-content" in cls.replace("C", "c").replace("P", "p"))
        )

    return _first_match(test)


def _main() -> Selector:
    """``(.//*[self::article or self::div or self::section][starts-with(@class|@id|@role, 'main')])[1]
    | (.//main)[1]``: the first of each, in document order."""

    def select(tree: Any) -> list[Any]:
        chosen, starts, main = [], False, False
        for element in tree.iterdescendants("article", "div", "section", "main"):
            if element.tag == "main":
                if not main:
                    main = True
                    chosen.append(element)
            elif not starts and any((element.get(name) or "").startswith("main") for name in ("class", "id", "role")):
                starts = True
                chosen.append(element)
            if main and starts:
                break
        return chosen

    return select


_WHERE_BLOCKS = "self::div or self::item or self::list or self::p or self::section or self::span"
#: For each list of trafilatura.xpaths replaced: its expressions (white space collapsed, each
#: ``re:test`` pattern as ``{}``) and what makes each one's selector from those patterns.
TEMPLATES: dict[str, list[tuple[str, Callable[..., Selector]]]] = {
    "OVERALL_DISCARD_XPATH": [
        (
            f".//*[{_WHERE_BLOCKS}][ @data-lp-replacement-content or contains(translate(@role, 'N', 'n'), 'nav') or "
            "contains(@data-component, 'MostPopularStories') or re:test(@id|@class, '{}') or re:test(@id, '{}') or "
            "re:test(@class, '{}')]",
            _navigation,
        ),
        (
            ".//*[@class='comments-title' or starts-with(@id|@class, 'reply-') or re:test(@id|@style, '{}') or "
            "contains(@style, 'display:none') or contains(@style, 'display: none') or re:test(@id, '{}') or "
            "re:test(@class, '{}') or @aria-hidden='true']",
            _hidden,
        ),
    ],
    "BODY_XPATH": [
        (
            ".//*[self::article or self::div or self::main or self::section][ @class='post' or @class='entry' or "
            "@itemprop='articleBody' or @id='articleContent' or re:test(@id, '{}') or re:test(@class, '{}') ][1]",
            _article_body,
        ),
        ("(.//article)[1]", lambda: _first_match(lambda element: True, ("article",))),
        (
            "(.//*[self::article or self::div or self::main or self::section][ @role='article' or @id='article' or "
            "@id='story' or @class='postarea' or @class='art-postcontent' or @class='text' or @class='cell' or "
            "@class='story' or re:test(@id, '{}') or re:test(@class, '{}', 'i') or re:test(@class, '{}') ])[1]",
            _story,
        ),
        (
            "(.//*[self::article or self::div or self::main or self::section][ @id='content' or @class='content' or "
            "re:test(@id, '{}') or re:test(@class, '{}') or contains(translate(@id, 'CM','cm'), 'main-content') or "
            "contains(translate(@class, 'CM','cm'), 'main-content') or "
            "contains(translate(@class, 'CP','cp'), 'page-content') ])[1]",
            _main_content,
        ),
        (
            "(.//*[self::article or self::div or self::section][ starts-with(@class, 'main') or "
            "starts-with(@id, 'main') or starts-with(@role, 'main')])[1]|(.//main)[1]",
            _main,
        ),
    ],
    "RAW_TREE_PRUNE_XPATH": [
        (
            ".//*[self::div or self::section or self::aside][ re:test(@id, '{}') or re:test(@class, '{}')][ "
            "not(.//h1) or re:test(@id, '{}') or re:test(@class, '{}')]",
            _appended,
        ),
        (
            ".//*[self::div or self::section or self::aside][contains(@class, 'elementor-share-buttons')]",
            _share_buttons,
        ),
    ],
    "REMOVE_COMMENTS_AND_LISTS_XPATH": [
        (
            ".//*[self::div or self::list or self::section or self::details or self::ol or self::ul][ "
            "re:test(@id, '{}') or re:test(@class, '{}')][ not(self::ol or self::ul) or re:test(@id, '{}') or "
            "re:test(@class, '{}')]",
            _comments,
        ),
    ],
    "TEASER_DISCARD_XPATH": [
        (
            f".//*[{_WHERE_BLOCKS}][ contains(translate(@id, 'T', 't'), 'teaser') or "
            "contains(translate(@class, 'T', 't'), 'teaser')]",
            lambda: _containing("teaser", "T"),
        ),
    ],
    "DISCARD_IMAGE_ELEMENTS": [
        (
            f".//*[{_WHERE_BLOCKS}][ contains(@id, 'caption') or contains(@class, 'caption')]",
            lambda: _containing("caption"),
        ),
    ],
}


def selectors(name: str, paths: list[str]) -> list[Selector] | None:
    """Selectors for the expressions *paths* of trafilatura's list *name*, or None if they are not
    the ones of :data:`TEMPLATES`."""
    templates = TEMPLATES.get(name, [])
    if len(paths) != len(templates) or not templates:
        return None
    made = []
    for path, (template, build) in zip(paths, templates, strict=True):
        patterns = patterns_of(path, template)
        if patterns is None or len(patterns) != template.count("{}"):
            return None
        made.append(build(*patterns))
    return made


def install() -> dict[str, bool]:
    """Put the selectors in place of trafilatura's lists of :data:`TEMPLATES` (the list objects its
    modules share) in this process; per list, whether it now holds selectors (a list whose
    expressions are not the ones written for keeps them: False)."""
    from trafilatura import xpaths

    done = {}
    for name in TEMPLATES:
        current = getattr(xpaths, name)
        if not any(hasattr(expression, "path") for expression in current):  # installed before
            done[name] = True
            continue
        made = selectors(name, [getattr(expression, "path", "") for expression in current])
        if made is not None:
            current[:] = made
        done[name] = made is not None
    return done


__all__ = ["TEMPLATES", "install", "patterns_of", "selectors"]
