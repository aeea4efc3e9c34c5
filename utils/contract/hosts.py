"""Host names a request may hold (docs/contract.md §2.6, §10.3): what a crawl's ``url`` and
``allowed_domains`` and a domain-config's ``domain`` are held to before any IDNA step. The
crawler holds the links it finds to the same rule (:mod:`crawlhive.utils.rules.domains`).
"""

from __future__ import annotations

import unicodedata

#: RFC 1035's limits on a host name (253 characters) and on each of its labels (63). A Unicode label
#: never encodes to fewer characters than it has, so a raw host over either limit cannot be valid.
MAX_HOST_LENGTH = 253
MAX_LABEL_LENGTH = 63


def _over_limits(host: str) -> str | None:
    if len(host) <= MAX_LABEL_LENGTH:
        return None  # no label can be longer than the whole name (most hosts: no split per link)
    if len(host) > MAX_HOST_LENGTH:
        return f"host name longer than {MAX_HOST_LENGTH} characters ({len(host)})"
    if any(len(label) > MAX_LABEL_LENGTH for label in host.split(".")):
        return f"host name label longer than {MAX_LABEL_LENGTH} characters"
    return None


def host_problem(host: str) -> str | None:
    """Why *host* (raw, as found: Unicode, any case) cannot be a host name, or None when it may be.

    Checked before any IDNA or w3lib step: IDNA encoding costs the square of a label's length
    (one 8,000-character label took 22 s), so an over-long host is refused by its length alone.
    IDNA (and w3lib) first normalise a name with NFKC, which can make up to 18 characters of one
    (U+FDFA), so a non-ASCII name is held to the limits once normalised too (NFKC is linear, in C).
    The reason names the limit, never the value (it can be megabytes).
    """
    host = host.rstrip(".")
    problem = _over_limits(host)
    if problem is None and not host.isascii():
        problem = _over_limits(unicodedata.normalize("NFKC", host).rstrip("."))
        if problem is not None:
            problem += " once normalised (NFKC)"
    return problem
