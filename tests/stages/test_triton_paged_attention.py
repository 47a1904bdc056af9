"""The Triton paged attention kernels (kernels/triton_paged) against the dense float64 reference and the gathered
path, on the cases the C decode kernel is tested on (test_paged_attention). Without CUDA they run in Triton's
interpreter on the CPU (tests/conftest sets TRITON_INTERPRET=1); one test compiles them for sm_90 all the same."""

import os
import subprocess
import sys
from dataclasses import fields, is_dataclass, replace
from pathlib import Path

import pytest
import torch

from kvtier import blocks_for
from stages.config import WindowSpec
from stages.models.attention import paged_attention
from stages.models.attention_batch import build_attention_batch
from stages.models.kernels import triton_paged
from tests.stages.test_paged_attention import HEAD_DIM, KV_HEADS, SCENARIOS, run_step

triton = pytest.importorskip("triton")
KERNELS = triton_paged.load()
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # on the CPU, the interpreter runs the kernels
pytestmark = pytest.mark.usefixtures("triton_interpreter")


class OnDevice:
    """A kernel taking run_step's CPU tensors: it runs on DEVICE, and what it writes (out, caches) comes back."""

    def __init__(self, kernel) -> None:
        self.kernel, self.calls = kernel, 0

    def __call__(self, *args, out: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        moved = out.to(DEVICE)
        self.kernel(*(a.to(DEVICE) if isinstance(a, torch.Tensor) else a for a in args), out=moved)
        return out.copy_(moved)

    def write(self, k, v, k_cache, v_cache, slots) -> None:
        caches = k_cache.to(DEVICE), v_cache.to(DEVICE)
        self.kernel.write(k.to(DEVICE), v.to(DEVICE), *caches, slots.to(DEVICE))
        k_cache.copy_(caches[0])
        v_cache.copy_(caches[1])


@pytest.fixture
def kernels() -> dict:
    return {"decode_kernel": OnDevice(KERNELS.decode), "prefill_kernel": OnDevice(KERNELS.prefill)}


@pytest.mark.parametrize("block_size", [1, 3, 4, 16])
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_scenario_read_in_place_by_the_triton_kernels_equals_the_dense_reference(scenario, block_size, kernels):
    seqs = SCENARIOS[scenario]
    out, ref, k_cache, slots_by_seq = run_step(seqs, block_size, torch.float32, **kernels)
    torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=1e-5)
    for slots, k_new in slots_by_seq:  # the decode kernel (or, without decodes, the batch) wrote the step's keys
        torch.testing.assert_close(k_cache.view(-1, KV_HEADS, HEAD_DIM)[slots].double(), k_new, atol=1e-6, rtol=1e-6)
    assert kernels["decode_kernel"].calls == any(new == 1 for _, new in seqs)
    assert kernels["prefill_kernel"].calls == any(new > 1 for _, new in seqs)


def test_a_chunk_longer_than_a_tile_of_queries_and_of_keys(kernels):
    out, ref, *_ = run_step([(3, 1), (30, 40), (0, 33)], 16, torch.float32, **kernels)  # 40 queries over 70 keys
    torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=1e-5)


def test_rows_ending_mid_block_read_none_of_the_garbage_past_them(kernels):
    # run_step fills every slot with garbage 100 times the values' scale: one read past a row's length (the rest
    # of its last block) or in a block not its own shows as a large error
    out, ref, *_ = run_step([(16, 1), (20, 1), (32, 1), (0, 1), (7, 10), (40, 5)], 16, torch.float32, **kernels)
    torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype, tol", [(torch.bfloat16, 3e-2), (torch.float16, 5e-3)])
@pytest.mark.parametrize("scenario", ["mixed_decodes_and_two_chunks", "a_chunk_too_long_for_a_run"])
def test_half_precision_stays_within_its_rounding_of_the_reference(scenario, dtype, tol, kernels):
    out, ref, *_ = run_step(SCENARIOS[scenario], 4, dtype, **kernels)
    assert out.dtype == dtype
    torch.testing.assert_close(out.double(), ref, atol=tol, rtol=tol)


