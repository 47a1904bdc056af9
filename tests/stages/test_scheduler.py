"""The scheduler on a fake runner: budgets and order, preemption, failures and aborts, multi-turn
residency, and the engine thread around it (long: one module per component, cases by section)."""

import threading

import pytest
import torch

from kvtier import KVCacheManager, KVPoolConfig
from stages.commands import AbortRequest, AddRequest, AppendInput, StopGeneration
from stages.config import SamplingParams, SchedulerConfig
from stages.engine import StageEngine
from stages.models.decoder_config import DecoderConfig
from stages.models.llama import LlamaForCausalLM
from stages.models.weights import init_deterministic
from stages.plan import RunnerOutput, SchedulerPlan
from stages.requests import RequestStatus, TalkerRequest, ThinkerRequest, TurnInput
from stages.runners.decoder import ThinkerRunner
from stages.scheduler import Scheduler
from tests.stages.scheduler_harness import (
    BLOCK,
    FakeClock,
    FakeRunner,
    chunks_of,
    make_kv,
    make_scheduler,
    step,
    thinker,
)


def run_to_end(scheduler: Scheduler, runner: FakeRunner, max_steps: int = 200) -> dict[str, list]:
    """Step until no request is left; every output per request, in order."""
    outputs: dict[str, list] = {}
    for _ in range(max_steps):
        if not scheduler.requests:
            return outputs
        for out in step(scheduler, runner)[1]:
            outputs.setdefault(out.request_id, []).append(out)
    raise AssertionError("requests did not finish")


def tokens_of(outputs) -> list[int]:
    return [o.payload.token_id for o in outputs if o.payload is not None]


def solo_tokens(prompt: list[int], max_tokens: int) -> list[int]:
    """What a request generates alone on a roomy pool."""
    scheduler, runner, _ = make_scheduler()
    scheduler.add(thinker("solo", 0.0, prompt, max_tokens))
    return tokens_of(run_to_end(scheduler, runner)["solo"])


# ---------------------------------------------------------------- budgets and order

def test_token_budget_chunks_a_long_prefill_across_rounds():
    scheduler, runner, kv = make_scheduler(max_tokens=4)
    scheduler.add(thinker("a", 0.0, list(range(10, 20)), max_tokens=2))
    plan, outputs = step(scheduler, runner)
    assert chunks_of(plan) == [("a", 0, 4)] and outputs == []  # positions 0-3, nothing sampled
    plan, outputs = step(scheduler, runner)
    assert chunks_of(plan) == [("a", 4, 4)] and outputs == []  # positions 4-7
    plan, outputs = step(scheduler, runner)
    assert chunks_of(plan) == [("a", 8, 2)]  # the last 2 prompt positions: first token sampled
    assert [o.payload.token_id for o in outputs] == solo_tokens(list(range(10, 20)), 2)[:1]
    plan, outputs = step(scheduler, runner)
    assert chunks_of(plan) == [("a", 10, 1)]  # decode: second (last) token, then the request is done
    assert outputs[-1].is_finished and kv.num_used_blocks == 0


def test_token_budget_is_shared_in_fcfs_order():
    scheduler, runner, _ = make_scheduler(max_tokens=8)
    scheduler.add(thinker("late", 1.0, [1] * 6, max_tokens=3))
    scheduler.add(thinker("early", 0.0, [2] * 6, max_tokens=3))  # added second, arrived first
    plan, _ = step(scheduler, runner)
    assert chunks_of(plan) == [("early", 0, 6), ("late", 0, 2)]  # the oldest takes what it needs first
    plan, _ = step(scheduler, runner)
    # Both are running now: early decodes its last token, late continues its prefill.
    assert chunks_of(plan) == [("early", 6, 1), ("late", 2, 4)]


def test_max_num_seqs_caps_the_batch_in_arrival_order():
    scheduler, runner, _ = make_scheduler(max_seqs=2)
    for rid, arrival in [("c", 2.0), ("a", 0.0), ("b", 1.0)]:
        scheduler.add(thinker(rid, arrival, [5, 6, 7], max_tokens=3))
    plan, _ = step(scheduler, runner)
    assert [c.request.request_id for c in plan.chunks] == ["a", "b"]  # c waits
    assert scheduler.requests["c"].status is RequestStatus.WAITING
    plan, _ = step(scheduler, runner)
    assert [c.request.request_id for c in plan.chunks] == ["a", "b"]  # running requests keep their seats
    run_to_end(scheduler, runner)


