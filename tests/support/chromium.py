"""Headless Chromium for the page tests: Debian's (`/usr/bin/chromium`, or $HARNESS_CHROMIUM), driven by
Playwright; no browser is ever downloaded. The `browser` fixture is in tests/conftest.py (it skips
without Chromium or Playwright); this module imports neither.
"""

from __future__ import annotations

import os
from pathlib import Path

CHROMIUM = Path(os.environ.get("HARNESS_CHROMIUM") or "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
VIEWPORT = {"width": 1280, "height": 800}


def open_report(browser, html: Path):
    """The page, loaded, with what it asked the network for and what it logged."""
    page = browser.new_page(viewport=VIEWPORT)
    requests: list[str] = []
    problems: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    page.on("console", lambda message: problems.append(f"console {message.type}: {message.text}")
            if message.type in ("error", "warning") else None)
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    page.goto(html.as_uri(), wait_until="load")
    return page, requests, problems
