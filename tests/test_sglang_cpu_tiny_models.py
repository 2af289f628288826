"""The context models' attention, as designed (sglang_spec_harness/sglang_cpu/tiny_models.py; docs/gpu.md,
"The tiny models"): the score of a constant query and key after RoPE depends only on the distance D,
and each head's weights over D are what the mutation suite relies on. Needs torch only, no SGLang;
the built models (same bytes on every build, the draft's agreement) are tested on the real install in
tests/test_sglang_cpu.py."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from sglang_spec_harness.sglang_cpu import tiny_models as tm  # noqa: E402

LENGTH = 120  # a prompt and its generation


def rope(x, positions):
    n = tm.HEAD_DIM // 2
    angle = positions.double()[:, None] * tm.rope_frequencies()[None, :]
    cos, sin = angle.cos().float(), angle.sin().float()
    return torch.cat([x[:, :n] * cos - x[:, n:] * sin, x[:, n:] * cos + x[:, :n] * sin], 1)


def weights(coefficients, query_position: int = LENGTH - 1, keys=None):
    """The softmax weights of the last query over keys at `keys` (default: every position up to it),
    through bf16 q and k as the saved models hold them and RoPE as SGLang applies it."""
    q, k = (t.to(torch.bfloat16).float() for t in tm.query_and_key(coefficients))
    keys = torch.arange(query_position + 1) if keys is None else torch.tensor(keys)
    qr = rope(q[None, :], torch.tensor([query_position]))
    kr = rope(k[None, :].expand(len(keys), -1), keys)
    return torch.softmax((qr @ kr.T)[0] / math.sqrt(tm.HEAD_DIM), 0), keys


def test_the_previous_token_head_reads_the_token_before_and_almost_nothing_else():
    w, keys = weights(tm.previous_token_coefficients())
    by_distance = {int(LENGTH - 1 - p): float(x) for p, x in zip(keys, w)}
    assert by_distance[1] > 0.97
    assert by_distance[0] < 0.02 and by_distance[2] < 0.02
    assert max(v for d, v in by_distance.items() if d > 2) < 1e-3


def test_one_position_off_moves_the_previous_token_head_off_the_previous_token():
    # a draft step at position P + 1 instead of P (its own key written there too): no key at
    # distance 1 any more; the head reads half itself, half the token before, not the token before
    P = LENGTH - 1
    w, _ = weights(tm.previous_token_coefficients(), query_position=P + 1, keys=[*range(P), P + 1])
    own, previous = float(w[-1]), float(w[-2])
    assert 0.3 < own < 0.7 and 0.3 < previous < 0.7 and own + previous > 0.97


def test_the_context_head_reads_the_last_three_tokens_and_lets_future_keys_count():
    w, _ = weights(tm.fit_profile())
    near = [float(w[-1 - d]) for d in range(3)]
    assert near[0] > near[1] > near[2] > 0.1 and sum(near) > 0.85
    # a future key (a prefix one too long) weighs about as much as the nearest real one
    w2, _ = weights(tm.fit_profile(), query_position=LENGTH - 1, keys=[*range(LENGTH), LENGTH])
    assert float(w2[-1]) > 0.5 * float(w2[-2])
