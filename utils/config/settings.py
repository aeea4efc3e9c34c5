"""One typed, frozen settings object for every crawlhive process.

Precedence, lowest first (docs/contract.md §8.1): the defaults in :mod:`crawlhive.utils.config.defaults` < the state
file of a running ``crawlhive up`` (addresses only) < a ``--settings FILE`` < environment variables of
the same upper-case name < command-line options. Every value is parsed into the type annotated in
the defaults package, so a bad value fails at start-up with a message naming the setting, e.g.
``QUEUE_HITS: expected an integer, got 'ten'``.

Why not Scrapy's ``Settings``: it has no environment layer and no typed parsing of strings, and the
monitors are not Scrapy processes. The crawler converts this object into Scrapy settings.
"""

from __future__ import annotations

import json
import logging
import os
import runpy
import socket
import types
import typing
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

from crawlhive.utils import __version__
from crawlhive.utils.config import defaults
from crawlhive.utils.config.errors import SettingsError
from crawlhive.utils.config.log import url_secrets
from crawlhive.utils.config.setting_types import SettingTypes

logger = logging.getLogger(__name__)

#: Scrapy Cluster names accepted for ours (docs/contract.md §8.1).
ALIASES: dict[str, str] = {"KAFKA_HOSTS": "KAFKA_BOOTSTRAP_SERVERS", "FLASK_PORT": "REST_PORT"}
#: Scrapy Cluster's Redis parts, combined into REDIS_URL when REDIS_URL itself is not set.
REDIS_PARTS = ("REDIS_HOST", "REDIS_PORT", "REDIS_DB", "REDIS_PASSWORD")

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def _declared() -> dict[str, tuple[Any, Any]]:
    """Name -> (type, default) of every setting in the defaults package, module by module in the
    order of :data:`~crawlhive.utils.config.defaults.COMPONENTS`."""
    declared: dict[str, tuple[Any, Any]] = {}
    for module in defaults.COMPONENTS:
        hints = typing.get_type_hints(module)
        declared.update({name: (hints[name], getattr(module, name)) for name in hints if name.isupper()})
    return declared


DECLARED: dict[str, tuple[Any, Any]] = _declared()


def _describe(tp: Any) -> str:
    names = {int: "an integer", float: "a number", bool: "a boolean", str: "a string"}
    if tp in names:
        return names[tp]
    origin = typing.get_origin(tp)
    if origin is list:
        return "a list (JSON or comma-separated)"
    if origin is dict:
        return "a JSON object"
    return str(tp)


def parse_value(name: str, tp: Any, raw: Any) -> Any:
    """Parse *raw* (a string from the environment or a Python value from a file) into *tp*.

    Raises:
        SettingsError: naming *name*, the expected type and the value received.
    """
    origin = typing.get_origin(tp)
    if origin in (types.UnionType, typing.Union):
        members = [a for a in typing.get_args(tp) if a is not type(None)]
        if raw is None:
            return None
        return parse_value(name, members[0], raw)
    try:
        return _parse(tp, origin, raw)
    except (ValueError, TypeError, json.JSONDecodeError):
        raise SettingsError(f"{name}: expected {_describe(tp)}, got {raw!r}") from None


def _parse(tp: Any, origin: Any, raw: Any) -> Any:
    if tp is bool:
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.strip().lower() in _TRUE | _FALSE:
            return raw.strip().lower() in _TRUE
        if isinstance(raw, int) and raw in (0, 1):
            return bool(raw)
        raise ValueError
    if tp is int:
        if isinstance(raw, bool) or isinstance(raw, float) and not raw.is_integer():
            raise ValueError
        return int(raw.strip()) if isinstance(raw, str) else int(raw)
    if tp is float:
        if isinstance(raw, bool):
            raise ValueError
        return float(raw.strip()) if isinstance(raw, str) else float(raw)
    if tp is str:
        if not isinstance(raw, str):
            raise TypeError
        return raw
    if origin is list:
        (item_tp,) = typing.get_args(tp)
        if isinstance(raw, str):
            text = raw.strip()
            items = json.loads(text) if text.startswith("[") else [p.strip() for p in text.split(",") if p.strip()]
        elif isinstance(raw, list | tuple):
            items = list(raw)
        else:
            raise TypeError
        if not isinstance(items, list):
            raise TypeError
        return [_parse(item_tp, typing.get_origin(item_tp), item) for item in items]
    if origin is dict:
        value = json.loads(raw) if isinstance(raw, str) else raw
        if not isinstance(value, dict):
            raise TypeError
        return dict(value)
    raise TypeError(f"unsupported setting type {tp}")


