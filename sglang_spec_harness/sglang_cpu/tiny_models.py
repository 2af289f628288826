"""A tiny Llama target and an EAGLE draft head for it, built locally (no hub, no download).

`python -m sglang_spec_harness.sglang_cpu.tiny_models OUT_DIR` (in the SGLang environment: it needs
transformers, tokenizers and safetensors) writes `OUT_DIR/target` and `OUT_DIR/draft`, two
directories `--model-path` / `--speculative-draft-model-path` accept, and `OUT_DIR/models.json`.
The weights are random but seeded, so every machine builds the same bytes.

Random weights alone give a draft that almost never agrees with its target (accept length ~1: the
fast path would be measured on cycles that accept nothing). So both models are made simple on
purpose, and made to agree:
- the target is nearly a bigram model: its attention and MLP outputs are scaled down, so the next
  token depends mostly on the current token's embedding (through the final norm and lm_head);
- the EAGLE head (one decoder layer and `fc: [embedding, hidden] -> hidden`, weights named without
  `model.` as SGLang's LlamaForCausalLMEagle loads them) passes the embedding through a noisy
  identity (`fc = [I + alpha * N, 0]`), its own layer scaled down the same way, and shares the
  target's embeddings and lm_head output space; `alpha` sets how often the two disagree.
The draft then agrees with the target on most next tokens (`agreement` in models.json, over the
vocabulary), and SGLang's EAGLE worker accepts several draft tokens per cycle.

The vocabulary is a word-level one of `vocab_size` tokens (three special ones, then `t3`, `t4`, ...):
its size is what the draft's softmax runs over, so it is a parameter, not what a corpus gives.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

from sglang_spec_harness.sglang_cpu import skip_torchvision_meta_registrations

# The defaults the scenario uses (scenarios/sglang_cpu_tiny_eagle_topk1.yaml, benchmarks/README.md):
# Llama-3's vocabulary, so that the draft's full-vocabulary softmax is as long as in the real models,
# and everything else small (hidden 16, one layer), so that it is a visible share of a cycle on a CPU.
DEFAULTS = {"vocab_size": 128256, "hidden_size": 16, "intermediate_size": 32, "num_layers": 1, "alpha": 0.2}
SPECIAL_TOKENS = ("<s>", "</s>", "<pad>")
RESIDUAL_SCALE = 0.01  # attention and MLP outputs scaled down: a near-bigram model
SEED = 0
AGREEMENT_SAMPLE = 4096
TARGET_DIR, DRAFT_DIR, MANIFEST = "target", "draft", "models.json"


def build_tokenizer(vocab_size: int):
    skip_torchvision_meta_registrations()
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS)}
    vocab.update({f"t{i}": i for i in range(len(SPECIAL_TOKENS), vocab_size)})
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>",
                                   pad_token="<pad>", unk_token="<pad>")
    fast.chat_template = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
    return fast


def build(out_dir: Path, *, vocab_size: int, hidden_size: int, intermediate_size: int, num_layers: int,
          alpha: float) -> dict:
    skip_torchvision_meta_registrations()
    import torch
    from safetensors.torch import save_file
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    torch.manual_seed(SEED)
    heads, kv_heads = 4, 2
    target_dir, draft_dir = out_dir / TARGET_DIR, out_dir / DRAFT_DIR
    tokenizer = build_tokenizer(vocab_size)
    config = LlamaConfig(
        vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=intermediate_size,
        num_hidden_layers=num_layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
        head_dim=hidden_size // heads, max_position_embeddings=2048, bos_token_id=0, eos_token_id=1,
        pad_token_id=2, tie_word_embeddings=False, torch_dtype="bfloat16", rms_norm_eps=1e-5)
    target = LlamaForCausalLM(config).to(torch.bfloat16)
    with torch.no_grad():
        for layer in target.model.layers:
            layer.self_attn.o_proj.weight.mul_(RESIDUAL_SCALE)
            layer.mlp.down_proj.weight.mul_(RESIDUAL_SCALE)
    target.save_pretrained(target_dir)
    tokenizer.save_pretrained(target_dir)

    # The EAGLE-1 head: one decoder layer (no input norm: EAGLE's first layer takes fc's output) and fc.
    draft_config = LlamaConfig(**{k: v for k, v in config.to_dict().items() if k in (
        "vocab_size", "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
        "head_dim", "max_position_embeddings", "bos_token_id", "eos_token_id", "pad_token_id", "rms_norm_eps")},
        num_hidden_layers=1, tie_word_embeddings=False, torch_dtype="bfloat16")
    draft_config.architectures = ["LlamaForCausalLMEagle"]
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
        agreement = same / len(sample)
    sha256: dict[str, str] = {}
    for directory in (target_dir, draft_dir):
        for path in sorted(directory.glob("*.safetensors")):
            sha256[str(path.relative_to(out_dir))] = hashlib.sha256(path.read_bytes()).hexdigest()
    manifest = {"vocab_size": vocab_size, "hidden_size": hidden_size, "intermediate_size": intermediate_size,
                "num_layers": num_layers, "alpha": alpha, "seed": SEED, "agreement": round(agreement, 4),
                "target": TARGET_DIR, "draft": DRAFT_DIR, "sha256": sha256}
    (out_dir / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sglang_spec_harness.sglang_cpu.tiny_models", description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    for name, default in DEFAULTS.items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(default), default=default)
    args = parser.parse_args(argv)
    for name in ("vocab_size", "hidden_size", "intermediate_size", "num_layers"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.vocab_size <= len(SPECIAL_TOKENS) or args.hidden_size % 4:
        parser.error("--vocab-size must exceed the 3 special tokens and --hidden-size be a multiple of 4 (4 heads)")
    manifest = build(args.out_dir, **{name: getattr(args, name) for name in DEFAULTS})
    print(json.dumps({k: manifest[k] for k in (*DEFAULTS, "agreement")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
