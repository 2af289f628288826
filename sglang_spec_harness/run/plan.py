"""The plan of a run: which server launches happen, and which samples each one serves, in which order.

Three modes (`trials.mode`):
- `restart`: one sample = one trial = one server launch: a variant ("arm") x a repetition x a kind.
  Simple, and every sample pays the full start-up (weights, CUDA-graph capture, warm-up).
- `interleaved`: every arm has `launches` server launches, all started at the beginning and kept up.
  Round r runs one block of requests per arm, in a freshly drawn order; block = one TPOT sample, and
  the blocks of one round are a pair (same prompts, next to each other in time). The launch serving
  an arm's block rotates between rounds so that, with L launches, every combination of one launch per
  arm meets equally often (a Latin rotation): launch-to-launch differences then show up within each
  arm and are not confounded with the change under test.
  With `servers_up: pair`, one launch per arm is up at a time instead: launch pair j serves a
  contiguous share of the rounds, then the next pair starts (for servers of which only two fit).
- `sequential`: one server at a time (a model that fills the machine). Launch pair j starts each
  arm's j-th launch in turn (drawn order) and each serves a contiguous share of the rounds as blocks;
  the blocks of one round (same prompts) are still the pair, and launch pair j is the time block.
Timed work never runs under the profiler. Profiled passes (structure, never timing) run on each arm's
warm server after its timed blocks (in `restart`, they are trials of their own): a profiler leaves
state behind in the process, which would otherwise slow the blocks of the profiled launches only.
With nsys they get their own launch, before the warm ones, since nsys must wrap the server process.

Order (restart mode):
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
variant; whatever differs between them is noise. The rules treat them as baseline and candidate.

A subset (`make_plan(..., select={(arm, kind), ...})`): only those trials of the full plan, with the
launches that serve them. They keep their place in the full plan (index, directory name, prompts), so
subsets of one plan (same scenario and seed) run at different times fit together into one run
directory without clashing (`sglang_spec_harness.run.combine`): what `harness bisect` does with a baseline that
runs once and a variant that runs at every commit.
"""

from __future__ import annotations

import random
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import ConfigDict, Field, model_validator

from sglang_spec_harness.errors import HarnessInputError
from sglang_spec_harness.rundir.models import LaunchEntry, PlanEntry
from sglang_spec_harness.scenario import Scenario

TrialKind = Literal["timed", "profiled"]
AA_ARMS = ("baseline", "candidate")


class Launch(LaunchEntry):
    """One server launch of the warm modes: arm x launch number, as run.json's `launches` lists it
    (the record's model, narrowed: every field set, the directory named from the others)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    config: str  # the scenario variant whose server configuration runs
    number: int  # 0-based per arm
    dir: str = ""  # launches/<NN>-<arm>-launch<k> (server.log, launch.json), relative to the run directory

    @model_validator(mode="before")
    @classmethod
    def _named(cls, data: Any) -> Any:
        if isinstance(data, dict) and not data.get("dir"):
            data = {**data, "dir": f"launches/{data['index']:02d}-{data['arm']}-launch{data['number']}"}
        return data

    @property
    def dir_name(self) -> str:
        return self.dir.removeprefix("launches/")

    def entry(self) -> LaunchEntry:
        """As run.json holds it (every field written)."""
        return LaunchEntry.model_validate(self.model_dump())


class Trial(PlanEntry):
    """One planned trial, as run.json's `plan` lists it (the record's model, narrowed: every field set,
    the directory named from the others)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: TrialKind
    repetition: int  # 0-based, per arm and kind (the round, for the blocks of the warm modes)
    config: str  # the scenario variant whose server configuration runs (differs from `variant` in A/A)
    first_prompt: int = 0  # index of its first measured prompt in the workload
    digits: int = Field(2, exclude=True)  # width of the index in the directory name
    dir: str = ""  # trials/<NN>-<variant>-<kind>, relative to the run directory

    @model_validator(mode="before")
    @classmethod
    def _named(cls, data: Any) -> Any:
        if isinstance(data, dict) and not data.get("dir"):
            width = data.get("digits", 2)
            data = {**data, "dir": f"trials/{data['index']:0{width}d}-{data['variant']}-{data['kind']}"}
        return data

    @property
    def dir_name(self) -> str:
        return self.dir.removeprefix("trials/")

    def entry(self) -> PlanEntry:
        """As run.json holds it (every field written)."""
        return PlanEntry.model_validate(self.model_dump())


