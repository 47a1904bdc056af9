"""The batch planner and the preemptor on their own, on a fake clock: a round's chunks from a given order,
and whom a shortfall preempts."""

import math

import pytest

from stages.batch_planner import BatchPlanner
from stages.config import SchedulerConfig
from stages.kv_residency import KVResidency
from stages.no_kv_residency import NoKVResidency
from stages.plan import ScheduledChunk, SchedulerPlan
from stages.preemptor import Preemptor
from stages.requests import RequestStatus
from tests.stages.scheduler_harness import FakeClock, make_kv, thinker


def planner_for(residency, requests: dict, max_tokens: int = 8, max_seqs: int = 8, decode_reserve: bool = False):
    """A planner over `residency`, its preemptor over `requests`, and the requests it failed (id, message)."""
    failed = []
    preemptor = Preemptor(requests, residency)
    config = SchedulerConfig(max_num_seqs=max_seqs, max_num_batched_tokens=max_tokens)
    planner = BatchPlanner(config, residency, preemptor, FakeClock(), lambda r, m: failed.append((r.request_id, m)),
                           decode_reserve)
    return planner, preemptor, failed


def chunks(plan: SchedulerPlan) -> list[tuple[str, int, int]]:
    return [(c.request.request_id, c.start, c.num_tokens) for c in plan.chunks]


def resident(requests: dict, residency: KVResidency, rid: str, tokens: int, pending: bool, last: float = 0.0):
    """An admitted request holding the KV of `tokens` positions, with work pending or idle."""
    request = thinker(rid, 0.0, list(range(tokens + 1 if pending else tokens)), max_tokens=None, close=False)
    residency.reserve(request, tokens)
    request.num_computed, request.status, request.last_scheduled_time = tokens, RequestStatus.RUNNING, last
    requests[rid] = request
    return request


def test_the_order_is_walked_within_the_token_and_sequence_budgets_in_chunks():
    requests = {rid: thinker(rid, 0.0, [1] * n, None, close=False) for rid, n in (("a", 5), ("b", 6), ("c", 2))}
    planner, _, failed = planner_for(NoKVResidency(), requests, max_tokens=8, max_seqs=2)
    plan = SchedulerPlan(now=3.0)
    planner.plan([requests["b"], requests["a"], requests["c"]], plan)
    assert chunks(plan) == [("b", 0, 6), ("a", 0, 2)]  # b whole, a's prefill chunked; c: two seqs already
    running, waiting = RequestStatus.RUNNING, RequestStatus.WAITING
    assert [r.status for r in requests.values()] == [running, running, waiting]
    assert requests["a"].last_scheduled_time == requests["b"].last_scheduled_time == 3.0 and failed == []
    planner.plan([], plan)
    assert len(plan.chunks) == 2  # nothing ordered, nothing planned


@pytest.mark.parametrize("decode_reserve, planned", [
    (False, [("new", 0, 8)]),                                       # the prompt takes the round: no reply decodes
    (True, [("new", 0, 6), ("r1", 4, 1), ("r2", 4, 1)]),            # a token left for each reply after it
])
def test_a_prefill_ordered_first_leaves_the_replies_after_it_their_next_position(decode_reserve, planned):
    residency, requests = NoKVResidency(), {}
    replies = [resident_without_kv(requests, rid) for rid in ("r1", "r2")]
    new = requests["new"] = thinker("new", 0.0, [3] * 20, max_tokens=None, close=False)
    planner, _, _ = planner_for(residency, requests, max_tokens=8, decode_reserve=decode_reserve)
    plan = SchedulerPlan()
    planner.plan([new, *replies], plan)
    assert chunks(plan) == planned


def test_the_decode_reserve_counts_only_the_replies_the_sequence_budget_leaves_room_for():
    residency, requests = NoKVResidency(), {}
    replies = [resident_without_kv(requests, rid) for rid in ("r1", "r2", "r3")]
    new = requests["new"] = thinker("new", 0.0, [3] * 20, max_tokens=None, close=False)
    planner, _, _ = planner_for(residency, requests, max_tokens=8, max_seqs=2, decode_reserve=True)
    plan = SchedulerPlan()
    planner.plan([new, *replies], plan)
    assert chunks(plan) == [("new", 0, 7), ("r1", 4, 1)]  # one sequence left after the prompt: one token kept


def test_a_prefill_cap_bounds_the_rounds_chunks_of_many_positions_in_all_not_its_single_positions():
    residency, requests = NoKVResidency(), {}
    replies = [resident_without_kv(requests, rid) for rid in ("r1", "r2")]
    for rid in ("p", "q"):
        requests[rid] = thinker(rid, 0.0, [3] * 5, max_tokens=None, close=False)
    planner, _, _ = planner_for(residency, requests, max_tokens=16)
    plan = SchedulerPlan()
    planner.plan([requests["p"], replies[0], requests["q"], replies[1]], plan, prefill_cap=7)
    assert chunks(plan) == [("p", 0, 5), ("r1", 4, 1), ("q", 0, 2), ("r2", 4, 1)]


