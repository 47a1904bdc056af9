"""Replicas of a stage: a session's context stays on the thinker replica chosen at its start, other work goes
to the least-loaded replica, and a killed replica fails only its own sessions."""

from __future__ import annotations

import asyncio
import os
import signal
from types import SimpleNamespace

from orchestrator.datapath.request_id import RequestId
from orchestrator.orchestrator import Orchestrator
from orchestrator.placement.processes import ProcessPlacement
from orchestrator.placement.replica_set import ReplicaSet
from orchestrator.placement.replicated import ReplicatedPlacement
from orchestrator.session.events import TextDelta, TurnRequest
from stages.commands import AbortRequest, AddRequest, AppendInput
from stages.engine import StageStatus
from stages.plan import StageOutput
from tests.orchestrator.test_orchestrator import drain


class FakeReplica:
    """A replica handle that records the commands it gets."""

    def __init__(self, kv_blocks_free: int = 100) -> None:
        self.down_reason, self.commands, self.kv_blocks_free = None, [], kv_blocks_free

    def submit_all(self, commands) -> None:
        self.commands.extend(commands)

    def status(self) -> StageStatus:
        return StageStatus("thinker-x", 1, 0, 0, 0, self.kv_blocks_free, 0, 0.0, 0, 0, 0, 0.0, True)


def adding(request_id: str) -> AddRequest:
    return AddRequest(SimpleNamespace(request_id=request_id))


def ids(replica: FakeReplica) -> list[str]:
    return [command.request_id for command in replica.commands]


def test_a_sessions_requests_follow_its_first_to_one_replica():
    replicas = [FakeReplica(), FakeReplica()]
    thinker = ReplicaSet("thinker", replicas, sticky=True)
    a0, b0, a1 = RequestId("a", "thinker", 0), RequestId("b", "thinker", 0), RequestId("a", "duplex-thinker")
    thinker.submit_all([adding(a0), adding(b0)])  # a to 0; b to the replica holding fewer: 1
    thinker.submit_all([adding(a1), AppendInput(a0, close=True), AppendInput(b0)])
    assert ids(replicas[0]) == [a0, a1, a0] and ids(replicas[1]) == [b0, b0]
    # a's context is dropped and rebuilt: while a1 lives there, the rebuild goes where a's context was
    thinker.submit_all([AbortRequest(a0), adding(RequestId("a", "thinker", 1))])
    assert ids(replicas[0])[-2:] == [a0, "a/thinker#1"]


def test_a_session_with_nothing_left_on_its_replica_is_placed_afresh_by_load_and_free_kv():
    replicas = [FakeReplica(kv_blocks_free=10), FakeReplica(kv_blocks_free=90)]
    thinker = ReplicaSet("thinker", replicas, sticky=True)
    first = RequestId("a", "thinker", 0)
    thinker.submit(adding(first))
    assert thinker.replica_of(first) == 1  # equally loaded: the one with more free KV
    thinker.track_outputs([StageOutput(first, is_finished=True)])
    assert thinker.replica_of(first) is None
    replicas[1].kv_blocks_free = 5
    thinker.submit(adding(RequestId("a", "thinker", 1)))
    assert thinker.replica_of(RequestId("a", "thinker", 1)) == 0


def test_per_turn_work_goes_to_the_least_loaded_replica_and_skips_a_down_one():
    replicas = [FakeReplica(), FakeReplica(), FakeReplica()]
    vocoder = ReplicaSet("vocoder", replicas, sticky=False)
    turns = [RequestId("a", "vocoder", turn) for turn in range(3)]
    vocoder.submit_all([adding(turn) for turn in turns])  # same session, not sticky: spread
    assert [vocoder.replica_of(turn) for turn in turns] == [0, 1, 2]
    vocoder.track_outputs([StageOutput(turns[1], error="boom")])
    replicas[0].down_reason = "its process exited"
    vocoder.submit(adding(RequestId("b", "vocoder", 0)))
    assert vocoder.replica_of(RequestId("b", "vocoder", 0)) == 1  # 0 is down, 2 still holds a request
    assert vocoder.down_reason is None
    assert vocoder.status().name == "vocoder" and vocoder.status().num_requests == 2  # the serving two


async def turns_on_two_replicas(pipeline, text_turns: int, inner=None):
    """Four sessions at once, `text_turns` turns each, on 2 thinker and 2 vocoder replicas (processes, unless
    `inner` places them); the thinker replica each session's context was resident on after each round."""
    placement = ReplicatedPlacement(inner or ProcessPlacement(torch_threads=1), {"thinker": 2, "vocoder": 2})
    orch = Orchestrator(pipeline, placement=placement)
    await orch.start()
    try:
        sessions = [orch.open_session(f"s{i}") for i in range(4)]
        homes, results = [], []
        for turn in range(text_turns):
            await asyncio.gather(*(s.add_user_item(f"u{turn}", text=f"Turn {turn} of {s.session_id}.") for s in sessions))
            results += await asyncio.gather(*(drain(s.start_turn(TurnRequest(max_tokens=4))) for s in sessions))
            await orch.wait_idle()
            replicas = placement.sets["thinker"].replicas
            homes.append([[i for i, r in enumerate(replicas) if s.context.thinker_id in r.status().resident_tokens]
                          for s in sessions])
        vocoder_steps = [r.status().num_steps for r in placement.sets["vocoder"].replicas]
        return homes, results, vocoder_steps
    finally:
        await orch.stop()


def test_two_thinker_replicas_keep_each_session_on_its_replica_across_turns(pipeline):
    homes, results, vocoder_steps = asyncio.run(turns_on_two_replicas(pipeline, text_turns=2))
    assert all(done.error is None and done.usage.audio_samples > 0 for _, done in results)
    first, second = homes
    assert all(len(home) == 1 for home in first)  # each context resident on exactly one replica
    assert first == second  # and on the same one after the next turn
    assert sorted(home[0] for home in first) == [0, 0, 1, 1]  # sessions spread by load
    assert all(steps > 0 for steps in vocoder_steps)  # per-turn work reached both vocoder replicas


async def kill_one_replica_mid_turn(pipeline, inner=None):
    placement = ReplicatedPlacement(inner or ProcessPlacement(torch_threads=1), {"thinker": 2})
    orch = Orchestrator(pipeline, placement=placement)
    await orch.start()
    try:
        sessions = [orch.open_session(f"s{i}") for i in range(2)]
        for s in sessions:
            await s.add_user_item("u0", text="Tell me a long story.")
        turns = [s.start_turn(TurnRequest(max_tokens=400, ignore_eos=True, speak=False)) for s in sessions]
        for turn in turns:  # both are generating
            while not isinstance(await asyncio.wait_for(turn.events.get(), 30), TextDelta):
                pass
        thinker = placement.sets["thinker"]
        victim = thinker.replica_of(sessions[0].context.thinker_id)
        os.kill(thinker.replicas[victim].process.pid, signal.SIGKILL)
        dones = [done for _, done in await asyncio.gather(*(drain(turn) for turn in turns))]
        return victim, thinker.replica_of(sessions[1].context.thinker_id), dones
    finally:
        await orch.stop()


def test_a_killed_replica_fails_only_its_sessions(pipeline):
    victim, survivor, (lost, kept) = asyncio.run(kill_one_replica_mid_turn(pipeline))
    assert survivor == 1 - victim
    assert lost.status == "failed" and f"stage thinker-{victim} is down" in lost.error
    assert kept.status == "incomplete" and kept.error is None and kept.usage.text_tokens == 400
