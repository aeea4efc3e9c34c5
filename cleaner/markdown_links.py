"""The links of the main content, put back into its Markdown (docs/contract.md §20.6).

The extraction runs without links: asking trafilatura for them changes which paragraphs it keeps
(it drops link-dense ones), and ``text`` must stay what it is. So its Markdown has no links, and
they are mapped back afterwards from the page's own tree, which trafilatura did not change (it
works on a copy):

1. The page's ``<a>`` elements are taken in document order, but not those under ``<nav>``,
   ``<header>``, ``<footer>``, ``<aside>``, ``<menu>``, an ARIA navigation, banner, contentinfo,
   complementary, menu or search role, ``aria-hidden``, or in code (``<pre>``), nor those whose
   ``href`` is empty or only a fragment (``#…``). The blocks that hold them (a paragraph, a list
   item, a table cell, a heading …) are cut into *runs*, the text between block boundaries, each
   with its words (``[^\\W_]+``: Markdown's escapes, emphasis and code marks hold no letter or
   digit, so a paragraph has the same words in the page and in the Markdown) and its links.
2. Each run is looked for, as its sequence of words, in the words of the Markdown, after the
   previous one found (the Markdown keeps the page's order). A run of fewer than
   :data:`MIN_WORDS` words must be all of a line, list item or table cell of the Markdown, within
   :data:`SHORT_WINDOW` characters of the previous match or else right after the last words of
   the element before it: a menu's "Rivers" is not the "Rivers" of "# Rivers of the North". A
   longer run the extraction kept only in part is looked for as each link with a few words
   either side. A run that is not found was not kept (boilerplate): its links are left out.
   Searches that find nothing have a budget (:data:`SEARCH_BUDGET`), so a page of thousands of
   runs the extraction dropped costs time linear in its size.
3. Each link of a run found becomes ``[its Markdown](absolute URL)`` at its words (widened to
   its punctuation and to emphasis or a code span it fills), unless that would cut into a code
   span, if its URL is one: resolved, ``http(s)`` (not ``javascript:``, ``mailto:``, ``data:``
   …), not the page itself, at most LINK_MAX_URL_LENGTH characters. Nothing else of the Markdown
   changes: taking the links out again gives it back as it was.

URLs are resolved against ``<base href>`` (itself against the page's URL) or the page's URL,
their user info dropped, made safe (``w3lib``'s ``safe_url_string``: what a browser sends) and
``(``, ``)``, ``<``, ``>`` and spaces percent-encoded, so a URL cannot end the Markdown link early.
The text of a link keeps trafilatura's escapes (``\\[``, ``\\]``, ``\\*`` …); a ``[`` or ``]``
that is not escaped is escaped.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin, urlsplit, urlunsplit

#: Words of a segment below which it is only looked for near the previous match.
MIN_WORDS = 3
#: How far (in characters of the words) past the previous match a short segment may be found.
SHORT_WINDOW = 600
#: How many times the Markdown's length searches that find nothing may read (see :class:`_Words`).
SEARCH_BUDGET = 32
#: Words either side of an anchor when its whole segment was not found.
CONTEXT_WORDS = 3
#: The default cap of a link's URL (characters): the crawler's LINK_MAX_URL_LENGTH default.
MAX_URL_LENGTH = 2083

_WORD = re.compile(r"[^\W_]+")
#: Subtrees whose links are not the page's content (or not text at all).
_SKIP = frozenset(
    ("nav", "header", "footer", "aside", "menu", "script", "style", "noscript", "template", "head", "svg",
     "iframe", "object", "pre", "select", "button", "textarea", "title")
)  # fmt: skip
_SKIP_ROLES = frozenset(("navigation", "banner", "contentinfo", "complementary", "menu", "menubar", "search"))
#: Elements that begin and end a run of text (a line or a paragraph of their own).
_BREAKS = frozenset(
    ("p", "div", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "li", "ul", "ol", "dl", "dt", "dd", "tr",
     "td", "th", "table", "caption", "thead", "tbody", "tfoot", "section", "article", "main", "blockquote",
     "form", "figure", "figcaption", "address", "details", "summary", "body", "html", "center", "fieldset",
     "legend")
)  # fmt: skip
#: Skipped elements that do not end a run of text (their tail goes on on the same line).
_INLINE = frozenset(
    ("a", "span", "button", "select", "textarea", "svg", "iframe", "object", "script", "style", "template", "noscript")
)
#: Characters percent-encoded in a link's URL on top of safe_url_string's: they could end a
#: Markdown link destination early or break it up.
_URL_ESCAPES = str.maketrans({"(": "%28", ")": "%29", "<": "%3C", ">": "%3E", " ": "%20", "\\": "%5C"})
_TICKS = re.compile(r"`+")
_UNESCAPED_BRACKET = re.compile(r"(?<!\\)([\[\]])")
_MARKS = "*_`~"
_LEADING = re.compile(r"[\W_]*")
_TRAILING = re.compile(r"[\W_]*\Z")
#: What may come before a line's, list item's or table cell's words, and after them.
_UNIT_BEFORE = re.compile(r"(?:^|\|)[ \t]*(?:(?:[-+*]|\d{1,9}[.)]|#{1,6}|>)[ \t]+)?[*_`~\\\[(\"'“‘]*\Z", re.M)
_UNIT_AFTER = re.compile(r"(?:\(\)|[*_`~\\\])\"'”’.,:;!?¶])*[ \t]*(?:\||\n|\Z)")
_MARKS_AFTER = re.compile(r"[*_`~]+")
_MARKS_BEFORE = re.compile(r"[*_`~]+\Z")
#: A URL safe_url_string would leave as it is.
_SAFE_URL = re.compile(r"[A-Za-z0-9\-._~:/?#\[\]@!$&'*+,;=%]*\Z")


@dataclass
class _Anchor:
    href: str
    text: str
    first: int  #: index of its first word in its segment
    words: int  #: its words


@dataclass
class _Segment:
    order: int  #: the index (in the page's links) of its first link: segments sort in page order
    words: list[str] = field(default_factory=list)
    anchors: list[_Anchor] = field(default_factory=list)
    block: Any = None  #: the element it begins (a run that begins no element: None)


def _safe(url: str) -> str:
    from w3lib.url import safe_url_string

    return url if _SAFE_URL.match(url) else safe_url_string(url)


def link_url(href: str | None, base: str, page: str, max_length: int = MAX_URL_LENGTH) -> str | None:
    """The absolute URL of a link's *href* as the Markdown gives it, or None when it is not one the
    Markdown links to (see the module). *page* is the page's URL without its fragment."""
    href = (href or "").strip(" \t\n\r\f")
    if not href or href[0] == "#" or len(href) > max_length:
        return None
    try:
        absolute = urljoin(base, href)
        parts = urlsplit(absolute)
        host = parts.hostname
    except ValueError:  # a broken IPv6 host, a bad port
        return None
    if parts.scheme not in ("http", "https") or not host or absolute.partition("#")[0] == page:
        return None
    if "@" in parts.netloc:  # credentials in a link are nobody's business
        netloc = parts.netloc.rpartition("@")[2]
        absolute = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    try:
        url = _safe(absolute).translate(_URL_ESCAPES)
    except (ValueError, UnicodeError):  # a host IDNA refuses
        return None
    return url if len(url) <= max_length else None


