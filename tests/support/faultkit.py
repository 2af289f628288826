"""Fault injection for `harness run`: the real command in a subprocess, faults injected from outside
(signals to a server's process group, sockets on its port, files in its run directory, a small or
size-limited filesystem), and the record of what survived.

Used by tests/test_faults.py (a few deterministic cases) and benchmarks/faults.py (many randomised
ones). Every process a run starts inherits `HARNESS_FAULT_MARKER=<id>` from the harness's
environment, so that survivors are found wherever they went (another process group, another session,
reparented to init), not only by the PIDs the run recorded.
"""

from __future__ import annotations

import ctypes
import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Callable

from sglang_spec_harness.run.interrupts import SIGNALS

REPO = Path(__file__).resolve().parents[2]
MARKER_ENV = "HARNESS_FAULT_MARKER"


def wait_for(predicate: Callable[[], Any], timeout: float, poll: float = 0.05) -> Any:
    """The first truthy value of `predicate()` within `timeout` seconds, else None."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            return None
        time.sleep(poll)


# ---- processes ----------------------------------------------------------------------------------


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, pgrp) of a process, None if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0], int(fields[1]), int(fields[2])


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()[:160]
    except OSError:
        return "?"


def live_pids() -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None and stat[0] != "Z":
                out.append(int(entry.name))
    return out


def marked_pids(marker: str) -> list[int]:
    """Live processes whose environment carries this run's marker."""
    needle = f"{MARKER_ENV}={marker}".encode()
    found = []
    for pid in live_pids():
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if needle in env.split(b"\0"):
            found.append(pid)
    return found


def group_pids(pgid: int) -> list[int]:
    return [pid for pid in live_pids() if (_stat(pid) or ("Z", 0, 0))[2] == pgid]


def survivors(marker: str, pgids: list[int] = (), exclude: tuple[int, ...] = ()) -> list[str]:
    """Every live process of the run: marked ones, and members of the server process groups it
    recorded (a server could clear its environment). `pid cmdline` each."""
    pids = set(marked_pids(marker))
    for pgid in pgids:
        pids.update(group_pids(pgid))
    return [f"{pid} {_cmdline(pid)}" for pid in sorted(pids - set(exclude))]