def test_fcfs_serves_admitted_requests_before_an_older_waiting_one():
    scheduler, runner, _ = make_scheduler(max_seqs=1)
    scheduler.add(thinker("new", 1.0, [1, 2], max_tokens=3))
    step(scheduler, runner)  # new is admitted and decoding
    scheduler.add(thinker("old", 0.0, [3, 4], max_tokens=3))  # arrived earlier, added later
    plan, _ = step(scheduler, runner)
    assert chunks_of(plan) == [("new", 2, 1)]  # the admitted request keeps its seat
    assert scheduler.requests["old"].status is RequestStatus.WAITING


# ---------------------------------------------------------------- preemption

def test_preempted_request_recomputes_from_zero_and_generates_the_same_tokens():
    # 4 blocks of 4 tokens. a and b: 6-token prompts, 8 tokens each -> 14 positions (4 blocks) each.
    scheduler, runner, kv = make_scheduler(num_blocks=4)
    prompt_a, prompt_b = [1, 2, 3, 4, 5, 6], [9, 8, 7, 6, 5, 4]
    scheduler.add(thinker("a", 0.0, prompt_a, max_tokens=8))
    scheduler.add(thinker("b", 1.0, prompt_b, max_tokens=8))
    emitted = []
    plan, outputs = step(scheduler, runner)  # both prefill 0-5: 2 blocks each, the pool is full
    emitted += outputs
    assert chunks_of(plan) == [("a", 0, 6), ("b", 0, 6)] and kv.num_free_blocks == 0
    for position in (6, 7):  # decodes that still fit the second block
        plan, outputs = step(scheduler, runner)
        emitted += outputs
        assert chunks_of(plan) == [("a", position, 1), ("b", position, 1)] and plan.preempted == []
    plan, outputs = step(scheduler, runner)  # a's position 8 needs a third block: b (least urgent) is preempted
    emitted += outputs
    assert plan.preempted == ["b"] and chunks_of(plan) == [("a", 8, 1)]
    b = scheduler.requests["b"]
    assert b.status is RequestStatus.WAITING and b.num_computed == 0 and kv.num_blocks_held("b") == 0
    assert len(b.token_ids) == 9  # its prompt and 3 sampled tokens are kept
    assert scheduler.num_preemptions == 1
    for rid, outs in run_to_end(scheduler, runner).items():  # a finishes, then b recomputes and goes on
        emitted += outs
    assert runner.positions["b"][:8] == list(range(8))
    assert runner.positions["b"][8:17] == list(range(9))  # recomputed from position 0
    assert tokens_of(o for o in emitted if o.request_id == "a") == solo_tokens(prompt_a, 8)
    assert tokens_of(o for o in emitted if o.request_id == "b") == solo_tokens(prompt_b, 8)
    assert kv.num_used_blocks == 0


def test_idle_resident_is_preempted_before_an_active_request():
    # 5 blocks of 4. i: a finished turn kept resident (4 tokens, 1 block), a and b decoding.
    scheduler, runner, kv = make_scheduler(num_blocks=5)
    scheduler.add(thinker("i", 0.0, [1, 2, 3], max_tokens=1, close=False))
    step(scheduler, runner)  # i prefills and samples its one token
    step(scheduler, runner)  # i computes that token's position: idle, holding 1 block
    assert scheduler.requests["i"].num_pending == 0 and kv.num_blocks_held("i") == 1
    scheduler.add(thinker("a", 1.0, [4] * 8, max_tokens=10))
    scheduler.add(thinker("b", 2.0, [5] * 8, max_tokens=10))
    step(scheduler, runner)  # a and b prefill 8 positions: 2 blocks each, the pool is full
    assert kv.num_free_blocks == 0
    plan, _ = step(scheduler, runner)  # a needs a third block: the idle i goes, not the active b
    assert plan.preempted == ["i"] and ("a", 8, 1) in chunks_of(plan)
    assert kv.num_blocks_held("b") == 2 and scheduler.requests["b"].status is RequestStatus.RUNNING
    assert scheduler.requests["i"].status is RequestStatus.WAITING


