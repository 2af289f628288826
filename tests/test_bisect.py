"""`harness bisect` end to end: a real git repository, micro servers on loopback, real verdicts.

The repository's commits carry `python/bisect_demo_patch.py`, which the candidate imports through
`pythonpath:` and `patches:`. From the planted commit on, the module makes the micro server select
draft tokens without the fast path: the softmax is back in the draft, and the kernel-count rule
fails. The bisection must name that commit, run the baseline once, and leave nothing behind.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml
from support.faultkit import default_signals_in_child
from support.proc_helpers import group_gone, process_gone
from support.bisect_demo import (
    BROKEN,
    CLEAN,
    SOFTMAX_BACK,
    assert_nothing_left,
    git,
    make_repo,
    same_file,
    server_pids,
    worktrees_used,
    write_scenario,
)

from sglang_spec_harness.points.plan import choose_rules, fixed_design, point_plan
from sglang_spec_harness.points.runner import why_it_stopped
from sglang_spec_harness.run.execute import RunResult
from sglang_spec_harness.commands import cli
from sglang_spec_harness.scenario import load_scenario, scenario_from_dict

REPO = Path(__file__).resolve().parents[1]
COMMITS, PLANTED = 16, 9


def bisect_command(scenario: Path, repo: Path, good: str, bad: str, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "sglang_spec_harness.commands.cli", "bisect", str(scenario), "--source", str(repo),
            "--good", good, "--bad", bad, "--out", str(out), *extra]


# ---- the planted regression -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    root = tmp_path_factory.mktemp("bisect")
    repo, hashes = make_repo(root, [SOFTMAX_BACK if i >= PLANTED else CLEAN for i in range(COMMITS)])
    scenario = write_scenario(root, repo)
    out = root / "out"
    head_before = git(repo, "rev-parse", "HEAD")
    done = subprocess.run(bisect_command(scenario, repo, hashes[0], "HEAD", out, "--json"), cwd=root,
                          capture_output=True, text=True, env={**os.environ, "CI": "true"}, timeout=600)
    assert git(repo, "rev-parse", "HEAD") == head_before
    return {"repo": repo, "hashes": hashes, "out": out, "done": done, "json": json.loads(done.stdout or "null")}


@pytest.mark.slow
def test_bisect_names_the_planted_commit_in_at_most_log2_n_plus_one_steps(planted):
    done, result, hashes = planted["done"], planted["json"], planted["hashes"]
    assert done.returncode == 0, done.stderr
    assert result["first_bad"] == hashes[PLANTED]
    assert result["first_bad_commit"] == {"hash": hashes[PLANTED], "subject": f"revision {PLANTED}",
                                          "author_date": f"2025-01-{PLANTED + 1:02d}T12:00:00+00:00"}
    n = COMMITS - 1
    assert result["commits_in_range"] == n and result["status"] == "found"
    steps = result["steps"]
    assert len(steps) <= math.ceil(math.log2(n)) + 1 == result["max_steps"]
    assert steps[0]["commit"] == hashes[-1] and steps[0]["role"] == "bad revision"
    assert {s["commit"] for s in steps} >= {hashes[PLANTED], hashes[PLANTED - 1]}  # the two sides of the edge
    for step in steps:
        bad = hashes.index(step["commit"]) >= PLANTED
        assert (step["verdict"], step["mark"]) == (("FAIL", "bad") if bad else ("PASS", "good")), step
        if bad:
            assert step["reason"].startswith("no_softmax: candidate ") and "expected == 0" in step["reason"]
    # the default rules: the exact ones that judge the candidate (not the baseline's, not TPOT)
    assert result["rules"] == ["no_softmax", "same_outputs"] and result["mode"] == "exact"
    for step in steps:  # --json: the progress went to stderr
        assert f"step {step['number']}: {step['commit'][:12]} {step['verdict']} -> {step['mark']}" in done.stderr


def test_the_baseline_runs_once_and_each_step_runs_only_the_variant(planted):
    result = planted["json"]
    baseline = Path(result["baseline_run_dir"])
    assert [p.name.split("-", 1)[1] for p in (baseline / "trials").iterdir()] == ["baseline-profiled"]
    for step in result["steps"]:
        run_dir = Path(step["run_dir"])
        trials = sorted((run_dir / "trials").iterdir())
        base_trials = sorted((baseline / "trials").iterdir())
        linked = [t for t in trials if any(same_file(t / "trial.json", b / "trial.json") for b in base_trials)]
        own = [t for t in trials if t not in linked]
        assert [t.name.split("-", 1)[1] for t in own] == ["candidate-profiled"]
        assert [t.name for t in linked] == [b.name for b in base_trials]
        assert not any(t.is_symlink() for t in trials)  # a self-contained run directory
        run = json.loads((run_dir / "run.json").read_text())
        assert run["status"] == "complete" and run["server_launches"] == 1
        assert sorted(e["dir"] for e in run["plan"]) == sorted(f"trials/{t.name}" for t in trials)
        scenario = yaml.safe_load((run_dir / "scenario.yaml").read_text())
        assert [c["name"] for c in scenario["rules"]] == ["no_softmax", "same_outputs"]
        assert step["commit"][:12] in scenario["variants"]["candidate"]["description"]
        env = json.loads((run_dir / "environment.json").read_text())
        assert set(env["variants"]) == {"baseline", "candidate"}


@pytest.mark.slow
def test_every_step_is_a_run_directory_that_check_and_report_accept(planted, capsys):
    result = planted["json"]
    for step in result["steps"]:
        code = cli.main(["check", step["run_dir"]])
        assert code == {"PASS": 0, "FAIL": 1}[step["verdict"]]
        stored = json.loads((Path(step["run_dir"]) / "results.json").read_text())
        identity = next(r for r in stored["rules"] if r["name"] == "same_outputs")
        # the profiled passes of both arms send the same prompts: their outputs are compared
        assert identity["verdict"] == "PASS" and identity["numbers"]["source"] == "profiled"
        assert identity["numbers"]["compared"] == 2
        assert cli.main(["report", step["run_dir"]]) == 0
    capsys.readouterr()


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.hrefs += [v for k, v in attrs if tag == "a" and k == "href"]


def test_the_bisection_page_links_each_steps_report(planted):
    out_dir = Path(planted["json"]["out_dir"])
    page = (out_dir / "index.html").read_text()
    assert 'id="verdict">FOUND<' in page and planted["hashes"][PLANTED] in page
    links = _Links()
    links.feed(page)
    reports = [h for h in links.hrefs if h.endswith("/index.html")]
    assert reports == [f"steps/{Path(s['run_dir']).name}/index.html" for s in planted["json"]["steps"]]
    assert all((out_dir / h).exists() for h in links.hrefs) and "baseline" in links.hrefs
    assert json.loads((out_dir / "bisect.json").read_text())["first_bad"] == planted["hashes"][PLANTED]


def test_no_worktree_or_server_is_left_behind(planted):
    assert_nothing_left(planted["repo"], planted["out"])


# ---- skipped commits ----------------------------------------------------------------------------


@pytest.mark.slow
def test_a_commit_whose_server_cannot_start_is_skipped_and_the_range_is_not_narrowed(tmp_path):
    # revision 1 cannot be imported, revision 2 brings the softmax back: which of the two broke it?
    repo, hashes = make_repo(tmp_path, [CLEAN, BROKEN, SOFTMAX_BACK])
    scenario = write_scenario(tmp_path, repo)
    out = tmp_path / "out"
    done = subprocess.run(bisect_command(scenario, repo, hashes[0], hashes[-1], out, "--rule", "no_softmax"),
                          cwd=tmp_path, capture_output=True, text=True, env={**os.environ, "CI": "true"}, timeout=600)
    assert done.returncode == 3, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    at = lines.index("not narrowed to one commit; the first bad commit is one of:")
    assert [line.split()[0] for line in lines[at + 1:at + 3]] == [hashes[2], hashes[1]]
    result = json.loads(next(out.glob("*/bisect.json")).read_text())
    assert result["status"] == "not narrowed" and result["first_bad"] is None and result["rules"] == ["no_softmax"]
    assert [(s["commit"], s["mark"]) for s in result["steps"]] == [(hashes[2], "bad"), (hashes[1], "skip")]
    skipped = result["steps"][1]
    # the reason is the server's own last error line, not only "the trial failed"
    assert skipped["verdict"] == "INCONCLUSIVE" and skipped["reason"].startswith("run incomplete: ")
    assert "ImportError: revision 1 is broken" in skipped["reason"]
    assert skipped["attempts"] == [skipped["run_dir"]]  # exact rules: no retry
    log = next((Path(skipped["run_dir"]) / "trials").glob("*-candidate-profiled/server.log")).read_text()
    assert "revision 1 is broken" in log
    assert_nothing_left(repo, out)


@pytest.mark.slow
def test_a_baseline_that_cannot_start_ends_the_bisection_before_any_step_runs(tmp_path):
    repo, hashes = make_repo(tmp_path, [CLEAN, SOFTMAX_BACK])
    scenario = write_scenario(tmp_path, repo)
    data = yaml.safe_load(scenario.read_text())
    (tmp_path / "baseline_broken.py").write_text('raise ImportError("the baseline is broken")\n')
    data["variants"]["baseline"].update(pythonpath=[str(tmp_path)], patches=["baseline_broken"])
    scenario.write_text(yaml.safe_dump(data, sort_keys=False))
    out = tmp_path / "out"
    done = subprocess.run(bisect_command(scenario, repo, hashes[0], hashes[-1], out, "--json"), cwd=tmp_path,
                          capture_output=True, text=True, env={**os.environ, "CI": "true"}, timeout=600)
    result = json.loads(done.stdout)
    assert done.returncode == 3 and result["status"] == "cannot judge", done.stderr
    assert result["message"].startswith("the run of the arms that do not change (") and "failed" in result["message"]
    # the step that needed it says so, and never started its own server
    (step,) = result["steps"]
    assert (step["commit"], step["mark"], step["run_dir"], step["attempts"]) == (hashes[1], "skip", None, [])
    assert step["reason"] == f"not judged: {result['message']}"
    assert result["baseline_run_dir"] and not list(out.glob("*/steps/*"))
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1


@pytest.mark.slow
def test_a_statistical_rule_runs_a_full_ab_per_step_and_retries_an_inconclusive_one(tmp_path):
    # one timed trial per arm: the TPOT rule can only say INCONCLUSIVE, so the bad revision is tried
    # twice (--retries 1), then skipped, and nothing can be bisected
    repo, hashes = make_repo(tmp_path, [CLEAN, SOFTMAX_BACK])
    scenario = write_scenario(tmp_path, repo)
    data = yaml.safe_load(scenario.read_text())
    data["trials"] = {"repetitions": 1, "profiled": 0}
    scenario.write_text(yaml.safe_dump(data))
    out = tmp_path / "out"
    done = subprocess.run(bisect_command(scenario, repo, hashes[0], hashes[1], out, "--rule", "faster",
                                         "--retries", "1", "--json"),
                          cwd=tmp_path, capture_output=True, text=True, env={**os.environ, "CI": "true"}, timeout=600)
    assert done.returncode == 3, done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "cannot judge" and result["mode"] == "statistical"
    assert result["baseline_run_dir"] is None and not (Path(result["out_dir"]) / "baseline").exists()
    [step] = result["steps"]
    assert [Path(a).name for a in step["attempts"]] == [f"01-{hashes[1][:12]}", f"01-{hashes[1][:12]}-try2"]
    assert step["verdict"] == "INCONCLUSIVE" and step["mark"] == "skip" and step["reason"].startswith("faster: ")
    assert step["reason"].endswith("(attempt 2 of 2)")
    assert result["message"] == f"the bad revision {hashes[1][:12]} cannot be judged: {step['reason']}"
    for attempt in map(Path, step["attempts"]):
        trials = sorted(t.name.split("-", 1)[1] for t in (attempt / "trials").iterdir())
        assert trials == ["baseline-timed", "candidate-timed"]  # both arms, every attempt: an A/B
        assert not any(t.is_symlink() for t in (attempt / "trials").iterdir())
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    pids = server_pids(out)
    assert len(pids) == 4 and all(process_gone(pid) and group_gone(pid) for pid in pids)


# ---- bad input ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_repo(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad_input")
    repo, hashes = make_repo(root, [CLEAN, CLEAN, SOFTMAX_BACK])
    return root, repo, hashes


@pytest.mark.parametrize("case, message", [
    ("not a repository", "--source {root}: not a git repository"),
    ("unknown revision", "--bad nosuchrev: no such commit in {repo}"),
    ("good after bad", "--good {h2} is not an ancestor of --bad {h0} in {repo}"),
    ("same commit", "--good {h0} and --bad {h0} are the same commit: nothing to bisect"),
    ("unknown rule", "--rule nosuchrule: no such rule in {scenario} (rules: no_softmax, same_outputs, baseline_softmax, faster)"),
    ("rule of the baseline", "--rule baseline_softmax: does not judge variant 'candidate', so it would give the same verdict at every commit"),
    ("unknown variant", "--variant other: no such variant in {scenario} (variants: baseline, candidate)"),
    ("path outside the repository", "{scenario}: variants.candidate.pythonpath: no entry lies inside {repo}, so every commit would run the same code"),
    ("a --set the schema refuses", "{scenario} with --set: trials.repetitions: "),
    ("a --reuse that is no sweep", "--reuse {root}: no sweep.json there"),
])
def test_bad_input_exits_2_with_one_line_and_starts_nothing(small_repo, case, message, capsys):
    root, repo, hashes = small_repo
    scenario = write_scenario(root, repo)
    args = {"source": repo, "good": hashes[0], "bad": hashes[2], "extra": []}
    if case == "not a repository":
        args["source"] = root
    elif case == "unknown revision":
        args["bad"] = "nosuchrev"
    elif case == "good after bad":
        args["good"], args["bad"] = hashes[2], hashes[0]
    elif case == "same commit":
        args["bad"] = hashes[0]
    elif case == "unknown rule":
        args["extra"] = ["--rule", "nosuchrule"]
    elif case == "rule of the baseline":
        args["extra"] = ["--rule", "no_softmax", "--rule", "baseline_softmax"]
    elif case == "unknown variant":
        args["extra"] = ["--variant", "other"]
    elif case == "a --set the schema refuses":
        args["extra"] = ["--set", "trials.repetitions=0"]
    elif case == "a --reuse that is no sweep":
        args["extra"] = ["--reuse", str(root)]
    else:
        scenario = write_scenario(root, repo, pythonpath=[str(root)])
    out = root / f"out-{case.replace(' ', '-')}"
    code = cli.main(bisect_command(scenario, args["source"], args["good"], args["bad"], out, *args["extra"])[3:])
    captured = capsys.readouterr()
    expected = "harness bisect: " + message.format(root=root, repo=repo.resolve(), scenario=scenario,
                                                  h0=hashes[0], h2=hashes[2])
    assert code == 2 and len(captured.err.splitlines()) == 1 and captured.out == ""
    assert captured.err.startswith(expected)
    assert not out.exists()


def test_statistical_rules_run_both_arms_at_every_step():
    s = scenario_from_dict({
        "name": "s", "engine": "micro", "variants": {"baseline": {}, "candidate": {"pythonpath": ["/src/x"]}},
        "trials": {"repetitions": 6, "profiled": 1, "seed": 1},
        "rules": [{"name": "faster", "kind": "tpot_gain"},
                   {"name": "no_softmax", "kind": "kernel_count", "region": "DRAFT_DECODE", "pattern": "softmax",
                    "variants": ["candidate"], "equals": 0}]})
    exact = point_plan(s, "candidate", choose_rules(s, "candidate", [], "s.yaml"), "s.yaml")
    assert not exact.statistical and exact.once == {("baseline", "profiled")} and exact.each_point == {("candidate", "profiled")}
    ab = point_plan(s, "candidate", choose_rules(s, "candidate", ["faster", "no_softmax"], "s.yaml"), "s.yaml")
    assert ab.statistical and ab.once == set()
    assert ab.each_point == {("baseline", "timed"), ("candidate", "timed"), ("baseline", "profiled"), ("candidate", "profiled")}


# ---- the shipped adaptive scenario (trials.budget) -------------------------------------------------

SHIPPED = REPO / "scenarios" / "micro_topk1.yaml"


def on_the_repository(repo: Path, *extra: str) -> list[str]:
    """--set: the shipped scenario's candidate imports the demo repository's patch module."""
    return ["--set", f"variants.candidate.pythonpath=[{repo / 'python'}]", "--set",
            "variants.candidate.patches=[bisect_demo_patch]", *extra]


def test_the_adaptive_design_is_set_aside_with_a_note_only_where_timed_trials_run():
    shipped = load_scenario(SHIPPED)
    assert shipped.trials.budget is not None
    exact, note = fixed_design(shipped, choose_rules(shipped, "candidate", [], "s.yaml"), "bisect")
    assert exact.trials.budget is None and note is None
    assert exact.trials.model_dump(exclude={"budget"}) == shipped.trials.model_dump(exclude={"budget"})
    tpot = choose_rules(shipped, "candidate", ["tpot_improved"], "s.yaml")
    fixed, note = fixed_design(shipped, tpot, "bisect")
    assert fixed.trials.budget is None and note == ("trials.budget (an adaptive design) set aside: harness bisect runs "
                                                    "each point in parts, so its timed trials follow the scenario's fixed "
                                                    "design: 6 rounds, 2 launch(es) per arm")
    _, swept = fixed_design(shipped, choose_rules(shipped, "candidate", [], "s.yaml"), "sweep", timed=True)
    assert swept is not None and swept.startswith("trials.budget (an adaptive design) set aside: harness sweep")
    fixed_already = shipped.model_copy(update={"trials": fixed.trials})
    assert fixed_design(fixed_already, tpot, "bisect") == (fixed_already, None)


@pytest.mark.slow
def test_the_shipped_adaptive_scenario_bisects_on_its_exact_rules(tmp_path):
    repo, hashes = make_repo(tmp_path, [CLEAN, CLEAN, SOFTMAX_BACK, SOFTMAX_BACK])
    out = tmp_path / "out"
    done = subprocess.run(bisect_command(SHIPPED, repo, hashes[0], hashes[-1], out, "--json", *on_the_repository(repo)),
                          cwd=tmp_path, capture_output=True, text=True, env={**os.environ, "CI": "true"}, timeout=600)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (result["first_bad"], result["mode"], result["notes"]) == (hashes[2], "exact", [])
    assert result["rules"] == ["candidate_no_softmax_draft_decode", "candidate_no_softmax_draft_extend",
                               "greedy_outputs_identical"]
    assert "note:" not in done.stderr
    for step in result["steps"]:
        ran = load_scenario(Path(step["run_dir"]) / "scenario.yaml")
        assert ran.trials.budget is None and ran.trials.repetitions == 6
    assert_nothing_left(repo, out)


@pytest.mark.slow
def test_a_tpot_rule_on_the_shipped_adaptive_scenario_runs_its_fixed_design_with_a_note(tmp_path):
    repo, hashes = make_repo(tmp_path, [CLEAN, SOFTMAX_BACK])
    out = tmp_path / "out"
    extra = on_the_repository(repo, "--set", "trials.repetitions=2", "--set", "trials.launches=1")
    done = subprocess.run(bisect_command(SHIPPED, repo, hashes[0], hashes[1], out, "--json", "--rule", "tpot_improved",
                                         "--retries", "0", *extra),
                          cwd=tmp_path, capture_output=True, text=True, env={**os.environ, "CI": "true"}, timeout=600)
    note = ("trials.budget (an adaptive design) set aside: harness bisect runs each point in parts, so its timed "
            "trials follow the scenario's fixed design: 2 rounds, 1 launch(es) per arm")
    assert done.returncode in (0, 3), done.stderr  # whatever TPOT says of 2 rounds: the step ran
    assert f"\n  note: {note}\n" in done.stderr
    result = json.loads(done.stdout)
    assert (result["notes"], result["mode"]) == ([note], "statistical")
    (step,) = result["steps"]
    assert step["commit"] == hashes[1] and step["verdict"] in ("PASS", "FAIL", "INCONCLUSIVE")
    run_dir = Path(step["run_dir"])
    assert load_scenario(run_dir / "scenario.yaml").trials.budget is None
    timed = [entry for entry in json.loads((run_dir / "run.json").read_text())["plan"] if entry["kind"] == "timed"]
    assert sorted((e["variant"], e["repetition"]) for e in timed) == [
        ("baseline", 0), ("baseline", 1), ("candidate", 0), ("candidate", 1)]
    assert json.loads((run_dir / "results.json").read_text())["run_status"] == "complete"
    assert_nothing_left(repo, out)


def test_adopting_trials_that_are_not_a_disjoint_part_of_one_plan_is_refused(tmp_path):
    from support.rundir_factory import Arm, write_run_dir

    from sglang_spec_harness.errors import HarnessInputError
    from sglang_spec_harness.run.combine import adopt_trials

    one = write_run_dir(tmp_path / "a", Arm(tpot_ms=[10.0]), Arm(tpot_ms=[9.0]))
    two = write_run_dir(tmp_path / "b", Arm(tpot_ms=[10.0]), Arm(tpot_ms=[9.0]))
    with pytest.raises(HarnessInputError, match="trials/01-baseline-timed: already exists: the two runs are not subsets of one plan"):
        adopt_trials(one, two)


# ---- interruption -------------------------------------------------------------------------------


@pytest.mark.parametrize("signum, wait_for", [
    (signal.SIGINT, "*/steps/01-*/trials/*-candidate-profiled/server.log"),  # a step's worktree and server
    (signal.SIGTERM, "*/baseline/trials/*/server.log"),
])
@pytest.mark.slow
def test_an_interrupted_bisection_exits_128_plus_signal_and_cleans_up(tmp_path, signum, wait_for):
    repo, hashes = make_repo(tmp_path, [CLEAN, CLEAN, SOFTMAX_BACK, SOFTMAX_BACK])
    scenario = write_scenario(tmp_path, repo)
    out = tmp_path / "out"
    proc = subprocess.Popen(bisect_command(scenario, repo, hashes[0], hashes[-1], out), cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "CI": "true"},
                            preexec_fn=default_signals_in_child)
    try:
        deadline = time.monotonic() + 300
        while not list(out.glob(wait_for)) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.1)
        assert list(out.glob(wait_for)), "the bisection never got there"
        proc.send_signal(signum)
        _stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signum, stderr
    assert "Traceback" not in stderr
    reason = "interrupted (Ctrl-C)" if signum == signal.SIGINT else "interrupted (terminated by SIGTERM)"
    assert stderr.strip().splitlines()[-1].startswith(f"harness bisect: {reason}; steps so far: ")
    result = json.loads(next(out.glob("*/bisect.json")).read_text())
    assert result["status"] == "interrupted" and result["first_bad"] is None
    if signum == signal.SIGINT:
        assert len(result["steps"]) == 1 and result["steps"][-1]["reason"] == reason
        assert not any(p.exists() for p in worktrees_used(out))
    git_state = git(repo, "worktree", "list", "--porcelain")
    assert git_state.count("worktree ") == 1 and not git(repo, "for-each-ref", "refs/bisect")
    pids = server_pids(out)
    assert pids and all(process_gone(pid) and group_gone(pid) for pid in pids)


# A point whose server was killed during start-up, as a loaded machine's sweep stored it (0.5.13,
# SIGKILL from the kernel): its log ends with the warm-up request's refused connection.
KILLED_ERROR = ("server launch failed: 01-candidate-launch0: server killed by SIGKILL during startup (log: "
                "points/01-0.5.13/launches/01-candidate-launch0/server.log): [2026-12-05 09:52:34] "
                "kill_process_tree called: parent_pid=10594, include_parent=True, pid=10594")
REFUSED = ("requests.exceptions.ConnectionError: HTTPConnectionPool(host='127.0.0.1', port=35638): Max retries "
           "exceeded with url: /model_info (Caused by NewConnectionError(...: [Errno 111] Connection refused))")


def test_a_point_killed_by_a_signal_says_so_rather_than_its_last_symptom():
    run = RunResult(run_dir=None, status="incomplete", plan=[], error=KILLED_ERROR, log_tail=["starting", REFUSED])
    assert why_it_stopped(run) == KILLED_ERROR
    # a server that failed on its own: its last error line is the reason, as before
    crashed = RunResult(run_dir=None, status="incomplete", plan=[], error="server launch failed: exited with code 1",
                        log_tail=["ImportError: cannot import name 'x'", "  File \"a.py\", line 1", "shutting down"])
    assert why_it_stopped(crashed) == "ImportError: cannot import name 'x'"
    assert why_it_stopped(RunResult(run_dir=None, status="incomplete", plan=[])) == "the run did not complete"