def kill_pids(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def become_subreaper() -> bool:
    """Linux: orphans of our children are reparented to us (so a whole run's tree stays below us and
    its zombies can be reaped). For a benchmark process only: a test process must not reap others'
    children."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def reap_orphans() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


# ---- the run directory --------------------------------------------------------------------------


def find_run_dir(out: Path) -> Path | None:
    if not out.is_dir():
        return None
    for entry in sorted(out.iterdir()):
        if entry.is_dir() and not entry.is_symlink() and (entry / "run.json").exists():
            return entry
    return None


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def complete_lines(path: Path) -> list[dict]:
    """The complete lines of a JSONL file (a line still being appended is not one yet)."""
    try:
        text = path.read_text()
    except OSError:
        return []
    lines = text.split("\n")[:-1]  # what follows the last newline is unfinished
    out = []
    for line in lines:
        if line.strip():
            try:
                out.append(json.loads(line))
            except ValueError:
                out.append({"unreadable": line})
    return out


@dataclass
class Snapshot:
    """The measurements on disk at one moment."""

    requests: dict[str, list[dict]] = field(default_factory=dict)  # requests.jsonl path -> lines
    trials: dict[str, dict] = field(default_factory=dict)  # trial.json of finished trials
    analysis: dict[str, Any] = field(default_factory=dict)  # analysis.json trials

    @property
    def measured_requests(self) -> int:
        return sum(1 for lines in self.requests.values() for r in lines if not r.get("warmup"))


def snapshot(run_dir: Path | None) -> Snapshot:
    snap = Snapshot()
    if run_dir is None:
        return snap
    for path in sorted(run_dir.glob("*/*/requests.jsonl")):
        snap.requests[str(path.relative_to(run_dir))] = complete_lines(path)
    for path in sorted(run_dir.glob("trials/*/trial.json")):
        data = read_json(path)
        if isinstance(data, dict) and data.get("status") in ("ok", "failed"):
            snap.trials[str(path.relative_to(run_dir))] = data
    analysis = read_json(run_dir / "analysis.json")
    if isinstance(analysis, dict):
        snap.analysis = dict(analysis.get("trials") or {})
    return snap


def lost_measurements(before: Snapshot, run_dir: Path | None) -> list[str]:
    """What `before` held that the run directory no longer holds, as it was."""
    if run_dir is None:
        return ["the run directory is gone"] if before.requests or before.trials else []
    after = snapshot(run_dir)
    lost = []
    for path, lines in before.requests.items():
        now = after.requests.get(path, [])
        missing = [r for r in lines if r not in now]
        if missing:
            lost.append(f"{path}: {len(missing)} of {len(lines)} request records lost or changed")
    for path, data in before.trials.items():
        if after.trials.get(path) != data:
            lost.append(f"{path}: the finished trial's record changed")
    for name, data in before.analysis.items():
        if after.analysis.get(name) != data:
            lost.append(f"analysis.json: {name} lost or changed")
    return lost


def trace_files_in(directory: Path) -> list[Path]:
    """Finished trace files (what the harness waits for) in a profile directory."""
    try:
        return sorted(p for p in directory.iterdir()
                      if p.name.endswith((".trace.json", ".trace.json.gz")) and not p.name.startswith(".") and p.is_file())
    except OSError:
        return []


def has_traceback(output: str) -> bool:
    """A Python traceback in the harness's own output (the server.log tail it quotes, prefixed
    `  server.log | `, may hold the server's, which is the server's story, not a harness crash)."""
    return any("Traceback" in line for line in output.splitlines() if not line.startswith("  server.log | "))


def complete_but_damaged(run_dir: Path | None) -> list[str]:
    """A run that says `complete` must hold every planned trial, finished ok, and the analysis of
    every profiled one: what the rules rely on."""
    run = read_json(run_dir / "run.json") if run_dir else None
    if not isinstance(run, dict) or run.get("status") != "complete":
        return []
    problems = []
    analysis = read_json(run_dir / "analysis.json") or {}
    for entry in run.get("plan") or []:
        trial = read_json(run_dir / entry["dir"] / "trial.json") or {}
        if trial.get("status") != "ok":
            problems.append(f"{entry['dir']}: {trial.get('status')}")
        if entry.get("kind") == "profiled" and Path(entry["dir"]).name not in (analysis.get("trials") or {}):
            problems.append(f"{entry['dir']}: no analysis")
    if analysis.get("errors"):
        problems.append(f"analysis errors: {analysis['errors']}")
    return problems


def servers(run_dir: Path | None) -> list[dict]:
    """The server processes the run recorded so far: pid, port, kind and where it logs. A trial
    served by a launch is listed under the launch."""
    if run_dir is None:
        return []
    out = []
    for path in sorted(run_dir.glob("launches/*/launch.json")) + sorted(run_dir.glob("trials/*/trial.json")):
        data = read_json(path)
        if not isinstance(data, dict) or data.get("launch"):
            continue
        if data.get("server_pid"):
            out.append({"pid": data["server_pid"], "port": data.get("port"), "dir": path.parent,
                        "status": data.get("status"), "record": path})
    return out


def server_pgids(run_dir: Path | None) -> list[int]:
    return [s["pid"] for s in servers(run_dir)]


def trial_in_progress(run_dir: Path | None, kind: str = "timed", min_measured: int = 1) -> dict | None:
    """A running trial of `kind` with at least `min_measured` measured requests on disk, with the pid
    and log of the server serving it."""
    if run_dir is None:
        return None
    for path in sorted(run_dir.glob(f"trials/*-{kind}/trial.json")):
        data = read_json(path)
        if not isinstance(data, dict) or data.get("status") != "running" or not data.get("server_pid"):
            continue
        done = sum(1 for r in complete_lines(path.parent / "requests.jsonl") if not r.get("warmup"))
        if done >= min_measured:
            where = run_dir / data["launch"] if data.get("launch") else path.parent
            return {"trial": path.parent.name, "pid": data["server_pid"], "log": where / "server.log",
                    "measured": done, "dir": path.parent}
    return None


# ---- the harness in a subprocess ----------------------------------------------------------------


def default_signals_in_child() -> None:
    """In the child: the dispositions a terminal's job starts with, whatever ours are (a background
    job or `nohup` ignores SIGINT or SIGHUP, and the harness keeps a signal it was started to ignore)."""
    for sig in SIGNALS:
        signal.signal(sig, signal.SIG_DFL)


class HarnessProcess:
    """`harness run` in its own session (its own process group, as a terminal's foreground job would
    be), with a marker in its environment; stdout and stderr go to files beside `out`."""

    def __init__(self, scenario: Path, out: Path, *, args: tuple[str, ...] = (), env: dict[str, str] | None = None,
                 fsize_limit: int | None = None, cwd: Path = REPO, logs: Path | None = None):
        self.marker = uuid.uuid4().hex
        self.out = out
        logs = logs or out.parent
        self.stdout_path = logs / f"{out.name}.stdout"
        self.stderr_path = logs / f"{out.name}.stderr"
        argv = ["run", str(scenario), "--out", str(out), "--no-progress", *args]
        if fsize_limit is None:
            self.argv = [sys.executable, "-m", "sglang_spec_harness.commands.cli", *argv]
        else:  # a file-size limit (RLIMIT_FSIZE) on the harness and everything it starts
            code = (f"import resource, sys; resource.setrlimit(resource.RLIMIT_FSIZE, ({fsize_limit}, {fsize_limit})); "
                    f"from sglang_spec_harness.commands.cli import main; sys.exit(main({argv!r}))")
            self.argv = [sys.executable, "-c", code]
        self.env = {**os.environ, "CI": "true", MARKER_ENV: self.marker, **(env or {})}
        self.cwd = cwd
        self.proc: subprocess.Popen | None = None
        self.started = 0.0
        self.elapsed: float | None = None

    def start(self) -> HarnessProcess:
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.stdout_path.parent.mkdir(parents=True, exist_ok=True)
        with self.stdout_path.open("wb") as stdout, self.stderr_path.open("wb") as stderr:
            self.proc = subprocess.Popen(self.argv, cwd=self.cwd, env=self.env, stdin=subprocess.DEVNULL,
                                         stdout=stdout, stderr=stderr, start_new_session=True,
                                         preexec_fn=default_signals_in_child)
        self.started = time.monotonic()
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait(self, timeout: float) -> int | None:
        """The exit code, or None if it did not exit in time (a hang)."""
        assert self.proc is not None
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        self.elapsed = time.monotonic() - self.started
        return code

    def interrupt(self, sig: int) -> bool:
        """SIGINT and SIGHUP go to the harness's process group, as a terminal sends them; SIGTERM to
        the harness alone, as a supervisor (CI, systemd) does. False if it had already exited."""
        if not self.alive():
            return False
        try:
            if sig in (signal.SIGINT, signal.SIGHUP):
                os.killpg(self.pid, sig)
            else:
                os.kill(self.pid, sig)
        except ProcessLookupError:
            return False
        return True

    def run_dir(self) -> Path | None:
        return find_run_dir(self.out)

    @property
    def stderr(self) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")
        except OSError:
            return ""

    @property
    def stdout(self) -> str:
        try:
            return self.stdout_path.read_text(errors="replace")
        except OSError:
            return ""

    def kill_everything(self) -> None:
        """After a hang: the harness's group and every marked process."""
        if self.alive():
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except OSError:
                pass
            self.proc.wait()
        kill_pids(marked_pids(self.marker))


