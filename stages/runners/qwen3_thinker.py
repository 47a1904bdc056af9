"""Runner of Qwen3-Omni's thinker: ThinkerRunner's step, plus the rows its talker reads of the context."""

from __future__ import annotations

from typing import Any

import torch

from stages.grammar import ConstraintCompiler
from stages.plan import RunnerOutput, ScheduledChunk, SchedulerPlan
from stages.requests import ThinkerRequest
from stages.requests.thinker import TalkerRows
from stages.runners.decoder import ThinkerRunner


class Qwen3ThinkerRunner(ThinkerRunner):
    """The talker conditions on each generated token's input embedding (the step's row), and on the rows
    of the context positions its rule takes (see TalkerContextRule): a position's input embedding, or over
    an audio placeholder the hidden state after `accept_layer` layers (the reference's
    `hidden_states[accept_hidden_layer]`), computed in the same forward pass. Tool calls are constrained
    as ThinkerRunner constrains them (its logits), with `constraints`."""

    def __init__(self, model: torch.nn.Module, kv, accept_layer: int,
                 constraints: ConstraintCompiler | None = None) -> None:
        super().__init__(model, kv, constraints=constraints)
        self.accept_layer = accept_layer

    @torch.inference_mode()
    def execute(self, plan: SchedulerPlan) -> RunnerOutput:
        chunks = self.ordered(plan)
        embeds = self.embeddings(chunks)
        hidden, accepted = self.model(embeds, self._positions(chunks), self.kv_layers, self._batch(chunks),
                                      capture_layer=self.accept_layer)
        results: dict[str, Any] = self.sampled(chunks, hidden)
        row = 0
        for chunk in chunks:
            taken = self._talker_rows(chunk, row, embeds, accepted)
            if taken is not None:
                results[chunk.request.request_id] = TalkerRows(*taken, results.get(chunk.request.request_id))
            row += chunk.num_tokens
        return RunnerOutput(results)

    @staticmethod
    def _talker_rows(chunk: ScheduledChunk, row: int, embeds: torch.Tensor, accepted: torch.Tensor):
        request: ThinkerRequest = chunk.request
        if request.talker_context is None:
            return None
        positions = request.talker_context.positions(request.token_ids, chunk.start, chunk.end)
        if not positions:
            return None
        is_audio = [any(start <= p < start + len(span) for start, span in request.embed_spans) for p in positions]
        rows = torch.stack([(accepted if audio else embeds)[row + p - chunk.start]
                            for p, audio in zip(positions, is_audio)])
        return positions, rows, is_audio

    def result(self, request: ThinkerRequest, token: int, hidden: torch.Tensor) -> tuple[int, torch.Tensor]:
        return token, self.model.embed(torch.tensor([token], device=hidden.device))[0]
