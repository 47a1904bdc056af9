"""Turning server events into one TurnRecord per response, and knowing which reply plays."""

from __future__ import annotations

from typing import Any, Callable

from lab.client.player import RealtimePlayer
from lab.client.records import TurnRecord


class TurnTracker:
    """Builds TurnRecords from server events (pure: no I/O; times are the caller's clock).

    - A response gets its record at `response.created`, or at its first event if the
      server skipped that; an event without `response_id` belongs to the latest record.
    - `turn_end_t` of a new record is the latest `mark_turn_end` time: the client marks
      commits and `response.create`, and `speech_stopped` marks itself.
    - Each record's audio plays on its own RealtimePlayer from its first delta; the first
      audio of a newer response stops the older one's playback (`playing` moves on).
    """

    def __init__(self, clock: Callable[[], float], keep_audio: bool = True) -> None:
        self.clock = clock
        self.keep_audio = keep_audio
        self.turns: list[TurnRecord] = []
        self.playing: TurnRecord | None = None
        self.turn_end_t: float | None = None
        self._by_id: dict[str, TurnRecord] = {}
        self._handlers: dict[str, Callable[[dict[str, Any], float, bytes], None]] = {
            "input_audio_buffer.speech_stopped": lambda event, t, pcm: self.mark_turn_end(t),
            "response.created": self._on_response_created,
            "response.output_item.added": self._on_output_item,
            "response.output_audio.delta": self._on_audio_delta,
            "response.output_audio_transcript.delta": self._on_transcript_delta,
            "response.output_text.delta": self._on_transcript_delta,  # a text-only reply's text
            "response.done": self._on_response_done,
        }

    def mark_turn_end(self, t: float) -> None:
        self.turn_end_t = t

    def on_event(self, event: dict[str, Any], t: float, pcm: bytes = b"") -> None:
        """Apply one server event received at `t`; `pcm` is an audio delta's decoded payload."""
        handler = self._handlers.get(event.get("type", ""))
        if handler is not None:
            handler(event, t, pcm)

    def in_progress(self, now: float) -> TurnRecord | None:
        """The reply the user hears, or still waits to hear the rest of (not stopped)."""
        turn = self.playing
        if turn is None or turn.player.is_stopped:
            return None
        return turn if turn.player.is_playing(now) or not turn.is_done else None

    def _on_response_created(self, event: dict[str, Any], t: float, pcm: bytes) -> None:
        self._turn(event.get("response", {}).get("id"), t)

    def _on_output_item(self, event: dict[str, Any], t: float, pcm: bytes) -> None:
        turn = self._turn(event.get("response_id"), t)
        turn.item_id = turn.item_id or event.get("item", {}).get("id")

    def _on_audio_delta(self, event: dict[str, Any], t: float, pcm: bytes) -> None:
        turn = self._turn(event.get("response_id"), t)
        turn.item_id = turn.item_id or event.get("item_id")
        if turn.first_audio_t is None and turn is not self.playing:
            if self.playing is not None:
                self.playing.player.stop(t)
            self.playing = turn
        turn.add_audio(t, pcm, self.keep_audio)

    def _on_transcript_delta(self, event: dict[str, Any], t: float, pcm: bytes) -> None:
        turn = self._turn(event.get("response_id"), t)
        turn.first_text_t = t if turn.first_text_t is None else turn.first_text_t
        turn.transcript += event.get("delta", "")

    def _on_response_done(self, event: dict[str, Any], t: float, pcm: bytes) -> None:
        response = event.get("response", {})
        turn = self._turn(response.get("id"), t)
        turn.status, turn.usage, turn.done_t = response.get("status", "unknown"), response.get("usage"), t

    def _turn(self, response_id: str | None, t: float) -> TurnRecord:
        if response_id is None and self.turns:
            return self.turns[-1]
        key = response_id or f"unnamed-{len(self.turns)}"
        if key not in self._by_id:
            self._by_id[key] = TurnRecord(key, t, self.turn_end_t, RealtimePlayer(self.clock))
            self.turns.append(self._by_id[key])
        return self._by_id[key]
