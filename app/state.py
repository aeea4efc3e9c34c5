"""The state file through which ``crawlhive up`` tells other commands where its services are.

``crawlhive up`` (and ``demo``) claims ``<CRAWLHIVE_HOME>/up.json`` before it starts anything, with
its pid and a random nonce, and refuses to start while the file names another live process
(:class:`AlreadyRunning`): a second cluster would take the file over, and the other commands would
talk to it instead. Once its services run it records their addresses there, and the settings that
every process of one cluster must share (:func:`shared_settings`: names, what requests may ask,
prefixes); any other ``crawlhive`` command reads them (what the user did not set) as long as that
pid is alive, so ``crawlhive feed`` in a second terminal reaches the same broker and validates a
request as that cluster does. On exit it removes the file only if
it still holds its own pid and nonce.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import time
from pathlib import Path
from typing import Any

from crawlhive.utils.config.errors import CrawlhiveError
from crawlhive.utils.config.log import mask_url
from crawlhive.utils.config.settings import DECLARED, Settings, env_value, parse_value
from crawlhive.utils.process.loop import UP_STATE_FILE, pid_alive

STATE_FILE = UP_STATE_FILE

#: The settings a ``crawlhive up`` records for the other commands, besides its addresses: what its
#: components validate a request with (its limits, recrawl bounds, budgets, proxy pools and their
#: sessions, plugins, spiders) and the names every process of one cluster must share.
SHARED_PREFIXES = ("SCHEMA_", "RECRAWL_", "CRAWL_", "PROXY_", "SESSION_", "FRONTIER_")
SHARED_NAMES = frozenset({"PLUGINS", "KAFKA_MONITOR_PLUGINS", "SPIDER_IDS", "KAFKA_TOPIC_PREFIX", "REDIS_KEY_PREFIX"})


def is_shared(name: str) -> bool:
    """True if the setting *name* is one a ``crawlhive up`` shares (:data:`SHARED_PREFIXES`, :data:`SHARED_NAMES`)."""
    return name in SHARED_NAMES or name.startswith(SHARED_PREFIXES)


def shared_settings(settings: Settings) -> dict[str, str]:
    """The shared settings (:func:`is_shared`) of *settings* not at their defaults, as environment values."""
    return {
        name: env_value(settings[name]) for name in settings if is_shared(name) and settings.source(name) != "default"
    }


class AlreadyRunning(CrawlhiveError):
    """Another live ``crawlhive up`` (or ``demo``) holds the state file of this CRAWLHIVE_HOME."""


def state_path(home: Path) -> Path:
    return home / STATE_FILE


def _alive(pid: int) -> bool:
    return pid_alive(pid)


def _read(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_state(home: Path) -> dict[str, Any] | None:
    """The recorded addresses, or None when no live ``crawlhive up`` wrote them."""
    data = _read(state_path(home))
    if data is None or not isinstance(data.get("pid"), int) or not _alive(data["pid"]):
        return None
    return data


def _write_private(path: Path, payload: dict[str, Any]) -> Path:
    """*payload* in a new owner-only file beside *path*; returns that file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.{secrets.token_hex(4)}.tmp")
    # Owner only: REDIS_URL may hold a password (docs/contract.md §10.6). Created with that mode, so
    # it is never readable by others, not even for an instant.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(json.dumps(payload))
    os.chmod(tmp, 0o600)  # O_CREAT's mode is reduced by the umask, never widened
    return tmp


def _running_message(path: Path, holder: dict[str, Any]) -> str:
    command = holder.get("command") or "up"
    where = "starting"
    if holder.get("REDIS_URL"):
        where = f"Redis {mask_url(str(holder['REDIS_URL']))}, Kafka {holder.get('KAFKA_BOOTSTRAP_SERVERS')}"
    return (
        f"a crawlhive {command} is already running (pid {holder['pid']}; {where}; recorded in {path}). "
        "The other crawlhive commands use it as it is; stop it with Ctrl-C in its terminal, or run a second "
        "cluster with its own state folder: CRAWLHIVE_HOME=/tmp/other crawlhive up"
    )


def claim_state(home: Path, command: str = "up") -> str:
    """Take the state file of *home* for this process before anything starts; returns the nonce
    that :func:`write_state` and :func:`clear_state` must be given.

    A file left by a process that is gone is replaced. The claim is an atomic link of a complete
    file, so of two processes starting at once exactly one gets it.

    Raises:
        AlreadyRunning: a live process holds the file (the message names it and the way out).
    """
    path = state_path(home)
    nonce = secrets.token_hex(8)
    tmp = _write_private(path, {"pid": os.getpid(), "nonce": nonce, "command": command})
    try:
        for _ in range(5):
            try:
                os.link(tmp, path)  # fails if the file exists: never overwrites another's claim
                return nonce
            except FileExistsError:
                holder = _read(path)
                if holder is not None and isinstance(holder.get("pid"), int) and _alive(holder["pid"]):
                    if holder["pid"] != os.getpid():
                        raise AlreadyRunning(_running_message(path, holder)) from None
                elif holder is None and _young(path):
                    continue  # another process is writing it right now (replace() is atomic: rare)
                path.unlink(missing_ok=True)  # left by a process that is gone (or by this one)
        raise AlreadyRunning(f"could not claim {path}: another process keeps writing it")
    finally:
        tmp.unlink(missing_ok=True)


