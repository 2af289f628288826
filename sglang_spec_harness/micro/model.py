"""The micro engine's target and draft language models, and the draft's token-selection sites.

Both models are small sliding-window transformers whose weights come from a seed. The draft is a
noisy copy of the target (same shape, every layer weight perturbed by `draft_noise`), and shares the
target's token embedding and lm_head, as an EAGLE draft shares the target's head. The noise sets how
often the draft agrees with the target, hence the accept length.

Design choices that keep greedy outputs exact and comparable between variants:
- The transformer layers run in float64 and the final hidden state is rounded to a grid of 1/16
  (integers in [-127, 127]); the lm_head weights are integers in [-127, 127] times 2**-11. Every product
  and partial sum in the lm_head matmul is then an integer below 2**24 times a power of two, exact in
  float32 in any summation order, so
  logits are bitwise identical whatever the batch size, padding or BLAS kernel. (A plain float32
  lm_head gives different low bits for batch sizes 1 and 2 on this CPU, which could flip a near-tie
  and make a request's output depend on what else was in its batch.)
- Attention normalizes with exp/sum instead of `torch.softmax`, so that the only softmax ops in a
  profile are the token-selection sites the fast path removes.
- `position` enters through sinusoidal encodings, so greedy continuations of a random model do not
  settle into short loops (where the draft would trivially always or never agree).

The only context a position sees is the previous `window - 1` tokens per layer, so every forward
recomputes from a window of `context_len = num_layers * (window - 1)` previous tokens instead of
keeping a KV cache; the logits of a position are a function of its last `context_len + 1` tokens and
its position alone, whichever forward (prefill, draft decode, verify, draft extend) computes them.
"""

from __future__ import annotations

import math

import torch

from sglang_spec_harness.micro.config import (  # re-exported
    HEAD_WEIGHT_MAX,
    HIDDEN_CLAMP,
    HIDDEN_GRID,
    LOGIT_SCALE,
    MicroModelConfig,
)

LayerWeights = dict[str, torch.Tensor]


def _init_layers(config: MicroModelConfig, gen: torch.Generator) -> list[LayerWeights]:
    h = config.hidden_size
    shapes = {"wq": (h, h), "wk": (h, h), "wv": (h, h), "wo": (h, h), "w1": (h, 4 * h), "w2": (4 * h, h)}
    layers = []
    for _ in range(config.num_layers):
        layer = {}
        for name, (fan_in, fan_out) in shapes.items():
            layer[name] = torch.randn(fan_in, fan_out, generator=gen, dtype=torch.float64) / math.sqrt(fan_in)
        layers.append(layer)
    return layers


def _perturb(layers: list[LayerWeights], noise: float, gen: torch.Generator) -> list[LayerWeights]:
    return [
        {name: w + noise * w.std() * torch.randn(w.shape, generator=gen, dtype=w.dtype) for name, w in layer.items()}
        for layer in layers
    ]


