"""sglang_spec_harness/files.py: what every record, report and page of the harness is written with."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_spec_harness.files import WriteError, append_whole, latest_link_path, update_latest_link, write_text_atomic


def test_an_atomic_write_replaces_the_file_and_leaves_no_temporary_one(tmp_path):
    path = tmp_path / "record.json"
    write_text_atomic(path, "one\n")
    write_text_atomic(path, "two\n")
    assert path.read_text() == "two\n" and sorted(p.name for p in tmp_path.iterdir()) == ["record.json"]


def test_a_lone_surrogate_is_written_escaped_not_refused(tmp_path):
    path = tmp_path / "page.html"
    write_text_atomic(path, "name \ud800 end")
    assert path.read_text() == "name \\ud800 end"


def _with_a_full_disk(statement: str, size: int) -> subprocess.CompletedProcess:
    """`statement` in a process whose files may not grow past `size` bytes (a full disk, for it)."""
    code = ("import resource, signal; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
            f"resource.setrlimit(resource.RLIMIT_FSIZE, ({size}, {size})); "
            "from pathlib import Path; from sglang_spec_harness.files import append_whole, write_text_atomic, WriteError\n"
            f"try:\n    {statement}\n"
            "except WriteError as exc:\n    print(exc, '|', exc.filename, '|', isinstance(exc, OSError))")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)


def test_a_write_that_fails_keeps_the_previous_version_and_no_temporary_file(tmp_path):
    path = tmp_path / "run.json"
    path.write_text("previous\n")
    done = _with_a_full_disk(f"write_text_atomic(Path({str(path)!r}), 'x' * 4096)", 1024)
    assert done.returncode == 0, done.stderr
    message, filename, is_os_error = (part.strip() for part in done.stdout.split("|"))
    assert message.startswith(f"cannot write {path}: ") and filename == str(path) and is_os_error == "True"
    assert path.read_text() == "previous\n" and sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]


def test_a_line_cut_short_is_cut_off_again(tmp_path):
    path = tmp_path / "requests.jsonl"
    path.write_text('{"index": 0}\n')
    done = _with_a_full_disk(f"append_whole(Path({str(path)!r}), b'x' * 200 + b'\\n')", 64)
    assert done.stdout.startswith(f"cannot write {path}: "), (done.stdout, done.stderr)
    assert path.read_text() == '{"index": 0}\n'
    append_whole(path, b'{"index": 1}\n')
    assert path.read_text().splitlines() == ['{"index": 0}', '{"index": 1}']


def test_write_error_names_the_file_not_its_temporary(tmp_path):
    missing = tmp_path / "no" / "such" / "dir" / "results.json"
    with pytest.raises(WriteError) as caught:
        write_text_atomic(missing, "x")
    assert caught.value.filename == str(missing) and str(caught.value).startswith(f"cannot write {missing}: ")
    assert caught.value.strerror


def test_the_latest_link_points_at_the_run_and_never_replaces_a_real_file(tmp_path):
    runs = tmp_path / "reports" / "runs"
    first, second = runs / "20260101-000000-a", runs / "20260101-000001-a"
    first.mkdir(parents=True)
    second.mkdir()
    link = latest_link_path(runs)
    assert link == tmp_path / "reports" / "latest" and latest_link_path(tmp_path / "out") == tmp_path / "out" / "latest"
    assert update_latest_link(first, link) and link.resolve() == first.resolve()
    assert update_latest_link(second, link) and os.readlink(link) == "runs/20260101-000001-a"
    assert sorted(p.name for p in link.parent.iterdir()) == ["latest", "runs"]  # no temporary link left
    link.unlink()
    link.write_text("mine")
    assert not update_latest_link(second, link) and link.read_text() == "mine"
