"""Windowed paged attention (sinks + sliding window) against dense float64 references; freed KV poisoned with NaN."""

import math

import pytest
import torch

from kvtier import KVCacheManager, KVPoolConfig, blocks_for
from stages.config import SamplingParams, SchedulerConfig, WindowSpec
from stages.kv_residency import KVResidency
from stages.models.attention import paged_attention
from stages.models.attention_batch import DECODE_RUN_POSITIONS, build_attention_batch
from stages.models.decoder_config import DecoderConfig
from stages.models.llama import LlamaForCausalLM, RotaryEmbedding
from stages.models.weights import init_deterministic
from stages.plan import RunnerOutput
from stages.requests import ThinkerRequest, TurnInput
from stages.runners.decoder import ThinkerRunner
from stages.scheduler import Scheduler
from tests.stages.dense_decoder import dense_hidden

HEADS, KV_HEADS, HEAD_DIM = 6, 2, 8  # GQA: 3 query heads per KV head


def union_mask(queries, num_keys: int, window: WindowSpec) -> torch.Tensor:
    """[queries, keys] True where query position t may look at key position p: p <= t, and p < S or p >= t - W."""
    t = torch.tensor(list(queries))[:, None]
    p = torch.arange(num_keys)[None, :]
    return (p <= t) & ((p < window.sinks) | (p >= t - window.tokens))


def dense_reference(q, k, v, queries, window: WindowSpec) -> torch.Tensor:
    """float64 attention of query rows at positions `queries` over all keys under the union mask."""
    group = q.shape[1] // k.shape[1]
    k, v = k.double().repeat_interleave(group, dim=1), v.double().repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q.double(), k) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~union_mask(queries, k.shape[0], window), float("-inf"))
    return torch.einsum("hqk,khd->qhd", scores.softmax(-1), v)


def run_windowed_step(seqs, window: WindowSpec, block_size: int, dtype, run_positions: int, seed: int = 0):
    """Each seq (num_cached, num_new): a real KV manager reserves it block by block (sequences interleaved, so
    blocks are scattered), drops what the window no longer needs before its first new position, then every
    block that is not live holds NaN. Returns (paged output, dense reference, number of dropped blocks)."""
    gen = torch.Generator().manual_seed(seed)
    rand = lambda *shape: torch.randn(*shape, generator=gen, dtype=torch.float64)  # noqa: E731
    num_blocks = sum(blocks_for(c + n, block_size) for c, n in seqs) + 2
    kv = KVCacheManager(KVPoolConfig(num_blocks=num_blocks, num_layers=1, num_kv_heads=KV_HEADS, head_dim=HEAD_DIM,
                                     block_size=block_size))
    for upto in range(block_size, max(c + n for c, n in seqs) + block_size, block_size):
        for i, (c, n) in enumerate(seqs):
            kv.reserve(i, min(upto, c + n))
    dropped = sum(kv.drop(i, window.sinks, c - window.tokens) for i, (c, _) in enumerate(seqs))
    kv.check_integrity()
    # Garbage in live blocks (unwritten slots), NaN in every other block: reading one of those poisons the output.
    k_cache = (100 * rand(num_blocks, block_size, KV_HEADS, HEAD_DIM)).to(dtype)
    v_cache = (100 * rand(num_blocks, block_size, KV_HEADS, HEAD_DIM)).to(dtype)
    live = {b for i in range(len(seqs)) for b in kv.table(i).block_ids}
    for block in set(range(num_blocks)) - live:
        k_cache[block], v_cache[block] = float("nan"), float("nan")
    flat_k, flat_v = k_cache.view(-1, KV_HEADS, HEAD_DIM), v_cache.view(-1, KV_HEADS, HEAD_DIM)
    decodes, prefills, decode_rows, prefill_rows = [], [], [], []
    for i, (c, n) in enumerate(seqs):
        q, k, v = rand(n, HEADS, HEAD_DIM), rand(c + n, KV_HEADS, HEAD_DIM), rand(c + n, KV_HEADS, HEAD_DIM)
        cached = [p for p in range(c) if p not in kv.dropped(i)]  # positions still held
        slots = [kv.slot_ids(i, p, p + 1)[0] for p in cached]
        flat_k[slots], flat_v[slots] = k[cached].to(dtype), v[cached].to(dtype)
        ids, logical = kv.live_blocks(i, c + n)
        new = (q, k[c:], v[c:], kv.slot_ids(i, c, c + n), dense_reference(q, k, v, range(c, c + n), window))
        if n == 1:
            decodes.append((ids, c + n, logical))
            decode_rows.append(new)
        else:
            prefills.append((ids, n, c + n, logical))
            prefill_rows.append(new)
    rows = decode_rows + prefill_rows
    q, k, v = (torch.cat([r[j] for r in rows]).to(dtype) for j in range(3))
    batch = build_attention_batch(block_size, decodes, prefills, [s for r in rows for s in r[3]], HEADS // KV_HEADS,
                                  run_positions, window)
    out = paged_attention(q, k, v, k_cache, v_cache, batch)
    return out, torch.cat([r[4] for r in rows]), dropped


