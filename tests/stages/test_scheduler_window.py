"""A windowed stage's scheduler: KV per request plateaus, positions run far past the pool and max_position."""

import math

import pytest
import torch

from kvtier import KVCacheManager, blocks_for
from stages.commands import AbortRequest, AddRequest, StopGeneration
from stages.config import SamplingParams, SchedulerConfig, WindowSpec
from stages.engine import StageEngine
from stages.kv_residency import KVResidency
from stages.plan import RunnerOutput, SchedulerPlan
from stages.requests import ThinkerRequest, TurnInput
from stages.runners.base import ModelRunner
from stages.scheduler import Scheduler
from tests.stages.scheduler_harness import BLOCK, FakeClock, chunks_of, make_kv


class WindowFakeRunner(ModelRunner):
    """Writes (request, position, token) into fake KV slots and samples a token that is a function of what
    the last query's window reads back: positions [0, S) and [t - W, t], but for those the request forgot
    (a recomputation's first positions). Stale or foreign KV, or a window position whose KV was freed,
    fails an assertion."""

    def __init__(self, kv: KVCacheManager, window: WindowSpec) -> None:
        self.kv, self.window = kv, window
        self.slots: dict[int, tuple[str, int, int]] = {}

    def execute(self, plan: SchedulerPlan) -> RunnerOutput:
        for chunk in plan.chunks:
            seq, request = chunk.request.request_id, chunk.request
            for pos, slot in zip(range(chunk.start, chunk.end), self.kv.slot_ids(seq, chunk.start, chunk.end)):
                self.slots[slot] = (seq, pos, request.token_ids[pos])
        results = {}
        for chunk in plan.chunks:
            seq, request = chunk.request.request_id, chunk.request
            for t in range(chunk.start, chunk.end):
                seen = self.read_window(request, t)
            if request.wants_sample(chunk.end):
                results[seq] = (3 + sum((pos % 7 + 1) * tok for pos, tok in seen) % 97, torch.zeros(1))
        return RunnerOutput(results)

    def read_window(self, request: ThinkerRequest, t: int) -> list[tuple[int, int]]:
        seq = request.request_id
        sinks, recent = range(min(self.window.sinks, t + 1)), range(max(0, t - self.window.tokens), t + 1)
        positions = sorted({*sinks, *recent} - set(request.forgotten))
        seen = []
        for pos in positions:
            owner, at, token = self.slots[self.kv.slot_ids(seq, pos, pos + 1)[0]]
            assert (owner, at) == (seq, pos), f"{seq} position {pos} reads {owner} position {at}"
            seen.append((pos, token))
        return seen


def windowed(num_blocks: int, window: WindowSpec | None, max_tokens: int = 8, max_seqs: int = 8):
    kv = make_kv(num_blocks)
    scheduler = Scheduler(SchedulerConfig(max_num_seqs=max_seqs, max_num_batched_tokens=max_tokens), kv, FakeClock(),
                          residency=KVResidency(kv, window=window))
    return scheduler, WindowFakeRunner(kv, window or WindowSpec(tokens=10**9)), kv


def request(rid: str, prompt: list[int], generate: int | None, arrival: float = 0.0) -> ThinkerRequest:
    thinker = ThinkerRequest(rid, arrival, stop_ids=frozenset(), max_position=math.inf)
    sampling = None if generate is None else SamplingParams(temperature=0.0, max_tokens=generate)
    thinker.append(TurnInput(prompt, sampling=sampling))
    return thinker


def step(scheduler: Scheduler, runner: WindowFakeRunner):
    plan = scheduler.schedule()
    scheduler.check_integrity()
    outputs = scheduler.update_from_output(plan, runner.execute(plan) if plan.chunks else RunnerOutput({}))
    scheduler.check_integrity()
    return plan, outputs


def bound(window: WindowSpec, chunk: int) -> int:
    """Blocks one windowed request may hold while a chunk runs: its sink blocks and the blocks its queries read."""
    return blocks_for(window.sinks, BLOCK) + blocks_for(window.tokens + chunk, BLOCK) + 1


@pytest.mark.parametrize("tokens, sinks", [(10, 0), (9, 3), (12, 8)])
def test_a_streaming_windowed_request_plateaus_while_its_positions_pass_the_pool_many_times(tokens, sinks):
    window, chunk = WindowSpec(tokens, sinks), 8
    scheduler, runner, kv = windowed(num_blocks=2 * bound(window, chunk), window=window, max_tokens=chunk)
    stream = request("s", list(range(7, 37)), generate=3)  # a 30-token prompt, then 3 tokens per turn
    scheduler.add(stream)
    turns = 0
    while stream.num_computed < 9000:
        plan, outputs = step(scheduler, runner)
        assert plan.chunks and not any(o.error for o in outputs)
        assert kv.num_blocks_held("s") <= bound(window, chunk)  # the plateau
        assert kv.num_resident_tokens("s") <= bound(window, chunk) * BLOCK
        if not stream.is_generating:  # the next turn: 5 new inputs (a frame, say), 3 tokens out
            stream.append(TurnInput([turns % 50 + 1] * 5, sampling=SamplingParams(temperature=0.0, max_tokens=3)))
            turns += 1
    assert scheduler.num_preemptions == 0 and turns > 1000
    assert stream.num_computed > 8192 > 50 * kv.pool.num_blocks * BLOCK  # past max_position, the pool many times
    assert kv.peak_used_blocks <= bound(window, chunk)


