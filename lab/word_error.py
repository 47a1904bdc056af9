"""Word error rate of a transcript against the words that were said."""

from __future__ import annotations

import re

SPELLED = {"mr": "mister", "mrs": "missus"}


def normalized_words(text: str) -> list[str]:
    """Lower case, hyphens as spaces, no punctuation, a few abbreviations spelled out."""
    words = re.sub(r"[^a-z0-9' ]", " ", text.lower().replace("-", " ")).split()
    return [SPELLED.get(word, word) for word in words]


def word_errors(reference: str, hypothesis: str) -> int:
    """Substitutions + deletions + insertions between the normalized words (edit distance)."""
    ref, hyp = normalized_words(reference), normalized_words(hypothesis)
    row = list(range(len(hyp) + 1))
    for i, word in enumerate(ref, 1):
        previous, row[0] = row[0], i
        for j, heard in enumerate(hyp, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (word != heard))
    return row[-1]


def word_error_rate(reference: str, hypothesis: str) -> float:
    """word_errors / the reference's normalized words."""
    return word_errors(reference, hypothesis) / max(1, len(normalized_words(reference)))
