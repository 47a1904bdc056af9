"""Stage engines in processes of their own: same turns as on threads, clean failures."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from orchestrator.interaction.playback_board import NOT_STARTED, PlaybackBoard
from orchestrator.orchestrator import Orchestrator
from orchestrator.placement.base import LocalPlacement
from orchestrator.placement.interpreter_process import spawn_in_interpreter
from orchestrator.placement.processes import ProcessPlacement
from orchestrator.placement.shared_slots import SharedSlots
from orchestrator.placement.stage_handle import StageProcess
from orchestrator.placement.stage_launcher import ForkserverLauncher
from orchestrator.placement.stage_process import StageProcessArgs, StageServer
from orchestrator.placement.wire import Channel
from orchestrator.session.events import AudioDelta, TextDelta, TurnRequest
from stages.commands import AbortRequest
from stages.interaction import PlaybackState
from tests.orchestrator.test_orchestrator import drain, until_first_audio


def run(coro):
    return asyncio.run(coro)


async def spoken_turn(pipeline, speech, placement):
    orch = Orchestrator(pipeline, placement=placement)
    await orch.start()
    try:
        orch.open_session("s")
        orch.sessions["s"].add_user_item("u0", speech)
        events, done = await drain(orch.sessions["s"].start_turn(TurnRequest(max_tokens=8, ignore_eos=True)))
        orch.close_session("s")
        await orch.wait_idle()
        return events, done, [s.num_requests for s in orch.status()], [s.kv_blocks_used for s in orch.status()]
    finally:
        await orch.stop()


@pytest.fixture
def one_torch_thread():
    """The threads placement computes with this process's intra-op threads: pinned to the one each stage
    process gets, since oneDNN's blocking (so float rounding) depends on the thread count."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_a_turn_on_stage_processes_equals_the_same_turn_on_threads(pipeline, speech_16k, one_torch_thread):
    on_threads = run(spoken_turn(pipeline, speech_16k, LocalPlacement()))
    on_processes = run(spoken_turn(pipeline, speech_16k, ProcessPlacement(torch_threads=1)))
    for events, done, requests, blocks in (on_threads, on_processes):
        assert done.status == "incomplete" and done.usage.text_tokens == 8  # stopped at max_tokens
        # closed and idle: no request and no KV block is left in any stage
        assert requests == [0, 0, 0, 0] and blocks == [0, 0, 0, 0]
    # Seeded weights and sampling: the processes sample exactly the tokens the threads do, and vocode
    # the same audio up to float rounding. How it is cut into deltas depends on timing.
    text = [[e.text for e in events if isinstance(e, TextDelta)] for events, *_ in (on_threads, on_processes)]
    audio = [np.concatenate([e.pcm for e in events if isinstance(e, AudioDelta)])
             for events, *_ in (on_threads, on_processes)]
    assert text[0] == text[1]
    assert audio[0].shape == audio[1].shape and audio[0].size > 0
    assert np.allclose(audio[0], audio[1], atol=1e-4)


def test_a_clock_other_than_monotonic_is_refused(pipeline):
    with pytest.raises(ValueError, match="time.monotonic"):
        ProcessPlacement(1).start(pipeline.stages, lambda kind, outputs: None, clock=lambda: 0.0)


def test_each_stage_process_sees_the_gpus_it_is_given_and_a_cpu_stage_none(pipeline):
    placement = ProcessPlacement(1, ForkserverLauncher({"thinker": (0, 1), "vocoder": (3,)}))
    handles = placement.start(pipeline.stages, lambda kind, outputs: None, time.monotonic)
    try:  # each process reports CUDA_VISIBLE_DEVICES as its environment says before its engine is built
        seen = {name: handle.visible_devices for name, handle in handles.items()}
    finally:
        placement.stop()
    assert seen == {"encoder": "", "thinker": "0,1", "talker": "", "vocoder": "3"}


def test_a_stage_process_of_another_interpreter_starts_with_its_gpus_in_its_environment(pipeline):
    board = SharedSlots.create(1)
    args = StageProcessArgs(pipeline.vocoder, ((board, 0),), 1, logging.WARNING, gpus=(2, 5))
    process, channel = spawn_in_interpreter(Path(sys.executable), args)
    try:
        reported, started = channel.recv(), channel.recv()
        at_exec = Path(f"/proc/{process.pid}/environ").read_bytes().split(b"\0")  # the block it was exec'd with
        channel.send(("stop",))
        process.join(30)
    finally:
        if process.is_alive():
            process.terminate()
        board.close()
    assert b"CUDA_VISIBLE_DEVICES=2,5" in at_exec
    assert reported == ("devices", "2,5") and started[0] == "status" and process.exitcode == 0


