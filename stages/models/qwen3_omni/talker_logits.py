"""The logits processing the reference's generate applies to the talker's code-0 logits: a repetition penalty
over each row's previously generated code-0 ids, then the suppressed special codec ids."""

from __future__ import annotations

import torch

from stages.models.qwen3_omni.config import TalkerConfig

NUM_SPECIAL_CODEC_IDS = 1024  # the top of the talker's vocabulary holds its special ids


def suppressed_codec_ids(config: TalkerConfig) -> list[int]:
    """The ids generate suppresses: the top 1024 of the talker's vocabulary but codec EOS."""
    vocab = config.decoder.vocab_size
    return [i for i in range(max(0, vocab - NUM_SPECIAL_CODEC_IDS), vocab) if i != config.codec_eos_token_id]


def talker_logits(logits: torch.Tensor, generated_code0s: list[list[int]], repetition_penalty: float,
                  suppressed: list[int]) -> torch.Tensor:
    """logits [B, V] -> new logits [B, V]: HF RepetitionPenaltyLogitsProcessor over row b's ids
    `generated_code0s[b]` (a negative score multiplied by the penalty, a positive one divided), then
    SuppressTokensLogitsProcessor (`suppressed` ids at -inf)."""
    out = logits.clone()
    histories = [(row, ids) for row, ids in enumerate(generated_code0s) if ids]
    if histories and repetition_penalty != 1.0:
        width = max(len(ids) for _, ids in histories)
        index = torch.tensor([ids + ids[:1] * (width - len(ids)) for _, ids in histories], device=out.device)
        rows = torch.tensor([row for row, _ in histories], device=out.device)[:, None]
        picked = out[rows, index]
        out[rows, index] = torch.where(picked < 0, picked * repetition_penalty, picked / repetition_penalty)
    if suppressed:
        out[:, torch.tensor(suppressed, device=out.device)] = float("-inf")
    return out
