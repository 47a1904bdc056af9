"""Heard audio of a reply spoken by a TTS stage, mapped back to its characters and tokens."""

from __future__ import annotations

from orchestrator.session.spoken_text import SpokenText

RATE = 1000  # samples per second: 1 sample a ms


def spoken(tokens: list[str], segments: list[tuple[int, int, int]]) -> SpokenText:
    text = SpokenText(RATE)
    for token in tokens:
        text.add_token(token)
    for segment in segments:
        text.add_segment(*segment)
    return text


# "The capital of France is Paris. It is big." in tokens as a BPE cuts them; two segments of audio:
# "The capital of France" (chars 0-21, 2000 ms), "is Paris." (22-31, 1000 ms); " It is big." not spoken yet.
TOKENS = ["The", " cap", "ital", " of", " France", " is", " Paris", ".", " It", " is", " big", "."]
SEGMENTS = [(0, 21, 2000), (22, 31, 1000)]


def test_a_segment_played_to_its_end_was_heard_whole_and_nothing_after_it():
    text = spoken(TOKENS, SEGMENTS)
    assert text.text[:21] == "The capital of France"
    assert text.heard_chars(2000) == 21 and text.heard_tokens(len(TOKENS), 2000) == 5  # up to " France"
    assert text.heard_chars(3000) == 31 and text.heard_tokens(len(TOKENS), 3000) == 8  # up to "."
    assert text.heard_chars(60_000) == 31  # text no segment spoke was not heard
    assert text.heard_chars(0) == 0 and text.heard_tokens(len(TOKENS), 0) == 0


def test_a_segment_partly_played_keeps_the_words_whose_time_had_come_in_proportion_to_their_characters():
    text = spoken(TOKENS, SEGMENTS)
    # 1 ms in: the first word had started
    assert text.heard_chars(1) == 3 and text.heard_tokens(len(TOKENS), 1) == 1
    # 400 ms of 2000: character 4.2 of 21 reached: "capital" (starts at 4) had started, "of" (12) had not
    assert text.heard_chars(400) == 11 and text.heard_tokens(len(TOKENS), 400) == 3
    # into the second segment by 100 ms of 1000: character 22.9: "is" had started
    assert text.heard_chars(2100) == 24 and text.heard_tokens(len(TOKENS), 2100) == 6


def test_only_the_spoken_tokens_asked_about_count():
    text = spoken(TOKENS, SEGMENTS)
    assert text.heard_tokens(2, 3000) == 2