def test_windowed_requests_that_overfill_the_pool_preempt_and_recompute_the_same_tokens():
    window, chunk = WindowSpec(6, 2), 4
    prompts = {rid: [(i * 13 + j) % 90 + 3 for j in range(40 + 7 * i)] for i, rid in enumerate("abc")}

    def run(num_blocks: int) -> tuple[dict[str, list[int]], int]:
        scheduler, runner, _ = windowed(num_blocks, window, max_tokens=chunk)
        for i, (rid, prompt) in enumerate(prompts.items()):
            scheduler.add(request(rid, prompt, generate=20, arrival=float(i)))
        tokens: dict[str, list[int]] = {rid: [] for rid in prompts}
        for _ in range(2000):
            if all(scheduler.requests[rid].num_generated == 20 for rid in prompts):
                return tokens, scheduler.num_preemptions
            _, outputs = step(scheduler, runner)
            for out in outputs:
                assert out.error is None, out.error
                if out.payload is not None:
                    tokens[out.request_id].append(out.payload.token_id)
        raise AssertionError("requests did not finish")

    roomy, cramped = run(64), run(2 * bound(window, chunk))  # room for two windows, not three
    assert roomy[1] == 0 and cramped[1] > 0
    assert cramped[0] == roomy[0]


def test_unbounded_request_longer_than_the_pool_still_fails_where_a_windowed_one_runs():
    for window in (None, WindowSpec(8)):
        scheduler, runner, kv = windowed(num_blocks=6, window=window)  # 24 tokens of KV
        scheduler.add(request("long", list(range(3, 43)), generate=2))  # 40 tokens
        plan, outputs = step(scheduler, runner)
        if window is None:
            assert not plan.chunks and outputs[0].error == "needs 40 tokens of KV; the pool holds 24"
        else:
            assert chunks_of(plan) == [("long", 0, 8)] and not outputs
            while "long" in scheduler.requests and scheduler.requests["long"].num_generated < 2:
                step(scheduler, runner)
            assert kv.peak_used_blocks <= bound(window, 8)


def test_windowed_request_fails_when_its_window_and_chunk_can_never_fit():
    scheduler, runner, _ = windowed(num_blocks=3, window=WindowSpec(8, 4))
    scheduler.add(request("r", list(range(3, 43)), generate=1))
    outputs = []
    while scheduler.requests:
        outputs += step(scheduler, runner)[1]
    assert [o.error for o in outputs] == ["needs 4 blocks of KV for its window and chunk; the pool holds 3"]


def test_truncating_a_windowed_request_into_freed_kv_is_refused_and_changes_nothing():
    window = WindowSpec(6, 2)
    scheduler, runner, kv = windowed(num_blocks=16, window=window)
    scheduler.add(request("r", list(range(3, 33)), generate=None))  # 30 tokens, context only
    while scheduler.requests["r"].num_pending:
        step(scheduler, runner)
    assert kv.dropped("r") == range(4, 24)  # the next position 30 reads 0-1 and 24-30
    for keep in (5, 23, 29):  # inside the freed KV, or a window that reaches into it
        with pytest.raises(ValueError, match="the window freed the KV of positions 4-23"):
            scheduler.truncate("r", keep)
        assert (len(scheduler.requests["r"].token_ids), kv.table("r").num_tokens) == (30, 30)
    scheduler.truncate("r", 30)  # its window starts at 24: fine
    scheduler.truncate("r", 3)  # only sink positions: fine, and the drop is forgotten
    assert kv.dropped("r") == range(0) and scheduler.requests["r"].num_computed == 3
    scheduler.check_integrity()


def test_engine_status_reports_resident_tokens_per_request():
    window = WindowSpec(6, 2)
    scheduler, runner, kv = windowed(num_blocks=16, window=window)
    engine = StageEngine("thinker", scheduler, runner, emit=lambda outputs: None)
    assert engine.status().resident_tokens == {}
    engine.submit(AddRequest(request("r", list(range(3, 33)), generate=None)))
    engine.submit(AddRequest(request("q", [3, 4, 5], generate=None)))
    for _ in range(6):
        engine.step()
    status = engine.status()
    assert status.resident_tokens == {"r": 4 + 6, "q": 3}  # r: sink block 0-3, live blocks 24-29
    status.resident_tokens["r"] = 0  # a copy
    assert engine.status().resident_tokens["r"] == 10
    errors = []
    engine.emit = errors.extend
    engine.submit(AbortRequest("q"))
    engine.submit(StopGeneration("r", keep_tokens=12))  # into the freed KV: an error for r, nothing changes
    engine.step()
    assert engine.status().resident_tokens == {"r": 10}
    assert "the window freed the KV of positions 4-23" in errors[0].error
