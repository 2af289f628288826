"""Fault injection: many randomised faults injected into real `harness run`s of the micro engine, in
the restart mode and both warm modes, and one table of what survived.

Fault classes (each injected from outside the harness, at a moment drawn at random):
  kill_block       the server's process group gets SIGKILL while a timed block's requests stream
  kill_profile     SIGKILL while the profiler records (between "Profiling starts" and the trace)
  hang_stream      SIGSTOP mid-stream: the request timeout must end it, the runner must not hang
  startup_exit     the server dies during start-up (SIGKILL at a random moment, or a flag it rejects)
  never_healthy    the server is frozen (SIGSTOP) before it answers /health: the start-up timeout
  port_taken       the port is taken: the user's --port by a listening socket (a clear failure), or
                   the harness's own choice by another HTTP server that answers /health before ours
                   binds (the harness must move to another port and never measure the intruder)
  trace_missing    the trace can never be written (a directory squats its file name)
  trace_truncated  a rank's trace is truncated on disk: planted beside the real one, or the real one
                   cut in half as soon as it appears (the harness may already have read it whole)
  disk_full        the run directory's filesystem (a small tmpfs) is filled up at a random moment;
                   without the right to mount, a random file-size limit (RLIMIT_FSIZE) instead
  interrupt        SIGINT (to the process group, as a terminal sends it), SIGTERM (to the harness, as
                   CI does) or SIGHUP (to the group) at a random moment over a whole run (the moments
                   are spread over a reference run's duration, per mode)

For every case: the exit code; any process of the run left alive (by an environment marker every
process of the run inherits, the server process groups it recorded, and our own children: this
process is a child subreaper, so orphans are reparented here); run.json's status and reason; whether
every measurement on disk before the fault (request records, finished trials, analysis.json) is still
there, unchanged; whether `harness check` and `harness report` on the remains say INCONCLUSIVE (or
FAIL) or one clear line, never PASS on a damaged run, never a traceback; and a hang (the harness not
done within --limit seconds).

    .venv/bin/python benchmarks/faults.py                                  # all classes, 3 modes, 36 interrupts
    .venv/bin/python benchmarks/faults.py --classes kill_block,interrupt --modes restart --interrupts 2   # smoke
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import os
import platform
import random
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from collections.abc import Callable

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from support import faultkit as fk  # noqa: E402

MODES = ("restart", "interleaved", "sequential")
CLASSES = ("kill_block", "kill_profile", "hang_stream", "startup_exit", "never_healthy", "port_taken",
           "trace_missing", "trace_truncated", "disk_full", "interrupt")
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
REQUEST_TIMEOUT_S = 8
TRACE_TIMEOUT_S = 6
NEVER_HEALTHY_TIMEOUT_S = 8


def scenario(mode: str, **changes: Any) -> dict[str, Any]:
    """A tiny two-arm scenario (a run takes tens of seconds): one profiled pass per arm, two samples."""
    trials: dict[str, Any] = {"repetitions": 2, "profiled": 1, "order": "random"}
    if mode != "restart":
        trials.update({"mode": mode, "launches": 1})
    data: dict[str, Any] = {
        "name": f"faults_{mode}",
        "engine": "micro",
        "server": {"args": {"--speculative-num-steps": 3, "--speculative-eagle-topk": 1, "--vocab-size": 512,
                            "--hidden-size": 32, "--device": "cpu", "--num-threads": 1},
                   "startup_timeout_s": 60, "request_timeout_s": REQUEST_TIMEOUT_S},
        "variants": {"baseline": {"args": {"--disable-topk1-fast-path": True}}, "candidate": {}},
        "workload": {"num_requests": 6, "input_len": 16, "output_len": 24, "concurrency": 2, "warmup_requests": 1},
        "trials": trials,
        "profile": {"num_steps": 6, "activities": ["CPU"], "trace_timeout_s": TRACE_TIMEOUT_S},
        "rules": [
            {"name": "no_softmax", "kind": "kernel_count", "region": "DRAFT_DECODE", "pattern": "softmax",
             "variants": ["candidate"], "equals": 0},
            {"name": "same_outputs", "kind": "output_identity"},
        ],
    }
    for key, value in changes.items():
        section, _, field = key.partition(".")
        if field:
            data[section][field] = value
        else:
            data[section] = value
    return data


def write_scenario(directory: Path, data: dict[str, Any]) -> Path:
    path = directory / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


# ---- injectors: each waits for its moment, injects, and says what it did --------------------------


class Injection:
    def __init__(self) -> None:
        self.done = False
        self.at_s: float | None = None
        self.detail = ""
        self.before = fk.Snapshot()  # on disk when the fault was injected
        self.last = fk.Snapshot()  # on disk shortly before the harness ended
        self.expect_incomplete = True  # a fault that lands mid-measurement must leave the run incomplete
        self.expect_exit: set[int] | None = {3}
        self.cleanup: list[Callable[[], None]] = []
        self.free_space: Callable[[], None] | None = None
        self.extra: dict[str, Any] = {}


def _mark(inj: Injection, run: fk.HarnessProcess, detail: str) -> None:
    inj.done, inj.at_s, inj.detail = True, round(time.monotonic() - run.started, 2), detail


def _running_profiled(run_dir: Path | None) -> dict | None:
    """A profiled trial whose server's profiler is on now."""
    if run_dir is None:
        return None
    for path in sorted(run_dir.glob("trials/*-profiled/trial.json")):
        data = fk.read_json(path)
        if not isinstance(data, dict) or data.get("status") != "running" or not data.get("server_pid"):
            continue
        log = (run_dir / data["launch"] if data.get("launch") else path.parent) / "server.log"
        try:
            text = log.read_text(errors="replace")
        except OSError:
            continue
        if text.count("Profiling starts") > text.count("Profiling done"):
            return {"pid": data["server_pid"], "trial": path.parent.name}
    return None


