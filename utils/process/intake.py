"""The request validator of a process (docs/contract.md §2.1, §2.7): the contract's
:class:`~crawlhive.utils.contract.validation.RequestValidator` built from the process's settings.

The contract takes plain values (:class:`~crawlhive.utils.contract.messages.RequestLimits`); this
module reads them from the settings, the registry (the ``stats`` types of the process kinds), the
proxy pools, the domain bucketing and the pattern limits, and finds the kafka-monitor's plugins,
so the kafka-monitor, REST, Redis-only mode and ``crawlhive feed`` all validate the same way.

The kafka-monitor owns its plugin map (``crawlhive.kafka_monitor.plugins.BUILTIN``: class path ->
rank and the contract's kind each validates as). It publishes it as the entry point
``kafka-monitor`` of the group :data:`INCOMING_GROUP`, so a process that validates without the
kafka-monitor finds it by name, imports the kafka-monitor's light ``plugins`` package alone, and
never loads a plugin's Redis writes; the library never names a service.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Mapping
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

from crawlhive.utils.config.errors import PluginLoadError
from crawlhive.utils.contract.messages import MessageKind, RequestLimits, schema_placeholders
from crawlhive.utils.contract.validation import RequestValidator
from crawlhive.utils.process.kinds import stats_types
from crawlhive.utils.process.plugins import load_object, merge_plugin_dicts
from crawlhive.utils.rules.domains import domain_of_host, tenant_site
from crawlhive.utils.rules.patterns import PatternLimits, check_patterns
from crawlhive.utils.rules.proxy_pools import pools_from_settings

if TYPE_CHECKING:
    from crawlhive.utils.config.settings import Settings

#: The entry-point group the kafka-monitor publishes its plugin map in.
INCOMING_GROUP = "crawlhive.incoming"

#: A plugin map: class path -> (rank, the kind of the contract the plugin validates as).
PluginMap = Mapping[str, tuple[int, type[MessageKind]]]


@functools.cache
def builtin_plugins() -> dict[str, tuple[int, type[MessageKind]]]:
    """The built-in kafka-monitor plugins (docs/contract.md §2.1), as the kafka-monitor publishes them.

    Raises:
        PluginLoadError: an entry point of :data:`INCOMING_GROUP` does not load.
    """
    found: dict[str, tuple[int, type[MessageKind]]] = {}
    for point in entry_points(group=INCOMING_GROUP):
        try:
            plugins: PluginMap = point.load()
        except Exception as exc:
            raise PluginLoadError(f"incoming plugins {point.name!r} ({point.value}) failed to load: {exc!r}") from exc
        found.update(plugins)
    return found


def plugin_paths(settings: Settings) -> list[str]:
    """The enabled kafka-monitor plugins (PLUGINS / KAFKA_MONITOR_PLUGINS over the built-in ones), in rank order."""
    ranks = {path: rank for path, (rank, _) in builtin_plugins().items()}
    return list(merge_plugin_dicts(ranks, settings.PLUGINS, settings.KAFKA_MONITOR_PLUGINS))


def plugin_classes(settings: Settings, base: type[MessageKind] = MessageKind) -> list[type[MessageKind]]:
    """The message kinds of the enabled kafka-monitor plugins, in rank order (not yet built).

    With the default *base* a built-in plugin is its kind of the contract (no plugin module of the
    kafka-monitor is imported: what REST, Redis-only mode and ``crawlhive feed`` validate with); a
    plugin of the user's is loaded. The kafka-monitor passes its plugin base class and gets the
    plugins themselves.

    Raises:
        PluginLoadError: a path cannot be loaded or is not a *base* subclass.
    """
    paths = plugin_paths(settings)
    builtin = builtin_plugins()
    load_all = base is not MessageKind
    classes = [load_object(path) if load_all or path not in builtin else builtin[path][1] for path in paths]
    for path, cls in zip(paths, classes, strict=True):
        if not (isinstance(cls, type) and issubclass(cls, base)):
            raise PluginLoadError(f"plugin {path!r} is not an IncomingPlugin subclass")
    return classes


def request_limits(settings: Settings, plugins: Collection[type[MessageKind]]) -> RequestLimits:
    """What *plugins* check requests against, from *settings* (docs/contract.md §2.7): the values
    of their schemas' ``"$SETTING"`` placeholders, SPIDER_IDS, RECRAWL_MIN_EVERY, SCHEMA_REGEX_*,
    the proxy pools (read when a request names one) and the registry's ``stats`` types.

    Raises:
        KeyError: a schema names a setting that does not exist.
    """
    names = set().union(*(schema_placeholders(cls.load_schema()) for cls in plugins))
    patterns = PatternLimits.from_settings(settings)

    def pool_problem(name: str) -> str | None:
        pools = pools_from_settings(settings)
        return pools.refused(name) or pools.unknown(name)

    def render_pool(host: str) -> str | None:
        if not (settings.PROXY_POOLS or settings.PROXY_POOLS_FILE):
            return None
        pools = pools_from_settings(settings)
        return pools.pin(domain_of_host(host), tenant_site(host)) or pools.default

    def patterns_problem(fields: dict[str, Any]) -> tuple[str, str] | None:
        return check_patterns(fields, patterns)

    return RequestLimits(
        schema_values={name: settings[name] for name in sorted(names)},
        spider_ids=frozenset(str(s) for s in settings.SPIDER_IDS),
        stats_types=stats_types(),
        recrawl_min_every=settings.RECRAWL_MIN_EVERY,
        check_patterns=patterns_problem,
        domain_of=domain_of_host,
        pool_problem=pool_problem,
        render_pool=render_pool,
        pool_domain_updates=settings.PROXY_POOL_DOMAIN_UPDATES,
    )


def request_validator(settings: Settings) -> RequestValidator:
    """The validator of the kafka-monitor plugins configured by PLUGINS / KAFKA_MONITOR_PLUGINS, as
    every process but the kafka-monitor builds it (the kafka-monitor passes its own plugins to
    :class:`RequestValidator` with :func:`request_limits`).

    Raises:
        SettingsError: also for PROXY_POOLS / PROXY_POOLS_FILE / PROXY_POOL_DEFAULT that cannot
            be used (the pools a crawl's ``proxy_pool`` is checked against, §21.1).
        PluginLoadError: a plugin path cannot be loaded.
    """
    pools_from_settings(settings)
    plugins = plugin_classes(settings)
    return RequestValidator(plugins, request_limits(settings, plugins))
