"""Docker for the container tier: the engine, the images, a compose deployment on loopback.

Network rule: the engine runs with ``--bridge=none --iptables=false`` and every container on the
host's network (docker/compose.test.yml), so no traffic ever goes to Docker's private-range bridge
addresses. No registry image is pulled: the base is python:3.11-slim when it is already on the
machine, else a Debian base built here (docker/base-image.sh); Kafka and Redis are stand-ins built
here (tests/containers/standins/). Docker's layer cache keeps every later build to seconds.
"""

from __future__ import annotations

import os
import random
import re
import secrets
import shlex
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import pytest

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILES = ["-f", str(REPO / "docker" / "docker-compose.yml"), "-f", str(REPO / "docker" / "compose.test.yml")]
DOCKERD_LOG = Path("/tmp/crawlhive-dockerd.log")
#: The engine this process started, with its log file (left running on purpose).
_STARTED: list[tuple[subprocess.Popen[bytes], IO[str]]] = []
BUILD_LOG = Path("/tmp/crawlhive-images.log")
LOCAL_BASE = "crawlhive-base:bookworm"


#: How the README's compose commands start; the tier runs them with its override added.
README_COMPOSE = "docker compose -f docker/docker-compose.yml "
#: Services of the README's commands that the tier leaves out: no registry image can be pulled here
#: and Debian packages none (docker/compose.test.yml).
NOT_RUN_HERE = {"grafana"}


def readme_docker_steps() -> list[str]:
    """The commands of README.md's "Run it on Docker", in order (the tier runs each of them)."""
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Run it on Docker", 1)[1].split("\n## ", 1)[0]
    block = re.findall(r"```sh\n(.*?)```", section, flags=re.S)[0]
    return [line.split("  #", 1)[0].strip() for line in block.splitlines() if line.strip() and not line.startswith("#")]


def run(*args: str, timeout: float = 120, env: dict[str, str] | None = None, check: bool = True) -> str:
    done = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, env=env)
    if check and done.returncode != 0:
        raise AssertionError(
            f"{' '.join(args)} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    return done.stdout


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_cluster_port() -> int:
    """A free port P <= 55535 whose cluster bus port P + 10000 is free too (Redis Cluster's rule)."""
    for _ in range(1000):
        port = random.randint(20000, 45000)
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", port))
                b.bind(("127.0.0.1", port + 10000))
        except OSError:
            continue
        return port
    raise AssertionError("no free port pair for a Redis Cluster node")


@dataclass
class Engine:
    """A reachable Docker engine and a client that can build with BuildKit."""

    docker: str
    build_docker: str

    @classmethod
    def ensure(cls) -> Engine:
        docker = shutil.which("docker") or "/usr/bin/docker"
        if subprocess.run([docker, "info"], capture_output=True, timeout=30).returncode != 0:
            cls._start_engine()
            docker = shutil.which("docker") or "/usr/bin/docker"
        return cls(docker=docker, build_docker=cls._build_client(docker))

    @staticmethod
    def _start_engine() -> None:
        """Starts dockerd without a bridge (its log in /tmp/crawlhive-dockerd.log); fails loudly
        when there is none to start and no way to install Debian's docker.io."""
        if not shutil.which("dockerd"):
            if os.geteuid() != 0 or not shutil.which("apt-get"):
                pytest.fail(
                    "the container tier needs a Docker engine: none runs, and without root and apt-get "
                    "none can be installed (docker/README.md, 'The container tier')"
                )
            env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
            for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "docker.io"]):
                subprocess.run(command, capture_output=True, timeout=600, env=env, check=False)
            if not shutil.which("dockerd"):
                pytest.fail("the container tier needs a Docker engine: installing Debian's docker.io failed")
        log = DOCKERD_LOG.open("a")
        engine = subprocess.Popen(
            ["dockerd", "--bridge=none", "--iptables=false", "--ip6tables=false"],
            stdout=log,
            stderr=log,
            start_new_session=True,  # outlives the tests: its cache serves the next run
        )
        # Held for the life of the test process: dropped, a running Popen (and its open log) is a
        # ResourceWarning, which pytest turns into an error of whatever test set-up collects it.
        _STARTED.append((engine, log))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0:
                return
            time.sleep(1)
        pytest.fail(f"dockerd did not come up in 60 s; its log:\n{DOCKERD_LOG.read_text()[-3000:]}")

    @staticmethod
    def _build_client(docker: str) -> str:
        """A client whose `docker build` uses BuildKit (the Dockerfile's secret mounts and per-file
        ignore list need it): one with the buildx plugin, or Debian's 20.10 client, built in."""
        for candidate in (docker, "/usr/bin/docker"):
            if not os.path.exists(candidate) and not shutil.which(candidate):
                continue
            if subprocess.run([candidate, "buildx", "version"], capture_output=True, timeout=30).returncode == 0:
                return candidate
            version = run(candidate, "version", "--format", "{{.Client.Version}}", check=False).strip()
            if version and version.split(".")[0].isdigit() and int(version.split(".")[0]) < 23:
                return candidate
        pytest.fail(f"no Docker client here can build with BuildKit ({docker} lacks buildx); install docker-buildx")


