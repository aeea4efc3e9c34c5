"""The wire format's types and builders against their spec, docs/contract.md: the ``TypedDict``\\ s
name exactly the keys the spec lists, the builders write the spec's examples byte for byte, and
the contract checks requests with the rules its caller passes in (it reads no settings)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, get_args

import pytest

from crawlhive.crawler.items import ITEM_KEYS
from crawlhive.kafka_monitor.plugins import BUILTIN, BUILTIN_PLUGINS
from crawlhive.utils.config.settings import Settings
from crawlhive.utils.contract import records
from crawlhive.utils.contract.encoding import encode
from crawlhive.utils.contract.messages import CrawlRequest, DomainConfigRequest, RequestLimits
from crawlhive.utils.contract.records import (
    CleanDeadLetter,
    CleanedRecord,
    CrawlDeadLetter,
    CrawledRecord,
    RequestDeadLetter,
    SinkDeadLetter,
    clean_dead_letter,
    crawl_dead_letter,
    sink_dead_letter,
    validation_dead_letter,
)
from crawlhive.utils.contract.topics import TOPICS, Topic
from crawlhive.utils.contract.validation import Accepted, Rejected, RequestValidator
from crawlhive.utils.process.intake import builtin_plugins, request_validator
from crawlhive.utils.process.plugins import load_object

SPEC = (Path(__file__).resolve().parents[2] / "docs" / "contract.md").read_text()


def section(heading: str) -> str:
    """The text of the docs/contract.md section whose heading starts with *heading*."""
    start = SPEC.index(f"\n{heading}")
    end = SPEC.find("\n## ", start + 1)
    return SPEC[start:end]


def _all_keys(typed: Any) -> list[str]:
    return [key for klass in reversed(typed.__mro__) for key in getattr(klass, "__annotations__", {})]


def test_the_crawled_item_type_has_the_keys_of_section_5_and_the_crawler_builds_them() -> None:
    table = section("## 5.").split("| Key |")[1].split("\n\n")[0]
    documented = [name for row in table.splitlines()[2:] for name in re.findall(r"`(\w+)`", row.split("|")[1])]
    assert documented == list(ITEM_KEYS)
    assert set(CrawledRecord.__required_keys__) == set(ITEM_KEYS) and len(ITEM_KEYS) == 15
    # a large page's item (§20.5); a page whose fetch mode was not plain, and why an auto ladder
    # stopped short of rendering (§25)
    assert CrawledRecord.__optional_keys__ == frozenset({"body_ref", "fetch", "fetch_stopped"})


def test_the_cleaned_record_type_has_the_keys_of_section_13() -> None:
    text = section("## 13.").split("A cleaned record has:")[1].split("Plugins may add keys")[0]
    documented = re.findall(r"`(\w+)`", re.sub(r"\([^()]*(?:\([^()]*\)[^()]*)*\)", "", text))
    assert documented == _all_keys(CleanedRecord)


def _braced_keys(text: str) -> list[str]:
    """The key names of a ``{"stage": "<stage>", "key", "key": value, …}`` shape of the spec."""
    body = re.sub(r'^\{"stage": "\w+"', '{"stage"', text)
    return re.findall(r'"(\w+)"', body)


def test_the_dead_letter_types_have_the_keys_of_section_6() -> None:
    """§6 lists each shape's keys; ``uuid``/``appid`` of (a) and ``url``/``appid``/``crawlid`` of
    (c) and clean are present only when the input holds them as strings (optional keys)."""
    six = section("## 6.")
    (a,) = re.findall(r"`(\{\"stage\": \"validation\".*?\})`", six, re.S)
    (b,) = re.findall(r"`(\{\"stage\": \"crawl\".*?\})`", six, re.S)
    (c,) = re.findall(r"`(\{\"stage\": \"sink\".*?\})`", six, re.S)
    (clean,) = re.findall(r'`(\{"stage": "clean", "error": "missing.*?\})`', section("## 13."), re.S)
    assert _braced_keys(a) == ["stage", "error", "payload", "server_time"]
    assert set(RequestDeadLetter.__required_keys__) == set(_braced_keys(a))
    assert RequestDeadLetter.__optional_keys__ == frozenset({"uuid", "appid"})
    assert _all_keys(CrawlDeadLetter) == _braced_keys(b)
    assert set(_all_keys(SinkDeadLetter)) == set(_braced_keys(c))
    assert SinkDeadLetter.__optional_keys__ == frozenset({"url", "appid", "crawlid"})
    assert set(_all_keys(CleanDeadLetter)) == set(_braced_keys(clean)) | {"error"}
    assert CleanDeadLetter.__optional_keys__ == frozenset({"url", "appid", "crawlid"})


def _example(after: str) -> Any:
    """The JSON example of the spec's first ```json block after *after*."""
    block = SPEC.split(after, 1)[1].split("```json\n", 1)[1].split("```", 1)[0]
    return json.loads(block)


