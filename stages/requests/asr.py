"""A user's utterance at the ASR stage: partial transcripts while it grows, the final one at its end."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stages.models.asr_whisper import SAMPLE_RATE, WINDOW_S
from stages.requests.base import StageRequest


@dataclass(frozen=True)
class Transcript:
    """The text of a request's first `num_samples` samples of speech.

    A partial (`is_final` False) is the whole utterance so far, not a delta: a later
    one may revise its words (each pass re-reads all the audio). The final one is the
    utterance's text and the request's last payload.
    """

    text: str
    is_final: bool
    num_samples: int


class ASRRequest(StageRequest):
    """One utterance of a user's speech, 16 kHz, appended as they speak; a position is one
    transcription pass over all the speech so far.

    The orchestrator adds the request when the user starts speaking (or commits audio),
    appends their audio in pieces of any length (`AppendInput` with a 1-D float array in [-1, 1],
    numpy or a CPU tensor) and closes it when the speech ends (`close=True`, with or
    without a last piece); aborting drops it and nothing more is emitted. It gets a
    `Transcript` per pass: while the request is open, a partial once at least
    `partial_every_s` of speech came since the last pass (never with None, nor past
    one Whisper window of speech: each pass re-reads everything), for transcription
    deltas; once it is closed, exactly one final, the text for the thinker and for
    `input_audio_transcription.completed`, after which the request finishes. When the
    user pauses (`speech_paused`), a pass over the speech so far is due at once, and it
    is first-audio work: the turn may be over. If no speech came after it, the final is
    that pass's text (`reusable_text`), with no second pass: the orchestrator holds back
    a pause's audio, so a pause that ends the turn leaves the final nothing to read.

    For the scheduler: at most one pass is pending (a pass reads all the audio, so
    passes never queue up; audio that arrives meanwhile waits for the next), and
    `is_speculative` holds while the request is open: a partial is a guess no one waits
    for, while the final pass, once the speech ended, is the first work between the
    user and the reply's first audio (urgency serves it among U1, partials after U2).
    """

    def __init__(self, request_id: str, arrival_time: float, partial_every_s: float | None = 0.5) -> None:
        super().__init__(request_id, arrival_time)
        self.partial_every = None if partial_every_s is None else max(1, round(partial_every_s * SAMPLE_RATE))
        self.num_samples = 0
        self.num_transcribed = 0  # samples the last pass read
        self.is_closed = False
        self.is_pausing = False  # the user went quiet after the last speech appended
        self.is_transcribed = False  # the final pass is done
        self.last_text: str | None = None  # what the last pass read
        self._pieces: list[np.ndarray] = []

    @property
    def num_known(self) -> int:
        return self.num_computed + self._is_pass_due

    @property
    def _is_pass_due(self) -> bool:
        if self.is_closed:
            return not self.is_transcribed
        if self.is_pausing and self.num_transcribed < self.num_samples:
            return True
        if self.partial_every is None or self.num_samples > WINDOW_S * SAMPLE_RATE:
            return False
        return self.num_samples - self.num_transcribed >= self.partial_every

    @property
    def is_speculative(self) -> bool:
        return not (self.is_closed or self.is_pausing)

    def speech_paused(self) -> None:
        self.is_pausing = True

    def reusable_text(self) -> str | None:
        """The last pass's text when it read all the speech there is (else None: a pass must run)."""
        return self.last_text if self.num_transcribed == self.num_samples else None

    @property
    def is_finished(self) -> bool:
        return self.is_transcribed

    def num_schedulable(self, budget: int) -> int:
        return min(self.num_pending, budget, 1)

    def append(self, data: np.ndarray | None, close: bool = False) -> None:
        if data is not None:
            if self.is_closed:
                raise ValueError(f"ASR request {self.request_id!r} is closed: its speech ended")
            samples = np.asarray(data, dtype=np.float32).reshape(-1)
            self._pieces.append(samples)
            self.num_samples += len(samples)
            self.is_pausing = self.is_pausing and not len(samples)
        self.is_closed = self.is_closed or close

    def speech(self) -> np.ndarray:
        """All the speech so far, 16 kHz float (the pieces appended are joined on first read)."""
        if len(self._pieces) != 1:
            self._pieces = [np.concatenate(self._pieces) if self._pieces else np.zeros(0, np.float32)]
        return self._pieces[0]

    def advance(self, num_tokens: int, result: Transcript) -> Transcript:
        self.num_computed += num_tokens
        self.num_transcribed, self.last_text = result.num_samples, result.text
        if result.is_final:
            self.is_transcribed = True
            self._pieces = []
        return result
