"""What one step attends to: the decode and prefill rows of a batch, cut into runs over the paged cache
(see attention.py for how they are computed)."""


from __future__ import annotations

from dataclasses import dataclass, fields, is_dataclass, replace
from typing import TYPE_CHECKING, Protocol

import torch

from stages.config import WindowSpec
from stages.models.history import HistoryBatch

if TYPE_CHECKING:
    from stages.models.kernels.triton_paged import TritonPagedPrefill

DECODE_RUN_POSITIONS = 2048  # padded positions per run (~1 MB of float32 keys at 2 x 64 dims)
PREFILL_RUN_TOKENS = 32  # chunks up to this long attend in runs; longer ones on their own


class DecodeKernel(Protocol):
    """Reads decode rows' paged KV in place: kernels/paged_decode (C, float32 on the CPU) or kernels/triton_paged
    (CUDA). Contract: `PagedDecode`'s, in the dtypes each takes."""

    def __call__(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_table: torch.Tensor,
                 lengths: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor: ...

    def write(self, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
              slots: torch.Tensor) -> None: ...


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

    kernel: DecodeKernel
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
class PrefillTable:
    """Every prefill chunk's rows, blocks and context, for `kernel` to attend all at once, reading KV in place:
    chunk i's rows start at row_starts[i], its num_tokens[i] queries end at position context_lens[i]."""

    kernel: TritonPagedPrefill
    block_table: torch.Tensor  # [num_chunks, max_blocks] int64, each row's blocks padded with its first block
    row_starts: torch.Tensor  # [num_chunks] int64
    num_tokens: torch.Tensor  # [num_chunks] int64
    context_lens: torch.Tensor  # [num_chunks] int64
    max_num_tokens: int  # the largest num_tokens, known without reading it back from a device


@dataclass(frozen=True)
class AttentionBatch:
    """Where this step's K/V go and what each query attends to."""

    slot_mapping: torch.Tensor  # [num_rows] flat slot per new token
    num_decodes: int
    decode_runs: list[DecodeRun]  # empty when the decodes attend through `decode_table`
    prefill_runs: list[PrefillRun]
    prefills: list[PrefillSpan]
    decode_table: DecodeTable | None = None
    prefill_table: PrefillTable | None = None  # every chunk, when given: `prefill_runs` and `prefills` are empty
    history: HistoryBatch | None = None  # what the layers' history branches read and absorb (None: no branch)

    def to(self, device: torch.device | str) -> AttentionBatch:
        """A copy with every tensor, its runs' and tables' too, on `device` (non-blocking); `history` as it is
        (its caller moves it)."""
        return replace(self, **{f.name: _moved(getattr(self, f.name), device) for f in fields(self)
                                if f.name != "history"})


def _moved(value, device: torch.device | str):
    """`value` with its tensors on `device`: a tensor, or a list or dataclass of them (other fields as they are)."""
    if isinstance(value, torch.Tensor):
        return value.to(device, non_blocking=True)
    if isinstance(value, list):
        return [_moved(item, device) for item in value]
    if is_dataclass(value):
        return replace(value, **{f.name: _moved(getattr(value, f.name), device) for f in fields(value)})
    return value


def build_attention_batch(
    block_size: int, decodes: list[tuple], prefills: list[tuple], slots: list[int], group: int,
    run_positions: int = DECODE_RUN_POSITIONS, window: WindowSpec | None = None,
    decode_kernel: DecodeKernel | None = None, prefill_kernel: TritonPagedPrefill | None = None,
) -> AttentionBatch:
    """decodes: (block ids, context length); prefills: (block ids, chunk length, context length).

    With a `window`, each tuple also ends with the logical index of each (live) block.
    `group` is query heads per KV head: prefill masks are laid out for grouped rows once
    here, not in every layer. Consecutive decodes share a run while the run pads to at
    most `run_positions` positions (a decode longer than that runs alone), and so do
    consecutive prefill chunks of one length up to PREFILL_RUN_TOKENS. Given a `decode_kernel`
    and no window, decodes are not cut into runs: the kernel reads their blocks in place; so are
    prefill chunks given a `prefill_kernel` and no window.
    """
    decode_table = prefill_table = None
    if window is None and decode_kernel is not None and decodes:
        decode_table = _decode_table(decode_kernel, decodes)
    if window is None and prefill_kernel is not None and prefills:
        prefill_table = _prefill_table(prefill_kernel, len(decodes), prefills)
    decode_runs = _decode_runs(block_size, decodes if decode_table is None else [], run_positions, window)
    runs, spans = _prefill_runs(block_size, len(decodes), prefills if prefill_table is None else [], group,
                                run_positions, window)
    return AttentionBatch(torch.tensor(slots), len(decodes), decode_runs, runs, spans, decode_table, prefill_table)


def _decode_table(kernel: DecodeKernel, decodes: list[tuple]) -> DecodeTable:
    width = max(len(blocks) for blocks, _ in decodes)
    block_table = _padded_block_ids(decodes, width).view(len(decodes), width)
    return DecodeTable(kernel, block_table, torch.tensor([length for _, length in decodes]))


def _prefill_table(kernel: TritonPagedPrefill, row_start: int, prefills: list[tuple]) -> PrefillTable:
    width, num_tokens = max(len(p[0]) for p in prefills), torch.tensor([p[1] for p in prefills])
    block_table = _padded_block_ids(prefills, width).view(len(prefills), width)
    row_starts = num_tokens.cumsum(0) - num_tokens + row_start
    return PrefillTable(kernel, block_table, row_starts, num_tokens, torch.tensor([p[2] for p in prefills]),
                        max(p[1] for p in prefills))


def _prefill_runs(block_size: int, row: int, prefills: list[tuple], group: int, run_positions: int,
                  window: WindowSpec | None) -> tuple[list[PrefillRun], list[PrefillSpan]]:
    """Prefill rows from `row` on: runs of short chunks and spans of long ones (see _prefill_groups)."""
    runs, spans = [], []
    for chunks in _prefill_groups(block_size, prefills, run_positions):
        if chunks[0][1] <= PREFILL_RUN_TOKENS:
            runs.append(_prefill_run(block_size, row, chunks, window))
        else:
            spans.append(_prefill_span(block_size, row, *chunks[0], group=group, window=window))
        row += sum(chunk[1] for chunk in chunks)
    return runs, spans


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
