"""A reply's text as a TTS stage speaks it: which of its tokens a listener heard."""

from __future__ import annotations

from bisect import bisect_left

from stages.requests.speech_segments import WORD


class SpokenText:
    """The text a reply sent to its TTS stage, where each spoken token starts in it, and the segments
    of audio that came back (the characters each says, its samples at `sample_rate`), in order.

    Heard audio maps to characters: a segment whose audio had played to its end was heard whole;
    of the segment playing, the words whose playback had started, estimating that its words take
    time in proportion to their characters (a word counts once it started, as a token does through
    a talker); text no segment spoke yet was not heard. A token was heard if its text starts within
    the heard characters (a token of whitespace and a word starts with the whitespace).
    """

    def __init__(self, sample_rate: int) -> None:
        self.sample_rate = sample_rate
        self.text = ""
        self.starts: list[int] = []  # per spoken token, in order: the character its text starts at
        self.segments: list[tuple[int, int, int]] = []  # (first character, end character, samples)

    def add_token(self, text: str) -> None:
        """The next spoken token, whose text (maybe "": part of a character) follows what came before."""
        self.starts.append(len(self.text))
        self.text += text

    def add_segment(self, start: int, stop: int, num_samples: int) -> None:
        self.segments.append((start, stop, num_samples))

    def heard_chars(self, heard_ms: float) -> int:
        """How many characters of the text were heard once its first `heard_ms` ms of audio played."""
        left, heard = heard_ms * self.sample_rate / 1000.0, 0
        for start, stop, num_samples in self.segments:
            if left >= num_samples:
                heard, left = stop, left - num_samples
                continue
            if left > 0:
                reached = start + (stop - start) * left / num_samples
                heard = max((word.end() for word in WORD.finditer(self.text, start, stop) if word.start() < reached),
                            default=start)
            break
        return heard

    def heard_tokens(self, num_spoken: int, heard_ms: float) -> int:
        """Of the first `num_spoken` spoken tokens, those heard once `heard_ms` of the audio played."""
        return min(num_spoken, bisect_left(self.starts, self.heard_chars(heard_ms)))