def _young(path: Path) -> bool:
    try:
        return time.time() - path.stat().st_mtime < 2.0
    except OSError:
        return False


def write_state(
    home: Path,
    redis_url: str,
    bootstrap: list[str],
    nonce: str | None = None,
    command: str = "up",
    shared: dict[str, str] | None = None,
) -> Path:
    """Record this process's cluster addresses and *shared* settings (:func:`shared_settings`)
    atomically; returns the file written."""
    path = state_path(home)
    payload: dict[str, Any] = {
        "pid": os.getpid(),
        "REDIS_URL": redis_url,
        "KAFKA_BOOTSTRAP_SERVERS": ",".join(bootstrap),
        "command": command,
        "settings": shared or {},
    }
    if nonce is not None:
        payload["nonce"] = nonce
    _write_private(path, payload).replace(path)
    return path


def clear_state(home: Path, nonce: str | None = None) -> None:
    """Remove the file if this process wrote it (its pid, and its *nonce* when given)."""
    path = state_path(home)
    data = _read(path)
    if data is not None and data.get("pid") == os.getpid() and (nonce is None or data.get("nonce") == nonce):
        path.unlink(missing_ok=True)


#: Seconds a command waits for a ``crawlhive up`` that is still starting to record its addresses.
STARTING_WAIT_S = 90.0


def _wait_while_starting(home: Path, state: dict[str, Any], wait_s: float) -> dict[str, Any] | None:
    """*state*, or once its ``up`` has recorded its addresses the new record, when *state* is the
    claim of an ``up`` still starting (``crawlhive up & crawlhive crawler`` in one go); None if it
    exits first. Says once, on standard error, what it waits for."""
    if "REDIS_URL" in state:
        return state
    print(
        f"crawlhive: waiting for the crawlhive {state.get('command') or 'up'} (pid {state['pid']}) that is "
        f"starting to record its addresses in {state_path(home)}",
        file=sys.stderr,
        flush=True,
    )
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        time.sleep(0.2)
        current = read_state(home)
        if current is None or current.get("pid") != state["pid"]:
            return current
        if "REDIS_URL" in current:
            return current
    return state


def with_state(settings: Settings, wait_s: float = STARTING_WAIT_S) -> Settings:
    """Fill REDIS_URL / KAFKA_BOOTSTRAP_SERVERS from a live ``crawlhive up`` when the user set neither,
    and the settings it shares (:func:`shared_settings`) the user did not set (their source is then
    ``state``); while that ``up`` is starting, wait up to *wait_s* for its addresses."""
    state = read_state(settings.home)
    if state is not None and not (settings.is_set("REDIS_URL") and settings.is_set("KAFKA_BOOTSTRAP_SERVERS")):
        state = _wait_while_starting(settings.home, state, wait_s)
    if state is None:
        return settings
    values, sources = dict(settings), {name: settings.source(name) for name in settings}
    for name in ("REDIS_URL", "KAFKA_BOOTSTRAP_SERVERS"):
        if not settings.is_set(name) and name in state:
            values[name] = parse_value(name, DECLARED[name][0], state[name])
            sources[name] = "state"
    shared = state.get("settings")
    for name, raw in (shared if isinstance(shared, dict) else {}).items():
        if name in DECLARED and is_shared(name) and not settings.is_set(name):
            values[name] = parse_value(name, DECLARED[name][0], raw)
            sources[name] = "state"
    return Settings(values, sources)


def from_state(settings: Settings) -> list[str]:
    """The names of *settings* taken from a ``crawlhive up``'s shared settings (not its addresses)."""
    addresses = ("REDIS_URL", "KAFKA_BOOTSTRAP_SERVERS")
    return sorted(n for n in settings if settings.source(n) == "state" and n not in addresses)


def no_cluster_message(settings: Settings) -> str | None:
    """What to say when a client command cannot reach Kafka at the default address because no
    ``crawlhive up`` is running and the user set no address (None when an address was set or
    came from a running ``up``: then the failure names the setting as usual)."""
    if any(settings.source(n) != "default" for n in ("KAFKA_BOOTSTRAP_SERVERS", "REDIS_URL")):
        return None
    program = sys.argv[0] if os.path.basename(sys.argv[0]) == "crawlhive" else "crawlhive"
    return (
        f"no crawlhive up is running (none recorded in {state_path(settings.home)}) and KAFKA_BOOTSTRAP_SERVERS "
        f"is not set: start a cluster with `{program} up` in another terminal, or set KAFKA_BOOTSTRAP_SERVERS "
        "and REDIS_URL to a running one"
    )
