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
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache, lru_cache, partial
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
#: Bytes (of UTF-8 text) with each ASCII character but letters and digits (those of :data:`_WORD`) a space.
_ASCII_NOT_WORDS = bytes(byte if byte > 0x7F or chr(byte).isalnum() else 0x20 for byte in range(256))
_ASCII = bytes(range(0x80))
_NOT_WORD = re.compile(r"[\W_]")
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
#: A code span (see :func:`_code_spans`): a run of backticks not after a backslash to the next run
#: of as many, or (a run that none closes) to the end.
_CODE_SPAN = re.compile(r"(`(?<![`\\]`)`*)(?!`)(?:[^`]++|(?!\1(?!`))`++)*+(?:(?P<close>\1)(?!`))?")
_UNESCAPED_BRACKET = re.compile(r"(?<!\\)([\[\]])")
_MARKS = "*_`~"
#: What may come before a line's, list item's or table cell's words, and after them.
_UNIT_BEFORE = re.compile(r"(?:^|\|)[ \t]*(?:(?:[-+*]|\d{1,9}[.)]|#{1,6}|>)[ \t]+)?[*_`~\\\[(\"'“‘]*\Z", re.M)
_UNIT_AFTER = re.compile(r"(?:\(\)|[*_`~\\\])\"'”’.,:;!?¶])*[ \t]*(?:\||\n|\Z)")
_MARKS_AFTER = re.compile(r"[*_`~]+")
_MARKS_BEFORE = re.compile(r"[*_`~]+\Z")
#: A URL safe_url_string would leave as it is.
_SAFE_URL = re.compile(r"[A-Za-z0-9\-._~:/?#\[\]@!$&'*+,;=%]*\Z")
#: A fragment that is the same in a URL whatever the URL (RFC 3986's unreserved characters).
_PLAIN_FRAGMENT = re.compile(r"[A-Za-z0-9\-._~]+\Z")
#: A path (relative or from the root) of segments of those characters, none empty, ``.`` or ``..``.
_PLAIN_PATH = re.compile(r"/?(?:(?!\.\.?(?:/|\Z))[A-Za-z0-9\-._~]+(?:/|\Z))+\Z")


#: A link of a run of text: its index and ``href`` (see :func:`_links`), where it begins and ends in the text.
_InRun = tuple[tuple[int, str], int, int]


@dataclass(slots=True)
class _Anchor:
    href: str
    head: str  #: the characters of its text before its first word, spaces left out
    tail: str  #: those after its last word
    first: int  #: index of its first word in its segment
    words: int  #: its words


@dataclass(slots=True)
class _Segment:
    order: int  #: the index (in the page's links) of its first link: segments sort in page order
    words: list[str] = field(default_factory=list)
    anchors: list[_Anchor] = field(default_factory=list)
    block: Any = None  #: the element it begins (a run that begins no element: None)


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
    if not _SAFE_URL.match(absolute):  # (a URL of those characters has none of _URL_ESCAPES either)
        from w3lib.url import safe_url_string

        try:
            absolute = safe_url_string(absolute).translate(_URL_ESCAPES)
        except (ValueError, UnicodeError):  # a host IDNA refuses
            return None
    return absolute if len(absolute) <= max_length else None


def _resolver(base: str, page: str, max_length: int) -> Callable[[str | None], str | None]:
    """:func:`link_url` for the links of one page, each href resolved once, most without urllib
    (tests/unit/test_markdown_links.py holds the answers to link_url's):

    - a path of plain segments (:data:`_PLAIN_PATH`) is the directory of *base* (or its root,
      for a path from the root) with the path after it: what ``urljoin`` makes of it, there being
      no segment to resolve. The directory is resolved once, with a segment ``_``, and used when
      link_url gives that URL as it is (an ``http(s)`` URL of safe characters, no user info);
    - an href of safe characters (:data:`_SAFE_URL`) with a fragment of letters, digits and
      ``-._~`` is, when *base* is of safe characters too, the URL of its part before the fragment
      with the fragment after it: ``urljoin`` puts it after the rest, and a URL of safe characters
      made of safe characters needs no safe_url_string.
    """
    urls: dict[str | None, str | None] = {}
    safe_base = bool(_SAFE_URL.match(base))
    prefixes: dict[str, str | None] = {}

    def prefix(probe: str) -> str | None:
        """The URL of the plain path *probe* (``_`` or ``/_``) less its ``_``, if link_url gives it
        as urljoin makes it."""
        if probe not in prefixes:
            url = link_url(probe, base, page)
            prefixes[probe] = url[:-1] if url and _SAFE_URL.match(url) and url == urljoin(base, probe) else None
        return prefixes[probe]

    def resolve(href: str | None) -> str | None:
        if href in urls:
            return urls[href]
        stripped = (href or "").strip(" \t\n\r\f")
        document, _, fragment = stripped.partition("#")
        if _PLAIN_PATH.match(stripped) and (before := prefix("/_" if stripped[0] == "/" else "_")) is not None:
            joined = before + stripped.removeprefix("/")
            url = None if joined == page or len(joined) > max_length else joined  # (longer than the href)
        elif (
            safe_base and document and _PLAIN_FRAGMENT.match(fragment) and _SAFE_URL.match(document)
            and len(stripped) <= max_length
        ):  # fmt: skip
            url = resolve(document)
            url = url + "#" + fragment if url is not None and len(url) + 1 + len(fragment) <= max_length else None
        else:
            url = link_url(href, base, page, max_length)
        urls[href] = url
        return url

    return resolve


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


