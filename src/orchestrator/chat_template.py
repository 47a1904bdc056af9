"""ChatML-style context layout of the thinker, with audio placeholders."""

from __future__ import annotations

from stages.models.tokenizer import TextTokenizer


class ChatTemplate:
    """Token ids of system and user turns; audio embeddings go over `<|audio_pad|>` rows."""

    def __init__(self, tokenizer: TextTokenizer) -> None:
        self.tok = tokenizer

    def system(self, instructions: str) -> list[int]:
        return self._message("system", self.tok.encode_literal(instructions)) + self.tok.encode("\n")

    def user_turn(self, text: str, num_audio: int, close_previous: bool) -> tuple[list[int], int]:
        """Ids of a user turn and the assistant prefix, and the offset of its first audio row.

        `close_previous` first ends an assistant reply cut short (no `<|im_end|>` yet).
        """
        ids = [self.tok.im_end_id] + self.tok.encode("\n") if close_previous else []
        audio = [self.tok.audio_start_id] + [self.tok.audio_pad_id] * num_audio + [self.tok.audio_end_id] if num_audio else []
        ids += [self.tok.im_start_id] + self.tok.encode("user\n")
        offset = len(ids) + 1
        ids += audio + self.tok.encode_literal(text) + [self.tok.im_end_id] + self.tok.encode("\n")
        ids += [self.tok.im_start_id] + self.tok.encode("assistant\n")
        return ids, offset

    def _message(self, role: str, content: list[int]) -> list[int]:
        return [self.tok.im_start_id] + self.tok.encode(f"{role}\n") + content + [self.tok.im_end_id]