def _pools_file_secrets(path: str) -> list[str]:
    """The credentials of PROXY_POOLS_FILE's proxy URLs, line by line (a line that is not a proxy
    URL is skipped: the crawler names it when it reads the file; an unreadable file has none)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    found: list[str] = []
    for line in lines:
        fields = line.split("#", 1)[0].split()
        if len(fields) == 2:
            found += url_secrets(fields[1])
    return found


class Settings(SettingTypes, Mapping[str, Any]):
    """A frozen mapping of setting name -> typed value, with where each value came from.

    Read a setting as an attribute, ``settings.LEASE_TIMEOUT``: its type is the one declared in
    :mod:`crawlhive.utils.config.defaults` (:class:`~crawlhive.utils.config.setting_types.SettingTypes`, generated
    from it), so mypy checks every read, and a misspelt name is a type error rather than a
    ``KeyError`` at run time. ``settings["NAME"]`` reads one by a name held in a variable.

    Build it with :func:`load_settings`; tests may call ``Settings.from_overrides(...)``.
    """

    def __init__(self, values: Mapping[str, Any], sources: Mapping[str, str]) -> None:
        self._values = dict(values)
        self._sources = dict(sources)

    @classmethod
    def from_overrides(cls, **overrides: Any) -> Settings:
        """Defaults plus *overrides* (parsed like a settings file), ignoring the environment."""
        return load_settings(cli=overrides, environ={})

    def __getitem__(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise KeyError(f"unknown setting {name!r}; see crawlhive.utils.config.defaults") from None

    if not typing.TYPE_CHECKING:  # hidden from mypy, which sees SettingTypes' declarations instead

        def __getattr__(self, name: str) -> Any:
            if name.isupper() and name in DECLARED:
                return self._values[name]
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def source(self, name: str) -> str:
        """Where *name*'s value came from: default, state, file, env or cli."""
        return self._sources.get(name, "default")

    def is_set(self, name: str) -> bool:
        """True if *name* was given by the user (file, environment or CLI), not defaulted."""
        return self.source(name) in ("file", "env", "cli")

    def getbool(self, name: str) -> bool:
        return bool(self[name])

    def getint(self, name: str) -> int:
        return int(self[name])

    def getfloat(self, name: str) -> float:
        return float(self[name])

    def getlist(self, name: str) -> list[Any]:
        return list(self[name])

    def getdict(self, name: str) -> dict[str, Any]:
        return dict(self[name])

    def copy_with(self, **overrides: Any) -> Settings:
        """A new object with *overrides* applied at CLI precedence (the original stays frozen)."""
        values, sources = dict(self._values), dict(self._sources)
        for name, raw in overrides.items():
            tp = DECLARED[name][0] if name in DECLARED else type(raw)
            values[name] = parse_value(name, tp, raw)
            sources[name] = "cli"
        return Settings(values, sources)

    # Derived values: one place computes each, so no call site repeats a default.
    @property
    def kafka_group(self) -> str:
        return self.KAFKA_GROUP or f"{self.KAFKA_TOPIC_PREFIX}-group"

    @property
    def cleaner_group(self) -> str:
        """The cleaners' consumer group (docs/contract.md §13)."""
        return self.CLEANER_GROUP or f"{self.KAFKA_TOPIC_PREFIX}-cleaner"

    def secrets(self) -> list[str]:
        """Values no log line or printed message may show (docs/contract.md §10.6): the passwords of
        REDIS_URL, of every seed, and its secret query values (as written and decoded:
        :func:`~crawlhive.utils.config.log.url_secrets`), of every PROXY_POOLS proxy and every proxy of
        PROXY_POOLS_FILE as it reads now (a file read again later adds its own: ``add_secrets``),
        those of SINK_URL and BLOB_STORE_URL, KAFKA_SASL_PASSWORD and REST_API_KEY."""
        found = url_secrets(str(self.REDIS_URL or ""))
        for urls in (self.PROXY_POOLS or {}).values():  # proxy credentials (§21.5)
            for url in [urls] if isinstance(urls, str) else urls:
                found += url_secrets(str(url))
        if self.PROXY_POOLS_FILE:
            found += _pools_file_secrets(str(self.PROXY_POOLS_FILE))
        for name in ("SINK_URL", "BLOB_STORE_URL"):
            found += url_secrets(str(self.get(name) or ""))
        for name in ("KAFKA_SASL_PASSWORD", "REST_API_KEY"):
            if self[name]:
                found.append(str(self[name]))
        return found

    @property
    def user_agent(self) -> str:
        return self.USER_AGENT or f"crawlhive/{__version__}"

    @property
    def node_name(self) -> str:
        return self.CRAWLER_NODE_NAME or socket.gethostname()

    @property
    def home(self) -> Path:
        return Path(os.path.expanduser(self.CRAWLHIVE_HOME))

    def topic(self, short: str) -> str:
        """Full topic name of *short* (``incoming`` -> ``demo.incoming``)."""
        return f"{self.KAFKA_TOPIC_PREFIX}.{short}"


