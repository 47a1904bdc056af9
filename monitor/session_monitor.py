"""One voice session's interaction state: speech, playback, barge-in."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from monitor.playback import PlaybackTracker
from monitor.turn_detector import SpeechStarted, SpeechStopped, TurnDetector, TurnEvent


@dataclass(frozen=True)
class BargeIn:
    """Speech started while a reply was being generated or was still unplayed.

    audio_start_ms: as in the SpeechStarted it accompanies.
    played_ms: reply audio of the current item played when it was detected.
    """

    audio_start_ms: int
    played_ms: float


MonitorEvent = TurnEvent | BargeIn


@dataclass(frozen=True)
class InteractionSnapshot:
    """What one session is hearing and saying at one instant (audio in ms).

    Playback fields describe the current reply item (see PlaybackTracker);
    underrun fields are session totals, stall_ms the open underrun.
    last_speech_start is the clock time (s) the latest speech start was
    detected, None before the first.
    """

    session_id: str
    playback_buffer_ms: float
    first_audio_sent: bool
    is_playing: bool
    is_generating: bool
    is_speaking: bool
    num_barge_ins: int
    last_speech_start: float | None
    num_underruns: int
    underrun_ms_total: float
    max_underrun_ms: float
    stall_ms: float


class SessionMonitor:
    """Turn detection plus playback tracking for one session.

    The caller feeds the user's 16 kHz audio through `feed_audio` and reports
    reply audio through `playback` (start_item / delivered / ack /
    finish_generation / truncate). The monitor only observes: on barge-in it
    emits `BargeIn`; cancelling the reply and calling `playback.truncate` is
    the caller's decision.
    """

    def __init__(self, session_id: str, detector: TurnDetector, clock: Callable[[], float]) -> None:
        self.session_id = session_id
        self.detector = detector
        self.playback = PlaybackTracker(clock)
        self.clock = clock
        self.num_speech_starts = 0
        self.num_speech_stops = 0
        self.num_barge_ins = 0
        self.last_speech_start: float | None = None  # clock time speech start was detected

    def feed_audio(self, pcm16k: np.ndarray) -> list[MonitorEvent]:
        """Feed user audio; return turn events, each SpeechStarted followed by a
        BargeIn when reply audio is being generated or is unplayed (buffer > 0)."""
        return self.observe(self.detector.feed(pcm16k))

    def observe(self, turn_events: list[TurnEvent]) -> list[MonitorEvent]:
        """What `detector.feed` found (the caller may run it elsewhere, e.g. on a worker thread), with
        a BargeIn after each SpeechStarted that came over reply audio."""
        events: list[MonitorEvent] = []
        for event in turn_events:
            events.append(event)
            if isinstance(event, SpeechStarted):
                events.extend(self._on_speech_started(event))
            elif isinstance(event, SpeechStopped):
                self.num_speech_stops += 1
        return events

    def _on_speech_started(self, event: SpeechStarted) -> list[BargeIn]:
        now = self.clock()
        self.num_speech_starts += 1
        self.last_speech_start = now
        if not (self.playback.is_generating or self.playback.is_playing(now)):
            return []
        self.num_barge_ins += 1
        return [BargeIn(event.audio_start_ms, self.playback.played_ms(now))]

    def snapshot(self, now: float | None = None) -> InteractionSnapshot:
        """The session's interaction state at `now` (default: clock())."""
        now = self.clock() if now is None else now
        playback = self.playback
        return InteractionSnapshot(
            session_id=self.session_id,
            playback_buffer_ms=playback.buffer_ms(now),
            first_audio_sent=playback.first_audio_sent,
            is_playing=playback.is_playing(now),
            is_generating=playback.is_generating,
            is_speaking=self.detector.is_speaking,
            num_barge_ins=self.num_barge_ins,
            last_speech_start=self.last_speech_start,
            num_underruns=playback.num_underruns,
            underrun_ms_total=playback.underrun_ms_total,
            max_underrun_ms=playback.max_underrun_ms,
            stall_ms=playback.stall_ms(now),
        )
