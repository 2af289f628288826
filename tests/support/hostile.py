"""Hostile and broken inputs for the real command line, as Hypothesis strategies, and the judge of
what the harness did with them. Shared by tests/test_hostile_inputs.py (a few seeded examples per
class, in `make test`) and benchmarks/fuzz_inputs.py (many more, each in a forked process whose
time and peak memory are measured).

A case is files written into a fresh directory plus the `harness` command lines to run on them,
and what each may answer. Every case must end with one of its allowed exit codes, no traceback,
and, for bad input (exit 2), exactly one line on stderr naming a file of the case.

Classes (the `CLASSES` keys):
  scenario   scenario YAML: mutated keys, types and values; encodings; anchors and aliases
             (billion laughs); deep nesting; duplicate keys; truncation; flipped bytes; huge files.
             `harness validate` and `harness run --dry-run`: 0 or 2.
  kineto     Kineto traces (synthetic per writer, and small real ones): wrong types in every field
             the reader uses, truncation at random offsets, flipped bytes (in the JSON and in the
             gzip stream), gzip bombs and lying gzip trailers. `harness analyze`: 0 or 2.
  nsys       Nsight Systems SQLite exports: cells of other SQLite types in the columns the reader
             uses, dropped tables and columns, flipped bytes, truncation. `harness analyze`: 0 or 2.
  rundir     run directories: deleted, truncated or garbage evidence files, wrong schema versions,
             a deleted trial (`damage`: `harness check` must say 2 or 3, never PASS), and values of
             any type anywhere, flipped bytes (`values`: any verdict, no traceback). Then
             `harness report` on the result: 0 or 2.
"""

from __future__ import annotations

import contextlib
import copy
import gzip
import io
import json
import os
import random
import shutil
import signal
import sqlite3
import sys
import tempfile
import time
import traceback
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Callable

import yaml
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
SHARED_TRACES = Path(os.environ.get("HARNESS_SHARED_TRACES") or REPO.parent / "shared" / "traces")
SMALL_REAL_TRACES = ("tracelens_sglang_qwen3_8b_decode_rocm.json.gz", "tracelens_vllm_decode_full_graph_execution_rocm.json.gz",
                     "kineto_unittest_after_fix_trace.json")


# ---- what a case is and how it is judged ------------------------------------------------------------


@dataclass
class Step:
    argv: list[str]
    allowed: frozenset[int]
    why: str = ""  # what the allowed codes stand for, for the failure message


@dataclass
class Case:
    kind: str  # the class (CLASSES key)
    label: str  # the mutation, e.g. "truncate", "field-type"
    steps: list[Step]
    files: list[Path] = field(default_factory=list)  # a bad-input message must name one of these


@dataclass
class Outcome:
    code: int | None  # None: raised (in process) or killed
    stdout: str
    stderr: str
    seconds: float
    max_rss_mb: float | None = None
    timed_out: bool = False
    exception: str | None = None


def problems(case: Case, step: Step, outcome: Outcome) -> list[str]:
    """What the harness did wrong with one step of a case (empty: it behaved)."""
    found = []
    if outcome.timed_out:
        found.append(f"no answer within the time limit ({outcome.seconds:.0f} s)")
    if outcome.exception or "Traceback (most recent call last)" in outcome.stderr + outcome.stdout:
        found.append(f"traceback: {(outcome.exception or outcome.stderr)[-600:]}")
    elif outcome.code not in step.allowed:
        found.append(f"exit {outcome.code}, allowed {sorted(step.allowed)} ({step.why}); stderr: {outcome.stderr[-300:]}")
    if outcome.code == 2 and not found:
        lines = outcome.stderr.splitlines()
        command = step.argv[0]
        if len(lines) != 1 or not lines[0].startswith(f"harness {command}: "):
            found.append(f"bad input must be one line 'harness {command}: ...', got {outcome.stderr[-300:]!r}")
        elif case.files and not any(str(f) in lines[0] or f.name in lines[0] for f in case.files):
            found.append(f"the message names no file of the case: {lines[0][:300]}")
    return found


