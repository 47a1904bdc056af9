"""The rows a talker that reads the conversation (Qwen3-Omni's) takes from a thinker computed on vLLM."""

from __future__ import annotations

import torch

from stages.requests.thinker import ThinkerRequest
from stages.vllm_backend.vllm_api import PromptEmbeds


class TalkerRowSource:
    """Each row the native thinker's runner gives (stages/runners/qwen3_thinker.py), for a thinker on vLLM: the
    input embedding of a text position or a generated token is a row of the thinker's embedding table
    (`embed_table` [vocab, hidden], looked up here), the hidden state after the talker's layer over an audio
    position is tapped out of vLLM (vllm_api.take_rows). A generation's prompt is the whole context: its
    positions from `request.num_computed` on are the new ones."""

    def __init__(self, embed_table: torch.Tensor) -> None:
        self.embed_table = embed_table

    def start(self, request: ThinkerRequest) -> list[int]:
        """Store the rows of the new text positions the request's talker takes; the audio ones are to be
        tapped: return them."""
        context = request.talker_context
        positions = context.positions(request.token_ids, request.num_computed, request.num_known)
        audio = _audio_positions(request)
        text = [p for p in positions if p not in audio]
        if text:
            ids = torch.tensor([request.token_ids[p] for p in text])
            context.store(text, self.embed_table[ids], [False] * len(text))
        return [p for p in positions if p in audio]

    def deliver(self, request: ThinkerRequest, positions: list[int], rows: torch.Tensor) -> None:
        """Tapped rows [n, 1, hidden] of audio positions."""
        request.talker_context.store(positions, rows[:, 0].to(self.embed_table.dtype), [True] * len(positions))

    def token_row(self, token_id: int) -> torch.Tensor:
        return self.embed_table[token_id]


def prompt_embeds(request: ThinkerRequest, hidden_size: int) -> PromptEmbeds | None:
    """The context's input embeddings over its spans (the audio encoder's rows over audio placeholders) as a
    mixed prompt's; None without any."""
    if not request.embed_spans:
        return None
    rows = torch.zeros(request.num_known, hidden_size)
    is_token_id = [True] * request.num_known
    for start, span in request.embed_spans:
        rows[start:start + len(span)] = span
        is_token_id[start:start + len(span)] = [False] * len(span)
    return PromptEmbeds(rows, is_token_id)


def _audio_positions(request: ThinkerRequest) -> set[int]:
    return {start + i for start, span in request.embed_spans for i in range(len(span))}
