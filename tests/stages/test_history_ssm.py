"""The SSM history branch, in torch and in C, against a float64 sequential reference: any chunking, several
sequences a step."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from stages.models.history import (
    HistoryChunk,
    SSMHistory,
    absorbed_end,
    build_history_batch,
    state_blocks,
    state_slots,
)
from stages.models.kernels import history_scan
from stages.models.kernels.history_scan import HistoryScan

HIDDEN, KV_HEADS, HEAD_DIM = 24, 2, 4
CHANNELS = KV_HEADS * HEAD_DIM


SCAN = history_scan.load()
KERNELS = [pytest.param(None, id="torch"),
           pytest.param(SCAN, id="c", marks=pytest.mark.skipif(SCAN is None, reason="no C compiler"))]


def make_branch(kernel: HistoryScan | None = None, seed: int = 0) -> SSMHistory:
    branch = SSMHistory(HIDDEN, CHANNELS)
    branch.seed(torch.Generator().manual_seed(seed), std=0.3)
    branch.kernel = kernel
    return branch


def reference(branch: SSMHistory, x: torch.Tensor, values: torch.Tensor, tokens: int, sinks: int) -> torch.Tensor:
    """x [T, hidden], values [T, channels] -> what the branch reads at each position, one position at a time,
    in float64."""
    p = {name: t.detach().double() for name, t in branch.state_dict().items()}
    a = -p["a_log"].exp()
    h = torch.zeros(branch.state_size, CHANNELS, dtype=torch.float64)
    out = []
    for t in range(len(x)):
        leaving = t - tokens - 1
        if leaving >= sinks:
            u = values[leaving].double()
            dt_b = p["x_proj.weight"] @ u
            dt = F.softplus(p["dt_proj.weight"] @ dt_b[: branch.dt_rank] + p["dt_proj.bias"])
            h = torch.exp(dt * a) * h + torch.outer(dt_b[branch.dt_rank :], dt * u)
        out.append((p["c_proj.weight"] @ x[t].double()) @ h)
    return torch.stack(out)


class Streams:
    """Sequences whose position p lives at flat slot `base + p` of the cache, each with its state blocks."""

    def __init__(self, lengths: list[int], block_size: int, state_size: int) -> None:
        self.block_size, self.state_size = block_size, state_size
        self.bases, self.states, next_block = [], [], 0
        for length in lengths:
            blocks = -(-length // block_size)
            self.bases.append(next_block * block_size)
            self.states.append(list(range(next_block + blocks, next_block + blocks + state_blocks(state_size,
                                                                                              block_size))))
            next_block += blocks + len(self.states[-1])
        shape = (next_block, block_size, KV_HEADS, HEAD_DIM)
        self.k_cache, self.v_cache = torch.zeros(shape), torch.zeros(shape)

    def step(self, branch: SSMHistory, x: torch.Tensor, values: list[torch.Tensor], spans: list[tuple[int, int, int]],
             tokens: int, sinks: int) -> torch.Tensor:
        """One step: (sequence, start, end) per chunk, rows laid out in that order; returns the added rows."""
        flat_v = self.v_cache.view(-1, CHANNELS)
        chunks, row = [], 0
        for i, start, end in spans:
            base = self.bases[i]
            flat_v[base + start : base + end] = values[i][start:end]  # as attention writes them
            first, last = absorbed_end(start, tokens, sinks), absorbed_end(end, tokens, sinks)
            chunks.append(HistoryChunk(row, start, end, list(range(base + first, base + last)), self.states[i]))
            row += end - start
        batch = build_history_batch(chunks, tokens, sinks, self.state_size, self.block_size)
        with torch.inference_mode():  # as the runner computes
            return branch(x, self.k_cache, self.v_cache, batch)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("block_size", [4, 16])  # a state over K and V rows of two blocks, and in one block's K rows
@pytest.mark.parametrize("tokens, sinks", [(5, 0), (6, 3)])
def test_chunked_streams_in_one_batch_match_the_sequential_reference(kernel, block_size, tokens, sinks):
    torch.manual_seed(0)
    branch = make_branch(kernel)
    lengths, cuts = [40, 33], [[0, 1, 9, 10, 11, 23, 24, 40], [0, 17, 18, 19, 33]]
    xs = [torch.randn(n, HIDDEN) for n in lengths]
    values = [torch.randn(n, CHANNELS) for n in lengths]
    streams = Streams(lengths, block_size, branch.state_size)
    got = [[] for _ in lengths]
    for step in range(max(len(c) for c in cuts) - 1):
        spans = [(i, c[step], c[step + 1]) for i, c in enumerate(cuts) if step + 1 < len(c)]
        x = torch.cat([xs[i][start:end] for i, start, end in spans])
        added, row = streams.step(branch, x, values, spans, tokens, sinks), 0
        for i, start, end in spans:
            got[i].append(added[row : row + end - start])
            row += end - start
    for i in range(len(lengths)):
        expected = reference(branch, xs[i], values[i], tokens, sinks)
        torch.testing.assert_close(torch.cat(got[i]).double(), expected, atol=1e-6, rtol=1e-4)
        assert expected[tokens + sinks + 1 :].abs().max() > 1e-3  # the history reaches the output


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_whole_pass_and_token_by_token_leave_the_same_state(kernel):
    torch.manual_seed(1)
    branch, n, tokens, sinks = make_branch(kernel), 30, 4, 2
    x, values = torch.randn(n, HIDDEN), torch.randn(n, CHANNELS)
    whole, single = Streams([n], 16, 16), Streams([n], 16, 16)
    whole.step(branch, x, [values], [(0, 0, n)], tokens, sinks)
    for t in range(n):
        single.step(branch, x[t : t + 1], [values], [(0, t, t + 1)], tokens, sinks)
    k_rows, _ = state_slots(torch.tensor([whole.states[0]]), 16, 16)
    state = lambda s: s.k_cache.view(-1, CHANNELS)[k_rows[0]]  # noqa: E731
    torch.testing.assert_close(state(whole), state(single))
    assert state(whole).abs().sum() > 0


def test_state_slots_fill_each_blocks_k_rows_then_its_v_rows():
    assert state_blocks(16, 16) == 1 and state_blocks(16, 4) == 2 and state_blocks(17, 8) == 2
    k_rows, v_rows = state_slots(torch.tensor([[3], [1]]), 4, 16)
    assert k_rows.tolist() == [[48, 49, 50, 51], [16, 17, 18, 19]] and v_rows.shape == (2, 0)
    k_rows, v_rows = state_slots(torch.tensor([[5, 2]]), 8, 2)
    assert k_rows.tolist() == [[10, 11, 4, 5]] and v_rows.tolist() == [[10, 11, 4, 5]]
