"""Markup-breaking payloads, and the check that a page built with them shows them as text and runs
nothing (tests/test_report_escaping.py, tests/test_history_sweep.py)."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

from support.chromium import open_report

SCRIPT = "<script>window.__pwned='script'</script>"
ATTRIBUTE = "\"><img src=x onerror=\"window.__pwned='img'\">"
SINGLE = "'><svg onload=window.__pwned='svg'>"
SCHEME = "javascript:window.__pwned='link'"
PAYLOADS = (SCRIPT, ATTRIBUTE, SINGLE)


class PageElements(HTMLParser):
    """The tags, event-handler attributes and link targets of a page's source."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.handlers: list[tuple[str, str]] = []
        self.hrefs: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.handlers += [(tag, name) for name, _ in attrs if name.lower().startswith("on")]
        self.hrefs += [value for name, value in attrs if name in ("href", "xlink:href", "src") and value is not None]


def is_relative(href: str) -> bool:
    """A path relative to the page: no URL scheme (`javascript:`), no host, no absolute path."""
    return not re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", href) and not href.startswith("/")


def assert_page_inert(page_file: Path, browser, needles: list[str]) -> list[str]:
    """The page's source has no injected element, handler or link; in Chromium no script runs,
    nothing is fetched and every needle is on the page as text. Returns the links."""
    parsed = PageElements()
    parsed.feed(page_file.read_text())
    assert not {"script", "img", "iframe", "object", "embed", "link", "base", "form"} & set(parsed.tags)
    assert parsed.handlers == []
    assert [h for h in parsed.hrefs if not h.startswith("#") and not is_relative(h)] == []
    page, requests, problems = open_report(browser, page_file)
    try:
        page.wait_for_timeout(300)  # an onload/onerror fires late
        assert problems == [] and requests == [page_file.as_uri()], (problems, requests)
        assert page.evaluate("() => window.__pwned") is None
        text = page.evaluate("() => document.body.textContent")
        for needle in needles:
            assert needle in text, needle
    finally:
        page.close()
    return parsed.hrefs
