"""Settings: typed parsing, precedence, aliases, errors that name the setting."""

from __future__ import annotations

import json
import os
import types
import typing
from pathlib import Path

import pytest

from crawlhive.app.state import clear_state, read_state, with_state, write_state
from crawlhive.utils.config import defaults
from crawlhive.utils.config.errors import SettingsError
from crawlhive.utils.config.settings import DECLARED, Settings, load_settings, render_setting_types

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_match_the_contract() -> None:
    s = load_settings(environ={})
    assert s["QUEUE_HITS"] == 10 and s["QUEUE_WINDOW"] == 60 and s["QUEUE_MODERATED"] is True
    assert s["KAFKA_TOPIC_PREFIX"] == "demo"
    assert s.kafka_group == "demo-group"
    assert s["RETRY_HTTP_CODES"] == [500, 502, 503, 504, 522, 524, 408, 429]
    assert s["STATS_TIMES"] == [900, 3600, 21600, 43200, 86400, 604800]
    assert s["GLOBAL_PAGE_PER_DOMAIN_LIMIT"] is None
    assert s.user_agent.startswith("crawlhive/")
    assert s.topic("incoming") == "demo.incoming"


def test_every_setting_is_documented_beside_its_default() -> None:
    sources = {module.__name__: Path(module.__file__ or "").read_text() for module in defaults.COMPONENTS}
    for name in DECLARED:
        found = [source for source in sources.values() if f"\n{name}:" in source]
        assert found, f"{name} is in no module of defaults.COMPONENTS"
        after = found[0].split(f"\n{name}:", 1)[1].split("\n", 2)
        assert after[1].startswith('"""'), f"{name} has no docstring under its default"


def test_each_setting_is_declared_once_in_the_modules_of_the_defaults() -> None:
    """The defaults are split by component (utils/config/defaults/): a name declared in two modules
    would silently take the later one's default and type, so it is refused here; and every module
    of the package is one of COMPONENTS (a module left out would declare settings nobody loads)."""
    seen: dict[str, str] = {}
    for module in defaults.COMPONENTS:
        for name in module.__annotations__:
            assert name not in seen, f"{name} is declared in {seen.get(name)} and {module.__name__}"
            seen[name] = module.__name__
    assert set(seen) == set(DECLARED)
    assert DECLARED["QUEUE_HITS"] == (int, 10) and defaults.QUEUE_HITS == 10  # also a name of the package
    folder = Path(defaults.__file__).parent
    modules = {path.stem for path in folder.glob("*.py")} - {"__init__"}
    assert modules == {module.__name__.rsplit(".", 1)[1] for module in defaults.COMPONENTS}


def test_precedence_defaults_file_env_cli(tmp_path: Path) -> None:
    settings_file = tmp_path / "local.py"
    settings_file.write_text("QUEUE_HITS = 20\nQUEUE_WINDOW = 30\nLEASE_TIMEOUT = 5\n")
    s = load_settings(
        settings_file=settings_file,
        environ={"QUEUE_WINDOW": "15", "LEASE_TIMEOUT": "7"},
        cli={"LEASE_TIMEOUT": "9"},
    )
    assert s["QUEUE_HITS"] == 20 and s.source("QUEUE_HITS") == "file"
    assert s["QUEUE_WINDOW"] == 15.0 and s.source("QUEUE_WINDOW") == "env"
    assert s["LEASE_TIMEOUT"] == 9.0 and s.source("LEASE_TIMEOUT") == "cli"
    assert s.source("REDIS_URL") == "default"


@pytest.mark.parametrize(
    ("name", "raw", "expected"),
    [
        ("QUEUE_MODERATED", "off", False),
        ("QUEUE_MODERATED", "YES", True),
        ("KAFKA_APPID_TOPICS", "1", True),
        ("QUEUE_HITS", " 42 ", 42),
        ("QUEUE_WINDOW", "2.5", 2.5),
        ("RETRY_HTTP_CODES", "500, 503", [500, 503]),
        ("RETRY_HTTP_CODES", "[429]", [429]),
        ("KAFKA_BOOTSTRAP_SERVERS", "a:1,b:2", ["a:1", "b:2"]),
        ("PLUGINS", '{"x.y.Z": null}', {"x.y.Z": None}),
        ("GLOBAL_PAGE_PER_DOMAIN_LIMIT", "50", 50),
    ],
)
def test_environment_values_are_parsed_by_type(name: str, raw: str, expected: object) -> None:
    assert load_settings(environ={name: raw})[name] == expected


def test_empty_environment_value_means_not_set() -> None:
    s = load_settings(environ={"QUEUE_HITS": ""})
    assert s["QUEUE_HITS"] == 10 and s.source("QUEUE_HITS") == "default"