def test_least_recently_scheduled_idle_resident_goes_first():
    clock = FakeClock()
    scheduler, runner, kv = make_scheduler(num_blocks=3, clock=clock)
    scheduler.add(thinker("old", 0.0, [1, 2, 3, 4], max_tokens=None, close=False))
    step(scheduler, runner)  # old: context only, 1 block, idle from t=0
    clock.t = 1.0
    scheduler.add(thinker("new", 1.0, [5, 6, 7, 8], max_tokens=None, close=False))
    step(scheduler, runner)  # new: 1 block, idle from t=1
    clock.t = 2.0
    scheduler.add(thinker("w", 2.0, [9] * 8, max_tokens=1))
    plan, _ = step(scheduler, runner)  # w needs 2 blocks, 1 free: the idle resident scheduled longest ago goes
    assert plan.preempted == ["old"] and kv.num_blocks_held("new") == 1


def test_waiting_request_never_preempts_an_active_one():
    scheduler, runner, kv = make_scheduler(num_blocks=3)
    scheduler.add(thinker("a", 0.0, [1] * 8, max_tokens=4))  # 8 + 4 tokens: 3 blocks eventually
    plan, _ = step(scheduler, runner)
    scheduler.add(thinker("w", 1.0, [2] * 8, max_tokens=1))  # needs 2 blocks, only 1 free
    for _ in range(3):  # a decodes; w keeps waiting and a keeps its KV
        plan, _ = step(scheduler, runner)
        assert [c.request.request_id for c in plan.chunks] == ["a"] and plan.preempted == []
        assert scheduler.requests["w"].status is RequestStatus.WAITING and kv.num_blocks_held("w") == 0
    assert scheduler.num_preemptions == 0
    outputs = run_to_end(scheduler, runner)  # a finishes, then w runs
    assert tokens_of(outputs["w"]) == solo_tokens([2] * 8, 1) and scheduler.num_preemptions == 0


def test_waiting_request_may_preempt_an_idle_resident():
    scheduler, runner, kv = make_scheduler(num_blocks=2)
    scheduler.add(thinker("i", 0.0, [1] * 8, max_tokens=None, close=False))
    step(scheduler, runner)  # i: 2 blocks of context, idle
    scheduler.add(thinker("w", 1.0, [2] * 4, max_tokens=1))
    plan, _ = step(scheduler, runner)  # w needs 1 block: takes it from the idle resident
    assert plan.preempted == ["i"] and chunks_of(plan) == [("w", 0, 4)]


def test_an_idle_resident_preempted_recomputes_when_its_next_turn_arrives_not_before():
    scheduler, runner, kv = make_scheduler(num_blocks=3)
    scheduler.add(thinker("i", 0.0, [1] * 8, max_tokens=None, close=False))
    step(scheduler, runner)  # i: 2 blocks of context, idle
    scheduler.add(thinker("w", 1.0, [2] * 8, max_tokens=1))
    plan, _ = step(scheduler, runner)  # w needs 2 blocks and room to grow: the idle i goes
    assert plan.preempted == ["i"]
    for _ in range(3):  # w ends; i has nothing to do until its user speaks again, so it takes no room
        plan, _ = step(scheduler, runner)
        assert "i" not in [c.request.request_id for c in plan.chunks]
    idle = scheduler.requests["i"]
    assert idle.num_pending == 0 and kv.num_blocks_held("i") == 0 and idle.status is RequestStatus.WAITING
    next_turn = TurnInput([3] * 3, sampling=SamplingParams(temperature=0.0, max_tokens=2))
    idle.append(next_turn, close=True)
    plan, outputs = step(scheduler, runner)  # the whole context again, then the new turn
    assert chunks_of(plan) == [("i", 0, 11)]
    twin, twin_runner, _ = make_scheduler()  # never preempted
    twin.add(thinker("i", 0.0, [1] * 8, max_tokens=None, close=False))
    step(twin, twin_runner)
    twin.requests["i"].append(next_turn, close=True)
    _, twin_outputs = step(twin, twin_runner)
    assert tokens_of(outputs) + tokens_of(run_to_end(scheduler, runner)["i"]) == \
        tokens_of(twin_outputs) + tokens_of(run_to_end(twin, twin_runner)["i"])
    assert len(tokens_of(outputs)) == 1


def test_a_preempted_dormant_context_cut_back_still_waits_for_its_next_turn():
    request = thinker("i", 0.0, [1] * 8, max_tokens=None, close=False)
    request.advance(8, None)
    request.reset_computed()  # preempted while dormant
    request.truncate(5)  # a barge-in cut what was not heard
    assert request.num_pending == 0
    request.append(TurnInput([2, 3]))  # 7 known tokens, fewer than before the cut: still new input
    assert request.num_pending == 7


