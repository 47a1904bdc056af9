"""Token sampling: greedy, temperature and top-k, reproducible per request."""

from __future__ import annotations

import torch

from stages.config import SamplingParams


def sample(logits: torch.Tensor, params: list[SamplingParams], generators: list[torch.Generator]) -> list[int]:
    """One token per row of `logits` [rows, vocab]; each row draws from its own generator.

    The rows that draw share one pass of temperature, top-k and softmax over their
    candidates (the widest top k among them; the whole vocabulary if one has none), on the
    logits' device; each then draws among its candidates with its own generator, on the CPU
    (a request's generator lives there, so its draws are the same wherever its logits come from).
    """
    tokens = logits.argmax(dim=-1).tolist()
    drawn = [row for row, p in enumerate(params) if not p.is_greedy]
    if drawn:
        candidates, probs = (t.cpu() for t in _candidates(logits[drawn].float(), [params[row] for row in drawn]))
        for i, row in enumerate(drawn):
            tokens[row] = int(candidates[i, _draw(probs[i], generators[row])])
    return tokens


def _candidates(logits: torch.Tensor, params: list[SamplingParams]) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids [rows, width] by descending logit and each row's softmax over them at its
    temperature, zero past its own top k."""
    vocab, device = logits.shape[-1], logits.device
    top_k = [p.top_k if 0 < p.top_k < vocab else vocab for p in params]
    scaled = logits / torch.tensor([[p.temperature] for p in params], dtype=logits.dtype, device=device)
    values, ids = torch.topk(scaled, max(top_k))
    values.masked_fill_(torch.arange(values.shape[-1], device=device) >= torch.tensor(top_k, device=device)[:, None],
                        float("-inf"))
    probs = torch.softmax(values, dim=-1)
    if probs.isnan().any():
        raise ValueError("cannot sample: the logits contain NaN or infinity")
    return ids, probs


def _draw(probs: torch.Tensor, generator: torch.Generator) -> int:
    """argmax of p / q with q ~ Exp(1): an index drawn with probabilities `probs` (torch.multinomial's
    method for one sample)."""
    race = torch.empty_like(probs).exponential_(generator=generator)
    return int(torch.div(probs, race, out=race).argmax())
