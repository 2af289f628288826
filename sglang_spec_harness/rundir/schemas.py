"""JSON Schemas of the run directory's results.json and analysis.json, generated from the pydantic
models that the harness itself reads them with (sglang_spec_harness.rundir.models), for tools outside the harness
(dashboards, CI jobs, other languages). The committed copies are docs/schemas/*.schema.json;
`scripts/json_schemas.py` regenerates them and `make lint` fails when they differ from the models.

A schema says what the harness's reader accepts (pydantic's validation mode): unknown fields are
allowed (a newer harness may add some), and fields the models type as `Any` (results.json's
free-form `params`, `variants`) are unconstrained there. results.json's rules are one schema per rule
kind, chosen by `kind`, each with its kind's numbers.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from sglang_spec_harness.rundir.models import AnalysisRecord, ResultsRecord

DRAFT = "https://json-schema.org/draft/2020-12/schema"  # the draft pydantic generates
RECORD_MODELS: dict[str, type[BaseModel]] = {"results": ResultsRecord, "analysis": AnalysisRecord}


def record_json_schema(name: str) -> str:
    """The JSON Schema of `<name>.json` in a run directory (`results` or `analysis`), as text."""
    return schema_text(RECORD_MODELS[name].model_json_schema(mode="validation"))


def schema_text(schema: dict[str, Any]) -> str:
    """A generated JSON Schema as the committed files hold it."""
    # `$schema` first: validators pick the draft from it
    return json.dumps({"$schema": DRAFT, **schema}, indent=2)
