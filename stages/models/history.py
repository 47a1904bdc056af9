"""A history branch for windowed attention: a selective state-space scan (Mamba-1) over what leaves the window.

With a window of W tokens after S sinks, the query at position t attends to [0, S) and [t - W, t]; the
positions in between are gone. A layer with a history branch keeps, per stream, a fixed state h
[state_size, kv_heads * head_dim] that has absorbed every position of [S, t - W) as it left the window,
and adds what the query reads from it to the attention output:

    absorb position p (its value row u, this layer's):  h <- exp(dt * A) * h + B^T (dt * u),
        (dt_low, B) = x_proj(u), dt = softplus(dt_proj(dt_low)) per channel, A = -exp(a_log) [state_size, channels]
    read at query t (its normed hidden x):             attention_t += C h,  C = c_proj(x)

the read joining the attention output in the values' channels (each query head takes its KV head's
part), before the output projection. This is Mamba-1's selective scan without the block around it
(short convolution, gate, skip term and projections: the input is a value row leaving the window, and
the output projection is the attention's own). The step's value rows are in the cache when the branch
runs (attention wrote them), and every position a chunk absorbs is still there (it is in the window of the
chunk's first query). Untrained (seeded) parameters make this mechanics only: the branch changes the
outputs without teaching the model anything.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F
from torch import nn

from stages.models.kernels.history_scan import HistoryScan

STATE_SIZE = 16  # Mamba-1's d_state
HISTORY_SEED_OFFSET = 7919  # seeded parameters draw from seed + this, apart from the model's own


@dataclass(frozen=True)
class HistoryBatch:
    """What one step's history branches read and absorb: the queries of `num_seqs` windowed sequences.

    Sequence i absorbs the value rows at `absorb_slots[i, j]` for the j where `absorb_valid[i, j]`
    (in position order, padded at the end), which leaves its states 0 (before any) to max_absorbed.
    Its queries are the step rows `rows[query_start[i]:query_start[i + 1]]`, in order; query q reads
    state `absorbed[q]`. A sequence's state is the rows `state_k[i]` of the K cache, then `state_v[i]` of the
    V cache (flat slots, one row a state row).
    """

    rows: torch.Tensor  # [queries] int64, each sequence's in a row
    query_start: torch.Tensor  # [num_seqs + 1] int64: sequence i's queries are [query_start[i], query_start[i + 1])
    absorbed: torch.Tensor  # [queries] int64: the state each query reads
    absorb_slots: torch.Tensor  # [num_seqs, max_absorbed] int64
    absorb_valid: torch.Tensor  # [num_seqs, max_absorbed, 1] bool
    state_k: torch.Tensor  # [num_seqs, k_rows] int64
    state_v: torch.Tensor  # [num_seqs, state_size - k_rows] int64

    def to(self, device: torch.device | str) -> HistoryBatch:
        return HistoryBatch(*(getattr(self, f.name).to(device, non_blocking=True) for f in fields(self)))


def state_blocks(state_size: int, block_size: int) -> int:
    """KV blocks one layer's state takes in every layer's cache (a block holds 2 x block_size rows: K and V)."""
    return -(-state_size // (2 * block_size))


def state_slots(blocks: torch.Tensor, state_size: int, block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The flat K and V cache rows holding the states in `blocks` [num_seqs, state_blocks]: each block's K
    rows, then its V rows ([num_seqs, k_rows] and [num_seqs, state_size - k_rows])."""
    rows = torch.arange(state_size)
    block, offset = rows // (2 * block_size), rows % (2 * block_size)
    slots = blocks[:, block] * block_size + offset % block_size
    in_k = offset < block_size
    return slots[:, in_k], slots[:, ~in_k]


def absorbed_end(position: int, tokens: int, sinks: int) -> int:
    """The state read at query `position` has absorbed positions [sinks, absorbed_end)."""
    return max(sinks, position - tokens)


@dataclass(frozen=True)
class HistoryChunk:
    """One sequence's chunk in a step: its rows start at `row_start`, its queries are positions [start, end),
    it absorbs the value rows at `absorb_slots` (positions [absorbed_end(start), absorbed_end(end))) and
    its state lives in `state_blocks`."""

    row_start: int
    start: int
    end: int
    absorb_slots: list[int]
    state_blocks: list[int]


def build_history_batch(chunks: list[HistoryChunk], tokens: int, sinks: int, state_size: int,
                        block_size: int) -> HistoryBatch:
    """The HistoryBatch of a step's chunks, for a window of `tokens` after `sinks`."""
    width = max(len(chunk.absorb_slots) for chunk in chunks)
    slots = torch.tensor([chunk.absorb_slots + [0] * (width - len(chunk.absorb_slots)) for chunk in chunks],
                         dtype=torch.long).view(len(chunks), width)
    valid = torch.arange(width) < torch.tensor([len(chunk.absorb_slots) for chunk in chunks])[:, None]
    lengths = torch.tensor([chunk.end - chunk.start for chunk in chunks])
    query_start = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
    offsets = torch.arange(int(query_start[-1])) - torch.repeat_interleave(query_start[:-1], lengths)
    starts = torch.repeat_interleave(torch.tensor([chunk.start for chunk in chunks]), lengths)
    row_starts = torch.repeat_interleave(torch.tensor([chunk.row_start for chunk in chunks]), lengths)
    absorbed = (starts + offsets - tokens).clamp(min=sinks) - (starts - tokens).clamp(min=sinks)
    state_k, state_v = state_slots(torch.tensor([chunk.state_blocks for chunk in chunks]), state_size, block_size)
    return HistoryBatch(row_starts + offsets, query_start, absorbed, slots, valid[..., None], state_k, state_v)


