"""A history branch for windowed attention: a selective state-space scan (Mamba-1) over what leaves the window.

With a window of W tokens after S sinks, the query at position t attends to [0, S) and [t - W, t]; the
positions in between are gone. A layer with a history branch keeps, per stream, a fixed state h
[state_size, kv_heads * head_dim] that has absorbed every position of [S, t - W) as it left the window,
and adds what the query reads from it to the attention output:

    absorb position p (its value row u, this layer's):  h <- exp(dt * A) * h + B^T (dt * u),
        dt = softplus(dt_proj(u)) per channel, B = b_proj(u), A = -exp(a_log) [state_size, channels]
    read at query t (its normed hidden x):             out_t += out_proj((C h) * silu(z)),
        C = c_proj(x), z = z_proj(x)

This is Mamba-1's selective scan and gated read without its short convolution and skip term (the input
is a row leaving the window, not the query's own). The step's value rows are in the cache when the branch
runs (attention wrote them), and every position a chunk absorbs is still there (it is in the window of the
chunk's first query). Untrained (seeded) parameters make this mechanics only: the branch changes the
outputs without teaching the model anything.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

STATE_SIZE = 16  # Mamba-1's d_state
HISTORY_SEED_OFFSET = 7919  # seeded parameters draw from seed + this, apart from the model's own


@dataclass(frozen=True)
class HistoryBatch:
    """What one step's history branches read and absorb: the queries of `num_seqs` windowed sequences.

    Sequence i absorbs the value rows at `absorb_slots[i, j]` for the j where `absorb_valid[i, j]`
    (in position order, padded at the end); the query at step row `rows[q]` belongs to sequence
    `seq[q]` and reads the state after `absorbed[q]` of them. A sequence's state is the rows
    `state_k[i]` of the K cache then `state_v[i]` of the V cache (flat slots, one row a state row).
    """

    rows: torch.Tensor  # [queries] int64
    seq: torch.Tensor  # [queries] int64
    absorbed: torch.Tensor  # [queries] int64
    absorb_slots: torch.Tensor  # [num_seqs, max_absorbed] int64
    absorb_valid: torch.Tensor  # [num_seqs, max_absorbed] bool
    state_k: torch.Tensor  # [num_seqs, k_rows] int64
    state_v: torch.Tensor  # [num_seqs, state_size - k_rows] int64


def state_blocks(state_size: int, block_size: int) -> int:
    """KV blocks one layer's state takes in every layer's cache (a block holds 2 x block_size rows: K and V)."""
    return -(-state_size // (2 * block_size))


def state_slots(blocks: list[int], state_size: int, block_size: int) -> tuple[list[int], list[int]]:
    """The flat K and V cache rows holding a state in `blocks`: each block's K rows, then its V rows."""
    k_rows, v_rows = [], []
    for row in range(state_size):
        block, offset = divmod(row, 2 * block_size)
        target = k_rows if offset < block_size else v_rows
        target.append(blocks[block] * block_size + offset % block_size)
    return k_rows, v_rows


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
    rows, seq, absorbed, slots, valid, state_k, state_v = [], [], [], [], [], [], []
    for i, chunk in enumerate(chunks):
        first = absorbed_end(chunk.start, tokens, sinks)
        rows += range(chunk.row_start, chunk.row_start + chunk.end - chunk.start)
        seq += [i] * (chunk.end - chunk.start)
        absorbed += [absorbed_end(t, tokens, sinks) - first for t in range(chunk.start, chunk.end)]
        pad = width - len(chunk.absorb_slots)
        slots.append(chunk.absorb_slots + [0] * pad)
        valid.append([True] * len(chunk.absorb_slots) + [False] * pad)
        k_rows, v_rows = state_slots(chunk.state_blocks, state_size, block_size)
        state_k.append(k_rows)
        state_v.append(v_rows)
    long = lambda values: torch.tensor(values, dtype=torch.long)  # noqa: E731
    return HistoryBatch(long(rows), long(seq), long(absorbed), long(slots).view(len(chunks), width),
                        torch.tensor(valid, dtype=torch.bool).view(len(chunks), width),
                        long(state_k).view(len(chunks), -1), long(state_v).view(len(chunks), -1))


class SSMHistory(nn.Module):
    """One attention layer's history branch (see the module docstring); `channels` = kv_heads * head_dim."""

    def __init__(self, hidden_size: int, channels: int, state_size: int = STATE_SIZE) -> None:
        super().__init__()
        self.state_size = state_size
        self.a_log = nn.Parameter(torch.empty(state_size, channels))
        self.dt_proj = nn.Linear(channels, channels)
        self.b_proj = nn.Linear(channels, state_size, bias=False)
        self.c_proj = nn.Linear(hidden_size, state_size, bias=False)
        self.z_proj = nn.Linear(hidden_size, channels, bias=False)
        self.out_proj = nn.Linear(channels, hidden_size, bias=False)

    def seed(self, generator: torch.Generator, std: float) -> None:
        """Mamba-1's initialisation of A (S4D-real: A[n] = -(n + 1)) and of dt (log-uniform in [1e-3, 0.1]
        through the inverse softplus); weights N(0, std)."""
        with torch.no_grad():
            n = torch.arange(1, self.state_size + 1, dtype=torch.float32)[:, None]
            self.a_log.copy_(n.log().expand_as(self.a_log))
            u = torch.rand(self.dt_proj.bias.shape, generator=generator)
            dt = torch.exp(u * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
            self.dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))
            for linear in (self.dt_proj, self.b_proj, self.c_proj, self.z_proj, self.out_proj):
                linear.weight.copy_(torch.randn(linear.weight.shape, generator=generator) * std)

    def forward(self, x: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                batch: HistoryBatch) -> torch.Tensor:
        """x [rows, hidden] (the layer's normed input); caches [blocks, block_size, kv_heads, dim], this step's
        values written. Updates each sequence's state in the caches; returns [queries, hidden] to add at
        `batch.rows`."""
        width = v_cache.shape[2] * v_cache.shape[3]
        keys, values = k_cache.view(-1, width), v_cache.view(-1, width)
        dtype = self.a_log.dtype
        state = torch.cat([keys[batch.state_k], values[batch.state_v]], dim=1).to(dtype)
        u = values[batch.absorb_slots].to(dtype)
        dt = F.softplus(self.dt_proj(u)) * batch.absorb_valid[..., None]  # dt 0: the step keeps the state
        decay = torch.exp(dt[:, :, None, :] * -torch.exp(self.a_log))
        inject = self.b_proj(u)[..., None] * (dt * u)[:, :, None, :]
        states = [state]
        for step in range(u.shape[1]):
            states.append(decay[:, step] * states[-1] + inject[:, step])
        read = torch.stack(states, dim=1)[batch.seq, batch.absorbed]
        queries = x[batch.rows].to(dtype)
        y = torch.einsum("qn,qnc->qc", self.c_proj(queries), read) * F.silu(self.z_proj(queries))
        k_rows = batch.state_k.shape[1]
        keys[batch.state_k] = states[-1][:, :k_rows].to(keys.dtype)
        values[batch.state_v] = states[-1][:, k_rows:].to(values.dtype)
        return self.out_proj(y).to(x.dtype)
