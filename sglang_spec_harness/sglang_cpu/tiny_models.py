"""Tiny Llama targets and EAGLE draft heads for the real SGLang server on a CPU, built locally (no hub).

`python -m sglang_spec_harness.sglang_cpu.tiny_models OUT_DIR [--design context|bigram]` (in the
SGLang environment: it needs transformers, tokenizers and safetensors) writes `OUT_DIR/target` and
`OUT_DIR/draft`, two directories `--model-path` / `--speculative-draft-model-path` accept, and
`OUT_DIR/models.json`. Weights come from code and a seed: every machine builds the same bytes.

Two designs (docs/gpu.md, "The tiny models"):

`context` (the default, what the CPU scenarios run): every next token depends on the tokens
before the last one, so that a bug that feeds attention the wrong context changes most outputs.
- The residual stream (hidden 32) has three parts: a constant channel (dim 0), the token's own
  embedding (S1, dims 1-15), and what attention read from the context (S2, dims 16-31).
- Attention is positional. Query and key read only the constant channel, so they are the same
  vectors at every position, and after RoPE their product depends only on the distance D = m - n:
  f(D) = sum_j Re(c_j e^{i theta_j D}). Two heads:
  - the context head: c_j fitted (least squares, ridge-regularised so the weights stay small in
    bf16) to a profile about 0 for D in -6..1, -1.5 at D = 2, -8 beyond. A query reads itself and
    the two tokens before it (weights ~0.47, ~0.30, ~0.13 at D = 0, 1, 2), and a key that should not
    be there counts: a future key (D < 0) scores like the nearest ones, a zeroed key (score 0) as
    much as the best real one, a duplicated key doubles its weight;
  - the previous-token head: f(D) = sum_j M cos(theta_j (D - 1)) over the 6 fastest frequencies,
    weight ~0.985 at D = 1 and ~0.007 at D = 0 and 2: it reads exactly the token before, so a
    position off by one reads another token.
- Each head's value copies S1 (the token's embedding); o_proj maps it into S2 through an isometry
  of its own (A, B). lm_head reads S1 and S2, so the next token is a pseudo-random function of the
  last three tokens: a wrong prefix, wrong positions or a wrong key changes the logits by a sizeable
  fraction, and with 128K candidates the argmax moves on a few percent of steps, which over 96
  tokens changes nearly every request.
- The EAGLE head (input at p: token p+1 and the target's hidden at p) computes the same function:
  the context head exactly as the target's; the previous token a share `beta` (0.5) through its
  own previous-token head, which sees positions, and the rest from the hidden it is given (S1 of
  the hidden at p is token p's embedding over the target's RMS there; the head multiplies by the
  mean RMS, so it is right on average, not at every token). Its token embedding goes through a
  noisy identity (I + `alpha` N): that, and the RMS, set how often draft and target agree (~0.69
  of first draft tokens, accept length ~3 of 6 with 5 steps). Wrong positions in the draft steps
  break the first half of the previous-token term, a stale hidden state the second, a wrong prefix
  the context head: each drops accept length far below its margin.
- The vocabulary is padded, as real models pad lm_head: `vocab_size` rows, of which the last
  `vocab_size - tokenizer_size` are padding ids that the tokenizer does not know and whose lm_head
  rows score far below any real token.

`bigram` (the design until 2026-12; kept to measure what it missed): a near-bigram target (attention
and MLP scaled by 0.01, so the next token depends mostly on the current one) and an EAGLE head that
passes the embedding through a noisy identity; random weights, vocabulary not padded.

The vocabulary is word-level: three special tokens, then `t3`, `t4`, ...; its size is what the
draft's softmax runs over (Llama-3's 128256), so it is a parameter.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
from pathlib import Path
from typing import Any

from sglang_spec_harness.sglang_cpu import skip_torchvision_meta_registrations

SPECIAL_TOKENS = ("<s>", "</s>", "<pad>")
SEED = 0
TARGET_DIR, DRAFT_DIR, MANIFEST = "target", "draft", "models.json"

# ---- the context design -------------------------------------------------------------------------
CONTEXT = {"vocab_size": 128256, "tokenizer_size": 128000, "beta": 0.5, "alpha": 0.15}
HIDDEN, HEAD_DIM, ROPE_THETA, INTERMEDIATE = 32, 32, 1000.0, 8
CONST, S1, S2 = 0, slice(1, 16), slice(16, 32)
CONST_VALUE = 2.0  # the constant channel; with |S1| = sqrt(28) an embedding's RMS is 1
EMBED_NORM = math.sqrt(HIDDEN - CONST_VALUE ** 2)
LM_HEAD_NORM = 0.5
PADDING_SCORE = -10.0  # lm_head's weight on the constant channel for padding rows: never the argmax
CONTEXT_GAIN = 1.0  # |A|: how much of the logits comes from the context (S2) beside the token (S1)
# The attention score profile f(D) over the distance D = query position - key position.
PROFILE_NEAR, PROFILE_AT_2, PROFILE_FAR = 0.0, -1.5, -8.0
PROFILE_RANGE, PROFILE_RIDGE = (-12, 300), 1.0
# The previous-token head: sum_j M cos(theta_j (D - 1)) over the J fastest frequencies peaks at D = 1
# (softmax weight ~0.985 there, ~0.007 at D = 0 and 2, < 1e-4 beyond), within bf16's reach.
PREVIOUS_FREQUENCIES, PREVIOUS_MAGNITUDE = 6, 6.0
PREVIOUS_GAIN = 1.0  # |B|: the previous token's share of the context
HIDDEN_RMS_SAMPLE = 8  # seeded prompts over which the target's mean hidden RMS is taken
AGREEMENT_PROMPTS, AGREEMENT_TOKENS = 8, 48

# ---- the bigram design (the models before 2026-12) -------------------------------------------------
BIGRAM = {"vocab_size": 128256, "hidden_size": 16, "intermediate_size": 32, "num_layers": 1, "alpha": 0.2}
RESIDUAL_SCALE = 0.01
AGREEMENT_SAMPLE = 4096

DESIGNS = ("context", "bigram")


def build_tokenizer(tokenizer_size: int):
    skip_torchvision_meta_registrations()
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS)}
    vocab.update({f"t{i}": i for i in range(len(SPECIAL_TOKENS), tokenizer_size)})
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>",
                                   pad_token="<pad>", unk_token="<pad>")
    fast.chat_template = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
    return fast


def _llama_config(**overrides: Any):
    from transformers import LlamaConfig

    base = dict(max_position_embeddings=2048, bos_token_id=0, eos_token_id=1, pad_token_id=2,
                tie_word_embeddings=False, torch_dtype="bfloat16", rms_norm_eps=1e-5)
    return LlamaConfig(**{**base, **overrides})


def _draft_config(target_config, **overrides: Any):
    keep = ("vocab_size", "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
            "head_dim", "max_position_embeddings", "bos_token_id", "eos_token_id", "pad_token_id", "rms_norm_eps",
            "rope_parameters")
    config = _llama_config(**{k: v for k, v in target_config.to_dict().items() if k in keep},
                           num_hidden_layers=1, **overrides)
    config.architectures = ["LlamaForCausalLMEagle"]  # EAGLE-1: one decoder layer and fc
    return config


def _digests(out_dir: Path) -> dict[str, str]:
    sha256: dict[str, str] = {}
    for directory in (out_dir / TARGET_DIR, out_dir / DRAFT_DIR):
        for path in sorted(directory.glob("*.safetensors")):
            sha256[str(path.relative_to(out_dir))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return sha256


# ---- the context design: the positional profile -------------------------------------------------------


def _profile_target(distance: int) -> float:
    if distance <= 1:
        return PROFILE_NEAR
    return PROFILE_AT_2 if distance == 2 else PROFILE_FAR


def _profile_weight(distance: int) -> float:
    # exact where it matters (the nearest keys, and the future ones a wrong prefix lets in), loose far
    # away (only "well below" matters there), free beyond the 6 future positions a draft can reach
    if -6 <= distance <= 2:
        return 10.0
    return 0.0 if distance < -6 else 1.0


def rope_frequencies():
    import torch

    return ROPE_THETA ** (-torch.arange(HEAD_DIM // 2, dtype=torch.float64) * 2.0 / HEAD_DIM)


def fit_profile():
    """The complex coefficients c_j (as [real parts, imaginary parts]) of the scaled score
    f(D) = sum_j Re(c_j e^{i theta_j D}), least squares on the profile with a ridge."""
    import torch

    theta = rope_frequencies()
    distances = torch.arange(PROFILE_RANGE[0], PROFILE_RANGE[1] + 1, dtype=torch.float64)
    angles = distances[:, None] * theta[None, :]
    basis = torch.cat([angles.cos(), -angles.sin()], 1)
    target = torch.tensor([_profile_target(int(d)) for d in distances], dtype=torch.float64)
    weight = torch.tensor([_profile_weight(int(d)) for d in distances], dtype=torch.float64)
    lhs = torch.cat([basis * weight[:, None], math.sqrt(PROFILE_RIDGE) * torch.eye(basis.shape[1], dtype=torch.float64)])
    rhs = torch.cat([target * weight, torch.zeros(basis.shape[1], dtype=torch.float64)])
    return torch.linalg.lstsq(lhs, rhs[:, None]).solution[:, 0]


def query_and_key(coefficients):
    """Constant query and key vectors (before RoPE, the neox halves) whose RoPE'd product times
    HEAD_DIM^-0.5 is f(m - n): q~_j conj(k~_j) = c_j sqrt(HEAD_DIM), split evenly in magnitude."""
    import torch

    n = HEAD_DIM // 2
    c = torch.complex(coefficients[:n], coefficients[n:]) * math.sqrt(HEAD_DIM)
    magnitude = c.abs().sqrt()
    q = magnitude * torch.exp(1j * c.angle())
    return torch.cat([q.real, q.imag]).float(), torch.cat([magnitude, torch.zeros(n, dtype=torch.float64)]).float()


# ---- the context design: weights ---------------------------------------------------------------------


def previous_token_coefficients():
    """The coefficients (as fit_profile's) of f(D) = sum_j M cos(theta_j (D - 1)): c_j = M e^{-i theta_j}
    on the PREVIOUS_FREQUENCIES fastest frequencies."""
    import torch

    theta = rope_frequencies()
    on = (torch.arange(HEAD_DIM // 2) < PREVIOUS_FREQUENCIES).double() * PREVIOUS_MAGNITUDE
    return torch.cat([on * theta.cos(), -on * theta.sin()])


def _context_weights(vocab_size: int, tokenizer_size: int, alpha: float) -> dict[str, Any]:
    """Every tensor of both models, in float32, by role (see the module docstring)."""
    import torch

    g = torch.Generator().manual_seed(SEED)
    s1, s2 = S1.stop - S1.start, S2.stop - S2.start
    embed = torch.zeros(vocab_size, HIDDEN)
    embed[:, CONST] = CONST_VALUE
    e = torch.randn(vocab_size, s1, generator=g)
    embed[:, S1] = e / e.norm(dim=1, keepdim=True) * EMBED_NORM
    head = torch.randn(vocab_size, HIDDEN, generator=g)
    head[:, CONST] = 0
    head = head / head.norm(dim=1, keepdim=True) * LM_HEAD_NORM
    head[tokenizer_size:] = 0
    head[tokenizer_size:, CONST] = PADDING_SCORE
    iso = torch.linalg.qr(torch.randn(s2, s1, generator=g))[0] * CONTEXT_GAIN  # S1 -> S2
    noise = torch.randn(s1, s1, generator=g) / math.sqrt(s1)
    previous = torch.linalg.qr(torch.randn(s2, s1, generator=g))[0] * PREVIOUS_GAIN  # S1 -> S2, another isometry
    q, k = query_and_key(fit_profile())
    qb, kb = query_and_key(previous_token_coefficients())
    return {"embed": embed, "lm_head": head, "A": iso, "B": previous, "fc_noise": torch.eye(s1) + alpha * noise,
            "heads": [(q, k, iso), (qb, kb, previous)]}


def _attention(heads, constant: float, out_scales) -> dict[str, Any]:
    """q/k/v/o projections, one head per (q, k, M) of `heads`: q and k from the constant channel, v
    copies S1, o writes scale * M v into S2."""
    import torch

    n = len(heads)
    wq, wk, wv = (torch.zeros(n * HEAD_DIM, HIDDEN) for _ in range(3))
    wo = torch.zeros(HIDDEN, n * HEAD_DIM)
    s1 = S1.stop - S1.start
    for h, ((q, k, M), scale) in enumerate(zip(heads, out_scales)):
        rows = slice(h * HEAD_DIM, (h + 1) * HEAD_DIM)
        wq[rows, CONST] = q / constant
        wk[rows, CONST] = k / constant
        wv[h * HEAD_DIM + torch.arange(s1), torch.arange(S1.start, S1.stop)] = 1.0
        wo[S2, h * HEAD_DIM:h * HEAD_DIM + s1] = scale * M
    return {"q_proj": wq, "k_proj": wk, "v_proj": wv, "o_proj": wo}


def _save(directory: Path, config, tensors: dict, tokenizer) -> None:
    import torch
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    save_file({k: v.to(torch.bfloat16).contiguous() for k, v in tensors.items()}, str(directory / "model.safetensors"),
              metadata={"format": "pt"})


def _mean_hidden_rms(out_dir: Path) -> float:
    """The target's mean RMS before its final norm (2 / the normed hidden's constant channel) along
    seeded prompts: the scale the head undoes when it reads the previous token from the hidden."""
    import torch

    reference = ContextReference(out_dir, target_only=True)
    g = torch.Generator().manual_seed(SEED + 5)
    rms = []
    for _ in range(HIDDEN_RMS_SAMPLE):
        prompt = torch.randint(len(SPECIAL_TOKENS), 1000, (16,), generator=g).tolist()
        out, _ = reference.target(reference.greedy(prompt, AGREEMENT_TOKENS))
        rms.append(CONST_VALUE / out[:, CONST])
    return float(torch.cat(rms).mean())


def build_context(out_dir: Path, *, vocab_size: int, tokenizer_size: int, beta: float, alpha: float) -> dict:
    skip_torchvision_meta_registrations()
    import torch

    w = _context_weights(vocab_size, tokenizer_size, alpha)
    config = _llama_config(vocab_size=vocab_size, hidden_size=HIDDEN, intermediate_size=INTERMEDIATE,
                           num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2, head_dim=HEAD_DIM,
                           rope_parameters={"rope_type": "default", "rope_theta": ROPE_THETA})
    config.architectures = ["LlamaForCausalLM"]
    attn = _attention(w["heads"], CONST_VALUE, (1.0, 1.0))  # x-hat's constant channel is CONST_VALUE (RMS 1)
    mlp_in = torch.randn(INTERMEDIATE, HIDDEN, generator=torch.Generator().manual_seed(SEED + 3)) * 0.02
    target = {"model.embed_tokens.weight": w["embed"], "model.norm.weight": torch.ones(HIDDEN),
              "lm_head.weight": w["lm_head"], "model.layers.0.input_layernorm.weight": torch.ones(HIDDEN),
              "model.layers.0.post_attention_layernorm.weight": torch.ones(HIDDEN),
              "model.layers.0.mlp.gate_proj.weight": mlp_in, "model.layers.0.mlp.up_proj.weight": mlp_in.clone(),
              "model.layers.0.mlp.down_proj.weight": torch.zeros(HIDDEN, INTERMEDIATE),  # the MLP adds nothing
              **{f"model.layers.0.self_attn.{name}.weight": t for name, t in attn.items()}}
    tokenizer = build_tokenizer(tokenizer_size)
    _save(out_dir / TARGET_DIR, config, target, tokenizer)
    hidden_rms = _mean_hidden_rms(out_dir)
    # the head: the context head as the target's; the previous token, a share beta through its own
    # previous-token head (positions) and the rest from the hidden it is given (S1 of the hidden at p
    # is token p's embedding over the target's RMS there)
    draft_attn = _attention(w["heads"], CONST_VALUE, (1.0, beta))  # z's constant channel is fc.bias
    fc = torch.zeros(HIDDEN, 2 * HIDDEN)
    fc[S1, S1] = w["fc_noise"]  # the token's embedding, through a (noisy) identity
    fc[S2, HIDDEN + S1.start:HIDDEN + S1.stop] = (1.0 - beta) * hidden_rms * w["B"]
    fc_bias = torch.zeros(HIDDEN)
    fc_bias[CONST] = CONST_VALUE
    draft = {"embed_tokens.weight": w["embed"], "fc.weight": fc, "fc.bias": fc_bias,
             "layers.0.post_attention_layernorm.weight": torch.ones(HIDDEN),
             "layers.0.mlp.gate_proj.weight": mlp_in.clone(), "layers.0.mlp.up_proj.weight": mlp_in.clone(),
             "layers.0.mlp.down_proj.weight": torch.zeros(HIDDEN, INTERMEDIATE),
             **{f"layers.0.self_attn.{name}.weight": t for name, t in draft_attn.items()}}
    _save(out_dir / DRAFT_DIR, _draft_config(config), draft, tokenizer)
    agreement = ContextReference(out_dir).agreement()
    return {"design": "context", "vocab_size": vocab_size, "tokenizer_size": tokenizer_size, "hidden_size": HIDDEN,
            "head_dim": HEAD_DIM, "heads": 2, "rope_theta": ROPE_THETA, "beta": beta, "alpha": alpha,
            "hidden_rms": round(hidden_rms, 4), "seed": SEED, "agreement": round(agreement, 4)}


class ContextReference:
    """The two context models' forward passes written out in torch, from the saved (bf16) weights:
    what the weights compute, for the manifest's agreement and for tests that check SGLang computes
    the same."""

    def __init__(self, out_dir: Path, *, target_only: bool = False):
        import torch
        from safetensors.torch import load_file

        def load(directory: str) -> dict:
            return {k: v.float() for k, v in load_file(str(out_dir / directory / "model.safetensors")).items()}

        self.t = load(TARGET_DIR)
        self.d = {} if target_only else load(DRAFT_DIR)
        self.theta = rope_frequencies()
        self.torch = torch

    def _rope(self, x, positions):
        torch = self.torch
        n = HEAD_DIM // 2
        angle = positions.double()[:, None] * self.theta[None, :]
        cos, sin = angle.cos().float(), angle.sin().float()
        return torch.cat([x[:, :n] * cos - x[:, n:] * sin, x[:, n:] * cos + x[:, :n] * sin], 1)

    def _attend(self, p: str, w: dict, x, qpos, keys_x, kpos):
        """Causal multi-head attention (as many heads as q_proj has HEAD_DIM rows)."""
        torch = self.torch
        q_all, k_all = x @ w[f"{p}q_proj.weight"].T, keys_x @ w[f"{p}k_proj.weight"].T
        v_all = keys_x @ w[f"{p}v_proj.weight"].T
        heads = []
        for h in range(q_all.shape[1] // HEAD_DIM):
            cols = slice(h * HEAD_DIM, (h + 1) * HEAD_DIM)
            q, k = self._rope(q_all[:, cols], qpos), self._rope(k_all[:, cols], kpos)
            s = (q @ k.T) / math.sqrt(HEAD_DIM)
            s = s.masked_fill(kpos[None, :] > qpos[:, None], float("-inf"))
            heads.append(torch.softmax(s, -1) @ v_all[:, cols])
        return torch.cat(heads, 1) @ w[f"{p}o_proj.weight"].T

    @staticmethod
    def _rms(x):
        return x / x.pow(2).mean(-1, keepdim=True).add(1e-5).sqrt()

    def target(self, tokens: list[int], last: int | None = None):
        """(final normed hidden per position, the greedy next token per position; only of the
        `last` positions when given)."""
        torch = self.torch
        pos = torch.arange(len(tokens))
        x = self.t["model.embed_tokens.weight"][torch.tensor(tokens)]
        xh = self._rms(x)
        h = x + self._attend("model.layers.0.self_attn.", self.t, xh, pos, xh, pos)
        out = self._rms(h)
        rows = out if last is None else out[-last:]
        return out, (rows @ self.t["lm_head.weight"].T).argmax(-1)

    def draft(self, next_tokens: list[int], hiddens, positions):
        """The EAGLE head over a whole sequence at once (input p: token p+1 and the hidden at p)."""
        torch = self.torch
        emb = self.d["embed_tokens.weight"][torch.tensor(next_tokens)]
        z = torch.cat([emb, hiddens], 1) @ self.d["fc.weight"].T + self.d["fc.bias"]
        g = z + self._attend("layers.0.self_attn.", self.d, z, positions, z, positions)
        return g, (g @ self.t["lm_head.weight"].T).argmax(-1)

    def greedy(self, prompt: list[int], n: int) -> list[int]:
        tokens = list(prompt)
        for _ in range(n):
            tokens.append(int(self.target(tokens, last=1)[1][-1]))
        return tokens

    def agreement(self) -> float:
        """How often the head's first draft token is the target's next token, along the target's own
        greedy continuations of seeded prompts (teacher-forced: the head sees the true context)."""
        torch = self.torch
        g = torch.Generator().manual_seed(SEED + 4)
        same = total = 0
        for _ in range(AGREEMENT_PROMPTS):
            prompt = torch.randint(len(SPECIAL_TOKENS), 1000, (16,), generator=g).tolist()
            tokens = self.greedy(prompt, AGREEMENT_TOKENS)
            out, _ = self.target(tokens, last=1)
            # input p: token p+1 with the target's hidden at p; its prediction is token p+2
            _, predicted = self.draft(tokens[1:], out[:-1], torch.arange(len(tokens) - 1))
            start = len(prompt) - 1
            same += int((predicted[start:-1] == torch.tensor(tokens[start + 2:])).sum())
            total += len(tokens) - start - 2
        return same / total


# ---- the bigram design ---------------------------------------------------------------------------------


def build_bigram(out_dir: Path, *, vocab_size: int, hidden_size: int, intermediate_size: int, num_layers: int,
                 alpha: float) -> dict:
    skip_torchvision_meta_registrations()
    import torch
    from safetensors.torch import save_file
    from transformers import LlamaForCausalLM
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    torch.manual_seed(SEED)
    heads, kv_heads = 4, 2
    target_dir, draft_dir = out_dir / TARGET_DIR, out_dir / DRAFT_DIR
    tokenizer = build_tokenizer(vocab_size)
    config = _llama_config(vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=intermediate_size,
                           num_hidden_layers=num_layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                           head_dim=hidden_size // heads)
    target = LlamaForCausalLM(config).to(torch.bfloat16)
    with torch.no_grad():
        for layer in target.model.layers:
            layer.self_attn.o_proj.weight.mul_(RESIDUAL_SCALE)
            layer.mlp.down_proj.weight.mul_(RESIDUAL_SCALE)
    target.save_pretrained(target_dir)
    tokenizer.save_pretrained(target_dir)

    draft_config = _draft_config(config)
    layer = LlamaDecoderLayer(draft_config, 0).to(torch.bfloat16)
    weights = {f"layers.0.{k}": v.contiguous() for k, v in layer.state_dict().items() if "input_layernorm" not in k}
    for name in ("layers.0.self_attn.o_proj.weight", "layers.0.mlp.down_proj.weight"):
        weights[name] = (weights[name].float() * RESIDUAL_SCALE).to(torch.bfloat16)
    noise = torch.randn(hidden_size, hidden_size, generator=torch.Generator().manual_seed(SEED + 1))
    mix = torch.eye(hidden_size) + alpha * noise / 8
    weights["fc.weight"] = torch.cat([mix, torch.zeros(hidden_size, hidden_size)], 1).to(torch.bfloat16)
    weights["fc.bias"] = torch.zeros(hidden_size, dtype=torch.bfloat16)
    weights["embed_tokens.weight"] = target.model.embed_tokens.weight.detach().clone().contiguous()
    draft_dir.mkdir(parents=True, exist_ok=True)
    draft_config.save_pretrained(draft_dir)
    tokenizer.save_pretrained(draft_dir)
    save_file(weights, str(draft_dir / "model.safetensors"), metadata={"format": "pt"})

    with torch.no_grad():  # how often the two pick the same next token from a token's embedding alone
        embeddings, head = target.model.embed_tokens.weight.float(), target.lm_head.weight.float()
        normed = embeddings / embeddings.pow(2).mean(-1, keepdim=True).add(1e-5).sqrt()
        # over at most AGREEMENT_SAMPLE tokens: the full vocab x vocab product is minutes at 128K
        sample = torch.randperm(vocab_size, generator=torch.Generator().manual_seed(SEED + 2))[:AGREEMENT_SAMPLE]
        same = 0
        for rows in torch.split(sample, 1024):
            same += int(((normed[rows] @ head.T).argmax(-1) == ((embeddings[rows] @ mix.T) @ head.T).argmax(-1)).sum())
    return {"design": "bigram", "vocab_size": vocab_size, "tokenizer_size": vocab_size, "hidden_size": hidden_size,
            "intermediate_size": intermediate_size, "num_layers": num_layers, "alpha": alpha, "seed": SEED,
            "agreement": round(same / len(sample), 4)}


def build(out_dir: Path, design: str = "context", **params: Any) -> dict:
    """Builds `design`'s two models into out_dir and writes models.json; returns it."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if design == "context":
        manifest = build_context(out_dir, **{**CONTEXT, **params})
    elif design == "bigram":
        manifest = build_bigram(out_dir, **{**BIGRAM, **params})
    else:
        raise ValueError(f"unknown design {design!r} (one of {', '.join(DESIGNS)})")
    manifest.update(target=TARGET_DIR, draft=DRAFT_DIR, sha256=_digests(out_dir))
    (out_dir / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sglang_spec_harness.sglang_cpu.tiny_models", description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--design", choices=DESIGNS, default="context",
                        help="context (the default: next tokens depend on the context) or bigram (the models before 2026-12)")
    args = parser.parse_args(argv)
    manifest = build(args.out_dir, args.design)
    print(json.dumps({k: v for k, v in manifest.items() if k not in ("sha256", "target", "draft")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
