"""The Scrapy settings of rendering crawlers (crawler/render/settings.py's render_settings)."""

from __future__ import annotations

from pathlib import Path

import pytest
from scrapy.settings import Settings as ScrapySettings
from scrapy.utils.python import without_none_values

from crawlhive.crawler.render.guard_proxy import take_proxy_socket
from crawlhive.crawler.render.settings import render_settings
from crawlhive.crawler.settings import scrapy_settings
from crawlhive.utils.config.settings import Settings

pytestmark = pytest.mark.skipif(
    not Path("/usr/bin/chromium-headless-shell").exists(), reason="no chromium-headless-shell"
)


@pytest.fixture
def values(tmp_path: Path) -> dict[str, object]:
    settings = Settings.from_overrides(RENDER=True, CRAWLHIVE_HOME=str(tmp_path), RENDER_JS_HEAP_MB=64)
    values = render_settings(scrapy_settings(settings, "link"), settings)
    yield values
    take_proxy_socket(int(values["CRAWLHIVE_RENDER_PROXY_PORT"])).close()  # type: ignore[call-overload]


def test_rendering_crawlers_download_http_and_https_only(values: dict[str, object]) -> None:
    """Scrapy merges DOWNLOAD_HANDLERS into its base (file, data, ftp, s3 handlers): each of those
    is switched off, so no request of another scheme is ever fetched, with or without the browser."""
    handlers = without_none_values(ScrapySettings(values).getwithbase("DOWNLOAD_HANDLERS"))
    assert set(handlers) == {"http", "https"}
    assert handlers["http"] == handlers["https"] == "crawlhive.crawler.render.handler.RenderDownloadHandler"


def test_the_browser_s_javascript_heap_is_bounded_by_a_setting(values: dict[str, object]) -> None:
    args = values["PLAYWRIGHT_LAUNCH_OPTIONS"]["args"]  # type: ignore[index]
    assert "--js-flags=--max-old-space-size=64" in args
