"""Stage engines in processes of their own: same turns as on threads, clean failures."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
from pathlib import Path

import pytest

from orchestrator.events import AudioDelta, TextDelta
from orchestrator.orchestrator import Orchestrator
from orchestrator.placement import LocalPlacement
from orchestrator.process_placement import ProcessPlacement
from orchestrator.turn import TurnRequest
from tests.orchestrator.test_orchestrator import drain


def run(coro):
    return asyncio.run(coro)


async def spoken_turn(pipeline, speech, placement):
    orch = Orchestrator(pipeline, placement=placement)
    await orch.start()
    try:
        orch.open_session("s")
        orch.add_user_item("s", "u0", speech)
        events, done = await drain(orch.start_turn("s", TurnRequest(max_tokens=8, ignore_eos=True)))
        orch.close_session("s")
        await orch.wait_idle()
        return events, done, [s.num_requests for s in orch.status()], [s.kv_blocks_used for s in orch.status()]
    finally:
        await orch.stop()


def test_a_turn_on_stage_processes_equals_the_same_turn_on_threads(pipeline, speech_16k):
    on_threads = run(spoken_turn(pipeline, speech_16k, LocalPlacement()))
    on_processes = run(spoken_turn(pipeline, speech_16k, ProcessPlacement(torch_threads=1)))
    for events, done, requests, blocks in (on_threads, on_processes):
        assert done.status == "incomplete" and done.usage.text_tokens == 8  # stopped at max_tokens
        # closed and idle: no request and no KV block is left in any stage
        assert requests == [0, 0, 0, 0] and blocks == [0, 0, 0, 0]
    # Seeded weights and sampling: the processes compute exactly what the threads do.
    text = [[e.text for e in events if isinstance(e, TextDelta)] for events, *_ in (on_threads, on_processes)]
    audio = [[e.pcm for e in events if isinstance(e, AudioDelta)] for events, *_ in (on_threads, on_processes)]
    assert text[0] == text[1]
    assert len(audio[0]) == len(audio[1]) > 0
    assert all((a == b).all() for a, b in zip(*audio))


def test_a_clock_other_than_monotonic_is_refused(pipeline):
    with pytest.raises(ValueError, match="time.monotonic"):
        ProcessPlacement(1).start(pipeline.stages, lambda kind, outputs: None, clock=lambda: 0.0)


def test_a_stage_that_cannot_start_fails_the_start_with_its_own_error(pipeline, tmp_path: Path):
    broken = dataclasses.replace(pipeline.talker, checkpoint=tmp_path / "missing.safetensors")
    placement = ProcessPlacement(1)

    async def scenario():
        orch = Orchestrator(dataclasses.replace(pipeline, talker=broken), placement=placement)
        await orch.start()

    with pytest.raises(FileNotFoundError, match="missing.safetensors"):
        run(scenario())
    assert placement._handles == []  # the stages that did start were stopped


def test_a_stage_process_that_dies_fails_its_turn_and_later_ones(pipeline, speech_16k):
    async def scenario():
        orch = Orchestrator(pipeline, placement=ProcessPlacement(1))
        await orch.start()
        try:
            orch.open_session("s")
            orch.add_user_item("s", "u0", speech_16k)
            turn = orch.start_turn("s", TurnRequest(max_tokens=400, ignore_eos=True))
            while not isinstance(await asyncio.wait_for(turn.events.get(), 30), AudioDelta):
                pass
            os.kill(orch.stages["talker"].process.pid, signal.SIGKILL)  # mid-reply
            _, first = await drain(turn)
            _, second = await drain(orch.start_turn("s", TurnRequest(max_tokens=4)))
            return first, second
        finally:
            await orch.stop()

    first, second = run(scenario())
    for done in (first, second):
        assert done.status == "failed"
        assert "stage talker is down" in done.error
