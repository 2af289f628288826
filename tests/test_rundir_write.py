"""How records are written: `json.dumps(indent=2)`'s document, with each list of plain values on one
line (an analysis.json's views are long series of numbers: one line per value doubled the file)."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from sglang_spec_harness.rundir.write import compact_json

FIXTURES = Path(__file__).parent / "fixtures"

plain = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8)
keys = st.text(max_size=6) | st.integers() | st.booleans() | st.none()
documents = st.recursive(plain, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
                         max_leaves=30)


@settings(max_examples=300, deadline=None)
@given(documents)
def test_it_reads_back_as_json_dumps_would_have_written_it(value):
    assert json.loads(compact_json(value)) == json.loads(json.dumps(value))


def test_lists_of_plain_values_on_one_line_containers_indented():
    text = compact_json({"a": [1, 2.5, "x", None], "b": [{"c": [True]}, []], "d": {}, "e": [], 1: [[1], [2]]})
    assert text == (
        '{\n  "a": [1, 2.5, "x", null],\n  "b": [\n    {\n      "c": [true]\n    },\n    []\n  ],\n'
        '  "d": {},\n  "e": [],\n  "1": [\n    [1],\n    [2]\n  ]\n}'
    )


def test_a_real_analysis_reads_back_and_is_smaller(tmp_path):
    with tarfile.open(FIXTURES / "run_v010_micro_topk1_profiled.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    for path in tmp_path.rglob("*.json"):
        data = json.loads(path.read_text())
        assert json.loads(compact_json(data)) == data
        assert len(compact_json(data)) <= len(json.dumps(data, indent=2))
