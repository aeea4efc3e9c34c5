"""Three steps of htmldate's date search (``find_date``, not extensive, as the extraction runs it)
made cheaper, each returning what htmldate's own returns.

Why: on the extraction corpus ``find_date`` cost 3.5 ms of CPU a page, and these steps 1.8 ms of it:

- ``date_candidates`` (1.0 ms): ``is_date_candidate``, a Python predicate reading every attribute,
  on each of the ~860 elements of the tags it searches (``FAST_TAGS``, ``ALWAYS_TAGS``), to keep
  about one. The replacement walks the same elements (lxml's C iterator, the same tags, in document
  order) and runs htmldate's own predicate only on those whose attribute values, joined, hold one of
  the words the predicate looks for (``_CUES``: ``[dD]ate``, ``[dD]atum``, and the alternatives of
  ``ID_CLASS_CUES`` and ``CLASS_CUES``, which hold ``footer``, part of ``footer-info-lastmod``):
  an element without any cannot pass it, so the same elements are kept. Elements of
  ``ALWAYS_TAGS`` are kept as htmldate keeps them, by their tag (compared only when the tree has
  one). An lxml XPath prefilter evaluated in C was tried first: libxml2 took longer to walk the
  tree and test the attributes (1.7 ms) than htmldate's predicate in Python.
- ``idiosyncrasies_search`` (0.46 ms): it first scans the whole serialised page for
  ``DATE_CORE_PATTERN`` (``[0-9]{1,4}[./][0-9]{1,2}[./][0-9]{2,4}``), which ``re`` tries at every
  digit; it finds none on 118 of the 120 pages, and without one it returns None. The replacement
  returns None when ``_CORE_DOT`` and ``_CORE_SLASH`` find nothing (else it calls htmldate's own):
  together they find a separator preceded by a digit and followed by one or two digits, a separator
  and two digits, which is where every match of ``DATE_CORE_PATTERN`` is and only there; starting
  with a literal character, they are ``re``'s fast scan (0.07 ms).
- ``pattern_search`` with ``TIMESTAMP_PATTERN`` on the serialised page (0.22 ms) and with
  ``TIMESTAMP_LOOSE_PATTERN`` on its text (0.1 ms): it returns None when the pattern does not
  match. The replacement returns None when a probe with a literal first character finds nothing
  that every match holds (``:`` between two-digit numbers ``12:34:56``; ``-`` between a digit and
  a one- or two-digit number then ``-`` and a digit, ``2024-1-3``), else calls htmldate's own.

They are put in htmldate.core's namespace (where ``find_date`` looks them up) by :func:`install`,
each only if htmldate's function, and what it relies on, are the ones it was written for: the source
of each function is the one of :data:`SOURCES` (htmldate 1.11.0), and the regular expressions it
reads from its module (``__globals__``) are those of :data:`PATTERNS`. Otherwise htmldate keeps its
own: an upgrade can make the date search slower, never its result different.
``tests/unit/test_datesearch.py`` compares both on every page of the extraction corpus. With them,
``find_date`` costs 2.2 ms a page there (3.5 without), the whole extraction 1.3 ms less.
"""

from __future__ import annotations

import hashlib
import inspect
import re
from collections.abc import Callable
from typing import Any

Search = Callable[[str], "re.Match[str] | None"]
#: htmldate.core's functions replaced.
REPLACED = ("date_candidates", "pattern_search", "idiosyncrasies_search")
Candidates = Callable[[Any, bool], list[Any]]

