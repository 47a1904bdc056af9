"""Masking a batch's logits by its constrained rows' matchers, on any device."""

from __future__ import annotations

import numpy as np
import torch

from stages.grammar.matcher import ToolCallMatcher


def masked_logits(logits: torch.Tensor, matchers: list[ToolCallMatcher | None]) -> torch.Tensor:
    """`logits` [rows, vocab] (changed in place) with -inf at every token the row's matcher does not allow
    next; rows without one, or whose matcher no longer constrains, are left as they are. The bitmask is
    computed on the CPU and applied with torch ops on the logits' device; ids past the tokenizer's
    vocabulary (a padded output layer) are never allowed in a masked row."""
    rows = [i for i, matcher in enumerate(matchers) if matcher is not None and matcher.is_constraining]
    if not rows:
        return logits
    bitmask = np.empty((len(rows), matchers[rows[0]].vocab.num_words), dtype=np.int32)
    for i, row in enumerate(rows):
        matchers[row].fill(bitmask, i)
    allowed = _unpacked(torch.from_numpy(bitmask).to(logits.device), logits.shape[-1])
    index = torch.tensor(rows, device=logits.device)
    logits[index] = logits[index].masked_fill(~allowed, float("-inf"))
    return logits


def _unpacked(words: torch.Tensor, width: int) -> torch.Tensor:
    """bool [rows, width] of int32 bitmask words [rows, num_words] (bit i % 32 of word i // 32: id i)."""
    shifts = torch.arange(32, dtype=torch.int32, device=words.device)
    allowed = ((words.unsqueeze(-1) >> shifts) & 1).flatten(1).bool()
    if allowed.shape[1] >= width:
        return allowed[:, :width]
    return torch.cat([allowed, allowed.new_zeros(allowed.shape[0], width - allowed.shape[1])], dim=1)