def test_a_stage_that_cannot_start_fails_the_start_with_its_own_error(pipeline, tmp_path: Path):
    broken = dataclasses.replace(pipeline.talker, checkpoint=tmp_path / "missing.safetensors")
    placement = ProcessPlacement(1)

    async def scenario():
        orch = Orchestrator(dataclasses.replace(pipeline, talker=broken), placement=placement)
        await orch.start()

    with pytest.raises(FileNotFoundError, match="missing.safetensors"):
        run(scenario())
    assert placement._handles == []  # the stages that did start were stopped


def test_a_stage_process_that_dies_fails_its_turn_is_restarted_and_serves_again(pipeline, speech_16k):
    async def scenario():
        orch = Orchestrator(pipeline, placement=ProcessPlacement(1))
        await orch.start()
        try:
            session = orch.open_session("s")
            session.add_user_item("u0", speech_16k)
            turn = session.start_turn(TurnRequest(max_tokens=400, ignore_eos=True))
            await until_first_audio(turn)
            killed = orch.bus.stages["talker"].process.pid
            os.kill(killed, signal.SIGKILL)  # mid-reply
            _, first = await drain(turn)
            down = orch.bus.down()  # restarting
            await wait_until(lambda: not orch.bus.down(), timeout_s=30)
            _, second = await drain(session.start_turn(TurnRequest(max_tokens=4, ignore_eos=True)))
            return first, down, second, killed != orch.bus.stages["talker"].process.pid
        finally:
            await orch.stop()

    first, down, second, replaced = run(scenario())
    assert first.status == "failed" and "stage talker is down: its process exited (exit code -9)" in first.error
    assert list(down) == ["talker"] and "its process exited" in down["talker"]
    assert second.status == "incomplete" and second.usage.codec_frames > 0 and replaced


async def wait_until(predicate, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


class RecordingEngine:
    """Stands in for a StageEngine inside StageServer: records what the board said as each batch came."""

    name = "fake"

    def __init__(self, board: PlaybackBoard) -> None:
        self.board = board
        self.batches: list[tuple[list, PlaybackState | None]] = []

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def status(self) -> int:
        return len(self.batches)

    def submit_all(self, commands) -> None:
        self.batches.append((commands, self.board.playback("r")))


def test_a_stage_process_applies_board_changes_before_the_commands_sent_after_them():
    parent_end, child_end = multiprocessing.Pipe()
    board = PlaybackBoard(time.monotonic)
    engine = RecordingEngine(board)
    server = threading.Thread(target=StageServer(engine, Channel(child_end), board).serve)
    server.start()
    parent = Channel(parent_end)
    playing = PlaybackState(True, 5.0, 80.0)
    parent.send(("commands", [AbortRequest("r")], [("publish", "r", NOT_STARTED)]))
    parent.send(("board", [("publish", "r", playing)]))
    parent.send(("commands", [AbortRequest("r")], []))
    parent.send(("stop",))
    server.join(timeout=5)
    assert not server.is_alive()  # "stop" ends it
    assert [seen for _, seen in engine.batches] == [NOT_STARTED, playing]


def test_commands_carry_the_board_changes_each_process_has_not_seen(pipeline):
    board = PlaybackBoard(time.monotonic)
    board.record_changes()
    placement, ends = ProcessPlacement(1), []
    placement._board = board
    for kind in ("thinker", "talker"):
        parent_end, child_end = multiprocessing.Pipe()
        ends.append(child_end)
        spec = dataclasses.replace(pipeline.thinker, name=kind)
        handle = StageProcess(spec, lambda outputs: None, placement, on_death=lambda handle: None)
        handle.attach(None, Channel(parent_end))  # no process: the test reads the pipe's other end
        handle.mark_up()
        placement._handles.append(handle)
    thinker, talker = placement._handles
    board.publish("r", NOT_STARTED)
    thinker.submit(AbortRequest("r"))
    board.withdraw("r")
    talker.submit(AbortRequest("r"))
    received = [Channel(end).recv() for end in ends]
    assert received[0] == ("commands", [AbortRequest("r")], [("publish", "r", NOT_STARTED)])
    # the talker had seen neither change: both come with its first batch, in order
    assert received[1] == ("commands", [AbortRequest("r")], [("publish", "r", NOT_STARTED), ("withdraw", "r")])
    assert thinker.board_changes == [("withdraw", "r")]  # the thinker's is still to go (periodically)
    for handle in placement._handles:
        handle._stopping = True
        handle.channel.close()