def _base(tree: Any, url: str) -> str:
    for base in tree.iter("base"):
        href = str(base.get("href") or "").strip()
        if href:
            try:
                return urljoin(url, href)
            except ValueError:
                return url
    return url


def _skipped(element: Any) -> bool:
    """Whether the subtree of *element* is skipped (see the module)."""
    return (
        element.tag in _SKIP or element.get("role") in _SKIP_ROLES or element.get("aria-hidden") == "true"
    ) and isinstance(element.tag, str)


def _links(tree: Any) -> dict[Any, int]:
    """The page's ``<a>`` elements that may be links of the Markdown (their ``href`` is read when
    their text is found in it), each with its index in document order."""
    hidden: dict[Any, bool] = {}  # whether an element is in a skipped subtree
    links: dict[Any, int] = {}
    for anchor in tree.iter("a"):
        if (anchor.get("href") or "#").lstrip()[:1] in ("#", "") or _skipped(anchor):
            continue
        path = []
        verdict = False
        for parent in anchor.iterancestors():
            if parent in hidden:
                verdict = hidden[parent]
                break
            if _skipped(parent):
                verdict = True
                break
            path.append(parent)
        hidden.update(dict.fromkeys(path, verdict))
        if not verdict:
            links[anchor] = len(links)
    return links


