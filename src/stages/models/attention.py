"""Paged attention over a block-structured KV cache, in plain torch ops.

A step's tokens are flattened: first one query token per decoding sequence, then
each prefill chunk's tokens. K/V of the new tokens are written to their cache slots,
then decodes attend in runs of consecutive rows (each run's blocks gathered into
one padded tensor) and each prefill chunk attends on its own with a causal mask
offset by the context already cached.

Decoding is bound by memory traffic: runs are cut so that a run's gathered keys
stay small enough to be read back from the CPU cache, and a long context gets a run
of its own instead of padding every shorter one to its length. Decode rows sorted
by context length pad least.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

DECODE_RUN_POSITIONS = 2048  # padded positions per decode run (~1 MB of float32 keys at 2 x 64 dims)


@dataclass(frozen=True)
class DecodeRun:
    """Decode rows [row_start, row_start + num_rows), attended as one padded batch."""

    row_start: int
    num_rows: int
    block_ids: torch.Tensor  # [num_rows * max_blocks] flat, each row's blocks padded with block 0
    padding: torch.Tensor  # [num_rows, 1, max_blocks * block_size] bool, True beyond the row's context


@dataclass(frozen=True)
class PrefillSpan:
    """Rows [row_start, row_start + num_tokens) of the step are positions [context_len - num_tokens, context_len)."""

    row_start: int
    num_tokens: int
    context_len: int
    block_ids: torch.Tensor  # [num_blocks] covering context_len
    causal_mask: torch.Tensor  # [group * num_tokens, context_len] bool, rows ordered (group, token)


@dataclass(frozen=True)
class AttentionBatch:
    """Where this step's K/V go and what each query attends to."""

    slot_mapping: torch.Tensor  # [num_rows] flat slot per new token
    num_decodes: int
    decode_runs: list[DecodeRun]
    prefills: list[PrefillSpan]


def build_attention_batch(
    block_size: int, decodes: list[tuple[list[int], int]], prefills: list[tuple[list[int], int, int]], slots: list[int],
    group: int, run_positions: int = DECODE_RUN_POSITIONS,
) -> AttentionBatch:
    """decodes: (block ids, context length); prefills: (block ids, chunk length, context length).

    `group` is query heads per KV head: prefill masks are laid out for grouped rows once
    here, not in every layer. Consecutive decodes share a run while the run pads to at
    most `run_positions` positions (a decode longer than that runs alone).
    """
    spans, row = [], len(decodes)
    for blocks, num_tokens, context_len in prefills:
        query_pos = torch.arange(context_len - num_tokens, context_len)[:, None]
        mask = (torch.arange(context_len)[None, :] <= query_pos).repeat(group, 1)
        spans.append(PrefillSpan(row, num_tokens, context_len, torch.tensor(blocks), mask))
        row += num_tokens
    runs = _decode_runs(block_size, decodes, run_positions)
    return AttentionBatch(torch.tensor(slots), len(decodes), runs, spans)


def _decode_runs(block_size: int, decodes: list[tuple[list[int], int]], run_positions: int) -> list[DecodeRun]:
    """Greedy runs of consecutive decodes whose padded size stays within `run_positions`."""
    runs, start = [], 0
    while start < len(decodes):
        end, width = start + 1, len(decodes[start][0])
        while end < len(decodes) and (end + 1 - start) * max(width, len(decodes[end][0])) * block_size <= run_positions:
            width = max(width, len(decodes[end][0]))
            end += 1
        runs.append(_decode_run(block_size, start, decodes[start:end], width))
        start = end
    return runs


def _decode_run(block_size: int, row_start: int, decodes: list[tuple[list[int], int]], width: int) -> DecodeRun:
    block_ids = torch.tensor([blocks + [0] * (width - len(blocks)) for blocks, _ in decodes]).view(-1)
    lengths = torch.tensor([length for _, length in decodes])
    padding = (torch.arange(width * block_size) >= lengths[:, None])[:, None, :]
    return DecodeRun(row_start, len(decodes), block_ids, padding)


