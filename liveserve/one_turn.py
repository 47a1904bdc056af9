"""`liveserve run`: one spoken (or typed) turn through the pipeline's stages."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from liveserve.config.loader import LiveServeConfig
from liveserve.runtime import configure_torch, make_placement
from orchestrator.orchestrator import Orchestrator
from orchestrator.session.events import AudioDelta, TextDelta, TurnDone, TurnRequest
from orchestrator.session.session import Session


@dataclass
class TurnResult:
    """What one turn produced and how fast; times are seconds from the end of the user turn.
    `sample_rate` is None in a pipeline that does not speak (no audio)."""

    text: str
    audio: np.ndarray
    sample_rate: int | None
    status: str
    first_text_s: float | None
    first_audio_s: float | None
    last_audio_s: float | None
    text_tokens: int
    codec_frames: int
    error: str | None
    text_token_ids: tuple[int, ...] = ()

    @property
    def audio_s(self) -> float:
        return len(self.audio) / self.sample_rate if self.sample_rate else 0.0

    def summary(self) -> dict:
        ttft, ttfp = (None if s is None else round(1000 * s, 1) for s in (self.first_text_s, self.first_audio_s))
        rtf = None if not self.audio_s or self.last_audio_s is None else round(self.last_audio_s / self.audio_s, 3)
        return {
            "status": self.status, "text_ttft_ms": ttft, "audio_ttfp_ms": ttfp, "audio_s": round(self.audio_s, 3),
            "rtf": rtf, "text_tokens": self.text_tokens, "codec_frames": self.codec_frames, "text": self.text,
            "text_token_ids": list(self.text_token_ids), "error": self.error,
        }


async def run_one_turn(config: LiveServeConfig, audio: np.ndarray | None, text: str, request: TurnRequest) -> TurnResult:
    """One user message (16 kHz audio and/or text) and the reply, timed from the end of the message."""
    configure_torch(config.runtime)
    orch = Orchestrator(config.pipeline, placement=make_placement(config))
    await orch.start()
    try:
        session = orch.open_session("cli")
        started = time.monotonic()
        item = session.add_user_item("user0", audio, text)
        item.add_done_callback(lambda task: task.cancelled() or task.exception())  # its failure ends the turn
        voice = orch.geometry.voice
        return await collect_turn(session, request, started, None if voice is None else voice.sample_rate)
    finally:
        await orch.stop()


async def collect_turn(session: Session, request: TurnRequest, started: float, sample_rate: int | None) -> TurnResult:
    """Start a turn and gather its events until TurnDone; times count from `started`."""
    turn = session.start_turn(request)
    text, audio, first_text, first, last = [], [], None, None, None
    while True:
        event = await turn.events.get()
        if isinstance(event, TextDelta):
            first_text = time.monotonic() - started if first_text is None else first_text
            text.append(event.text)
        elif isinstance(event, AudioDelta):
            last = time.monotonic() - started
            first = last if first is None else first
            audio.append(event.pcm)
        elif isinstance(event, TurnDone):
            pcm = np.concatenate(audio) if audio else np.zeros(0, np.float32)
            return TurnResult("".join(text), pcm, sample_rate, event.status, first_text, first, last,
                              event.usage.text_tokens, event.usage.codec_frames, event.error, event.token_ids)
