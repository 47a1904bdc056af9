"""The thinker's text tokenizer and its streaming detokenizer.

tiny-omni ships a byte-level BPE of 8192 tokens (`assets/tiny_bpe.json`, trained by
`tools/train_tokenizer.py`) whose token counts on English resemble a production
tokenizer's, so traces sized in tokens behave like real ones.
"""

from __future__ import annotations

import codecs
import functools
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING

from tokenizers import Tokenizer

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

CHAT_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
AUDIO_TOKENS = ("<|audio_start|>", "<|audio_end|>", "<|audio_pad|>")
SPECIAL_TOKENS = CHAT_TOKENS + AUDIO_TOKENS  # tiny-omni's


class TextTokenizer:
    """Byte-level BPE with the chat special tokens, and the audio ones if its model hears
    (`has_audio`; a text-only model's tokenizer has none).

    The special tokens are looked up by name, or taken from `special_ids` (name: id) where the model's
    config gives their ids (Qwen3-Omni's); a generation stops at `stop_ids`: <|im_end|>, and <|endoftext|>
    unless the ids were given (the model's config then names its one end of turn). Any Unicode text
    round-trips: `decode(encode(text)) == text`. A special token (any of the tokenizer's) written in the
    text encodes to its single id, never split.
    """

    def __init__(self, tokenizer: Tokenizer, special_ids: dict[str, int] | None = None) -> None:
        self._tokenizer = tokenizer
        self._special = ({name: tokenizer.token_to_id(name) for name in SPECIAL_TOKENS} if special_ids is None
                         else {name: special_ids.get(name) for name in SPECIAL_TOKENS})
        missing = [name for name, i in self._special.items() if i is None]
        required = CHAT_TOKENS if special_ids is None else CHAT_TOKENS[1:]
        if [name for name in missing if name in required] or 0 < len(set(missing) & set(AUDIO_TOKENS)) < len(AUDIO_TOKENS):
            raise ValueError(f"tokenizer lacks special tokens {missing}")
        self.has_audio = not set(missing) & set(AUDIO_TOKENS)
        self.stop_ids = frozenset(self._special[name] for name in CHAT_TOKENS if name != "<|im_start|>"
                                  and self._special[name] is not None)
        added = {i for i, token in tokenizer.get_added_tokens_decoder().items() if token.special}
        self._special_ids = frozenset(added | {i for i in self._special.values() if i is not None})
        self._literal = Tokenizer.from_str(tokenizer.to_str())
        self._literal.encode_special_tokens = True
        byte_of = _byte_alphabet()
        self._token_bytes = [
            b"" if i in self._special_ids else bytes(byte_of[c] for c in tokenizer.id_to_token(i))
            for i in range(tokenizer.get_vocab_size())
        ]

    @classmethod
    def default(cls) -> TextTokenizer:
        """The tokenizer shipped with tiny-omni (loaded once per process; it is read-only)."""
        return _default_tokenizer()

    @classmethod
    def from_file(cls, path: str | Path | Traversable, special_ids: dict[str, int] | None = None) -> TextTokenizer:
        """Load a tokenizer JSON; FileNotFoundError or ValueError name the file."""
        source = Path(path) if isinstance(path, str) else path
        if not source.is_file():
            raise FileNotFoundError(f"tokenizer file not found: {source}")
        try:
            return cls(Tokenizer.from_str(source.read_text(encoding="utf-8")), special_ids)
        except Exception as exc:
            raise ValueError(f"cannot load tokenizer file {source}: {exc}") from exc

    def encode(self, text: str) -> list[int]:
        return self._tokenizer.encode(text, add_special_tokens=False).ids

    def encode_literal(self, text: str) -> list[int]:
        """Encode untrusted text: special-token strings in it stay ordinary text."""
        return self._literal.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    def token_bytes(self, token_id: int) -> bytes:
        """The UTF-8 bytes a token stands for; empty for a special token."""
        return self._token_bytes[token_id]

    def is_special(self, token_id: int) -> bool:
        return token_id in self._special_ids

    @property
    def vocab_size(self) -> int:
        return len(self._token_bytes)

    @property
    def endoftext_id(self) -> int:
        return self._special["<|endoftext|>"]

    @property
    def im_start_id(self) -> int:
        return self._special["<|im_start|>"]

    @property
    def im_end_id(self) -> int:
        return self._special["<|im_end|>"]

    @property
    def audio_start_id(self) -> int:
        return self._audio("<|audio_start|>")

    @property
    def audio_end_id(self) -> int:
        return self._audio("<|audio_end|>")

    @property
    def audio_pad_id(self) -> int:
        return self._audio("<|audio_pad|>")

    def _audio(self, name: str) -> int:
        if not self.has_audio:
            raise ValueError(f"this tokenizer has no audio tokens ({name}): its model takes text only")
        return self._special[name]


class IncrementalDetokenizer:
    """Turns a stream of token ids into text, each character as soon as it is complete.

    A byte-level token may end inside a multi-byte UTF-8 character: its bytes wait
    for the tokens that finish it. Special tokens add no text. For any ids,
    `"".join(map(push, ids)) + flush() == tokenizer.decode(ids)`, and `flush()` is ""
    whenever the ids end on a character boundary.
    """

    def __init__(self, tokenizer: TextTokenizer) -> None:
        self._tokenizer = tokenizer
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token_id: int) -> str:
        return self._utf8.decode(self._tokenizer.token_bytes(token_id))

    def flush(self) -> str:
        """End the stream: the bytes of an unfinished character become U+FFFD."""
        return self._utf8.decode(b"", final=True)


@functools.cache
def _default_tokenizer() -> TextTokenizer:
    return TextTokenizer.from_file(files("stages.models") / "assets" / "tiny_bpe.json")


def _byte_alphabet() -> dict[str, int]:
    """GPT-2's byte-level alphabet: printable bytes stand for themselves, the rest for chr(256 + i)."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    others = [b for b in range(256) if b not in printable]
    return {chr(b): b for b in printable} | {chr(256 + i): b for i, b in enumerate(others)}
