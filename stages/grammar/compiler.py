"""Tool call constraints compiled against a stage's tokenizer, with llguidance.

llguidance rather than xgrammar: one abi3 wheel with no dependencies (xgrammar 0.2.8 brings triton and
apache-tvm-ffi into the server's environment), the engine behind vLLM's `guidance` backend and llama.cpp's
grammars, and Lark grammars that embed a JSON schema (`%json`), so the text around a call's JSON belongs to
the same grammar. A grammar's parser follows tokens and writes the bitmask of the tokens that may come next.
llguidance reads the tokenizer as TextTokenizer sees it (TokenText): an added token the tokenizer does not mark
special (Qwen2.5's "<tool_call>") is text, where llguidance's own reading of a tokenizer file makes every added
token special.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass

import llguidance

from stages.grammar.matcher import ToolCallMatcher
from stages.grammar.vocabulary import Vocabulary
from stages.models.tokenizer import TextTokenizer
from stages.requests.tool_call import ToolCallConstraint

CACHE_SIZE = 128
JSON_FORMAT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}  # json.dumps'


@dataclass(frozen=True)
class CompiledConstraint:
    """A constraint's parser in its start state (each generation follows a copy), `begin` as bytes, and
    whether a reply is a call from its start (forced, or nothing to begin with)."""

    parser: llguidance.LLMatcher
    begin: bytes
    is_call_at_start: bool
    vocab: Vocabulary


class ConstraintCompiler:
    """A stage's compiler of ToolCallConstraints over its tokenizer (the thinker's, see
    stages.factory.thinker_text); it keeps the last CACHE_SIZE constraints it compiled (a session's tools
    are the same every turn). The parser takes the tokenizer's stop ids as its end of sequence; a matcher
    translates them into its generation's own."""

    def __init__(self, tokenizer: TextTokenizer) -> None:
        self._tokenizer = llguidance.LLTokenizer(llguidance.TokenizerWrapper(TokenText(tokenizer)),
                                                 eos_token=sorted(tokenizer.stop_ids))
        self.vocab = Vocabulary(tokenizer)
        self.compiled = functools.lru_cache(maxsize=CACHE_SIZE)(self._compile)

    def matcher(self, constraint: ToolCallConstraint, stop_ids: frozenset[int]) -> ToolCallMatcher:
        """A matcher in the start state of `constraint`, for a generation that stops at `stop_ids`.
        ValueError if there are none, or if the schema is not a JSON object llguidance compiles."""
        if not stop_ids:
            raise ValueError("a constrained generation needs a stop token to end its call")
        return ToolCallMatcher(self.compiled(constraint), stop_ids)

    def _compile(self, constraint: ToolCallConstraint) -> CompiledConstraint:
        parser = llguidance.LLMatcher(self._tokenizer, llguidance.LLMatcher.grammar_from_lark(lark(constraint)),
                                      log_level=0)
        if parser.is_error():
            raise ValueError(f"tool call schema does not compile: {parser.get_error().splitlines()[0]}")
        return CompiledConstraint(parser, constraint.begin.encode(), constraint.forced or not constraint.begin,
                                  self.vocab)


class TokenText:
    """What llguidance.TokenizerWrapper reads of a TextTokenizer: each id's bytes (a special token's name,
    which llguidance marks special), an end of sequence, and the encoding of UTF-8 text."""

    def __init__(self, tokenizer: TextTokenizer) -> None:
        self.special_token_ids = [i for i in range(tokenizer.vocab_size) if tokenizer.is_special(i)]
        self.tokens = [tokenizer.token_bytes(i) for i in range(tokenizer.vocab_size)]
        for i in self.special_token_ids:
            self.tokens[i] = tokenizer.decode([i], skip_special_tokens=False).encode()
        self.eos_token_id, self.bos_token_id = min(tokenizer.stop_ids), None
        self._encode = tokenizer.encode

    def __call__(self, text: bytes) -> list[int]:
        return self._encode(text.decode())


def lark(constraint: ToolCallConstraint) -> str:
    """The Lark grammar of a call: `begin`, the schema's JSON on one line as JSON_FORMAT lays it out, `end`."""
    try:
        schema = json.loads(constraint.schema)
    except ValueError as exc:
        raise ValueError(f"tool call schema is not JSON: {exc}") from None
    if not isinstance(schema, dict):
        raise ValueError(f"tool call schema must be a JSON object, got {constraint.schema[:80]!r}")
    begin, end = (json.dumps(text, ensure_ascii=False) for text in (constraint.begin, constraint.end))
    return f"start: {begin} call {end}\ncall: %json {json.dumps({**schema, 'x-guidance': JSON_FORMAT})}"