def paged_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, batch: AttentionBatch
) -> torch.Tensor:
    """q [rows, heads, dim], k/v [rows, kv_heads, dim]; caches [blocks, block_size, kv_heads, dim].

    Writes k/v into the caches at `batch.slot_mapping`, returns [rows, heads, dim].
    """
    num_kv_heads, head_dim = k.shape[1], k.shape[2]
    k_cache.view(-1, num_kv_heads, head_dim)[batch.slot_mapping] = k
    v_cache.view(-1, num_kv_heads, head_dim)[batch.slot_mapping] = v
    out = torch.empty_like(q)
    if batch.num_decodes:
        n = batch.num_decodes
        out[:n] = _attend_decodes(q[:n], k_cache, v_cache, batch.decode_runs)
    for span in batch.prefills:
        rows = slice(span.row_start, span.row_start + span.num_tokens)
        out[rows] = _attend_prefill(q[rows], k_cache, v_cache, span)
    return out


def _attend_decodes(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, runs: list[DecodeRun]
) -> torch.Tensor:
    """q [n, heads, dim], one query per decoding sequence -> [n, heads, dim].

    Keys are gathered as [positions, kv_heads * dim] rows, so each query head is widened
    to kv_heads * dim with zeros outside its own KV head: one batched matmul then scores
    every head (and one more mixes values, of which each head keeps its own KV head's part).
    """
    num_kv_heads, head_dim = k_cache.shape[2], k_cache.shape[3]
    width = num_kv_heads * head_dim
    wide_q = _widen_heads(q, num_kv_heads, head_dim**-0.5)
    mixed = q.new_empty(wide_q.shape)
    for run in runs:
        rows = slice(run.row_start, run.row_start + run.num_rows)
        keys = k_cache.index_select(0, run.block_ids).view(run.num_rows, -1, width)
        scores = torch.bmm(wide_q[rows], keys.transpose(1, 2)).masked_fill_(run.padding, float("-inf"))
        values = v_cache.index_select(0, run.block_ids).view(run.num_rows, -1, width)
        torch.bmm(torch.softmax(scores, dim=-1), values, out=mixed[rows])
    return _own_heads(mixed, num_kv_heads, head_dim)


def _widen_heads(q: torch.Tensor, num_kv_heads: int, scale: float) -> torch.Tensor:
    """[n, heads, dim] -> [n, heads, kv_heads * dim]: each head scaled, in its KV head's columns, zeros elsewhere."""
    n, num_heads, head_dim = q.shape
    group = num_heads // num_kv_heads
    wide = q.new_zeros(n, num_kv_heads, group, num_kv_heads, head_dim)
    wide.diagonal(dim1=1, dim2=3).copy_(q.view(n, num_kv_heads, group, head_dim).permute(0, 2, 3, 1) * scale)
    return wide.view(n, num_heads, num_kv_heads * head_dim)


def _own_heads(mixed: torch.Tensor, num_kv_heads: int, head_dim: int) -> torch.Tensor:
    """[n, heads, kv_heads * dim] -> [n, heads, dim]: each head's columns of its own KV head."""
    n, num_heads, _ = mixed.shape
    group = num_heads // num_kv_heads
    own = mixed.view(n, num_kv_heads, group, num_kv_heads, head_dim).diagonal(dim1=1, dim2=3)
    return own.permute(0, 3, 1, 2).reshape(n, num_heads, head_dim)


def _attend_prefill(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, span: PrefillSpan) -> torch.Tensor:
    """q [num_tokens, heads, dim] of one chunk against its context, causally; GQA by head grouping."""
    num_tokens, num_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[2]
    group = num_heads // num_kv_heads
    keys, values = (_gather(cache, span.block_ids, span.context_len) for cache in (k_cache, v_cache))
    # Heads sharing a KV head become extra query rows: [1, kvh, group * num_tokens, d].
    grouped = q.view(num_tokens, num_kv_heads, group, head_dim).permute(1, 2, 0, 3)
    grouped = grouped.reshape(1, num_kv_heads, group * num_tokens, head_dim)
    attended = F.scaled_dot_product_attention(grouped, keys, values, attn_mask=span.causal_mask[None, None])
    attended = attended.view(num_kv_heads, group, num_tokens, head_dim).permute(2, 0, 1, 3)
    return attended.reshape(num_tokens, num_heads, head_dim)


def _gather(cache: torch.Tensor, block_ids: torch.Tensor, context_len: int) -> torch.Tensor:
    """[1, kv_heads, context_len, dim] from a sequence's whole blocks (index_select copies blocks as rows)."""
    return cache.index_select(0, block_ids).flatten(0, 1)[:context_len].transpose(0, 1).unsqueeze(0)
