"""Logging: configured once, JSON lines carry extra fields, bad level names the setting."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from crawlhive.utils.errors import SettingsError
from crawlhive.utils.log import configure_logging


@pytest.fixture
def restore_root() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for h in list(root.handlers):
        if h not in handlers:
            root.removeHandler(h)
            h.close()
    root.setLevel(level)


def test_json_lines_with_extra_fields(tmp_path: Path, restore_root: None) -> None:
    log_file = tmp_path / "out.log"
    configure_logging("DEBUG", json_lines=True, file=str(log_file))
    configure_logging("INFO", json_lines=True, file=str(log_file))  # reconfiguring replaces, not adds
    logging.getLogger("crawlhive.test").info("crawl %s queued", "c1", extra={"crawlid": "c1", "appid": "a1"})
    logging.getLogger("crawlhive.test").debug("hidden")
    lines = log_file.read_text().splitlines()
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert record["message"] == "crawl c1 queued"
    assert record["crawlid"] == "c1" and record["appid"] == "a1" and record["level"] == "INFO"


def test_bad_level_names_the_setting(restore_root: None) -> None:
    with pytest.raises(SettingsError, match="LOG_LEVEL"):
        configure_logging("LOUD")
