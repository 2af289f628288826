"""Which trace annotations belong to which region: an ORDERED table of region name -> regex.

How a launch (or a CPU op) gets its region: consider every annotation open on its CPU thread at
its start time (`user_annotation` spans, `python_function` frames, NVTX ranges). The FIRST table
entry that matches any of them wins (table order is priority); if several open annotations match
that entry, the innermost one (latest start) is the launch's span. So a 0.5.23 `step[DRAFT bs=1]`
span inside a `draft_extend` stage span is DRAFT_EXTEND, because `^draft_extend$` comes first.
Rules given with `--region NAME=REGEX` are put in front of the table, so they win over it;
`--no-default-regions` drops the default table.

SGLang label schemes (see `reference/sglang.md`):
- before 0.5.23, `ModelRunner.forward` spans `step[{ForwardMode} bs=N]`: the EAGLE draft runner's
  forward is `step[DECODE bs=N]`, target verify `step[TARGET_VERIFY bs=N]`, draft extend
  `step[DRAFT_EXTEND_V2 bs=N]` (spec v1: `step[DRAFT_EXTEND bs=N]`). The harness's micro engine
  uses the same three labels. Caveat: without speculative decoding the TARGET's decode is also
  `step[DECODE bs=N]`; the analysis warns when DRAFT_DECODE appears without TARGET_VERIFY.
- 0.5.23: `step[DRAFT bs=N]` for every draft forward and `step[VERIFY bs=N]`, inside stage spans
  `draft`, `draft_extend`, `verify`.
- with `with_stack`, the graph runners' `replay` frames and the EAGLE worker's methods label a
  replay even where no `step[...]` span is open.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from sglang_spec_harness.errors import HarnessInputError
from sglang_spec_harness.traces.patterns import NamedPattern, named_pattern
from sglang_spec_harness.vocabulary import DRAFT_DECODE, DRAFT_EXTEND, PREFILL, TARGET_VERIFY


# name -> regex, in priority order. Stage spans first (they are the only thing that tells the
# 0.5.23 draft-extend forward from a draft-decode forward), then stack frames, then step labels.
DEFAULT_SGLANG_REGIONS: tuple[tuple[str, str], ...] = (
    # The draft extend after a prefill (with_stack), before the stage spans: 0.5.23 opens the same
    # `draft_extend` span around it as around the decode cycle's, and it keeps its softmax in every
    # variant (the first draft token's selection). Without with_stack only the graph-launch unit
    # tells the two apart (the prefill's runs eagerly); on a CPU trace, where spans are the unit,
    # give with_stack.
    (PREFILL, r"eagle_worker(?:_v2)?\.py\(\d+\): _draft_extend_for_prefill$"),
    # 0.5.23 stage spans of forward_batch_generation
    (DRAFT_EXTEND, r"^draft_extend$"),
    (DRAFT_DECODE, r"^draft$"),
    (TARGET_VERIFY, r"^verify$"),
    # graph runners' replay frames (with_stack); the target's runner is not listed: its replays
    # are verify under EAGLE but plain decode without it, and step[...] says which
    (DRAFT_EXTEND, r"eagle_draft_extend_cuda_graph_runner\.py\(\d+\): replay$"),
    (DRAFT_DECODE, r"eagle_draft_cuda_graph_runner\.py\(\d+\): replay$"),
    # EAGLE worker methods (with_stack): the eager draft-extend token selection runs after the
    # forward, outside its step[...] span
    (DRAFT_EXTEND, r"eagle_worker(?:_v2)?\.py\(\d+\): _draft_extend_for_decode$"),
    (DRAFT_DECODE, r"eagle_worker(?:_v2)?\.py\(\d+\): draft_forward$"),
    # ModelRunner.forward spans before 0.5.23 (and the micro engine's)
    (DRAFT_EXTEND, r"^step\[DRAFT_EXTEND(?:_V2)? bs=\d+\]"),
    (TARGET_VERIFY, r"^step\[TARGET_VERIFY bs=\d+\]"),
    (DRAFT_DECODE, r"^step\[DECODE bs=\d+\]"),
    # ModelRunner.forward spans in 0.5.23 (draft extend is told apart by its stage span above)
    (TARGET_VERIFY, r"^step\[VERIFY bs=\d+\]"),
    (DRAFT_DECODE, r"^step\[DRAFT bs=\d+\]"),
    (PREFILL, r"^step\[(?:EXTEND|PREFILL|MIXED) bs=\d+\]"),
)

# region -> the region an EAGLE cycle must also show; its absence makes the label doubtful.
COMPANION_REGION: dict[str, str] = {DRAFT_DECODE: TARGET_VERIFY, DRAFT_EXTEND: TARGET_VERIFY}


@dataclass(frozen=True)
class RegionTable:
    """Ordered rules; a rule's index is its priority (0 wins)."""

    rules: tuple[NamedPattern, ...]

    @classmethod
    def default(cls) -> RegionTable:
        return cls.from_pairs(DEFAULT_SGLANG_REGIONS)

    @classmethod
    def from_pairs(cls, pairs: Mapping[str, str] | Iterable[tuple[str, str]]) -> RegionTable:
        items = pairs.items() if isinstance(pairs, Mapping) else pairs
        return cls(tuple(named_pattern(n, r, where=f"region {n!r}") for n, r in items))

    def extended(self, first: Sequence[NamedPattern]) -> RegionTable:
        """This table with `first` put in front (so those rules win)."""
        return RegionTable(tuple(first) + self.rules)

    def first_match(self, annotation: str) -> int:
        """Index of the first rule matching `annotation`, or -1."""
        for index, rule in enumerate(self.rules):
            if rule.compiled.search(annotation):
                return index
        return -1

    @property
    def region_names(self) -> list[str]:
        return list(dict.fromkeys(rule.name for rule in self.rules))

    def as_pairs(self) -> list[tuple[str, str]]:
        return [(rule.name, rule.regex) for rule in self.rules]


def region_table(
    regions: RegionTable | Mapping[str, str] | Iterable[tuple[str, str]] | None = None,
    *,
    replace_default: bool = False,
) -> RegionTable:
    """The table to use: a RegionTable as given; pairs in front of the default table, or alone
    with `replace_default`; None: the default SGLang table."""
    if isinstance(regions, RegionTable):
        return regions
    extra = RegionTable.from_pairs(regions or ())
    if replace_default:
        if not extra.rules:
            raise HarnessInputError("--no-default-regions: give at least one --region NAME=REGEX")
        return extra
    return RegionTable.default().extended(extra.rules)