def resident_without_kv(requests: dict, rid: str):
    """An admitted reply at a stage without KV: 4 positions computed, its next one pending."""
    request = thinker(rid, 0.0, list(range(5)), max_tokens=None, close=False)
    request.num_computed, request.status = 4, RequestStatus.RUNNING
    requests[rid] = request
    return request


def test_a_request_that_can_never_fit_fails_and_the_walk_goes_on():
    kv = make_kv(2)  # 8 tokens of KV
    requests = {rid: thinker(rid, 0.0, [1] * n, None, close=False) for rid, n in (("big", 9), ("ok", 3))}
    planner, _, failed = planner_for(KVResidency(kv), requests)
    plan = SchedulerPlan()
    planner.plan(list(requests.values()), plan)
    assert failed == [("big", "needs 9 tokens of KV; the pool holds 8")] and chunks(plan) == [("ok", 0, 3)]
    assert kv.num_blocks_held("ok") == 1 and kv.num_blocks_held("big") == 0  # reserved before planned


@pytest.mark.parametrize("run_ordered, planned", [(True, [("run", 4, 1)]), (False, [("new", 0, 4)])])
def test_a_waiting_request_leaves_a_block_of_growth_to_each_admitted_one_still_to_plan(run_ordered, planned):
    kv = make_kv(2)
    residency, requests = KVResidency(kv), {}
    running = resident(requests, residency, "run", 4, pending=True)  # its next position needs the last block
    new = requests["new"] = thinker("new", 0.0, [3] * 4, max_tokens=None, close=False)
    planner, _, _ = planner_for(residency, requests)
    plan = SchedulerPlan()
    planner.plan([new, running] if run_ordered else [new], plan)  # new first: it takes the block only if run
    assert chunks(plan) == planned and plan.preempted == []          # is not to be planned after it


def test_a_waiting_request_leaves_no_room_for_a_running_one_whose_next_position_fits_its_last_block():
    kv = make_kv(2)
    residency, requests = KVResidency(kv), {}
    running = resident(requests, residency, "run", 3, pending=True)  # position 3 goes into its first block
    new = requests["new"] = thinker("new", 0.0, [3] * 4, max_tokens=None, close=False)
    planner, _, _ = planner_for(residency, requests)
    plan = SchedulerPlan()
    planner.plan([new, running], plan)
    assert chunks(plan) == [("new", 0, 4), ("run", 3, 1)] and plan.preempted == []


@pytest.mark.parametrize("preemptions, planned", [(0, [("new", 0, 4), ("run", 3, 1)]), (1, [("run", 3, 1)])])
def test_a_preempted_request_leaves_a_block_to_every_admitted_one(preemptions, planned):
    kv = make_kv(2)
    residency, requests = KVResidency(kv), {}
    running = resident(requests, residency, "run", 3, pending=True)  # grows into no new block this round
    new = requests["new"] = thinker("new", 0.0, [3] * 4, max_tokens=None, close=False)
    new.num_preemptions = preemptions  # a recomputation would be the next victim of run's growth: it waits
    planner, _, _ = planner_for(residency, requests)
    plan = SchedulerPlan()
    planner.plan([new, running], plan)
    assert chunks(plan) == planned and plan.preempted == []


def test_idle_residents_go_first_least_recently_scheduled_first():
    kv = make_kv(4)
    residency, requests = KVResidency(kv), {}
    resident(requests, residency, "recent", 4, pending=False, last=2.0)
    resident(requests, residency, "old", 4, pending=False, last=1.0)
    active = resident(requests, residency, "active", 8, pending=True)
    preemptor = Preemptor(requests, residency)
    waiting = thinker("w", 0.0, [1] * 4, max_tokens=None)
    assert preemptor.victims(waiting, [], SchedulerPlan(), 1) == [requests["old"]]
    assert preemptor.victims(waiting, [], SchedulerPlan(), 2) == [requests["old"], requests["recent"]]
    assert preemptor.victims(waiting, [], SchedulerPlan(), 3) is None  # a waiting request never takes an active one
    assert preemptor.victims(active, [active], SchedulerPlan(), 3) is None  # the asking request is never its own victim


def test_a_running_request_may_preempt_active_ones_held_first_then_from_the_end_of_the_order():
    kv = make_kv(6)
    residency, requests = KVResidency(kv), {}
    first, second, held = (resident(requests, residency, rid, 8, pending=True) for rid in ("first", "second", "held"))
    asking = thinker("asking", 0.0, [1] * 4, max_tokens=None)
    asking.status = RequestStatus.RUNNING
    preemptor = Preemptor(requests, residency)
    order = [asking, first, second]  # held was left out of the order
    assert preemptor.victims(asking, order, SchedulerPlan(), 2) == [held]
    assert preemptor.victims(asking, order, SchedulerPlan(), 3) == [held, second]
    plan = SchedulerPlan()
    plan.chunks.append(ScheduledChunk(second, 8, 1))  # planned this round: not a victim
    assert preemptor.victims(asking, order, plan, 3) == [held, first]


