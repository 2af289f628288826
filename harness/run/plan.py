"""The plan of a run: which server runs (trials) happen, in which order.

One trial is one server start: a variant ("arm") x a repetition x a kind. Timed trials run without
the profiler and give one TPOT sample each; profiled trials give trace structure and are never used
for timing.

Order:
- Profiled trials come FIRST. The first server start on a machine pays one-off costs (cold page
  cache for imports and weights, CPU clocks ramping up); profiled trials never count for timing, so
  they absorb that instead of whichever timed arm would have gone first. They also put the structural
  evidence (kernel counts) on disk early, before the long timed part.
- `abba`: repetition r runs the arms in declaration order when r is even and reversed when r is odd,
  so two arms give A B B A A B B A ...; three give A B C C B A A B C ... Each arm sits at every
  position equally often, which cancels a linear drift (thermal, background load).
- `random` (the default): randomised blocks: each repetition runs every arm once, in an order
  drawn from `random.Random(trials.seed)`, so the same seed always gives the same plan and no arm can
  bunch up at one end of the run. With `seed: null` every run draws a new seed (recorded in its
  scenario.yaml). Randomising the order inside each repetition is what makes the paired test exact:
  a fixed pattern such as ABBA can line up with a periodic disturbance on the machine (A/A runs on
  the 2-core CI VM gave false verdicts in 2 of 6 ABBA runs, the coin-flip null in 2% of splits).

A/A mode (`aa=True`): two arms named `baseline` and `candidate`, both configured from the baseline
variant; whatever differs between them is noise. Checks treat them as baseline and candidate.
"""

from __future__ import annotations

import random
import secrets
from dataclasses import asdict, dataclass
from typing import Literal

from harness.scenario import Scenario

TrialKind = Literal["timed", "profiled"]
AA_ARMS = ("baseline", "candidate")


@dataclass(frozen=True)
class Trial:
    index: int  # position in the run, 0-based
    variant: str  # the arm's name, as results and checks see it
    kind: TrialKind
    repetition: int  # 0-based, per arm and kind
    config: str  # the scenario variant whose server configuration runs (differs from `variant` in A/A)

    @property
    def dir_name(self) -> str:
        return f"{self.index:02d}-{self.variant}-{self.kind}"

    @property
    def dir(self) -> str:
        """The trial directory relative to the run directory."""
        return f"trials/{self.dir_name}"

    def to_json_dict(self) -> dict:
        d = asdict(self)
        d["dir"] = self.dir
        return d


def arms(scenario: Scenario, *, aa: bool = False) -> dict[str, str]:
    """Arm name -> the variant configuration it runs."""
    if aa:
        return {arm: "baseline" for arm in AA_ARMS}
    return {name: name for name in scenario.variants}


def _orders(arm_names: list[str], blocks: int, order: str, seed: int) -> list[list[str]]:
    """One list of arm names per block (repetition)."""
    if order == "random":
        rng = random.Random(seed)
        out = []
        for _ in range(blocks):
            block = list(arm_names)
            rng.shuffle(block)
            out.append(block)
        return out
    return [list(arm_names) if r % 2 == 0 else list(reversed(arm_names)) for r in range(blocks)]


def with_run_seed(scenario: Scenario) -> Scenario:
    """The scenario with `trials.seed` fixed: a fresh one when it is null. A new random order per run
    keeps the paired test valid even if the machine's timing has a pattern that a fixed order could
    line up with (both arms' trials are then exchangeable within each repetition)."""
    if scenario.trials.seed is not None:
        return scenario
    seed = secrets.randbelow(2**31)
    return scenario.model_copy(update={"trials": scenario.trials.model_copy(update={"seed": seed})})


def plan_trials(scenario: Scenario, *, aa: bool = False) -> list[Trial]:
    """The trials in run order. Call `with_run_seed` first to know (and record) the seed used."""
    scenario = with_run_seed(scenario)
    arm_config = arms(scenario, aa=aa)
    names = list(arm_config)
    spec = scenario.trials
    sequence: list[tuple[str, TrialKind, int]] = []
    # Both orders derive from `trials.seed`, so a seed fixes the whole plan.
    profiled_orders = _orders(names, spec.profiled, spec.order, spec.seed)
    timed_orders = _orders(names, spec.repetitions, spec.order, spec.seed + 1)
    for kind, orders in (("profiled", profiled_orders), ("timed", timed_orders)):
        for repetition, block in enumerate(orders):
            sequence.extend((arm, kind, repetition) for arm in block)
    return [
        Trial(index=i, variant=arm, kind=kind, repetition=rep, config=arm_config[arm])
        for i, (arm, kind, rep) in enumerate(sequence)
    ]
