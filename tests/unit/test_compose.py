"""docker/: the compose file, the Dockerfile and the container health check, checked statically.

No Docker engine runs here, so the compose file is never started by the tests. Instead every
crawlhive service's command must parse with the real CLI parser, every environment variable must be
a declared setting (or an accepted alias) whose value parses, and the deployment properties the
issue asks for are asserted: Kafka in KRaft mode without ZooKeeper, Redis with AOF, a scalable
crawler, health checks, an image built from requirements.lock whose entrypoint is ``crawlhive``.
The health check script itself runs against the real test Redis.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import shlex
import threading
import tomllib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path, PurePosixPath
from types import ModuleType
from typing import Any

import pytest
import redis
import yaml

from crawlhive.app.cli import build_parser
from crawlhive.utils.backends.keys import Keys
from crawlhive.utils.backends.redis_clients import keys_from_settings, redis_urls
from crawlhive.utils.config.settings import ALIASES, DECLARED, REDIS_PARTS, Settings, load_settings, parse_value
from crawlhive.utils.process.kinds import kinds
from crawlhive.utils.state.heartbeat import Heartbeat, new_node_id

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
COMPOSE_FILE = DOCKER / "docker-compose.yml"
DOCKERFILE = DOCKER / "Dockerfile"
IMAGE = "crawlhive"
#: The long-running component of each crawlhive service (its first command word).
#: (From the registry of process kinds: each kind names its compose services.)
COMPONENT_SERVICES = {service: kind.name for kind in kinds() for service in kind.compose}


# --- loading -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE_FILE.read_text())  # safe_load resolves the `<<:` merge keys
    assert isinstance(data, dict) and isinstance(data.get("services"), dict)
    return data


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


def crawlhive_services(services: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The services that run a crawlhive image (``crawlhive``, or ``crawlhive-render`` with the browser)."""
    return {
        name: s for name, s in services.items() if str(s.get("image", "")).split(":")[0] in (IMAGE, f"{IMAGE}-render")
    }


_VAR = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<default>[^}$]*))?\}")
#: The variables every compose command needs (docker/README.md): Redis's password.
PASSWORD = "pw-of-the-compose-test"
COMPOSE_ENV = {"REDIS_PASSWORD": PASSWORD}


def interpolate(value: str, environ: dict[str, str] | None = None) -> str:
    """*value* as Compose interpolates it from *environ* (default: COMPOSE_ENV), nested defaults
    (``${A:-x${B}y}``) and required variables (``${A:?message}``, a missing one an AssertionError)."""
    env = COMPOSE_ENV if environ is None else environ

    def replace(match: re.Match[str]) -> str:
        name, op, default = match.group("name"), match.group("op"), match.group("default") or ""
        if op == ":-":
            return env.get(name) or default
        if op == "-":
            return env.get(name, default)
        if op in (":?", "?"):
            if not (env.get(name) if op == ":?" else name in env):
                raise AssertionError(f"required variable {name} is missing a value: {default}")
            return env[name]
        return env.get(name, "")

    escaped = "\0"  # `$$` is a literal `$`, never the start of a variable
    text, previous = value.replace("$$", escaped), None
    while text != previous:  # the innermost variables first
        previous, text = text, _VAR.sub(replace, text)
    return text.replace(escaped, "$")


def environment(service: dict[str, Any]) -> dict[str, str]:
    """The service's environment as its container sees it (list or mapping form, interpolated)."""
    raw = service.get("environment") or {}
    if isinstance(raw, list):
        raw = dict(item.split("=", 1) if "=" in item else (item, "") for item in raw)
    out = {}
    for name, value in raw.items():
        # Compose accepts strings and numbers; booleans (yes/true unquoted) are rejected by it.
        assert not isinstance(value, bool), f"{name}: quote boolean values, Compose rejects YAML booleans"
        assert value is None or isinstance(value, str | int | float), f"{name}: unsupported value {value!r}"
        out[name] = "" if value is None else interpolate(str(value))
    return out


def command(service: dict[str, Any]) -> list[str]:
    cmd = service.get("command")
    return shlex.split(cmd) if isinstance(cmd, str) else [str(part) for part in cmd or []]