@pytest.mark.parametrize(
    ("name", "raw", "message"),
    [
        ("QUEUE_HITS", "ten", "QUEUE_HITS: expected an integer, got 'ten'"),
        ("QUEUE_MODERATED", "maybe", "QUEUE_MODERATED: expected a boolean, got 'maybe'"),
        ("QUEUE_WINDOW", "soon", "QUEUE_WINDOW: expected a number, got 'soon'"),
        ("RETRY_HTTP_CODES", "500,x", "RETRY_HTTP_CODES: expected a list (JSON or comma-separated), got '500,x'"),
        ("PLUGINS", "[1]", "PLUGINS: expected a JSON object, got '[1]'"),
    ],
)
def test_bad_environment_value_names_the_setting(name: str, raw: str, message: str) -> None:
    with pytest.raises(SettingsError) as info:
        load_settings(environ={name: raw})
    assert str(info.value) == message


def test_bad_value_in_settings_file_names_the_setting(tmp_path: Path) -> None:
    settings_file = tmp_path / "bad.py"
    settings_file.write_text("QUEUE_HITS = 'ten'\n")
    with pytest.raises(SettingsError, match="QUEUE_HITS: expected an integer, got 'ten'"):
        load_settings(settings_file=settings_file, environ={})


def test_missing_settings_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="no such file"):
        load_settings(settings_file=tmp_path / "nope.py", environ={})


