"""The page machinery every HTML page of the harness shares: the run report (`report/`), the trend
page (`history/page.py`) and the bisection page (`bisect/page.py`).

- `render.py`: the Jinja2 environment over `templates/` here (package data),
  autoescaped; `render`, `relative_link`, `verdict_class`.
- `figures.py`: the figure style, colours and the inline-SVG writer (matplotlib).
- `numbers.py`: numbers for people, the one place that writes them (`fmt`, `pct`, `ratio`,
  `interval`, `us`, `seconds`, ..., and `MISSING`); standard library only, so that every stage and
  the command line may import it without the rest.

Nothing here reads a run directory or a database: each page module gathers plain values and its
template lays them out.
"""