# ---------------------------------------------------------------- failures and aborts

def test_request_that_can_never_fit_fails_with_the_sizes():
    scheduler, runner, kv = make_scheduler(num_blocks=4)  # 16 tokens of KV
    scheduler.add(thinker("big", 0.0, list(range(20)), max_tokens=1))
    scheduler.add(thinker("ok", 1.0, [1, 2], max_tokens=1))
    plan, outputs = step(scheduler, runner)
    assert [o.error for o in outputs if o.request_id == "big"] == ["needs 20 tokens of KV; the pool holds 16"]
    assert all(o.is_finished for o in outputs if o.request_id == "big")
    assert "big" not in scheduler.requests and [c.request.request_id for c in plan.chunks] == ["ok"]
    run_to_end(scheduler, runner)
    assert kv.num_used_blocks == 0


def test_request_longer_than_the_pool_fails_before_running_or_preempting_anything():
    # Known bug: the size check looks at the next chunk's end, not at the known context.
    scheduler, runner, kv = make_scheduler(num_blocks=4, max_tokens=8)  # 16 tokens of KV, 8-token rounds
    scheduler.add(thinker("other", 1.0, [1] * 6, max_tokens=10))
    step(scheduler, runner)  # other: 2 blocks, decoding
    scheduler.add(thinker("big", 0.0, list(range(20)), max_tokens=1))  # 20 known tokens: can never fit
    errors, preempted = [], []
    for _ in range(4):
        plan, outputs = step(scheduler, runner)
        errors += [o.error for o in outputs if o.request_id == "big" and o.error]
        preempted += plan.preempted
    # Today: big runs 0-7 and 7-15 (preempting other to grow), and fails only at 15-20.
    assert errors == ["needs 20 tokens of KV; the pool holds 16"]
    assert "big" not in runner.positions  # no work spent on a request that cannot fit
    assert preempted == []  # and nobody lost their KV for it


def test_waiting_request_does_not_preempt_an_idle_resident_in_vain():
    # Known bug: victims are preempted one by one without asking whether that makes enough room.
    scheduler, runner, kv = make_scheduler(num_blocks=4)
    scheduler.add(thinker("i", 0.0, [1] * 4, max_tokens=None, close=False))
    step(scheduler, runner)  # i: 1 block, idle
    scheduler.add(thinker("a", 1.0, [2] * 6, max_tokens=20))
    step(scheduler, runner)  # a: 2 blocks, decoding; 1 block free
    scheduler.add(thinker("w", 2.0, [3] * 10, max_tokens=1))  # needs 3 blocks: 1 free + i's 1 is not enough
    plan, _ = step(scheduler, runner)
    assert [c.request.request_id for c in plan.chunks] == ["a"]  # w cannot run this round either way
    assert plan.preempted == [] and kv.num_blocks_held("i") == 1  # so i keeps its context


def test_abort_frees_everything_and_silences_the_request():
    scheduler, runner, kv = make_scheduler()
    scheduler.add(thinker("a", 0.0, [1] * 9, max_tokens=5))
    scheduler.add(thinker("w", 1.0, [1] * 3, max_tokens=5))
    step(scheduler, runner)
    assert kv.num_blocks_held("a") == 3
    assert scheduler.abort("a")  # running: KV freed at once
    assert kv.num_blocks_held("a") == 0 and "a" not in scheduler.requests
    scheduler.check_integrity()
    assert not scheduler.abort("a")  # a second abort finds nothing
    outputs = run_to_end(scheduler, runner)
    assert "a" not in outputs and kv.num_used_blocks == 0


# ---------------------------------------------------------------- multi-turn residency

def test_second_turn_prefills_only_its_new_tokens():
    scheduler, runner, kv = make_scheduler(max_tokens=16)
    request = thinker("s", 0.0, [1, 2, 3, 4, 5], max_tokens=3, close=False)
    scheduler.add(request)
    turn_one = []
    for _ in range(6):  # prefill 0-4, decode 5, 6, then compute the last sampled token (7)
        plan, outputs = step(scheduler, runner)
        turn_one += tokens_of(outputs)
    assert len(turn_one) == 3 and request.num_pending == 0 and len(request.token_ids) == 8
    assert runner.positions["s"] == list(range(8))
    computed_before = len(runner.positions["s"])
    request.append(TurnInput([6, 7, 8, 9], sampling=SamplingParams(temperature=0.0, max_tokens=2)), close=True)
    plan, outputs = step(scheduler, runner)  # turn two: only its 4 new tokens, then the first sample
    assert chunks_of(plan) == [("s", 8, 4)]
    turn_two = tokens_of(outputs) + tokens_of(run_to_end(scheduler, runner)["s"])  # one decode, then done
    assert len(turn_two) == 2
    assert runner.positions["s"][computed_before:] == [8, 9, 10, 11, 12]  # nothing before 8 was recomputed
    assert kv.num_used_blocks == 0


