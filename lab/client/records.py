"""What a realtime client observed: logged events and one record per response."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lab.client.audio import SAMPLE_RATE, pcm16_ms
from lab.client.player import RealtimePlayer

AUDIO_FIELDS = ("audio", "delta")
AUDIO_EVENTS = ("input_audio_buffer.append", "response.output_audio.delta")


@dataclass(frozen=True)
class LoggedEvent:
    """One event sent or received at client clock time `t` (seconds).

    Audio payloads are not kept here: `data` holds `<field>_bytes` (the decoded size)
    in place of the base64 field.
    """

    t: float
    type: str
    data: dict[str, Any]


def log_entry(t: float, event: dict[str, Any], audio_bytes: int = 0) -> LoggedEvent:
    """A LoggedEvent for `event`, with its audio payload replaced by `audio_bytes`."""
    data = dict(event)
    if event.get("type") in AUDIO_EVENTS:
        for name in AUDIO_FIELDS:
            if name in data:
                data[f"{name}_bytes"] = audio_bytes
                del data[name]
    return LoggedEvent(t, str(event.get("type", "")), data)


@dataclass
class TurnRecord:
    """One response as the client saw it; times are client clock seconds.

    `turn_end_t` is when the user's turn ended as the client knows it: the latest of
    `speech_stopped` received, `input_audio_buffer.commit` sent and `response.create`
    sent (or the turn end it was sent with) before `response.created` arrived (None if none happened).
    """

    response_id: str
    created_t: float
    turn_end_t: float | None
    player: RealtimePlayer = field(repr=False)
    item_id: str | None = None
    first_text_t: float | None = None
    first_audio_t: float | None = None
    last_audio_t: float | None = None
    audio_bytes: int = 0
    transcript: str = ""
    status: str | None = None
    usage: dict[str, Any] | None = None
    done_t: float | None = None
    interrupted_t: float | None = None
    acked_ms: float = 0.0
    audio: bytearray = field(default_factory=bytearray, repr=False)

    @property
    def is_done(self) -> bool:
        return self.status is not None

    @property
    def ttfp_ms(self) -> float | None:
        """Time to first audio: turn end -> first audio delta."""
        if self.turn_end_t is None or self.first_audio_t is None:
            return None
        return (self.first_audio_t - self.turn_end_t) * 1000

    @property
    def audio_ms(self) -> float:
        """Audio received (played or not)."""
        return pcm16_ms(self.audio_bytes)

    def add_audio(self, t: float, pcm: bytes, keep: bool) -> None:
        """A delta of this response's audio arrived at `t`; it goes to the player."""
        if self.first_audio_t is None:
            self.first_audio_t = t
        self.last_audio_t = t
        self.audio_bytes += len(pcm)
        if keep:
            self.audio.extend(pcm)
        self.player.push(pcm16_ms(len(pcm)), t)

    def heard_audio(self) -> bytes:
        """The kept audio up to where playback stopped (all of it if never stopped)."""
        if self.interrupted_t is None:
            return bytes(self.audio)
        return bytes(self.audio[: int(self.player.played_ms() * SAMPLE_RATE / 1000) * 2])

    def summary(self) -> dict[str, Any]:
        """JSON-friendly figures (ms rounded to 0.1)."""
        return {
            "response_id": self.response_id, "item_id": self.item_id, "status": self.status,
            "audio_ttfp_ms": _round(self.ttfp_ms), "audio_s": round(self.audio_ms / 1000, 3),
            "played_s": round(self.player.played_ms() / 1000, 3),
            "num_underruns": self.player.num_underruns,
            "max_underrun_ms": _round(self.player.max_underrun_ms),
            "underrun_ms_total": _round(self.player.underrun_ms_total),
            "interrupted": self.interrupted_t is not None,
            "transcript": self.transcript, "usage": self.usage,
        }



def _round(ms: float | None) -> float | None:
    return None if ms is None else round(ms, 1)
