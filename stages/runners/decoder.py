"""Runners for the autoregressive stages (thinker, talker) over paged KV."""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import replace
from typing import Any

import torch

from kvtier import KVCacheManager, blocks_for
from stages.config import WindowSpec
from stages.grammar import ConstraintCompiler, masked_logits
from stages.models.attention_batch import build_attention_batch
from stages.models.history import (
    STATE_SIZE,
    HistoryBatch,
    HistoryChunk,
    absorbed_end,
    build_history_batch,
    use_scan_kernel,
)
from stages.models.kernels import history_scan, layer_ops, paged_decode, triton_paged
from stages.models.llama import use_layer_ops
from stages.plan import RunnerOutput, ScheduledChunk, SchedulerPlan
from stages.requests import TalkerRequest, ThinkerRequest
from stages.runners.base import ModelRunner
from stages.sampling import sample


def paged_kernels(device: torch.device, dtype: torch.dtype) -> tuple:
    """The kernels that read paged KV in place on `device` in `dtype`: (decode, prefill), None where attention
    gathers. On the CPU in float32 the C decode kernel; on a GPU the Triton ones."""
    if device.type == "cpu":
        return paged_decode.load() if dtype == torch.float32 else None, None
    kernels = triton_paged.load()
    return (None, None) if kernels is None else (kernels.decode, kernels.prefill)


class DecoderRunner(ModelRunner):
    """Flattens the plan's chunks (single-token chunks first, batched as decodes, shortest
    context first so that decode attention pads least), runs the decoder once, and
    samples at the last row of every chunk whose request wants a sample there.
    With a `window`, attention sees each sequence's live blocks only (see attention), and with its
    history branch each layer reads and updates each sequence's state (see models/history). On the CPU in
    float32 the model computes with the C kernels (models/kernels) where they build; on a GPU (the KV pool's
    device) attention without a window reads the paged KV with the Triton kernels (kernels/triton_paged), and
    a step's inputs and tables are built on the CPU and moved there.
    Subclasses say how inputs embed and what a result is.
    """

    def __init__(self, model: torch.nn.Module, kv: KVCacheManager, window: WindowSpec | None = None) -> None:
        self.model = model.eval()
        self.kv = kv
        self.window = window
        decoder = getattr(model.config, "decoder", model.config)
        self.group = decoder.num_heads // decoder.num_kv_heads
        self.kv_layers = [kv.cache.layer(i) for i in range(kv.config.num_layers)]
        self.device = torch.device(kv.config.device)
        on_cpu_float32 = kv.config.torch_dtype == torch.float32 and self.device.type == "cpu"
        self.decode_kernel, self.prefill_kernel = paged_kernels(self.device, kv.config.torch_dtype)
        if on_cpu_float32:
            use_layer_ops(model, layer_ops.load())
            if window is not None and window.history is not None:
                use_scan_kernel(model, history_scan.load())

    @abstractmethod
    def embeddings(self, chunks: list[ScheduledChunk]) -> torch.Tensor:
        """Input embeddings of every chunk's positions, concatenated in order."""

    @abstractmethod
    def result(self, request: Any, token: int, hidden: torch.Tensor) -> Any:
        """What `request.advance` receives for a sampled token."""

    @torch.inference_mode()
    def execute(self, plan: SchedulerPlan) -> RunnerOutput:
        chunks = self.ordered(plan)
        hidden = self.model(self.embeddings(chunks), self._positions(chunks), self.kv_layers, self._batch(chunks))
        return RunnerOutput(self.sampled(chunks, hidden))

    @staticmethod
    def ordered(plan: SchedulerPlan) -> list[ScheduledChunk]:
        """The plan's chunks in the order their rows are laid out."""
        return sorted(plan.chunks, key=lambda c: (c.num_tokens != 1, c.end))

    def sampled(self, chunks: list[ScheduledChunk], hidden: torch.Tensor) -> dict[str, Any]:
        """Per request that samples at its chunk's end, the result for its sampled token."""
        samplers, rows, row = [], [], 0
        for chunk in chunks:
            row += chunk.num_tokens
            if chunk.request.wants_sample(chunk.end):
                samplers.append(chunk.request)
                rows.append(row - 1)
        if not samplers:
            return {}
        last_hidden = hidden[rows]
        tokens = sample(self.logits(last_hidden, samplers), [r.sampling for r in samplers],
                        [r.generator for r in samplers])
        return {r.request_id: self.result(r, token, last_hidden[i])
                for i, (r, token) in enumerate(zip(samplers, tokens))}

    def logits(self, hidden: torch.Tensor, requests: list) -> torch.Tensor:
        """The logits `requests` sample from, one row of `hidden` each."""
        return self.model.logits(hidden)

    def _positions(self, chunks: list[ScheduledChunk]) -> torch.Tensor:
        if all(c.num_tokens == 1 for c in chunks):
            return torch.tensor([c.start for c in chunks], device=self.device)
        return torch.cat([torch.arange(c.start, c.end) for c in chunks]).to(self.device)

    def _batch(self, chunks: list[ScheduledChunk]):
        size = self.kv.block_size
        decodes, prefills, slots = [], [], []
        for chunk in chunks:
            seq = chunk.request.request_id
            if self.window is None:
                blocks = (self.kv.table(seq).block_ids[: blocks_for(chunk.end, size)],)
            else:
                blocks = self.kv.live_blocks(seq, chunk.end)  # (ids, logical indices)
            slots.extend(self.kv.slot_ids(seq, chunk.start, chunk.end))
            if chunk.num_tokens == 1:
                decodes.append((blocks[0], chunk.end, *blocks[1:]))
            else:
                prefills.append((blocks[0], chunk.num_tokens, chunk.end, *blocks[1:]))
        batch = build_attention_batch(size, decodes, prefills, slots, self.group, window=self.window,
                                      decode_kernel=self.decode_kernel, prefill_kernel=self.prefill_kernel)
        if self.window is not None and self.window.history is not None:
            batch = replace(batch, history=self._history(chunks).to(self.device))
        return batch if self.device.type == "cpu" else batch.to(self.device)

    def _history(self, chunks: list[ScheduledChunk]) -> HistoryBatch:
        """What each chunk's history branch absorbs (the positions that leave its window) and reads."""
        tokens, sinks, row, history = self.window.tokens, self.window.sinks, 0, []
        for chunk in chunks:
            seq = chunk.request.request_id
            first, last = absorbed_end(chunk.start, tokens, sinks), absorbed_end(chunk.end, tokens, sinks)
            absorbed = self.kv.slot_ids(seq, first, last)
            history.append(HistoryChunk(row, chunk.start, chunk.end, absorbed, self.kv.state_blocks(seq)))
            row += chunk.num_tokens
        return build_history_batch(history, tokens, sinks, STATE_SIZE, self.kv.block_size)