@pytest.mark.parametrize("head_dim", [64, 128, 24])  # model sizes, and one padded to a power of two
def test_the_kernels_equal_gathered_attention_at_model_head_sizes(head_dim, kernels):
    gen = torch.Generator().manual_seed(head_dim)
    heads, kv_heads, block_size = 6, 2, 16  # a group of 3 query heads, padded to 4
    k_cache, v_cache = (torch.randn(64, block_size, kv_heads, head_dim, generator=gen) for _ in range(2))
    free = torch.randperm(64, generator=gen).tolist()
    seqs = [(0, 1), (14, 1), (15, 1), (16, 1), (299, 1), (25, 20), (0, 3)]  # (cached, new), decodes first
    blocks = [[free.pop() for _ in range(blocks_for(cached + new, block_size))] for cached, new in seqs]
    decodes = [(ids, cached + 1) for ids, (cached, new) in zip(blocks, seqs) if new == 1]
    prefills = [(ids, new, cached + new) for ids, (cached, new) in zip(blocks, seqs) if new > 1]
    slots = [ids[p // block_size] * block_size + p % block_size
             for ids, (cached, new) in zip(blocks, seqs) for p in range(cached, cached + new)]
    q, k, v = (torch.randn(len(slots), h, head_dim, generator=gen) for h in (heads, kv_heads, kv_heads))
    outs = [paged_attention(q, k, v, k_cache.clone(), v_cache.clone(),
                            build_attention_batch(block_size, decodes, prefills, slots, heads // kv_heads, **given))
            for given in ({}, kernels)]
    torch.testing.assert_close(outs[1], outs[0], atol=1e-5, rtol=1e-5)


def test_the_kernels_read_q_from_the_columns_of_a_fused_projection():
    gen = torch.Generator().manual_seed(9)
    heads, kv_heads, dim, block_size = 6, 2, 64, 16
    fused = torch.randn(5, (heads + 2 * kv_heads) * dim, generator=gen).to(DEVICE)
    q = fused[:, : heads * dim].view(5, heads, dim)  # rows strided by the whole projection
    k_cache, v_cache = (torch.randn(6, block_size, kv_heads, dim, generator=gen).to(DEVICE) for _ in range(2))
    table, lengths = torch.tensor([[0, 1], [2, 3], [4, 5]]).to(DEVICE), torch.tensor([20, 1, 32]).to(DEVICE)
    chunks = [torch.tensor(values).to(DEVICE) for values in ([[0, 1], [4, 5]], [0, 3], [3, 2], [20, 32])]
    outs = [(KERNELS.decode(queries[:3], k_cache, v_cache, table, lengths),
             KERNELS.prefill(queries, k_cache, v_cache, *chunks, 3)) for queries in (q, q.contiguous())]
    assert all(torch.equal(strided, contiguous) for strided, contiguous in zip(*outs))


BLOCK_SIZE, DECODES = 4, [([6, 7], 5), ([15], 2)]
PREFILLS = [([0, 1], 4, 7), ([2], 4, 4), ([3, 4, 5, 8, 9, 10, 11, 12, 13, 14], 33, 40)]  # two in a run, one alone
SLOTS = list(range(2 + 4 + 4 + 33))


def test_prefill_chunks_go_to_one_table_and_a_window_still_gathers():
    given = {"decode_kernel": KERNELS.decode, "prefill_kernel": KERNELS.prefill}
    table = build_attention_batch(BLOCK_SIZE, DECODES, PREFILLS, SLOTS, 2, **given).prefill_table
    assert table.row_starts.tolist() == [2, 6, 10] and table.num_tokens.tolist() == [4, 4, 33]
    assert table.context_lens.tolist() == [7, 4, 40] and table.max_num_tokens == 33
    assert table.block_table[:2].tolist() == [[0, 1] + [0] * 8, [2] * 10]  # padded with their first block
    logical = [(*d, list(range(len(d[0])))) for d in DECODES], [(*p, list(range(len(p[0])))) for p in PREFILLS]
    windowed = build_attention_batch(BLOCK_SIZE, *logical, SLOTS, 2, window=WindowSpec(tokens=64), **given)
    assert windowed.prefill_table is None and windowed.decode_table is None
    assert len(windowed.prefill_runs) == 1 and len(windowed.prefills) == 1


def tensors(value) -> list[torch.Tensor]:
    """Every tensor in a batch, its runs and its tables (not its history)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, list):
        return [t for item in value for t in tensors(item)]
    if is_dataclass(value):
        return [t for f in fields(value) if f.name != "history" for t in tensors(getattr(value, f.name))]
    return []


@pytest.mark.parametrize("given", [{}, {"decode_kernel": KERNELS.decode, "prefill_kernel": KERNELS.prefill}])
def test_a_batch_moves_every_tensor_to_the_device_and_leaves_its_history(given):
    batch = build_attention_batch(BLOCK_SIZE, DECODES, PREFILLS, SLOTS, 2, **given)
    history = object()  # the caller moves it
    moved = replace(batch, history=history).to("meta")
    assert len(tensors(moved)) == len(tensors(batch)) >= 6
    assert all(t.device.type == "meta" for t in tensors(moved)) and moved.history is history


def test_the_kernels_refuse_what_they_cannot_read():
    q, cache = torch.zeros(1, 4, 8, dtype=torch.float64), torch.zeros(2, 4, 2, 8, dtype=torch.float64)
    table, lengths = torch.zeros(1, 1, dtype=torch.long), torch.ones(1, dtype=torch.long)
    with pytest.raises(TypeError, match="float32"):
        KERNELS.decode(q, cache, cache, table, lengths)
    with pytest.raises(TypeError, match="float32"):  # one dtype for q and the caches
        KERNELS.prefill(q.float(), cache.bfloat16(), cache.bfloat16(), table, lengths - 1, lengths, lengths, 1)


COMPILE_FOR_SM90 = """
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, compile
from stages.models.kernels.triton_paged import DECODE_TILE, PREFILL_TILE, PREFILL_WARPS, _decode, _prefill

def kind(name, dtype, constants):
    if name in constants:
        return "constexpr"
    if name in ("q", "k_cache", "v_cache", "out"):
        return "*" + dtype
    return "fp32" if name == "scale" else "i32" if name.endswith("stride") or name == "block_size" else "*i64"

for dtype in ("bf16", "fp32"):
    for group, dim in ((3, 24), (2, 128)):
        shape = {"NUM_KV_HEADS": 2, "GROUP": group, "HEAD_DIM": dim, "DIM_PAD": max(16, 1 << (dim - 1).bit_length())}
        decode = {"GROUP_PAD": 1 << (group - 1).bit_length(), "TILE": DECODE_TILE}
        for kernel, constants, warps in ((_decode, decode, 4), (_prefill, {"TILE": PREFILL_TILE}, PREFILL_WARPS)):
            constants = shape | constants
            signature = {name: kind(name, dtype, constants) for name in kernel.arg_names}
            compile(ASTSource(kernel, signature, constants), GPUTarget("cuda", 90, 32), {"num_warps": warps})
"""


def test_the_kernels_compile_for_sm90_without_a_gpu(tmp_path):
    env = {name: value for name, value in os.environ.items() if name != "TRITON_INTERPRET"}
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", COMPILE_FOR_SM90], cwd=root, capture_output=True, text=True,
                          env=env | {"TRITON_CACHE_DIR": str(tmp_path)}, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
