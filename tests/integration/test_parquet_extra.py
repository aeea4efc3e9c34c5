"""Parquet is the extra ``crawlhive[parquet]`` (pyarrow): ``make demo`` leaves it out.

Each test runs crawlhive in a subprocess whose ``PYTHONPATH`` starts with a folder holding a
``pyarrow`` package that raises ``ModuleNotFoundError`` on import, as a virtualenv without the
extra does: the real pyarrow of the test environment is hidden, crawlhive itself runs unchanged.
Asking for ``?format=parquet`` then fails at once (``crawlhive sink --to`` and ``crawlhive up
--sink`` both exit 2 before starting anything), naming the extra and how to install it; JSON Lines
and every other module work without it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "crawlhive.app.cli"]
MISSING = "format=parquet needs pyarrow, the optional extra crawlhive[parquet]"
INSTALL = "`make parquet` (in crawlhive's clone) or `pip install 'crawlhive[parquet]'`"


@pytest.fixture
def env_without_pyarrow(tmp_path: Path) -> dict[str, str]:
    """This process's environment, no cluster to find, and pyarrow unimportable."""
    shim = tmp_path / "shim" / "pyarrow"
    shim.mkdir(parents=True)
    tries = tmp_path / "pyarrow-tries"
    (shim / "__init__.py").write_text(  # each import attempt leaves a line in *tries*, then fails
        f"with open({str(tries)!r}, 'a') as tries:\n"
        "    tries.write('import pyarrow\\n')\n"
        "raise ModuleNotFoundError(\"No module named 'pyarrow'\", name='pyarrow')  # hidden by the test\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "KAFKA_BOOTSTRAP_SERVERS", "KAFKA_HOSTS")}
    env["PYTHONPATH"] = os.pathsep.join([str(shim.parent), *filter(None, [os.environ.get("PYTHONPATH")])])
    env["CRAWLHIVE_HOME"] = str(tmp_path / "home")
    env["KAFKA_TOPIC_PREFIX"] = "parquetextra"
    # Nothing listens here: a command that got as far as a backend would fail otherwise (exit 1).
    env["REDIS_URL"] = "redis://127.0.0.1:1/0"
    env["KAFKA_BOOTSTRAP_SERVERS"] = "127.0.0.1:1"
    return env


def test_the_shim_hides_pyarrow(env_without_pyarrow: dict[str, str]) -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import pyarrow"], env=env_without_pyarrow, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1 and "No module named 'pyarrow'" in done.stderr, done.stderr


def test_sink_to_parquet_without_the_extra_exits_2_at_once_naming_it(
    env_without_pyarrow: dict[str, str], tmp_path: Path
) -> None:
    folder = tmp_path / "pages"
    started = time.monotonic()
    done = subprocess.run(
        [*CLI, "sink", "--to", f"file://{folder}/?format=parquet"],
        env=env_without_pyarrow,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith(f"crawlhive sink: SINK_URL (--to): {MISSING}"), done.stderr
    assert "(No module named 'pyarrow')" in done.stderr and INSTALL in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert done.stdout == "" and not folder.exists()  # nothing started, nothing made
    assert (tmp_path / "pyarrow-tries").read_text() == "import pyarrow\n"  # pyarrow was asked for, once
    assert time.monotonic() - started < 30  # no retries against the absent Redis and broker


def test_up_with_a_parquet_sink_without_the_extra_exits_2_before_starting_anything(
    env_without_pyarrow: dict[str, str], tmp_path: Path
) -> None:
    env = {k: v for k, v in env_without_pyarrow.items() if k not in ("REDIS_URL", "KAFKA_BOOTSTRAP_SERVERS")}
    folder = tmp_path / "pages"
    url = f"file://{folder}/?format=parquet"
    done = subprocess.run([*CLI, "up", "--sink", url], env=env, capture_output=True, text=True, timeout=60)
    output = done.stdout + done.stderr
    assert done.returncode == 2, output
    assert f"--sink {url} cannot be written: SINK_URL (--to): {MISSING}" in done.stderr, output
    assert INSTALL in done.stderr and "Traceback" not in output
    assert "started" not in output and not (tmp_path / "home" / "up.json").exists(), output
    assert not folder.exists()


def crawlhive_modules() -> list[str]:
    """Every module of the crawlhive package, from pyproject.toml's package-dir (folder -> package)."""
    folders = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    modules = []
    for package, folder in folders.items():
        for path in sorted((REPO / folder).rglob("*.py")):
            parts = path.relative_to(REPO / folder).with_suffix("").parts
            modules.append(".".join([package, *(parts[:-1] if parts[-1] == "__init__" else parts)]))
    return modules


def test_json_lines_and_every_module_work_without_pyarrow(env_without_pyarrow: dict[str, str], tmp_path: Path) -> None:
    """A JSON Lines file store writes its file; every crawlhive module imports and none asks for
    pyarrow (the Parquet encoder does, when it is used)."""
    modules = crawlhive_modules()
    assert "crawlhive.sink.files" in modules and "crawlhive.kafka_monitor.plugins" in modules and len(modules) > 50
    script = f"""
import importlib
from crawlhive.sink.store import SinkRecord, store_for
from crawlhive.utils.config.settings import Settings

store = store_for(Settings.from_overrides(SINK_ROLL_BYTES=1), "file://{tmp_path}/pages/?format=jsonl")
store.open()
store.write([SinkRecord(topic="t", partition=0, offset=7, value={{"url": "http://a/"}}, size=20)])
store.flush()
store.close()
failed = []
for name in {modules!r}:
    try:
        importlib.import_module(name)
    except ImportError as exc:
        failed.append((name, str(exc)))
print("failed", failed)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], env=env_without_pyarrow, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.splitlines()[-1:] == ["failed []"], done.stdout[-4000:]
    assert [p.name for p in (tmp_path / "pages" / "t" / "0").iterdir()] == ["7-7.jsonl.gz"]
    assert not (tmp_path / "pyarrow-tries").exists()  # nothing so much as tried to import pyarrow
