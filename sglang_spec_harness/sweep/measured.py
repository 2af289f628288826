"""What a point of a sweep measured, read back from its run directory: for sweep.json and the
printout (the history database reads the same run directory on its own: `history.extract`)."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from sglang_spec_harness.history.extract import read_run
from sglang_spec_harness.rundir import as_list, as_object, read_json


def server_start_s(run_dir: Path, variant: str) -> float | None:
    """How long the variant's server took to become ready (its first launch)."""
    for launch in sorted((run_dir / "launches").glob(f"*-{variant}-launch*/launch.json")):
        data = as_object(_read(launch))
        value = data.get("startup_s")
        if isinstance(value, (int, float)):
            return round(float(value), 1)
    return None


def _read(path: Path) -> Any:
    try:
        return read_json(path)
    except Exception:  # a damaged record: the numbers are left out, the run directory says why
        return None


def point_numbers(run_dir: Path, variant: str) -> dict[str, Any]:
    """What a point measured, for sweep.json and the printout: per region the scenario's patterns per
    replay and the time per replay (the variant's profiled trials), the median TPOT and accept length
    of its timed blocks, and the output hash."""
    results = as_object(_read(run_dir / "results.json"))
    samples = as_object(as_object(results.get("variants")).get(variant))
    numbers: dict[str, Any] = {}
    for key, name in (("median_tpot_ms", "tpot_ms"), ("accept_length", "accept_length")):
        values = [v for v in as_list(samples.get(key)) if isinstance(v, (int, float))]
        numbers[name] = round(statistics.median(values), 4) if values else None
    regions: dict[str, dict[str, Any]] = {}
    analysis = as_object(as_object(_read(run_dir / "analysis.json")).get("trials"))
    for trial, document in sorted(analysis.items()):
        if f"-{variant}-profiled" not in trial:
            continue
        for file in as_list(as_object(document).get("files")):
            file = as_object(file)
            for region, counts in as_object(file.get("regions")).items():
                entry = regions.setdefault(region, {"replays": 0, "per_replay": {}})
                entry["replays"] += int(as_object(counts).get("units") or 0)
                for pattern, row in as_object(as_object(counts).get("counts")).items():
                    row = as_object(row)
                    if row.get("known") is False:
                        entry["per_replay"][pattern] = None
                        continue
                    low, high = row.get("per_replay_min"), row.get("per_replay_max")
                    entry["per_replay"][pattern] = low if low == high else [low, high]
            for region, timing in as_object(file.get("region_times")).items():
                timing = as_object(timing)
                instances, total = timing.get("instances"), timing.get("robust_time_us") or timing.get("time_us")
                if isinstance(instances, int) and instances > 0 and isinstance(total, (int, float)):
                    regions.setdefault(region, {"replays": 0, "per_replay": {}})["time_per_replay_us"] = round(total / instances, 1)
    numbers["regions"] = regions
    # the hash the history stores (sglang_spec_harness.history.extract), so that sweep.json and the database agree
    record = read_run(run_dir)
    numbers["output_hash"] = next((v.get("output_hash") for v in record.variants if v.get("variant") == variant), None)
    return numbers