def test_a_held_input_waits_for_the_input_after_it_and_both_prefill_in_one_step():
    scheduler, runner, _ = make_scheduler(max_tokens=16)
    request = thinker("s", 0.0, [1, 2, 3], max_tokens=1, close=False)
    scheduler.add(request)
    while request.is_generating or request.num_pending:  # the first turn: 3 tokens, one sampled
        step(scheduler, runner)
    assert len(request.token_ids) == 4
    request.append(TurnInput([4, 5, 6], hold=True))  # a user item; its reply's input follows
    assert request.num_pending == 0 and chunks_of(step(scheduler, runner)[0]) == []
    request.append(TurnInput([7, 8], sampling=SamplingParams(temperature=0.0, max_tokens=1)))
    plan, outputs = step(scheduler, runner)
    assert chunks_of(plan) == [("s", 4, 5)] and len(tokens_of(outputs)) == 1


def test_sampling_turn_without_new_tokens_is_rejected_or_generates():
    # Known bug: with every position computed nothing is pending, so the sample never happens
    # and the session stays "generating" forever (further turns are refused).
    scheduler, runner, _ = make_scheduler()
    request = thinker("s", 0.0, [1, 2, 3], max_tokens=None, close=False)
    scheduler.add(request)
    step(scheduler, runner)  # context computed, idle
    try:
        request.append(TurnInput([], sampling=SamplingParams(temperature=0.0, max_tokens=2)))
    except ValueError:
        return  # rejecting the empty turn is fine
    outputs = [o for _ in range(5) for o in step(scheduler, runner)[1]]
    assert tokens_of(outputs), "generating, yet never scheduled: the session hangs"


# ---------------------------------------------------------------- the engine

class Collector:
    def __init__(self) -> None:
        self.outputs = []
        self.lock = threading.Lock()

    def __call__(self, outputs) -> None:
        with self.lock:
            self.outputs.extend(outputs)

    def errors(self, rid: str) -> list[str]:
        return [o.error for o in self.outputs if o.request_id == rid and o.error is not None]


def engine_with(runner_factory=FakeRunner, num_blocks: int = 32):
    kv = make_kv(num_blocks)
    scheduler = Scheduler(SchedulerConfig(max_num_batched_tokens=16), kv, FakeClock())
    emit = Collector()
    return StageEngine("thinker", scheduler, runner_factory(kv), emit), emit, kv


def engine_step(engine: StageEngine):
    outputs = engine.step()
    engine.scheduler.check_integrity()
    return outputs


def test_engine_applies_commands_on_step():
    engine, emit, kv = engine_with()
    request = ThinkerRequest("a", 0.0, stop_ids=frozenset(), max_position=1000)
    engine.submit(AddRequest(request))
    engine.submit(AppendInput("a", TurnInput([1, 2, 3], sampling=SamplingParams(temperature=0.0, max_tokens=50))))
    assert "a" not in engine.scheduler.requests  # nothing happens until the engine thread steps
    outputs = engine_step(engine)  # add + append applied, prefill ran, a token sampled
    assert [o.payload.token_id for o in outputs] == solo_tokens([1, 2, 3], 1)
    engine_step(engine)
    engine.submit(StopGeneration("a", keep_tokens=2))  # barge-in: keep only what was heard
    engine_step(engine)
    assert not request.is_generating and list(request.token_ids) == [1, 2] and kv.table("a").num_tokens == 2
    engine.submit(AbortRequest("a"))
    assert engine_step(engine) == [] and "a" not in engine.scheduler.requests and kv.num_used_blocks == 0
    assert emit.outputs == []  # step returns outputs; only command errors go through emit


