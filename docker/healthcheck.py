"""Container health check for one crawlhive component: exit 0 when healthy, 1 when not.

Usage (the compose file's ``healthcheck``)::

    python /opt/crawlhive/healthcheck.py kafka-monitor | redis-monitor | crawler | cleaner | sink | rest [--max-age S]
    python /opt/crawlhive/healthcheck.py <component> --alive [--max-age S]

Without ``--alive`` (the compose file's health check, Kubernetes' readiness probe: the process and
its backends work):

The components are the registry's kinds whose processes send heartbeats
(:func:`crawlhive.utils.process.kinds.heartbeat_components`), so a kind added by an entry point is
checked too without a change here.

* every such kind but REST (``kafka-monitor``, ``redis-monitor``, ``crawler``, ``cleaner``, ``sink``):
  healthy when **this container's** process has a heartbeat in Redis (``utils/state/heartbeat.py``, the
  same keys the ``nodes`` maps of docs/contract.md §4.1 come from) that was renewed at most ``--max-age``
  seconds ago (default 3 x HEARTBEAT_INTERVAL). This container's process is the one whose heartbeat
  names this container's node name (CRAWLER_NODE_NAME, else the hostname, which Docker sets to the
  container id: the value the component itself reports) and whose pid is a live process here. Redis
  unreachable = unhealthy.
* ``rest``: healthy when ``GET /`` on this container's REST port answers 200 and the service sees
  Kafka or Redis (``node_health`` not ``RED``). ``/`` never needs REST_API_KEY (docs/contract.md §7.4).

With ``--alive`` (Kubernetes' liveness probe, deploy/kubernetes/): healthy when the file
HEARTBEAT_FILE, which every beat of the process's own loop renews before it tries Redis
(``utils/state/heartbeat.py``), was renewed at most ``--max-age`` seconds ago (default 3 x
HEARTBEAT_INTERVAL). Nothing is asked of Redis or Kafka: an outage of theirs makes the process
unready, never restarts it.

Settings come from the environment, exactly as the component's own (docs/contract.md §8.1). Why a script and
not a ``crawlhive health`` subcommand: the CLI surface is fixed by docs/contract.md §8.2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from redis.exceptions import RedisError

from crawlhive.utils.backends.keys import Keys
from crawlhive.utils.backends.redis_clients import keys_from_settings, redis_from_settings
from crawlhive.utils.config.errors import CrawlhiveError
from crawlhive.utils.config.settings import Settings, load_settings
from crawlhive.utils.process.kinds import heartbeat_components
from crawlhive.utils.state.heartbeat import live_heartbeats

if TYPE_CHECKING:
    from redis import Redis

#: The component checked by asking its HTTP health endpoint (``GET /``) rather than its heartbeat:
#: a REST container is healthy when it serves.
HTTP_CHECKED = "rest"
#: Seconds the REST probe waits for ``GET /``.
REST_TIMEOUT_S = 5.0


def pid_alive(pid: int) -> bool:
    """True if a process *pid* exists in this (container's) pid namespace."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    return True


def heartbeat_problem(
    redis: Redis,
    keys: Keys,
    component: str,
    host: str,
    timeout_s: float,
    max_age_s: float,
    alive: Callable[[int], bool] = pid_alive,
) -> str | None:
    """Why *component* on *host* is unhealthy, or None if one of its processes beat recently.

    Args:
        redis, keys: the cluster's Redis and key formats.
        component: a heartbeat component (``kafka-monitor``, ``crawler``…; :func:`heartbeat_components`).
        host: the node name the process reports (Settings.node_name).
        timeout_s: HEARTBEAT_TIMEOUT, the lifetime each beat gives the key.
        max_age_s: the oldest acceptable beat, in seconds.
        alive: tells whether a pid is a live local process.

    Raises:
        redis.RedisError: Redis could not be read (the caller reports it as unhealthy).
    """
    reason = f"no live {component} heartbeat from host {host!r}"
    for beat in live_heartbeats(redis, keys, component):
        pid = beat.get("pid")
        if beat["host"] != host or not isinstance(pid, int) or not alive(pid):
            continue
        ttl_ms = redis.pttl(keys.heartbeat(component, beat["node_id"]))
        if ttl_ms < 0:  # expired (or lost its expiry) since it was listed
            continue
        age_s = timeout_s - ttl_ms / 1000
        if age_s <= max_age_s:
            return None
        reason = f"{component} heartbeat of pid {pid} is {age_s:.0f}s old (limit {max_age_s:g}s)"
    return reason


def rest_problem(settings: Settings, timeout_s: float = REST_TIMEOUT_S) -> str | None:
    """Why the REST service of this container is unhealthy, or None if ``GET /`` says it is fine."""
    host = settings["REST_HOST"]
    if host in ("", "0.0.0.0", "::"):
        host = "127.0.0.1"
    url = f"http://{f'[{host}]' if ':' in host else host}:{settings['REST_PORT']}/"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            if response.status != 200:
                return f"GET {url} answered {response.status}"
            health = json.loads(response.read())
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return f"GET {url} failed: {exc}"
    if not isinstance(health, dict) or health.get("node_health") == "RED":
        return f"GET {url}: neither Kafka nor Redis is connected ({health!r})"
    return None


def alive_problem(path: str, max_age_s: float, now: float | None = None) -> str | None:
    """Why the loop whose heartbeat renews the file *path* (HEARTBEAT_FILE) is not alive, or None."""
    if not path:
        return "HEARTBEAT_FILE is not set: the process renews no local heartbeat file to check"
    try:
        age_s = (time.time() if now is None else now) - os.stat(path).st_mtime
    except OSError as exc:
        return f"HEARTBEAT_FILE {path}: {exc.strerror or exc} (the process has not beaten yet)"
    if age_s > max_age_s:
        return f"HEARTBEAT_FILE {path} is {age_s:.0f}s old (limit {max_age_s:g}s): the process's loop is stuck"
    return None


def check(component: str, settings: Settings, max_age_s: float | None = None, *, alive: bool = False) -> str | None:
    """Why *component* in this container is unhealthy (with *alive*: not alive), or None; never
    raises for a backend failure."""
    limit = 3 * settings.getfloat("HEARTBEAT_INTERVAL") if max_age_s is None else max_age_s
    if alive:
        return alive_problem(settings["HEARTBEAT_FILE"], limit)
    if component == HTTP_CHECKED:
        return rest_problem(settings)
    client = redis_from_settings(settings)
    try:
        return heartbeat_problem(
            client,
            keys_from_settings(settings),
            component,
            settings.node_name,
            settings.getfloat("HEARTBEAT_TIMEOUT"),
            limit,
        )
    except RedisError as exc:
        return f"cannot read heartbeats from Redis ({exc}); check REDIS_URL"
    finally:
        client.close()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Health check of one crawlhive component in this container.")
    parser.add_argument("component", choices=list(heartbeat_components()))  # the registry's, in order
    parser.add_argument(
        "--alive", action="store_true", help="check the local HEARTBEAT_FILE only (liveness), not the backends"
    )
    parser.add_argument(
        "--max-age", type=float, default=None, metavar="SECONDS", help="oldest acceptable heartbeat (3 x interval)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Print ``healthy: …`` and return 0, or print ``unhealthy: <reason>`` and return 1."""
    args = build_parser().parse_args(argv)
    try:
        problem = check(args.component, load_settings(), args.max_age, alive=args.alive)
    except CrawlhiveError as exc:  # a bad setting: the component itself would not start either
        problem = str(exc)
    if problem is not None:
        print(f"unhealthy: {problem}")
        return 1
    print(f"healthy: {args.component}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
