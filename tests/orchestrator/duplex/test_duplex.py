"""Full-duplex streams on real engine threads: every frame answered in order, limits kept per stream."""

from __future__ import annotations

import asyncio
import dataclasses

import numpy as np

from orchestrator.config import DuplexConfig
from orchestrator.duplex.stream import FrameAnswered, StreamFailed
from orchestrator.orchestrator import Orchestrator
from orchestrator.placement.base import LocalPlacement
from stages.commands import AppendInput

FRAME_16K = 1280 * 2  # 160 ms at 16 kHz


def with_duplex(pipeline, max_position: int | None = None, **duplex):
    thinker = pipeline.thinker
    if max_position is not None:
        thinker = dataclasses.replace(thinker, model=dataclasses.replace(thinker.model, max_position=max_position))
    return dataclasses.replace(pipeline, thinker=thinker, duplex=DuplexConfig(**duplex))


async def stream_audio(orch: Orchestrator, session_id: str, audio: np.ndarray, events: list, frames: int) -> None:
    """Push `frames` frames of audio, one per frame period, as a real-time client would."""
    stream = orch.duplex.streams[session_id]
    audio = np.resize(audio, frames * FRAME_16K)  # looped
    for i in range(frames):
        if not stream.is_open:
            return
        stream.push(audio[i * FRAME_16K : (i + 1) * FRAME_16K])
        await asyncio.sleep(0.16)


def open_streams(orch: Orchestrator, *names: str) -> dict[str, list]:
    """Open a session and its duplex stream per name; each stream's events collect in its list."""
    events = {name: [] for name in names}
    for name in names:
        orch.open_session(name)
        orch.sessions[name].open_duplex(events[name].append)
    return events


async def wait_for(predicate, timeout_s: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


def test_every_frame_is_answered_in_order_with_its_latency(pipeline, speech_16k):
    async def scenario():
        orch = Orchestrator(with_duplex(pipeline, frame_ms=160, tokens_per_frame=2))
        await orch.start()
        try:
            events = open_streams(orch, "a", "b")
            await asyncio.gather(*(stream_audio(orch, n, speech_16k, events[n], 8) for n in events))
            await wait_for(lambda: all(len(e) == 8 for e in events.values()))
            for got in events.values():
                assert [e.index for e in got] == list(range(8))
                assert all(isinstance(e, FrameAnswered) and 1 <= len(e.token_ids) <= 2 for e in got)
                assert all(0 < e.latency_s < 5 for e in got)
                assert [e.context_tokens for e in got] == sorted(e.context_tokens for e in got)
            orch.close_session("a")
            orch.close_session("b")
            await orch.wait_idle()
            assert all(s.num_requests == 0 and s.kv_blocks_used == 0 for s in orch.status())
        finally:
            await orch.stop()

    asyncio.run(scenario())


def test_an_unbounded_stream_at_the_maximum_length_fails_alone(pipeline, speech_16k):
    async def scenario():
        # 2 encoder frames + 1 token per frame: the 64-position context holds 21 frames
        orch = Orchestrator(with_duplex(pipeline, max_position=64, frame_ms=160, tokens_per_frame=1))
        await orch.start()
        try:
            events = {"long": [], "late": []}

            async def late_start():
                await asyncio.sleep(1.6)  # co-resident when "long" fails, 10 frames behind it
                orch.open_session("late")
                orch.sessions["late"].open_duplex(events["late"].append)
                await stream_audio(orch, "late", speech_16k, events["late"], 16)

            orch.open_session("long")
            orch.sessions["long"].open_duplex(events["long"].append)
            await asyncio.gather(stream_audio(orch, "long", speech_16k, events["long"], 30), late_start())
            await wait_for(lambda: len(events["late"]) == 16)
            assert isinstance(events["long"][-1], StreamFailed)
            assert events["long"][-1].code == "context_length_exceeded"
            assert [e.index for e in events["long"][:-1]] == list(range(21))
            assert [e.index for e in events["late"]] == list(range(16))
            assert all(isinstance(e, FrameAnswered) for e in events["late"])
            thinker = next(s for s in orch.status() if s.name == "thinker")
            assert thinker.num_requests == 3  # two sessions' turn contexts and "late"'s stream: "long"'s is gone
        finally:
            await orch.stop()

    asyncio.run(scenario())


class RecordingPlacement(LocalPlacement):
    """Local engines whose command batches are recorded as (stage kind, commands)."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[tuple[str, tuple]] = []

    def start(self, specs, sink, clock, view=None):
        return {kind: self._recording(kind, handle) for kind, handle in super().start(specs, sink, clock, view).items()}

    def _recording(self, kind, handle):
        placement = self

        class Recorder:
            def submit(self, command):
                self.submit_all((command,))

            def submit_all(self, commands):
                placement.batches.append((kind, tuple(commands)))
                handle.submit_all(commands)

            def status(self):
                return handle.status()

        return Recorder()


def test_frames_of_one_tick_reach_each_stage_as_one_batch(pipeline, speech_16k):
    async def scenario():
        placement = RecordingPlacement()
        orch = Orchestrator(with_duplex(pipeline, frame_ms=160, tokens_per_frame=1), placement=placement)
        await orch.start()
        try:
            events = open_streams(orch, "a", "b")
            for i in range(4):
                for name in events:  # both streams' audio arrives before the same tick
                    orch.duplex.streams[name].push(speech_16k[i * FRAME_16K : (i + 1) * FRAME_16K])
                await asyncio.sleep(0.16)
            await wait_for(lambda: all(len(e) == 4 for e in events.values()))
            frames = [(kind, batch) for kind, batch in placement.batches
                      if all(isinstance(c, AppendInput) and c.request_id.role.startswith("duplex") for c in batch)]
            encoder = [batch for kind, batch in frames if kind == "encoder"]
            thinker = [batch for kind, batch in frames if kind == "thinker"]
            assert len(encoder) == len(thinker) >= 2  # a tick's encoder batch becomes one thinker batch
            for batch in encoder + thinker:
                sessions = [c.request_id.split("/")[0] for c in batch]
                assert sessions.count("a") == sessions.count("b") >= 1
            assert sum(len(batch) for batch in thinker) == 8
        finally:
            await orch.stop()

    asyncio.run(scenario())
