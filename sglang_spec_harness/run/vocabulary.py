"""The served model's vocabulary, recorded with each launch for the output-validity rule.

Two sizes matter: `vocab_size`, the rows of the embedding and lm_head (an id at or above it cannot
come out of a correct server), and `tokenizer_size`, the ids the tokenizer knows (real models round
lm_head up, e.g. Qwen2.5's 152064 rows for 151665 tokens: the ids between are padding, and a server
that returns one has a bug: SGLang #35872, #26358). The server is asked first (`/model_info`: the
micro engine says both sizes; SGLang names its model and tokenizer paths), then the files are read:
`config.json`'s `vocab_size` and `tokenizer.json`'s ids, from a local folder or the Hugging Face
cache. Anything missing is None: the rule then cannot judge ids and says so (INCONCLUSIVE).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import httpx

from sglang_spec_harness.rundir import Vocabulary

MODEL_INFO_PATHS = ("/model_info", "/get_model_info")  # the second is SGLang's older name
MAX_MODEL_FILE_BYTES = 64 * 1024 * 1024  # tokenizer.json of a 256K-token vocabulary is ~20 MB


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        if not path.is_file() or path.stat().st_size > MAX_MODEL_FILE_BYTES:
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def local_model_dir(path: str | None) -> Path | None:
    """A model's folder: the path itself, or a hub id's snapshot in the Hugging Face cache."""
    if not path:
        return None
    if Path(path).is_dir():
        return Path(path)
    if path.count("/") != 1 or path.startswith((".", "/")):
        return None
    hub = Path(os.environ.get("HF_HUB_CACHE") or Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface")) / "hub")
    repo = hub / f"models--{path.replace('/', '--')}"
    try:
        revision = (repo / "refs" / "main").read_text().strip()
    except OSError:
        return None
    snapshot = repo / "snapshots" / revision
    return snapshot if snapshot.is_dir() else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def config_vocab_size(model_dir: Path) -> int | None:
    config = _read_json(model_dir / "config.json") or {}
    text = config.get("text_config")
    return _int(config.get("vocab_size")) or (_int(text.get("vocab_size")) if isinstance(text, dict) else None)


def tokenizer_size(tokenizer_dir: Path) -> int | None:
    """One past the highest id tokenizer.json knows (its model's vocabulary and its added tokens)."""
    data = _read_json(tokenizer_dir / "tokenizer.json")
    if data is None:
        return None
    ids: list[int] = []
    vocab = data.get("model", {}).get("vocab") if isinstance(data.get("model"), dict) else None
    if isinstance(vocab, dict):
        ids += [v for v in vocab.values() if isinstance(v, int)]
    elif isinstance(vocab, list):  # Unigram: [[piece, score], ...], ids by position
        ids.append(len(vocab) - 1)
    added = data.get("added_tokens")
    if isinstance(added, list):
        ids += [t["id"] for t in added if isinstance(t, dict) and isinstance(t.get("id"), int)]
    return max(ids) + 1 if ids else None


def vocabulary_from_files(model_path: str | None, tokenizer_path: str | None = None) -> Vocabulary | None:
    model_dir = local_model_dir(model_path)
    if model_dir is None:
        return None
    vocab = config_vocab_size(model_dir)
    if vocab is None:
        return None
    tokenizer_dir = local_model_dir(tokenizer_path) or model_dir
    known = tokenizer_size(tokenizer_dir)
    if known is None:  # no tokenizer.json (a sentencepiece model only): padding cannot be told apart
        return Vocabulary(vocab_size=vocab, tokenizer_size=vocab,
                          source=f"{model_dir / 'config.json'} (no tokenizer.json: padding not known)")
    return Vocabulary(vocab_size=vocab, tokenizer_size=min(known, vocab),
                      source=f"{model_dir / 'config.json'}, {tokenizer_dir / 'tokenizer.json'}")


def served_vocabulary(base_url: str, *, timeout_s: float = 30.0, model_path: str | None = None) -> Vocabulary | None:
    """Asks the server, then reads the files it names (or `model_path`, the scenario's); None when neither says."""
    info: dict[str, Any] = {}
    for path in MODEL_INFO_PATHS:
        try:
            response = httpx.get(f"{base_url}{path}", timeout=timeout_s)
        except httpx.HTTPError:
            continue
        if response.status_code == 200:
            try:
                body = response.json()
            except ValueError:
                continue
            info = body if isinstance(body, dict) else {}
            break
    vocab, known = _int(info.get("vocab_size")), _int(info.get("tokenizer_size"))
    if vocab is not None:
        return Vocabulary(vocab_size=vocab, tokenizer_size=min(known or vocab, vocab), source=f"the server ({base_url}/model_info)")
    names = [info.get("model_path"), model_path]
    tokenizer = info.get("tokenizer_path")
    for name in names:
        if isinstance(name, str) and (found := vocabulary_from_files(name, tokenizer if isinstance(tokenizer, str) else None)):
            return found
    return None
