"""Paged attention over a block-structured KV cache, in plain torch ops.

A step's tokens are flattened: first one query token per decoding sequence, then
each prefill chunk's tokens. K/V of the new tokens are written to their cache slots,
then decodes attend in runs of consecutive rows (each run's blocks gathered into
one padded tensor). Short prefill chunks of equal length (a duplex tick's frames)
attend in runs the same way, with a causal mask per row; a longer chunk attends on
its own with a causal mask offset by the context already cached.

Decoding is bound by memory traffic. Decodes without a window, given a kernel that
reads paged KV in place (kernels/paged_decode on the CPU, kernels/triton_paged on CUDA),
attend through it, all at once; so do prefill chunks given the Triton prefill kernel.
Otherwise runs are cut so that a run's gathered keys stay small enough to be read
back from the CPU cache, and a long context gets a run of its own instead of padding
every shorter one to its length. Decode rows sorted by context length pad least.

With a window (tokens W, sinks S) a query at position t attends to positions [0, S)
and [t - W, t]. A sequence's blocks are then its live ones only, each with its
logical index, and masks are built from the logical positions they hold. Only
live blocks are ever gathered (a run pads a row with its own first block), so
whatever freed blocks hold never reaches the output.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from stages.models.attention_batch import AttentionBatch, DecodeRun, PrefillRun, PrefillSpan


def paged_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, batch: AttentionBatch
) -> torch.Tensor:
    """q [rows, heads, dim], k/v [rows, kv_heads, dim]; caches [blocks, block_size, kv_heads, dim].

    Writes k/v into the caches at `batch.slot_mapping`, returns [rows, heads, dim].
    """
    out, table, n = q.new_empty(q.shape), batch.decode_table, batch.num_decodes
    if table is not None:  # the kernel writes the step's K/V too
        table.kernel.write(k, v, k_cache, v_cache, batch.slot_mapping)
        table.kernel(q[:n], k_cache, v_cache, table.block_table, table.lengths, out=out[:n])
    else:
        num_kv_heads, head_dim = k.shape[1], k.shape[2]
        k_cache.view(-1, num_kv_heads, head_dim)[batch.slot_mapping] = k
        v_cache.view(-1, num_kv_heads, head_dim)[batch.slot_mapping] = v
        if n:
            out[:n] = _attend_decodes(q[:n], k_cache, v_cache, batch.decode_runs)
    if (chunks := batch.prefill_table) is not None:
        chunks.kernel(q, k_cache, v_cache, chunks.block_table, chunks.row_starts, chunks.num_tokens,
                      chunks.context_lens, chunks.max_num_tokens, out=out)
    for run in batch.prefill_runs:
        rows = slice(run.row_start, run.row_start + run.num_seqs * run.num_tokens)
        out[rows] = _attend_prefill_run(q[rows], k_cache, v_cache, run)
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
    wide_q = _widen_heads(q, num_kv_heads, head_dim**-0.5)
    mixed = q.new_empty(wide_q.shape)
    for run in runs:
        rows = slice(run.row_start, run.row_start + run.num_rows)
        _attend_gathered(wide_q[rows], k_cache, v_cache, run.block_ids, run.padding[:, None], out=mixed[rows])
    return _own_heads(mixed, num_kv_heads, head_dim)


def _attend_gathered(wide_q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_ids: torch.Tensor,
                     excluded: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """wide_q [n, tokens * heads, kv_heads * dim] of n sequences against their gathered blocks
    (`block_ids` [n * width]); `excluded` [n, tokens, 1, positions] masks keys per query token."""
    n, _, width = wide_q.shape
    keys = k_cache.index_select(0, block_ids).view(n, -1, width)
    scores = torch.bmm(wide_q, keys.transpose(1, 2))
    scores.view(n, excluded.shape[1], -1, scores.shape[-1]).masked_fill_(excluded, float("-inf"))
    values = v_cache.index_select(0, block_ids).view(n, -1, width)
    return torch.bmm(torch.softmax(scores, dim=-1), values, out=out)


def _attend_prefill_run(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, run: PrefillRun) -> torch.Tensor:
    """q [num_seqs * num_tokens, heads, dim] -> the same shape; heads widened as for decodes, each
    sequence's token rows against its gathered keys."""
    num_heads, (num_kv_heads, head_dim) = q.shape[1], k_cache.shape[2:]
    width = num_kv_heads * head_dim
    wide_q = _widen_heads(q, num_kv_heads, head_dim**-0.5).view(run.num_seqs, run.num_tokens * num_heads, width)
    mixed = _attend_gathered(wide_q, k_cache, v_cache, run.block_ids, run.excluded)
    return _own_heads(mixed.view(-1, num_heads, width), num_kv_heads, head_dim)


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
    keys, values = (_gather(cache, span.block_ids, span.num_keys) for cache in (k_cache, v_cache))
    # Heads sharing a KV head become extra query rows: [1, kvh, group * num_tokens, d].
    grouped = q.view(num_tokens, num_kv_heads, group, head_dim).permute(1, 2, 0, 3)
    grouped = grouped.reshape(1, num_kv_heads, group * num_tokens, head_dim)
    attended = F.scaled_dot_product_attention(grouped, keys, values, attn_mask=span.causal_mask[None, None])
    attended = attended.view(num_kv_heads, group, num_tokens, head_dim).permute(2, 0, 1, 3)
    return attended.reshape(num_tokens, num_heads, head_dim)


def _gather(cache: torch.Tensor, block_ids: torch.Tensor, num_keys: int) -> torch.Tensor:
    """[1, kv_heads, num_keys, dim] from a sequence's whole blocks (index_select copies blocks as rows)."""
    return cache.index_select(0, block_ids).flatten(0, 1)[:num_keys].transpose(0, 1).unsqueeze(0)