def kill_group(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False


# ---- other processes on a server's port ---------------------------------------------------------


class Squatter:
    """A socket listening on a port (taken, nothing answers), or with `answer=True` an HTTP server
    that answers 200 to everything, /health included: another process in the server's place."""

    def __init__(self, port: int, *, answer: bool = False, host: str = "127.0.0.1"):
        self.port, self.answer, self.host = port, answer, host
        self.sock: socket.socket | None = None
        self.httpd: http.server.HTTPServer | None = None
        self.hits = 0

    def start(self) -> bool:
        """False if the port could not be taken (the server was quicker)."""
        try:
            if self.answer:
                squatter = self

                class Handler(http.server.BaseHTTPRequestHandler):
                    def _ok(self) -> None:
                        squatter.hits += 1
                        body = b'{"rogue": true}'
                        self.send_response(200)
                        self.send_header("Content-Length", str(len(body)))
                        self.end_headers()
                        self.wfile.write(body)

                    do_GET = do_POST = _ok

                    def log_message(self, *args: object) -> None:
                        pass

                self.httpd = http.server.ThreadingHTTPServer((self.host, self.port), Handler)
                threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
            else:
                self.sock = socket.socket()
                self.sock.bind((self.host, self.port))
                self.sock.listen()
        except OSError:
            self.stop()
            return False
        return True

    def stop(self) -> None:
        if self.httpd is not None:
            self.httpd.shutdown()
            self.httpd.server_close()
            self.httpd = None
        if self.sock is not None:
            self.sock.close()
            self.sock = None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# ---- afterwards: the run, `harness check`, `harness report` --------------------------------------


def run_cli(args: list[str], env: dict[str, str] | None = None, timeout: float = 300) -> dict:
    """A `harness` subcommand: exit code, stderr, whether it printed a traceback."""
    result = subprocess.run([sys.executable, "-m", "sglang_spec_harness.commands.cli", *args], cwd=REPO, capture_output=True,
                            text=True, timeout=timeout, env={**os.environ, **(env or {})})
    err = result.stderr.strip()
    return {"exit": result.returncode, "stderr": err, "traceback": has_traceback(result.stderr + result.stdout),
            "stderr_lines": len(err.splitlines())}


def run_cli_in_process(args: list[str]) -> dict:
    """As `run_cli`, in this process (quicker for tests): an exception escaping `main` is the
    traceback a user would have seen."""
    import contextlib
    import io
    import traceback

    from sglang_spec_harness.commands import cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(args)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
        except Exception:  # what the user would see as a traceback
            traceback.print_exc()
            code = 1
    text = err.getvalue().strip()
    return {"exit": code, "stderr": text, "traceback": "Traceback" in err.getvalue() + out.getvalue(),
            "stderr_lines": len(text.splitlines())}


def check_and_report(run_dir: Path, *, in_process: bool = False) -> dict:
    """`harness check RUN_DIR` and `harness report RUN_DIR` on a run's remains, and whether they
    behaved: check says INCONCLUSIVE (3), FAIL (1) or one clear line (2) on a damaged run, never PASS
    and never a traceback; report builds the report (0) or says one clear line (2)."""
    call = run_cli_in_process if in_process else run_cli
    check = call(["check", str(run_dir)])
    report = call(["report", str(run_dir)])
    results = read_json(run_dir / "results.json") if check["exit"] in (0, 1, 3) else None
    check["verdict"] = results.get("verdict") if isinstance(results, dict) else None
    return {"check": check, "report": report}


def cli_behaved(outcome: dict, *, damaged: bool) -> list[str]:
    """What went wrong with check/report (empty: they behaved)."""
    problems = []
    for name in ("check", "report"):
        r = outcome[name]
        if r["traceback"]:
            problems.append(f"{name}: traceback")
        if r["exit"] == 2 and r["stderr_lines"] != 1:
            problems.append(f"{name}: exit 2 with {r['stderr_lines']} lines of error")
    allowed_check = {1, 2, 3} if damaged else {0, 1, 2, 3}
    if outcome["check"]["exit"] not in allowed_check:
        problems.append(f"check: exit {outcome['check']['exit']}" + (" (PASS on a damaged run)" if damaged else ""))
    if outcome["report"]["exit"] not in (0, 2):
        problems.append(f"report: exit {outcome['report']['exit']}")
    return problems


# ---- small filesystems --------------------------------------------------------------------------


def mount_tmpfs(path: Path, size: str) -> bool:
    """A tmpfs of `size` at `path` (needs root with CAP_SYS_ADMIN); False if it cannot be mounted."""
    path.mkdir(parents=True, exist_ok=True)
    try:
        result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                                capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0


def umount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)


def fill_filesystem(directory: Path, name: str = ".filler") -> Path:
    """Write one file until the filesystem under `directory` has no space left."""
    path = directory / name
    chunk = b"\0" * (1 << 16)
    with path.open("ab") as f:
        try:
            while True:
                f.write(chunk)
                f.flush()
        except OSError:
            pass
    # the last partial chunk may fit a few more bytes: take them too
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        try:
            while os.write(fd, b"\0" * 512):
                pass
        except OSError:
            pass
        finally:
            os.close(fd)
    except OSError:
        pass
    return path
