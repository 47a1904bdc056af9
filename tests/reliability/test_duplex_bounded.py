"""The duplex soak in short, by counting instead of timing: a windowed stream's per-frame bookkeeping, in the
thinker and encoder requests and in the orchestrator, is as large after 480 frames as after 160.
(benchmarks/duplex_soak.py measures the server's and stage processes' memory over minutes.)"""

from __future__ import annotations

import asyncio
import dataclasses

import numpy as np

from orchestrator.config import DuplexConfig
from orchestrator.duplex.stream import FrameAnswered
from orchestrator.orchestrator import Orchestrator
from stages.config import WindowSpec

FRAME_16K = 1280 * 2  # 160 ms at 16 kHz: 2 encoder frames, then 1 token
WINDOW = WindowSpec(tokens=24, sinks=4)


def windowed(pipeline):
    thinker = dataclasses.replace(pipeline.thinker, window=WINDOW)
    return dataclasses.replace(pipeline, thinker=thinker, duplex=DuplexConfig(frame_ms=160, tokens_per_frame=1))


def bookkeeping(orch: Orchestrator) -> dict[str, int]:
    """What the stream holds that could grow with its frames (read while the engines are idle)."""
    stream = orch.duplex.streams["s"]
    stages = orch.bus.stages
    thinker = stages["thinker"].scheduler.requests[stream.thinker_id]
    encoder = stages["encoder"].scheduler.requests[stream.encoder_id]
    return {
        "thinker token ids": len(thinker.token_ids) - len(thinker.forgotten),
        "thinker embedding rows": sum(len(rows) for _, rows in thinker.embed_spans),
        "thinker queued frames": thinker.num_queued_frames,
        "thinker KV blocks": stages["thinker"].scheduler.kv.num_blocks_held(stream.thinker_id),
        "encoder samples": len(encoder.audio),
        "stream frames in flight": len(stream._due) + len(stream._answering),
        "stream audio": len(stream._audio),
        "board entries": len(orch.bus.board._states) + len(orch.bus.board._next_use),
    }


def test_a_windowed_streams_bookkeeping_stops_growing_with_its_frames(pipeline, speech_16k):
    async def scenario():
        orch = Orchestrator(windowed(pipeline))
        await orch.start()
        try:
            events: list = []
            orch.open_session("s")
            stream = orch.sessions["s"].open_duplex(events.append)
            seen = []
            for goal in (160, 320, 480):  # frames arrive faster than real time, so the thinker works flat out
                stream.push(np.resize(speech_16k, 160 * FRAME_16K))
                while len(events) < goal:
                    assert all(isinstance(e, FrameAnswered) for e in events), events[-1]
                    await asyncio.sleep(0.05)
                await orch.wait_idle()
                seen.append(bookkeeping(orch))
            assert [e.index for e in events] == list(range(480))
            assert events[-1].context_tokens == 480 * 3 > 10 * (WINDOW.sinks + 2 * WINDOW.tokens)
            assert seen[2] == seen[1], seen  # after the window filled, frames add nothing
            assert seen[2]["thinker token ids"] <= 16 + 2 * WINDOW.tokens + 16 + 3  # sinks, horizon, a block, a frame
        finally:
            await orch.stop()

    asyncio.run(scenario())
