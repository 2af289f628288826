"""The pages' templates: Jinja2 over `sglang_spec_harness/pages/templates/` (package data).

`base.html` is the document shell every page extends: inline CSS (`page.css`), a
Content-Security-Policy that forbids every load (pages open from disk with no network and no
scripts), the verdict banner and the footer. `macros.html` holds the common pieces (verdict pills,
tables, figures with captions).

Autoescaping is on for every template: a value from a run directory, a database or git is always
shown as text. The only markup that goes in as is, is the harness's own figures, marked safe where
they are made (`sglang_spec_harness.pages.figures.to_svg`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined

from sglang_spec_harness import __version__
from sglang_spec_harness.pages.numbers import MISSING
from sglang_spec_harness.vocabulary import Verdict

VERDICT_CLASS = {v.value: v.value for v in Verdict}


def verdict_class(verdict: Any) -> str:
    """The CSS class of a verdict; anything unknown (or not a string, from a damaged file) is NONE."""
    return VERDICT_CLASS.get(verdict, "NONE") if isinstance(verdict, str) else "NONE"


def relative_link(target: str | Path, start: str | Path) -> str:
    """A link from a page in folder `start` to `target`, relative as the pages are kept together.
    A first segment with a colon gets `./`, so that a folder named `javascript:...` stays a path
    and never reads as a URL scheme."""
    link = Path(os.path.relpath(target, start)).as_posix()
    return f"./{link}" if ":" in link.split("/", 1)[0] else link


_ENV = Environment(
    loader=PackageLoader("sglang_spec_harness.pages", "templates"),
    autoescape=True,  # every template is HTML (or CSS included into one)
    undefined=StrictUndefined,  # a misspelt name fails the render instead of showing nothing
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
)
_ENV.globals.update(verdict_class=verdict_class, harness_version=__version__, missing=MISSING)


def render(template: str, **context: Any) -> str:
    """A whole page. Every page's context has `title`, `banner_class` and `banner_word` (base.html)."""
    return _ENV.get_template(template).render(**context)