def _starting_server(run_dir: Path | None) -> dict | None:
    """A server the run has started that has not answered /health yet."""
    if run_dir is None:
        return None
    for path in sorted(run_dir.glob("launches/*/launch.json")):
        data = fk.read_json(path)
        if isinstance(data, dict) and data.get("status") == "starting" and data.get("server_pid"):
            return {"pid": data["server_pid"], "port": data.get("port"), "where": path.parent.name}
    for path in sorted(run_dir.glob("trials/*/trial.json")):
        data = fk.read_json(path)
        if (isinstance(data, dict) and not data.get("launch") and data.get("status") == "running"
                and data.get("server_pid") and not data.get("server_info")):
            return {"pid": data["server_pid"], "port": data.get("port"), "where": path.parent.name}
    return None


def inject_kill(run: fk.HarnessProcess, rng: random.Random, inj: Injection, kind: str, limit: float) -> None:
    if kind == "timed":
        need = rng.randint(1, 3)
        target = fk.wait_for(lambda: fk.trial_in_progress(run.run_dir(), "timed", need), limit, poll=0.02)
    else:
        target = fk.wait_for(lambda: _running_profiled(run.run_dir()), limit, poll=0.02)
    if target:
        inj.before = fk.snapshot(run.run_dir())
        fk.kill_group(target["pid"], signal.SIGKILL)
        _mark(inj, run, f"SIGKILL to server {target['pid']} ({target['trial']})")
        inj.extra["trial"] = target["trial"]


def inject_hang(run: fk.HarnessProcess, rng: random.Random, inj: Injection, limit: float) -> None:
    need = rng.randint(1, 3)
    target = fk.wait_for(lambda: fk.trial_in_progress(run.run_dir(), "timed", need), limit, poll=0.02)
    if target:
        inj.before = fk.snapshot(run.run_dir())
        fk.kill_group(target["pid"], signal.SIGSTOP)
        _mark(inj, run, f"SIGSTOP to server {target['pid']} ({target['trial']}) after {target['measured']} requests")
        inj.extra["trial"] = target["trial"]