def test_engine_integrates_the_blocks_it_holds_over_the_schedulers_clock():
    engine, _, kv = engine_with()
    clock = engine.scheduler.clock
    engine.submit(AddRequest(thinker("a", 0.0, list(range(7)), max_tokens=1, close=False)))
    engine_step(engine)  # 7 positions prefilled, one token sampled: 2 blocks from here on
    assert kv.num_used_blocks == 2 and engine.status().kv_block_seconds == 0.0
    clock.t = 1.5
    engine_step(engine)
    clock.t = 2.0
    engine.submit(AbortRequest("a"))
    engine_step(engine)  # 2 blocks held until the abort, none after it
    clock.t = 5.0
    engine_step(engine)
    assert engine.status().kv_block_seconds == pytest.approx(2 * 2.0)


def test_blocks_freed_by_a_command_while_the_engine_waits_idle_count_until_the_command():
    engine, _, kv = engine_with()
    clock = engine.scheduler.clock
    engine.submit(AddRequest(thinker("a", 0.0, list(range(7)), max_tokens=1, close=False)))
    engine_step(engine)  # 2 blocks held from here on
    clock.t = 2.0
    engine.submit(AbortRequest("a"))
    engine._apply_commands(wait_s=0.01)  # the idle loop's wait, outside a step
    assert kv.num_used_blocks == 0
    clock.t = 5.0
    engine_step(engine)
    assert engine.status().kv_block_seconds == pytest.approx(2 * 2.0)


def test_engine_turns_a_rejected_command_into_an_error_output_and_goes_on():
    engine, emit, _ = engine_with()
    engine.submit(AddRequest(thinker("a", 0.0, [1, 2, 3], max_tokens=4, close=False)))
    engine_step(engine)  # a is generating
    engine.submit(AppendInput("a", TurnInput([4, 5])))  # a turn while generating: rejected
    engine.submit(AddRequest(thinker("a", 1.0, [1], max_tokens=1)))  # duplicate id: rejected
    outputs = engine_step(engine)
    assert emit.errors("a") == ["a turn is still generating; cancel it before appending",
                                "request 'a' already exists"]
    assert [o.payload is not None for o in outputs] == [True]  # a keeps generating
    assert engine.scheduler.requests["a"].is_generating


def test_engine_survives_stop_generation_for_a_request_that_cannot_stop():
    # Known bug: TalkerRequest has no stop_generation; the AttributeError escapes step()
    # (and would end the engine thread's run loop).
    engine, emit, _ = engine_with()
    engine.submit(AddRequest(TalkerRequest("t", 0.0, 3, SamplingParams(temperature=0.0), bos_id=0)))
    engine_step(engine)
    engine.submit(StopGeneration("t"))
    engine_step(engine)  # must not raise
    engine.submit(AddRequest(thinker("next", 1.0, [5, 6], max_tokens=1)))
    assert [o.payload.token_id for o in engine_step(engine) if o.payload] == solo_tokens([5, 6], 1)


def test_engine_rejects_a_negative_keep_tokens():
    # Known bug: keep_tokens is not validated; -1 slices from the end and sets num_computed to -1,
    # so the next chunk starts at position -1 (KV written to a wrong slot, RoPE of the last position).
    engine, emit, kv = engine_with()
    engine.submit(AddRequest(thinker("a", 0.0, [1, 2, 3, 4, 5], max_tokens=10, close=False)))
    engine_step(engine)
    engine_step(engine)  # 7 tokens known, 6 computed
    engine.submit(StopGeneration("a", keep_tokens=-1))
    engine_step(engine)
    request = engine.scheduler.requests["a"]
    assert emit.errors("a"), "a negative keep_tokens should be an error output"
    assert request.num_computed >= 0 and len(request.token_ids) >= 6


class FailingRunner(FakeRunner):
    """Raises whenever request 'bad' is in the batch."""

    def execute(self, plan: SchedulerPlan) -> RunnerOutput:
        if any(c.request.request_id == "bad" for c in plan.chunks):
            raise RuntimeError("kernel exploded")
        return super().execute(plan)


