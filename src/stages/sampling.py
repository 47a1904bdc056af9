"""Token sampling: greedy, temperature and top-k, reproducible per request."""

from __future__ import annotations

import torch

from stages.config import SamplingParams


def sample(logits: torch.Tensor, params: list[SamplingParams], generators: list[torch.Generator]) -> list[int]:
    """One token per row of `logits` [rows, vocab]; each row draws from its own generator.

    The rows that draw share one pass of temperature, top-k and softmax; each then
    draws with its own generator, exactly as torch.multinomial draws one sample.
    """
    tokens = logits.argmax(dim=-1).tolist()
    drawn = [row for row, p in enumerate(params) if not p.is_greedy]
    if drawn:
        probs = _probabilities(logits[drawn].float(), [params[row] for row in drawn])
        for row, row_probs in zip(drawn, probs):
            tokens[row] = _draw(row_probs, generators[row])
    return tokens


def _probabilities(logits: torch.Tensor, params: list[SamplingParams]) -> torch.Tensor:
    """Each row's softmax at its temperature, zero outside its top k."""
    scaled = logits / torch.tensor([[p.temperature] for p in params], dtype=logits.dtype)
    top_k = torch.tensor([p.top_k if 0 < p.top_k < scaled.shape[-1] else 0 for p in params])
    if top_k.any():
        kth = torch.topk(scaled, int(top_k.max())).values[torch.arange(len(params)), top_k - 1]
        kth = kth.masked_fill(top_k == 0, float("-inf"))
        scaled = scaled.masked_fill(scaled < kth[:, None], float("-inf"))
    probs = torch.softmax(scaled, dim=-1)
    if probs.isnan().any():
        raise ValueError("cannot sample: the logits contain NaN or infinity")
    return probs


def _draw(probs: torch.Tensor, generator: torch.Generator) -> int:
    """argmax of p / q with q ~ Exp(1): a draw from `probs` (torch.multinomial's method for one sample)."""
    race = torch.empty_like(probs).exponential_(generator=generator)
    return int(torch.div(probs, race, out=race).argmax())
