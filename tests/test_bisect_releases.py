"""The search of `harness bisect --sglang-releases`: where an ordered range's verdict changes, on
synthetic verdict sequences (the runs themselves are tested with real servers elsewhere), and the
command's input errors."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sglang_spec_harness.bisect.search import find_change
from sglang_spec_harness.vocabulary import FAIL, INCONCLUSIVE, PASS

REPO = Path(__file__).resolve().parents[1]
SKIP = INCONCLUSIVE


class Judge:
    """Verdicts by index; records what was judged, in order."""

    def __init__(self, verdicts: list[str]):
        self.verdicts, self.calls = verdicts, []

    def __call__(self, index: int, role: str, untried: int | None) -> str:
        self.calls.append((index, role))
        return self.verdicts[index]


def test_a_fast_path_that_arrives_is_found_at_its_first_release():
    verdicts = [FAIL] * 5 + [PASS] * 13  # 18 releases, the change at the sixth
    judge = Judge(verdicts)
    found = find_change(len(verdicts), judge)
    assert (found.status, found.first, found.last_old, found.terms) == ("found", 5, 4, (FAIL, PASS))
    assert judge.calls[:2] == [(17, "newest"), (0, "oldest")]
    assert len(judge.calls) <= math.ceil(math.log2(len(verdicts) - 1)) + 2
    assert len({i for i, _ in judge.calls}) == len(judge.calls)  # nothing judged twice


def test_a_regression_is_found_the_other_way_round():
    verdicts = [PASS] * 3 + [FAIL] * 4
    found = find_change(len(verdicts), Judge(verdicts))
    assert (found.status, found.first, found.terms) == ("found", 3, (PASS, FAIL))


def test_both_ends_agreeing_is_no_change_after_two_runs():
    judge = Judge([PASS, FAIL, PASS])
    found = find_change(3, judge)
    assert found.status == "no change" and found.first is None and len(judge.calls) == 2


def test_an_end_that_cannot_run_moves_inwards():
    verdicts = [SKIP, SKIP, FAIL, FAIL, PASS, PASS, SKIP]
    judge = Judge(verdicts)
    found = find_change(len(verdicts), judge)
    assert (found.oldest, found.newest, found.first) == (2, 5, 4)
    assert judge.calls[:4] == [(6, "newest"), (5, "newest"), (0, "oldest"), (1, "oldest")]


def test_skipped_releases_between_the_change_leave_it_not_narrowed():
    verdicts = [FAIL, FAIL, SKIP, SKIP, PASS]
    found = find_change(len(verdicts), Judge(verdicts))
    assert found.status == "not narrowed" and found.last_old == 1 and found.candidates == (2, 3, 4)


def test_nothing_that_can_run_cannot_be_judged():
    assert find_change(3, Judge([SKIP] * 3)).status == "cannot judge"
    only_newest = find_change(3, Judge([SKIP, SKIP, PASS]))
    assert only_newest.status == "cannot judge" and only_newest.newest == 2


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=2, max_value=40), st.data())
def test_any_single_change_with_skips_is_found_or_bracketed(count, data):
    change = data.draw(st.integers(min_value=1, max_value=count - 1))
    old, new = data.draw(st.sampled_from([(FAIL, PASS), (PASS, FAIL)]))
    verdicts = [old if i < change else new for i in range(count)]
    for i in data.draw(st.sets(st.integers(min_value=1, max_value=count - 2), max_size=count // 3)) if count > 2 else ():
        verdicts[i] = SKIP
    judge = Judge(verdicts)
    found = find_change(count, judge)
    judged = {i for i, _ in judge.calls}
    assert len(judged) == len(judge.calls)
    if found.status == "found":
        assert verdicts[found.first] == new and verdicts[found.last_old] == old
        assert all(verdicts[i] == SKIP for i in range(found.last_old + 1, found.first))
        assert found.first == next(i for i in range(change, count) if verdicts[i] != SKIP)
    else:
        assert found.status == "not narrowed"
        assert change in found.candidates or verdicts[change] == SKIP
    if SKIP not in verdicts:
        assert found.status == "found" and found.first == change
        assert len(judge.calls) <= math.ceil(math.log2(count - 1)) + 2 if count > 2 else len(judge.calls) == 2


def harness(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sglang_spec_harness.commands.cli", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("args, message", [
    (["--sglang-releases", "0.5.13", "--source", "."], "--sglang-releases bisects releases: give it without --source, --good and --bad"),
    ([], "give --source REPO --good REV --bad REV (commits), or --sglang-releases A..B (releases)"),
])
def test_bisect_input_errors_are_one_line(args, message):
    done = harness("bisect", "scenarios/sglang_cpu_release_sweep.yaml", *args)
    assert done.returncode == 2 and done.stderr.strip() == f"harness bisect: {message}"
