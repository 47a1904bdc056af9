"""Every session's full-duplex stream, ticked together at the frame clock's boundaries."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from orchestrator.duplex.frame_ticker import FrameTicker
from orchestrator.duplex.stream import DuplexEvent, DuplexStream
from orchestrator.pipeline import Pipeline


class DuplexHub:
    """Opens and closes duplex streams; while any was opened, a task ticks them all at each frame
    boundary (`tick`, which a test may call itself), their commands sent as one batch per stage."""

    def __init__(self, pipeline: Pipeline, ticker: FrameTicker) -> None:
        self.pipeline = pipeline
        self.ticker = ticker
        self.streams: dict[str, DuplexStream] = {}
        self._ticking: asyncio.Task | None = None

    def open(self, session_id: str, prefix: list[int], listener: Callable[[DuplexEvent], None]) -> DuplexStream:
        if session_id in self.streams:
            raise ValueError(f"session {session_id!r} is already streaming")
        stream = self.streams[session_id] = DuplexStream(self.pipeline, session_id, listener, prefix)
        if self._ticking is None:
            self._ticking = asyncio.ensure_future(self._run())
        return stream

    def close(self, session_id: str) -> None:
        stream = self.streams.pop(session_id, None)
        if stream is not None:
            stream.close()

    def tick(self, now: float) -> None:
        with self.pipeline.bus.together():
            for stream in list(self.streams.values()):
                stream.tick(now)

    def stop(self) -> None:
        if self._ticking is not None:
            self._ticking.cancel()

    async def _run(self) -> None:
        while True:
            self.tick(await self.ticker.next())