def segments(tree: Any, known: set[str] | None = None) -> list[_Segment]:
    """The runs of text of the page's *tree* that hold a link the Markdown may carry, in document
    order (see the module); with *known*, the words of the Markdown, only links with a word in it
    (the blocks of the others, boilerplate the extraction dropped, are not walked)."""
    from lxml import etree

    links = _links(tree)
    if known is not None:
        unknown = known.isdisjoint
        links = {
            anchor: i for anchor, i in links.items()
            if not unknown(_WORD.findall(etree.tostring(anchor, method="text", encoding=str, with_tail=False)))
        }  # fmt: skip
    if not links:
        return []
    blocks: dict[Any, None] = {}
    for anchor in links:
        block = anchor.getparent()  # the nearest block around it (a loop: iterancestors with tags is slow)
        while block is not None and block.tag not in _BREAKS:
            block = block.getparent()
        blocks[block if block is not None else anchor.getroottree().getroot()] = None
    found: list[_Segment] = []
    for block in blocks:
        texts: list[str] = [block.text or ""]
        length = len(texts[0])
        anchors: list[tuple[Any, int, int]] = []  # (element, start, end) in the run's text
        opened: tuple[Any, int] | None = None
        first = block
        breaks: set[Any] = set()  # the elements inside that end a run
        walk = etree.iterwalk(block, events=("start", "end"))
        next(walk)  # the block's own start
        for event, element in walk:
            if element is block:
                break
            tag = element.tag
            if event == "start":
                if tag in _BREAKS or _skipped(element):
                    walk.skip_subtree()  # a block inside is a run (or runs) of its own
                    if tag in _BREAKS or tag not in _INLINE:
                        breaks.add(element)
                    continue
                if opened is None and element in links:
                    opened = (element, length)
                elif not isinstance(tag, str):
                    continue
                if element.text:
                    texts.append(element.text)
                    length += len(element.text)
                continue
            if opened is not None and element is opened[0]:
                anchors.append((element, opened[1], length))
                opened = None
            if element in breaks:
                _close(found, links, texts, anchors, first)
                texts, length, anchors, opened, first = [], 0, [], None, None  # a link around a block is no run
            if element.tail:
                texts.append(element.tail)
                length += len(element.tail)
        _close(found, links, texts, anchors, first)
    found.sort(key=lambda segment: segment.order)
    return found


def _close(
    found: list[_Segment], links: dict[Any, int], texts: list[str], anchors: list[tuple[Any, int, int]], block: Any
) -> None:
    """Add the run of *texts* (that begins *block*, if not None) to *found* if it holds links (each
    a whole number of its words)."""
    if not anchors:
        return
    text = "".join(texts)
    segment = _Segment(links[anchors[0][0]], _WORD.findall(text), block=block)
    word = _WORD.match
    for element, start, end in anchors:
        if (start and word(text, start - 1, start) and word(text, start, start + 1)) or (
            word(text, end - 1, end) and word(text, end, end + 1)
        ):
            continue  # a link in the middle of a word is left out
        count = len(_WORD.findall(text, start, end))
        if count:
            segment.anchors.append(
                _Anchor(element.get("href"), text[start:end], len(_WORD.findall(text, 0, start)), count)
            )
    if segment.anchors:
        found.append(segment)


class _Words:
    """The words of the Markdown as one string to search in (:attr:`line`: each word between
    single spaces), and where a word of it is in the Markdown. Words are asked for in page order,
    so both are found walking forward."""

    def __init__(self, markdown: str) -> None:
        self.markdown = markdown
        words = _WORD.findall(markdown)
        self.line = " " + " ".join(words) + " "
        self.known = set(words)
        #: Characters searches that found nothing may still go through: past it, a search looks only
        #: :data:`SHORT_WINDOW` ahead, so a page of thousands of runs the extraction dropped costs
        #: time linear in its size, not its size squared.
        self.budget = SEARCH_BUDGET * len(self.line)
        self._at = self._index = 0  # an offset of the line that is the space before word _index
        self._word = self._position = 0  # word _word of the Markdown is the first at or after _position

    def find(self, words: list[str], after: int, before: int | None = None) -> int:
        """The offset in :attr:`line` of the first run of *words* at or after offset *after*
        (ending before *before*, if given), or -1."""
        if not self.known.issuperset(words):
            return -1
        if before is None:
            before = len(self.line) if self.budget > 0 else after + SHORT_WINDOW
        at = self.line.find(" " + " ".join(words) + " ", after, before)
        if at < 0:
            self.budget -= max(0, min(before, len(self.line)) - after)
        return at

    def span(self, at: int, skip: int, count: int) -> tuple[int, int]:
        """Where in the Markdown the *count* words after the first *skip* words of the run found at
        offset *at* of :attr:`line` are.

        Raises:
            LookupError: there are no such words (a bug: the link is left out).
        """
        if at < self._at:  # not in page order after all: count from the start
            self._at = self._index = self._word = self._position = 0
        self._index += self.line.count(" ", self._at, at)
        self._at = at
        index = self._index + skip
        if index < self._word:
            self._word = self._position = 0
        self._position = _skip(self.markdown, self._position, index - self._word)
        self._word = index
        first = _WORD.search(self.markdown, self._position)
        if first is None:  # cannot be: the line holds the Markdown's words
            raise LookupError(f"no word {index} in the Markdown")
        return first.start(), _skip(self.markdown, first.start(), count)