def run_in_process(argv: list[str]) -> Outcome:
    """`harness ARGV` through the real entry point, in this process (tests)."""
    from sglang_spec_harness.commands.cli import main

    out, err = io.StringIO(), io.StringIO()
    started = time.perf_counter()
    code, exception = None, None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse usage errors
            code = exc.code if isinstance(exc.code, int) else 2
        except BaseException:  # a traceback is the finding
            exception = traceback.format_exc()
    return Outcome(code, out.getvalue(), err.getvalue(), time.perf_counter() - started, exception=exception)


def run_forked(argv: list[str], timeout_s: float = 120.0) -> Outcome:
    """`harness ARGV` in a forked child (modules already imported, state isolated): its exit code,
    output, wall time and peak RSS (ru_maxrss of the child, which counts pages shared with this
    process, so it is an upper bound). Killed past `timeout_s`."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        pid = os.fork()
        if pid == 0:  # child
            code = 99
            try:
                os.dup2(out.fileno(), 1)
                os.dup2(err.fileno(), 2)
                sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", closefd=False), write_through=True)
                sys.stderr = io.TextIOWrapper(os.fdopen(2, "wb", closefd=False), write_through=True)
                from sglang_spec_harness.commands.cli import main

                try:
                    code = main(argv)
                except SystemExit as exc:
                    code = exc.code if isinstance(exc.code, int) else 2
                except BaseException:
                    traceback.print_exc()
                    code = 99
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code if isinstance(code, int) else 99)
        timed_out = False
        while True:
            waited, status, usage = os.wait4(pid, os.WNOHANG)
            if waited:
                break
            if time.perf_counter() - started > timeout_s:
                os.kill(pid, signal.SIGKILL)
                waited, status, usage = os.wait4(pid, 0)
                timed_out = True
                break
            time.sleep(0.005)
        seconds = time.perf_counter() - started
        out.seek(0)
        err.seek(0)
        code = os.waitstatus_to_exitcode(status)
        return Outcome(None if timed_out else code, out.read().decode(errors="replace"), err.read().decode(errors="replace"),
                       seconds, usage.ru_maxrss / 1024, timed_out)


# ---- values of any JSON type --------------------------------------------------------------------------

def _scalars(*odd: str) -> st.SearchStrategy:
    return st.one_of(
        st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=30),
        st.sampled_from(["0x0", "0x7f3a2c000d10", "12", "-1", "1e999", "NaN", "(nil)", "", "<script>", "[/]",
                         "$\\frac{", "\x00", "\x1b[2J", "a\nb", *odd]),
    )


def _json_like(scalars: st.SearchStrategy) -> st.SearchStrategy:
    return st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                         st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                        max_leaves=8)


any_yaml = _json_like(_scalars())
any_json = _json_like(_scalars("\ud800", "x\udfff", "\ufffe"))  # JSON escapes lone surrogates; YAML cannot dump them
# right type, any size: values no profiler or harness writes, which must still not crash anything
EXTREME_NUMBERS = st.sampled_from([0, -1, -2, 1, 2**31, 2**63 - 1, -(2**63), 2**64 - 1, 0.5, -0.5, 1e-300, 1e300, -1e300,
                                   1.7976931348623157e308, -1e15, 1e15])
def _paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path (keys and indices) into a JSON-like value."""
    out = [prefix] if prefix else []
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, prefix + (i,))
    return out


def _get(doc: Any, path: tuple) -> Any:
    for key in path:
        doc = doc[key]
    return doc


def _set(doc: Any, path: tuple, value: Any, delete: bool = False) -> None:
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    if delete:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value


def flip(data: bytes, rnd: random.Random, count: int) -> bytes:
    buffer = bytearray(data)
    for _ in range(count):
        if buffer:
            buffer[rnd.randrange(len(buffer))] ^= 1 << rnd.randrange(8)
    return bytes(buffer)


# ---- scenario files -------------------------------------------------------------------------------------

