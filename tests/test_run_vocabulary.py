"""The served model's vocabulary (sglang_spec_harness/run/vocabulary.py): read from a model folder,
from the Hugging Face cache, and asked of a live micro server."""

from __future__ import annotations

import json

import pytest
from support.micro_server import start_server

from sglang_spec_harness.run.vocabulary import served_vocabulary, tokenizer_size, vocabulary_from_files


def _model(path, *, vocab_size=152064, tokenizer: dict | None = None, text_config=False):
    path.mkdir(parents=True, exist_ok=True)
    config = {"text_config": {"vocab_size": vocab_size}} if text_config else {"vocab_size": vocab_size}
    (path / "config.json").write_text(json.dumps(config))
    if tokenizer is not None:
        (path / "tokenizer.json").write_text(json.dumps(tokenizer))
    return path


BPE = {"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 151642}},
       "added_tokens": [{"id": 151643, "content": "<|endoftext|>"}, {"id": 151664, "content": "<tool>"}]}


def test_a_padded_vocabulary_from_config_and_tokenizer(tmp_path):
    vocab = vocabulary_from_files(str(_model(tmp_path / "qwen", tokenizer=BPE)))
    assert (vocab.vocab_size, vocab.tokenizer_size) == (152064, 151665)  # Qwen2.5: 399 padding ids


def test_unigram_and_multimodal_configs(tmp_path):
    unigram = {"model": {"type": "Unigram", "vocab": [["<unk>", 0.0]] * 250}, "added_tokens": []}
    assert tokenizer_size(_model(tmp_path / "u", tokenizer=unigram)) == 250
    vocab = vocabulary_from_files(str(_model(tmp_path / "mm", vocab_size=300, tokenizer=unigram, text_config=True)))
    assert (vocab.vocab_size, vocab.tokenizer_size) == (300, 250)


def test_without_tokenizer_json_padding_is_not_known(tmp_path):
    vocab = vocabulary_from_files(str(_model(tmp_path / "sp")))
    assert (vocab.vocab_size, vocab.tokenizer_size) == (152064, 152064) and "padding not known" in vocab.source


@pytest.mark.parametrize("config", ["not json", "[]", '{"vocab_size": "many"}', '{"vocab_size": -5}'])
def test_a_config_that_says_no_size_gives_none(tmp_path, config):
    model = _model(tmp_path / "bad", tokenizer=BPE)
    (model / "config.json").write_text(config)
    assert vocabulary_from_files(str(model)) is None


def test_a_hub_id_from_the_cache(tmp_path, monkeypatch):
    repo = tmp_path / "hub" / "models--Qwen--Qwen2.5-7B"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("abc123\n")
    _model(repo / "snapshots" / "abc123", tokenizer=BPE)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert vocabulary_from_files("Qwen/Qwen2.5-7B").tokenizer_size == 151665
    assert vocabulary_from_files("Qwen/Qwen2.5-72B") is None  # not in the cache: unknown


def test_the_micro_server_says_its_sizes(tmp_path):
    server = start_server(tmp_path, "--vocab-size", "512", "--num-threads", "1", "--log-level", "warning")
    try:
        vocab = served_vocabulary(server.url)
    finally:
        server.terminate()
    assert (vocab.vocab_size, vocab.tokenizer_size) == (512, 512) and "the server" in vocab.source
