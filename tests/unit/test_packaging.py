"""What a non-editable install (the docker image's ``pip install .``) ships: every package folder and
the Lua scripts. An editable install finds subpackages by itself, so only this test sees a miss."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _config() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_package_folder_is_listed_in_pyproject() -> None:
    config = _config()
    folders = {str(REPO / folder): name for name, folder in config["package-dir"].items()}
    found = set()
    for root, name in folders.items():
        for init in Path(root).rglob("__init__.py"):
            relative = init.parent.relative_to(root)
            found.add(".".join([name, *relative.parts]) if relative.parts else name)
    # Folders of data only (the Lua scripts) are listed too: setuptools sees them as packages.
    lua = {"crawlhive.utils.backends.lua", "crawlhive.utils.backends.lua.lib"}
    assert found | lua == set(config["packages"])


def test_lua_scripts_are_package_data() -> None:
    data = _config()["package-data"]
    lua = list((REPO / "utils" / "backends" / "lua").rglob("*.lua"))
    assert len(lua) > 30, "no Lua scripts found: where did utils/backends/lua go?"
    for path in lua:
        package = ".".join(["crawlhive.utils", *path.parent.relative_to(REPO / "utils").parts])
        assert any(path.match(pattern) for pattern in data[package]), path


def test_the_layers_are_kept_and_name_every_package() -> None:
    """import-linter's contracts (pyproject.toml, also run by ``make lint``): the application
    (``crawlhive.app``) on top, the services side by side and independent, the library
    (``crawlhive.utils``) beneath them; inside the library, its groups in layers with the wire-format
    contract (``crawlhive.utils.contract``) at the floor, importing nothing else of crawlhive. Every
    top-level package of the install is in a layer of the first, every package of the library in
    one of the second, so a new service or a new group cannot be left out of the check."""
    import subprocess
    import sys

    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    outer, inner = [c for c in config["contracts"] if c["type"] == "layers"]
    layers = outer["layers"]
    named = {name.strip() for layer in layers for name in layer.split("|")}
    assert named == set(_config()["package-dir"]) == set(config["root_packages"])
    assert layers[0] == "crawlhive.app" and layers[-1] == "crawlhive.utils"

    assert inner["containers"] == ["crawlhive.utils"]
    groups = {name.strip() for layer in inner["layers"] for name in layer.split("|")}
    library = {init.parent.name for init in (REPO / "utils").glob("*/__init__.py")}
    assert groups == library
    assert inner["layers"][-1] == "contract"
    assert inner.get("exclude_type_checking_imports", False) is False  # annotations obey the layers too

    done = subprocess.run(
        [str(Path(sys.executable).parent / "lint-imports"), "--no-cache"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout and f"{len(config['contracts'])} kept" in done.stdout


def _tracked_text_files() -> list[Path]:
    import subprocess

    listed = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    files = [REPO / line for line in listed.splitlines()]
    return [f for f in files if f.is_file() and f.suffix not in {".png", ".whl"}]


def test_the_repository_stands_alone() -> None:
    """Nothing a user reads or runs points outside the repository (the contract is docs/contract.md,
    the bench site and baseline are in bench/)."""
    offenders = []
    for path in _tracked_text_files():
        if path.name == "test_packaging.py":
            continue
        text = path.read_text(errors="replace")
        if "../shared" in text or "shared/spec" in text or "shared/bench" in text or "API.md" in text:
            offenders.append(str(path.relative_to(REPO)))
    assert offenders == []


def test_relative_links_in_markdown_resolve() -> None:
    import re

    broken = []
    for path in _tracked_text_files():
        if path.suffix != ".md":
            continue
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (path.parent / target).exists():
                broken.append(f"{path.relative_to(REPO)} -> {target}")
    assert broken == []


def test_every_subcommand_s_help_ends_with_an_example() -> None:
    """docs/contract.md §17.8."""
    import re
    import shlex

    from crawlhive.app.cli import build_parser
    from crawlhive.crawler.kind import BUILTIN_SPIDERS
    from crawlhive.crawler.spiders import SPIDERS
    from crawlhive.utils.config.settings import Settings
    from crawlhive.utils.contract.validation import Accepted
    from crawlhive.utils.process.intake import request_validator

    assert set(BUILTIN_SPIDERS) == set(SPIDERS)
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "command").choices  # type: ignore[attr-defined]
    components = {"kafka-monitor", "redis-monitor", "crawler", "cleaner", "rest", "sink"}
    assert set(subparsers) == {"up", "demo", *components, "feed", "dump"}
    for name, sub in subparsers.items():
        text = sub.format_help()
        last = [line for line in text.splitlines() if line.strip()][-1]
        assert "crawlhive " in last, (name, last)
        assert "example" in text, name
        assert "KAFKA_HOSTS" not in text, name  # the docs' name is KAFKA_BOOTSTRAP_SERVERS (an alias works)
    feed_help = subparsers["feed"].format_help()
    for kind in ("crawl", "action", "stats", "domain-config"):
        assert re.search(rf"^  {kind} ", feed_help, re.M), kind
    validator = request_validator(Settings.from_overrides())
    for line in feed_help.splitlines():
        if line.strip().startswith("crawlhive feed '"):
            request = json.loads(shlex.split(line.strip())[2])
            assert isinstance(validator.validate(request), Accepted), line
    crawler_help = subparsers["crawler"].format_help()
    assert all(spider in crawler_help for spider in SPIDERS)


def test_make_render_installs_the_rendering_packages_named_in_requirements_render() -> None:
    """requirements-render.txt says `make render` installs it: the target exists, installs that file
    into .venv, and sets up the browser."""
    import subprocess

    assert "make render" in (REPO / "requirements-render.txt").read_text()
    done = subprocess.run(
        ["make", "-n", "-W", "requirements.lock", "render"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert ".venv/bin/python -m pip install -q --require-hashes -r requirements-render.lock" in done.stdout
    assert "chromium-headless-shell" in done.stdout  # the browser target's commands


def test_make_parquet_installs_the_parquet_extra_named_in_requirements_parquet() -> None:
    """requirements-parquet.txt (pyarrow, the extra crawlhive[parquet]) says `make parquet` installs it:
    the target exists and installs that file's lock into .venv, hashes checked; pyproject.toml's extra
    asks for the same package."""
    import subprocess

    assert "make parquet" in (REPO / "requirements-parquet.txt").read_text()
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert [line.split(">=")[0] for line in extras["parquet"]] == ["pyarrow"]
    done = subprocess.run(
        ["make", "-n", "-W", "requirements.lock", "parquet"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert ".venv/bin/python -m pip install -q --require-hashes -r requirements-parquet.lock" in done.stdout
