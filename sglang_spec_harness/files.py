"""Writing files so that nothing is ever half written: every record, report and page of the harness
goes through here (run directories, results.json, the report, the trend page, the bisection).

- `write_text_atomic` / `write_json_atomic`: a reader never sees half a file; a crash or a full disk
  leaves the previous version and no temporary file.
- `append_whole`: one line added to a log whole or not at all (requests.jsonl as requests finish).
- `Reserve`: space set aside in a run directory for its last records.
- `update_latest_link`: the `latest` link, replaced in one step (`point_latest_at_newest_run`: at the newest run).
- `new_stamped_dir`: a new folder `STAMP-NAME[-N]` (run directories, bisections).
- `read_head`: the first bytes of a user's file, every way of failing to open it one line.

A write that fails raises `WriteError` (an OSError: the command line prints it as one line).
"""

from __future__ import annotations

import contextlib
import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any

from sglang_spec_harness.errors import HarnessInputError, encodable


class WriteError(OSError):
    """A file could not be written (disk full, a file-size limit, read-only); the previous version
    stays. Its text is one line: `cannot write PATH: why` (or the message it was given)."""

    def __init__(self, message: str, *, path: Path | str | None = None, cause: OSError | None = None):
        super().__init__(message)
        # What `except OSError` handlers print: the file the harness meant, never its temporary name.
        self.filename = None if path is None else str(path)
        self.errno = None if cause is None else cause.errno
        self.strerror = None if cause is None else (cause.strerror or str(cause))

    def __str__(self) -> str:
        return str(self.args[0])


def write_failed(path: Path, exc: OSError) -> WriteError:
    return WriteError(f"cannot write {path}: {exc.strerror or exc}", path=path, cause=exc)


def write_text_atomic(path: Path, text: str) -> None:
    """Replace `path` in one step (temporary file, `os.replace`). On failure the temporary file is
    removed and the previous version stays. Text a file cannot hold (a lone surrogate from a JSON
    string) is written escaped. Raises WriteError."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(encodable(text), encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise write_failed(path, exc) from None


def write_json_atomic(path: Path, data: Any, *, ensure_ascii: bool = True) -> None:
    """`data` as indented JSON (what the harness's records look like), atomically."""
    write_text_atomic(path, json.dumps(data, indent=2, default=str, ensure_ascii=ensure_ascii) + "\n")


def append_whole(path: Path, data: bytes) -> None:
    """Append `data` (one line) whole: a write cut short (a full disk) is cut off again, so that the
    lines before it stay readable. Raises WriteError."""
    fd = None
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        size = os.fstat(fd).st_size
        try:
            written = 0
            while written < len(data):  # a short write: the next one says why (ENOSPC, EFBIG)
                written += os.write(fd, data[written:])
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)
            raise
    except OSError as exc:
        raise write_failed(path, exc) from None
    finally:
        if fd is not None:
            os.close(fd)


class Reserve:
    """Space set aside in a directory and given back at the end, so that the last records (a run's
    trial.json, launch.json, run.json: `incomplete` and why) still land on a disk that filled up
    meanwhile. A process killed outright leaves the file behind."""

    SIZE = 256 * 1024
    NAME = ".harness-reserve"

    def __init__(self, directory: Path):
        self.path: Path | None = directory / self.NAME
        try:
            with self.path.open("wb") as f:
                f.write(b"\0" * self.SIZE)
        except OSError:  # nearly full already, or a file-size limit: go on without one
            self.release()

    def release(self) -> bool:
        """Give the space back; False if there was none left to give."""
        path, self.path = self.path, None
        if path is None:
            return False
        with contextlib.suppress(OSError):
            path.unlink()
        return True


def latest_link_path(out_root: Path) -> Path:
    """`reports/latest` for the default `reports/runs`; otherwise `<out>/latest`, inside the folder the
    user chose rather than beside it."""
    return out_root.parent / "latest" if out_root.name == "runs" else out_root / "latest"


def update_latest_link(target: Path, link: Path) -> bool:
    """Point `link` at `target` (a relative symbolic link), replacing the old link in one step.
    Never replaces a real file or folder of that name, and never raises: the link is a convenience.
    Returns whether `link` now points at `target`."""
    relative = os.path.relpath(Path(target).resolve(), link.parent.resolve())
    try:
        if link.is_symlink() and os.readlink(link) == relative:
            return True
        if link.exists() and not link.is_symlink():
            return False  # a real file or folder named `latest`: not ours to replace
        tmp = link.with_name(f".{link.name}.{os.getpid()}.tmp")  # two processes never share one
        if tmp.is_symlink() or tmp.exists():
            tmp.unlink()
        tmp.symlink_to(relative)
        os.replace(tmp, link)
    except OSError:
        return False
    return True


def point_latest_at_newest_run(run_dir: Path) -> Path | None:
    """Point `reports/latest` at the newest run in the `runs` folder holding `run_dir` (by name:
    names start with a timestamp), so that rebuilding an old run's report leaves it on the newest.
    Only inside a folder named `runs` (a run directory copied elsewhere gets no link beside it);
    never raises. Returns the link, or None."""
    run_dir = Path(run_dir).resolve()
    runs = run_dir.parent
    if runs.name != "runs":
        return None
    try:
        newest = max((p for p in runs.iterdir() if p.is_dir() and (p / "run.json").exists()), key=lambda p: p.name,
                     default=run_dir)
    except OSError:
        return None
    link = latest_link_path(runs)
    return link if update_latest_link(newest, link) else None


def read_head(path: Path | str, size: int, expected: str) -> bytes:
    """Up to `size` bytes from the start of a file the user named. A missing file, a directory or an
    unreadable file is one HarnessInputError `PATH: why` (`expected` names what it should be)."""
    try:
        with open(path, "rb") as f:
            return f.read(size)
    except FileNotFoundError:
        raise HarnessInputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise HarnessInputError(f"{path}: is a directory, expected {expected}") from None
    except OSError as exc:
        raise HarnessInputError(f"{path}: cannot read ({exc.strerror or exc})") from None


def new_stamped_dir(out_root: Path, name: str, what: str) -> Path:
    """A new folder `out_root/YYYYmmdd-HHMMSS-name` (`-2`, `-3`, ... when that one exists: two runs
    started in the same second never share one). `what` names it in the error."""
    out_root.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    for n in range(1, 1000):
        path = out_root / (f"{stamp}-{name}" if n == 1 else f"{stamp}-{name}-{n}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise WriteError(f"cannot create {what} under {out_root}: {stamp}-{name} to -999 all exist", path=out_root)
