"""Real-browser fixtures: one ``streamlit run`` server and one headless Debian Chromium per session.

The server runs on 127.0.0.1 with a *fresh, empty* engine cache (``GEM_CACHE_DIR`` in a
temporary folder), like the README's first command on a new machine. Screenshots and the server
log go to ``test-output/`` in the project root.

Without Playwright or Chromium every test here is skipped with the reason, unless
``GEM_REQUIRE_BROWSER=1`` (set by scripts/test.sh once Chromium is installed): then it fails.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tools.browser import (IDLE, MAIN, AppServer, browser_unavailable_reason, error_texts,
                           launch_chromium)

PROJECT = Path(__file__).resolve().parents[2]
OUTPUT = PROJECT / "test-output"
SCREENSHOTS = OUTPUT / "screenshots"
VIEWPORT = {"width": 1400, "height": 1000}
TIMEOUT_MS = 120_000  # first render imports torch: seconds, more on a busy machine


def _required() -> bool:
    return os.environ.get("GEM_REQUIRE_BROWSER", "").strip() not in ("", "0")


def skip_or_fail(reason: str) -> None:
    if _required():
        pytest.fail(f"GEM_REQUIRE_BROWSER is set but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def browser_ok() -> None:
    reason = browser_unavailable_reason()
    if reason:
        skip_or_fail(reason)


@pytest.fixture(scope="session")
def app_server(browser_ok, tmp_path_factory: pytest.TempPathFactory):
    """A fresh Streamlit server of the app with an empty engine cache; always stopped."""
    cache = tmp_path_factory.mktemp("browser-gem-cache")
    OUTPUT.mkdir(exist_ok=True)
    server = AppServer(cache_dir=cache, log_path=OUTPUT / "streamlit-browser-tests.log")
    server.start()
    try:
        server.wait_healthy(timeout=180)
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def chromium(browser_ok):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        try:
            browser = launch_chromium(pw)
        except Exception as exc:  # a broken or sandboxed Chromium
            skip_or_fail(f"Chromium does not start: {exc}")
        try:
            yield browser
        finally:
            browser.close()


#: the hosts a page of the app may ask for: its own server, nothing else (everything runs
#: locally; a favicon or font from a CDN fails offline and tells the world who is looking)
LOCAL_HOSTS = ("127.0.0.1", "localhost")
_NOT_A_HOST = ("data:", "blob:", "about:", "chrome-error:")


def outside_requests(urls: list[str]) -> list[str]:
    """The URLs of ``urls`` that leave the machine (a host other than the app's)."""
    from urllib.parse import urlparse

    return [u for u in urls
            if not u.startswith(_NOT_A_HOST) and urlparse(u).hostname not in LOCAL_HOSTS]


@pytest.fixture
def page(chromium):
    """A new browser context (its own Streamlit session) and page. Every request the page
    makes is recorded; a test fails when one went to a host other than the app's."""
    context = chromium.new_context(viewport=VIEWPORT)
    context.set_default_timeout(TIMEOUT_MS)
    requested: list[str] = []
    context.on("request", lambda request: requested.append(request.url))
    pg = context.new_page()
    try:
        yield pg
    finally:
        context.close()
    outside = sorted(set(outside_requests(requested)))
    assert not outside, f"the page asked hosts other than the app's: {outside}"


def open_app(page, server: AppServer, path: str = "/") -> None:
    """Load a page of the app and wait for its first script run to finish."""
    page.goto(server.url + path)
    page.wait_for_selector(f"{MAIN} [data-testid=stHeading]")
    page.wait_for_selector(IDLE)


def goto_page(page, path: str, title: str) -> None:
    """Switch page through the sidebar navigation (same session); wait for its heading."""
    page.locator(f"[data-testid=stSidebarNav] a[href$='/{path}']").first.click()
    page.wait_for_url(re.compile(rf"/{re.escape(path)}$"))
    page.locator(f"{MAIN} [data-testid=stHeading]").filter(has_text=title).first.wait_for()
    page.wait_for_selector(IDLE)


def heading(page) -> str:
    return page.locator(f"{MAIN} [data-testid=stHeading] h1, {MAIN} [data-testid=stHeading] h2"
                        ).first.inner_text().strip()


def assert_no_errors(page) -> None:
    errors = error_texts(page)
    assert not errors, errors


def screenshot(page, name: str, tall: bool = True) -> Path:
    """A PNG of the whole app under test-output/screenshots (the main area scrolls inside the
    page, so the viewport is stretched to the content's height first)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    if tall:
        height = page.evaluate(
            "() => { const m = document.querySelector('[data-testid=stMain]');"
            " return m ? m.scrollHeight : document.body.scrollHeight; }")
        page.set_viewport_size({"width": VIEWPORT["width"],
                                "height": max(VIEWPORT["height"], min(int(height) + 40, 6000))})
        page.wait_for_timeout(300)
    page.screenshot(path=str(path))
    if tall:
        page.set_viewport_size(VIEWPORT)
    return path
