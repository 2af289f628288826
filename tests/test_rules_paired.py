"""The TPOT and A/A rules pair timed trials by repetition (interleaved runs) and fall back to the
unpaired rule when too few complete pairs exist."""

from __future__ import annotations

import json

import numpy as np

from sglang_spec_harness.verdict import stats
from sglang_spec_harness.verdict.judge import evaluate_run
from sglang_spec_harness.rundir import load_run_dir
from support.rundir_factory import Arm, file_facts, write_run_dir


def drifting(n: int, ratio: float, seed: int, *, drift: float = 0.4, cv: float = 0.03):
    """Per-repetition TPOTs of both arms: a level drifting down by `drift` over the run (shared by
    the two trials of a repetition) and independent per-trial noise."""
    rng = np.random.default_rng(seed)
    level = 11.5 * (1 - drift * np.arange(n) / max(n - 1, 1))
    base = level * np.exp(rng.normal(0, cv, n))
    cand = ratio * level * np.exp(rng.normal(0, cv, n))
    return list(base), list(cand)


def tpot_rule(tmp_path, base_ms, cand_ms, **kw):
    base = Arm(tpot_ms=base_ms, profile=[file_facts(softmax_per_replay=2)])
    cand = Arm(tpot_ms=cand_ms, profile=[file_facts(softmax_per_replay=0)])
    results = evaluate_run(load_run_dir(write_run_dir(tmp_path, base, cand, **kw)))
    return {r.name: r for r in results.rules}


def test_drifting_run_with_a_real_gain_passes_paired(tmp_path):
    base, cand = drifting(7, 0.88, seed=1)
    rule = tpot_rule(tmp_path, base, cand)["tpot"]
    n = rule.numbers
    assert rule.verdict == "PASS", rule.reason
    assert rule.reason.startswith("paired over 7 repetitions")
    assert n.paired is True and n.pairs == 7 and n.method == "paired-t-log"
    assert n.pair_ratios == [c / b for b, c in zip(base, cand)]
    assert n.pair_repetitions == list(range(7))
    assert 0.84 < n.ratio < 0.92
    # The unpaired rule cannot resolve the same data: the drift swamps the gain.
    unpaired = stats.tpot_gain_decision(base, cand, min_gain=0.01, resamples=2000)
    assert unpaired.verdict == "INCONCLUSIVE"
    json.dumps(rule.model_dump(mode="json"), allow_nan=False)


def test_too_few_pairs_falls_back_to_unpaired_and_says_so(tmp_path):
    base, cand = drifting(7, 0.90, seed=2, drift=0.0, cv=0.01)
    rule = tpot_rule(tmp_path, base, cand[:5])["tpot"]  # candidate lost two repetitions: 5 pairs
    n = rule.numbers
    assert n.paired is False and n.pairs == 5 and len(n.pair_ratios) == 5
    assert n.method == "percentile-bootstrap"
    assert rule.reason.startswith("unpaired (5 complete repetition pair(s), paired mode needs >= 6)")
    assert "lack an ok trial" in rule.reason
    assert rule.verdict == "PASS", rule.reason  # 7 vs 5 trials, no drift: the unpaired rule decides


def test_failed_trial_is_left_out_of_the_pairs(tmp_path):
    base, cand = drifting(8, 0.88, seed=3)
    run = write_run_dir(tmp_path, Arm(tpot_ms=base), Arm(tpot_ms=cand))
    # Mark the candidate's repetition 3 as failed: its baseline partner must not be used either.
    for info_path in (run / "trials").glob("*-candidate-timed/trial.json"):
        info = json.loads(info_path.read_text())
        if info["repetition"] == 3:
            info["status"] = "failed"
            info_path.write_text(json.dumps(info))
    rule = {r.name: r for r in evaluate_run(load_run_dir(run)).rules}["tpot"]
    assert rule.numbers.paired and rule.numbers.pairs == 7
    assert rule.numbers.pair_repetitions == [0, 1, 2, 4, 5, 6, 7]
    assert "paired over 7 repetitions" in rule.reason


def test_aa_run_with_drift_is_paired_and_gives_no_false_verdict(tmp_path):
    a, b = drifting(8, 1.0, seed=4)
    results = evaluate_run(load_run_dir(write_run_dir(tmp_path, Arm(tpot_ms=a), Arm(tpot_ms=b), aa=True)))
    r = {x.name: x for x in results.rules}["aa_noise_floor"]
    assert r.verdict == "PASS", r.reason
    assert r.numbers.paired and r.numbers.pairs == 8 and len(r.numbers.pair_ratios) == 8
    assert "paired over 8 repetitions" in r.reason and "smallest detectable gain" in r.reason
    noise = r.numbers.noise
    assert noise.paired and noise.cv_within_pair < noise.cv  # the drift cancels within pairs
    assert r.numbers.decision.estimate.method == "paired-t-log"