def test_unknown_names_warn_and_are_ignored(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    settings_file = tmp_path / "typo.py"
    settings_file.write_text("SCHEUDLER_ITEM_RETRIES = 3\n")
    s = load_settings(settings_file=settings_file, environ={})
    assert "SCHEUDLER_ITEM_RETRIES" not in s
    assert "unknown setting SCHEUDLER_ITEM_RETRIES" in caplog.text


def test_scrapy_cluster_aliases() -> None:
    s = load_settings(
        environ={
            "KAFKA_HOSTS": "k1:9092,k2:9092",
            "FLASK_PORT": "8080",
            "REDIS_HOST": "r",
            "REDIS_PORT": "7000",
            "REDIS_DB": "2",
            "REDIS_PASSWORD": "p@ss",
        },
    )
    assert s["KAFKA_BOOTSTRAP_SERVERS"] == ["k1:9092", "k2:9092"]
    assert s["REST_PORT"] == 8080
    assert s["REDIS_URL"] == "redis://:p%40ss@r:7000/2"


def test_canonical_name_beats_its_alias_and_redis_url_beats_parts() -> None:
    s = load_settings(
        environ={
            "KAFKA_HOSTS": "old:1",
            "KAFKA_BOOTSTRAP_SERVERS": "new:2",
            "REDIS_URL": "redis://x:1/0",
            "REDIS_HOST": "y",
        },
    )
    assert s["KAFKA_BOOTSTRAP_SERVERS"] == ["new:2"]
    assert s["REDIS_URL"] == "redis://x:1/0"


def test_bad_redis_port_alias_names_it() -> None:
    with pytest.raises(SettingsError, match="REDIS_PORT: expected an integer"):
        load_settings(environ={"REDIS_PORT": "six"})


def test_settings_are_frozen_and_copy_with_does_not_touch_the_original() -> None:
    s = load_settings(environ={})
    with pytest.raises(TypeError):
        s["QUEUE_HITS"] = 3  # type: ignore[index]
    t = s.copy_with(QUEUE_HITS="3")
    assert t["QUEUE_HITS"] == 3 and s["QUEUE_HITS"] == 10
    s["STATS_TIMES"].append(1)  # a caller mutating a returned list never reaches the defaults
    assert defaults.STATS_TIMES == [900, 3600, 21600, 43200, 86400, 604800]


def test_state_file_fills_addresses_only_when_not_set(tmp_path: Path) -> None:
    write_state(tmp_path, "redis://127.0.0.1:7777/0", ["127.0.0.1:9999"])
    try:
        assert read_state(tmp_path) is not None
        assert load_settings(environ={"CRAWLHIVE_HOME": str(tmp_path)}).source("REDIS_URL") == "default"
        s = with_state(load_settings(environ={"CRAWLHIVE_HOME": str(tmp_path)}))
        assert s["REDIS_URL"] == "redis://127.0.0.1:7777/0" and s.source("REDIS_URL") == "state"
        assert s["KAFKA_BOOTSTRAP_SERVERS"] == ["127.0.0.1:9999"]
        s = with_state(load_settings(environ={"CRAWLHIVE_HOME": str(tmp_path), "REDIS_URL": "redis://mine:1/0"}))
        assert s["REDIS_URL"] == "redis://mine:1/0"
    finally:
        clear_state(tmp_path)
    assert read_state(tmp_path) is None


def test_state_file_of_a_dead_process_is_ignored(tmp_path: Path) -> None:
    (tmp_path / "up.json").write_text(
        '{"pid": 999999999, "REDIS_URL": "redis://127.0.0.1:1/0", "KAFKA_BOOTSTRAP_SERVERS": "x:1"}'
    )
    assert read_state(tmp_path) is None
    s = with_state(load_settings(environ={"CRAWLHIVE_HOME": str(tmp_path)}))
    assert s.source("REDIS_URL") == "default"
    assert os.path.exists(tmp_path / "up.json")


def test_settings_env_round_trips_through_the_environment(tmp_path: Path) -> None:
    from crawlhive.utils.config.settings import settings_env

    settings_file = tmp_path / "s.py"
    settings_file.write_text("QUEUE_MODERATED = False\nSTATS_TIMES = [60, 120]\n")
    s = load_settings(
        settings_file=settings_file,
        cli={"PLUGINS": {"a.B": None}, "KAFKA_BOOTSTRAP_SERVERS": "h:1,h:2", "LEASE_TIMEOUT": 3},
        environ={},
    )
    env = settings_env(s)
    assert set(env) == {"QUEUE_MODERATED", "STATS_TIMES", "PLUGINS", "KAFKA_BOOTSTRAP_SERVERS", "LEASE_TIMEOUT"}
    child = load_settings(environ=env)
    for name in env:
        assert child[name] == s[name]


def test_up_claims_the_state_file_once_and_takes_over_only_a_dead_process_s(tmp_path: Path) -> None:
    from crawlhive.app.state import AlreadyRunning, claim_state

    (tmp_path / "up.json").write_text('{"pid": 999999999, "REDIS_URL": "redis://127.0.0.1:1/0"}')
    nonce = claim_state(tmp_path)  # left by a process that is gone: replaced
    write_state(tmp_path, "redis://127.0.0.1:7777/0", ["127.0.0.1:9999"], nonce)
    clear_state(tmp_path, "another-nonce")  # not its record: kept
    assert read_state(tmp_path) is not None
    parent = json.loads((tmp_path / "up.json").read_text())
    (tmp_path / "up.json").write_text(json.dumps({**parent, "pid": os.getppid()}))  # a live other process
    with pytest.raises(AlreadyRunning, match=rf"already running \(pid {os.getppid()}; Redis redis://127.0.0.1:7777/0"):
        claim_state(tmp_path)
    assert json.loads((tmp_path / "up.json").read_text())["pid"] == os.getppid()


def test_a_command_started_with_up_waits_for_its_addresses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`crawlhive up & crawlhive crawler`: the crawler reads up.json while `up` has only claimed it;
    it waits for the addresses instead of taking the defaults (someone else's localhost:6379)."""
    import threading

    from crawlhive.app.state import claim_state

    nonce = claim_state(tmp_path)
    writer = threading.Timer(0.5, write_state, (tmp_path, "redis://127.0.0.1:7777/0", ["127.0.0.1:9999"], nonce))
    writer.start()
    try:
        s = with_state(load_settings(environ={"CRAWLHIVE_HOME": str(tmp_path)}), wait_s=30)
    finally:
        writer.join()
        clear_state(tmp_path, nonce)
    assert s["REDIS_URL"] == "redis://127.0.0.1:7777/0" and s.source("REDIS_URL") == "state"
    assert "waiting for the crawlhive up" in capsys.readouterr().err


def test_setting_types_are_generated_from_the_defaults() -> None:
    """utils/config/setting_types.py (what mypy checks ``settings.NAME`` reads against) is current."""
    committed = (ROOT / "utils" / "config" / "setting_types.py").read_text()
    assert committed == render_setting_types(), "run: python -m crawlhive.utils.config.settings"


def test_settings_read_as_attributes_have_their_declared_type() -> None:
    settings = Settings.from_overrides(LEASE_TIMEOUT=3, QUEUE_HITS="7")
    assert settings.LEASE_TIMEOUT == 3.0 and isinstance(settings.LEASE_TIMEOUT, float)
    assert settings.QUEUE_HITS == 7
    for name, (tp, _) in DECLARED.items():  # every default too: 120 for a float setting is 120.0
        value = getattr(settings, name)
        if isinstance(tp, types.UnionType):  # int | None: a value is one of the members (100000: an int)
            assert isinstance(value, tuple(typing.get_origin(t) or t for t in typing.get_args(tp))), (name, value)
            continue
        assert value is None or isinstance(value, typing.get_origin(tp) or tp), (name, value)
    with pytest.raises(AttributeError, match="NOT_A_SETTING"):
        assert settings.NOT_A_SETTING is None  # raises first
