"""User spiders, first part (docs/contract.md §11): how ``crawlhive crawler --spider NAME`` finds
a spider (built-in, ``package.module:Class``, or by ``name`` in SPIDER_MODULES), an unknown name
exits 2 naming SPIDER_MODULES, and SPIDER_IDS limits the spider types requests may name."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from crawlerkit import TestSite, crawler_env, crawler_module, html, seed

from crawlhive.kafka_monitor.validation import Accepted, Rejected, RequestValidator
from crawlhive.utils.settings import Settings

pytestmark = pytest.mark.timeout(120)

CLI = [sys.executable, "-m", "crawlhive.utils.app.cli"]

#: A user's spider module: built on crawlhive's link spider, under its own spider type.
SPIDER_MODULE = """
from crawlhive.crawler.spiders.link import LinkSpider


class ShopSpider(LinkSpider):
    name = "shop"
"""


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    package = tmp_path / "userspiders"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "shop.py").write_text(textwrap.dedent(SPIDER_MODULE))
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}:{__import__('os').environ.get('PYTHONPATH', '')}")
    return tmp_path


@pytest.mark.parametrize(
    ("spider", "extra"),
    [
        ("userspiders.shop:ShopSpider", {}),
        ("shop", {"SPIDER_MODULES": ["userspiders.shop"]}),
    ],
)
def test_a_user_spider_is_found_and_crawls_under_its_own_spiderid(
    user_module: Path, redis_url: str, kafka_bootstrap: str, spider: str, extra: dict[str, object]
) -> None:
    site = TestSite()
    site.start()
    site.page("/u/0", html())
    try:
        with crawler_module(redis_url, kafka_bootstrap, user_module, "u", spider=spider, **extra) as env:
            seed(env["settings"], env["redis"], appid="userapp", crawlid="u1", spiderid="shop", url=site.url("/u/0"))
            (item,) = env["collector"].wait_for("u1", 1)
            assert item["url"] == site.url("/u/0") and item["status_code"] == 200
    finally:
        site.stop()


@pytest.mark.parametrize(
    ("spider", "extra", "message"),
    [
        ("nosuch", {}, "SPIDER_MODULES (not set)"),
        ("nosuch", {"SPIDER_MODULES": ["userspiders.shop"]}, "SPIDER_MODULES (userspiders.shop)"),
        ("userspiders.shop:Nope", {}, "cannot load 'userspiders.shop:Nope'"),
        ("shop", {"SPIDER_MODULES": ["no_such_module_here"]}, "SPIDER_MODULES: cannot import"),
    ],
)
def test_an_unknown_spider_exits_2_naming_spider_modules(
    user_module: Path, tmp_path: Path, spider: str, extra: dict[str, object], message: str
) -> None:
    env = crawler_env(Settings.from_overrides(CRAWLHIVE_HOME=str(tmp_path)), **extra)
    done = subprocess.run([*CLI, "crawler", "--spider", spider], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_spider_ids_limit_the_spider_types_requests_may_name() -> None:
    anyone = RequestValidator.from_settings(Settings.from_overrides())
    assert isinstance(
        anyone.validate({"url": "http://x.com/", "appid": "app", "crawlid": "c", "spiderid": "x"}), Accepted
    )
    only = RequestValidator.from_settings(Settings.from_overrides(SPIDER_IDS=["shop", "link"]))
    crawl = {"url": "http://x.com/", "appid": "app", "crawlid": "c"}
    assert isinstance(only.validate({**crawl, "spiderid": "shop"}), Accepted)
    assert isinstance(only.validate(crawl), Accepted)  # the default spiderid, link, is listed
    rejected = only.validate({**crawl, "spiderid": "x"})
    assert isinstance(rejected, Rejected)
    assert rejected.reason == "Invalid request: crawl: 'x' is not a known spider (SPIDER_IDS)"
    info = {"action": "info", "appid": "app", "uuid": "u", "spiderid": "x", "crawlid": "c"}
    assert only.validate(info) == Rejected("Invalid request: action: 'x' is not a known spider (SPIDER_IDS)")
    assert isinstance(only.validate({"stats": "queue", "appid": "app", "uuid": "s"}), Accepted)  # no spiderid
