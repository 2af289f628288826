"""Write the committed JSON Schemas from the pydantic models, or (--check, in `make lint`) fail when a
committed one differs from its model: the schemas are generated, never edited by hand.

  .venv/bin/python scripts/json_schemas.py          # regenerate every schema
  .venv/bin/python scripts/json_schemas.py --check  # exit 1 naming the stale ones

Each file is what `harness validate --schema NAME` prints (docs/schemas/README.md).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from sglang_spec_harness.pipeline import outcome_json_schema
from sglang_spec_harness.rundir.schemas import record_json_schema
from sglang_spec_harness.scenario import scenario_json_schema

REPO = Path(__file__).resolve().parents[1]
# The scenario's stays beside the scenarios, whose `yaml-language-server` lines name it by a relative path.
SCHEMAS: dict[Path, Callable[[], str]] = {
    REPO / "scenarios" / "scenario.schema.json": scenario_json_schema,
    REPO / "docs" / "schemas" / "results.schema.json": lambda: record_json_schema("results"),
    REPO / "docs" / "schemas" / "analysis.schema.json": lambda: record_json_schema("analysis"),
    REPO / "docs" / "schemas" / "run.schema.json": outcome_json_schema,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 when one differs")
    args = parser.parse_args(argv)
    stale = []
    for path, generate in SCHEMAS.items():
        text = generate() + "\n"  # as `harness validate --schema NAME > FILE` writes it
        if args.check:
            if not path.is_file() or path.read_text() != text:
                stale.append(path.relative_to(REPO))
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    for path in stale:
        print(f"{path}: differs from the model it is generated from; regenerate: python scripts/json_schemas.py",
              file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
