"""Open any supported trace file by its content (not its name) and read it into TraceTables."""

from __future__ import annotations

import gzip
import os
import zlib
from collections.abc import Callable
from pathlib import Path

from sglang_spec_harness.errors import HarnessInputError
from sglang_spec_harness.files import read_head
from sglang_spec_harness.traces.model import TraceTables

_SQLITE_MAGIC = b"SQLite format 3\x00"
_GZIP_MAGIC = b"\x1f\x8b"
_READ_BYTES = 64 << 20
# A JSON trace compresses 10-30x (the real ones in ../shared/traces: 12-21x); a gzip bomb of
# zeros ~1000x. Decompression stops past this ratio (above a floor for small files) or past
# HARNESS_MAX_TRACE_BYTES, so that a hostile file costs bounded memory and time.
MAX_GZIP_RATIO = 200
RATIO_FLOOR_BYTES = 256 << 20
MAX_BYTES_ENV = "HARNESS_MAX_TRACE_BYTES"


def max_trace_bytes() -> int:
    """The largest trace (decompressed) the readers accept: $HARNESS_MAX_TRACE_BYTES, else half
    the machine's memory (the reader holds the bytes and the columns at once)."""
    value = os.environ.get(MAX_BYTES_ENV)
    if value:
        try:
            return max(int(value), 1)
        except ValueError:
            raise HarnessInputError(f"${MAX_BYTES_ENV}: expected a number of bytes, got {value!r}") from None
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
    except (ValueError, OSError):  # pragma: no cover - not Linux
        return 16 << 30


def read_trace(path: str | Path, keep_frame: Callable[[str], bool] | None = None) -> TraceTables:
    """A Kineto `.json`/`.json.gz` trace or an Nsight Systems `.sqlite` export.

    keep_frame: which Python stack frames to keep, by name (None: all); see `read_kineto`."""
    name = str(path)
    head = _head(name)
    if head.startswith(_SQLITE_MAGIC):
        from sglang_spec_harness.traces.nsys import read_nsys

        return read_nsys(name)
    from sglang_spec_harness.traces.kineto import read_kineto

    data = _gunzip(name) if head.startswith(_GZIP_MAGIC) else _read_all(name)
    if not data or data.isspace():
        raise HarnessInputError(f"{name}: empty file, expected a trace")
    return read_kineto(name, data, keep_frame)


def _head(name: str) -> bytes:
    return read_head(name, len(_SQLITE_MAGIC), "a trace file")


def _read_all(name: str) -> bytes:
    try:
        with open(name, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            limit = max_trace_bytes()
            if size > limit:
                raise HarnessInputError(
                    f"{name}: {size} bytes, over the limit of {limit} (set ${MAX_BYTES_ENV} to read larger traces)"
                )
            return f.read()
    except OSError as exc:
        raise HarnessInputError(f"{name}: cannot read ({exc.strerror or exc})") from None


def _gunzip(name: str) -> bytearray:
    """Decompress into one buffer sized from the gzip trailer, so the file is never held twice.
    The trailer is only a hint (a hostile one may claim 4 GiB): the buffer never exceeds the limit."""
    try:
        with open(name, "rb") as raw:
            compressed = os.fstat(raw.fileno()).st_size
            if compressed < 4:
                raise EOFError
            raw.seek(-4, 2)
            size_hint = int.from_bytes(raw.read(4), "little")  # size mod 2**32
        limit = min(max_trace_bytes(), max(compressed * MAX_GZIP_RATIO, RATIO_FLOOR_BYTES))
        buffer = bytearray(min(max(size_hint, 1 << 20), limit + 1))
        filled = 0
        with gzip.open(name, "rb") as stream:
            while True:
                if filled > limit:
                    raise HarnessInputError(
                        f"{name}: decompresses to more than {limit} bytes ({compressed} compressed; a trace "
                        f"compresses at most ~{MAX_GZIP_RATIO}x): a gzip bomb, or set ${MAX_BYTES_ENV}"
                    )
                if filled == len(buffer):  # the hint is exact, or the file is over 4 GiB
                    more = stream.read(min(_READ_BYTES, limit + 1 - filled))
                    if not more:
                        break
                    buffer[filled:] = more
                    filled += len(more)
                    continue
                # in pieces: the gzip module decompresses each call into a temporary of its size
                view = memoryview(buffer)[filled : filled + _READ_BYTES]
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
        raise HarnessInputError(f"{name}: cannot read ({exc.strerror or exc})") from None
    del buffer[filled:]
    return buffer
