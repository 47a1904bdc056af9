"""What one step attends to: the decode and prefill rows of a batch, cut into runs over the paged cache
(see attention.py for how they are computed)."""


from __future__ import annotations

from dataclasses import dataclass

import torch

from stages.config import WindowSpec
from stages.models.history import HistoryBatch
from stages.models.kernels.paged_decode import PagedDecode

DECODE_RUN_POSITIONS = 2048  # padded positions per run (~1 MB of float32 keys at 2 x 64 dims)
PREFILL_RUN_TOKENS = 32  # chunks up to this long attend in runs; longer ones on their own


@dataclass(frozen=True)
class DecodeRun:
    """Decode rows [row_start, row_start + num_rows), attended as one padded batch."""

    row_start: int
    num_rows: int
    block_ids: torch.Tensor  # [num_rows * max_blocks] flat, each row's blocks padded with its first block
    padding: torch.Tensor  # [num_rows, 1, max_blocks * block_size] bool, True where the row's query may not look


@dataclass(frozen=True)
class DecodeTable:
    """Every decode row's blocks and context length, for `kernel` to read its KV in place."""

    kernel: PagedDecode
    block_table: torch.Tensor  # [num_decodes, max_blocks] int64, each row's blocks padded with its first block
    lengths: torch.Tensor  # [num_decodes] int64


@dataclass(frozen=True)
class PrefillRun:
    """Rows [row_start, row_start + num_seqs * num_tokens) are chunks of `num_tokens` each, attended as
    one padded batch."""

    row_start: int
    num_seqs: int
    num_tokens: int
    block_ids: torch.Tensor  # [num_seqs * max_blocks] flat, each sequence's blocks padded with its first block
    excluded: torch.Tensor  # [num_seqs, num_tokens, 1, max_blocks * block_size] bool, True where a query may not look


@dataclass(frozen=True)
class PrefillSpan:
    """Rows [row_start, row_start + num_tokens) of the step are a chunk's last positions; its keys are
    the first `num_keys` positions of its gathered blocks."""

    row_start: int
    num_tokens: int
    num_keys: int
    block_ids: torch.Tensor  # [num_blocks]
    causal_mask: torch.Tensor  # [group * num_tokens, num_keys] bool, True where a query looks; rows (group, token)


@dataclass(frozen=True)
class AttentionBatch:
    """Where this step's K/V go and what each query attends to."""

    slot_mapping: torch.Tensor  # [num_rows] flat slot per new token
    num_decodes: int
    decode_runs: list[DecodeRun]  # empty when the decodes attend through `decode_table`
    prefill_runs: list[PrefillRun]
    prefills: list[PrefillSpan]
    decode_table: DecodeTable | None = None
    history: HistoryBatch | None = None  # what the layers' history branches read and absorb (None: no branch)


def build_attention_batch(
    block_size: int, decodes: list[tuple], prefills: list[tuple], slots: list[int], group: int,
    run_positions: int = DECODE_RUN_POSITIONS, window: WindowSpec | None = None,
    decode_kernel: PagedDecode | None = None,
) -> AttentionBatch:
    """decodes: (block ids, context length); prefills: (block ids, chunk length, context length).

    With a `window`, each tuple also ends with the logical index of each (live) block.
    `group` is query heads per KV head: prefill masks are laid out for grouped rows once
    here, not in every layer. Consecutive decodes share a run while the run pads to at
    most `run_positions` positions (a decode longer than that runs alone), and so do
    consecutive prefill chunks of one length up to PREFILL_RUN_TOKENS. Given a `decode_kernel`
    and no window, decodes are not cut into runs: the kernel reads their blocks in place.
    """
    runs, spans, row = [], [], len(decodes)
    for chunks in _prefill_groups(block_size, prefills, run_positions):
        if chunks[0][1] <= PREFILL_RUN_TOKENS:
            runs.append(_prefill_run(block_size, row, chunks, window))
        else:
            spans.append(_prefill_span(block_size, row, *chunks[0], group=group, window=window))
        row += sum(chunk[1] for chunk in chunks)
    if decode_kernel is not None and window is None and decodes:
        table = _decode_table(decode_kernel, decodes)
        return AttentionBatch(torch.tensor(slots), len(decodes), [], runs, spans, table)
    decode_runs = _decode_runs(block_size, decodes, run_positions, window)
    return AttentionBatch(torch.tensor(slots), len(decodes), decode_runs, runs, spans)


def _decode_table(kernel: PagedDecode, decodes: list[tuple]) -> DecodeTable:
    width = max(len(blocks) for blocks, _ in decodes)
    block_table = _padded_block_ids(decodes, width).view(len(decodes), width)
    return DecodeTable(kernel, block_table, torch.tensor([length for _, length in decodes]))