def _skip(text: str, position: int, count: int) -> int:
    """The end of the *count*-th word of *text* from *position* (*position* when 0)."""
    bit = 0
    while count:
        if count & 1:
            match = _SKIPS[bit].match(text, position)
            if match is None:  # cannot be: the line holds the Markdown's words
                raise LookupError(f"fewer than {count} words after {position}")
            position = match.end()
        count >>= 1
        bit += 1
    return position


_SKIPS = [re.compile(rf"(?:[\W_]*[^\W_]+){{{1 << bit}}}") for bit in range(24)]


def _widen(markdown: str, start: int, end: int, text: str) -> tuple[int, int]:
    """The span [start, end) of an anchor's words widened to the punctuation of its *text* before
    its first and after its last word (Markdown escapes allowed), then to emphasis marks or a code
    span around it on both sides."""
    head = _LEADING.match(text).group().replace(" ", "")  # type: ignore[union-attr]  # it matches ""
    tail = _TRAILING.search(text).group().replace(" ", "")  # type: ignore[union-attr]
    for char in reversed(head):
        if start and markdown[start - 1] == char:
            start -= 1
            if start and markdown[start - 1] == "\\":
                start -= 1
        else:
            break
    for char in tail:
        if markdown.startswith(char, end):
            end += 1
        elif markdown.startswith("\\" + char, end):
            end += 2
        else:
            break
    while start and end < len(markdown) and markdown[start - 1] == markdown[end] and markdown[end] in _MARKS:
        start -= 1
        end += 1
    # emphasis that opens inside the link and closes after it (or the other way round): taken in
    if (after := _MARKS_AFTER.match(markdown, end)) and markdown.count(after.group(), start, end) % 2:
        end = after.end()
    if (before := _MARKS_BEFORE.search(markdown, max(0, start - 8), start)) and markdown.count(
        before.group(), start, end
    ) % 2:
        start = before.start()
    return start, end


def add_links(markdown: str, tree: Any, url: str, max_length: int = MAX_URL_LENGTH) -> str:
    """*markdown* (the extraction's Markdown of *tree*'s page at *url*) with the links of its main
    content (see the module)."""
    words = _Words(markdown)
    runs = segments(tree, words.known)
    if not runs:
        return markdown
    page, base = url.partition("#")[0], _base(tree, url)
    urls: dict[str, str | None] = {}

    def resolve(href: str) -> str | None:
        if href not in urls:
            urls[href] = link_url(href, base, page, max_length)
        return urls[href]

    places: list[tuple[int, int, str]] = []  # (start, end, url) in the Markdown
    cursor = 0
    for run in runs:
        at = words.find(run.words, cursor) if len(run.words) >= MIN_WORDS else _find_short(words, run, cursor)
        if at >= 0:
            cursor = at + len(" ".join(run.words)) + 1
            for anchor in run.anchors:
                if (link := resolve(anchor.href)) is not None:
                    _place(places, words, at, anchor.first, anchor, link)
            continue
        if len(run.words) < MIN_WORDS:  # its words are its context: not found is not found
            continue
        for anchor in run.anchors:  # kept in part: each anchor with its nearest words
            first = max(0, anchor.first - CONTEXT_WORDS)
            context = run.words[first : anchor.first + anchor.words + CONTEXT_WORDS]
            at = _find(words, context, cursor)
            if at >= 0:
                cursor = at + len(" ".join(context)) + 1
                if (link := resolve(anchor.href)) is not None:
                    _place(places, words, at, anchor.first - first, anchor, link)
    return _apply(markdown, places)


