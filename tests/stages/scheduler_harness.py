"""Scheduler test harness: a fake clock, a fake KV runner that catches bookkeeping bugs, thinker requests."""

from __future__ import annotations

import torch

from kvtier import KVCacheManager, KVPoolConfig
from stages.config import SamplingParams, SchedulerConfig
from stages.interaction import InteractionView
from stages.plan import RunnerOutput, SchedulerPlan
from stages.requests import ThinkerRequest, TurnInput
from stages.runners.base import ModelRunner
from stages.scheduler import Scheduler

BLOCK = 4


class FakeClock:
    """Seconds that move only when a test sets `t`."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class FakeRunner(ModelRunner):
    """Writes (request, position, token) into fake KV slots, reads the whole context back
    from them and samples a token that is a function of that context.

    Stale or foreign KV (a bookkeeping bug) fails an assertion, and recomputation after
    preemption yields the same tokens only if the context really is the same.
    """

    def __init__(self, kv: KVCacheManager) -> None:
        self.kv = kv
        self.slots: dict[int, tuple[str, int, int]] = {}
        self.positions: dict[str, list[int]] = {}

    def execute(self, plan: SchedulerPlan) -> RunnerOutput:
        assert plan.chunks, "plans are never empty"
        for chunk in plan.chunks:  # write every chunk first: overlapping slots would clobber each other
            seq, request = chunk.request.request_id, chunk.request
            assert self.kv.table(seq).num_tokens >= chunk.end, "KV reserved before the chunk runs"
            for pos, slot in zip(range(chunk.start, chunk.end), self.kv.slot_ids(seq, chunk.start, chunk.end)):
                self.slots[slot] = (seq, pos, request.token_ids[pos])
            self.positions.setdefault(seq, []).extend(range(chunk.start, chunk.end))
        results = {}
        for chunk in plan.chunks:
            seq, request = chunk.request.request_id, chunk.request
            context = [self.slots[s] for s in self.kv.slot_ids(seq, 0, chunk.end)]
            assert [(owner, pos) for owner, pos, _ in context] == [(seq, p) for p in range(chunk.end)]
            if request.wants_sample(chunk.end):
                token = 3 + sum((i + 1) * t for i, (_, _, t) in enumerate(context)) % 97
                results[seq] = (token, torch.zeros(1))  # what ThinkerRunner returns: token, hidden
        return RunnerOutput(results)


def make_kv(num_blocks: int) -> KVCacheManager:
    return KVCacheManager(KVPoolConfig(num_blocks=num_blocks, num_layers=1, num_kv_heads=1, head_dim=2,
                                       block_size=BLOCK))


def make_scheduler(num_blocks: int = 32, max_tokens: int = 64, max_seqs: int = 8, clock=None,
                   view: InteractionView | None = None, **config):
    """A scheduler over a fresh pool, its fake runner and the pool; `config` adds SchedulerConfig fields."""
    kv = make_kv(num_blocks)
    scheduler = Scheduler(SchedulerConfig(max_num_seqs=max_seqs, max_num_batched_tokens=max_tokens, **config), kv,
                          clock or FakeClock(), view)
    return scheduler, FakeRunner(kv), kv


def thinker(rid: str, arrival: float, prompt: list[int], max_tokens: int | None, close: bool = True) -> ThinkerRequest:
    """A thinker request with one turn; max_tokens None appends context without generating."""
    request = ThinkerRequest(rid, arrival, stop_ids=frozenset(), max_position=1000)
    sampling = None if max_tokens is None else SamplingParams(temperature=0.0, max_tokens=max_tokens)
    request.append(TurnInput(prompt, sampling=sampling), close=close)
    return request


def step(scheduler: Scheduler, runner: FakeRunner):
    """One round: schedule, run, commit; integrity checked after planning and after committing."""
    plan = scheduler.schedule()
    scheduler.check_integrity()
    output = runner.execute(plan) if plan.chunks else RunnerOutput({})
    outputs = scheduler.update_from_output(plan, output)
    scheduler.check_integrity()
    return plan, outputs


def chunks_of(plan: SchedulerPlan) -> list[tuple[str, int, int]]:
    return [(c.request.request_id, c.start, c.num_tokens) for c in plan.chunks]
