"""Required fields (docs/contract.md §13): a record missing one of CLEANER_REQUIRED_FIELDS (null or
empty counts as missing) becomes a dead letter ``missing required field: <name>``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Self

from crawlhive.cleaner.page import Reject
from crawlhive.cleaner.plugins import CleanerPlugin

if TYPE_CHECKING:
    from crawlhive.cleaner.cleaner import Cleaner
    from crawlhive.cleaner.page import Page


class ValidatePlugin(CleanerPlugin):
    name = "validate"

    def __init__(self, required: list[str]) -> None:
        self.required = required

    @classmethod
    def from_cleaner(cls, cleaner: Cleaner) -> Self:
        return cls([str(f) for f in cleaner.settings.CLEANER_REQUIRED_FIELDS])

    def process(self, page: Page) -> None:
        for name in self.required:
            if page.record.get(name) in (None, "", [], {}):
                raise Reject(f"missing required field: {name}")
