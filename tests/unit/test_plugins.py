"""The plugin loader: merge, order, disable with None, NotConfigured, precise errors."""

from __future__ import annotations

import logging
from typing import ClassVar, Self

import pytest

from crawlhive.utils.config.errors import NotConfigured, PluginLoadError
from crawlhive.utils.process.plugins import load_object, load_plugins, merge_plugin_dicts


class Alpha:
    def __init__(self, owner: str) -> None:
        self.owner = owner

    @classmethod
    def from_monitor(cls, monitor: str) -> Self:
        return cls(monitor)


class Beta(Alpha):
    pass


class Disabled(Alpha):
    @classmethod
    def from_monitor(cls, monitor: str) -> Self:
        raise NotConfigured("DISABLED_ENABLED is false")


class Broken(Alpha):
    @classmethod
    def from_monitor(cls, monitor: str) -> Self:
        raise RuntimeError("boom")


HERE = __name__


def test_merge_orders_and_none_disables() -> None:
    base = {"a.A": 200, "b.B": 100, "c.C": 300}
    assert merge_plugin_dicts(base) == ["b.B", "a.A", "c.C"]
    assert merge_plugin_dicts(base, {"c.C": None, "d.D": 150}) == ["b.B", "d.D", "a.A"]
    assert merge_plugin_dicts(base, {"a.A": 50}, {"a.A": None}) == ["b.B", "c.C"]


def test_merge_rejects_non_numeric_order() -> None:
    with pytest.raises(PluginLoadError, match="'a.A': order must be a number or null, got 'first'"):
        merge_plugin_dicts({"a.A": "first"})


def test_load_plugins_builds_in_order_skips_not_configured_and_logs_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    base = {f"{HERE}.Beta": 200, f"{HERE}.Alpha": 100, f"{HERE}.Disabled": 150}
    plugins = load_plugins("test-monitor", base, [], lambda cls: cls.from_monitor("m"))
    assert [type(p) for p in plugins] == [Alpha, Beta]
    assert all(p.owner == "m" for p in plugins)
    enabled = [r.getMessage() for r in caplog.records if "enabled plugins" in r.getMessage()]
    assert enabled == [f"test-monitor enabled plugins: {HERE}.Alpha, {HERE}.Beta"]


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("nodots", "'nodots' is not a full dotted path"),
        ("no_such_module_xyz.Thing", "cannot import 'no_such_module_xyz'"),
        (f"{HERE}.Gamma", f"module '{HERE}' has no 'Gamma'"),
    ],
)
def test_bad_paths_are_named(path: str, message: str) -> None:
    with pytest.raises(PluginLoadError, match=message):
        load_object(path)


def test_failing_factory_is_named() -> None:
    with pytest.raises(PluginLoadError, match=rf"plugin '{HERE}.Broken' failed to build: RuntimeError\('boom'\)"):
        load_plugins("x", {f"{HERE}.Broken": 1}, [], lambda cls: cls.from_monitor("m"))


class Closing:
    closed: ClassVar[list[str]] = []

    @classmethod
    def from_monitor(cls, owner: str) -> Closing:
        return cls()

    def close(self) -> None:
        Closing.closed.append("closed")


def test_plugins_built_before_a_failing_one_are_closed() -> None:
    """A set-up that fails at its third plugin leaves nothing running: the cleaner's extraction step
    has started its processes when a later CLEANER_PLUGINS path turns out wrong."""
    Closing.closed.clear()
    base = {f"{HERE}.Closing": 1, f"{HERE}.Alpha": 2, f"{HERE}.Broken": 3}
    with pytest.raises(PluginLoadError, match="Broken"):
        load_plugins("x", base, [], lambda cls: cls.from_monitor("m"))
    assert Closing.closed == ["closed"]
    Closing.closed.clear()
    with pytest.raises(PluginLoadError, match="no_such_module_xyz"):
        load_plugins(
            "x", base, [{f"{HERE}.Broken": None, "no_such_module_xyz.Thing": 4}], lambda cls: cls.from_monitor("m")
        )
    assert Closing.closed == ["closed"]
