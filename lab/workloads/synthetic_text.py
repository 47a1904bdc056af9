"""Filler prompts of an exact token count, for traces that record lengths but no text.

A prompt of n tokens is a fixed English paragraph repeated, cut after the last whole
word that fits, then padded with " the" (one token) to exactly n. Every word starts
with a space, so with a GPT-2-style byte-level pre-tokenizer (LiveServe's) word
boundaries are token boundaries and the token count of the text is the sum of its
words' counts: `len(tokenizer.encode_literal(prompt(n))) == n` for every n, checked
when the builder is made. The text is built from words, never by decoding cut token
ids, so no re-encoding tolerance is needed. Prompts start with a space.
"""

from __future__ import annotations

import bisect
from itertools import accumulate

from stages.models.tokenizer import TextTokenizer

PARAGRAPH = (
    "The river town wakes slowly in the early light. Fishing boats drift back to the"
    " harbor, gulls circle over the market, and bakers open their doors to the smell of"
    " fresh bread. Children walk to school along the old stone bridge, while shopkeepers"
    " sweep the streets and talk about the weather. By noon the square is full of"
    " travelers, musicians play near the fountain, and the clock tower rings over the"
    " quiet hills beyond the valley."
)
PAD = " the"


class FillerText:
    """Deterministic prompts of exactly n tokens under `tokenizer`; equal n share one string."""

    def __init__(self, tokenizer: TextTokenizer) -> None:
        self._words = [" " + word for word in PARAGRAPH.split()]
        counts = [len(tokenizer.encode_literal(word)) for word in self._words]
        self._cumulative = [0, *accumulate(counts)]
        self._paragraph = "".join(self._words)
        self._prompts: dict[int, str] = {}
        self._check(tokenizer)

    @property
    def paragraph_tokens(self) -> int:
        return self._cumulative[-1]

    def prompt(self, num_tokens: int) -> str:
        """A prompt of exactly `num_tokens` tokens."""
        if num_tokens not in self._prompts:
            self._prompts[num_tokens] = self._build(num_tokens)
        return self._prompts[num_tokens]

    def _build(self, num_tokens: int) -> str:
        repeats, rest = divmod(num_tokens, self.paragraph_tokens)
        num_words = bisect.bisect_right(self._cumulative, rest) - 1
        pad = rest - self._cumulative[num_words]
        return self._paragraph * repeats + "".join(self._words[:num_words]) + PAD * pad

    def _check(self, tokenizer: TextTokenizer) -> None:
        """The count arithmetic holds only if words never merge across their boundaries."""
        doubled = len(tokenizer.encode_literal(self._paragraph * 2 + PAD * 2))
        if len(tokenizer.encode_literal(PAD)) != 1 or doubled != 2 * self.paragraph_tokens + 2:
            raise ValueError("tokenizer does not split filler text at word boundaries")
