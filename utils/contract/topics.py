"""Topic names (docs/contract.md §1): ``<KAFKA_TOPIC_PREFIX>.<short name>``."""

from __future__ import annotations

import re
from typing import Literal, get_args

#: Short name of a topic every cluster has (``crawlhive up`` creates them), and what it holds:
#: requests (§2), crawled items (§5), spider items (§11), cleaned records (§13), answers (§4),
#: dead letters (§6).
Topic = Literal["incoming", "crawled_firehose", "items", "cleaned", "outbound_firehose", "dead_letter"]
#: The topics every cluster has, in the order of :data:`Topic`.
TOPICS: tuple[Topic, ...] = get_args(Topic)
#: Short names of per-appid topics (KAFKA_APPID_TOPICS): ``crawled_<appid>``, ``items_<appid>``, ``outbound_<appid>``.
APPID_TOPIC_PREFIXES = ("crawled_", "items_", "outbound_")
#: A legal Kafka topic name.
TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
#: An appid that may be part of a topic name.
APPID_FRAGMENT = re.compile(r"^[A-Za-z0-9._-]+$")


def topic_name(prefix: str, short: str) -> str:
    """Full topic name of *short* (``incoming`` -> ``demo.incoming``)."""
    return f"{prefix}.{short}"


def is_short_topic(name: str) -> bool:
    """Whether *name* is a short topic name (one of :data:`TOPICS`, or a per-appid one)."""
    return name in TOPICS or name.startswith(APPID_TOPIC_PREFIXES)


def is_legal_topic(name: str) -> bool:
    """Whether Kafka accepts *name* as a topic name."""
    return bool(TOPIC_NAME.match(name)) and name not in (".", "..")


def appid_topic(prefix: str, kind: str, appid: object) -> str | None:
    """The per-appid topic ``<prefix>.<kind>_<appid>``, or None when *appid* cannot be part of a topic name."""
    if isinstance(appid, str) and APPID_FRAGMENT.match(appid):
        return topic_name(prefix, f"{kind}_{appid}")
    return None
