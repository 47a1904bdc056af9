"""Paged attention against dense attention over the same KV: the batched path, the decode kernel (its build
and threads), and greedy runs through the scheduler (just over 300 lines: one module for the attention)."""

import math

import pytest
import torch

from kvtier import KVCacheManager, KVPoolConfig, blocks_for
from stages.config import SamplingParams, SchedulerConfig, WindowSpec
from stages.models.attention import paged_attention
from stages.models.attention_batch import DECODE_RUN_POSITIONS, build_attention_batch
from stages.models.decoder_config import DecoderConfig
from stages.models.kernels import build, paged_decode
from stages.models.llama import LlamaForCausalLM
from stages.models.talker import TalkerConfig, TalkerModel
from stages.models.weights import init_deterministic
from stages.plan import RunnerOutput
from stages.requests import TalkerRequest, ThinkerRequest, TurnInput
from stages.runners.decoder import TalkerRunner, ThinkerRunner
from stages.scheduler import Scheduler
from tests.stages.dense_decoder import dense_hidden

HEADS, KV_HEADS, HEAD_DIM = 4, 2, 8


# ---------------------------------------------------------------- paged attention vs a dense float64 reference

def dense_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: range) -> torch.Tensor:
    """float64 attention of query rows at `positions` over keys 0..position (GQA by repeat_interleave)."""
    group = q.shape[1] // k.shape[1]
    k, v = k.double().repeat_interleave(group, dim=1), v.double().repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q.double(), k) / math.sqrt(q.shape[-1])
    causal = torch.tensor([[key <= p for key in range(k.shape[0])] for p in positions])
    scores = scores.masked_fill(~causal, float("-inf"))
    return torch.einsum("hqk,khd->qhd", scores.softmax(-1), v)