def _words_before(block: Any) -> list[str]:
    """The last words of the element before *block* (or before its parent), if it has some."""
    from lxml import etree

    for element in (block, block.getparent()):
        previous = element.getprevious() if element is not None else None
        while previous is not None and not isinstance(previous.tag, str):
            previous = previous.getprevious()
        if previous is not None:
            found = _WORD.findall(etree.tostring(previous, method="text", encoding=str, with_tail=False)[-200:])
            if found:
                return found[-CONTEXT_WORDS:]
    return []


def _whole(markdown: str, start: int, end: int) -> bool:
    """Whether [start, end) of *markdown* is all of its line, list item or table cell (emphasis,
    code marks and punctuation aside)."""
    return bool(
        _UNIT_BEFORE.search(markdown, markdown.rfind("\n", 0, start) + 1, start) and _UNIT_AFTER.match(markdown, end)
    )


def _place(places: list[tuple[int, int, str]], words: _Words, at: int, skip: int, anchor: _Anchor, link: str) -> None:
    """Add where *anchor* (its words *skip* words into the run found at *at*) goes to *places*."""
    try:
        start, end = words.span(at, skip, anchor.words)
    except LookupError:
        return
    places.append((*_widen(words.markdown, start, end, anchor.text), link))


def _whole_at(words: _Words, at: int, count: int) -> bool:
    try:
        return _whole(words.markdown, *words.span(at, 0, count))
    except LookupError:
        return False


def _find_short(words: _Words, run: _Segment, cursor: int) -> int:
    """Where a run of fewer than :data:`MIN_WORDS` words is: all of a line, list item or table cell
    of the Markdown (a menu's "Rivers" is not the "Rivers" of "# Rivers of the North"), within
    :data:`SHORT_WINDOW` of *cursor*, or else after the last words of the element before it."""
    count = len(run.words)
    at = words.find(run.words, cursor, cursor + SHORT_WINDOW)
    while at >= 0:
        if _whole_at(words, at, count):
            return at
        at = words.find(run.words, at + 1, cursor + SHORT_WINDOW)
    before = _words_before(run.block) if run.block is not None else []
    at = words.find(before + run.words, cursor) if before else -1
    if at >= 0:
        at += len(" ".join(before)) + 1
        if _whole_at(words, at, count):
            return at
    return -1


def _find(words: _Words, run: list[str], cursor: int) -> int:
    return words.find(run, cursor, cursor + SHORT_WINDOW if len(run) < MIN_WORDS else None)


def _code_spans(markdown: str) -> list[tuple[int, int]]:
    """The code spans (and fenced blocks) of *markdown*: from a run of backticks to the next run
    of as many (one preceded by a backslash opens none: trafilatura escapes literal backticks)."""
    spans = []
    opened: re.Match[str] | None = None
    for run in _TICKS.finditer(markdown):
        if opened is None:
            if not run.start() or markdown[run.start() - 1] != "\\":
                opened = run
        elif len(run.group()) == len(opened.group()):
            spans.append((opened.start(), run.end()))
            opened = None
    return spans


def _apply(markdown: str, places: list[tuple[int, int, str]]) -> str:
    code = _code_spans(markdown) if "`" in markdown else []
    code_starts = [c[0] for c in code]
    parts: list[str] = []
    done = 0
    for start, end, url in sorted(places):
        if start < done or "\n\n" in markdown[start:end] or _cuts_code(code, code_starts, start, end):
            continue
        label = markdown[start:end]
        if "[" in label or "]" in label:
            label = _escape_brackets(label)
        parts += [markdown[done:start], "[", label, "](", url, ")"]
        done = end
    parts.append(markdown[done:])
    return "".join(parts)


def _cuts_code(code: list[tuple[int, int]], starts: list[int], start: int, end: int) -> bool:
    """Whether [start, end) begins or ends strictly inside a code span (covering whole ones is fine)."""
    i = bisect_right(starts, start) - 1
    if i >= 0 and code[i][0] < start < code[i][1]:
        return True
    j = bisect_left(starts, end) - 1
    return j >= 0 and code[j][1] > end


def _escape_brackets(label: str) -> str:
    """*label* with each ``[`` and ``]`` outside its code spans escaped (if it is not already)."""
    out = []
    last = 0
    for start, end in _code_spans(label):
        out += [_UNESCAPED_BRACKET.sub(r"\\\1", label[last:start]), label[start:end]]
        last = end
    out.append(_UNESCAPED_BRACKET.sub(r"\\\1", label[last:]))
    return "".join(out)