def test_active_victims_are_the_latest_arrivals_first_whatever_the_order():
    kv = make_kv(6)
    residency, requests = KVResidency(kv), {}
    first, second, third = (resident(requests, residency, rid, 8, pending=True) for rid in ("first", "second", "third"))
    for arrival, request in enumerate((first, second, third)):
        request.arrival_time = float(arrival)
    asking = thinker("asking", 0.0, [1] * 4, max_tokens=None)
    asking.status = RequestStatus.RUNNING
    urgency_order = [asking, third, second, first]  # the latest arrival is the most urgent
    assert Preemptor(requests, residency).victims(asking, urgency_order, SchedulerPlan(), 3) == [third, second]


def test_a_patient_prefill_waits_for_the_decoders_in_the_order_and_a_decode_does_not():
    kv = make_kv(6)
    residency, requests = KVResidency(kv), {}
    decoding, held = (resident(requests, residency, rid, 8, pending=True) for rid in ("decoding", "held"))
    new_turn = resident(requests, residency, "new_turn", 4, pending=False)
    new_turn.token_ids.extend([7] * 6)  # six positions of a new turn to prefill
    preemptor = Preemptor(requests, residency, prefill_patience_s=math.inf)
    assert preemptor.victims(new_turn, [new_turn, decoding], SchedulerPlan(), 2) is None  # decoding will end its reply
    assert preemptor.victims(new_turn, [new_turn], SchedulerPlan(), 2) == [decoding]  # both held, nobody decoding
    growing = thinker("growing", 0.0, [1] * 4, max_tokens=None)
    growing.status = RequestStatus.RUNNING
    growing.num_computed = 3  # one position pending: a decode, which may preempt
    assert preemptor.victims(growing, [growing, decoding], SchedulerPlan(), 2) == [held]
    assert Preemptor(requests, residency).victims(new_turn, [new_turn, decoding], SchedulerPlan(), 2) == [held]


def test_a_new_turn_waits_for_the_decoders_only_its_patience_and_a_recomputation_for_as_long_as_they_decode():
    kv = make_kv(6)
    residency, requests = KVResidency(kv), {}
    decoding, held = (resident(requests, residency, rid, 8, pending=True) for rid in ("decoding", "held"))
    new_turn = resident(requests, residency, "new_turn", 4, pending=False)
    new_turn.token_ids.extend([7] * 6)
    new_turn.ready_since = 10.0
    preemptor, order = Preemptor(requests, residency, prefill_patience_s=0.5), [new_turn, decoding]
    assert preemptor.victims(new_turn, order, SchedulerPlan(now=10.49), 2) is None
    assert preemptor.victims(new_turn, order, SchedulerPlan(now=10.5), 2) == [held]  # out of patience: as FCFS
    new_turn.num_preemptions = 1  # a recomputation: under pressure it would make the next one
    assert preemptor.victims(new_turn, order, SchedulerPlan(now=60.0), 2) is None


def test_a_decoder_that_could_not_be_planned_does_not_make_a_prefill_wait():
    kv = make_kv(6)
    residency, requests = KVResidency(kv), {}
    stuck = resident(requests, residency, "stuck", 8, pending=True)
    new_turn = resident(requests, residency, "new_turn", 4, pending=False)
    new_turn.token_ids.extend([7] * 6)
    preemptor, plan = Preemptor(requests, residency, prefill_patience_s=math.inf), SchedulerPlan()
    assert preemptor.victims(new_turn, [stuck, new_turn], plan, 2) == [stuck]  # waiting would wait forever
    plan.chunks.append(ScheduledChunk(stuck, 8, 1))  # planned before it this round: decoding, so it waits
    assert preemptor.victims(new_turn, [stuck, new_turn], plan, 2) is None
    assert preemptor.victims(new_turn, [new_turn, stuck], SchedulerPlan(), 2) is None  # still to plan: it waits
    residency.is_stranded = lambda request_id: request_id == "stuck"  # its KV on the host, no room to load it
    assert preemptor.victims(new_turn, [new_turn, stuck], SchedulerPlan(), 2) == [stuck]


def test_preempting_frees_the_kv_and_sends_the_request_back_to_wait():
    kv = make_kv(4)
    residency, requests = KVResidency(kv), {}
    victim = resident(requests, residency, "v", 8, pending=True)
    preemptor, plan = Preemptor(requests, residency), SchedulerPlan()
    preemptor.preempt(victim, plan)
    assert (victim.status, victim.num_computed, kv.num_blocks_held("v")) == (RequestStatus.WAITING, 0, 0)
    assert plan.preempted == ["v"] and preemptor.num_preemptions == victim.num_preemptions == 1 and "v" in requests
    residency.check_integrity(requests.values())
