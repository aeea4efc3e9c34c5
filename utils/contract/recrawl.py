"""A crawl's ``recrawl`` object (docs/contract.md §19.1): its bounds, and its defaults filled in.

The request rule (:func:`check_recrawl`, what a validator rejects) and the settings a crawl keeps
(:class:`RecrawlConfig`, what the frontier stores in the crawl record and the crawler and the
redis-monitor read back) are written once, here; the schedule itself is the frontier's
(:mod:`crawlhive.utils.frontier.recrawl`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import ujson

#: Largest ``every``, ``min`` and ``max`` (seconds): a year (§19.1).
RECRAWL_MAX_S = 31_536_000


@dataclass(frozen=True, slots=True)
class RecrawlConfig:
    """The ``recrawl`` settings of a crawl (§19.1), defaults filled in, plus its seed's priority."""

    every: int
    adaptive: bool = True
    min: int = 0
    max: int = 0
    until: int = 0
    priority: int = 1

    @classmethod
    def of(cls, recrawl: dict[str, Any], priority: int, min_every: int) -> RecrawlConfig:
        """The settings of a validated ``recrawl`` object: ``min`` and ``max`` default to
        every/8 and every×8, clamped to *min_every* (RECRAWL_MIN_EVERY) … a year."""
        every = int(recrawl["every"])
        low = recrawl.get("min")
        high = recrawl.get("max")
        low = int(low) if low is not None else max(min_every, min(RECRAWL_MAX_S, every // 8))
        high = int(high) if high is not None else max(min_every, min(RECRAWL_MAX_S, every * 8))
        return cls(every, bool(recrawl.get("adaptive", True)), low, high, int(recrawl.get("until") or 0), priority)

    def to_json(self) -> str:
        return ujson.dumps(
            {
                "every": self.every,
                "adaptive": self.adaptive,
                "min": self.min,
                "max": self.max,
                "until": self.until,
                "priority": self.priority,
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, raw: bytes | str) -> RecrawlConfig:
        data = ujson.loads(raw)
        return cls(
            int(data["every"]),
            bool(data["adaptive"]),
            int(data["min"]),
            int(data["max"]),
            int(data["until"]),
            int(data["priority"]),
        )


def check_recrawl(recrawl: dict[str, Any], min_every: int) -> tuple[str, str] | None:
    """The problem with a ``recrawl`` object (reason, JSON pointer), or None (§19.1): ``every``
    within RECRAWL_MIN_EVERY … a year, ``min`` ≤ ``every`` ≤ ``max`` within the same bounds."""
    bounds = f"{min_every}-{RECRAWL_MAX_S}"
    for name in ("every", "min", "max"):
        value = recrawl.get(name)
        if value is not None and not min_every <= value <= RECRAWL_MAX_S:
            return f"recrawl.{name} must be {bounds} seconds (RECRAWL_MIN_EVERY), got {value}", f"/recrawl/{name}"
    every = recrawl["every"]
    if recrawl.get("min") is not None and recrawl["min"] > every:
        return f"recrawl.min ({recrawl['min']}) must not exceed recrawl.every ({every})", "/recrawl/min"
    if recrawl.get("max") is not None and recrawl["max"] < every:
        return f"recrawl.max ({recrawl['max']}) must not be below recrawl.every ({every})", "/recrawl/max"
    return None
