"""Trace reading speed and peak memory on a ~1 GB Kineto trace, next to `json.load` and Holistic
Trace Analysis' parser, measured in the same run.

    .venv/bin/python benchmarks/bench_trace_parse.py [--size-mb 1024] [--parsers ours,analyze,json,hta]

The big trace is built by tiling a real one (default: the A100 HTA trace from ../shared/traces),
shifting timestamps, correlations, External ids and flow ids per copy so that it stays a valid
trace (70 graph launches per copy). It is written to /tmp (never into the repository) and reused.
Each parser runs in its own subprocess; peak RSS is that process's `ru_maxrss`.
A script, not a test: it prints figures and asserts only that the parsers read the same trace.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED_TRACES = Path(os.environ.get("HARNESS_SHARED_TRACES") or ROOT.parent / "shared" / "traces")
DEFAULT_SOURCE = SHARED_TRACES / "hta_negative_queue_length_rank0.json.gz"
WORK_DIR = Path("/tmp/harness-bench")
PARSERS = ("ours", "analyze", "json", "hta", "hta-ijson")
DESCRIPTIONS = {
    "ours": "sglang_spec_harness.traces.read_trace (msgspec, sliced, columnar)",
    "analyze": "sglang_spec_harness.traces.analyze_traces (read + attribution + counts)",
    "json": "json.load (stdlib), events only",
    "hta": "HTA parse_trace_dataframe (its default backend, JSON)",
    "hta-ijson": "HTA parse_trace_dataframe (IJSON_BATCH_AND_COMPRESS, yajl2_c)",
}


# ---- building the tiled trace -------------------------------------------------------------------


def build_tiled_trace(source: Path, size_mb: int, target: Path) -> int:
    """Write copies of `source`'s events until the file reaches `size_mb`; return the copies."""
    import orjson

    document = orjson.loads(gzip.decompress(source.read_bytes()) if source.suffix == ".gz" else source.read_bytes())
    events = document["traceEvents"]
    metadata = [e for e in events if e.get("ph") == "M"]
    timed = [e for e in events if e.get("ph") != "M"]
    starts = [e["ts"] for e in timed if "ts" in e]
    span = max(e["ts"] + e.get("dur", 0) for e in timed if "ts" in e) - min(starts) + 1000
    id_step = 1 + max(_ids(e) for e in timed)
    head = {k: v for k, v in document.items() if k != "traceEvents"}
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    copies = 0
    with open(partial, "wb") as out:
        out.write(orjson.dumps(head)[:-1] + b', "traceEvents": [')
        out.write(orjson.dumps(metadata)[1:-1])
        while out.tell() < size_mb * 1_000_000:
            tile = [_shifted(e, copies * span, copies * id_step) for e in timed]
            out.write(b"," + orjson.dumps(tile)[1:-1])
            copies += 1
        out.write(b"]}")
    partial.rename(target)
    return copies


def _ids(event: dict) -> int:
    args = event.get("args") or {}
    return max(int(event.get("id", 0) or 0), int(args.get("correlation", 0) or 0), int(args.get("External id", 0) or 0))


def _shifted(event: dict, dt: float, did: int) -> dict:
    copy = dict(event)
    if "ts" in copy:
        copy["ts"] = copy["ts"] + dt
    if "id" in copy:
        copy["id"] = copy["id"] + did
    args = copy.get("args")
    if args:
        args = copy["args"] = dict(args)
        for key in ("correlation", "External id"):
            if isinstance(args.get(key), int):
                args[key] += did
    return copy


# ---- one parser in a child process --------------------------------------------------------------


def child(parser: str, path: str) -> None:
    """Run one parser on `path`; print a JSON line with time, peak RSS, the RSS before parsing
    (interpreter + imports) and what it found."""
    run = _parser(parser)
    baseline_mb = _current_rss_mb()
    cpu_start, start = time.process_time(), time.perf_counter()
    found = run(path)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"parser": parser, "seconds": seconds, "cpu_seconds": cpu_seconds, "peak_rss_mb": peak_mb,
                      "baseline_rss_mb": baseline_mb, "found": found}))


