"""The page machinery every HTML page of the harness shares: the run report (`html.py`) and the trend
page (`harness/history/page.py`).

One document shell (inline CSS, a Content-Security-Policy that forbids every load, so pages open from
disk with no network and no scripts), one escaping helper and the common pieces (verdict pills,
tables, figures with captions). Figures are inline SVG from `harness.report.figures`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from html import escape
from typing import Any

CSS = """
:root { --pass:#1a7f37; --fail:#cf222e; --inconclusive:#9a6700; --none:#57606a; --line:#d0d7de; --muted:#57606a; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", Arial, sans-serif;
       color: #1f2328; background: #f6f8fa; }
main { max-width: 1180px; margin: 0 auto; padding: 0 20px 40px; }
header.banner { padding: 14px 20px; color: #fff; }
header.banner .inner { max-width: 1180px; margin: 0 auto; display: flex; gap: 24px; align-items: center; }
.banner.PASS { background: var(--pass); } .banner.FAIL { background: var(--fail); }
.banner.INCONCLUSIVE { background: #bf8700; } .banner.NONE { background: var(--none); }
.verdict-word { font-size: 44px; font-weight: 800; letter-spacing: 1px; line-height: 1; white-space: nowrap; }
.banner .meta { font-size: 13px; opacity: .95; }
.banner .meta b { font-size: 18px; }
.why { margin: 14px 0 6px; padding: 10px 14px; border-radius: 6px; border-left: 6px solid; background: #fff; }
.why.FAIL { border-color: var(--fail); } .why.INCONCLUSIVE { border-color: #bf8700; } .why.NONE { border-color: var(--none); }
.why h2 { margin: 0 0 4px; font-size: 15px; }
.why ul { margin: 0; padding-left: 18px; }
section { background: #fff; border: 1px solid var(--line); border-radius: 6px; padding: 12px 16px; margin: 14px 0; }
section > h2 { margin: 0 0 8px; font-size: 17px; }
h3 { font-size: 14px; margin: 14px 0 6px; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { border-bottom: 1px solid #eaeef2; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f6f8fa; font-weight: 600; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
code, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, "DejaVu Sans Mono", monospace; font-size: 12px; }
.pill { display: inline-block; min-width: 96px; text-align: center; border-radius: 10px; padding: 0 8px;
        font-weight: 700; font-size: 12px; color: #fff; }
.pill.PASS { background: var(--pass); } .pill.FAIL { background: var(--fail); }
.pill.INCONCLUSIVE { background: #bf8700; } .pill.NONE { background: var(--none); }
.pill.INFO { background: #fff; color: var(--muted); border: 1px solid var(--line); }
tr.rule-FAIL td { background: #ffebe9; } tr.rule-INCONCLUSIVE td { background: #fff8c5; }
tr.rule-INFO td { color: var(--muted); }
.notes { border-left: 6px solid #bf8700; background: #fffbea; }
.notes ul { margin: 0; padding-left: 18px; }
.variants { display: flex; gap: 14px; flex-wrap: wrap; }
.variant { flex: 1 1 320px; border: 1px solid var(--line); border-radius: 6px; padding: 8px 12px; border-top: 5px solid; }
.variant h3 { margin: 0 0 4px; }
figure { margin: 10px 0 18px; }
figure svg.figure-svg { width: 100%; max-width: 1100px; height: auto; display: block; }
figcaption { color: var(--muted); font-size: 13px; margin-top: 4px; }
figcaption b { color: #1f2328; }
.missing { color: var(--muted); font-style: italic; padding: 8px; border: 1px dashed var(--line); border-radius: 6px; }
nav.toc { font-size: 13px; margin: 8px 0; }
nav.toc a { margin-right: 12px; }
details { margin: 2px 0; } summary { cursor: pointer; color: var(--muted); }
details.rule summary { color: inherit; } .rule-details { color: var(--muted); font-size: 12px; padding: 4px 0 2px 14px; }
.delta-down { color: var(--pass); } .delta-up { color: var(--fail); }
td.diff { background: #fff8c5; }
.grid { display: flex; flex-wrap: wrap; gap: 8px 14px; }
.grid figure { flex: 1 1 540px; max-width: 560px; margin: 4px 0 10px; }
footer { color: var(--muted); font-size: 12px; margin-top: 20px; }
"""

VERDICT_CLASS = {"PASS": "PASS", "FAIL": "FAIL", "INCONCLUSIVE": "INCONCLUSIVE", "INFO": "INFO"}

# No network at all: block anything a trace name, a run name or a future edit might try to load.
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"


def esc(value: Any) -> str:
    """Text for HTML content or a quoted attribute."""
    return escape(str(value), quote=True)


def verdict_class(verdict: str | None) -> str:
    return VERDICT_CLASS.get(verdict or "", "NONE")


def pill(verdict: str | None, text: str | None = None) -> str:
    return f'<span class="pill {verdict_class(verdict)}">{esc(text or verdict or "NO VERDICT")}</span>'


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], numeric: Sequence[int] = (), raw: bool = False) -> str:
    """An HTML table; cells are escaped unless `raw` (then the caller escaped them)."""
    head = "".join(f'<th class="num">{esc(h)}</th>' if i in numeric else f"<th>{esc(h)}</th>" for i, h in enumerate(headers))
    body = []
    for row in rows:
        cells = "".join(
            f'<td class="num">{c if raw else esc(c)}</td>' if i in numeric else f"<td>{c if raw else esc(c)}</td>"
            for i, c in enumerate(row)
        )
        body.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def figure(svg: str | None, caption: str, missing: str) -> str:
    """An inline SVG with its caption (raw HTML), or a dashed box saying why there is none."""
    if svg is None:
        return f'<figure><div class="missing">{esc(missing)}</div><figcaption>{caption}</figcaption></figure>'
    return f"<figure>{svg}<figcaption>{caption}</figcaption></figure>"


def document(title: str, body: Iterable[str]) -> str:
    """The whole page: the shell around already-rendered body parts."""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>{''.join(body)}</body></html>\n"
    )
