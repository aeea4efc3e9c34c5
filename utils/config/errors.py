"""Named exceptions of the shared library. Each message names the setting, input or path to fix.

Library code raises these; only a ``main()`` turns them into an exit code.
"""

from __future__ import annotations


class CrawlhiveError(Exception):
    """Base of every error crawlhive raises on purpose."""


class SettingsError(CrawlhiveError):
    """A setting has a value that does not parse or make sense; the message names the setting."""


class UnsafeSettings(SettingsError):
    """The settings would expose the cluster to strangers (docs/contract.md §10); the message names
    the setting that makes it safe and the one that allows it anyway. ``main()`` exits with 2."""

    exit_code = 2


class MissingExtra(SettingsError):
    """A setting asks for a feature whose optional packages are not installed (an extra of
    pyproject.toml, e.g. ``crawlhive[parquet]``); the message names the setting, the extra and the
    command that installs it. ``main()`` exits with 2, before anything starts."""

    exit_code = 2


class KeyFormatError(CrawlhiveError, ValueError):
    """A string is not a Redis key of the expected format."""


class PluginLoadError(CrawlhiveError):
    """A plugin path does not import, or the object it names cannot be built."""


class BackendUnavailable(CrawlhiveError):
    """Redis or Kafka cannot be reached; the message names the setting to check."""


class UnsupportedBackend(CrawlhiveError):
    """Redis answers but not in a way this process can use (older than crawlhive supports, or a
    Redis Cluster node it took for a single Redis); retrying cannot help. The message names what
    was found and the setting (REDIS_URL) that points at it."""


class EmbeddedServiceError(CrawlhiveError):
    """An embedded redis-server or broker could not be started."""


class NotConfigured(CrawlhiveError):
    """Raised by a monitor plugin's factory when it should not run (its ``*_ENABLED`` flag is off).

    The plugin loader skips it. Crawler components raise Scrapy's own ``NotConfigured`` instead.
    """
