"""The locks (docs/contract.md §22.1) agree with the direct requirements they were made from.

``requirements.txt`` (runtime), ``requirements-render.txt`` (rendering crawlers),
``requirements-parquet.txt`` (the extra crawlhive[parquet]) and ``requirements-dev.txt`` (test tools)
pin what crawlhive imports; ``make lock`` compiles each into a
full lock with hashes (``requirements*.lock``), which every install uses (``make``, the images, CI).
A branch that adds a requirement without re-running ``make lock`` fails here, the message naming
the package, the file and the fix."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
PAIRS = [
    ("requirements.txt", "requirements.lock"),
    ("requirements-render.txt", "requirements-render.lock"),
    ("requirements-parquet.txt", "requirements-parquet.lock"),
    ("requirements-dev.txt", "requirements-dev.lock"),
    ("requirements-pywb.txt", "requirements-pywb.lock"),  # a virtualenv of its own (`make pywb`)
]
FIX = "run `make lock` and commit the locks"


def direct_requirements(name: str) -> dict[str, Requirement]:
    """The requirements of a requirements file and of the files it includes with ``-r``."""
    found: dict[str, Requirement] = {}
    for raw in (REPO / name).read_text().splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("-r "):
            found.update(direct_requirements(line[3:].strip()))
            continue
        assert not line.startswith("-"), f"{name}: option {line!r} is not understood by this test"
        requirement = Requirement(line)
        found[canonicalize_name(requirement.name)] = requirement
    return found


def locked(name: str) -> dict[str, tuple[str, int]]:
    """A lock's packages: canonical name -> (version, number of hashes)."""
    text = (REPO / name).read_text()
    found: dict[str, tuple[str, int]] = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", text):
        first = block.split("\n", 1)[0]
        match = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^ ;\\]+)", first)
        if match:
            found[canonicalize_name(match.group(1))] = (match.group(3), block.count("--hash=sha256:"))
    return found


@pytest.mark.parametrize(("direct", "lock"), PAIRS)
def test_every_direct_requirement_is_locked_at_a_version_that_satisfies_it(direct: str, lock: str) -> None:
    pins = locked(lock)
    problems = []
    for name, requirement in sorted(direct_requirements(direct).items()):
        if name not in pins:
            problems.append(f"{requirement.name}: asked for by {direct} ({requirement}) but not in {lock}")
        elif not requirement.specifier.contains(pins[name][0], prereleases=True):
            problems.append(f"{requirement.name}: {direct} asks for {requirement}, {lock} has {pins[name][0]}")
    assert not problems, f"{lock} is out of date ({FIX}):\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("lock", [lock for _, lock in PAIRS])
def test_every_locked_package_has_hashes(lock: str) -> None:
    pins = locked(lock)
    assert len(pins) > 20, f"{lock} parsed to {len(pins)} packages"
    unhashed = [name for name, (_, hashes) in pins.items() if hashes == 0]
    assert not unhashed, f"{lock}: no hash for {unhashed} ({FIX})"


def test_the_locks_agree_with_each_other() -> None:
    """The rendering, Parquet and test locks are compiled constrained by the runtime lock: a package
    they share is at one version in all (what `make install` or `make parquet` lays over `make demo`'s
    venv)."""
    runtime = locked("requirements.lock")
    for lock in ("requirements-render.lock", "requirements-parquet.lock", "requirements-dev.lock"):
        other = locked(lock)
        missing = sorted(set(runtime) - set(other))
        assert not missing, f"{lock} lacks {missing} of requirements.lock ({FIX})"
        moved = {name: (runtime[name][0], other[name][0]) for name in runtime if runtime[name][0] != other[name][0]}
        assert not moved, f"{lock} and requirements.lock disagree (runtime, {lock}): {moved} ({FIX})"


def test_the_locked_runtime_satisfies_pyprojects_bounds() -> None:
    """pyproject.toml's loose bounds (what `pip install crawlhive` asks for) hold for the lock too."""
    pins = locked("requirements.lock")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    for line in project["dependencies"]:
        requirement = Requirement(line)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"pyproject.toml's {requirement} is not in requirements.lock ({FIX})"
        assert requirement.specifier.contains(pins[name][0], prereleases=True), (
            f"pyproject.toml asks for {requirement}, requirements.lock has {pins[name][0]}"
        )


def test_the_extras_are_out_of_the_runtime_lock_and_in_their_own_and_the_test_lock() -> None:
    """`make demo` installs requirements.lock: an extra of pyproject.toml (Parquet's pyarrow, the
    rendering packages) is not in it; each extra is in its own lock, at a version its bounds accept,
    and in the test lock (`make test` runs the extras' tests)."""
    runtime = locked("requirements.lock")
    dev = locked("requirements-dev.lock")
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(extras) >= {"parquet", "render"}
    for extra, lines in extras.items():
        own = locked(f"requirements-{extra}.lock")
        for line in lines:
            requirement = Requirement(line)
            name = canonicalize_name(requirement.name)
            assert name not in runtime, f"{name} (extra {extra}) is in requirements.lock, which `make demo` installs"
            for lock, pins in ((f"requirements-{extra}.lock", own), ("requirements-dev.lock", dev)):
                assert name in pins, f"{name} (extra {extra}) is not in {lock} ({FIX})"
                assert requirement.specifier.contains(pins[name][0], prereleases=True), (
                    f"pyproject.toml's extra {extra} asks for {requirement}, {lock} has {pins[name][0]}"
                )


def test_make_installs_from_the_locks_with_hashes() -> None:
    """`make demo`'s and `make test`'s installs read the locks, never the loose files."""
    done = subprocess.run(
        ["make", "-n", "-B", ".venv/.installed"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    installs = [line for line in done.stdout.splitlines() if "pip install" in line and " -r " in line]
    assert installs, done.stdout
    for line in installs:
        assert "--require-hashes" in line and re.search(r"-r requirements(-dev)?\.lock\b", line), line


def test_the_agreement_check_names_the_package_out_of_sync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the lead sees after merging a branch that added a runtime package but not its lock."""
    (tmp_path / "requirements.txt").write_text("scrapy==2.19.0\nleft-pad-py==1.0.0\n")
    (tmp_path / "requirements.lock").write_text(
        (REPO / "requirements.lock").read_text().replace("\nscrapy==2.19.0 \\", "\nscrapy==2.18.0 \\")
    )
    monkeypatch.setattr(f"{__name__}.REPO", tmp_path)
    with pytest.raises(AssertionError) as failed:
        test_every_direct_requirement_is_locked_at_a_version_that_satisfies_it("requirements.txt", "requirements.lock")
    message = str(failed.value)
    assert "left-pad-py: asked for by requirements.txt (left-pad-py==1.0.0) but not in requirements.lock" in message
    assert "scrapy: requirements.txt asks for scrapy==2.19.0, requirements.lock has 2.18.0" in message
    assert "make lock" in message