def read_settings_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The UPPER_CASE names a Python settings file defines.

    Raises:
        SettingsError: the file is missing or does not run, naming the file.
    """
    try:
        namespace = runpy.run_path(str(path))
    except FileNotFoundError:
        raise SettingsError(f"--settings: no such file {str(path)!r}") from None
    except Exception as exc:
        raise SettingsError(f"--settings: {str(path)!r} failed to load: {exc!r}") from exc
    return {k: v for k, v in namespace.items() if k.isupper()}


def _layer(raw: Mapping[str, Any], origin: str, warn_unknown: bool) -> dict[str, Any]:
    """Resolve aliases within one source, drop empty env values, warn about unknown names."""
    out: dict[str, Any] = {}
    for name, value in raw.items():
        if origin == "env" and isinstance(value, str) and value == "":
            continue  # docs/contract.md §8.1: an empty value means "not set"
        if name in ALIASES:
            canonical = ALIASES[name]
            if canonical not in raw:
                out[canonical] = value
            continue
        if name in DECLARED or name in REDIS_PARTS:
            out[name] = value
        elif warn_unknown:
            logger.warning("unknown setting %s in %s ignored; see crawlhive.utils.config.defaults", name, origin)
    return out


def _redis_url_from_parts(parts: Mapping[str, Any]) -> str:
    host = str(parts.get("REDIS_HOST") or "127.0.0.1")
    port = parse_value("REDIS_PORT", int, parts.get("REDIS_PORT", 6379))
    db = parse_value("REDIS_DB", int, parts.get("REDIS_DB", 0))
    password = parts.get("REDIS_PASSWORD")
    auth = f":{quote(str(password), safe='')}@" if password else ""
    return f"redis://{auth}{host}:{port}/{db}"


def load_settings(
    settings_file: str | os.PathLike[str] | None = None,
    cli: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Resolve every setting: defaults < settings file < environment < *cli* (the ``crawlhive``
    command then fills the addresses nobody set from a running ``crawlhive up``:
    :func:`crawlhive.app.state.with_state`).

    Args:
        settings_file: the ``--settings FILE`` path, if any.
        cli: values from command-line options (already named as settings).
        environ: the environment to read (default ``os.environ``); only declared names, aliases and
            Scrapy Cluster's Redis parts are read from it.

    Raises:
        SettingsError: a value does not parse; the message names the setting.
    """
    env = os.environ if environ is None else environ
    wanted = set(DECLARED) | set(ALIASES) | set(REDIS_PARTS)
    layers: list[tuple[str, dict[str, Any]]] = []
    if settings_file:
        layers.append(("file", _layer(read_settings_file(settings_file), "file", True)))
    layers.append(("env", _layer({k: v for k, v in env.items() if k in wanted}, "env", False)))
    layers.append(("cli", _layer(dict(cli or {}), "cli", True)))

    # defaults parsed too, so a value always has its declared type (120 for a float is 120.0)
    values = {name: parse_value(name, tp, _copy_default(default)) for name, (tp, default) in DECLARED.items()}
    sources: dict[str, str] = {}
    redis_parts: dict[str, Any] = {}
    for origin, layer in layers:
        for name, raw in layer.items():
            if name in REDIS_PARTS:
                redis_parts[name] = raw
                continue
            values[name] = parse_value(name, DECLARED[name][0], raw)
            sources[name] = origin
    if redis_parts and "REDIS_URL" not in sources:
        values["REDIS_URL"] = _redis_url_from_parts(redis_parts)
        sources["REDIS_URL"] = "env" if any(p in env for p in redis_parts) else "file"

    return Settings(values, sources)


def _copy_default(value: Any) -> Any:
    return list(value) if isinstance(value, list) else dict(value) if isinstance(value, dict) else value


def env_value(value: Any) -> str:
    """*value* written so that :func:`parse_value` reads it back from the environment."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | dict):
        return json.dumps(value)
    return str(value)


def settings_env(settings: Settings) -> dict[str, str]:
    """Environment variables that give a child process the same effective settings.

    Covers every value not taken from the defaults (settings file, CLI options, state file);
    values that came from the environment are inherited anyway.
    """
    return {
        name: env_value(settings[name])
        for name in settings
        if settings.source(name) in ("file", "cli", "state") and settings[name] is not None
    }


def render_setting_types() -> str:
    """The source of :mod:`crawlhive.utils.config.setting_types`: each setting's annotation, as written in
    :mod:`crawlhive.utils.config.defaults` (``python -m crawlhive.utils.config.settings`` rewrites that module)."""
    import ast
    import inspect

    lines = [
        '"""The declared type of every setting, so that ``settings.NAME`` reads are typed (mypy checks them).',
        "",
        "Generated from :mod:`crawlhive.utils.config.defaults`; do not edit. After adding or changing a setting there:",
        "``python -m crawlhive.utils.config.settings`` (tests/unit/test_settings.py checks this file is current).",
        'At run time :class:`~crawlhive.utils.config.settings.Settings` reads the values."""',
        "",
        "# ruff: noqa: E501",
        "",
        "from typing import Any",
        "",
        "",
        "class SettingTypes:",
        '    """Each setting, declared as an attribute of :class:`~crawlhive.utils.config.settings.Settings`."""',
        "",
    ]
    for module in defaults.COMPONENTS:
        source = inspect.getsource(module)
        for node in ast.parse(source).body:
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id.isupper():
                lines.append(f"    {node.target.id}: {ast.get_source_segment(source, node.annotation)}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # python -m crawlhive.utils.config.settings: rewrite utils/config/setting_types.py
    import crawlhive.utils.config.setting_types as generated

    Path(generated.__file__).write_text(render_setting_types())
