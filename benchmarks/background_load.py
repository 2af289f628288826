"""A rerunnable background load like an install or an unpack beside a run: bursts of CPU work (one
busy process per core for a few seconds) and of disk work (writing, syncing and reading back a few
hundred MB), with idle gaps, all at random lengths from a seed. Runs until killed or --seconds.

    .venv/bin/python benchmarks/background_load.py --seconds 900 &      # then time what you measure
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import tempfile
import time
from pathlib import Path


def _spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    x = 0
    while time.monotonic() < end:
        x = (x * 1103515245 + 12345) % 2**31


def cpu_burst(seconds: float, workers: int) -> None:
    procs = [multiprocessing.Process(target=_spin, args=(seconds,)) for _ in range(workers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()


def disk_burst(megabytes: int, folder: Path) -> None:
    path = folder / "background_load.bin"
    block = os.urandom(1 << 20)
    with path.open("wb") as handle:
        for _ in range(megabytes):
            handle.write(block)
        handle.flush()
        os.fsync(handle.fileno())
    with path.open("rb") as handle:
        while handle.read(1 << 22):
            pass
    path.unlink()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2, help="busy processes per CPU burst")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    end = time.monotonic() + args.seconds
    with tempfile.TemporaryDirectory(prefix="background_load_") as tmp:
        while time.monotonic() < end:
            kind = rng.choice(("cpu", "cpu", "disk", "idle"))
            if kind == "cpu":
                cpu_burst(rng.uniform(2, 8), args.workers)
            elif kind == "disk":
                disk_burst(rng.randint(100, 400), Path(tmp))
            else:
                time.sleep(rng.uniform(1, 5))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