def _links(tree: Any) -> dict[Any, tuple[int, str]]:
    """The page's ``<a>`` elements that may be links of the Markdown, each with its index in
    document order and its ``href``."""
    hidden: dict[Any, bool] = {}  # whether an element is in a skipped subtree
    links: dict[Any, tuple[int, str]] = {}
    for anchor in tree.iter("a"):
        href = anchor.get("href")
        if not href or href.lstrip()[:1] in ("#", ""):
            continue
        if anchor.get("role") in _SKIP_ROLES or anchor.get("aria-hidden") == "true":  # (_skipped: "a" is no _SKIP)
            continue
        parent = anchor.getparent()
        verdict = hidden.get(parent)
        if verdict is None:  # (a loop: iterancestors is slower)
            path = []
            while parent is not None:
                verdict = hidden.get(parent)
                if verdict is not None:
                    break
                if _skipped(parent):
                    verdict = True
                    break
                path.append(parent)
                parent = parent.getparent()
            else:
                verdict = False
            for parent in path:
                hidden[parent] = verdict
        if not verdict:
            links[anchor] = (len(links), href)
    return links


def segments(tree: Any, known: set[str] | None = None) -> list[_Segment]:
    """The runs of text of the page's *tree* that hold a link the Markdown may carry, in document
    order (see the module); with *known*, the words of the Markdown, only links with a word in it
    (the blocks of the others, boilerplate the extraction dropped, are not walked)."""
    from lxml import etree

    links = _links(tree)
    if known is not None:
        unknown = known.isdisjoint
        text_of = partial(etree.tostring, method="text", encoding=str, with_tail=False)
        links = {anchor: link for anchor, link in links.items() if not unknown(_blank(text_of(anchor)).split())}
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
        text = block.text or ""
        texts = [text]
        length = len(text)
        anchors: list[_InRun] = []
        opened: Any = None  # the link the walk is in
        link, start = (0, ""), 0  # its index and href, and where it begins
        first = block
        walk = etree.iterwalk(block, events=("start", "end"))
        next(walk)  # the block's own start
        for event, element in walk:
            if event == "start":
                tag = element.tag
                if tag in _BREAKS or (
                    (tag in _SKIP or element.get("role") in _SKIP_ROLES or element.get("aria-hidden") == "true")
                    and isinstance(tag, str)
                ):  # (_skipped, inline)
                    walk.skip_subtree()  # (its end comes next)
                    if tag in _BREAKS or tag not in _INLINE:  # a block inside is a run (or runs) of its own
                        _close(found, texts, anchors, first)
                        texts, length, anchors, opened, first = [], 0, [], None, None  # a link around a block is no run
                    continue
                if opened is None and element in links:
                    opened, link, start = element, links[element], length
                elif not isinstance(tag, str):
                    continue
                text = element.text
                if text:
                    texts.append(text)
                    length += len(text)
                continue
            if element is block:
                break
            if element is opened:
                anchors.append((link, start, length))
                opened = None
            text = element.tail
            if text:
                texts.append(text)
                length += len(text)
        _close(found, texts, anchors, first)
    found.sort(key=lambda segment: segment.order)
    return found


