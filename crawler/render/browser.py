"""Finding the browser of rendering crawlers, and checking the ``render`` extra is installed.

Imports nothing heavy: ``crawlhive up`` calls these before it starts a rendering crawler.
"""

from __future__ import annotations

import importlib.util
import shutil
from typing import TYPE_CHECKING

from crawlhive.utils.config.errors import SettingsError

if TYPE_CHECKING:
    from crawlhive.utils.config.settings import Settings

#: Browsers looked for on PATH when RENDER_BROWSER is empty, best first: Debian's
#: ``chromium-headless-shell`` (Chromium's headless-only build, what Playwright itself runs headless:
#: 4x less CPU per page than the full browser in its headless mode, measured by bench/render.py),
#: then Debian's ``chromium`` and other names of the full browser.
BROWSER_NAMES = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
#: Chromium features rendering crawlers turn on: Playwright's own (``chromiumSwitches`` of
#: Playwright 1.65) and origin-bound cookies.
BROWSER_FEATURES = (
    "CDPScreenshotNewSurface",
    "SkipListAccountsWithoutGaiaCookies",
    "EnablePortBoundCookies",
    "EnableSchemeBoundCookies",
)


def find_browser(settings: Settings) -> str:
    """The Chromium executable rendering crawlers start.

    Raises:
        SettingsError: RENDER_BROWSER does not exist, or no Chromium is on PATH (the message says
            how to install one; nothing is downloaded at run time).
    """
    configured = settings.RENDER_BROWSER.strip()
    if configured:
        found = shutil.which(configured)
        if found is None:
            raise SettingsError(f"RENDER_BROWSER: {configured!r} is not an executable browser")
        return found
    for name in BROWSER_NAMES:
        found = shutil.which(name)
        if found is not None:
            return found
    raise SettingsError(
        "rendering needs Chromium and none was found on PATH (looked for "
        f"{', '.join(BROWSER_NAMES)}): install Debian's `chromium-headless-shell` package "
        "(apt-get install chromium-headless-shell) or set RENDER_BROWSER to the browser's path"
    )


def check_render_installed() -> None:
    """Raises SettingsError when scrapy-playwright (the ``render`` extra) is not installed."""
    if importlib.util.find_spec("scrapy_playwright") is None or importlib.util.find_spec("playwright") is None:
        raise SettingsError(
            "--render needs scrapy-playwright and Playwright, which this installation lacks: run "
            "`make render` in crawlhive's folder (it adds them to .venv from requirements-render.lock, "
            "and Debian's chromium-headless-shell); another installation: pip install 'crawlhive[render]'"
        )
