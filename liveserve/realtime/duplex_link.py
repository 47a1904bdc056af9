"""A Realtime session in full-duplex mode: its input audio streams into the orchestrator frame by frame."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from liveserve.realtime.errors import RealtimeError, require, shown
from liveserve.realtime.input_audio import Resampler24to16
from orchestrator.duplex.stream import DuplexEvent, FrameAnswered, StreamFailed
from orchestrator.interaction.controller import InteractionController

FRAME_EVENT = "liveserve.duplex.frame"


def duplex_request(session: Any) -> bool | None:
    """`session.liveserve.duplex` of a session.update body: True, False, or None when not given."""
    extension = session.get("liveserve") if isinstance(session, dict) else None
    if extension is None:
        return None
    require(isinstance(extension, dict), "invalid_type", "liveserve must be an object", "session.liveserve")
    duplex = extension.get("duplex")
    require(duplex is None or isinstance(duplex, bool), "invalid_type",
            f"duplex must be a boolean, got {shown(duplex)}", "session.liveserve.duplex")
    return duplex


class DuplexLink:
    """Feeds a session's 24 kHz input to its DuplexStream and turns the stream's events into server events.

    Each answered frame becomes a `liveserve.duplex.frame` event and one call of
    `on_frame_latency(seconds)`; a failed stream becomes an `error` event with the
    stream's code, then `on_failed()` (the session should end).
    """

    def __init__(self, controller: InteractionController, emit: Callable[..., None],
                 emit_error: Callable[[RealtimeError], None], on_frame_latency: Callable[[float], None],
                 on_failed: Callable[[], None]) -> None:
        self.controller = controller
        self.emit, self.emit_error, self.on_frame_latency, self.on_failed = emit, emit_error, on_frame_latency, on_failed
        self._resampler = Resampler24to16()
        self.stream = controller.open_duplex(self._on_event)

    def push(self, samples_24k: np.ndarray) -> None:
        self.stream.push(self._resampler.process(samples_24k))

    def _on_event(self, event: DuplexEvent) -> None:
        if isinstance(event, FrameAnswered):
            self.on_frame_latency(event.latency_s)
            self.emit(FRAME_EVENT, frame_index=event.index, text=event.text, token_ids=event.token_ids,
                      latency_ms=round(1000.0 * event.latency_s, 3), context_tokens=event.context_tokens)
        elif isinstance(event, StreamFailed):
            self.emit_error(RealtimeError(event.code, event.message, error_type="server_error"))
            self.on_failed()

    def close(self) -> None:
        self.controller.close_duplex()