def inject_startup(run: fk.HarnessProcess, rng: random.Random, inj: Injection, limit: float, sig: int) -> None:
    nth = rng.randint(1, 2)  # the first or the second server the run starts
    seen: set[int] = set()

    def pick() -> dict | None:
        found = _starting_server(run.run_dir())
        if found and found["pid"] not in seen:
            seen.add(found["pid"])
            if len(seen) == nth:
                return found
        return None

    target = fk.wait_for(pick, limit, poll=0.01)
    if target:
        time.sleep(rng.uniform(0.0, 1.5) if sig == signal.SIGKILL else 0.0)
        inj.before = fk.snapshot(run.run_dir())
        if fk.kill_group(target["pid"], sig):
            _mark(inj, run, f"{signal.Signals(sig).name} to starting server {target['pid']} ({target['where']})")


def inject_rogue(run: fk.HarnessProcess, inj: Injection, limit: float) -> None:
    target = fk.wait_for(lambda: _starting_server(run.run_dir()), limit, poll=0.005)
    if not target:
        return
    fk.kill_group(target["pid"], signal.SIGSTOP)  # hold it before it binds (it is still importing)
    rogue = fk.Squatter(target["port"], answer=True)
    ok = rogue.start()
    fk.kill_group(target["pid"], signal.SIGCONT)
    inj.cleanup.append(rogue.stop)
    inj.extra["rogue"] = rogue
    if ok:
        _mark(inj, run, f"another HTTP server on {target['port']}, the port chosen for {target['where']}")
        inj.expect_incomplete, inj.expect_exit = False, {0, 1, 3}
    else:
        inj.detail = "the server bound its port first: nothing injected"


