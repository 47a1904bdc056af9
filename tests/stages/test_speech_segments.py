"""Where a reply's streamed text is cut into the segments the TTS stage speaks (no model)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from stages.requests import TTSRequest

REPLY = "The capital of France is Paris. It is a large city."
RATE = 24000  # the segments' PCM


def segments(request: TTSRequest) -> list[str]:
    return [request.segment_text(k) for k in range(request.num_known)]


def streamed(text: str, pieces: list[int], first: int = 4, most: int = 20, close: bool = True) -> TTSRequest:
    """`text` appended in pieces cut at the offsets `pieces`, then closed if `close`."""
    request = TTSRequest("t", 0.0, first, most, sample_rate=RATE)
    for start, stop in zip([0, *pieces], [*pieces, len(text)]):
        request.append(text[start:stop])
    if close:
        request.append(None, close=True)
    return request


def test_the_first_segment_is_a_few_words_then_sentences():
    assert segments(streamed(REPLY, [])) == ["The capital of France", "is Paris.", "It is a large city."]


def test_a_word_counts_once_the_next_one_begins():
    request = TTSRequest("t", 0.0, sample_rate=RATE)
    request.append("The capital of Fra")
    request.append("nce ")  # "France" may still go on ("Frances"): nothing is cut yet
    assert request.num_known == 0
    request.append("is")
    assert segments(request) == ["The capital of France"]
    request.append(" Paris.")  # the sentence may go on ("Paris.com")
    assert request.num_known == 1
    request.append(None, close=True)
    assert segments(request) == ["The capital of France", "is Paris."] and request.num_pending == 2


def test_a_short_first_sentence_is_the_first_segment():
    assert segments(streamed("Yes! It is, of course. Go on", [])) == ["Yes!", "It is, of course.", "Go on"]


def test_a_long_sentence_is_cut_at_its_last_comma_in_the_second_half_else_after_max_words():
    text = "Zero one two three four five, six seven eight, nine ten eleven twelve."
    assert segments(streamed(text, [], first=4, most=8)) == [
        "Zero one two three", "four five, six seven eight,", "nine ten eleven twelve."]
    text = "One, two three four five six seven eight nine ten."
    assert segments(streamed(text, [], first=1, most=4)) == [
        "One,", "two three", "four five six seven", "eight nine ten."]


def test_each_segment_may_have_twice_the_words_of_the_one_before_up_to_the_most():
    text = " ".join(f"w{i}" for i in range(70))  # no sentence ends: every cut is a limit
    assert [len(s.split()) for s in segments(streamed(text, [], first=4, most=20))] == [4, 8, 16, 20, 20, 2]


def test_a_line_break_ends_a_segment_and_spans_point_into_the_text():
    text = "Options:\n - tea\n - coffee and cake"
    request = streamed(text, [9, 14])
    assert segments(request) == ["Options:", "- tea", "- coffee and cake"]
    assert all(text[span.start : span.stop] == segment for span, segment in zip(request.spans, segments(request)))


def test_a_closed_reply_without_words_has_no_segment_and_is_finished():
    request = streamed("  \n ", [2])
    assert request.num_known == 0 and request.is_finished


def test_a_spoken_segment_adds_its_audio_to_the_requests_audio_ms():
    request = streamed(REPLY, [])
    assert request.audio_ms == 0.0
    first = request.advance(1, torch.zeros(18000))  # 0.75 s
    second = request.advance(1, torch.zeros(36000))
    assert (first.index, second.index, request.audio_ms) == (0, 1, 2250.0)


def test_appending_to_a_closed_reply_is_refused():
    with pytest.raises(ValueError, match="closed"):
        streamed(REPLY, []).append("more")


WORDS = st.sampled_from(["the", "capital,", "Paris.", "is", "big!", "why?", "a:", "x\n", "yes;", "(ok)", "4.5"])


@given(st.lists(WORDS, max_size=30), st.lists(st.integers(0, 200), max_size=12), st.integers(1, 5),
       st.integers(1, 12), st.sampled_from([" ", "  ", "\n"]))
def test_how_a_reply_is_streamed_never_changes_its_segments(words, cuts, first, most, space):
    text = space.join(words)
    pieces = sorted({c for c in cuts if 0 < c < len(text)})
    request = streamed(text, pieces, first, most)
    assert segments(request) == segments(streamed(text, [], first, most))
    assert " ".join(segments(request)).split() == text.split()  # every word, once, in order
    assert len(segments(request)[0].split()) <= first if request.num_known else not words
    assert all(len(segment.split()) <= most for segment in segments(request)[1:])
