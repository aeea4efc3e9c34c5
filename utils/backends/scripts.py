"""Every Lua script crawlhive runs on Redis, loaded from ``utils/backends/lua/`` and registered in one place.

A script is a file ``utils/backends/lua/<name>.lua`` whose header lists its KEYS and ARGV. Helpers shared by
several scripts (time formatting, the throttle rule, lease renewal and ending, the queue score)
live in ``utils/backends/lua/lib/``; a script pulls one in with a line ``--! include lib/<file>.lua``, which
is replaced by that file's text (recursively, each file at most once, in order of first mention).

:func:`scripts` gives the scripts of one Redis client, registered once per client (sync or
asyncio). Calling a script handles ``NOSCRIPT`` itself (redis-py loads it and retries); code that
queues ``EVALSHA`` on a pipeline without redis-py's existence check (the crawler's hot path) runs
that pipeline through :meth:`ScriptSet.execute`, which loads every script and retries once when
Redis lost them (a restart or ``SCRIPT FLUSH``). The crawler's asyncio batcher, which must resend
only the calls that failed, does the same per call with :meth:`ScriptSet.load_async`.
"""

from __future__ import annotations

import functools
import re
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from redis.cluster import ClusterPipeline
from redis.exceptions import NoScriptError

if TYPE_CHECKING:
    from redis.commands.core import Script

    from crawlhive.utils.backends.redis_types import RedisPipeline

#: Folder of the scripts (package data: shipped with the code).
LUA_DIR = Path(__file__).with_name("lua")
_INCLUDE = re.compile(r"^--! include (\S+)[ \t]*$", re.M)


def names() -> list[str]:
    """The name of every script (``lua/*.lua``, libraries excluded)."""
    return sorted(path.stem for path in LUA_DIR.glob("*.lua"))


@functools.cache
def source(name: str) -> str:
    """The text of script *name* with its ``--! include`` lines expanded.

    Raises:
        FileNotFoundError: no such script or included file.
    """
    seen: set[str] = set()

    def expand(relative: str) -> str:
        seen.add(relative)
        text = (LUA_DIR / relative).read_text()

        def include(match: re.Match[str]) -> str:
            wanted = match.group(1)
            return "" if wanted in seen else expand(wanted)

        return _INCLUDE.sub(include, text)

    return expand(f"{name}.lua")


class ScriptSet:
    """The scripts of one Redis client, each registered (``register_script``) on first use.

    ``scripts(redis)["lease_ack"](keys=..., args=...)`` runs a script; :meth:`queue` queues it on a
    pipeline that :meth:`execute` runs.
    """

    def __init__(self, redis: Any) -> None:
        self._redis = weakref.ref(redis)
        self._registered: dict[str, Any] = {}
        self._by_sha: dict[str, str] | None = None

    def __getitem__(self, name: str) -> Script:
        script: Script | None = self._registered.get(name)
        if script is None:
            redis = self._redis()
            if redis is None:
                raise RuntimeError("the Redis client of this ScriptSet is gone")
            script = self._registered[name] = redis.register_script(source(name))
        return script

    def sha(self, name: str) -> str:
        """The SHA1 of script *name*, for ``EVALSHA``."""
        return str(self[name].sha)

    def name_of(self, sha: str) -> str | None:
        """The name of the script whose SHA1 is *sha* (None: none of ours), e.g. to send again as a
        script call an ``EVALSHA`` that code queued on a pipeline."""
        if self._by_sha is None:
            self._by_sha = {self.sha(name): name for name in names()}
        return self._by_sha.get(sha)

    def queue(self, pipe: RedisPipeline, name: str, keys: Sequence[Any], args: Sequence[Any]) -> None:
        """Queue ``EVALSHA`` of *name* on *pipe* without an existence check; run the pipe with
        :meth:`execute` so that a ``NOSCRIPT`` reply is handled.

        Queued as a raw command, not with ``pipe.evalsha``: redis-py refuses that method on a
        Redis Cluster pipeline, whereas the command is routed by its first key like any other
        (a test runs it on a local cluster).

        On a cluster pipeline the call names its node (the primary of its first key's slot): redis-py
        8's blocking cluster pipeline otherwise asks a node ``COMMAND GETKEYS`` for every ``EVALSHA``
        it routes, one round trip per script call (its asyncio pipeline and a lone call read the keys
        from the arguments). A ``MOVED`` reply still re-routes the call as redis-py does for any."""
        options: dict[str, Any] = {}
        if keys and isinstance(pipe, ClusterPipeline):
            options["target_nodes"] = pipe.nodes_manager.get_node_from_slot(pipe.keyslot(keys[0]))
        pipe.execute_command("EVALSHA", self.sha(name), len(keys), *keys, *args, **options)  # type: ignore[no-untyped-call]  # redis-py leaves ClusterPipeline.execute_command unannotated

    def load(self) -> None:
        """Load every script into Redis (idempotent; one round trip each)."""
        redis = self._redis()
        if redis is None:
            raise RuntimeError("the Redis client of this ScriptSet is gone")
        for name in names():
            redis.script_load(source(name))

    async def load_async(self, name: str) -> None:
        """Load script *name* through an asyncio client (this set's client must be one)."""
        redis = self._redis()
        if redis is None:
            raise RuntimeError("the Redis client of this ScriptSet is gone")
        await redis.script_load(source(name))

    def execute(self, build: Callable[[], RedisPipeline]) -> list[Any]:
        """Run the pipeline *build* returns; when Redis lost the scripts (``NOSCRIPT``), load them
        all and run a freshly built pipeline once more. The pipeline's other commands ran the first
        time (``NOSCRIPT`` is an error of its own command only, even in a ``MULTI``), so they must
        be idempotent; the scripts that failed did not run."""
        try:
            return list(build().execute())
        except NoScriptError:
            self.load()
            return list(build().execute())


_SETS: weakref.WeakKeyDictionary[Any, ScriptSet] = weakref.WeakKeyDictionary()


def scripts(redis: Any) -> ScriptSet:
    """The :class:`ScriptSet` of *redis* (a ``redis.Redis`` or ``redis.asyncio.Redis``), one per client."""
    found = _SETS.get(redis)
    if found is None:
        found = _SETS[redis] = ScriptSet(redis)
    return found


__all__ = ["LUA_DIR", "ScriptSet", "names", "scripts", "source"]
