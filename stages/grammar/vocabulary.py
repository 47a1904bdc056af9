"""A tokenizer's ids as token bitmask words: bit i % 32 of word i // 32 stands for id i (llguidance's layout)."""

from __future__ import annotations

import functools
from collections.abc import Iterable

import numpy as np

from stages.models.tokenizer import TextTokenizer

SHORT_OF_CACHE_SIZE = 64


class Vocabulary:
    """The bitmask words of a tokenizer's ids, `num_words` of them (the bits past its vocabulary are never
    set). `ordinary` has the bit of every id that is not a special token."""

    def __init__(self, tokenizer: TextTokenizer) -> None:
        self.tokenizer = tokenizer
        self.num_words = (tokenizer.vocab_size + 31) // 32
        self.ordinary = self.pack([not tokenizer.is_special(i) for i in range(tokenizer.vocab_size)])
        self.short_of = functools.lru_cache(maxsize=SHORT_OF_CACHE_SIZE)(self._short_of)

    def pack(self, flags: list[bool] | np.ndarray) -> np.ndarray:
        """uint32 words with the bits of the ids whose flag (by id) is set."""
        bits = np.zeros(self.num_words * 32, dtype=bool)
        bits[: len(flags)] = flags
        return np.packbits(bits, bitorder="little").view("<u4").astype(np.uint32)

    def bits(self, ids: Iterable[int]) -> np.ndarray:
        flags = np.zeros(self.num_words * 32, dtype=bool)
        flags[list(ids)] = True
        return self.pack(flags)

    def _short_of(self, rest: bytes) -> np.ndarray:
        """The bits of the tokens that do not go past `rest` (a text that has yet to spell it may take them
        without anything after it to check): the special tokens, and those whose bytes are not `rest` and
        more (`short_of` keeps the last SHORT_OF_CACHE_SIZE)."""
        tokenizer = self.tokenizer
        return self.pack([tokenizer.is_special(i) or not (len(b) > len(rest) and b.startswith(rest))
                          for i, b in enumerate(map(tokenizer.token_bytes, range(tokenizer.vocab_size)))])
