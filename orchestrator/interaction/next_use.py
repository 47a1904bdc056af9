"""When a session's context is needed next: remaining playback plus the user's usual reply gap."""

from __future__ import annotations

from orchestrator.config import InteractionConfig
from orchestrator.interaction.playback_board import NextUseHint


class NextUseEstimator:
    """Per session, from what the user did so far (moving averages, priors until known).

    - reply gap: from the end of the reply's playback (of a text reply: its end) to
      the user's next speech start or, in a session that does not speak, next item
      (0 for a barge-in, which starts before the end);
    - speech lead: from speech start to the turn that needs the context.
    While the user speaks or a turn is generating, the context is needed now.
    `hint(now)` carries them to the stages (see NextUseHint); `lead_s` is the
    expected time a preload has.
    """

    def __init__(self, priors: InteractionConfig) -> None:
        self.weight = priors.ema_weight
        self.reply_gap_s = priors.reply_gap_s
        self.lead_s = priors.speech_lead_s
        self.drained_at: float | None = None
        self.speech_started_at: float | None = None
        self.generating = False

    def on_playback(self, drained_at: float) -> None:
        self.drained_at = drained_at

    def on_speech_started(self, now: float) -> None:
        self.on_user_input(now)
        self.speech_started_at = now

    def on_user_input(self, now: float) -> None:
        """The user's next message began (speech, or an item that entered the conversation)."""
        if self.drained_at is not None:
            self.reply_gap_s = self._average(self.reply_gap_s, max(0.0, now - self.drained_at))
            self.drained_at = None

    def on_turn_started(self, now: float) -> None:
        self.generating = True
        if self.speech_started_at is not None:
            self.lead_s = self._average(self.lead_s, now - self.speech_started_at)
            self.speech_started_at = None

    def on_generation_end(self, now: float) -> None:
        """The reply is generated; one nobody plays (text) is over now."""
        self.generating = False
        if self.drained_at is None:
            self.drained_at = now

    def hint(self, now: float) -> NextUseHint:
        drained_at = now if self.drained_at is None else self.drained_at
        return NextUseHint(drained_at, self.reply_gap_s, needed_now=self.generating or self.speech_started_at is not None)

    def _average(self, mean: float, sample: float) -> float:
        return mean + self.weight * (sample - mean)