#: The SHA-256 of the source of htmldate's functions (htmldate 1.11.0, ``inspect.getsource``) the
#: replacements were written for: the three replaced, and the predicate ``date_candidates`` runs.
SOURCES = {
    "date_candidates": "1a25fbcbf26732d124c8e8de33b0c5110175a0b7a54e90e74c6dd8b9d1a5e9ce",
    "is_date_candidate": "039589078a8684cf5d18a873d765bf67aae6f19b4959f84a8af7132abc950cb9",
    "pattern_search": "e2a75bf4ba8f895d3b04c565dd7f0fc564a67c36442945f71deacb9975107cef",
    "idiosyncrasies_search": "39ae73b91dc7e0fad70e1c9c6acee9d4972fea923a85fa7bdfa8a13b970c10e1",
}
#: htmldate's regular expressions the prefilters are derived from (flags: ``re.UNICODE`` only).
PATTERNS = {
    "ID_CLASS_CUES": "[Mm]eta|time|publish|footer",
    "CLASS_CUES": "info|post_detail|block-content|byline|subline|posted|submitted|created-post|"
    "publication|author|autor|field-content|fa-clock-o|fa-calendar|fecha|parution",
    "TIMESTAMP_PATTERN": r"((?:199[0-9]|20[0-3][0-9])-[0-1]?[0-9]-[0-3]?[0-9])"
    r"([T ][0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?(?:Z|[+-][0-9]{2}:?[0-9]{2})?)",
    "TIMESTAMP_LOOSE_PATTERN": r"((?:199[0-9]|20[0-3][0-9])-[0-1]?[0-9]-[0-3]?[0-9])"
    r"([T ][0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?(?:Z|[+-][0-9]{2}:?[0-9]{2})?)?",
    "DATE_CORE_PATTERN": r"[0-9]{1,4}[./][0-9]{1,2}[./][0-9]{2,4}",
}

#: What an id, class or itemprop that passes ``is_date_candidate`` holds: "date" or "datum" once
#: "D" is folded to "d", or a match of ``ID_CLASS_CUES`` or of ``CLASS_CUES`` (both alternatives of
#: words, joined as such; "footer-info-lastmod" holds "footer").
_CUES = re.compile("|".join(("[dD]ate", "[dD]atum", PATTERNS["ID_CLASS_CUES"], PATTERNS["CLASS_CUES"])))
#: Together: a match of ``DATE_CORE_PATTERN`` somewhere, from its first separator on.
_CORE_DOT = re.compile(r"\.(?<=[0-9]\.)[0-9]{1,2}[./][0-9]{2}")
_CORE_SLASH = re.compile(r"/(?<=[0-9]/)[0-9]{1,2}[./][0-9]{2}")
#: What every match of the pattern holds (the probe of ``pattern_search``).
_PROBES = {
    "TIMESTAMP_PATTERN": re.compile(r":(?<=[0-9]{2}:)[0-9]{2}:[0-9]{2}"),
    "TIMESTAMP_LOOSE_PATTERN": re.compile(r"-(?<=[0-9]-)[0-9]{1,2}-[0-9]"),
}


def _written_for(function: Any, name: str) -> bool:
    """Whether *function*'s source is the one of :data:`SOURCES` [*name*]."""
    try:
        source = inspect.getsource(function)
    except (OSError, TypeError):  # no source (a .pyc only, a builtin): not known
        return False
    return hashlib.sha256(source.encode("utf-8")).hexdigest() == SOURCES[name]


def _patterns_are(namespace: dict[str, Any], *names: str) -> bool:
    """Whether *namespace* (a module's globals) holds the regular expressions *names* of :data:`PATTERNS`."""
    for name in names:
        pattern = namespace.get(name)
        if not isinstance(pattern, re.Pattern) or (pattern.pattern, pattern.flags) != (PATTERNS[name], re.UNICODE):
            return False
    return True


