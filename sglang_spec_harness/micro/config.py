"""The micro models' configuration; free of torch, so that the server's usage errors stay instant."""

from __future__ import annotations

from dataclasses import dataclass

# The final hidden state is rounded to multiples of 1/HIDDEN_GRID and clamped to +-HIDDEN_CLAMP/HIDDEN_GRID.
HIDDEN_GRID = 16
HIDDEN_CLAMP = 127
HEAD_WEIGHT_MAX = 127
# Scales integer logits (std ~9000 at hidden 64) to a softmax temperature where they behave like
# real logits (std ~4.6); a power of two, so the scaling is exact.
LOGIT_SCALE = 2.0**-11


@dataclass(frozen=True)
class MicroModelConfig:
    vocab_size: int = 128256
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    window: int = 8
    # Relative std of the noise added to every draft layer weight; tuned for a mean accept length
    # of ~2.5 with 3 draft steps on the default config.
    draft_noise: float = 0.1
    seed: int = 0

    def __post_init__(self) -> None:
        if self.vocab_size < 16:
            raise ValueError(f"vocab_size must be >= 16, got {self.vocab_size}")
        if self.hidden_size < 1 or self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size {self.hidden_size} must be a positive multiple of num_heads {self.num_heads}")
        # Keeps every lm_head partial sum below 2**24, exact in float32.
        if self.hidden_size * HIDDEN_CLAMP * HEAD_WEIGHT_MAX >= 2**24:
            raise ValueError(f"hidden_size must be <= {(2**24 - 1) // (HIDDEN_CLAMP * HEAD_WEIGHT_MAX)}, got {self.hidden_size}")
        if self.num_layers < 1 or self.num_heads < 1 or self.window < 1:
            raise ValueError("num_layers, num_heads and window must be >= 1")
        if self.draft_noise < 0:
            raise ValueError(f"draft_noise must be >= 0, got {self.draft_noise}")

    @property
    def context_len(self) -> int:
        """Previous tokens a forward needs before its first new token (the receptive field)."""
        return self.num_layers * (self.window - 1)

    @property
    def bos_token_id(self) -> int:
        return 128000 if self.vocab_size > 128009 else 1  # Llama-3's <|begin_of_text|>

    @property
    def eos_token_id(self) -> int:
        return 128009 if self.vocab_size > 128009 else 2  # Llama-3's <|eot_id|>
