"""Process checks for tests: is a pid (or a whole process group) really gone?"""

from __future__ import annotations

import os
from pathlib import Path


def process_gone(pid: int) -> bool:
    """True when no process (or only a zombie awaiting its reaper) has this pid."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def group_gone(pgid: int) -> bool:
    """True when no live process (zombies aside) is in the process group."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return False
    return True
