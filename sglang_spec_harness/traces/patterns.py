"""Named regular expressions: count patterns (`--count NAME=REGEX`) and region rules
(`--region NAME=REGEX`) share the syntax and the validation."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from sglang_spec_harness.errors import HarnessInputError

# `softmax` on every platform the harness meets: the CUDA/ROCm kernels (long rows, short rows)
# and, on a CPU-only trace, the op `aten::_softmax` exactly, so that its parent `aten::softmax`
# is not counted a second time. `log_softmax` also runs `cunn_SoftMaxForward` and matches.
DEFAULT_COUNT_PATTERNS: dict[str, str] = {
    "softmax": r"cunn_SoftMaxForward|softmax_warp_forward|^aten::_softmax$",
}


@dataclass(frozen=True)
class NamedPattern:
    """One NAME=REGEX pair; `regex` is searched (not anchored) in a kernel, op or span name."""

    name: str
    regex: str
    compiled: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "compiled", re.compile(self.regex))

    def matches(self, text: str) -> bool:
        return self.compiled.search(text) is not None


def parse_assignment(text: str, *, flag: str) -> NamedPattern:
    """`NAME=REGEX` from the command line (the regex may itself contain `=`)."""
    name, sep, regex = text.partition("=")
    name = name.strip()
    if not sep or not name or not regex:
        raise HarnessInputError(f"{flag} {text!r}: expected NAME=REGEX")
    return named_pattern(name, regex, where=f"{flag} {text!r}")


def named_pattern(name: str, regex: str, *, where: str) -> NamedPattern:
    try:
        return NamedPattern(name, regex)
    except re.error as exc:
        raise HarnessInputError(f"{where}: invalid regular expression: {exc}") from None


def count_patterns(patterns: Mapping[str, str] | Iterable[NamedPattern] | None) -> list[NamedPattern]:
    """The count patterns to use: the defaults when none are given; names must be unique."""
    if patterns is None:
        patterns = DEFAULT_COUNT_PATTERNS
    if isinstance(patterns, Mapping):
        result = [named_pattern(n, r, where=f"count pattern {n!r}") for n, r in patterns.items()]
    else:
        result = list(patterns)
    names = [p.name for p in result]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise HarnessInputError(f"--count: pattern name given twice: {', '.join(duplicates)}")
    if not result:
        raise HarnessInputError("--count: no count pattern given")
    return result