def inject_trace(run: fk.HarnessProcess, rng: random.Random, inj: Injection, limit: float, how: str) -> None:
    def profile_dir() -> Path | None:
        run_dir = run.run_dir()
        if run_dir is None:
            return None
        for path in sorted(run_dir.glob("trials/*-profiled/profile")):
            if not fk.trace_files_in(path):
                return path
        return None

    target = fk.wait_for(profile_dir, limit, poll=0.01)
    if not target:
        return
    trial = target.parent.name
    if how == "missing":  # a directory where the trace should go: the server cannot write it
        (target / f"{trial}-TP-0.trace.json.gz").mkdir()
        inj.before = fk.snapshot(run.run_dir())
        _mark(inj, run, f"directory squatting {trial}'s trace file")
    elif how == "planted":
        whole = gzip.compress(b'{"traceEvents": [' + b'{"ph": "X", "name": "x", "ts": 1, "dur": 1},' * 4000 + b"{}]}")
        cut = rng.randint(10, len(whole) - 10)
        (target / f"{trial}-TP-1.trace.json.gz").write_bytes(whole[:cut])
        inj.before = fk.snapshot(run.run_dir())
        _mark(inj, run, f"{trial}-TP-1 trace truncated at {cut} of {len(whole)} bytes")
    else:  # cut the real trace in half as soon as it appears
        trace = fk.wait_for(lambda: fk.trace_files_in(target), limit, poll=0.002)
        if trace:
            path = trace[0]
            inj.before = fk.snapshot(run.run_dir())
            try:
                os.truncate(path, path.stat().st_size // 2)
            except OSError:
                return
            _mark(inj, run, f"{path.name} truncated to half as it appeared")
            # the harness may have read it whole already: then the run may complete, consistently
            inj.expect_incomplete, inj.expect_exit = False, None
            inj.extra["trial"] = trial


def inject_disk_full(run: fk.HarnessProcess, rng: random.Random, inj: Injection, mount: Path, moment: float) -> None:
    deadline = run.started + moment
    while time.monotonic() < deadline and run.alive():
        time.sleep(0.02)
    if not run.alive():
        return
    inj.before = fk.snapshot(run.run_dir())
    filler = fk.fill_filesystem(mount)
    _mark(inj, run, f"filesystem filled at {moment:.1f} s")
    inj.free_space = lambda: filler.unlink(missing_ok=True)
    inj.expect_incomplete, inj.expect_exit = True, {3}


def inject_signal(run: fk.HarnessProcess, inj: Injection, moment: float, sig: int) -> None:
    deadline = run.started + moment
    while time.monotonic() < deadline and run.alive():
        time.sleep(0.005)
    run_dir = run.run_dir()
    inj.before = fk.snapshot(run_dir)
    complete = (fk.read_json(run_dir / "run.json") or {}).get("status") == "complete" if run_dir else False
    if run.interrupt(sig):
        _mark(inj, run, f"{signal.Signals(sig).name} at {moment:.1f} s")
        # An interrupt after the last trial finished leaves the run complete (the check and report
        # do not run): whether it is is checked against the trials on disk (complete_but_damaged).
        inj.expect_incomplete = False
        inj.expect_exit = {128 + sig}
        inj.extra["signal"] = int(sig)
        inj.extra["run_complete_before"] = complete


# ---- one case -------------------------------------------------------------------------------------


def run_case(cls: str, mode: str, rng: random.Random, work: Path, args: argparse.Namespace, ref_s: dict[str, float],
             mount_ok: bool) -> dict[str, Any]:
    case_dir = Path(tempfile.mkdtemp(prefix=f"{cls}-{mode}-", dir=work))
    data = scenario(mode)
    extra_args: tuple[str, ...] = ()
    fsize: int | None = None
    out = case_dir / "runs"
    inj = Injection()
    variant = ""
    mount: Path | None = None
    squatter: fk.Squatter | None = None
    if cls == "startup_exit":
        variant = rng.choice(["sigkill", "bad_flag"])
        if variant == "bad_flag":
            arm = rng.choice(["baseline", "candidate"])
            data["variants"][arm].setdefault("args", {})["--no-such-flag"] = True
            inj.detail, inj.done = f"{arm} started with a flag the server rejects", True
    elif cls == "never_healthy":
        data["server"]["startup_timeout_s"] = NEVER_HEALTHY_TIMEOUT_S
    elif cls == "port_taken":
        variant = rng.choice(["user_port", "rogue"])
        if variant == "user_port":
            base = fk.free_port()
            launches = 1 if mode == "restart" else 2
            k = rng.randrange(launches)
            squatter = fk.Squatter(base + k)
            if squatter.start():
                extra_args = ("--port", str(base))
                inj.cleanup.append(squatter.stop)
                inj.done, inj.detail = True, f"--port {base}; {base + k} held by a listening socket"
            else:
                squatter = None
    elif cls == "trace_truncated":
        variant = rng.choice(["planted", "cut"])
    elif cls == "disk_full":
        if mount_ok:
            variant = "tmpfs"
            mount = case_dir / "small"
            if fk.mount_tmpfs(mount, "48m"):
                out = mount / "runs"
            else:
                mount, variant = None, "fsize"
        else:
            variant = "fsize"
        if variant == "fsize":
            fsize = rng.choice([3000, 6000, 20000, 60000, 200000])
            inj.done, inj.detail = True, f"RLIMIT_FSIZE {fsize} bytes on the harness and its servers"
            inj.expect_incomplete, inj.expect_exit = True, {3}
    elif cls == "interrupt":
        variant = signal.Signals(rng.choice(SIGNALS)).name

    path = write_scenario(case_dir, data)
    run = fk.HarnessProcess(path, out, args=extra_args, fsize_limit=fsize, logs=case_dir).start()
    limit = args.limit
    try:
        if cls in ("kill_block", "kill_profile"):
            inject_kill(run, rng, inj, "timed" if cls == "kill_block" else "profiled", limit)
        elif cls == "hang_stream":
            inject_hang(run, rng, inj, limit)
        elif cls == "startup_exit" and variant == "sigkill":
            inject_startup(run, rng, inj, limit, signal.SIGKILL)
        elif cls == "never_healthy":
            inject_startup(run, rng, inj, limit, signal.SIGSTOP)
        elif cls == "port_taken" and variant == "rogue":
            inject_rogue(run, inj, limit)
        elif cls == "trace_missing":
            inject_trace(run, rng, inj, limit, "missing")
        elif cls == "trace_truncated":
            inject_trace(run, rng, inj, limit, variant)
        elif cls == "disk_full" and variant == "tmpfs":
            assert mount is not None
            inject_disk_full(run, rng, inj, mount, rng.uniform(0.3, ref_s[mode] * 0.9))
        elif cls == "interrupt":
            inject_signal(run, inj, rng.uniform(0.3, ref_s[mode] * 0.9), getattr(signal, variant))
        # Until it ends, keep a picture of what is on disk: everything measured must still be there after.
        while run.alive() and time.monotonic() - run.started < limit:
            inj.last = fk.snapshot(run.run_dir())
            time.sleep(0.3)
        code = run.wait(max(1.0, limit - (time.monotonic() - run.started)))
        hang = code is None
        if hang:
            run.kill_everything()
            code = run.proc.returncode
    finally:
        for stop in inj.cleanup:
            stop()
    return record(cls, mode, variant, run, inj, code, hang, mount, case_dir, args)


def record(cls: str, mode: str, variant: str, run: fk.HarnessProcess, inj: Injection, code: int | None, hang: bool,
           mount: Path | None, case_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    run_dir = run.run_dir()
    pgids = fk.server_pgids(run_dir)
    time.sleep(0.2)
    fk.reap_orphans()
    left = fk.wait_for(lambda: not survivors(run, pgids), 10) or survivors(run, pgids)
    left = [] if left is True else left
    fk.kill_pids([int(x.split()[0]) for x in left])
    fk.reap_orphans()
    run_json = (fk.read_json(run_dir / "run.json") if run_dir else None) or {}
    status = run_json.get("status")
    lost = sorted(set(fk.lost_measurements(inj.before, run_dir)) | set(fk.lost_measurements(inj.last, run_dir)))
    stderr = run.stderr
    last = (stderr.strip().splitlines() or [""])[-1]
    harness_tb = fk.has_traceback(stderr + run.stdout)
    damaged = status != "complete"
    cli: dict[str, Any] = {}
    cli_problems: list[str] = []
    if run_dir is not None:
        cli = fk.check_and_report(run_dir, in_process=not args.cli_subprocess)
        cli_problems = fk.cli_behaved(cli, damaged=damaged)
        if inj.free_space is not None:  # then with space again
            inj.free_space()
            cli["after_freeing"] = fk.check_and_report(run_dir, in_process=not args.cli_subprocess)
            cli_problems += [f"after freeing space: {p}" for p in fk.cli_behaved(cli["after_freeing"], damaged=damaged)]
    elif last and not harness_tb:
        pass  # no run directory (e.g. it could not be created): the one line is the whole story
    rogue = inj.extra.get("rogue")
    problems: list[str] = []
    if hang:
        problems.append("hang")
    if left:
        problems.append(f"{len(left)} processes left")
    if harness_tb:
        problems.append("traceback from sglang_spec_harness run")
    if lost:
        problems.append("measurements lost: " + "; ".join(lost))
    problems += cli_problems
    inconsistent = fk.complete_but_damaged(run_dir)
    if inconsistent:
        problems.append("complete but damaged: " + "; ".join(inconsistent))
    if inj.done:
        expected = inj.expect_exit
        if cls == "disk_full" and status == "complete":
            # filled after the last trial: the measurements are whole (complete_but_damaged checks
            # it); `harness run` may still fail to write the verdict or report, with one line
            expected, inj.expect_incomplete = {0, 1, 2, 3}, False
        if "signal" in inj.extra and (status == "complete" or run_dir is None):
            # dying by the signal itself is fine when it landed before any harness code ran, or as
            # the process was exiting with the run all done
            expected = expected | {-inj.extra["signal"]}
        if expected is not None and code not in expected and not hang:
            problems.append(f"exit {code}, expected {sorted(expected)}")
        if inj.expect_incomplete and status == "complete":
            problems.append("fault undetected: run complete")
        if run_dir is None and code not in (3, 128 + 2, 128 + 15, 128 + 1, -2, -15, -1):
            problems.append(f"no run directory and exit {code}")
    if rogue is not None and inj.done and run_dir is not None:
        for path in run_dir.glob("trials/*/trial.json"):
            info = fk.read_json(path) or {}
            if info.get("status") == "ok" and (info.get("server_info") or {}).get("engine") != "micro":
                problems.append(f"{path.parent.name} measured another server")
    pass_on_damaged = damaged and cli.get("check", {}).get("exit") == 0
    if mount is not None:
        fk.umount(mount)
    if not args.keep:
        shutil.rmtree(case_dir, ignore_errors=True)
    return {
        "class": cls, "mode": mode, "variant": variant, "injected": inj.done, "at_s": inj.at_s, "detail": inj.detail,
        "exit": code, "hang": hang, "elapsed_s": round(run.elapsed, 1) if run.elapsed else None,
        "status": status, "reason": run_json.get("error"), "last_line": last[:300],
        "measured_before": inj.before.measured_requests, "lost": lost, "left": left,
        "traceback": harness_tb or any((cli.get(k) or {}).get("traceback") for k in ("check", "report")),
        "check_exit": cli.get("check", {}).get("exit"), "check_verdict": cli.get("check", {}).get("verdict"),
        "report_exit": cli.get("report", {}).get("exit"), "pass_on_damaged": pass_on_damaged,
        "damaged": damaged, "problems": problems, "survived": not problems,
        # what a case that did not survive printed, to find where the fault landed
        **({"stderr_tail": stderr[-4000:]} if problems else {}),
    }


def survivors(run: fk.HarnessProcess, pgids: list[int]) -> list[str]:
    found = fk.survivors(run.marker, pgids)
    mine = [pid for pid in fk.live_pids() if (fk._stat(pid) or ("Z", 0, 0))[1] == os.getpid()]
    known = {int(x.split()[0]) for x in found}
    return found + [f"{pid} {fk._cmdline(pid)} (orphan reparented here)" for pid in mine if pid not in known]


def reference_duration(mode: str, work: Path, limit: float) -> float:
    case_dir = Path(tempfile.mkdtemp(prefix=f"reference-{mode}-", dir=work))
    path = write_scenario(case_dir, scenario(mode))
    run = fk.HarnessProcess(path, case_dir / "runs", logs=case_dir).start()
    code = run.wait(limit)
    if code is None:
        run.kill_everything()
        raise SystemExit(f"the reference run in mode {mode} did not finish within {limit} s")
    shutil.rmtree(case_dir, ignore_errors=True)
    return run.elapsed or limit


# ---- the table ------------------------------------------------------------------------------------


def table(results: list[dict[str, Any]]) -> str:
    rows = ["| fault class | cases | injected | survived | exit codes | runs lost | processes left | PASS on damaged | tracebacks | hangs |",
            "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|"]
    by_class: dict[str, list[dict]] = collections.defaultdict(list)
    for r in results:
        by_class[r["class"]].append(r)
    total = collections.Counter()
    for cls in [c for c in CLASSES if c in by_class]:
        rs = by_class[cls]
        codes = collections.Counter(str(r["exit"]) for r in rs if r["injected"])
        row = {
            "cases": len(rs), "injected": sum(r["injected"] for r in rs), "survived": sum(r["survived"] for r in rs),
            "lost": sum(bool(r["lost"]) for r in rs), "left": sum(len(r["left"]) for r in rs),
            "pass": sum(r["pass_on_damaged"] for r in rs), "tb": sum(bool(r["traceback"]) for r in rs),
            "hang": sum(r["hang"] for r in rs),
        }
        total.update(row)
        modes = "/".join(sorted({r["mode"][0] for r in rs}))
        rows.append(f"| {cls} ({modes}) | {row['cases']} | {row['injected']} | {row['survived']} | "
                    f"{', '.join(f'{k}: {v}' for k, v in sorted(codes.items()))} | {row['lost']} | {row['left']} | "
                    f"{row['pass']} | {row['tb']} | {row['hang']} |")
    rows.append(f"| **all** | {total['cases']} | {total['injected']} | {total['survived']} | | {total['lost']} | "
                f"{total['left']} | {total['pass']} | {total['tb']} | {total['hang']} |")
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--classes", default=",".join(CLASSES), help="comma-separated fault classes")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--cases", type=int, default=2, help="cases per class and mode (interrupts: see --interrupts)")
    parser.add_argument("--interrupts", type=int, default=12, help="interrupt moments per mode (default 12: 36 over 3 modes)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--limit", type=float, default=300.0, help="seconds before a run counts as hung")
    parser.add_argument("--json", metavar="FILE", help="write every case's record (appended as they finish)")
    parser.add_argument("--keep", action="store_true", help="keep every case's run directory")
    parser.add_argument("--cli-subprocess", action="store_true", help="run check/report as subprocesses (slower)")
    parser.add_argument("--work", default=None, help="where run directories go (default: a temporary directory)")
    args = parser.parse_args()
    classes = [c for c in args.classes.split(",") if c]
    modes = [m for m in args.modes.split(",") if m]
    unknown = [c for c in classes if c not in CLASSES] + [m for m in modes if m not in MODES]
    if unknown:
        parser.error(f"unknown: {unknown}")
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    os.chdir(REPO)
    subreaper = fk.become_subreaper()
    work = Path(args.work or tempfile.mkdtemp(prefix="harness-faults-"))
    work.mkdir(parents=True, exist_ok=True)
    probe = work / "mount-probe"
    mount_ok = fk.mount_tmpfs(probe, "1m")
    if mount_ok:
        fk.umount(probe)
    shutil.rmtree(probe, ignore_errors=True)
    print(f"faults: seed {seed}, work {work}, subreaper {subreaper}, tmpfs {'yes' if mount_ok else 'no (RLIMIT_FSIZE)'}",
          flush=True)
    ref_s = {}
    if "interrupt" in classes or "disk_full" in classes:
        for mode in modes:
            ref_s[mode] = reference_duration(mode, work, args.limit)
            print(f"reference run, {mode}: {ref_s[mode]:.1f} s", flush=True)
    plan = [(cls, mode) for cls in classes if cls != "interrupt" for mode in modes for _ in range(args.cases)]
    if "interrupt" in classes:
        plan += [("interrupt", mode) for mode in modes for _ in range(args.interrupts)]
    rng.shuffle(plan)
    results = []
    started = time.monotonic()
    for i, (cls, mode) in enumerate(plan, 1):
        for attempt in range(3):
            result = run_case(cls, mode, random.Random(rng.randrange(1 << 30)), work, args, ref_s, mount_ok)
            # a moment drawn after the run ended injected nothing: draw another (the miss is kept)
            if result["injected"] or cls not in ("interrupt", "disk_full") or attempt == 2:
                break
            results.append(result)
            print(f"[{i}/{len(plan)}] (moment after the run's end: nothing injected; exit {result['exit']}) ", flush=True)
        results.append(result)
        if args.json:
            with open(args.json, "a", encoding="utf-8") as f:
                f.write(json.dumps(result) + "\n")
        flag = "ok " if result["survived"] else "BAD"
        print(f"[{i}/{len(plan)}] {flag} {cls:<15} {mode:<11} {result['variant']:<10} exit {result['exit']} "
              f"{result['status'] or '-':<10} {result['detail'][:60]}"
              + ("" if result["survived"] else f"  PROBLEMS: {result['problems']}"), flush=True)
    print()
    print(f"{len(results)} cases in {(time.monotonic() - started) / 60:.1f} min; seed {seed}; "
          f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    print(table(results))
    if not args.work and not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if all(r["survived"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
