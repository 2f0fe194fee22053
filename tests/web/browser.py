"""Debian's headless Chromium, driven by Selenium through Debian's chromedriver.

Without them the browser tests skip, saying what to install; with ``HAREL_SA_REQUIRE_BROWSER=1``
(CI, which installs them) they fail instead.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

REQUIRE_VARIABLE = "HAREL_SA_REQUIRE_BROWSER"
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
#: On a closed network Chromium must not try to reach anything but the page.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,1100",
]


def _unavailable(reason: str) -> NoReturn:
    if os.environ.get(REQUIRE_VARIABLE) == "1":
        pytest.fail(f"{REQUIRE_VARIABLE}=1 and no browser: {reason}", pytrace=False)
    pytest.skip(f"no browser: {reason}")


@pytest.fixture
def browser() -> Iterator[Any]:
    """A fresh headless Chromium (its own profile), quit after the test."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _unavailable("selenium is not installed: pip install 'harel-sa[dev]'")
    for program in (CHROMIUM, CHROMEDRIVER):
        if not os.access(program, os.X_OK):
            _unavailable(f"{program} is missing: apt-get install chromium chromium-driver")
    profile = tempfile.mkdtemp(prefix="harel-sa-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in [*FLAGS, f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def screenshot(driver: Any, name: str) -> None:
    """With ``HAREL_SA_SCREENSHOTS=DIR`` (``docs`` for the docs' pictures), the whole page as
    ``DIR/name``."""
    folder = os.environ.get("HAREL_SA_SCREENSHOTS")
    if not folder:
        return
    root = Path(__file__).resolve().parents[2]
    path = root / folder / name if not os.path.isabs(folder) else Path(folder) / name
    driver.set_window_size(1400, 500)
    for _ in range(3):  # the window's height is more than its viewport's: fit the page
        inner = driver.execute_script("return window.innerHeight")
        height = driver.execute_script("return document.documentElement.scrollHeight")
        if inner >= height:
            break
        size = driver.get_window_size()
        driver.set_window_size(1400, min(size["height"] + height - inner + 16, 3000))
    assert driver.save_screenshot(str(path)), path