class MicroModels:
    """Weights of the target and the draft, and the forward both share (on one device)."""

    def __init__(self, config: MicroModelConfig, device: torch.device | str = "cpu") -> None:
        self.config = config
        self.device = torch.device(device)
        gen = torch.Generator().manual_seed(config.seed)
        v, h = config.vocab_size, config.hidden_size
        self.embed = torch.randn(v, h, generator=gen, dtype=torch.float32).to(self.device)
        # Integer weights times a power of two: products and sums stay exact, and the logits come out
        # of the matmul already scaled (no extra full-vocabulary multiply).
        head_int = torch.randint(-HEAD_WEIGHT_MAX, HEAD_WEIGHT_MAX + 1, (v, h), generator=gen).to(torch.float32)
        self.lm_head = (head_int * LOGIT_SCALE).to(self.device)
        target_layers = _init_layers(config, gen)
        draft_layers = _perturb(target_layers, config.draft_noise, torch.Generator().manual_seed(config.seed + 1))
        self.target_layers = [{k: w.to(self.device) for k, w in layer.items()} for layer in target_layers]
        self.draft_layers = [{k: w.to(self.device) for k, w in layer.items()} for layer in draft_layers]
        half = h // 2
        self.inv_freq = (1.0 / (10000.0 ** (torch.arange(half, dtype=torch.float64) / max(half, 1)))).to(self.device)

    def _positional(self, positions: torch.Tensor) -> torch.Tensor:
        angles = positions.to(torch.float64).unsqueeze(-1) * self.inv_freq
        enc = torch.cat([angles.sin(), angles.cos()], dim=-1)
        if enc.shape[-1] < self.config.hidden_size:  # odd hidden size
            enc = torch.nn.functional.pad(enc, (0, 1))
        return enc

    @staticmethod
    def _rms_norm(x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)

    def forward(
        self,
        layers: list[LayerWeights],
        ids: torch.Tensor,
        valid: torch.Tensor,
        first_new_pos: torch.Tensor,
        num_new: int,
    ) -> torch.Tensor:
        """Logits [B, num_new, V] (float32) of the last `num_new` of `ids` [B, L].

        `valid` [B, L] marks real tokens (left padding and right padding are False); `first_new_pos`
        [B] is the absolute position of the first of the `num_new` new tokens. Graph-capturable: no
        host synchronization, no data-dependent shapes.
        """
        cfg = self.config
        batch, length = ids.shape
        offsets = torch.arange(length, device=ids.device) - (length - num_new)
        positions = first_new_pos.unsqueeze(1) + offsets  # [B, L]
        x = self.embed[ids].to(torch.float64) + self._positional(positions)
        # Sliding-window causal mask; a query always sees itself so that no row is empty.
        q_idx = torch.arange(length, device=ids.device).unsqueeze(1)
        k_idx = torch.arange(length, device=ids.device).unsqueeze(0)
        band = (k_idx <= q_idx) & (k_idx > q_idx - cfg.window)
        mask = band.unsqueeze(0) & (valid.unsqueeze(1) | (k_idx == q_idx).unsqueeze(0))  # [B, Lq, Lk]
        mask = mask.unsqueeze(1)  # [B, 1, Lq, Lk]
        heads, head_dim = cfg.num_heads, cfg.hidden_size // cfg.num_heads
        for layer in layers:
            hn = self._rms_norm(x)
            q = (hn @ layer["wq"]).view(batch, length, heads, head_dim).transpose(1, 2)
            k = (hn @ layer["wk"]).view(batch, length, heads, head_dim).transpose(1, 2)
            v = (hn @ layer["wv"]).view(batch, length, heads, head_dim).transpose(1, 2)
            scores = (q @ k.transpose(-1, -2)) / math.sqrt(head_dim)
            scores = scores.masked_fill(~mask, float("-inf"))
            # exp/sum, not torch.softmax: keeps the selection sites the only softmax ops in a profile.
            weights = torch.exp(scores - scores.amax(-1, keepdim=True))
            weights = weights / weights.sum(-1, keepdim=True)
            attn = (weights @ v).transpose(1, 2).reshape(batch, length, cfg.hidden_size)
            x = x + attn @ layer["wo"]
            x = x + torch.nn.functional.gelu(self._rms_norm(x) @ layer["w1"]) @ layer["w2"]
        hidden = self._rms_norm(x[:, length - num_new :])
        quantized = torch.clamp(torch.round(hidden * HIDDEN_GRID), -HIDDEN_CLAMP, HIDDEN_CLAMP).to(torch.float32)
        return quantized @ self.lm_head.T


def argmax_keepdim(logits: torch.Tensor) -> torch.Tensor:
    """`torch.argmax(logits, -1, keepdim=True)`: the first index of the maximum of each row.

    On CPU it is computed by `torch.max(...).indices` (documented to return the same first maximal
    index): torch's CPU argmax kernel takes ~245 us for one 128256-wide row on the development CPU, 1.6x
    `torch.max`'s ~150 us, an unrelated slowness that would hide the gain of removing the softmax. On
    CUDA it is `torch.argmax`, exactly as SGLang's fast path.
    """
    if logits.is_cuda:
        return torch.argmax(logits, dim=-1, keepdim=True)
    return torch.max(logits, dim=-1, keepdim=True).indices


def fast_topk(values: torch.Tensor, topk: int, dim: int = -1) -> tuple[torch.Tensor, torch.Tensor]:
    """SGLang's `fast_topk`: `torch.max` for k == 1 (first maximal index), `torch.topk` otherwise."""
    if topk == 1:
        best = torch.max(values, dim=dim, keepdim=True)
        return best.values, best.indices
    top = torch.topk(values, topk, dim=dim)
    return top.values, top.indices


def select_draft_tokens(logits: torch.Tensor, topk: int, fast_path: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Token selection at SGLang's three draft sites: (topk_p, topk_index), each [N, topk].

    Without the fast path (or with topk > 1): `torch.softmax` over the full vocabulary, then top-k of
    the probabilities. With it (topk == 1 only): the argmax of the logits and constant probabilities.
    Both pick the same index: logits lie on a grid of LOGIT_SCALE (2**-11), so the runner-up of a row is
    at least 2**-11 below the maximum and its probability stays strictly below the maximum's in float32;
    exact ties give equal probabilities and resolve to the first index in both `torch.max` and
    `torch.argmax`.
    """
    if fast_path and topk == 1:
        topk_index = argmax_keepdim(logits)
        return torch.ones_like(topk_index, dtype=torch.float32), topk_index
    probs = torch.softmax(logits, dim=-1)
    return fast_topk(probs, topk, dim=-1)