class ThinkerRunner(DecoderRunner):
    """Text tokens (and encoder embeddings over audio placeholders) in; a token and its hidden state out.
    The requests it is attached to get its `constraints` (None: it constrains no turn), and a constrained
    generation samples from logits its matcher masks."""

    def __init__(self, model: torch.nn.Module, kv: KVCacheManager, window: WindowSpec | None = None,
                 constraints: ConstraintCompiler | None = None) -> None:
        super().__init__(model, kv, window)
        self.constraints = constraints

    def attach(self, request: ThinkerRequest) -> None:
        request.compiler = self.constraints

    def logits(self, hidden: torch.Tensor, requests: list[ThinkerRequest]) -> torch.Tensor:
        return masked_logits(self.model.logits(hidden), [r.matcher for r in requests])

    def embeddings(self, chunks: list[ScheduledChunk]) -> torch.Tensor:
        ids = [t for c in chunks for t in c.request.token_ids[c.start : c.end]]
        rows = self.model.embed(torch.tensor(ids, dtype=torch.long, device=self.device))
        offset = 0
        for chunk in chunks:
            request: ThinkerRequest = chunk.request
            for span_start, span in reversed(request.embed_spans):  # in position order: stop before the chunk
                if span_start + len(span) <= chunk.start:
                    break
                lo, hi = max(chunk.start, span_start), min(chunk.end, span_start + len(span))
                if lo < hi:
                    rows[offset + lo - chunk.start : offset + hi - chunk.start] = span[lo - span_start : hi - span_start]
            offset += chunk.num_tokens
        return rows

    def result(self, request: ThinkerRequest, token: int, hidden: torch.Tensor) -> tuple[int, torch.Tensor]:
        return token, hidden.clone()


class TalkerRunner(DecoderRunner):
    """Previous codec frame plus the thinker condition in; the next codec frame out."""

    def embeddings(self, chunks: list[ScheduledChunk]) -> torch.Tensor:
        prev, conds = [], []
        for chunk in chunks:
            request: TalkerRequest = chunk.request
            chunk_prev, chunk_conds = request.inputs(chunk.start, chunk.end)
            prev.extend(chunk_prev)
            conds.append(chunk_conds)
        return self.model.input_embeddings(prev, torch.cat(conds))

    def result(self, request: TalkerRequest, token: int, hidden: torch.Tensor) -> int:
        return token