@dataclass(frozen=True)
class Plan:
    mode: str
    trials: list[Trial]
    launches: list[Launch] = field(default_factory=list)  # empty in restart mode

    def launch_of(self, trial: Trial) -> Launch | None:
        """The launch serving `trial` (looked up by index: a subset keeps the full plan's indices)."""
        if trial.launch is None:
            return None
        return next(launch for launch in self.launches if launch.index == trial.launch)

    def trials_of_launch(self, launch: Launch) -> list[Trial]:
        return [t for t in self.trials if t.launch == launch.index]

    def last_use(self) -> dict[int, int]:
        """Launch index -> position in `trials` of the last trial it serves."""
        return {t.launch: i for i, t in enumerate(self.trials) if t.launch is not None}

    def record_fields(self) -> dict[str, Any]:
        """run.json's plan fields: `mode`, `plan`, `launches`."""
        return {"mode": self.mode, "plan": [t.entry() for t in self.trials],
                "launches": [launch.entry() for launch in self.launches]}


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


def rotation(arm_position: int, round_: int, launches: int) -> int:
    """The launch number serving arm `arm_position` in round `round_` (interleaved mode): arm 0 cycles
    0, 1, .., L-1; arm i shifts by i every L rounds, so every L*L rounds each combination of one
    launch per arm meets once (for two arms and L = 2: (0,0) (1,1) (0,1) (1,0))."""
    return (round_ + arm_position * (round_ // launches)) % launches


def round_launch_pairs(rounds: int, launches: int) -> list[int]:
    """Sequential mode: round -> the launch pair serving it (contiguous, as even as possible)."""
    return [r * launches // rounds for r in range(rounds)]


def block_size(scenario: Scenario) -> int:
    return scenario.trials.block_requests or scenario.workload.num_requests


def profiled_request_count(scenario: Scenario) -> int:
    return scenario.profile.requests or (block_size(scenario) if scenario.trials.warm else scenario.workload.num_requests)


Selection = Iterable[tuple[str, TrialKind]]


def make_plan(scenario: Scenario, *, aa: bool = False, select: Selection | None = None) -> Plan:
    """The launches and trials in run order. Call `with_run_seed` first to know (and record) the seed.

    `select`: the (arm, kind) pairs to run, e.g. `{("candidate", "profiled")}`; None runs everything.
    A subset keeps each trial's and launch's index from the full plan. `trials.only: exact` selects
    the profiled passes of every arm (of those `select` names)."""
    if scenario.trials.only == "exact":
        if aa:
            raise HarnessInputError("trials.only: exact runs no timed rounds, and an A/A run measures nothing else "
                                    "(its rule is the timing noise): drop --aa or --only exact")
        passes: set[tuple[str, TrialKind]] = {(arm, "profiled") for arm in arms(scenario)}
        select = passes if select is None else passes & set(select)
    if scenario.trials.budget is not None:
        if select is not None:
            raise HarnessInputError("trials.budget: an adaptive design cannot be run in parts (harness bisect, "
                                    "sweep or --reuse): each stage depends on the looks before it; drop the budget")
        plan = first_stage(scenario, aa=aa)
        extend(plan, scenario, aa=aa, rounds=scenario.trials.repetitions, launches_per_arm=scenario.trials.launches_per_arm)
        return plan
    plan = _full_plan(scenario, aa=aa)
    return plan if select is None else subset(plan, select)


def subset(plan: Plan, select: Selection) -> Plan:
    """Only the trials whose (arm, kind) is selected, and the launches that serve them."""
    wanted = set(select)
    trials = [t for t in plan.trials if (t.variant, t.kind) in wanted]
    used = {t.launch for t in trials}
    return Plan(plan.mode, trials, [launch for launch in plan.launches if launch.index in used])


def _full_plan(scenario: Scenario, *, aa: bool) -> Plan:
    scenario = with_run_seed(scenario)
    arm_config = arms(scenario, aa=aa)
    names = list(arm_config)
    spec = scenario.trials
    assert spec.seed is not None
    # Both orders derive from `trials.seed`, so a seed fixes the whole plan.
    profiled_orders = _orders(names, spec.profiled, spec.order, spec.seed)
    timed_orders = _orders(names, spec.repetitions, spec.order, spec.seed + 1)
    if not spec.warm:
        n = scenario.workload.num_requests
        sequence: list[tuple[str, TrialKind, int]] = [
            (arm, "profiled", rep) for rep, block in enumerate(profiled_orders) for arm in block]
        sequence += [(arm, "timed", rep) for rep, block in enumerate(timed_orders) for arm in block]
        return Plan("restart", [
            Trial(index=i, variant=arm, kind=kind, repetition=rep, config=arm_config[arm], first_prompt=0)
            for i, (arm, kind, rep) in enumerate(sequence)
        ] if n else [])
    return _warm_plan(scenario, names, arm_config, profiled_orders, timed_orders)


def _warm_plan(scenario: Scenario, names: list[str], arm_config: dict[str, str],
               profiled_orders: list[list[str]], timed_orders: list[list[str]]) -> Plan:
    spec = scenario.trials
    assert spec.seed is not None  # _full_plan's with_run_seed set it
    per_arm = spec.launches_per_arm
    rounds = spec.repetitions
    block = block_size(scenario)
    # Prompts: round r's blocks use prompts [r*block, (r+1)*block) in every arm (paired work); the
    # profiled passes use their own prompts after all timed ones.
    profiled_first = rounds * block
    profiled_n = profiled_request_count(scenario)
    own_launch_for_profiles = scenario.profile.nsys.enabled  # nsys must wrap the whole server
    # (arm, kind, repetition, launch number or None, first prompt)
    steps: list[tuple[str, TrialKind, int, int | None, int]] = []
    launch_order: list[tuple[str, int]] = []  # (arm, number) in start order
    def profiles(number_of: Any, reps: list[int]) -> list[tuple[str, TrialKind, int, int | None, int]]:
        return [(arm, "profiled", rep, number_of(rep), profiled_first + rep * profiled_n)
                for rep in reps for arm in profiled_orders[rep]]

    all_reps = list(range(spec.profiled))
    if own_launch_for_profiles:  # launches of their own, before the warm ones
        steps += profiles(lambda rep: None, all_reps)
    # A warm launch's profiled passes come AFTER its timed blocks: the profiler leaves state behind in
    # the server process (callbacks, threads, allocations) that could slow the blocks served after it,
    # only on the profiled launches, and read as a launch effect.
    if spec.mode == "interleaved":
        launch_order = [(arm, j) for j in range(per_arm) for arm in names]
        pair_of_round = round_launch_pairs(rounds, per_arm)
        by_pair = spec.servers_up == "pair"
        for r, order in enumerate(timed_orders):
            steps += [(arm, "timed", r, pair_of_round[r] if by_pair else rotation(names.index(arm), r, per_arm), r * block)
                      for arm in order]
            ends_pair = r == rounds - 1 or (by_pair and pair_of_round[r + 1] != pair_of_round[r])
            if ends_pair and not own_launch_for_profiles:
                j = pair_of_round[r]
                if by_pair:
                    steps += profiles(lambda rep, j=j: j, [rep for rep in all_reps if rep % per_arm == j])
                else:
                    steps += profiles(lambda rep: rep % per_arm, all_reps)
    else:  # sequential: launch pair j = each arm's j-th launch, one after the other
        pair_of_round = round_launch_pairs(rounds, per_arm)
        pair_orders = _orders(names, per_arm, spec.order, spec.seed + 2)
        for j, order in enumerate(pair_orders):
            for arm in order:
                launch_order.append((arm, j))
                steps += [(arm, "timed", r, j, r * block) for r in range(rounds) if pair_of_round[r] == j]
                if not own_launch_for_profiles:
                    steps += [(arm, "profiled", rep, j, profiled_first + rep * profiled_n)
                              for rep in all_reps if rep % per_arm == j]
    launches = [Launch(index=i, arm=arm, config=arm_config[arm], number=j) for i, (arm, j) in enumerate(launch_order)]
    index_of = {(launch.arm, launch.number): launch.index for launch in launches}
    digits = max(2, len(str(len(steps) - 1)))
    trials = [
        Trial(index=i, variant=arm, kind=kind, repetition=rep, config=arm_config[arm],
              launch=None if number is None else index_of[(arm, number)], first_prompt=first, digits=digits)
        for i, (arm, kind, rep, number, first) in enumerate(steps)
    ]
    return Plan(spec.mode, trials, launches)


# ---- the adaptive design (trials.budget): the plan grows stage by stage --------------------------


def first_stage(scenario: Scenario, *, aa: bool = False) -> Plan:
    """A budgeted run's plan before its first look: every profiled pass first (so that an exact rule
    that fails ends the run before any timing), each on a server of its own, then `trials.repetitions`
    rounds over `trials.launches` launches per arm. Later stages come from `extend`. Prompts and
    trial-name widths are laid out for the budget's worst case, so that every stage's trials keep
    their place whatever the looks decide.

    Why servers of their own: the profiler leaves state behind in a server (the fixed design runs a
    launch's profiled passes after its timed blocks for that reason), and a profiled pass before the
    blocks changed the speed of the launch that served it: by a few % on the micro engine, and SGLang's
    CPU server ran its later blocks twice as fast (TPOT 18-25 ms against 34-58 ms on the launches never
    profiled, benchmarks/README.md), a launch effect no number of launches can average out."""
    scenario = with_run_seed(scenario)
    spec = scenario.trials
    assert spec.budget is not None and spec.seed is not None
    arm_config = arms(scenario, aa=aa)
    names = list(arm_config)
    per_arm = spec.launches_per_arm
    launches = [Launch(index=i, arm=arm, config=arm_config[arm], number=j)
                for i, (arm, j) in enumerate((arm, j) for j in range(per_arm) for arm in names)]
    plan = Plan(spec.mode, [], launches)
    profiled_first = spec.budget.max_rounds * block_size(scenario)
    profiled_n = profiled_request_count(scenario)
    for rep, order in enumerate(_orders(names, spec.profiled, spec.order, spec.seed)):
        if rep == 0:  # the arms under test first: the rules that can FAIL at once are about them
            order = sorted(order, key=lambda arm: arm == "baseline")
        for arm in order:
            _append(plan, scenario, arm, arm_config[arm], "profiled", rep, None, profiled_first + rep * profiled_n)
    return plan


def extend(plan: Plan, scenario: Scenario, *, aa: bool = False, rounds: int, launches_per_arm: int) -> list[Trial]:
    """Append the next `rounds` rounds, served by `launches_per_arm` launches per arm (new launches
    are appended to the plan and start when first needed); returns the new trials. Rounds keep their
    global number: prompts, the drawn order and the Latin rotation follow it.

    With `servers_up: pair` (one launch per arm up at a time) the new rounds go, in contiguous
    shares, to the launch pairs this stage adds, or, when it adds none, to the pair that is up."""
    spec = scenario.trials
    assert spec.budget is not None and spec.seed is not None
    arm_config = arms(scenario, aa=aa)
    names = list(arm_config)
    have = max((launch.number for launch in plan.launches), default=-1) + 1
    for j in range(have, launches_per_arm):
        for arm in names:
            plan.launches.append(Launch(index=len(plan.launches), arm=arm, config=arm_config[arm], number=j))
    done = 1 + max((t.repetition for t in plan.trials if t.kind == "timed"), default=-1)
    orders = _orders(names, spec.budget.max_rounds, spec.order, spec.seed + 1)
    block = block_size(scenario)
    start = len(plan.trials)
    new_rounds = range(done, min(done + rounds, spec.budget.max_rounds))
    number_of = {launch.index: launch.number for launch in plan.launches}
    timed_on = {number_of[t.launch] for t in plan.trials if t.kind == "timed" and t.launch is not None}
    new_pairs = [j for j in range(launches_per_arm) if j not in timed_on] or [max(timed_on)]
    pair_share = round_launch_pairs(len(new_rounds), len(new_pairs)) if new_rounds else []
    for k, r in enumerate(new_rounds):
        for arm in orders[r]:
            number = (new_pairs[pair_share[k]] if spec.servers_up == "pair"
                      else rotation(names.index(arm), r, launches_per_arm))
            _append(plan, scenario, arm, arm_config[arm], "timed", r, number, r * block)
    return plan.trials[start:]


def _append(plan: Plan, scenario: Scenario, arm: str, config: str, kind: TrialKind, rep: int, number: int | None,
            first_prompt: int) -> None:
    """A trial served by `arm`'s launch `number`, or by a server of its own (None)."""
    spec = scenario.trials
    assert spec.budget is not None
    worst = spec.profiled * len(arms_of(plan)) + spec.budget.max_rounds * len(arms_of(plan))
    launch = None if number is None else next(
        launch.index for launch in plan.launches if launch.arm == arm and launch.number == number)
    plan.trials.append(Trial(index=len(plan.trials), variant=arm, kind=kind, repetition=rep, config=config,
                             launch=launch, first_prompt=first_prompt, digits=max(2, len(str(worst - 1)))))


def arms_of(plan: Plan) -> list[str]:
    return sorted({launch.arm for launch in plan.launches})


def plan_trials(scenario: Scenario, *, aa: bool = False) -> list[Trial]:
    """The trials in run order (see `make_plan` for the launches too)."""
    return make_plan(scenario, aa=aa).trials