def _parser(parser: str):
    """Import what `parser` needs (outside the timing) and return a function path -> facts."""
    if parser == "ours":
        from sglang_spec_harness.traces.readers import read_trace

        def run(path: str) -> dict:
            trace = read_trace(path)
            return {"gpu_ops": len(trace.gpu_ops), "runtime": len(trace.runtime), "cpu_ops": len(trace.cpu_ops)}
    elif parser == "analyze":
        from sglang_spec_harness.traces.analysis import analyze_traces

        def run(path: str) -> dict:
            file = analyze_traces([path]).files[0]
            return {"graph_launches": file.graph_launches, "kernels": file.validity.kernels}
    elif parser == "json":
        def run(path: str) -> dict:
            with open(path, "rb") as f:
                return {"events": len(json.load(f)["traceEvents"])}
    elif parser in ("hta", "hta-ijson"):
        import logging

        logging.disable(logging.WARNING)  # HTA logs a line per step
        from hta.common.trace_parser import ParserBackend, ParserConfig, parse_trace_dataframe

        config = ParserConfig()
        if parser == "hta-ijson":
            config.set_parser_backend(ParserBackend.IJSON_BATCH_AND_COMPRESS)

        def run(path: str) -> dict:
            return {"events": len(parse_trace_dataframe(path, config)[1])}
    else:
        raise SystemExit(f"unknown parser {parser}")
    return run


def _current_rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def measure(parser: str, path: Path, timeout_s: int) -> dict:
    command = [sys.executable, str(Path(__file__).resolve()), "--child", parser, str(path)]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"parser": parser, "error": f"timed out after {timeout_s} s"}
    if result.returncode != 0:
        tail = (result.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"parser": parser, "error": f"exit {result.returncode}: {tail}"}
    return json.loads(result.stdout.strip().splitlines()[-1])


def warm_page_cache(path: Path) -> None:
    with open(path, "rb") as f:
        while f.read(64 << 20):
            pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024, help="size of the tiled trace (default 1024)")
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="the real trace to tile")
    parser.add_argument("--parsers", default=",".join(PARSERS), help=f"comma-separated subset of {PARSERS}")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds allowed per parser")
    parser.add_argument("--child", nargs=2, metavar=("PARSER", "FILE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(*args.child)
        return 0

    target = WORK_DIR / f"tiled-{args.source.name.split('.')[0]}-{args.size_mb}MB.json"
    if not target.exists():
        print(f"building {target} from {args.source} ...", flush=True)
        copies = build_tiled_trace(args.source, args.size_mb, target)
        print(f"  {copies} copies", flush=True)
    size_mb = target.stat().st_size / 1e6
    warm_page_cache(target)
    print(f"trace {target}: {size_mb:.0f} MB; machine: {platform.machine()}, {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}", flush=True)
    results = []
    for name in args.parsers.split(","):
        result = measure(name, target, args.timeout)
        results.append(result)
        if "error" in result:
            print(f"{name:8s} {DESCRIPTIONS[name]}: {result['error']}", flush=True)
            continue
        mb_s = size_mb / result["seconds"]
        print(f"{name:9s} {result['seconds']:7.1f} s {mb_s:7.1f} MB/s (CPU {result['cpu_seconds']:.1f} s)  peak RSS {result['peak_rss_mb']:6.0f} MB "
              f"({result['peak_rss_mb'] / size_mb:.2f}x file; {result['baseline_rss_mb']:.0f} MB before parsing)  "
              f"{DESCRIPTIONS[name]}  {result['found']}", flush=True)
    by_name = {r["parser"]: r for r in results if "error" not in r}
    for hta in ("hta", "hta-ijson"):
        if "ours" in by_name and hta in by_name:
            print(f"ours vs {hta}: {by_name[hta]['seconds'] / by_name['ours']['seconds']:.1f}x the throughput "
                  f"({by_name[hta]['cpu_seconds'] / by_name['ours']['cpu_seconds']:.1f}x in CPU time), "
                  f"{by_name['ours']['peak_rss_mb'] / by_name[hta]['peak_rss_mb']:.2f}x the peak memory")
    if "ours" in by_name:
        ok = by_name["ours"]["peak_rss_mb"] < 2 * size_mb
        print(f"ours: peak memory {'under' if ok else 'OVER'} 2x the uncompressed file size")
    return 0


if __name__ == "__main__":
    sys.exit(main())
