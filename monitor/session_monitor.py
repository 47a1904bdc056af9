"""One voice session's interaction state: speech, playback, barge-in."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from monitor.playback import PlaybackTracker
from monitor.turn_detector import SpeechStarted, TurnDetector, TurnEvent


@dataclass(frozen=True)
class BargeIn:
    """Speech started while a reply was being generated or was still unplayed.

    audio_start_ms: as in the SpeechStarted it accompanies.
    played_ms: reply audio of the current item played when it was detected.
    """

    audio_start_ms: int
    played_ms: float


MonitorEvent = TurnEvent | BargeIn


class SessionMonitor:
    """Turn detection plus playback tracking for one session.

    The caller feeds the user's 16 kHz audio through `feed_audio` and reports
    reply audio through `playback` (start_item / delivered / ack /
    finish_generation / truncate). The monitor only observes: on barge-in it
    emits `BargeIn`; cancelling the reply and calling `playback.truncate` is
    the caller's decision.
    """

    def __init__(self, detector: TurnDetector, clock: Callable[[], float]) -> None:
        self.detector = detector
        self.playback = PlaybackTracker(clock)
        self.clock = clock

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
                events.extend(self._barge_in(event))
        return events

    def _barge_in(self, event: SpeechStarted) -> list[BargeIn]:
        """A BargeIn for speech that started over reply audio being generated or still unplayed."""
        now = self.clock()
        if not (self.playback.is_generating or self.playback.is_playing(now)):
            return []
        return [BargeIn(event.audio_start_ms, self.playback.played_ms(now))]
