"""Headless Chromium for tests that look at a page as a person would (the docs site, the
`lens view` report): Debian's chromium driven through its chromedriver with selenium.

Without chromium, chromedriver or selenium the test skips, unless the run requires chromium
(LENS_TEST_REQUIRE, as `.ci/run` sets it), where a missing one fails.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from lens_integrations import require, required_runtimes

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver

#: Seconds any one browser command may take (start, page load, a script).
BROWSER_TIMEOUT = 30
# Headless, as root in a container, without a GPU; every host name but 127.0.0.1 resolves
# to nothing, so nothing a page asks for leaves the machine, and Chromium's own background
# services stay off.
CHROMIUM_ARGUMENTS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
)


def browser_programs() -> tuple[str, str]:
    """Debian's chromium and chromedriver, with selenium to drive them; skip without any of
    them, unless the run requires chromium, where a missing one fails."""
    require("selenium")
    chromium, chromedriver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or chromedriver is None:
        found = {"chromium": chromium, "chromedriver": chromedriver}
        missing = " or ".join(name for name, path in found.items() if path is None)
        reason = f"no {missing} program on PATH (Debian: apt-get install chromium chromium-driver)"
        if "chromium" in required_runtimes():
            pytest.fail(f"LENS_TEST_REQUIRE lists chromium, but there is {reason}")
        pytest.skip(f"{reason}; .ci/run installs them")
    return chromium, chromedriver


@contextlib.contextmanager
def chromium_driver(
    programs: tuple[str, str], window: tuple[int, int] = (1280, 900)
) -> Iterator[WebDriver]:
    """Headless Chromium in a window of `window` pixels; every command is bounded by
    BROWSER_TIMEOUT, and both processes are stopped afterwards."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.remote.client_config import ClientConfig

    chromium, chromedriver = programs
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in (*CHROMIUM_ARGUMENTS, f"--window-size={window[0]},{window[1]}"):
        options.add_argument(argument)
    service = Service(executable_path=chromedriver, log_output=subprocess.DEVNULL)
    service.start()
    try:
        driver = webdriver.Remote(
            command_executor=service.service_url,
            options=options,
            client_config=ClientConfig(service.service_url, timeout=BROWSER_TIMEOUT),
        )
        try:
            driver.set_page_load_timeout(BROWSER_TIMEOUT)
            driver.set_script_timeout(BROWSER_TIMEOUT)
            yield driver
        finally:
            driver.quit()
    finally:
        service.stop()