def _prefill_groups(block_size: int, prefills: list[tuple], run_positions: int) -> list[list[tuple]]:
    """Consecutive short chunks of one length while their padded keys stay within `run_positions`; a long
    chunk alone."""
    groups: list[list[tuple]] = []
    width = 0  # blocks of the widest chunk in the last group
    for prefill in prefills:
        last = groups[-1] if groups else None
        if last is not None and prefill[1] == last[0][1] <= PREFILL_RUN_TOKENS:
            wider = max(width, len(prefill[0]))
            if (len(last) + 1) * wider * block_size <= run_positions:
                last.append(prefill)
                width = wider
                continue
        groups.append([prefill])
        width = len(prefill[0])
    return groups


def _prefill_run(block_size: int, row_start: int, prefills: list[tuple], window: WindowSpec | None) -> PrefillRun:
    width, num_tokens = max(len(p[0]) for p in prefills), prefills[0][1]
    block_ids = _padded_block_ids(prefills, width)
    ends = torch.tensor([p[2] for p in prefills])
    queries = (ends[:, None] - num_tokens + torch.arange(num_tokens))[:, :, None]
    if window is None:
        excluded = torch.arange(width * block_size) > queries  # padding lies past the chunk
    else:
        excluded = _excluded(_key_positions(block_size, [p[3] for p in prefills])[:, None, :], queries, window)
    return PrefillRun(row_start, len(prefills), num_tokens, block_ids, excluded[:, :, None, :])


def _prefill_span(block_size: int, row_start: int, blocks: list[int], num_tokens: int, context_len: int,
                  *logical: list[int], group: int, window: WindowSpec | None) -> PrefillSpan:
    query_pos = torch.arange(context_len - num_tokens, context_len)[:, None]
    if window is None:
        num_keys, mask = context_len, torch.arange(context_len)[None, :] <= query_pos
    else:
        keys = _key_positions(block_size, list(logical))[0]
        keys = keys[keys < context_len]  # the last block's slots past the chunk hold nothing
        num_keys, mask = len(keys), ~_excluded(keys[None, :], query_pos, window)
    return PrefillSpan(row_start, num_tokens, num_keys, torch.tensor(blocks), mask.repeat(group, 1))


def _padded_block_ids(rows: list[tuple], width: int) -> torch.Tensor:
    """[len(rows) * width] flat: each row's block ids (its first item), padded with its own first block."""
    return torch.tensor([blocks + blocks[:1] * (width - len(blocks)) for blocks, *_ in rows]).view(-1)


def _key_positions(block_size: int, logical: list[list[int]]) -> torch.Tensor:
    """[rows, width * block_size]: the position each gathered key slot of each row holds, from its blocks'
    logical indices (a padded row's extra slots lie past any query)."""
    width = max(len(ids) for ids in logical)
    padded = torch.tensor([ids + [_PAST_ANY_QUERY] * (width - len(ids)) for ids in logical])
    return (padded[:, :, None] * block_size + torch.arange(block_size)).flatten(1)


_PAST_ANY_QUERY = 1 << 40  # a logical block index beyond every position


def _excluded(keys: torch.Tensor, queries: torch.Tensor, window: WindowSpec) -> torch.Tensor:
    """True where a query position may not look at a key position (broadcast): after it, or between
    the sinks and its window."""
    return (keys > queries) | ((keys >= window.sinks) & (keys < queries - window.tokens))


def _decode_runs(block_size: int, decodes: list[tuple], run_positions: int,
                 window: WindowSpec | None) -> list[DecodeRun]:
    """Greedy runs of consecutive decodes whose padded size stays within `run_positions`."""
    runs, start = [], 0
    while start < len(decodes):
        end, width = start + 1, len(decodes[start][0])
        while end < len(decodes) and (end + 1 - start) * max(width, len(decodes[end][0])) * block_size <= run_positions:
            width = max(width, len(decodes[end][0]))
            end += 1
        runs.append(_decode_run(block_size, start, decodes[start:end], width, window))
        start = end
    return runs


def _decode_run(block_size: int, row_start: int, decodes: list[tuple], width: int,
                window: WindowSpec | None) -> DecodeRun:
    block_ids = _padded_block_ids(decodes, width)
    lengths = torch.tensor([decode[1] for decode in decodes])
    if window is None:
        padding = torch.arange(width * block_size) >= lengths[:, None]
    else:
        keys = _key_positions(block_size, [logical for *_, logical in decodes])
        padding = _excluded(keys, lengths[:, None] - 1, window)
    return DecodeRun(row_start, len(decodes), block_ids, padding[:, None, :])
