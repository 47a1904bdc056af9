"""Where one constrained generation stands: the tokens it took so far, and those that may come next."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from llguidance.numpy import fill_next_token_bitmask

if TYPE_CHECKING:
    from stages.grammar.compiler import CompiledConstraint


class ToolCallMatcher:
    """Follows the tokens a generation takes (`accept`) and writes the bits of the tokens that may come next
    (`fill`), as its ToolCallConstraint says.

    A reply that is a call from its start (forced) is decided at once. Otherwise it is undecided while its
    text is a proper prefix of `begin`: any token that does not go past `begin` is allowed (one that leaves
    it, a special token, a stop id, one that spells more of it), and those that go past it only towards a
    valid call; the first that leaves `begin` frees the matcher (`is_constraining` turns False: the
    generation is no longer masked). Once decided, the tokens of a valid call are allowed (where the call's
    text is forced, only the tokenizer's own split of it), no special token, and the generation's stop ids
    only where the call is complete; stop ids taken after that (ignore_eos) change nothing.
    """

    def __init__(self, compiled: CompiledConstraint, stop_ids: frozenset[int]) -> None:
        self.vocab = compiled.vocab
        self.begin = compiled.begin
        self.stop_ids = stop_ids
        self._stops = self.vocab.bits(stop_ids)
        self._inside = self.vocab.ordinary & ~self._stops  # what a call's text may take
        self._parser = compiled.parser.deep_copy()  # None once free
        self._text = None if compiled.is_call_at_start else b""  # the reply so far while undecided

    @property
    def is_constraining(self) -> bool:
        return self._parser is not None

    def fill(self, bitmask: np.ndarray, row: int) -> None:
        """Write the bits of the tokens allowed next into row `row` of `bitmask` (int32 [rows, num_words]).
        Only while constraining; RuntimeError if the grammar's parser failed."""
        fill_next_token_bitmask(self._parser, bitmask, row)
        if self._parser.is_error():
            raise RuntimeError(f"tool call grammar failed: {self._parser.get_error()}")
        words = bitmask.view(np.uint32)[row]
        words &= self._inside
        if self._text is not None:
            words |= self.vocab.short_of(self.begin[len(self._text):]) | self._stops
        elif self._parser.is_accepting():
            words |= self._stops

    def accept(self, token_id: int) -> None:
        """The generation took `token_id`, a token the last `fill` allowed."""
        if self._parser is None or (self._text is None and token_id in self.stop_ids):
            return
        if self._text is not None and not self._decide(token_id):
            self._parser = None
            return
        self._parser.consume_token(token_id)

    def _decide(self, token_id: int) -> bool:
        """Undecided: the reply with `token_id` may still be a call (decided once it starts with `begin`);
        False if it left `begin` behind."""
        if token_id in self.stop_ids or self.vocab.tokenizer.is_special(token_id):
            return False
        text = self._text + self.vocab.tokenizer.token_bytes(token_id)
        if not (self.begin.startswith(text) or text.startswith(self.begin)):
            return False
        self._text = None if text.startswith(self.begin) else text
        return True