WINDOWS = {  # (tokens, sinks)
    "sliding_no_sinks": (5, 0),
    "sinks_not_block_aligned": (6, 3),
    "sinks_block_aligned": (4, 8),
    "one_token_window": (1, 2),
    "window_longer_than_context": (100, 2),
}
# decodes, then prefill chunks: three of one length (a run), two others, one too long for a run
SEQS = [(30, 1), (9, 1), (41, 1), (2, 1), (0, 7), (21, 7), (40, 7), (17, 9), (33, 12), (5, 40)]


@pytest.mark.parametrize("run_positions", [DECODE_RUN_POSITIONS, 24, 1])
@pytest.mark.parametrize("block_size", [1, 3, 4])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("window", WINDOWS)
def test_windowed_attention_equals_dense_union_mask_with_freed_blocks_poisoned(window, dtype, block_size,
                                                                               run_positions):
    spec = WindowSpec(*WINDOWS[window])
    out, ref, dropped = run_windowed_step(SEQS, spec, block_size, dtype, run_positions)
    assert (dropped > 0) == (window != "window_longer_than_context")
    assert not out.isnan().any()
    tol = 1e-5 if dtype is torch.float32 else 1e-10
    torch.testing.assert_close(out.double(), ref, atol=tol, rtol=tol)


def test_rotary_positions_past_the_tables_are_computed_the_same_and_the_tables_do_not_grow():
    small, large = RotaryEmbedding(8, 16, 10000.0), RotaryEmbedding(8, 5000, 10000.0)
    positions = torch.tensor([0, 15, 16, 700, 4999])
    for a, b in zip(small.tables(positions), large.tables(positions)):
        assert torch.equal(a, b)
    assert len(small.cos) == 16  # a stream's positions past the maximum cost no memory


# ---------------------------------------------------------------- a windowed thinker through the scheduler

PROMPTS = {"a": [5, 17, 42, 8, 99, 3, 250, 61, 7, 12, 140, 33, 71, 2], "b": [1, 2, 3], "c": list(range(20, 47))}


@pytest.mark.parametrize("tokens, sinks", [(6, 0), (7, 3)])
def test_windowed_thinker_through_scheduler_equals_dense_windowed_greedy(tokens, sinks):
    """Positions run past max_position (24) while freed blocks hold NaN; tokens and hidden states match the
    dense model under the union mask."""
    torch.manual_seed(0)
    window, generate = WindowSpec(tokens, sinks), 12
    config = DecoderConfig(vocab_size=300, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16,
                           intermediate_size=128, max_position=24)
    model = LlamaForCausalLM(config)
    init_deterministic(model, seed=1)
    # 64 blocks of 4: freed blocks go to the back of the free list and are not handed out again in this run.
    kv = KVCacheManager(KVPoolConfig(num_blocks=64, num_layers=2, num_kv_heads=2, head_dim=16, block_size=4))
    scheduler = Scheduler(SchedulerConfig(max_num_batched_tokens=8), kv, clock=lambda: 0.0,
                          residency=KVResidency(kv, window=window))
    for i, (rid, prompt) in enumerate(PROMPTS.items()):
        request = ThinkerRequest(rid, float(i), frozenset(), max_position=math.inf)
        request.append(TurnInput(prompt, sampling=SamplingParams(temperature=0.0, max_tokens=generate)), close=True)
        scheduler.add(request)
    runner = ThinkerRunner(model, kv, window)
    steps: dict[str, list] = {rid: [] for rid in PROMPTS}
    held, poisoned, dropped_from = set(), set(), set()
    while scheduler.requests:
        plan = scheduler.schedule()
        scheduler.check_integrity()
        assert not poisoned & {b for c in plan.chunks for b in kv.table(c.request.request_id).block_ids}
        for out in scheduler.update_from_output(plan, runner.execute(plan) if plan.chunks else RunnerOutput({})):
            assert out.error is None, out.error
            if out.payload is not None:
                steps[out.request_id].append(out.payload)
        dropped_from |= {rid for rid in scheduler.requests if kv.dropped(rid)}
        now_held = {b for rid in scheduler.requests for b in kv.table(rid).block_ids}
        for block in held - now_held:  # freed this step: poison it in every layer
            for cache in (*kv.cache.keys, *kv.cache.values):
                cache[block] = float("nan")
        poisoned |= held - now_held
        held = now_held
    assert {"a", "c"} <= dropped_from and scheduler.num_preemptions == 0
    with torch.inference_mode():
        for rid, prompt in PROMPTS.items():
            tokens, hiddens = list(prompt), []
            for _ in range(generate):
                mask = union_mask(range(len(tokens)), len(tokens), window)
                hidden = dense_hidden(model.model, model.embed(torch.tensor(tokens)), mask)[-1]
                hiddens.append(hidden)
                tokens.append(int(model.logits(hidden).argmax()))
            assert [s.token_id for s in steps[rid]] == tokens[len(prompt):], rid
            torch.testing.assert_close(torch.stack([s.hidden for s in steps[rid]]), torch.stack(hiddens),
                                       atol=1e-4, rtol=1e-4)
    assert len(PROMPTS["c"]) + generate > config.max_position
