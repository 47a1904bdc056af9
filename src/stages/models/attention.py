"""Paged attention over a block-structured KV cache, in plain torch ops.

A step's tokens are flattened: first one query token per decoding sequence, then
each prefill chunk's tokens. K/V of the new tokens are written to their cache slots,
then decodes attend as one padded batch and each prefill chunk attends on its own
with a causal mask offset by the context already cached.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


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
    decode_block_ids: torch.Tensor | None  # [num_decodes, max_blocks]
    decode_mask: torch.Tensor | None  # [num_decodes, 1, 1, max_blocks * block_size] bool
    prefills: list[PrefillSpan]


def build_attention_batch(
    block_size: int, decodes: list[tuple[list[int], int]], prefills: list[tuple[list[int], int, int]], slots: list[int],
    group: int,
) -> AttentionBatch:
    """decodes: (block ids, context length); prefills: (block ids, chunk length, context length).

    `group` is query heads per KV head: prefill masks are laid out for grouped rows once
    here, not in every layer.
    """
    decode_blocks = decode_mask = None
    if decodes:
        width = max(len(blocks) for blocks, _ in decodes)
        decode_blocks = torch.tensor([blocks + [0] * (width - len(blocks)) for blocks, _ in decodes])
        lengths = torch.tensor([length for _, length in decodes])
        decode_mask = (torch.arange(width * block_size) < lengths[:, None])[:, None, None, :]
    spans, row = [], len(decodes)
    for blocks, num_tokens, context_len in prefills:
        query_pos = torch.arange(context_len - num_tokens, context_len)[:, None]
        mask = (torch.arange(context_len)[None, :] <= query_pos).repeat(group, 1)
        spans.append(PrefillSpan(row, num_tokens, context_len, torch.tensor(blocks), mask))
        row += num_tokens
    return AttentionBatch(torch.tensor(slots), len(decodes), decode_blocks, decode_mask, spans)


def paged_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, batch: AttentionBatch
) -> torch.Tensor:
    """q [rows, heads, dim], k/v [rows, kv_heads, dim]; caches [blocks, block_size, kv_heads, dim].

    Writes k/v into the caches at `batch.slot_mapping`, returns [rows, heads, dim].
    Decode masks [n, 1, 1, L] broadcast over the grouped query rows.
    """
    num_kv_heads, head_dim = k.shape[1], k.shape[2]
    k_cache.view(-1, num_kv_heads, head_dim)[batch.slot_mapping] = k
    v_cache.view(-1, num_kv_heads, head_dim)[batch.slot_mapping] = v
    out = torch.empty_like(q)
    if batch.num_decodes:
        n = batch.num_decodes
        out[:n] = _attend(q[:n].unsqueeze(1), k_cache, v_cache, batch.decode_block_ids, batch.decode_mask)[:, 0]
    for span in batch.prefills:
        rows = slice(span.row_start, span.row_start + span.num_tokens)
        mask = span.causal_mask[None, None]
        out[rows] = _attend(q[rows].unsqueeze(0), k_cache, v_cache, span.block_ids[None], mask, span.context_len)[0]
    return out


def _attend(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_ids: torch.Tensor, mask: torch.Tensor,
    context_len: int | None = None,
) -> torch.Tensor:
    """q [batch, q_len, heads, dim] against the blocks of each batch row; GQA by head grouping."""
    batch, q_len, num_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[2]
    group = num_heads // num_kv_heads
    keys, values = _gather(k_cache, block_ids, context_len), _gather(v_cache, block_ids, context_len)
    # Heads sharing a KV head become extra query rows: [b, kvh, group * q_len, d].
    grouped = q.view(batch, q_len, num_kv_heads, group, head_dim).permute(0, 2, 3, 1, 4)
    grouped = grouped.reshape(batch, num_kv_heads, group * q_len, head_dim)
    attended = F.scaled_dot_product_attention(grouped, keys, values, attn_mask=mask)
    attended = attended.view(batch, num_kv_heads, group, q_len, head_dim).permute(0, 3, 1, 2, 4)
    return attended.reshape(batch, q_len, num_heads, head_dim)


def _gather(cache: torch.Tensor, block_ids: torch.Tensor, context_len: int | None) -> torch.Tensor:
    """[batch, kv_heads, positions, dim] from whole blocks (index_select copies blocks as rows)."""
    blocks = cache.index_select(0, block_ids.flatten()).view(*block_ids.shape, *cache.shape[1:])
    return blocks.flatten(1, 2)[:, :context_len].transpose(1, 2)
