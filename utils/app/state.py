"""The state file through which ``crawlhive up`` tells other commands where its services are.

``crawlhive up`` writes ``<CRAWLHIVE_HOME>/up.json`` with the addresses of the Redis and broker it
uses and its own pid; any other ``crawlhive`` command reads it (when the user set no address) as
long as that pid is alive, so ``crawlhive feed`` in a second terminal reaches the same broker.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from crawlhive.utils.settings import DECLARED, Settings, parse_value

STATE_FILE = "up.json"


def state_path(home: Path) -> Path:
    return home / STATE_FILE


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_state(home: Path) -> dict[str, Any] | None:
    """The recorded addresses, or None when no live ``crawlhive up`` wrote them."""
    try:
        data = json.loads(state_path(home).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("pid"), int) or not _alive(data["pid"]):
        return None
    return data


def write_state(home: Path, redis_url: str, bootstrap: list[str]) -> Path:
    """Record this process's cluster addresses atomically; returns the file written."""
    home.mkdir(parents=True, exist_ok=True)
    path = state_path(home)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    payload = {"pid": os.getpid(), "REDIS_URL": redis_url, "KAFKA_BOOTSTRAP_SERVERS": ",".join(bootstrap)}
    # Owner only: REDIS_URL may hold a password (docs/contract.md §10.6). Created with that mode, so
    # it is never readable by others, not even for an instant.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(json.dumps(payload))
    os.chmod(tmp, 0o600)  # O_CREAT's mode is reduced by the umask, never widened; an old file keeps its own
    tmp.replace(path)
    return path


def clear_state(home: Path) -> None:
    """Remove the file if this process wrote it."""
    path = state_path(home)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    if isinstance(data, dict) and data.get("pid") == os.getpid():
        path.unlink(missing_ok=True)


def with_state(settings: Settings) -> Settings:
    """Fill REDIS_URL / KAFKA_BOOTSTRAP_SERVERS from a live ``crawlhive up`` when the user set neither."""
    state = read_state(settings.home)
    if state is None:
        return settings
    values, sources = dict(settings), {name: settings.source(name) for name in settings}
    for name in ("REDIS_URL", "KAFKA_BOOTSTRAP_SERVERS"):
        if not settings.is_set(name) and name in state:
            values[name] = parse_value(name, DECLARED[name][0], state[name])
            sources[name] = "state"
    return Settings(values, sources)