MICRO_SCENARIO = {
    "name": "fuzz", "description": "micro", "engine": "micro",
    "server": {"args": {"--speculative-num-steps": 3, "--vocab-size": 512}, "startup_timeout_s": 60},
    "variants": {"baseline": {"description": "softmax", "args": {"--disable-topk1-fast-path": True}},
                 "candidate": {"description": "argmax", "patches": ["sglang_spec_harness.patches.sglang_restore_topk1_softmax"]}},
    "workload": {"num_requests": 4, "input_len": 16, "output_len": 16},
    "trials": {"repetitions": 2, "profiled": 1, "seed": 3},
    "patterns": {"argmax": "^aten::argmax$"},
    "regions": {"rules": [{"name": "DRAFT_DECODE", "regex": "^step\\[DECODE"}]},
    "rules": [
        {"name": "no_softmax", "kind": "kernel_count", "region": "DRAFT_DECODE", "pattern": "softmax",
         "variants": ["candidate"], "equals": 0},
        {"name": "accept", "kind": "accept_length"}, {"name": "identity", "kind": "output_identity"},
        {"name": "tpot", "kind": "tpot_gain", "min_gain": 0.01}, {"name": "explained", "kind": "explained_gain"},
    ],
}


def base_scenarios() -> list[dict[str, Any]]:
    bases = [MICRO_SCENARIO]
    for path in sorted((REPO / "scenarios").glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        if isinstance(data, dict):
            bases.append(data)
    return bases


def _laughs(depth: int, width: int) -> str:
    lines = ["lol0: &lol0 [" + ", ".join(["lol"] * width) + "]"]
    for i in range(1, depth + 1):
        lines.append(f"lol{i}: &lol{i} [" + ", ".join([f"*lol{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


@st.composite
def scenario_case(draw: Callable, root: Path) -> Case:
    bases = base_scenarios()
    doc = copy.deepcopy(bases[draw(st.integers(0, len(bases) - 1))])
    rnd = draw(st.randoms(use_true_random=False))
    label = []
    for _ in range(draw(st.integers(0, 3))):
        paths = _paths(doc)
        path = paths[draw(st.integers(0, len(paths) - 1))]
        action = draw(st.sampled_from(["delete", "retype", "unknown-key", "rename"]))
        label.append(action)
        if action == "delete":
            _set(doc, path, None, delete=True)
        elif action == "retype":
            _set(doc, path, draw(any_yaml))
        else:
            parent = doc
            for key in path[:-1]:
                parent = parent[key]
            if isinstance(parent, dict):
                key = draw(st.text(min_size=1, max_size=12))
                parent[key] = parent.pop(path[-1]) if action == "rename" else draw(any_yaml)
    text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
    encoding = "utf-8"
    form = draw(st.sampled_from(["plain", "plain", "laughs", "alias", "duplicate", "nesting", "truncate", "flip",
                                 "utf-16", "utf-16-nobom", "utf-8-bom", "latin-1", "control", "huge", "tabs"]))
    label.append(form)
    if form == "laughs":  # a billion laughs, referenced from a field the scenario reads
        depth, width = draw(st.integers(2, 9)), draw(st.integers(2, 10))
        target = draw(st.sampled_from(["description", "server.args.--x", "patterns.p", "variants.baseline.env.K"]))
        head, *rest = target.split(".")
        text = _laughs(depth, width) + text + "\n"
        if rest:
            text += f"{head}:\n" + "".join("  " * (i + 1) + f"{k}:\n" for i, k in enumerate(rest[:-1]))
            text += "  " * len(rest) + f"{rest[-1]}: *lol{depth}\n"
        else:
            text += f"{head}: *lol{depth}\n"
    elif form == "alias":  # an anchor reused where a different type is expected
        text = "shared: &shared {name: x, engine: micro}\n" + text + "workload: *shared\n"
    elif form == "duplicate":
        lines = text.splitlines(keepends=True)
        top = [line for line in lines if line[:1].isalpha()]
        text += draw(st.sampled_from(top)) if top else ""
    elif form == "nesting":
        depth = draw(st.integers(50, 20000))
        text += "deep: " + "[" * depth + "]" * depth + "\n"
    elif form == "truncate":
        text = text[: draw(st.integers(0, max(len(text) - 1, 0)))]
    elif form == "control":
        position = draw(st.integers(0, len(text)))
        text = text[:position] + draw(st.sampled_from(["\x00", "\x1b[2J", "\x07", "\ufeff", "\u2028", "\x85"])) + text[position:]
    elif form == "huge":
        text += "description: " + json.dumps("x" * ((1 << 20) + draw(st.integers(0, 4096)))) + "\n"
    elif form == "tabs":
        text = text.replace("  ", "\t", draw(st.integers(1, 3)))
    data = text.encode(encoding)
    if form == "utf-16":
        data = text.encode("utf-16")
    elif form == "utf-16-nobom":
        data = text.encode("utf-16-le")
    elif form == "utf-8-bom":
        data = b"\xef\xbb\xbf" + data
    elif form == "latin-1":
        data = (text + "description: caf\u00e9\n").encode("latin-1", "replace")
    elif form == "flip":
        data = flip(data, rnd, draw(st.integers(1, 8)))
    path = root / "scenario.yaml"
    path.write_bytes(data)
    steps = [Step(["validate", str(path)], frozenset({0, 2}), "valid or bad input"),
             Step(["run", str(path), "--dry-run", "--out", str(root / "runs")], frozenset({0, 2}), "planned or bad input")]
    return Case("scenario", "+".join(label), steps, [path])


# ---- Kineto traces ------------------------------------------------------------------------------------------

_NEEDED = ("cat", "name", "pid", "tid", "ts", "dur", "args", "args.correlation", "args.device", "args.stream",
           "args.graph id")


def synthetic_traces() -> list[dict[str, Any]]:
    from support.kineto_traces import cuda_trace, rocm_62_trace

    return [cuda_trace(), rocm_62_trace()]


def real_traces() -> list[Path]:
    return [SHARED_TRACES / n for n in SMALL_REAL_TRACES if (SHARED_TRACES / n).exists()]


def _load(path: Path) -> dict[str, Any]:
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)


def gzip_bomb(path: Path, decompressed: int, filler: bytes = b" ") -> None:
    """A gzip file of `decompressed` bytes that begins like a trace: ~1000x smaller on disk."""
    chunk = filler * (1 << 20)
    co = zlib.compressobj(9, zlib.DEFLATED, 31)
    with open(path, "wb") as f:
        f.write(co.compress(b'{"traceEvents": ['))
        left = decompressed
        while left > 0:
            f.write(co.compress(chunk[: min(left, len(chunk))]))
            left -= len(chunk)
        f.write(co.compress(b"]}"))
        f.write(co.flush())


@st.composite
def kineto_case(draw: Callable, root: Path, bomb_bytes: tuple[int, int] = (8 << 20, 64 << 20)) -> Case:
    rnd = draw(st.randoms(use_true_random=False))
    sources: list[Any] = synthetic_traces() + real_traces()
    source = sources[draw(st.integers(0, len(sources) - 1))]
    doc = _load(source) if isinstance(source, Path) else copy.deepcopy(source)
    events = doc["traceEvents"]
    form = draw(st.sampled_from(["field-type", "field-type", "field-delete", "extreme", "extreme", "truncate",
                                 "flip-json", "flip-gzip", "bomb", "trailer", "structure"]))
    gz = draw(st.booleans())
    path = root / ("trace.json.gz" if gz or form in ("flip-gzip", "bomb", "trailer") else "trace.json")
    label = form
    if form in ("field-type", "field-delete"):
        routed = [e for e in events if isinstance(e, dict) and e.get("cat") in
                  ("kernel", "cuda_runtime", "user_annotation", "cpu_op", "python_function", "gpu_memcpy")]
        for _ in range(draw(st.integers(1, 4))):
            event = routed[draw(st.integers(0, len(routed) - 1))] if routed else events[0]
            name = draw(st.sampled_from(_NEEDED))
            label += f":{name}"
            target, key = (event.setdefault("args", {}), name[5:]) if name.startswith("args.") else (event, name)
            if not isinstance(target, dict):
                continue
            if form == "field-delete":
                target.pop(key, None)
            else:
                target[key] = draw(any_json)
    if form == "extreme":  # valid types, values no profiler writes: the analysis must still not crash
        for _ in range(draw(st.integers(1, 12))):
            event = events[draw(st.integers(0, len(events) - 1))]
            if not isinstance(event, dict):
                continue
            name = draw(st.sampled_from(("ts", "dur", "pid", "tid", "args.correlation", "args.stream", "args.graph id")))
            label += f":{name}"
            target, key = (event.setdefault("args", {}), name[5:]) if name.startswith("args.") else (event, name)
            if isinstance(target, dict):
                target[key] = draw(EXTREME_NUMBERS)
    data = json.dumps(doc).encode()
    if form == "truncate":
        data = data[: draw(st.integers(0, len(data) - 1))]
    elif form == "flip-json":
        data = flip(data, rnd, draw(st.integers(1, 16)))
    elif form == "structure":
        data = draw(st.sampled_from([
            b'{"traceEvents": {}}', b'{"traceEvents": "x"}', b"[1, 2, 3]", b'{"traceEvents": [1]}', b"{}", b"[]",
            b'{"traceEvents": [' + b"[" * 100000 + b"]" * 100000 + b"]}", b'{"traceEvents": [{"cat": "kernel"}]}',
            b"\xff\xfe{", b"null", b'{"traceEvents": [{}, {"cat": null, "name": null, "args": null}]}',
            b'{"distributedInfo": {"rank": 1e999}, "traceEvents": [{"cat": "cpu_op", "ts": 1e999}]}',
        ]))
    if form == "bomb":
        gzip_bomb(path, draw(st.integers(*bomb_bytes)), draw(st.sampled_from([b" ", b"0", b"{},", b"\x00"])))
    else:
        if path.suffix == ".gz":
            data = gzip.compress(data)
            if form == "flip-gzip":
                data = flip(data, rnd, draw(st.integers(1, 8)))
            elif form == "trailer":  # the size field of the trailer claims anything
                data = data[:-4] + draw(st.integers(0, 2**32 - 1)).to_bytes(4, "little")
        path.write_bytes(data)
    return Case("kineto", label, [Step(["analyze", str(path)], frozenset({0, 2}), "analysed or bad input")], [path])


# ---- Nsight Systems exports -------------------------------------------------------------------------------

_NSYS_COLUMNS = {
    "CUPTI_ACTIVITY_KIND_KERNEL": ("start", "end", "deviceId", "streamId", "correlationId", "globalPid", "demangledName", "graphId"),
    "CUPTI_ACTIVITY_KIND_RUNTIME": ("start", "end", "globalTid", "correlationId", "nameId"),
    "NVTX_EVENTS": ("start", "end", "eventType", "text", "textId", "globalTid"),
    "StringIds": ("id", "value"),
    "META_DATA_CAPTURE": ("name", "value"),
}
_SQL_VALUES = st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=False), st.text(max_size=20),
                        st.binary(max_size=20), st.sampled_from(["1e999", "12", "0x10", "nan"]))


@st.composite
def nsys_case(draw: Callable, root: Path, real: bool = False) -> Case:
    from support.nsys_exports import build

    rnd = draw(st.randoms(use_true_random=False))
    path = root / "trace.sqlite"
    real_path = SHARED_TRACES / "nsysai_h100_2gpu_1s.sqlite"
    if real and real_path.exists() and draw(st.booleans()):
        shutil.copyfile(real_path, path)
    else:
        build(path)
    form = draw(st.sampled_from(["cell", "cell", "drop-table", "drop-column", "flip", "truncate"]))
    label = form
    if form in ("cell", "drop-table", "drop-column"):
        with contextlib.closing(sqlite3.connect(path)) as db, db:
            table = draw(st.sampled_from(sorted(_NSYS_COLUMNS)))
            column = draw(st.sampled_from(_NSYS_COLUMNS[table]))
            label += f":{table}.{column}"
            try:
                if form == "cell":
                    db.execute(f'UPDATE {table} SET "{column}" = ? WHERE rowid IN '
                               f"(SELECT rowid FROM {table} ORDER BY random() LIMIT ?)",
                               (draw(_SQL_VALUES), draw(st.integers(1, 5))))
                elif form == "drop-table":
                    db.execute(f"DROP TABLE {table}")
                else:
                    db.execute(f'ALTER TABLE {table} DROP COLUMN "{column}"')
            except sqlite3.DatabaseError:
                pass  # e.g. a column SQLite will not drop: the file stays as it was
    elif form == "flip":
        path.write_bytes(flip(path.read_bytes(), rnd, draw(st.integers(1, 64))))
    else:
        data = path.read_bytes()
        path.write_bytes(data[: draw(st.integers(0, len(data) - 1))])
    return Case("nsys", label, [Step(["analyze", str(path)], frozenset({0, 2}), "analysed or bad input")], [path])


# ---- run directories --------------------------------------------------------------------------------------


def build_base_runs(root: Path) -> list[Path]:
    """Two complete, PASSing run directories: the planted one (tests/rundir_factory.py) and the
    hand-built one with real CPU profiler traces (tests/test_report.py), checked once."""
    from support.rundir_factory import Arm, file_facts, write_run_dir
    from support.report_run import make_run_dir

    from sglang_spec_harness.verdict.judge import check_run_dir

    planted = write_run_dir(
        root / "planted", Arm([10.0, 10.1, 9.9, 10.05, 10.2, 9.95], profile=[file_facts(softmax_per_replay=2)]),
        Arm([9.0, 9.1, 8.9, 9.05, 9.2, 8.95], profile=[file_facts(softmax_per_replay=0)]))
    assert check_run_dir(planted).verdict == "PASS"
    from sglang_spec_harness.scenario import SCENARIO_END

    traced = make_run_dir(root / "traced")
    for trial_json in traced.glob("trials/*/trial.json"):  # no requests recorded: say so, as a whole trial would
        info = json.loads(trial_json.read_text())
        info["summary"]["requests"] = 0
        trial_json.write_text(json.dumps(info))
    scenario = yaml.safe_load((traced / "scenario.yaml").read_text())
    scenario["rules"] = [
        {"name": "no_softmax", "kind": "kernel_count", "region": "DRAFT_DECODE", "pattern": "softmax",
         "variants": ["candidate"], "equals": 0},
        {"name": "accept", "kind": "accept_length"}, {"name": "tpot", "kind": "tpot_gain", "min_gain": 0.01},
    ]
    (traced / "scenario.yaml").write_text(yaml.safe_dump(scenario, sort_keys=False) + SCENARIO_END + "\n")
    check_run_dir(traced)
    return [planted, traced]


def evidence_files(run_dir: Path) -> list[Path]:
    """The files a verdict stands on."""
    files = [run_dir / "run.json", run_dir / "scenario.yaml", run_dir / "analysis.json"]
    files += sorted(run_dir.glob("trials/*/trial.json")) + sorted(run_dir.glob("trials/*/requests.jsonl"))
    return [f for f in files if f.exists() and (f.name != "requests.jsonl" or f.stat().st_size)]


@st.composite
def rundir_case(draw: Callable, root: Path, bases: list[Path]) -> Case:
    rnd = draw(st.randoms(use_true_random=False))
    base = bases[draw(st.integers(0, len(bases) - 1))]
    run_dir = root / "runs" / base.name
    shutil.copytree(base, run_dir, symlinks=True)
    evidence = evidence_files(run_dir)
    target = evidence[draw(st.integers(0, len(evidence) - 1))]
    form = draw(st.sampled_from(["delete", "truncate", "garbage", "schema-version", "delete-trial", "drop-lines",
                                 "value", "value", "extreme", "extreme", "flip", "flip-any", "results"]))
    damage = form in ("delete", "truncate", "garbage", "schema-version", "delete-trial", "drop-lines")
    label = f"{form}:{target.relative_to(run_dir)}"
    if form == "delete":
        target.unlink()
    elif form == "truncate":
        data = target.read_bytes()
        target.write_bytes(data[: draw(st.integers(0, len(data) - 1))])
    elif form == "garbage":
        target.write_bytes(draw(st.sampled_from([b"", b"\x00" * 64, b"\xff\xfe\xfd", b"[]", b"null", b"{}",
                                                 bytes(rnd.randrange(256) for _ in range(200))])))
    elif form == "schema-version":
        target = draw(st.sampled_from([run_dir / "run.json", run_dir / "analysis.json"]))
        label = f"{form}:{target.name}"
        doc = json.loads(target.read_text())
        doc["schema_version"] = draw(st.sampled_from([0, 3, 99, "1", None, True, 1.5, [1]]))
        target.write_text(json.dumps(doc))
    elif form == "delete-trial":
        trials = sorted((run_dir / "trials").iterdir())
        victim = trials[draw(st.integers(0, len(trials) - 1))]
        label = f"{form}:{victim.name}"
        shutil.rmtree(victim)
    elif form == "drop-lines":
        files = sorted(f for f in run_dir.glob("trials/*/requests.jsonl") if f.stat().st_size)
        if files:
            target = files[draw(st.integers(0, len(files) - 1))]
            lines = target.read_text().splitlines(keepends=True)
            target.write_text("".join(lines[: draw(st.integers(0, len(lines) - 1))]))
            label = f"{form}:{target.relative_to(run_dir)}"
        else:
            damage = False
    elif form == "value" and target.suffix in (".json", ".jsonl"):
        lines = target.read_text().splitlines()
        line = draw(st.integers(0, len(lines) - 1))
        doc = json.loads(lines[line])
        paths = _paths(doc)
        if paths:
            _set(doc, paths[draw(st.integers(0, len(paths) - 1))], draw(any_json))
        lines[line] = json.dumps(doc)
        target.write_text("\n".join(lines) + "\n")
    elif form == "extreme" and target.suffix in (".json", ".jsonl"):  # numbers of the right type, any size
        lines = target.read_text().splitlines()
        for _ in range(draw(st.integers(1, 6))):
            line = draw(st.integers(0, len(lines) - 1))
            doc = json.loads(lines[line])
            numeric = [p for p in _paths(doc) if isinstance(_get(doc, p), (int, float)) and not isinstance(_get(doc, p), bool)]
            if numeric:
                path = numeric[draw(st.integers(0, len(numeric) - 1))]
                _set(doc, path, draw(EXTREME_NUMBERS))
                label += f":{'.'.join(map(str, path))}"
            lines[line] = json.dumps(doc)
        target.write_text("\n".join(lines) + "\n")
    elif form in ("flip", "value", "extreme"):
        target.write_bytes(flip(target.read_bytes(), rnd, draw(st.integers(1, 8))))
    elif form == "flip-any":
        every = [p for p in run_dir.rglob("*") if p.is_file() and not p.is_symlink()]
        target = every[draw(st.integers(0, len(every) - 1))]
        label = f"{form}:{target.relative_to(run_dir)}"
        target.write_bytes(flip(target.read_bytes(), rnd, draw(st.integers(1, 8))))
    check_allowed = frozenset({2, 3}) if damage else frozenset({0, 1, 2, 3})
    steps = [Step(["check", str(run_dir)], check_allowed, "damaged: bad input or INCONCLUSIVE, never PASS or FAIL"
                  if damage else "any verdict or bad input")]
    if form == "results":  # the report of a run whose results.json was damaged after the check
        steps = [Step(["check", str(run_dir)], frozenset({0, 1, 3}), "the base run's verdict")]
        steps.append(Step(["_damage_results", str(run_dir)], frozenset({0}), ""))
    steps.append(Step(["report", str(run_dir)], frozenset({0, 2}), "a report, or not a run directory at all"))
    files = [run_dir] + [p for p in run_dir.rglob("*")]
    return Case("rundir", label, steps, files)


def damage_results(run_dir: Path, rnd: random.Random) -> None:
    """Between `check` and `report`: results.json with one value of any type, or cut short."""
    path = run_dir / "results.json"
    if not path.exists():
        return
    if rnd.random() < 0.3:
        data = path.read_bytes()
        path.write_bytes(data[: rnd.randrange(max(len(data), 1))])
        return
    doc = json.loads(path.read_text())
    paths = _paths(doc)
    value = rnd.choice([None, True, -1, 0, 1e308, -1e308, 2**70, 0.5, "x", "<script>", "[/]", "$x$", [], {}, [1, "a"],
                        {"a": []}])
    _set(doc, rnd.choice(paths), value)
    path.write_text(json.dumps(doc))


CLASSES = ("scenario", "kineto", "nsys", "rundir")


def run_case(case: Case, runner: Callable[[list[str]], Outcome], rnd: random.Random | None = None
             ) -> list[tuple[Step, Outcome, list[str]]]:
    """Every step of a case; stops after a step that went wrong."""
    results = []
    for step in case.steps:
        if step.argv[0] == "_damage_results":
            damage_results(Path(step.argv[1]), rnd or random.Random(0))
            continue
        outcome = runner(step.argv)
        found = problems(case, step, outcome)
        results.append((step, outcome, found))
        if found:
            break
    return results