def run_step(seqs: list[tuple[int, int]], block_size: int, dtype: torch.dtype, seed: int = 0,
             run_positions: int = DECODE_RUN_POSITIONS, decode_kernel=None, prefill_kernel=None):
    """Each seq (num_cached, num_new): cache its first positions, run its new ones in one paged step
    (decodes read in place by `decode_kernel`, or attended in runs padded to at most `run_positions` positions).

    Returns (paged output, reference output, k cache, expected k rows by slot).
    """
    gen = torch.Generator().manual_seed(seed)
    rand = lambda *shape: torch.randn(*shape, generator=gen, dtype=torch.float64)  # noqa: E731
    num_blocks = sum(blocks_for(c + n, block_size) for c, n in seqs) + 3
    # Garbage everywhere: reading a block that is not the sequence's shows up as a large error.
    k_cache = (100 * rand(num_blocks, block_size, KV_HEADS, HEAD_DIM)).to(dtype)
    v_cache = (100 * rand(num_blocks, block_size, KV_HEADS, HEAD_DIM)).to(dtype)
    free = torch.randperm(num_blocks, generator=gen).tolist()  # shuffled: paging must follow the tables
    flat_k, flat_v = k_cache.view(-1, KV_HEADS, HEAD_DIM), v_cache.view(-1, KV_HEADS, HEAD_DIM)
    decodes, prefills, decode_rows, prefill_rows, slots_by_seq = [], [], [], [], []
    for num_cached, num_new in seqs:
        total = num_cached + num_new
        blocks = [free.pop() for _ in range(blocks_for(total, block_size))]
        slots = [blocks[p // block_size] * block_size + p % block_size for p in range(total)]
        q, k, v = rand(num_new, HEADS, HEAD_DIM), rand(total, KV_HEADS, HEAD_DIM), rand(total, KV_HEADS, HEAD_DIM)
        flat_k[slots[:num_cached]], flat_v[slots[:num_cached]] = k[:num_cached].to(dtype), v[:num_cached].to(dtype)
        ref = dense_reference(q, k, v, range(num_cached, total))
        new = (q, k[num_cached:], v[num_cached:], slots[num_cached:], ref)
        if num_new == 1:
            decodes.append((blocks, total))
            decode_rows.append(new)
        else:
            prefills.append((blocks, num_new, total))
            prefill_rows.append(new)
        slots_by_seq.append((slots[num_cached:], k[num_cached:]))
    rows = decode_rows + prefill_rows  # decodes first, then prefill chunks
    q, k, v = (torch.cat([r[i] for r in rows]).to(dtype) for i in range(3))
    batch = build_attention_batch(block_size, decodes, prefills, [s for r in rows for s in r[3]], HEADS // KV_HEADS,
                                  run_positions, decode_kernel=decode_kernel, prefill_kernel=prefill_kernel)
    out = paged_attention(q, k, v, k_cache, v_cache, batch)
    return out, torch.cat([r[4] for r in rows]), k_cache, slots_by_seq


SCENARIOS = {
    "single_prefill": [(0, 7)],
    "chunk_after_cached_context": [(5, 6)],
    "decodes_of_different_lengths": [(0, 1), (3, 1), (8, 1), (12, 1)],
    "mixed_decodes_and_two_chunks": [(3, 1), (10, 1), (0, 5), (6, 4)],
    "chunks_of_one_length_share_runs": [(3, 1), (0, 4), (10, 4), (6, 4), (21, 4), (2, 5)],
    "a_chunk_too_long_for_a_run": [(4, 1), (0, 40), (7, 3)],
}


@pytest.mark.parametrize("run_positions", [DECODE_RUN_POSITIONS, 24, 1])  # all decodes in one run, some, one each
@pytest.mark.parametrize("block_size", [1, 3, 4])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_paged_attention_equals_dense_reference(scenario, block_size, dtype, run_positions):
    out, ref, k_cache, slots_by_seq = run_step(SCENARIOS[scenario], block_size, dtype, run_positions=run_positions)
    tol = 1e-5 if dtype is torch.float32 else 1e-10
    torch.testing.assert_close(out.double(), ref, atol=tol, rtol=tol)
    for slots, k_new in slots_by_seq:  # this step's keys were written to their slots
        torch.testing.assert_close(k_cache.view(-1, KV_HEADS, HEAD_DIM)[slots].double(), k_new, atol=tol, rtol=tol)


@pytest.fixture
def kernel():
    loaded = paged_decode.load()
    if loaded is None:
        pytest.skip("no C compiler: decode attention gathers")
    return loaded


@pytest.mark.parametrize("block_size", [1, 3, 4, 16])
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_decodes_read_in_place_by_the_kernel_equal_the_dense_reference(scenario, block_size, kernel):
    out, ref, k_cache, slots_by_seq = run_step(SCENARIOS[scenario], block_size, torch.float32, decode_kernel=kernel)
    torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=1e-5)
    for slots, k_new in slots_by_seq:  # the kernel wrote this step's keys to their slots
        torch.testing.assert_close(k_cache.view(-1, KV_HEADS, HEAD_DIM)[slots].double(), k_new, atol=1e-6, rtol=1e-6)


def test_the_kernel_reads_and_writes_the_columns_of_a_fused_projection_in_place(kernel):
    gen = torch.Generator().manual_seed(9)
    heads, kv_heads, dim, block_size = 6, 2, 64, 16
    q, k, v = torch.randn(3, (heads + 2 * kv_heads) * dim, generator=gen).split(
        [heads * dim, kv_heads * dim, kv_heads * dim], dim=-1)
    q, k, v = q.reshape(3, heads, dim), k.reshape(3, kv_heads, dim), v.reshape(3, kv_heads, dim)
    table, lengths, slots = torch.tensor([[0, 1], [2, 3], [4, 5]]), torch.tensor([20, 1, 32]), torch.tensor([19, 32, 95])
    outs = []
    for qs, ks, vs in ((q, k, v), (q.contiguous(), k.contiguous(), v.contiguous())):
        k_cache, v_cache = (torch.randn(6, block_size, kv_heads, dim, generator=torch.Generator().manual_seed(1))
                            for _ in range(2))
        kernel.write(ks, vs, k_cache, v_cache, slots)
        outs.append((kernel(qs, k_cache, v_cache, table, lengths), k_cache, v_cache))
    assert all(torch.equal(a, b) for a, b in zip(*outs))
    assert torch.equal(outs[0][2].view(-1, kv_heads, dim)[slots], v)


@pytest.mark.parametrize("head_dim", [64, 128, 24])  # the kernel's two unrolled sizes, and the general loop
def test_the_kernel_equals_gathered_attention_at_model_head_sizes(head_dim, kernel):
    gen = torch.Generator().manual_seed(head_dim)
    heads, kv_heads, block_size, lengths = 6, 2, 16, [1, 15, 16, 17, 300]
    k_cache, v_cache = (torch.randn(64, block_size, kv_heads, head_dim, generator=gen) for _ in range(2))
    shuffled = torch.randperm(64, generator=gen).tolist()
    decodes = [([shuffled.pop() for _ in range(blocks_for(n, block_size))], n) for n in lengths]
    q, k, v = (torch.randn(len(lengths), h, head_dim, generator=gen) for h in (heads, kv_heads, kv_heads))
    slots = [blocks[(n - 1) // block_size] * block_size + (n - 1) % block_size for blocks, n in decodes]
    outs = [paged_attention(q, k, v, k_cache.clone(), v_cache.clone(),
                            build_attention_batch(block_size, decodes, [], slots, heads // kv_heads, decode_kernel=kern))
            for kern in (None, kernel)]
    torch.testing.assert_close(outs[1], outs[0], atol=1e-5, rtol=1e-5)


def test_the_kernel_shares_the_sequences_among_the_callers_torch_threads_with_the_same_result(kernel):
    gen = torch.Generator().manual_seed(3)
    heads, kv_heads, dim, block_size, lengths = 6, 2, 64, 16, [1, 40, 300, 17, 5, 129, 64]
    k_cache, v_cache = (torch.randn(160, block_size, kv_heads, dim, generator=gen) for _ in range(2))
    width = max(blocks_for(n, block_size) for n in lengths)
    table = torch.randperm(160, generator=gen)[: len(lengths) * width].view(len(lengths), width).contiguous()
    q = torch.randn(len(lengths), heads, dim, generator=gen)
    threads = torch.get_num_threads()
    outs = []
    try:
        for count in (1, 2, 3, 8):  # at 8, fewer rows than threads: a unit is one KV head, not a row's heads
            torch.set_num_threads(count)
            outs.append(kernel(q, k_cache, v_cache, table, torch.tensor(lengths)))
    finally:
        torch.set_num_threads(threads)
    assert all(torch.equal(out, outs[0]) for out in outs[1:])  # each pair's sums in the same order


def test_a_compiler_without_openmp_still_builds_the_kernel(monkeypatch, tmp_path, caplog):
    monkeypatch.setattr(build, "CACHE_DIR", tmp_path)
    monkeypatch.setattr(build, "OPENMP", "-fno-such-option")
    loaded = paged_decode.load.__wrapped__()
    if loaded is None:
        pytest.skip("no C compiler: decode attention gathers")
    assert "runs on one thread" in caplog.text
    q, cache = torch.ones(1, 4, 8), torch.ones(2, 4, 2, 8)
    out = loaded(q, cache, cache, torch.zeros(1, 1, dtype=torch.long), torch.full((1,), 3, dtype=torch.long))
    assert torch.equal(out, torch.ones(1, 4, 8))  # equal values: the weighted sum of ones


def test_the_kernel_takes_every_decode_at_once_and_a_window_still_gathers(kernel):
    decodes = [([4, 2], 7, [0, 1]), ([3], 1, [0]), ([0, 5, 1], 12, [0, 1, 2])]
    batch = build_attention_batch(4, [d[:2] for d in decodes], [], [0, 1, 2], 2, decode_kernel=kernel)
    assert batch.decode_runs == [] and batch.decode_table.lengths.tolist() == [7, 1, 12]
    assert batch.decode_table.block_table.tolist() == [[4, 2, 4], [3, 3, 3], [0, 5, 1]]  # padded with the first
    windowed = build_attention_batch(4, decodes, [], [0, 1, 2], 2, window=WindowSpec(tokens=4, sinks=2),
                                     decode_kernel=kernel)
    assert windowed.decode_table is None and len(windowed.decode_runs) == 1


def test_the_kernel_refuses_what_it_cannot_read(kernel):
    q, cache = torch.zeros(1, 4, 8, dtype=torch.float64), torch.zeros(2, 4, 2, 8, dtype=torch.float64)
    with pytest.raises(TypeError, match="float32"):
        kernel(q, cache, cache, torch.zeros(1, 1, dtype=torch.long), torch.ones(1, dtype=torch.long))


def test_loading_the_kernel_leaves_the_process_floats_alone(kernel):
    # a library built with -ffast-math would flush denormals to zero in every op of the process
    assert (torch.tensor([1e-40]) * 1.0).item() > 0.0


def test_without_a_compiler_there_is_no_kernel_and_decoding_gathers(monkeypatch, caplog):
    monkeypatch.setattr(build.shutil, "which", lambda name: None)
    assert paged_decode.load.__wrapped__() is None
    assert "no C compiler" in caplog.text


def test_short_chunks_of_one_length_attend_in_runs_and_a_long_chunk_alone():
    prefills = [([0, 1], 4, 7), ([2], 4, 4), ([3, 4, 5], 4, 10), ([6], 3, 3), ([7, 8, 9], 33, 40)]
    batch = build_attention_batch(4, [], prefills, list(range(48)), HEADS // KV_HEADS)
    assert [(r.row_start, r.num_seqs, r.num_tokens) for r in batch.prefill_runs] == [(0, 3, 4), (12, 1, 3)]
    assert [(s.row_start, s.num_tokens) for s in batch.prefills] == [(15, 33)]
    assert batch.prefill_runs[0].excluded.shape == (3, 4, 1, 12)  # padded to the widest: 3 blocks of 4


# ---------------------------------------------------------------- end to end: paged generation == dense generation

def tiny_decoder(vocab_size: int, hidden_size: int = 64) -> DecoderConfig:
    return DecoderConfig(vocab_size=vocab_size, hidden_size=hidden_size, num_layers=2, num_heads=4, num_kv_heads=2,
                         head_dim=16, intermediate_size=128, max_position=256)


def kv_for(config: DecoderConfig, num_blocks: int, block_size: int = 4) -> KVCacheManager:
    return KVCacheManager(KVPoolConfig(num_blocks=num_blocks, num_layers=config.num_layers,
                                       num_kv_heads=config.num_kv_heads, head_dim=config.head_dim,
                                       block_size=block_size))


def drive(scheduler: Scheduler, runner, max_steps: int = 500) -> dict[str, list]:
    """Run rounds until no request is left; collect every payload per request."""
    payloads: dict[str, list] = {}
    for _ in range(max_steps):
        if not scheduler.requests:
            return payloads
        plan = scheduler.schedule()
        scheduler.check_integrity()
        output = runner.execute(plan) if plan.chunks else RunnerOutput({})
        for out in scheduler.update_from_output(plan, output):
            assert out.error is None, out.error
            if out.payload is not None:
                payloads.setdefault(out.request_id, []).append(out.payload)
        scheduler.check_integrity()
    raise AssertionError("requests did not finish")


PROMPTS = {"a": [5, 17, 42, 8, 99, 3, 250, 61, 7, 12, 140], "b": [1, 2, 3, 4, 5], "c": list(range(20, 37))}


@pytest.mark.parametrize("num_blocks", [64, 9])  # 9 blocks of 4: too few for all three, forces preemption
def test_thinker_greedy_through_scheduler_equals_dense_greedy(num_blocks):
    torch.manual_seed(0)
    config = tiny_decoder(vocab_size=300)
    model = LlamaForCausalLM(config)
    init_deterministic(model, seed=1)
    kv = kv_for(config, num_blocks)
    scheduler = Scheduler(SchedulerConfig(max_num_batched_tokens=6), kv, clock=lambda: 0.0)
    # "a" carries 5 embedding rows (audio, say) over positions 3-7, across a 6-token chunk boundary.
    audio = 0.05 * torch.randn(5, config.hidden_size, generator=torch.Generator().manual_seed(4))
    embeds = {"a": [(3, audio)]}
    for i, (rid, prompt) in enumerate(PROMPTS.items()):
        request = ThinkerRequest(rid, arrival_time=float(i), stop_ids=frozenset(), max_position=config.max_position)
        turn = TurnInput(prompt, embeds.get(rid, []), SamplingParams(temperature=0.0, max_tokens=6))
        request.append(turn, close=True)
        scheduler.add(request)
    steps = drive(scheduler, ThinkerRunner(model, kv))
    assert (scheduler.num_preemptions > 0) == (num_blocks == 9)
    assert kv.num_used_blocks == 0
    with torch.inference_mode():
        for rid, prompt in PROMPTS.items():
            tokens, hiddens = list(prompt), []
            for _ in range(6):
                rows = model.embed(torch.tensor(tokens))
                for start, span in embeds.get(rid, []):
                    rows[start : start + len(span)] = span
                hidden = dense_hidden(model.model, rows)[-1]
                hiddens.append(hidden)
                tokens.append(int(model.logits(hidden).argmax()))
            assert [s.token_id for s in steps[rid]] == tokens[len(prompt):], rid
            torch.testing.assert_close(torch.stack([s.hidden for s in steps[rid]]), torch.stack(hiddens),
                                       atol=1e-4, rtol=1e-4)
            assert [s.finish_reason for s in steps[rid]] == [None] * 5 + ["length"]


@pytest.mark.parametrize("num_blocks", [32, 5])  # 5 blocks of 3: x needs 4, y 3; preemption recomputes in chunks
def test_talker_greedy_through_scheduler_equals_dense_greedy(num_blocks):
    torch.manual_seed(0)
    codec, thinker_hidden, per_token = 40, 24, 3
    config = TalkerConfig(decoder=tiny_decoder(vocab_size=codec + 1, hidden_size=32), codec_vocab_size=codec,
                          thinker_hidden_size=thinker_hidden, frames_per_token=per_token)
    model = TalkerModel(config)
    init_deterministic(model, seed=2)
    with torch.no_grad():  # larger weights than the default init, so greedy frames vary
        model.codec_head.weight.mul_(50)
    kv = kv_for(config.decoder, num_blocks=num_blocks, block_size=3)
    scheduler = Scheduler(SchedulerConfig(max_num_batched_tokens=5), kv, clock=lambda: 0.0)
    gen = torch.Generator().manual_seed(3)
    conds = {"x": torch.randn(4, thinker_hidden, generator=gen), "y": torch.randn(3, thinker_hidden, generator=gen)}
    requests = {}
    for i, rid in enumerate(conds):
        requests[rid] = TalkerRequest(rid, float(i), per_token, SamplingParams(temperature=0.0), config.bos_id)
        requests[rid].append(conds[rid][:2])  # conditions stream in: two now, the rest after some frames
        scheduler.add(requests[rid])
    runner = TalkerRunner(model, kv)
    frames: dict[str, list[int]] = {rid: [] for rid in conds}
    for _ in range(4):  # a few rounds on the first conditions only
        plan = scheduler.schedule()
        for out in scheduler.update_from_output(plan, runner.execute(plan) if plan.chunks else RunnerOutput({})):
            frames[out.request_id].append(out.payload)
        scheduler.check_integrity()
    for rid in conds:
        requests[rid].append(conds[rid][2:], close=True)
    for rid, payloads in drive(scheduler, runner).items():
        frames[rid] += payloads
    assert (scheduler.num_preemptions > 0) == (num_blocks == 5)
    assert kv.num_used_blocks == 0
    with torch.inference_mode():
        for rid, cond in conds.items():
            expected: list[int] = []
            for k in range(per_token * len(cond)):
                prev = [config.bos_id] + expected
                rows = torch.stack([cond[j // per_token] for j in range(k + 1)])
                hidden = dense_hidden(model.model, model.input_embeddings(prev, rows))[-1]
                expected.append(int(model.logits(hidden).argmax()))
            assert frames[rid] == expected, rid
            assert len(set(expected)) > 1  # the comparison is not trivially constant
