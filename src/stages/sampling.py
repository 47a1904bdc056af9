"""Token sampling: greedy, temperature and top-k, reproducible per request."""

from __future__ import annotations

import torch

from stages.config import SamplingParams


def sample(logits: torch.Tensor, params: list[SamplingParams], generators: list[torch.Generator]) -> list[int]:
    """One token per row of `logits` [rows, vocab]; each row draws from its own generator."""
    tokens = logits.argmax(dim=-1).tolist()
    for row, (p, gen) in enumerate(zip(params, generators)):
        if not p.is_greedy:
            tokens[row] = _draw(logits[row], p, gen)
    return tokens


def _draw(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator) -> int:
    scaled = logits.float() / params.temperature
    if 0 < params.top_k < scaled.shape[-1]:
        kth = torch.topk(scaled, params.top_k).values[-1]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    probs = torch.softmax(scaled, dim=-1)
    return int(torch.multinomial(probs, 1, generator=generator))
