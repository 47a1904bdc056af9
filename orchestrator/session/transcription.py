"""A user item's speech at the ASR stage: what the user said, as text for the thinker's context."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import numpy as np

from orchestrator.datapath.request_id import RequestId
from orchestrator.datapath.stage_bus import StageBus
from orchestrator.interaction.events import UserTranscript
from stages.commands import AbortRequest, AddRequest, AppendInput, TurnEndingHint
from stages.kinds import StageKind
from stages.models.asr_whisper import SAMPLE_RATE
from stages.plan import StageOutput
from stages.requests import ASRRequest, Transcript


class Transcription:
    """One ASR request (see ASRRequest): the speech of user item `item_id`, 16 kHz, appended as it
    comes (from the user's first word, while they speak) and closed at its end.

    Every transcript the stage gives goes to `on_text` as a UserTranscript (partials every
    `partial_every_s` of new speech, None: none; then the final); `text()` awaits the final, or
    raises RuntimeError if the stage failed it. `abort()` drops the request (nothing more is
    reported). Speech goes to the stage when a pass may read it: at a pause (`pause`), at the
    close, and with partials every `partial_every_s` of it; until then it waits here, so a
    speaking user costs the stage a message a pass, not one per audio chunk. Audio appended while
    the user `pausing` is held back: it goes with the speech when speech resumes, and the silence
    that ends the speech never goes, so no partial pass starts on it and runs while the final one
    waits. A final is the text of a pass that read all the speech sent, so when the pause's pass
    read it all (before or after the close), the final is that text at once: it does not wait for
    a step of the stage, which may be another session's pass (the stage's request is dropped).
    `paused_text()` awaits the text of the pass a pause asked for (see `pause`), once it has read
    all the speech sent: what the final will be unless speech resumes. Runs on the event loop.
    """

    def __init__(self, bus: StageBus, session_id: str, item_id: str, on_text: Callable[[UserTranscript], None],
                 partial_every_s: float | None = None) -> None:
        self.bus, self.item_id, self.on_text = bus, item_id, on_text
        self.request_id = RequestId(session_id, StageKind.ASR, item_id)
        self._final: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._held: list[np.ndarray] = []  # audio of a pause the speech may end with
        self._unsent: list[np.ndarray] = []  # speech no pass has been due for yet
        self._num_sent = 0  # samples sent to the stage
        self._is_closed = False
        self._last: Transcript | None = None  # the stage's latest partial
        self._paused: asyncio.Future[str | None] | None = None  # the text of the speech sent up to a pause
        request = ASRRequest(self.request_id, bus.clock(), partial_every_s)
        self._send_every = request.partial_every  # samples of speech a partial waits for
        bus.own(self.request_id, self)
        bus.submit(StageKind.ASR, AddRequest(request))

    def append(self, pcm16k: np.ndarray | None, close: bool = False, pausing: bool = False) -> None:
        if self._final.done():
            return
        if pcm16k is not None and len(pcm16k):
            if pausing and not close:
                self._held.append(pcm16k)
                return
            self._unsent += [*self._held, pcm16k]
            self._held = []
            self._settle_pause(None)
        if close:
            self._held, self._is_closed = [], True
            if self._unsent or self._last is None or not self._finish_with(self._last):
                self._send(close=True)
        elif self._send_every is not None and sum(map(len, self._unsent)) >= self._send_every:
            self._send()

    def _send(self, close: bool = False) -> None:
        """The speech not sent yet (and the close) to the stage, in one AppendInput."""
        if not (self._unsent or close):
            return
        speech = np.concatenate(self._unsent) if self._unsent else None
        self._unsent = []
        self._num_sent += 0 if speech is None else len(speech)
        self.bus.submit(StageKind.ASR, AppendInput(self.request_id, speech, close=close))

    def pause(self, lead_s: float) -> None:
        """The user went quiet (their turn ends in `lead_s` unless they go on): transcribe what they said."""
        if not self._final.done():
            self._send()
            self._settle_pause(None)
            self._paused = asyncio.get_running_loop().create_future()
            if self._last is not None and self._last.num_samples == self._num_sent:  # a partial read it all
                self._paused.set_result(self._last.text)
            self.bus.submit(StageKind.ASR, TurnEndingHint(self.request_id, lead_s))

    async def paused_text(self) -> str | None:
        """The text of the speech sent before the last pause, once a pass has read all of it; None if the
        user spoke again first (sent or not), the request ended first, or there was no pause."""
        return None if self._paused is None else await asyncio.shield(self._paused)

    @property
    def final_text(self) -> str | None:
        """The final transcript, once it is known (None before, and if the stage failed it)."""
        done = self._final.done() and not self._final.cancelled() and self._final.exception() is None
        return self._final.result() if done else None

    async def text(self) -> str:
        return await asyncio.shield(self._final)

    def _settle_pause(self, text: str | None) -> None:
        if self._paused is not None and not self._paused.done():
            self._paused.set_result(text)

    def abort(self) -> None:
        self._settle_pause(None)
        if not self._final.done():
            self._final.cancel()
            self.bus.submit(StageKind.ASR, AbortRequest(self.request_id))
        self.bus.disown(self.request_id)

    def on_output(self, kind: str, output: StageOutput) -> None:
        if self._final.done():
            return
        if output.error is not None:
            self.bus.disown(self.request_id)
            self._settle_pause(None)
            self._final.set_exception(RuntimeError(f"asr stage: {output.error}"))
            return
        transcript: Transcript | None = output.payload
        if transcript is None:
            return
        if transcript.is_final:
            self._report(transcript)
        elif not (self._is_closed and self._finish_with(transcript)):
            self._last = transcript
            self._report(transcript)

    def _finish_with(self, last: Transcript) -> bool:
        """The final from `last` if it read all the speech sent (then the stage's request is dropped)."""
        if last.num_samples != self._num_sent:
            return False
        self.bus.submit(StageKind.ASR, AbortRequest(self.request_id))
        self._report(Transcript(last.text, True, last.num_samples))
        return True

    def _report(self, transcript: Transcript) -> None:
        if transcript.num_samples == self._num_sent:
            self._settle_pause(transcript.text)
        self.on_text(UserTranscript(self.item_id, transcript.text, transcript.is_final,
                                    transcript.num_samples / SAMPLE_RATE))
        if transcript.is_final:
            self.bus.disown(self.request_id)
            self._final.set_result(transcript.text)
