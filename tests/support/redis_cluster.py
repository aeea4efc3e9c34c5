"""A local Redis Cluster for the tests: real ``redis-server --cluster-enabled yes`` nodes on free
loopback ports, joined with CLUSTER MEET / ADDSLOTS / REPLICATE (no ``redis-cli`` needed).

``LocalCluster(primaries=3, replicas=1)`` starts 3 primaries that share the 16,384 slots evenly and
one replica of each; :meth:`LocalCluster.kill` SIGKILLs a node (its replica is promoted after
``node_timeout_ms``), :meth:`LocalCluster.restart` starts it again on its port with its node file,
so it rejoins (as a replica of its promoted former replica), as a supervisor would.
"""

from __future__ import annotations

import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from crawlhive.app.binaries import find_redis_server

SLOTS = 16384
#: A node's cluster bus listens on its port + 10,000, so node ports come from below the
#: ephemeral range (where ``free_port`` finds ports) and must leave port + 10,000 free as well.
PORT_RANGE = (16000, 26000)


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


#: Ports handed out in this process: a node's port is free until its server binds it, so a
#: second draw before that could return it again (two nodes sharing one working directory).
_handed_out: set[int] = set()


def free_cluster_port() -> int:
    """A loopback port whose cluster bus port (+10,000) is free too, never one handed out before."""
    for _ in range(1000):
        port = random.randrange(*PORT_RANGE)
        if port not in _handed_out and _free(port) and _free(port + 10000):
            _handed_out.add(port)
            return port
    raise RuntimeError("no free port pair for a Redis Cluster node")


@dataclass
class Node:
    port: int
    workdir: Path
    process: subprocess.Popen[bytes] | None = None
    node_id: str = ""
    primary_of: list[int] = field(default_factory=list)
    """The slot range ``[first, last]`` it was given (primaries), else empty."""
    _client: redis.Redis | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def client(self) -> redis.Redis:
        """A client of this node alone (one per node, closed by :meth:`LocalCluster.stop`)."""
        if self._client is None:
            self._client = redis.Redis(port=self.port, socket_timeout=5)
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


class LocalCluster:
    """A Redis Cluster of *primaries* primaries with *replicas* replicas each (see module doc)."""

    def __init__(self, primaries: int = 3, replicas: int = 1, node_timeout_ms: int = 1500) -> None:
        self.binary = find_redis_server()
        self.node_timeout_ms = node_timeout_ms
        self.root = Path(tempfile.mkdtemp(prefix="crawlhive-cluster-"))
        self.primaries = [self._new_node() for _ in range(primaries)]
        self.replicas = [self._new_node() for _ in range(primaries * replicas)]
        self.replicas_per_primary = replicas

    def _new_node(self) -> Node:
        port = free_cluster_port()
        workdir = self.root / str(port)
        workdir.mkdir()
        return Node(port, workdir)

    @property
    def nodes(self) -> list[Node]:
        return self.primaries + self.replicas

    @property
    def url(self) -> str:
        """REDIS_URL naming every node (comma-separated seed nodes, contract §18.1)."""
        return ",".join(n.url for n in self.nodes)

    # --- life cycle -------------------------------------------------------------------------------

    def _spawn(self, node: Node) -> None:
        node.process = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(node.port),
                "--bind",
                "127.0.0.1",
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                str(self.node_timeout_ms),
                "--dir",
                str(node.workdir),
                "--save",
                "",
                "--appendonly",
                "no",
                "--protected-mode",
                "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        node.close()  # a restarted node: its old connections are dead
        deadline = time.monotonic() + 10
        while True:  # wait for the port with a plain socket (closed at once), then ask Redis
            try:
                with socket.create_connection(("127.0.0.1", node.port), timeout=0.5):
                    pass
                node.client().ping()
                return
            except (OSError, redis.ConnectionError):
                if time.monotonic() > deadline or node.process.poll() is not None:
                    raise RuntimeError(f"redis-server on port {node.port} did not start") from None
                time.sleep(0.05)

    def start(self) -> LocalCluster:
        """Start every node, assign the slots, join the nodes and attach the replicas; returns
        once every node reports ``cluster_state:ok`` and every replica is in sync (on failure the
        nodes started are stopped)."""
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> LocalCluster:
        for node in self.nodes:
            self._spawn(node)
            node.node_id = node.client().execute_command("CLUSTER MYID").decode()
        per = SLOTS // len(self.primaries)
        for i, node in enumerate(self.primaries):
            first, last = i * per, (SLOTS - 1 if i == len(self.primaries) - 1 else (i + 1) * per - 1)
            node.primary_of = [first, last]
            node.client().execute_command("CLUSTER ADDSLOTS", *range(first, last + 1))
        seed = self.primaries[0].client()
        for node in self.nodes[1:]:
            seed.execute_command("CLUSTER MEET", "127.0.0.1", node.port)
        self._wait(lambda: all(self._known(n) == len(self.nodes) for n in self.nodes), "nodes to meet")
        for i, replica in enumerate(self.replicas):
            primary = self.primaries[i // self.replicas_per_primary]
            replica.client().execute_command("CLUSTER REPLICATE", primary.node_id)
        self._wait(self.healthy, "the cluster to be ok with replicas in sync")
        return self

    def healthy(self) -> bool:
        """Every live node says ``cluster_state:ok``, and every replica's link to its primary is up."""
        for node in self.nodes:
            if node.process is None or node.process.poll() is not None:
                continue
            try:
                client = node.client()
                if client.cluster("info").get("cluster_state") != "ok":
                    return False
                role = client.info("replication")
                if role["role"] == "slave" and role.get("master_link_status") != "up":
                    return False
            except redis.RedisError:
                return False
        return True

    def _known(self, node: Node) -> int:
        return len(node.client().execute_command("CLUSTER NODES"))  # redis-py: {address: node}

    def _wait(self, check: object, what: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if check():  # type: ignore[operator]
                    return
            except redis.RedisError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"local Redis Cluster: timed out waiting for {what}")
            time.sleep(0.1)

    def primary_nodes(self) -> list[Node]:
        """The nodes that are primaries now (a promoted replica included, a killed one not)."""
        out = []
        for node in self.nodes:
            if node.process is None or node.process.poll() is not None:
                continue
            try:
                if node.client().info("replication")["role"] == "master":
                    out.append(node)
            except redis.RedisError:
                continue
        return out

    def kill(self, node: Node) -> None:
        """SIGKILL *node* (no shutdown, no save)."""
        assert node.process is not None
        node.process.send_signal(signal.SIGKILL)
        node.process.wait(10)
        node.close()

    def restart(self, node: Node) -> None:
        """Start a killed *node* again on its port with its node file (it rejoins the cluster)."""
        self._spawn(node)

    def wait_failover(self, dead: Node, timeout: float = 30.0) -> None:
        """Wait until a replica of the killed *dead* primary has been promoted (as many live
        primaries as the cluster was built with)."""
        assert dead.process is not None and dead.process.poll() is not None, "kill the node first"
        self._wait(lambda: len(self.primary_nodes()) == len(self.primaries), "a replica to be promoted", timeout)

    def wait_healthy(self, timeout: float = 30.0) -> None:
        self._wait(self.healthy, "the cluster to be ok", timeout)

    def stop(self) -> None:
        for node in self.nodes:
            node.close()
            if node.process is not None and node.process.poll() is None:
                node.process.kill()
                node.process.wait(10)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
