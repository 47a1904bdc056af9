"""Where a reply's text is cut into the segments the TTS stage speaks one at a time."""

from __future__ import annotations

import re

WORD = re.compile(r"\S+")
SENTENCE_END = re.compile(r"[.!?;:][\"')\]]*$")  # a word that ends a sentence (when whitespace follows it)
CLAUSE_END = re.compile(r",[\"')\]]*$")
NEWLINE = re.compile(r"[ \t]*\n")


def next_segment(text: str, start: int, max_words: int, is_closed: bool) -> range | None:
    """The characters of the next segment of `text` from offset `start`, without the whitespace around
    it; None while it is not known yet (`is_closed`: no more text will come).

    A segment ends after a word that ends a sentence (. ! ? ; : or a line break after it);
    one reaching `max_words` words first ends after its last comma, if at least half of
    them come before it, else after `max_words` words. A word counts once the next one has
    begun (until then it, and the space after it, may go on), so how the text was
    streamed never changes where it is cut. A closed text's last segment is whatever
    words are left.
    """
    words = []
    matches = WORD.finditer(text, start)
    match = next(matches, None)
    while match is not None:
        following = next(matches, None)
        if following is None and not is_closed:
            return None
        words.append(match)
        if SENTENCE_END.search(match.group()) or NEWLINE.match(text, match.end()):
            return range(words[0].start(), match.end())
        if len(words) == max_words:
            return range(words[0].start(), _clause_end(words))
        match = following
    return range(words[0].start(), words[-1].end()) if words else None


def _clause_end(words: list[re.Match]) -> int:
    """Where a segment of too many words ends: after its last comma in the second half, else after all."""
    for index in range(len(words) - 2, (len(words) + 1) // 2 - 2, -1):
        if CLAUSE_END.search(words[index].group()):
            return words[index].end()
    return words[-1].end()
