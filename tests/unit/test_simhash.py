"""The near-duplicate SimHash (docs/contract.md §26.1, ``cleaner/plugins/neardup.py``): bit for bit
trafilatura's, and on the extraction corpus's 120 real pages (7,140 pairs of different pages) no
pair within NEAR_DUPLICATE_DISTANCE; the settings are checked."""

from __future__ import annotations

import itertools

import pytest
from support.corpus import load
from trafilatura.deduplication import Simhash

from crawlhive.cleaner.plugins.neardup import MAX_DISTANCE, NearDuplicatePlugin, simhash
from crawlhive.utils.config.errors import NotConfigured, SettingsError
from crawlhive.utils.config.settings import Settings


def test_the_simhash_is_trafilaturas_bit_for_bit() -> None:
    texts = [page.text for page in load()] + ["", "one two", "ünïcödé wörds " * 40, "。".join(["中文"] * 50)]
    for text in texts:
        assert simhash(text) == Simhash(text).hash, text[:60]


def test_no_two_pages_of_the_corpus_are_near_duplicates() -> None:
    hashes = [simhash(page.text) for page in load()]
    distances = [(a ^ b).bit_count() for a, b in itertools.combinations(hashes, 2)]
    close = sum(1 for d in distances if d <= 3)
    print(f"pairs {len(distances)}, within 3 bits {close}, closest {min(distances)} bits")  # noqa: T201
    assert len(distances) == 7140
    assert close == 0
    assert min(distances) > 2 * 3  # a margin: the closest pair is far beyond the default distance


class _Cleaner:
    def __init__(self, **overrides: object) -> None:
        self.settings = Settings.from_overrides(**overrides)
        self.redis = None
        self.keys = None


@pytest.mark.parametrize(
    ("overrides", "error"),
    [
        ({"NEAR_DUPLICATES": "maybe"}, "NEAR_DUPLICATES 'maybe': expected one of flag, drop, off"),
        ({"NEAR_DUPLICATE_DISTANCE": MAX_DISTANCE + 1}, f"NEAR_DUPLICATE_DISTANCE {MAX_DISTANCE + 1}: expected 0 to 7"),
        ({"NEAR_DUPLICATE_TTL": 0}, "NEAR_DUPLICATE_TTL 0"),
    ],
)
def test_bad_settings_name_themselves(overrides: dict[str, object], error: str) -> None:
    with pytest.raises(SettingsError, match=error.replace("(", r"\(")):
        NearDuplicatePlugin.from_cleaner(_Cleaner(**overrides))  # type: ignore[arg-type]


def test_off_turns_the_step_off() -> None:
    with pytest.raises(NotConfigured):
        NearDuplicatePlugin.from_cleaner(_Cleaner(NEAR_DUPLICATES="off"))  # type: ignore[arg-type]
