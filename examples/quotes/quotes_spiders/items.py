"""The items the quotes spider yields: plain dataclasses (any item type ``itemadapter`` knows works)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Quote:
    """One quote of a listing page."""

    text: str
    author: str | None
    tags: list[str] = field(default_factory=list)
    page: int = 1


@dataclass
class Author:
    """An author's page, reached from a quote."""

    name: str
    born: str | None
    quotes_seen_on_page: int
