"""Open any supported trace file by its content (not its name) and read it into TraceTables."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Callable
from pathlib import Path

from harness.errors import HarnessInputError
from harness.traces.model import TraceTables

_SQLITE_MAGIC = b"SQLite format 3\x00"
_GZIP_MAGIC = b"\x1f\x8b"
_READ_BYTES = 64 << 20


def read_trace(path: str | Path, keep_frame: Callable[[str], bool] | None = None) -> TraceTables:
    """A Kineto `.json`/`.json.gz` trace or an Nsight Systems `.sqlite` export.

    keep_frame: which Python stack frames to keep, by name (None: all); see `read_kineto`."""
    name = str(path)
    head = _head(name)
    if head.startswith(_SQLITE_MAGIC):
        from harness.traces.nsys import read_nsys

        return read_nsys(name)
    from harness.traces.kineto import read_kineto

    data = _gunzip(name) if head.startswith(_GZIP_MAGIC) else _read_all(name)
    if not data or data.isspace():
        raise HarnessInputError(f"{name}: empty file, expected a trace")
    return read_kineto(name, data, keep_frame)


def _head(name: str) -> bytes:
    try:
        with open(name, "rb") as f:
            return f.read(len(_SQLITE_MAGIC))
    except FileNotFoundError:
        raise HarnessInputError(f"{name}: no such file") from None
    except IsADirectoryError:
        raise HarnessInputError(f"{name}: is a directory, expected a trace file") from None
    except OSError as exc:
        raise HarnessInputError(f"{name}: cannot read: {exc.strerror or exc}") from None


def _read_all(name: str) -> bytes:
    try:
        with open(name, "rb") as f:
            return f.read()
    except OSError as exc:
        raise HarnessInputError(f"{name}: cannot read: {exc.strerror or exc}") from None


def _gunzip(name: str) -> bytearray:
    """Decompress into one buffer sized from the gzip trailer, so the file is never held twice."""
    try:
        with open(name, "rb") as raw:
            raw.seek(-4, 2)
            size_hint = int.from_bytes(raw.read(4), "little")  # size mod 2**32
        buffer = bytearray(max(size_hint, 1 << 20))
        filled = 0
        with gzip.open(name, "rb") as stream:
            while True:
                if filled == len(buffer):  # the hint is exact, or the file is over 4 GiB
                    more = stream.read(_READ_BYTES)
                    if not more:
                        break
                    buffer[filled:] = more
                    filled += len(more)
                    continue
                view = memoryview(buffer)[filled:]
                got = stream.readinto(view)
                view.release()  # the buffer may grow on a later turn
                if not got:
                    break
                filled += got
    except (gzip.BadGzipFile, zlib.error) as exc:
        raise HarnessInputError(f"{name}: not a valid gzip file: {exc}") from None
    except EOFError:
        raise HarnessInputError(f"{name}: truncated gzip file (ends before the end of the stream)") from None
    except OSError as exc:
        raise HarnessInputError(f"{name}: cannot read: {exc.strerror or exc}") from None
    del buffer[filled:]
    return buffer