def healthcheck_argv(service: dict[str, Any]) -> list[str]:
    test = service["healthcheck"]["test"]
    if isinstance(test, str):
        return shlex.split(test)
    kind, *rest = test
    return shlex.split(rest[0]) if kind == "CMD-SHELL" else list(rest)


# --- the compose file ----------------------------------------------------------------------------


def test_every_component_has_its_service(services: dict[str, dict[str, Any]]) -> None:
    assert {"kafka", "redis", *COMPONENT_SERVICES} <= set(services)
    ours = crawlhive_services(services)
    assert set(COMPONENT_SERVICES) <= set(ours)
    images = {s["image"] for name, s in ours.items() if name != "crawler-render"}
    assert len(images) == 1, f"one image for every component, got {images}"
    # Rendering crawlers: the same Dockerfile's `render` stage (the browser), an image of its own.
    assert ours["crawler-render"]["build"]["target"] == "render"
    assert ours["crawler-render"]["image"] not in images
    assert "--render" in ours["crawler-render"]["command"]
    for name, service in ours.items():
        assert service["build"]["dockerfile"] == "docker/Dockerfile", name
        assert (COMPOSE_FILE.parent / service["build"]["context"]).resolve() == ROOT, name


def test_commands_are_valid_crawlhive_invocations(
    services: dict[str, dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, service in crawlhive_services(services).items():
        argv = command(service)
        assert argv, f"{name}: no command (the image's default is --help)"
        if argv == ["--help"]:  # the one-off tools service
            assert "profiles" in service, f"{name}: a --help service must not start with `up`"
            with pytest.raises(SystemExit) as exc:
                parser.parse_args(argv)
            assert exc.value.code == 0
            capsys.readouterr()
            continue
        assert argv[0] in sub.choices, f"{name}: unknown subcommand {argv[0]!r}"
        parser.parse_args(argv)  # argparse exits (failing the test) on a bad option
        if name in COMPONENT_SERVICES:
            assert argv[0] == COMPONENT_SERVICES[name], f"{name} runs {argv[0]}"


def test_environment_names_are_settings_and_values_parse(services: dict[str, dict[str, Any]]) -> None:
    for name, service in crawlhive_services(services).items():
        env = environment(service)
        assert env, f"{name}: configured only through environment variables, but has none"
        for var, value in env.items():
            assert var in DECLARED or var in ALIASES or var in REDIS_PARTS, f"{name}: {var} is not a crawlhive setting"
            if value == "" or var in REDIS_PARTS:  # empty = not set (docs/contract.md §8.1)
                continue
            setting = ALIASES.get(var, var)
            parse_value(setting, DECLARED[setting][0], value)  # raises SettingsError naming the setting
        # And the whole environment resolves the way the component will resolve it.
        settings = load_settings(environ=env)
        assert settings.source("REDIS_URL") == "env"
        assert settings.source("KAFKA_BOOTSTRAP_SERVERS") == "env"


def test_components_reach_the_backends_by_service_name(services: dict[str, dict[str, Any]]) -> None:
    kafka_listener = environment(services["kafka"])["KAFKA_ADVERTISED_LISTENERS"]
    advertised = {entry.split("://", 1)[1] for entry in kafka_listener.split(",")}
    for name, service in crawlhive_services(services).items():
        settings = load_settings(environ=environment(service))
        assert re.fullmatch(rf"redis://:{PASSWORD}@redis:6379/\d+", settings["REDIS_URL"]), name
        assert set(settings["KAFKA_BOOTSTRAP_SERVERS"]) <= advertised, name
        depends = service.get("depends_on") or {}
        for backend in ("redis", "kafka"):
            assert depends.get(backend, {}).get("condition") == "service_healthy", f"{name} -> {backend}"


def test_crawler_is_scalable(services: dict[str, dict[str, Any]]) -> None:
    crawler = services["crawler"]
    for key in ("container_name", "ports", "hostname"):
        assert key not in crawler, f"crawler has {key}: `--scale crawler=N` would clash"
    assert "CRAWLER_NODE_NAME" not in environment(crawler), "replicas would share one node name"


def test_rest_publishes_its_port(services: dict[str, dict[str, Any]]) -> None:
    rest = services["rest"]
    port = load_settings(environ=environment(rest))["REST_PORT"]
    assert port == 5343
    assert any(str(p).split(":")[-1] == str(port) for p in rest["ports"])


def test_rest_without_a_key_is_published_on_the_host_loopback_only(services: dict[str, dict[str, Any]]) -> None:
    from crawlhive.rest.server import check_exposure

    rest = services["rest"]
    settings = load_settings(environ=environment(rest))
    check_exposure(settings)  # `crawlhive rest` in the container starts (docs/contract.md §10.1)
    assert settings["REST_API_KEY"] == ""  # compose's default
    assert all(str(p).startswith("127.0.0.1:") for p in rest["ports"]), rest["ports"]


def test_redis_persists_with_aof(services: dict[str, dict[str, Any]]) -> None:
    redis_service = services["redis"]
    argv = command(redis_service)
    assert argv[0] == "redis-server"
    assert argv[argv.index("--appendonly") + 1] == "yes"
    assert "--maxmemory-policy" not in argv or argv[argv.index("--maxmemory-policy") + 1] == "noeviction"
    assert any(str(v).split(":")[1] == "/data" for v in redis_service["volumes"]), "AOF needs a volume on /data"


def redis_bytes(size: str) -> int:
    """Bytes of a Redis memory size (``2gb``, ``512mb``, ``1g``, ``1000000``), as redis.conf reads it."""
    units = {"": 1, "k": 1000, "kb": 1024, "m": 1000**2, "mb": 1024**2, "g": 1000**3, "gb": 1024**3}
    match = re.fullmatch(r"(\d+)([a-z]*)", size.strip().lower())
    assert match and match.group(2) in units, f"not a Redis memory size: {size!r}"
    return int(match.group(1)) * units[match.group(2)]


def test_redis_has_a_maxmemory_and_never_evicts(services: dict[str, dict[str, Any]]) -> None:
    """Without maxmemory the out-of-memory guard (writes refused, work dead-lettered with a message
    naming maxmemory) never fires: Redis grows until the host swaps or the kernel kills it."""
    argv = command(services["redis"])
    assert argv[argv.index("--maxmemory-policy") + 1] == "noeviction"
    raw = argv[argv.index("--maxmemory") + 1]
    assert redis_bytes(interpolate(raw)) == 2 * 1024**3  # the default, documented in docs/operations.md
    assert interpolate(raw, {"CRAWLHIVE_REDIS_MAXMEMORY": "8gb"}) == "8gb"  # an operator sizes it


def test_kafka_runs_kraft_without_zookeeper(services: dict[str, dict[str, Any]]) -> None:
    assert not any(
        "zookeeper" in name.lower() or "zookeeper" in str(s.get("image", "")) for name, s in services.items()
    )
    kafka = services["kafka"]
    assert str(kafka["image"]).startswith("apache/kafka:")
    env = environment(kafka)
    assert not any("ZOOKEEPER" in var for var in env)
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"]
    assert any(str(v).endswith(f":{env['KAFKA_LOG_DIRS']}") for v in kafka["volumes"])


def test_every_long_running_service_has_a_health_check(
    services: dict[str, dict[str, Any]], healthcheck: ModuleType
) -> None:
    dockerfile_path = healthcheck_path_in_image()
    for name, service in services.items():
        if "profiles" in service:
            continue
        assert "healthcheck" in service, f"{name} has no health check"
        argv = healthcheck_argv(service)
        assert argv, name
        if name in COMPONENT_SERVICES:
            assert argv[:2] == ["python", dockerfile_path], f"{name}: {argv}"
            assert argv[2] == COMPONENT_SERVICES[name], f"{name} checks {argv[2]}"
            healthcheck.build_parser().parse_args(argv[2:])
    assert healthcheck_argv(services["redis"])[:2] == ["redis-cli", "ping"]
    assert healthcheck_argv(services["kafka"])[0].startswith("/opt/kafka/bin/")


# --- the Dockerfile ------------------------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of docker/Dockerfile, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def healthcheck_path_in_image() -> str:
    """Where the Dockerfile puts docker/healthcheck.py (its COPY destination under WORKDIR)."""
    workdir = PurePosixPath("/")
    for word, args in dockerfile_instructions():
        if word == "WORKDIR":
            workdir = workdir / args
        elif word == "COPY" and args.split()[0] == "docker/healthcheck.py":
            return str(workdir / args.split()[1])
    raise AssertionError("the Dockerfile does not copy docker/healthcheck.py")


def test_dockerfile_builds_from_requirements_and_runs_crawlhive() -> None:
    steps = dockerfile_instructions()
    assert steps[0] == ("ARG", "BASE_IMAGE=python:3.11-slim"), "the base image is a build argument"
    assert steps[1] == ("FROM", "${BASE_IMAGE} AS base")
    stages = [args for word, args in steps if word == "FROM"]
    assert stages[-1] == "base AS plain", "the default target is the image without a browser"
    assert "base AS render" in stages
    copies = [args.split() for word, args in steps if word == "COPY"]
    runs = [args for word, args in steps if word == "RUN"]
    # the runtime's lock with the extra crawlhive[parquet] (requirements-parquet.lock includes requirements.lock)
    assert ["requirements-parquet.lock", "./"] in copies
    assert any(re.search(r"pip install (.* )?--require-hashes -r requirements-parquet\.lock", run) for run in runs)
    assert any(re.search(r"pip wheel (-q )?--no-deps -w /opt/wheels \.", run) for run in runs)  # the package
    for stage in ("plain", "render"):  # both images install the package's wheel
        body = steps[[i for i, (w, a) in enumerate(steps) if w == "FROM" and a.endswith(f"AS {stage}")][0] + 1 :]
        body = body[: next((i for i, (w, _) in enumerate(body) if w == "FROM"), len(body))]
        assert ("COPY", "--from=package /opt/wheels/ /tmp/wheels/") in body, stage
        assert any("pip install -q --no-deps /tmp/wheels/*.whl" in a for w, a in body if w == "RUN"), stage
    assert not any("requirements-dev" in " ".join(c) for c in copies), "test tools do not belong in the image"
    entrypoint = [json.loads(args) for word, args in steps if word == "ENTRYPOINT"]
    assert entrypoint == [["crawlhive"]]
    user = [args for word, args in steps if word == "USER"]
    assert user and user[-1] not in ("root", "0"), "the image must run as a non-root user"
    render = steps[[i for i, (word, args) in enumerate(steps) if word == "FROM" and "AS render" in args][0] :]
    render_runs = " ".join(args for word, args in render if word == "RUN")
    assert "apt-get install" in render_runs and "chromium-headless-shell" in render_runs
    assert "--require-hashes -r /tmp/requirements/requirements-render.lock" in render_runs  # scrapy-playwright, locked


def test_dockerfile_copies_every_package_folder() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    folders = set(pyproject["tool"]["setuptools"]["package-dir"].values())
    copied = {
        args.split()[0].rstrip("/")
        for word, args in dockerfile_instructions()
        if word == "COPY" and not args.startswith("--from=")
    }
    assert folders <= copied, f"not copied into the image: {folders - copied}"
    for source in copied:
        assert (ROOT / source).exists(), f"COPY {source}: no such file"
    ignore = (DOCKER / "Dockerfile.dockerignore").read_text().splitlines()
    for source in copied:  # re-included after the leading `*`
        assert f"!{source}" in ignore or f"!{source}/" in ignore, f"{source} is excluded from the build context"


# --- the health check script ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def healthcheck() -> ModuleType:
    spec = importlib.util.spec_from_file_location("crawlhive_docker_healthcheck", DOCKER / "healthcheck.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def keys(redis_settings: Settings) -> Keys:
    return keys_from_settings(redis_settings)


def test_heartbeat_of_this_host_and_a_live_pid_is_healthy(
    healthcheck: ModuleType, redis_client: redis.Redis, keys: Keys
) -> None:
    assert healthcheck.heartbeat_problem(redis_client, keys, "crawler", "box-1", 120.0, 30.0) is not None
    Heartbeat(redis_client, keys, "crawler", new_node_id(), "box-1", 120.0).beat()  # pid = this process
    assert healthcheck.heartbeat_problem(redis_client, keys, "crawler", "box-1", 120.0, 30.0) is None
    other_host = healthcheck.heartbeat_problem(redis_client, keys, "crawler", "box-2", 120.0, 30.0)
    assert other_host == "no live crawler heartbeat from host 'box-2'"
    dead_pid = healthcheck.heartbeat_problem(redis_client, keys, "crawler", "box-1", 120.0, 30.0, alive=lambda _: False)
    assert dead_pid is not None
    assert healthcheck.heartbeat_problem(redis_client, keys, "kafka-monitor", "box-1", 120.0, 30.0) is not None


def test_stale_heartbeat_is_unhealthy(healthcheck: ModuleType, redis_client: redis.Redis, keys: Keys) -> None:
    beat = Heartbeat(redis_client, keys, "redis-monitor", new_node_id(), "box-1", 120.0)
    beat.beat()
    redis_client.pexpire(beat.key, 60_000)  # as if the last beat was 60 s ago
    problem = healthcheck.heartbeat_problem(redis_client, keys, "redis-monitor", "box-1", 120.0, 30.0)
    assert problem is not None and "s old (limit 30s)" in problem
    assert healthcheck.heartbeat_problem(redis_client, keys, "redis-monitor", "box-1", 120.0, 90.0) is None


def test_check_reads_settings_and_reports_unreachable_redis(
    healthcheck: ModuleType, redis_settings: Settings, redis_client: redis.Redis, keys: Keys
) -> None:
    Heartbeat(redis_client, keys, "kafka-monitor", new_node_id(), redis_settings.node_name, 120.0).beat()
    assert healthcheck.check("kafka-monitor", redis_settings) is None
    unreachable = redis_settings.copy_with(REDIS_URL="redis://127.0.0.1:1/0")
    problem = healthcheck.check("kafka-monitor", unreachable)
    assert problem is not None and "REDIS_URL" in problem


class _HealthHandler(BaseHTTPRequestHandler):
    """Answers ``GET /`` with the server's ``health`` attribute, like the REST service's ``/``."""

    def do_GET(self) -> None:
        data = json.dumps(self.server.health).encode()  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (http.server's signature)
        pass


@pytest.fixture
def fake_rest() -> Iterator[HTTPServer]:
    server = HTTPServer(("127.0.0.1", 0), _HealthHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_rest_check_uses_get_root(healthcheck: ModuleType, fake_rest: HTTPServer) -> None:
    settings = Settings.from_overrides(REST_HOST="0.0.0.0", REST_PORT=fake_rest.server_address[1])
    fake_rest.health = {"kafka_connected": True, "redis_connected": False, "node_health": "YELLOW"}  # type: ignore[attr-defined]
    assert healthcheck.check("rest", settings) is None
    fake_rest.health = {"kafka_connected": False, "redis_connected": False, "node_health": "RED"}  # type: ignore[attr-defined]
    assert "neither Kafka nor Redis" in healthcheck.check("rest", settings)
    closed = Settings.from_overrides(REST_PORT=1)
    assert healthcheck.check("rest", closed).startswith("GET http://127.0.0.1:1/ failed")


def test_main_exit_codes(healthcheck: ModuleType, capsys: pytest.CaptureFixture[str], monkeypatch: Any) -> None:
    monkeypatch.setenv("REST_PORT", "1")
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:1/0")
    assert healthcheck.main(["rest"]) == 1
    assert healthcheck.main(["crawler"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("unhealthy: GET http://127.0.0.1:1/") and "REDIS_URL" in out[1]
    monkeypatch.setenv("QUEUE_HITS", "ten")
    assert healthcheck.main(["crawler"]) == 1
    assert "QUEUE_HITS: expected an integer, got 'ten'" in capsys.readouterr().out


def test_the_spider_example_override_mounts_a_module_the_crawler_can_load(services: dict[str, dict[str, Any]]) -> None:
    """examples/quotes/compose.override.yml (docs/spiders.md, "Deploying"): merged over the
    crawler service, its command parses, its variables are settings, and the mounted path exists
    relative to docker/ (the project directory) and holds the spider module SPIDER_MODULES names."""
    override = yaml.safe_load((ROOT / "examples" / "quotes" / "compose.override.yml").read_text())
    crawler = {**services["crawler"], **override["services"]["crawler"]}
    argv = command(crawler)
    assert argv == ["crawler", "--spider", "quotes"]
    build_parser().parse_args(argv)
    env = {**environment(services["crawler"]), **override["services"]["crawler"]["environment"]}
    settings = load_settings(environ=env)
    (mount,) = crawler["volumes"]
    source, target, _mode = mount.split(":")
    module_dir = (COMPOSE_FILE.parent / source).resolve()
    assert module_dir.is_dir() and (module_dir / "spiders.py").exists()
    assert str(PurePosixPath(target).parent) == env["PYTHONPATH"]
    assert settings["SPIDER_MODULES"] == [f"{PurePosixPath(target).name}.spiders"]


def test_the_sink_profile_runs_postgresql_and_a_sink_to_it(services: dict[str, dict[str, Any]]) -> None:
    sink, postgres = services["sink"], services["postgres"]
    assert sink["profiles"] == postgres["profiles"] == ["sink"]
    url = sink["environment"]["SINK_URL"]
    assert url.startswith("postgresql://crawlhive:") and url.endswith("@postgres:5432/crawlhive")
    assert sink["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert healthcheck_argv(sink)[2] == "sink" and healthcheck_argv(postgres)[0] == "pg_isready"


def test_the_redis_cluster_profile_runs_three_primaries_with_a_replica_each(
    compose: dict[str, Any], services: dict[str, dict[str, Any]]
) -> None:
    nodes = {name: s for name, s in services.items() if name.startswith("redis-node-")}
    assert len(nodes) == 6
    config = compose["configs"]["redis-cluster-node"]["content"]
    assert "cluster-enabled yes" in config and "appendonly yes" in config and "noeviction" in config
    for name, node in nodes.items():
        assert node["profiles"] == ["redis-cluster"], name
        assert command(node)[-2:] == ["--cluster-announce-hostname", name]
        assert f"{name}:/data" in node["volumes"]
    init = services["redis-cluster-init"]
    assert init["profiles"] == ["redis-cluster"] and set(init["depends_on"]) == set(nodes)
    script = command(init)[-1]
    assert all(f"{name}:6379" in script for name in nodes) and "--cluster-replicas 1" in script
    # the crawlhive services take the cluster's seeds from CRAWLHIVE_REDIS_URL, the one Redis without it
    seeds = "redis://redis-node-1:6379,redis://redis-node-2:6379,redis://redis-node-3:6379"
    for name, service in crawlhive_services(services).items():
        raw = service["environment"]["REDIS_URL"]
        assert interpolate(raw) == f"redis://:{PASSWORD}@redis:6379/0", name
        url = interpolate(raw, {"CRAWLHIVE_REDIS_URL": seeds})
        assert redis_urls(Settings.from_overrides(REDIS_URL=url)) == seeds.split(","), name
        assert interpolate(service["environment"]["REDIS_WAIT_REPLICAS"], {"REDIS_WAIT_REPLICAS": "1"}) == "1"


# --- issue 43: the deployment as shipped ------------------------------------------------------------


def volume_targets(service: dict[str, Any]) -> dict[str, str]:
    """Mount target -> source of a service's ``volumes`` (short syntax)."""
    out = {}
    for entry in service.get("volumes") or []:
        source, target = str(entry).split(":")[:2]
        out[target] = source
    return out


def test_every_crawlhive_container_shares_one_blob_store(compose: dict[str, Any], services: dict[str, Any]) -> None:
    """A large page's body (docs/contract.md §20.5) is written by a crawler container and read by the
    cleaner, the sinks and `dump` in others: BLOB_STORE_URL is one named volume mounted in every
    crawlhive container (each container's own file system was a dead letter "no blob"), capped."""
    sources = set()
    for name, service in crawlhive_services(services).items():
        settings = load_settings(environ=environment(service))
        url = settings["BLOB_STORE_URL"]
        assert url.startswith("file:///"), f"{name}: BLOB_STORE_URL {url!r} is not the shared volume"
        mounts = volume_targets(service)
        path = url.removeprefix("file://").rstrip("/")
        assert path in mounts, f"{name}: nothing mounted at {path}, so its blobs are its own"
        sources.add(mounts[path])
        assert 0 < settings["BLOB_STORE_MAX_BYTES"], f"{name}: the shared store has no size cap"
    assert len(sources) == 1, sources
    [volume] = sources
    assert volume in compose["volumes"], f"{volume} is not a named volume"
    # The image owns the folder (a new volume copies its owner and mode): the crawlhive user's only.
    runs = " ".join(args for word, args in dockerfile_instructions() if word == "RUN")
    assert re.search(rf"install -d -o crawlhive -g crawlhive -m 0700 {re.escape(path)}", runs)


def test_rest_answers_the_host_header_prometheus_sends(services: dict[str, Any]) -> None:
    """Prometheus (profile monitoring) scrapes REST at its target in docker/monitoring/prometheus.yml,
    so that is the Host header REST gets: the Host check (DNS rebinding) must let it through."""
    import asyncio

    import httpx
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    from crawlhive.rest.app import AllowedHosts, allowed_hosts

    config = yaml.safe_load((DOCKER / "monitoring" / "prometheus.yml").read_text())
    targets = [t for job in config["scrape_configs"] for c in job["static_configs"] for t in c["targets"]]
    assert targets and all(t.split(":")[0] in services for t in targets), targets  # service names

    def metrics(request: Request) -> PlainTextResponse:
        return PlainTextResponse("crawlhive_nodes 1\n")

    settings = load_settings(environ=environment(services["rest"]))
    app = AllowedHosts(Starlette(routes=[Route("/metrics", metrics)]), hosts=allowed_hosts(settings))

    async def get(host: str) -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://rest") as client:
            return await client.get("/metrics", headers={"Host": host})

    for target in targets:
        answer = asyncio.run(get(target))
        assert answer.status_code == 200 and answer.text == "crawlhive_nodes 1\n", (target, answer.text)
    refused = asyncio.run(get("rebind.attacker.example"))
    assert refused.status_code == 400 and "REST_ALLOWED_HOSTS" in refused.text


def test_crawlhive_containers_are_hardened(services: dict[str, Any]) -> None:
    """Read-only root file system (writes only to memory and the blob volume), every capability
    dropped, no privilege gained through exec; the home of the image's user in memory, its own."""
    for name, service in crawlhive_services(services).items():
        assert service.get("read_only") is True, name
        assert service.get("cap_drop") == ["ALL"] and not service.get("cap_add"), name
        assert "no-new-privileges:true" in service.get("security_opt", []), name
        tmpfs = {str(entry).split(":")[0]: str(entry) for entry in service.get("tmpfs", [])}
        assert "/tmp" in tmpfs and "uid=10001" in tmpfs["/home/crawlhive"] and "mode=0700" in tmpfs["/home/crawlhive"]
    runs = " ".join(args for word, args in dockerfile_instructions() if word == "RUN")
    assert "--home-dir /home/crawlhive --uid 10001" in runs


def test_redis_requires_a_password_that_every_component_uses(compose: dict[str, Any], services: dict[str, Any]) -> None:
    from urllib.parse import urlsplit

    argv = [interpolate(word) for word in command(services["redis"])]
    assert argv[argv.index("--requirepass") + 1] == PASSWORD
    with pytest.raises(AssertionError, match="REDIS_PASSWORD"):  # compose refuses to start without one
        [interpolate(word, {}) for word in command(services["redis"])]
    assert environment(services["redis"])["REDISCLI_AUTH"] == PASSWORD  # its health check's redis-cli
    for name, service in crawlhive_services(services).items():
        url = load_settings(environ=environment(service))["REDIS_URL"]
        assert urlsplit(url).password == PASSWORD, name
    # the redis-cluster profile: every node asks for it and replicas give it to their primary
    config = interpolate(compose["configs"]["redis-cluster-node"]["content"])
    assert f"requirepass {PASSWORD}" in config and f"masterauth {PASSWORD}" in config
    for name, service in services.items():
        if name.startswith("redis-node-") or name == "redis-cluster-init":
            assert environment(service)["REDISCLI_AUTH"] == PASSWORD, name


def test_every_redis_monitor_shares_one_tail_store(compose: dict[str, Any], services: dict[str, Any]) -> None:
    """Queue tails (docs/contract.md §23): a segment one redis-monitor spilled may be refilled by
    another, so FRONTIER_TAIL_URL is one named volume mounted in every crawlhive container."""
    for name, service in crawlhive_services(services).items():
        settings = load_settings(environ=environment(service))
        url = settings["FRONTIER_TAIL_URL"]
        assert url.startswith("file:///"), f"{name}: FRONTIER_TAIL_URL {url!r} is not the shared volume"
        mounts = volume_targets(service)
        path = url.removeprefix("file://").rstrip("/")
        assert mounts.get(path) == "frontier-tails", f"{name}: the volume frontier-tails is not mounted at {path}"
    assert "frontier-tails" in compose["volumes"]
