"""The example process kind of docs/extending.md, installed out of crawlhive's tree as Python
installs any distribution: its package (the page's two Python blocks) and a ``.dist-info`` whose
``entry_points.txt`` is the page's ``pyproject.toml`` block, in a folder put on the path. Nothing
of crawlhive is edited: :func:`importlib.metadata.entry_points` finds the kind as it finds a
pip-installed one."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: The example's package (the module its kind's ``view`` names is ``<PACKAGE>.view``).
PACKAGE = "hellosink"


def example_blocks() -> tuple[list[str], str]:
    """The Python blocks and the TOML block of docs/extending.md's "Process kinds" section."""
    text = (REPO / "docs" / "extending.md").read_text()
    section = text[text.index("## Process kinds") :]
    section = section[: section.index("\n## ", 1)]
    python = re.findall(r"```python\n(.*?)```", section, re.S)
    (toml,) = re.findall(r"```toml\n(.*?)```", section, re.S)
    return python, toml


def install_example(folder: Path) -> Path:
    """Write the example's distribution into *folder* (to be put on ``sys.path`` / PYTHONPATH);
    returns *folder*."""
    (kind, view), toml = example_blocks()
    package = folder / PACKAGE
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(kind)
    (package / "view.py").write_text(view)
    group = re.search(r'^\[project\.entry-points\."([^"]+)"\]$', toml, re.M)
    assert group is not None, toml
    points = [f"{name} = {value}" for name, value in re.findall(r'^([\w.-]+) = "([^"]+)"$', toml, re.M)]
    info = folder / f"{PACKAGE}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{group.group(1)}]\n" + "\n".join(points) + "\n")
    return folder
