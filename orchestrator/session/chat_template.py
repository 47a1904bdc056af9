"""ChatML-style context layout of the thinker, one segment per conversation item."""

from __future__ import annotations

from stages.models.tokenizer import TextTokenizer


class ChatTemplate:
    """Token ids of messages; audio embeddings go over `<|audio_pad|>` rows.

    A segment that follows others starts with a newline, and with `<|im_end|>` first
    when the previous message was cut short (`close_previous`). `default_instructions`:
    the system message of a context whose session gives none (the model's, as its own
    chat template would add it; "": none).
    """

    def __init__(self, tokenizer: TextTokenizer, default_instructions: str = "") -> None:
        self.tok = tokenizer
        self.default_instructions = default_instructions
        self.newline = tokenizer.encode("\n")

    def _lead(self, is_first: bool, close_previous: bool) -> list[int]:
        return ([self.tok.im_end_id] if close_previous else []) + ([] if is_first else self.newline)

    def system(self, instructions: str, tools: str = "") -> list[int]:
        """The system message: `instructions`, or the default when they are empty, then what it says of the
        tools (`tools`, see orchestrator.session.tools); [] if all are empty."""
        text = (instructions or self.default_instructions) + tools
        if not text:
            return []
        return [self.tok.im_start_id] + self.tok.encode("system\n") + self.tok.encode_literal(text) + [self.tok.im_end_id]

    def user(self, text: str, num_audio: int, is_first: bool, close_previous: bool) -> tuple[list[int], int]:
        """A user message and the offset of its first audio row."""
        ids = self._lead(is_first, close_previous) + [self.tok.im_start_id] + self.tok.encode("user\n")
        offset = len(ids) + 1
        if num_audio:
            ids += [self.tok.audio_start_id] + [self.tok.audio_pad_id] * num_audio + [self.tok.audio_end_id]
        return ids + self.tok.encode_literal(text) + [self.tok.im_end_id], offset

    def assistant_prefix(self, is_first: bool, close_previous: bool) -> list[int]:
        return self._lead(is_first, close_previous) + [self.tok.im_start_id] + self.tok.encode("assistant\n")