def built_images(engine: Engine) -> str:
    """`make images` on a base image this machine has, then the stand-ins; returns the base image."""
    base = os.environ.get("CRAWLHIVE_BASE_IMAGE", "")
    if not base:
        present = subprocess.run([engine.docker, "image", "inspect", "python:3.11-slim"], capture_output=True)
        base = "python:3.11-slim" if present.returncode == 0 else LOCAL_BASE
    readme = readme_docker_steps()
    assert readme[0] == "sh docker/base-image.sh" and readme[1] == f"make images BASE_IMAGE={LOCAL_BASE}", readme
    with BUILD_LOG.open("w") as log:
        steps = []
        if base == LOCAL_BASE:  # the README's first two commands, as written (plus the build client)
            steps.append(shlex.split(readme[0]))
        steps.append([*shlex.split(readme[1].replace(LOCAL_BASE, base)), f"DOCKER={engine.build_docker}"])
        standins = str(REPO / "tests" / "containers" / "standins")
        for target in ("redis", "prometheus", "broker"):
            steps.append(
                [
                    engine.build_docker,
                    "build",
                    "--network",
                    "host",
                    "--build-arg",
                    f"BASE_IMAGE={base}",
                    "--target",
                    target,
                    "-t",
                    f"crawlhive-test-{target}:bookworm",
                    standins,
                ]
            )
        for step in steps:
            log.write(f"$ {' '.join(step)}\n")
            log.flush()
            env = {**os.environ, "DOCKER_BUILDKIT": "1"}
            done = subprocess.run(step, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, timeout=1800, env=env)
            if done.returncode != 0:
                log.close()
                pytest.fail(f"{' '.join(step)} failed; the log ({BUILD_LOG}):\n{BUILD_LOG.read_text()[-4000:]}")
    return base


@dataclass
class Deployment:
    """docker/docker-compose.yml with docker/compose.test.yml, as a compose project of its own."""

    project: str
    profiles: list[str] = field(default_factory=list)
    extra_env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.ports = {name: free_port() for name in ("CH_REDIS_PORT", "CH_BROKER_PORT", "CH_REST_PORT", "CH_PROM_PORT")}
        nodes: set[int] = set()
        while len(nodes) < 6:
            nodes.add(free_cluster_port())
        self.ports.update({f"CH_NODE_PORT_{i}": port for i, port in enumerate(sorted(nodes), 1)})
        self.compose = str(Path(sys.executable).parent / "docker-compose")
        #: Compose's Redis requires one (docker-compose.yml); every component gets it in REDIS_URL.
        self.redis_password = secrets.token_hex(16)

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("REDIS_", "KAFKA_", "CRAWLHIVE_"))}
        env.update({name: str(port) for name, port in self.ports.items()})
        env.update(
            {
                "CRAWLHIVE_REDIS_URL": self.redis_url,
                "KAFKA_TOPIC_PREFIX": self.project,
                "REDIS_PASSWORD": self.redis_password,
            }
        )
        env.update(self.extra_env)
        return env

    @property
    def redis_url(self) -> str:
        auth = f":{self.redis_password}@"
        if "redis-cluster" in self.profiles:
            return ",".join(f"redis://{auth}127.0.0.1:{self.ports[f'CH_NODE_PORT_{i}']}" for i in (1, 2, 3))
        return f"redis://{auth}127.0.0.1:{self.ports['CH_REDIS_PORT']}/0"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.ports['CH_BROKER_PORT']}"

    def __call__(self, *args: str, timeout: float = 300) -> str:
        profiles = [word for p in self.profiles for word in ("--profile", p)]
        return run(self.compose, "-p", self.project, *COMPOSE_FILES, *profiles, *args, timeout=timeout, env=self.env)

    def readme(self, command: str, timeout: float = 300) -> str:
        """One of the README's compose commands, on this deployment (its override, project, ports)."""
        assert command.startswith(README_COMPOSE), command
        args = [word for word in shlex.split(command[len(README_COMPOSE) :]) if word not in NOT_RUN_HERE]
        return self(*args, timeout=timeout)

    def containers(self, service: str) -> list[str]:
        return self("ps", "-q", service).split()

    def logs(self, tail: int = 40) -> str:
        try:
            return self("logs", "--no-color", "--tail", str(tail), timeout=60)
        except (AssertionError, subprocess.TimeoutExpired) as exc:
            return f"(no logs: {exc})"

    def down(self) -> None:
        """The README's last command (`down`), with every profile this tier may have started; then
        anything of the project still there is removed."""
        profiles = ("--profile", "monitoring", "--profile", "sink")
        self(*profiles, "down", "-v", "--timeout", "10", "--remove-orphans", timeout=180)
        label = f"label=com.docker.compose.project={self.project}"
        left = run("docker", "ps", "-aq", "--filter", label, check=False).split()
        if left:
            run("docker", "rm", "-f", "-v", *left, check=False)
