"""Traces recorded here with torch.profiler on the CPU: the draft's token pick (softmax + max, or argmax)
inside record_function regions labelled as SGLang before 0.5.23 (and the micro engine) label them.
torch is imported when a trace is recorded (callers skip without it)."""

from __future__ import annotations

from pathlib import Path

CYCLES = 3


def select_token(logits, fast: bool):
    """The draft's token pick: softmax + max (baseline) or argmax (the topk==1 fast path)."""
    import torch

    if fast:
        return torch.argmax(logits, dim=-1, keepdim=True)
    return torch.max(torch.softmax(logits, dim=-1), dim=-1).indices


def record(path: Path, body) -> Path:
    """A CPU trace of `body()`, written to `path`."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        body()
    prof.export_chrome_trace(str(path))
    return path


def pre_0523_cycles(fast: bool):
    """EAGLE cycles with pre-0.5.23 labels (the micro engine's too): 2 draft steps, verify,
    draft extend; plus one softmax outside any region."""
    import torch
    from torch.profiler import record_function

    logits = torch.randn(1, 64)

    def body():
        torch.softmax(logits, dim=-1)  # e.g. a prefill's sampling: in no region
        for _ in range(CYCLES):
            with record_function("step[DECODE bs=1]"):
                for _ in range(2):
                    select_token(logits, fast)
            with record_function("step[TARGET_VERIFY bs=1]"):
                torch.argmax(logits, dim=-1)
            with record_function("step[DRAFT_EXTEND_V2 bs=1]"):
                select_token(logits, fast)

    return body
