"""A real browser for the web page's tests: Debian's chromium, driven by Selenium through Debian's chromedriver.

Both come from the same Debian package version (tests/run.sh installs
``chromium`` and ``chromium-driver``), so the driver always speaks the
browser's protocol; Selenium is given the driver's path, so it never tries to
fetch one. Headless, without the sandbox (the tests run as root), with no
first-run pages and nothing fetched from outside.

With ``CI=true`` a browser that cannot start fails the test instead of
skipping it (helpers/services.py's ``unavailable``).
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from helpers.services import unavailable

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
#: a desktop's window, and a phone's screen (an iPhone SE's CSS pixels)
DESKTOP = (1280, 900)
PHONE = (375, 667)


def as_phone(driver) -> None:
    """Lay the page out as a phone would (a window cannot be made this narrow: chromium's
    narrowest is 500 pixels), with a phone's width, height and pixel density, until closed."""
    width, height = PHONE
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 2, "mobile": True},
    )


@contextlib.contextmanager
def chromium(size: tuple[int, int] = DESKTOP) -> Iterator:
    """A headless chromium of its own (its own profile, removed afterwards), at ``size``."""
    try:
        from selenium import webdriver
        from selenium.common.exceptions import WebDriverException
        from selenium.webdriver.chrome.service import Service
    except ImportError as e:
        unavailable(f"selenium is not installed: {e}")
    for path in (CHROMIUM, CHROMEDRIVER):
        if not Path(path).exists():
            unavailable(f"{path} is not installed (apt-get install chromium chromium-driver)")
    profile = tempfile.mkdtemp(prefix="tpn-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-extensions",
        "--disable-background-networking",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        f"--window-size={size[0]},{size[1]}",
    ):
        options.add_argument(argument)
    try:
        driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    except WebDriverException as e:
        shutil.rmtree(profile, ignore_errors=True)
        unavailable(f"chromium cannot start: {e.msg or e}")
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