def test_engine_fails_the_batch_of_a_raising_runner_and_goes_on():
    engine, _, kv = engine_with(FailingRunner)
    engine.submit(AddRequest(thinker("good", 0.0, [1, 2], max_tokens=2)))
    engine.submit(AddRequest(thinker("bad", 1.0, [3, 4], max_tokens=2)))
    outputs = engine_step(engine)  # one batch with both: both fail
    assert {(o.request_id, o.error, o.is_finished) for o in outputs} == {
        ("good", "thinker failed: kernel exploded", True), ("bad", "thinker failed: kernel exploded", True)}
    assert engine.scheduler.requests == {} and kv.num_used_blocks == 0
    engine.submit(AddRequest(thinker("next", 2.0, [5, 6], max_tokens=2)))
    outputs = [o for _ in range(4) for o in engine_step(engine)]  # the engine still serves
    assert [o.payload.token_id for o in outputs if o.payload] == solo_tokens([5, 6], 2)
    assert outputs[-1].is_finished and outputs[-1].error is None


class GatedThinkerRunner(ThinkerRunner):
    """Holds its first batch until `gate` is set, and records every batch size."""

    def __init__(self, model, kv) -> None:
        super().__init__(model, kv)
        self.gate = threading.Event()
        self.batch_sizes: list[int] = []

    def execute(self, plan: SchedulerPlan) -> RunnerOutput:
        assert self.gate.wait(timeout=10)
        self.batch_sizes.append(len(plan.chunks))
        return super().execute(plan)


def test_engine_thread_runs_four_requests_concurrently_with_a_real_model():
    torch.manual_seed(0)
    config = DecoderConfig(vocab_size=300, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16,
                           intermediate_size=128, max_position=256)
    model = LlamaForCausalLM(config)
    init_deterministic(model, seed=0)
    kv = KVCacheManager(KVPoolConfig(num_blocks=24, num_layers=2, num_kv_heads=2, head_dim=16, block_size=BLOCK))
    scheduler = Scheduler(SchedulerConfig(max_num_batched_tokens=8), kv, FakeClock())
    done, finished = threading.Event(), []
    emitted = Collector()

    def emit(outputs):
        emitted(outputs)
        finished.extend(o.request_id for o in outputs if o.is_finished)
        if len(finished) == 4:
            done.set()

    runner = GatedThinkerRunner(model, kv)
    engine = StageEngine("thinker", scheduler, runner, emit)
    engine.start()
    try:
        for i in range(4):  # from this thread: prompts of 5..8 tokens, 6 generated tokens each
            rid = f"r{i}"
            engine.submit(AddRequest(ThinkerRequest(rid, float(i), stop_ids=frozenset(), max_position=256)))
            sampling = SamplingParams(temperature=0.8, top_k=20, max_tokens=6, seed=i)
            engine.submit(AppendInput(rid, TurnInput(list(range(10 + i, 15 + 2 * i)), sampling=sampling), close=True))
        runner.gate.set()  # the engine's first batch (whatever it had picked up) may run now
        assert done.wait(timeout=15)
    finally:
        engine.stop()
    assert sorted(finished) == ["r0", "r1", "r2", "r3"]
    for i in range(4):
        steps = [o.payload for o in emitted.outputs if o.request_id == f"r{i}" and o.payload is not None]
        assert len(steps) == 6 and steps[-1].finish_reason == "length"
    assert not any(o.error for o in emitted.outputs)
    assert engine.stats.num_steps == len(runner.batch_sizes)
    assert max(runner.batch_sizes) > 1  # requests really shared steps
    assert kv.num_used_blocks == 0 and scheduler.requests == {}
    kv.check_integrity()


class ThreadCountingRunner(FakeRunner):
    """Records how many intra-op threads torch uses while each batch runs."""

    def __init__(self, kv: KVCacheManager) -> None:
        super().__init__(kv)
        self.threads: list[int] = []

    def execute(self, plan: SchedulerPlan) -> RunnerOutput:
        self.threads.append(torch.get_num_threads())
        return super().execute(plan)


def test_an_engine_computes_with_its_own_thread_count_and_leaves_the_others_alone():
    kv = make_kv(32)
    runner, emit, done = ThreadCountingRunner(kv), Collector(), threading.Event()
    engine = StageEngine("talker", Scheduler(SchedulerConfig(), kv, FakeClock()), runner,
                         lambda outputs: (emit(outputs), any(o.is_finished for o in outputs) and done.set()),
                         num_threads=1)
    process_threads = torch.get_num_threads()
    assert process_threads > 1, "needs a process default above one thread to tell the settings apart"
    engine.start()
    try:
        engine.submit(AddRequest(thinker("r", 0.0, [5, 6, 7], max_tokens=3)))
        assert done.wait(timeout=10)
    finally:
        engine.stop()
    assert runner.threads and set(runner.threads) == {1}
    assert torch.get_num_threads() == process_threads