def _close(found: list[_Segment], texts: list[str], anchors: list[_InRun], block: Any) -> None:
    """Add the run of *texts* (that begins *block*, if not None) to *found* if it holds links (each
    a whole number of its words)."""
    if not anchors:
        return
    text = "".join(texts)
    blank = _blank(text)
    segment = _Segment(anchors[0][0][0], blank.split(), block=block)
    for (_, href), start, end in anchors:
        # a letter or digit (of a word of _WORD) both sides of its start or of its end
        if (0 < start < len(text) and text[start - 1 : start + 1].isalnum()) or (
            0 < end < len(text) and text[end - 1 : end + 1].isalnum()
        ):
            continue  # a link in the middle of a word is left out
        words = blank[start:end]
        count = len(words.split())
        if count:
            head = text[start : start + len(words) - len(words.lstrip(" "))].replace(" ", "")
            tail = text[start + len(words.rstrip(" ")) : end].replace(" ", "")
            segment.anchors.append(_Anchor(href, head, tail, len(blank[:start].split()), count))
    if segment.anchors:
        found.append(segment)


class _Words:
    """The words of the Markdown as one string to search in (:attr:`line`: each word between
    single spaces), and where a word of it is in the Markdown. Words are asked for in page order,
    so both are found walking forward."""

    def __init__(self, markdown: str) -> None:
        self.markdown = markdown
        self.blank = _blank(markdown)  #: the Markdown with each character not of a word a space
        words = self.blank.split()
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
        self._position = _skip(self.blank, self._position, index - self._word)
        self._word = index
        words = _next_words(count).match(self.blank, self._position)
        if words is None:  # cannot be: the line holds the Markdown's words
            raise LookupError(f"no words {index} to {index + count} in the Markdown")
        return words.span(1)


def _blank(text: str) -> str:
    """*text* with each character that is not of a word (:data:`_WORD`: not alphanumeric) a space:
    its words are its ``split()``, at the same offsets. A few passes of C (``_WORD.findall`` is
    four times slower): the characters outside ASCII that are not alphanumeric replaced one by one,
    then those of ASCII all at once in the UTF-8 bytes. Text with many characters outside ASCII, or
    many kinds of them that are not alphanumeric, is left to a regular expression
    (tests/unit/test_markdown_links.py compares the two)."""
    if not text.isascii():
        data = text.encode("utf-8", "surrogatepass")
        if len(data) > len(text) * 9 // 8:  # (two to four bytes for each character outside ASCII)
            return _NOT_WORD.sub(" ", text)
        outside = data.translate(None, _ASCII).decode("utf-8", "surrogatepass")
        others = [char for char in set(outside) if not char.isalnum()]
        if len(others) > 16:
            return _NOT_WORD.sub(" ", text)
        for char in others:
            text = text.replace(char, " ")
    return text.encode().translate(_ASCII_NOT_WORDS).decode()


def _skip(blank: str, position: int, count: int) -> int:
    """The end of the *count*-th word of *blank* (text made :func:`_blank`) from *position*
    (*position* when 0)."""
    while count:
        step = count if count < 64 else 1 << (count.bit_length() - 1)  # few steps, few patterns
        match = _skipping(step).match(blank, position)
        if match is None:  # cannot be: the line holds the Markdown's words
            raise LookupError(f"fewer than {count} words after {position}")
        position = match.end()
        count -= step
    return position


@cache
def _skipping(count: int) -> re.Pattern[str]:
    """What matches *count* words of text made :func:`_blank` (and the spaces before each)."""
    return re.compile(rf"(?: *+[^ ]++){{{count}}}")


@lru_cache(maxsize=256)
def _next_words(count: int) -> re.Pattern[str]:
    """What matches the next *count* words of text made :func:`_blank`, they in its group 1."""
    return re.compile(rf" *+([^ ]++(?: ++[^ ]++){{{count - 1}}})" if count else r" *+()(?=[^ ])")


def _widen(markdown: str, start: int, end: int, head: str, tail: str) -> tuple[int, int]:
    """The span [start, end) of an anchor's words widened to the punctuation of its text before
    its first (*head*) and after its last word (*tail*) (Markdown escapes allowed), then to
    emphasis marks or a code span around it on both sides."""
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
    resolve = _resolver(_base(tree, url), url.partition("#")[0], max_length)
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
    places.append((*_widen(words.markdown, start, end, anchor.head, anchor.tail), link))


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
    return [span.span() for span in _CODE_SPAN.finditer(markdown) if span.group("close") is not None]


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
