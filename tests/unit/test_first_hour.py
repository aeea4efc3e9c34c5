"""What a new user meets in the docs and at Ctrl-C ("The first hour, round three").

The README tour itself is replayed in tests/integration/test_fresh_machine.py (psql output, terminal
3's output, one line at Ctrl-C); these are the pieces that need no cluster: every doc's commands
run as typed, the stop-signal lines under `up`, the render hints, `make render`'s question and
`dump --help`'s note on order.
"""

from __future__ import annotations

import importlib.util
import logging
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from crawlhive.app.cli import build_parser
from crawlhive.crawler.render import browser
from crawlhive.utils.config.errors import SettingsError
from crawlhive.utils.config.log import configure_logging
from crawlhive.utils.config.settings import Settings
from crawlhive.utils.process.loop import install_stop_handlers

REPO = Path(__file__).resolve().parents[2]
#: Every markdown page a user reads for commands to type.
DOCS = sorted(
    [
        REPO / "README.md",
        REPO / "docker" / "README.md",
        *(REPO / "docs").glob("*.md"),
        *(REPO / "examples").rglob("*.md"),
    ]
)
PATH_NOTE = 'export PATH="$PWD/.venv/bin:$PATH"'


def shell_lines(markdown: str) -> list[str]:
    """The command lines of a page's shell blocks (```sh, ```bash, ```shell, ```console or bare
    ```), fence by fence: a closing ``` ends a block, it opens none."""
    lines: list[str] = []
    language: str | None = None  # None: outside a block
    for line in markdown.splitlines():
        fence = re.match(r"\s*```(\S*)", line)
        if fence:
            language = fence.group(1) if language is None else None
        elif language in ("", "sh", "bash", "shell", "console") and line.strip() and not line.lstrip().startswith("#"):
            lines.append(line)
    return lines


def test_no_doc_runs_a_bare_crawlhive_that_a_fresh_clone_has_not_on_path() -> None:
    """`make demo` puts the command in .venv/bin, which is not on PATH: a line that runs a plain
    `crawlhive` (alone, after NAME=value assignments, or after a pipe or &&) is "command not found"."""
    bare = re.compile(r"(^|[|;&]\s*)\s*(?:[A-Za-z_][A-Za-z0-9_]*=\S+\s+)*crawlhive(\s|$)")
    found = [
        f"{doc.relative_to(REPO)}: {line}" for doc in DOCS for line in shell_lines(doc.read_text()) if bare.search(line)
    ]
    assert found == [], "\n".join(found)
    assert bare.search("crawlhive feed '{}'") and bare.search("REDIS_URL=x crawlhive up")  # the check bites
    assert not bare.search(".venv/bin/crawlhive feed '{}'")


@pytest.mark.parametrize("doc", ["README.md", "docs/api.md", "docs/operations.md", "docs/migrating.md"])
def test_the_pages_that_name_commands_in_their_text_say_how_to_put_them_on_path(doc: str) -> None:
    text = (REPO / doc).read_text()
    assert PATH_NOTE in text, doc
    assert (REPO / ".venv" / "bin" / "crawlhive").exists()  # what the note puts on PATH


# --- one line at Ctrl-C under `up` ---------------------------------------------------------------


class _Worker:
    stopping = False


def _first_signal_lines(log_file: Path) -> list[str]:
    """What a component logs on its first SIGTERM: crawlhive's loop (its handler, called as Python
    calls it), then Scrapy's line (its own call), as read back from *log_file*."""
    worker = _Worker()
    saved = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    try:
        install_stop_handlers(worker, "this batch")
        handler = signal.getsignal(signal.SIGTERM)
        assert callable(handler)
        handler(signal.SIGTERM, None)
        assert worker.stopping
    finally:
        signal.signal(signal.SIGINT, saved[0])
        signal.signal(signal.SIGTERM, saved[1])
    logging.getLogger("scrapy.crawler").info(
        "Received %(signame)s, shutting down gracefully. Send again to force ", {"signame": "SIGTERM"}
    )
    return [line for line in log_file.read_text().splitlines() if "SIGTERM" in line]


def test_a_component_of_up_logs_its_first_stop_signal_at_debug_only(tmp_path: Path, restore_root: None) -> None:
    """`up` sets LOG_STOP_SIGNALS=false for its components: one Ctrl-C printed one line per
    component ("SIGTERM received: stopping after …", Scrapy's "Received SIGTERM …") besides up's own."""
    assert Settings.from_overrides().LOG_STOP_SIGNALS is True  # a component run by hand says it
    alone = tmp_path / "alone.log"
    configure_logging("INFO", file=str(alone))
    shown = _first_signal_lines(alone)
    assert len(shown) == 2 and "SIGTERM received: stopping after this batch" in shown[0], shown  # run by hand

    under_up = tmp_path / "under-up.log"
    configure_logging("INFO", file=str(under_up), stop_signals=False)
    assert _first_signal_lines(under_up) == []

    debugging = tmp_path / "debug.log"
    configure_logging("DEBUG", file=str(debugging), stop_signals=False)
    lines = _first_signal_lines(debugging)
    assert len(lines) == 2 and all(" DEBUG " in line for line in lines), lines


# --- rendering: the hint and `make render` ----------------------------------------------------------


def test_crawler_render_without_the_packages_says_make_render_as_the_readme_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "scrapy_playwright" else real(name, *a)
    )
    with pytest.raises(SettingsError) as raised:
        browser.check_render_installed()
    assert "`make render`" in str(raised.value)
    readme = (REPO / "README.md").read_text()
    assert "`make render` adds scrapy-playwright" in readme


@pytest.fixture
def fake_root(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """A PATH where `id -u` says root, `apt-get` records its arguments, and no Chromium is found."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for tool in ("sh", "make", "cat", "printf"):
        found = shutil.which(tool, path="/usr/local/bin:/usr/bin:/bin")
        if found:
            (folder / tool).symlink_to(found)
    calls = tmp_path / "apt-get.calls"
    (folder / "id").write_text("#!/bin/sh\necho 0\n")
    (folder / "apt-get").write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    for script in ("id", "apt-get"):
        (folder / script).chmod(0o755)
    return {"PATH": str(folder), "HOME": str(tmp_path)}, calls


def _make_render_browser(env: dict[str, str], *extra: str) -> str:
    done = subprocess.run(
        ["make", "--no-print-directory", "render-browser", *extra],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_make_render_says_what_it_installs_and_why_and_asks_before_apt_get(
    fake_root: tuple[dict[str, str], Path],
) -> None:
    env, calls = fake_root
    said = _make_render_browser(env)  # no terminal to answer and no YES=1: nothing is installed
    assert "rendering crawlers" in said and "chromium-headless-shell" in said and "browser tests" not in said
    assert "not installed; to install it: apt-get install chromium-headless-shell" in said
    assert not calls.exists()

    said = _make_render_browser(env, "YES=1")
    assert said.index("rendering crawlers") < said.index("make: apt-get install chromium-headless-shell")
    assert calls.read_text().split() == ["install", "-y", "-qq", "chromium-headless-shell"]


# --- dump and the order of partitions -------------------------------------------------------------


def test_dump_help_and_the_api_doc_say_records_of_several_partitions_interleave() -> None:
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "command").choices  # type: ignore[union-attr]
    help_text = " ".join(subparsers["dump"].format_help().split())
    assert "older record can print after a newer one" in help_text and "KAFKA_TOPIC_PARTITIONS" in help_text
    api = " ".join((REPO / "docs" / "api.md").read_text().split())
    assert "older record can print after a newer one" in api
