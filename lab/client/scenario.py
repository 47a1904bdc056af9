"""A scripted conversation over one session: speak, listen, maybe barge in, listen to the end."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from lab.client.audio import silence
from lab.client.client import RealtimeClient, default_session
from lab.client.records import TurnRecord

MIC_CHUNK_MS = 20


@dataclass(frozen=True)
class ConversationScript:
    """What the user says and when. Audio is 24 kHz mono int16.

    `barge_in_speech` is spoken `barge_in_after_ms` after the first reply audio arrives
    (if the reply has audio). Each utterance is followed by `trailing_silence_ms` so server
    VAD ends the turn; in between the mic keeps streaming silence, as a real one would.
    """

    speech: np.ndarray
    barge_in_speech: np.ndarray | None = None
    barge_in_after_ms: float | None = None
    trailing_silence_ms: float = 1000.0
    timeout_s: float = 60.0
    session: dict[str, Any] | None = None  # session.update fields; default_session() if None


@dataclass
class ConversationResult:
    """Every response of the conversation, the server's error events, and the barge-in time."""

    turns: list[TurnRecord]
    errors: list[dict[str, Any]]
    barge_in_t: float | None
    is_timed_out: bool

    @property
    def status(self) -> str:
        """The last response's status; `timeout` or `no_response` when there is none to give."""
        if self.is_timed_out:
            return "timeout"
        return (self.turns[-1].status or "unknown") if self.turns else "no_response"

    def heard_audio(self) -> bytes:
        """The reply audio as the user heard it, response after response."""
        return b"".join(turn.heard_audio() for turn in self.turns)

    def summary(self) -> dict[str, Any]:
        """JSON-friendly figures: the first response's TTFP, totals, the last transcript."""
        turns = [turn.summary() for turn in self.turns]
        return {
            "status": self.status,
            "audio_ttfp_ms": turns[0]["audio_ttfp_ms"] if turns else None,
            "audio_s": round(sum(turn.audio_ms for turn in self.turns) / 1000, 3),
            "num_underruns": sum(turn["num_underruns"] for turn in turns),
            "max_underrun_ms": max((turn["max_underrun_ms"] for turn in turns), default=0.0),
            "transcript": turns[-1]["transcript"] if turns else "",
            "barged_in": self.barge_in_t is not None,
            "turns": turns,
            "errors": self.errors,
        }


async def run_conversation(url: str, script: ConversationScript,
                           clock: Callable[[], float] = time.monotonic) -> ConversationResult:
    """Play `script` against the realtime server at `url`; RealtimeError if the connection fails.

    Ends when every response is done and heard, the user is not speaking, and the last
    speech the server detected got a response; or at `script.timeout_s` (is_timed_out).
    """
    async with RealtimeClient(url, clock=clock) as client:
        deadline = clock() + script.timeout_s
        await client.update_session(**(script.session or default_session()))
        await client.stream_audio(_utterance(script.speech, script.trailing_silence_ms))
        expected, barge_in_t = 1, None
        if script.barge_in_speech is not None and script.barge_in_after_ms is not None:
            barge_in_t = await _barge_in(client, script, deadline)
            expected += barge_in_t is not None
        is_settled = await _listen_until(client, lambda: _is_settled(client, expected), deadline)
        errors = [event.data.get("error", event.data) for event in client.events if event.type == "error"]
        return ConversationResult(list(client.turns), errors, barge_in_t, not is_settled)


async def _barge_in(client: RealtimeClient, script: ConversationScript, deadline: float) -> float | None:
    """Speak `barge_in_speech` once the first reply audio is `barge_in_after_ms` old.

    Returns when it started, or None if the first response ended without audio (or time ran out).
    """
    if not await _listen_until(client, lambda: _first_audio_t(client) is not None or _is_settled(client, 1), deadline):
        return None
    first_audio_t = _first_audio_t(client)
    if first_audio_t is None:
        return None
    start_t = first_audio_t + script.barge_in_after_ms / 1000
    if not await _listen_until(client, lambda: client.clock() >= start_t, deadline):
        return None
    barge_in_t = client.clock()
    await client.stream_audio(_utterance(script.barge_in_speech, script.trailing_silence_ms))
    return barge_in_t


async def _listen_until(client: RealtimeClient, condition: Callable[[], bool], deadline: float) -> bool:
    """Stream mic silence until `condition()` holds (True) or the deadline passes (False)."""
    while not condition():
        if client.clock() >= deadline:
            return False
        await client.stream_audio(silence(MIC_CHUNK_MS))
    return True


def _is_settled(client: RealtimeClient, expected: int) -> bool:
    """At least `expected` responses, all done and heard; the user silent and answered."""
    turns = client.turns
    started = client.last_event("input_audio_buffer.speech_started")
    stopped = client.last_event("input_audio_buffer.speech_stopped")
    is_speaking = started is not None and (stopped is None or stopped.t < started.t)
    is_answered = stopped is None or (bool(turns) and turns[-1].created_t >= stopped.t)
    return (len(turns) >= expected and all(turn.is_done for turn in turns) and not is_speaking
            and is_answered and not client.is_playing())


def _first_audio_t(client: RealtimeClient) -> float | None:
    return next((turn.first_audio_t for turn in client.turns if turn.first_audio_t is not None), None)


def _utterance(speech: np.ndarray, trailing_silence_ms: float) -> np.ndarray:
    return np.concatenate([speech, silence(trailing_silence_ms)])