def test_the_builders_write_the_examples_of_section_6_byte_for_byte(monkeypatch: pytest.MonkeyPatch) -> None:
    """Key order included: the real validator's reason, the payload, the ids copied after it."""
    monkeypatch.setattr(records, "server_time", lambda: 1714563600)
    rejected = _example("**(a) A rejected incoming message**")
    outcome = request_validator(Settings.from_overrides()).validate(rejected["payload"])
    assert isinstance(outcome, Rejected) and outcome.reason == rejected["error"]
    raw = json.dumps(rejected["payload"]).encode()
    assert validation_dead_letter(raw, outcome.reason, 1 << 20) == encode(rejected)

    failed = _example("**(b) A request that failed for good**")
    fields = {name: failed[name] for name in ("url", "appid", "crawlid", "spiderid", "retry_times")}
    letter = crawl_dead_letter(failed["error"], **fields, server_time=failed["server_time"])
    assert encode(letter) == encode(failed)


def test_record_dead_letters_keep_string_ids_only_and_cut_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(records, "server_time", lambda: 7)
    item = {"url": "u" * 5000, "appid": 3, "crawlid": "c", "body": "x"}
    assert clean_dead_letter(item, "boom") == {
        "stage": "clean",
        "error": "boom",
        "url": "u" * records.DEAD_LETTER_FIELD_CHARS,
        "crawlid": "c",
        "server_time": 7,
    }
    letter = sink_dead_letter("files-1", "full", None, "demo.cleaned", 2, 40)
    assert list(letter) == ["stage", "sink", "error", "topic", "partition", "offset", "server_time"]


def test_the_topic_literal_names_the_topics_of_section_1() -> None:
    table = section("## 1.").split("| Topic |")[1].split("\n\n")[0]
    shorts = re.findall(r"^\| `<prefix>\.(\w+)`", table, re.M)
    fixed = [name for name in shorts if not name.endswith("_<appid>") and "<" not in name]
    assert set(get_args(Topic)) == set(TOPICS) == set(fixed) and len(TOPICS) == 6


def test_the_kafka_monitor_publishes_its_plugin_map_and_each_plugin_is_its_kind() -> None:
    """REST, Redis-only mode and ``crawlhive feed`` find the built-in plugins through the entry
    point, without importing a plugin module; each plugin is the contract's kind it is listed as."""
    assert builtin_plugins() == BUILTIN
    assert BUILTIN_PLUGINS == {path: rank for path, (rank, _) in BUILTIN.items()}
    for path, (_, kind) in BUILTIN.items():
        plugin = load_object(path)
        assert issubclass(plugin, kind) and plugin.name == kind.name == path.rpartition(".")[2]


def _limits(**changes: Any) -> RequestLimits:
    base: dict[str, Any] = {
        "schema_values": request_validator(Settings.from_overrides()).limits.schema_values,
        "spider_ids": frozenset(),
        "stats_types": (),
        "recrawl_min_every": 60,
        "check_patterns": lambda fields: None,
        "domain_of": lambda host: host.lower().removeprefix("www."),
        "pool_problem": lambda name: None,
        "render_pool": lambda host: None,
        "pool_domain_updates": False,
    }
    return RequestLimits(**{**base, **changes})


def test_the_contract_applies_the_rules_its_caller_passes_in() -> None:
    """The validator reads no settings: pools, domains and patterns are the caller's rules."""
    crawl = {"url": "http://x.com/", "appid": "app", "crawlid": "c"}
    refusing = RequestValidator([CrawlRequest], _limits(pool_problem=lambda name: f"no pool {name}"))
    outcome = refusing.validate({**crawl, "proxy_pool": "dc"})
    assert isinstance(outcome, Rejected) and outcome.reason == "Invalid request: crawl: no pool dc (at /proxy_pool)"
    patterns = RequestValidator([CrawlRequest], _limits(check_patterns=lambda fields: ("too slow", "/allow_regex/0")))
    outcome = patterns.validate({**crawl, "allow_regex": ["a"]})
    assert isinstance(outcome, Rejected) and outcome.reason.endswith("too slow (at /allow_regex/0)")
    rendered = RequestValidator([CrawlRequest], _limits(render_pool=lambda host: "res" if host == "x.com" else None))
    assert isinstance(rendered.validate({**crawl, "render": True}), Rejected)
    assert isinstance(rendered.validate({**crawl, "url": "http://y.com/", "render": True}), Accepted)
    domains = RequestValidator([DomainConfigRequest], _limits())
    accepted = domains.validate({"uuid": "u", "appid": "app", "action": "domain-remove", "domain": "WWW.Example.com"})
    assert isinstance(accepted, Accepted) and accepted.message["domain"] == "example.com"
