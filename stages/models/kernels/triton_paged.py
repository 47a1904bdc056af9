"""Paged attention on CUDA in Triton kernels: the GPU counterpart of kernels/paged_decode, for decodes, and one
launch for every prefill chunk of a step. Both read K and V where they lie in the paged cache.

Decode: a program per (row, KV head) scores that KV head's group of query heads against a tile of positions
at a time (a broadcast product, since a group of 2 is below tl.dot's minimum of 16) with an online softmax.
Prefill: a program per (chunk, query head, tile of query tokens) runs flash attention with tl.dot over tiles
of keys up to its last query's position, causally. Both accumulate in float32 and take float32, bfloat16 or
float16. Tested on the CPU in Triton's interpreter (TRITON_INTERPRET=1, set by tests/conftest without CUDA)
against the dense reference the C kernel is tested against; without triton, `load` returns None.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # load() says None; the kernels below stay plain functions
    triton = None

jit = triton.jit if triton is not None else (lambda fn: fn)

LOG2E = 1.4426950408889634  # softmax in base 2: exp(x) = exp2(x * log2(e))
DECODE_PRODUCT = 4096  # query heads x positions x dims a decode program multiplies at once (in registers)
DECODE_TILE = 32  # positions per decode tile at most
PREFILL_TILE = 32  # query tokens and keys per prefill tile (tl.dot needs >= 16)
PREFILL_WARPS = 8  # at tiles of 32 and 128 dims in bfloat16, sm_90 holds a program in registers without spilling
DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@jit
def _kv_offsets(table_row, positions, valid, block_size, kv_head, dims, NUM_KV_HEADS: tl.constexpr,
                HEAD_DIM: tl.constexpr):
    """Offsets [positions, dims] into a cache of one KV head's entries at a sequence's `positions`."""
    blocks = tl.load(table_row + positions // block_size, mask=valid, other=0)
    slots = blocks * block_size + positions % block_size
    return (slots[:, None] * NUM_KV_HEADS + kv_head) * HEAD_DIM + dims[None, :]


@jit
def _decode(q, k_cache, v_cache, block_table, lengths, out, q_row_stride, q_head_stride, out_row_stride,
            out_head_stride, table_stride, block_size, scale, NUM_KV_HEADS: tl.constexpr, GROUP: tl.constexpr,
            HEAD_DIM: tl.constexpr, GROUP_PAD: tl.constexpr, DIM_PAD: tl.constexpr, TILE: tl.constexpr):
    row, kv_head = tl.program_id(0).to(tl.int64), tl.program_id(1)
    heads, dims = kv_head * GROUP + tl.arange(0, GROUP_PAD), tl.arange(0, DIM_PAD)
    in_group, in_dims = tl.arange(0, GROUP_PAD) < GROUP, dims < HEAD_DIM
    own = in_group[:, None] & in_dims[None, :]
    query = tl.load(q + row * q_row_stride + heads[:, None] * q_head_stride + dims[None, :], mask=own, other=0.0)
    query = query.to(tl.float32) * scale
    length = tl.load(lengths + row)
    best = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    total = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, DIM_PAD], tl.float32)
    for start in range(0, length, TILE):
        positions = start + tl.arange(0, TILE)
        valid = positions < length
        offsets = _kv_offsets(block_table + row * table_stride, positions, valid, block_size, kv_head, dims,
                              NUM_KV_HEADS, HEAD_DIM)
        entry = valid[:, None] & in_dims[None, :]
        keys = tl.load(k_cache + offsets, mask=entry, other=0.0).to(tl.float32)
        scores = tl.where(valid[None, :], tl.sum(query[:, None, :] * keys[None, :, :], axis=2), float("-inf"))
        new_best = tl.maximum(best, tl.max(scores, axis=1))
        weights, decay = tl.exp2(scores - new_best[:, None]), tl.exp2(best - new_best)
        values = tl.load(v_cache + offsets, mask=entry, other=0.0).to(tl.float32)
        acc = acc * decay[:, None] + tl.sum(weights[:, :, None] * values[None, :, :], axis=1)
        total, best = total * decay + tl.sum(weights, axis=1), new_best
    result = (acc / total[:, None]).to(out.dtype.element_ty)
    tl.store(out + row * out_row_stride + heads[:, None] * out_head_stride + dims[None, :], result, mask=own)


@jit
def _prefill(q, k_cache, v_cache, block_table, row_starts, num_tokens, context_lens, out, q_row_stride,
             q_head_stride, out_row_stride, out_head_stride, table_stride, block_size, scale,
             NUM_KV_HEADS: tl.constexpr, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, DIM_PAD: tl.constexpr,
             TILE: tl.constexpr):
    chunk, head, first = tl.program_id(0).to(tl.int64), tl.program_id(1), tl.program_id(2) * TILE
    count = tl.load(num_tokens + chunk)
    if first >= count:
        return
    context, kv_head = tl.load(context_lens + chunk), head // GROUP
    tokens, dims = first + tl.arange(0, TILE), tl.arange(0, DIM_PAD)
    query_pos, rows = context - count + tokens, tl.load(row_starts + chunk) + tokens
    in_dims = dims < HEAD_DIM
    own = (tokens < count)[:, None] & in_dims[None, :]
    query = tl.load(q + rows[:, None] * q_row_stride + head * q_head_stride + dims[None, :], mask=own, other=0.0)
    best = tl.full([TILE], float("-inf"), tl.float32)
    total = tl.zeros([TILE], tl.float32)
    acc = tl.zeros([TILE, DIM_PAD], tl.float32)
    for start in range(0, tl.minimum(context, context - count + first + TILE), TILE):  # key 0 in the first tile
        positions = start + tl.arange(0, TILE)
        valid = positions < context
        offsets = _kv_offsets(block_table + chunk * table_stride, positions, valid, block_size, kv_head, dims,
                              NUM_KV_HEADS, HEAD_DIM)
        entry = valid[:, None] & in_dims[None, :]
        keys = tl.load(k_cache + offsets, mask=entry, other=0.0)
        scores = tl.dot(query, tl.trans(keys), input_precision="ieee") * scale
        seen = (positions[None, :] <= query_pos[:, None]) & valid[None, :]
        scores = tl.where(seen, scores, float("-inf"))
        new_best = tl.maximum(best, tl.max(scores, axis=1))
        weights, decay = tl.exp2(scores - new_best[:, None]), tl.exp2(best - new_best)
        values = tl.load(v_cache + offsets, mask=entry, other=0.0)
        acc = tl.dot(weights.to(values.dtype), values, acc * decay[:, None], input_precision="ieee")
        total, best = total * decay + tl.sum(weights, axis=1), new_best
    result = (acc / total[:, None]).to(out.dtype.element_ty)
    tl.store(out + rows[:, None] * out_row_stride + head * out_head_stride + dims[None, :], result, mask=own)


class TritonPagedDecode:
    """`PagedDecode`'s contract (kernels/paged_decode) on CUDA tensors, except that q and the caches are float32,
    bfloat16 or float16, of one dtype; the output is in q's dtype. Any block size, head dim and group."""

    def __call__(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_table: torch.Tensor,
                 lengths: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        q = _checked(q, k_cache, v_cache)
        rows, heads, dim = q.shape
        block_size, kv_heads = k_cache.shape[1:3]
        out = torch.empty_like(q, memory_format=torch.contiguous_format) if out is None else out
        group_pad, dim_pad = triton.next_power_of_2(heads // kv_heads), triton.next_power_of_2(dim)
        tile = max(1, min(DECODE_TILE, DECODE_PRODUCT // (group_pad * dim_pad)))
        _decode[(rows, kv_heads)](q, k_cache, v_cache, block_table, lengths, out, q.stride(0), q.stride(1),
                                  out.stride(0), out.stride(1), block_table.stride(0), block_size,
                                  dim**-0.5 * LOG2E, kv_heads, heads // kv_heads, dim, group_pad, dim_pad, tile)
        return out

    def write(self, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
              slots: torch.Tensor) -> None:
        """k, v [rows, kv_heads, dim] into the caches' flat slots (int64 [rows])."""
        k_cache.view(-1, *k.shape[1:])[slots] = k
        v_cache.view(-1, *v.shape[1:])[slots] = v


class TritonPagedPrefill:
    """Causal attention of a step's prefill chunks over their paged prefix, one launch for all. Chunk i's queries
    are q[row_starts[i] : row_starts[i] + num_tokens[i]], positions [context_lens[i] - num_tokens[i],
    context_lens[i]) of its sequence, whose blocks are `block_table` row i; its K/V are in the caches already.
    Dtypes and layouts as for `TritonPagedDecode`; the metadata int64 [chunks] (the table [chunks, width]),
    `max_num_tokens` their largest num_tokens. Writes the chunks' rows of `out` (given, or a fresh one)."""

    def __call__(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_table: torch.Tensor,
                 row_starts: torch.Tensor, num_tokens: torch.Tensor, context_lens: torch.Tensor, max_num_tokens: int,
                 out: torch.Tensor | None = None) -> torch.Tensor:
        q = _checked(q, k_cache, v_cache)
        heads, dim = q.shape[1:]
        block_size, kv_heads = k_cache.shape[1:3]
        out = torch.empty_like(q, memory_format=torch.contiguous_format) if out is None else out
        grid = (len(row_starts), heads, triton.cdiv(max_num_tokens, PREFILL_TILE))
        _prefill[grid](q, k_cache, v_cache, block_table, row_starts, num_tokens, context_lens, out, q.stride(0),
                       q.stride(1), out.stride(0), out.stride(1), block_table.stride(0), block_size,
                       dim**-0.5 * LOG2E, kv_heads, heads // kv_heads, dim, max(16, triton.next_power_of_2(dim)),
                       PREFILL_TILE, num_warps=PREFILL_WARPS)
        return out


def _checked(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> torch.Tensor:
    """q with unit stride along dims; raises unless q and the caches share one dtype the kernels take."""
    if not (q.dtype == k_cache.dtype == v_cache.dtype and q.dtype in DTYPES):
        raise TypeError(f"triton paged attention takes one of {DTYPES}, got {q.dtype} and {k_cache.dtype} caches")
    return q if q.stride(2) == 1 else q.contiguous()


@dataclass(frozen=True)
class TritonPaged:
    """The kernels a runner computing on CUDA hands to build_attention_batch."""

    decode: TritonPagedDecode
    prefill: TritonPagedPrefill


@functools.cache
def load() -> TritonPaged | None:
    """Both kernels (compiled on first launch), or None where triton cannot be imported."""
    return None if triton is None else TritonPaged(TritonPagedDecode(), TritonPagedPrefill())