class SSMHistory(nn.Module):
    """One attention layer's history branch (see the module docstring); `channels` = kv_heads * head_dim.

    As in Mamba-1, `x_proj` gives the absorbed row's low-rank dt (`dt_rank` = channels / 16) and its B, and
    `dt_proj` widens dt to every channel; `c_proj` gives the query's C. The read is in the values' channels:
    the layer adds each KV head's part to the attention output of its query heads, before `o_proj`.
    """

    def __init__(self, hidden_size: int, channels: int, state_size: int = STATE_SIZE) -> None:
        super().__init__()
        self.state_size, self.dt_rank = state_size, -(-channels // 16)
        self.a_log = nn.Parameter(torch.empty(state_size, channels))
        self.x_proj = nn.Linear(channels, self.dt_rank + state_size, bias=False)
        self.dt_proj = nn.Linear(self.dt_rank, channels)
        self.c_proj = nn.Linear(hidden_size, state_size, bias=False)
        self.kernel: HistoryScan | None = None  # see use_scan_kernel

    def seed(self, generator: torch.Generator, std: float) -> None:
        """Mamba-1's initialisation of A (S4D-real: A[n] = -(n + 1)) and of dt (log-uniform in [1e-3, 0.1]
        through the inverse softplus); weights N(0, std)."""
        with torch.no_grad():
            n = torch.arange(1, self.state_size + 1, dtype=torch.float32)[:, None]
            self.a_log.copy_(n.log().expand_as(self.a_log))
            u = torch.rand(self.dt_proj.bias.shape, generator=generator)
            dt = torch.exp(u * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
            self.dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))
            for linear in (self.x_proj, self.dt_proj, self.c_proj):
                linear.weight.copy_(torch.randn(linear.weight.shape, generator=generator) * std)

    def forward(self, x: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                batch: HistoryBatch) -> torch.Tensor:
        """x [rows, hidden] (the layer's normed input); caches [blocks, block_size, kv_heads, dim], this step's
        values written. Updates each sequence's state in the caches; returns the reads [queries, channels] of
        the queries at `batch.rows`: in C with `kernel` (a HistoryScan, on float32 caches), else in torch."""
        width, dtype = v_cache.shape[2] * v_cache.shape[3], self.a_log.dtype
        u = v_cache.view(-1, width)[batch.absorb_slots].to(dtype)
        dt_b = self.x_proj(u)
        dt = F.softplus(self.dt_proj(dt_b[..., : self.dt_rank])) * batch.absorb_valid  # dt 0: the state stays
        b, a, du = dt_b[..., self.dt_rank :], -torch.exp(self.a_log), dt * u
        c = self.c_proj(x.index_select(0, batch.rows).to(dtype))
        if self.kernel is not None:
            return self.kernel(k_cache, v_cache, batch.state_k, batch.state_v, dt, b, du, a, c, batch.query_start,
                               batch.absorbed).to(x.dtype)
        return self._scan(k_cache.view(-1, width), v_cache.view(-1, width), batch, dt, b, du, a, c).to(x.dtype)

    @staticmethod
    def _scan(keys: torch.Tensor, values: torch.Tensor, batch: HistoryBatch, dt: torch.Tensor, b: torch.Tensor,
              du: torch.Tensor, a: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        """The kernel's work in torch: each state read by its queries, then updated, step by step."""
        k_rows, c, steps = batch.state_k.shape[1], c.unsqueeze(1), dt.shape[1]
        read = c.new_empty(len(c), values.shape[1])
        counts = batch.query_start.diff()
        seqs = torch.repeat_interleave(torch.arange(len(counts), device=counts.device), counts)
        state = torch.cat([keys[batch.state_k], values[batch.state_v]], dim=1).to(c.dtype)
        for step in range(steps + 1):
            queries = (batch.absorbed == step).nonzero().squeeze(1)
            if len(queries):
                read[queries] = torch.bmm(c[queries], state[seqs[queries]]).squeeze(1)
            if step < steps:
                decay = torch.exp(dt[:, step, None] * a)
                state = torch.addcmul(b[:, step, :, None] * du[:, step, None], decay, state)
        keys[batch.state_k] = state[:, :k_rows].to(keys.dtype)
        values[batch.state_v] = state[:, k_rows:].to(values.dtype)
        return read


def use_scan_kernel(model: nn.Module, kernel: HistoryScan | None) -> None:
    """Every history branch in `model` scans with `kernel` from now on (None: in torch)."""
    for module in model.modules():
        if isinstance(module, SSMHistory):
            module.kernel = kernel
