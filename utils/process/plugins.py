"""The one plugin loader both monitors use.

Plugins are given as ``{"dotted.path.Class": order}`` dicts: the component's built-in ``*_BASE`` dict,
with the user's dicts (settings ``PLUGINS`` and the component's own map) merged over it. ``None``
removes an entry; numbers set the order (lowest first). Each class is built through its factory
(``from_monitor`` for monitors), a factory raising :class:`NotConfigured` skips the plugin, and the
enabled list is logged once.

Why not Scrapy's ``build_component_list`` / ``MiddlewareManager``: they are tied to Scrapy's
``Settings`` and crawler objects, and importing Scrapy (and Twisted) into the monitors costs start-up
time for ten lines of merging.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from crawlhive.utils.config.errors import NotConfigured, PluginLoadError

logger = logging.getLogger(__name__)

T = TypeVar("T")


def merge_plugin_dicts(base: Mapping[str, Any], *overrides: Mapping[str, Any]) -> list[str]:
    """The enabled paths of *base* updated by each of *overrides*, sorted by order (stable).

    Raises:
        PluginLoadError: an order is neither a number nor None, naming the path.
    """
    merged: dict[str, Any] = dict(base)
    for override in overrides:
        merged.update(override)
    enabled = []
    for path, order in merged.items():
        if order is None:
            continue
        if isinstance(order, bool) or not isinstance(order, int | float):
            raise PluginLoadError(f"plugin {path!r}: order must be a number or null, got {order!r}")
        enabled.append((order, path))
    return [path for _, path in sorted(enabled, key=lambda item: item[0])]


def load_object(path: str) -> Any:
    """Import ``package.module.Name`` and return ``Name``.

    Raises:
        PluginLoadError: the path is malformed, the module does not import, or it has no such name;
            the message repeats the path.
    """
    module_name, _, name = path.rpartition(".")
    if not module_name or not name:
        raise PluginLoadError(f"plugin path {path!r} is not a full dotted path (package.module.Class)")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise PluginLoadError(f"plugin path {path!r}: cannot import {module_name!r}: {exc}") from exc
    try:
        return getattr(module, name)
    except AttributeError:
        raise PluginLoadError(f"plugin path {path!r}: module {module_name!r} has no {name!r}") from None


def load_plugins(
    component: str,
    base: Mapping[str, Any],
    overrides: list[Mapping[str, Any]],
    build: Callable[[Any], T],
) -> list[T]:
    """Build every enabled plugin, in order.

    Args:
        component: name used in the log line (``kafka-monitor``).
        base: the built-in plugins and their orders.
        overrides: the user's plugin dicts, applied in turn over *base*.
        build: builds one plugin from its class (e.g. ``lambda cls: cls.from_monitor(monitor)``).

    Returns:
        The built plugins; those whose factory raised :class:`NotConfigured` are left out.

    Raises:
        PluginLoadError: a path does not import; or a factory failed, naming the path. The plugins
            built before it are closed first (those with a ``close()``: the cleaner's extraction
            step has started its processes by then).
    """
    plugins: list[T] = []
    names: list[str] = []
    try:
        for path in merge_plugin_dicts(base, *overrides):
            cls = load_object(path)
            try:
                plugin = build(cls)
            except NotConfigured as exc:
                logger.info("%s plugin %s disabled: %s", component, path, exc)
                continue
            except Exception as exc:
                raise PluginLoadError(f"plugin {path!r} failed to build: {exc!r}") from exc
            plugins.append(plugin)
            names.append(path)
    except PluginLoadError:
        _close_all(component, plugins)
        raise
    logger.info("%s enabled plugins: %s", component, ", ".join(names) or "(none)")
    return plugins


def _close_all(component: str, plugins: list[Any]) -> None:
    """Close each of *plugins* that has a ``close()``; a failure is logged, the rest still closed."""
    for plugin in plugins:
        close = getattr(plugin, "close", None)
        if callable(close):
            try:
                close()
            except Exception:  # noqa: BLE001 - a set-up that failed already: close the rest
                logger.warning("%s plugin %s failed to close", component, type(plugin).__name__, exc_info=True)