def candidates(own: Candidates, is_candidate: Callable[[Any], bool], fast: tuple[str, ...], always: Any) -> Candidates:
    """``date_candidates`` (see the module): the tags *fast* and *always* (htmldate's ``FAST_TAGS``,
    ``ALWAYS_TAGS``), htmldate's predicate *is_candidate*; the extensive search is *own*'s."""
    tags, always_tags, cue = (*fast, *always), tuple(always), _CUES.search

    def date_candidates(tree: Any, extensive_search: bool) -> list[Any]:
        if extensive_search:
            return own(tree, extensive_search)
        # an element whose tag is one of them is one the iterator finds: if none, no tag to compare
        by_tag = bool(always_tags) and next(tree.iterdescendants(*always_tags), None) is not None
        chosen: list[Any] = []
        seen: dict[str, bool] = {}  # a page repeats its attribute values: each searched once
        for element in tree.iterdescendants(*tags):
            if by_tag and element.tag in always:
                chosen.append(element)
                continue
            values = element.values()
            if not values:
                continue
            key = "\x00".join(values)
            hit = seen.get(key)
            if hit is None:
                hit = seen[key] = cue(key) is not None
            if hit and is_candidate(element):
                chosen.append(element)
        return chosen

    return date_candidates


def idiosyncrasies(own: Callable[[str, Any], str | None]) -> Callable[[str, Any], str | None]:
    """``idiosyncrasies_search`` (see the module): None where ``DATE_CORE_PATTERN`` finds nothing,
    else *own*'s answer."""
    dot, slash = _CORE_DOT.search, _CORE_SLASH.search

    def idiosyncrasies_search(htmlstring: str, options: Any) -> str | None:
        if dot(htmlstring) is None and slash(htmlstring) is None:
            return None
        return own(htmlstring, options)

    return idiosyncrasies_search


def probed(
    own: Callable[[str, re.Pattern[str], Any], str | None], probes: list[tuple[re.Pattern[str], Search]]
) -> Callable[[str, re.Pattern[str], Any], str | None]:
    """``pattern_search`` (see the module): None where the probe of the pattern (*probes*: the
    pattern object, its probe) finds nothing, else *own*'s answer."""

    def pattern_search(text: str, date_pattern: re.Pattern[str], options: Any) -> str | None:
        for pattern, probe in probes:
            if date_pattern is pattern:
                if probe(text) is None:
                    return None
                break
        return own(text, date_pattern, options)

    return pattern_search


def replacements(core: Any) -> dict[str, Callable[..., Any] | None]:
    """The replacements of htmldate's functions for the module *core* (``htmldate.core``, whose
    ``find_date`` calls them), by name: None for a function (or what it reads) that is not the one
    written for."""
    made: dict[str, Callable[..., Any] | None] = dict.fromkeys(REPLACED)
    own = core.date_candidates
    names = own.__globals__
    predicate = names.get("is_date_candidate")
    fast, always = names.get("FAST_TAGS"), names.get("ALWAYS_TAGS")
    if (
        _written_for(own, "date_candidates")
        and _written_for(predicate, "is_date_candidate")
        and _patterns_are(predicate.__globals__, "ID_CLASS_CUES", "CLASS_CUES")
        and isinstance(fast, tuple)
        and isinstance(always, frozenset)
        and all(isinstance(tag, str) for tag in (*fast, *always))
    ):
        made["date_candidates"] = candidates(own, predicate, fast, always)
    own = core.idiosyncrasies_search
    if _written_for(own, "idiosyncrasies_search") and _patterns_are(own.__globals__, "DATE_CORE_PATTERN"):
        made["idiosyncrasies_search"] = idiosyncrasies(own)
    own = core.pattern_search
    if _written_for(own, "pattern_search") and _patterns_are(vars(core), *_PROBES):
        made["pattern_search"] = probed(own, [(getattr(core, name), probe.search) for name, probe in _PROBES.items()])
    return made


def install(core: Any = None) -> dict[str, bool]:
    """Put the replacements in htmldate.core (or the module *core*) in place of its functions; per
    function, whether it is now the replacement (one not written for keeps htmldate's: False)."""
    if core is None:
        from htmldate import core
    done = {}
    for name, made in replacements(core).items():
        if getattr(getattr(core, name), "__module__", None) == __name__:  # installed before
            done[name] = True
            continue
        if made is not None:
            setattr(core, name, made)
        done[name] = made is not None
    return done


__all__ = ["PATTERNS", "REPLACED", "SOURCES", "candidates", "idiosyncrasies", "install", "probed", "replacements"]
