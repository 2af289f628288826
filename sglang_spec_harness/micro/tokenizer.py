"""A trivial, deterministic word tokenizer for the micro engine.

Every token id maps to a printable pseudo-word of three consonant-vowel syllables ("bakemi"), and
back, so generated text round-trips through `text`. Any other word maps to a stable hash of itself.
Nothing here is learned: the micro models are random, so the words mean nothing.
"""

from __future__ import annotations

import hashlib
import re

_CONSONANTS = "bdfghjklmnprstvwxyz"  # 19
_VOWELS = "aeiou"  # 5
SYLLABLES = [c + v for c in _CONSONANTS for v in _VOWELS]  # 95 syllables
_SYLLABLE_INDEX = {s: i for i, s in enumerate(SYLLABLES)}
_WORD_SYLLABLES = 3  # 95**3 = 857375 ids, enough for any vocabulary up to that size
_PSEUDO_WORD = re.compile(rf"^(?:[{_CONSONANTS}][{_VOWELS}]){{3}}$")


class WordTokenizer:
    def __init__(self, vocab_size: int, bos_token_id: int, eos_token_id: int) -> None:
        if vocab_size > len(SYLLABLES) ** _WORD_SYLLABLES:
            raise ValueError(f"vocab_size {vocab_size} exceeds the tokenizer's {len(SYLLABLES) ** _WORD_SYLLABLES} words")
        self.vocab_size = vocab_size
        self.bos_token_id = bos_token_id
        self.eos_token_id = eos_token_id
        self.special_ids = {bos_token_id, eos_token_id}

    def id_to_word(self, token_id: int) -> str:
        n = len(SYLLABLES)
        a, rest = divmod(token_id, n * n)
        b, c = divmod(rest, n)
        return SYLLABLES[a] + SYLLABLES[b] + SYLLABLES[c]

    def word_to_id(self, word: str) -> int:
        if _PSEUDO_WORD.match(word):
            n = len(SYLLABLES)
            a, b, c = (_SYLLABLE_INDEX[word[i : i + 2]] for i in (0, 2, 4))
            token_id = (a * n + b) * n + c
            if token_id < self.vocab_size and token_id not in self.special_ids:
                return token_id
        digest = hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest()
        token_id = int.from_bytes(digest, "little") % self.vocab_size
        # Never let a user word become a special token.
        while token_id in self.special_ids:
            token_id = (token_id + 1) % self.vocab_size
        return token_id

    def encode(self, text: str, add_bos: bool = True) -> list[int]:
        ids = [self.word_to_id(w) for w in text.split()]
        return [self.bos_token_id, *ids] if add_bos else ids

    def decode(self, token_ids: list[int]) -> str:
        # Special tokens are skipped, as SGLang's default skip_special_tokens=True does.
        return " ".join(self.id_to_word(t) for t in token_ids if t not in self.special_ids)
