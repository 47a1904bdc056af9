"""A reply's text at the TTS stage: spoken in segments as it streams in."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from stages.requests.base import StageRequest
from stages.requests.speech_segments import next_segment


@dataclass(frozen=True)
class SpeechSegment:
    """Segment `index` of a reply, spoken: `pcm` (24 kHz mono float in [-1, 1], a CPU tensor like the
    vocoder's) says `text`, the characters [start, stop) of the reply's text as it was appended."""

    index: int
    text: str
    start: int
    stop: int
    pcm: torch.Tensor


class TTSRequest(StageRequest):
    """A reply's text, appended as the LLM streams it; a position is one segment to speak.

    The orchestrator adds the request when the reply starts, appends its text as it comes
    (`AppendInput` with a str: the detokenized deltas, in order), closes it when the reply
    ends (`close=True`) and aborts it on a barge-in: the segments not yet spoken are
    dropped and nothing more is emitted. It gets one `SpeechSegment` per segment, in order,
    then the request finishes. The first segment is at most `first_segment_words` words
    (its audio comes early), each later one a sentence, or part of a long one, of at most
    twice the words the one before could have (4, 8, 16, ...) and never more than
    `max_segment_words` (see `next_segment`): while a short segment plays, the LLM has
    to write and the TTS to speak only a little more, so the audio does not run dry
    between the first segment and full sentences. Heard audio maps back to heard words:
    the segments' samples add up, and each names its span of the reply text (within a
    segment, words take time roughly in proportion to their characters). For the urgency
    policy the orchestrator publishes this request's playback like a vocoder request's
    (not started: its first segment is first-audio work, U1).

    For the scheduler a round speaks at most one segment of a request, so one reply's
    later sentences do not delay another's first audio by more than a segment. Its segments'
    PCM is at `sample_rate` (`audio_ms` counts it).
    """

    def __init__(self, request_id: str, arrival_time: float, first_segment_words: int = 4,
                 max_segment_words: int = 20, *, sample_rate: int) -> None:
        super().__init__(request_id, arrival_time)
        self.sample_rate = sample_rate
        self.first_segment_words = first_segment_words
        self.max_segment_words = max_segment_words
        self.text = ""
        self.spans: list[range] = []  # each segment's characters of `text`
        self.is_closed = False

    @property
    def num_known(self) -> int:
        return len(self.spans)

    @property
    def is_finished(self) -> bool:
        return self.is_closed and self.num_computed >= len(self.spans)

    def num_schedulable(self, budget: int) -> int:
        return min(self.num_pending, budget, 1)

    def append(self, data: str | None, close: bool = False) -> None:
        if data is not None:
            if self.is_closed:
                raise ValueError(f"TTS request {self.request_id!r} is closed: its reply ended")
            self.text += data
        self.is_closed = self.is_closed or close
        self._cut()

    def _cut(self) -> None:
        start = self.spans[-1].stop if self.spans else 0
        while True:
            limit = min(self.max_segment_words, self.first_segment_words << len(self.spans))
            span = next_segment(self.text, start, limit, self.is_closed)
            if span is None:
                return
            self.spans.append(span)
            start = span.stop

    def segment_text(self, index: int) -> str:
        span = self.spans[index]
        return self.text[span.start : span.stop]

    def advance(self, num_tokens: int, result: torch.Tensor) -> SpeechSegment:
        index = self.num_computed
        self.num_computed += num_tokens
        span = self.spans[index]
        self.audio_ms += 1000.0 * len(result) / self.sample_rate
        return SpeechSegment(index, self.segment_text(index), span.start, span.stop, result)
