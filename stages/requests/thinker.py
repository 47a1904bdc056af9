"""A session's resident thinker context: every turn appends inputs, then generates."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from stages.config import SamplingParams
from stages.requests.base import StageRequest
from stages.requests.talker_context import TalkerContext, TalkerContextRule, TalkerPrompt
from stages.requests.token_history import TokenHistory
from stages.requests.tool_call import ToolCallConstraint

if TYPE_CHECKING:
    from stages.grammar import ConstraintCompiler, ToolCallMatcher


@dataclass(frozen=True)
class TurnInput:
    """New context for a turn: token ids, with input embeddings overriding some rows.

    `embeds` holds (offset within `token_ids`, tensor [n, hidden]) spans, e.g. audio
    encoder output placed over audio placeholder tokens. `sampling` None appends
    context without generating; `tag` (what the generation answers, e.g. a turn's id) is echoed on
    every step of it. With a `constraint`, the generation is (or may be) a tool call as it says; a
    constrained turn must generate. `hold`: more input follows at once (the turn that answers this
    item): none of this is computed before it arrives, so both go in one prefill step.
    """

    token_ids: list[int]
    embeds: list[tuple[int, torch.Tensor]] = field(default_factory=list)
    sampling: SamplingParams | None = None
    tag: str | int = ""
    constraint: ToolCallConstraint | None = None
    hold: bool = False


@dataclass(frozen=True)
class ThinkerStep:
    """One generated text token, the row the talker conditions on for it (the hidden state that produced
    it; for a talker that reads the conversation, the token's input embedding), why it stopped, and the
    tag of the generation it belongs to (a turn's id; a duplex frame's index). The first step of a
    generation of a request with a TalkerContextRule carries the talker's prompt rows."""

    token_id: int
    hidden: torch.Tensor
    finish_reason: str | None
    tag: str | int
    talker_prompt: TalkerPrompt | None = None


@dataclass(frozen=True)
class TalkerRows:
    """A runner's result for a chunk with positions the request's TalkerContextRule takes: their rows
    (`is_audio`: over audio placeholders), and what was sampled at the chunk's end (None: nothing)."""

    positions: list[int]
    rows: torch.Tensor
    is_audio: list[bool]
    sample: tuple[int, torch.Tensor] | None = None


class ThinkerRequest(StageRequest):
    """Multi-turn context that stays resident: a new turn prefills only its new tokens.

    Generated tokens join the context, so the next turn continues after them. The
    request finishes only when closed (session end) and not generating. `token_ids` and
    `embed_spans` are by absolute position; what `forget` lets go of (a window's past, see
    SinksAndWindow) leaves both, so a context that runs indefinitely holds a bounded part.
    With a `talker_rule`, the runner returns the rows of the positions it takes (see TalkerRows), the
    request keeps them while they are in the context, and each generation's first step carries them.
    A constrained turn gets its `matcher` from the `compiler` of the stage it joined (set by the stage's
    runner; None: the stage does not constrain, and refuses such a turn); the matcher follows the tokens the
    generation takes, through preemption and recomputation, and is dropped when the generation ends.
    """

    def __init__(self, request_id: str, arrival_time: float, stop_ids: frozenset[int], max_position: int,
                 talker_rule: TalkerContextRule | None = None) -> None:
        super().__init__(request_id, arrival_time)
        self.stop_ids = stop_ids
        self.max_position = max_position
        self.token_ids = TokenHistory()
        self.embed_spans: list[tuple[int, torch.Tensor]] = []
        self.sampling: SamplingParams | None = None
        self.generator: torch.Generator | None = None
        self.num_generated = 0
        self.is_generating = False
        self.is_closed = False
        self.tag: str | int = ""
        self.compiler: ConstraintCompiler | None = None
        self.matcher: ToolCallMatcher | None = None
        self.talker_context = TalkerContext(talker_rule) if talker_rule is not None else None

    @property
    def num_known(self) -> int:
        return len(self.token_ids)

    @property
    def is_finished(self) -> bool:
        return self.is_closed and not self.is_generating

    @property
    def forgotten(self) -> range:
        return self.token_ids.forgotten

    def forget(self, start: int, stop: int) -> None:
        """Let go of the token ids and input embeddings of positions [start, stop)."""
        if stop <= self.forgotten.stop:
            return
        self.token_ids.forget(start, stop)
        self.embed_spans = [kept for span in self.embed_spans if (kept := _outside(span, start, stop)) is not None]

    @property
    def is_dormant(self) -> bool:
        return not self.is_generating and self.num_pending == 0

    def wants_sample(self, end: int) -> bool:
        return self.is_generating and end == len(self.token_ids)

    def append(self, data: TurnInput | None, close: bool = False) -> None:
        if data is not None:
            self._append_turn(data)
        self.is_closed = self.is_closed or close

    def _append_turn(self, turn: TurnInput) -> None:
        if self.is_generating:
            raise ValueError("a turn is still generating; cancel it before appending")
        if turn.sampling is not None and not turn.token_ids:
            raise ValueError("a generating turn needs at least one new token")
        if len(self.token_ids) + len(turn.token_ids) >= self.max_position:
            raise ValueError(
                f"context would reach {len(self.token_ids) + len(turn.token_ids)} tokens, "
                f"the model's maximum is {self.max_position}"
            )
        matcher = self._matcher_of(turn)
        base = len(self.token_ids)
        self.token_ids.extend(turn.token_ids)
        if self.talker_context is not None:
            self.talker_context.extend(turn.token_ids, base)
        self.embed_spans.extend((base + offset, rows) for offset, rows in turn.embeds)
        if turn.hold:
            self.idle_until_known = len(self.token_ids)
        if turn.sampling is not None:
            self.sampling = turn.sampling
            self.generator = torch.Generator().manual_seed(turn.sampling.seed)
            self.num_generated = 0
            self.is_generating = True
            self.tag = turn.tag
            self.matcher = matcher

    def _matcher_of(self, turn: TurnInput) -> ToolCallMatcher | None:
        if turn.constraint is None:
            return None
        if turn.sampling is None:
            raise ValueError("a constrained turn must generate: give it sampling")
        if self.compiler is None:
            raise ValueError("this stage does not constrain tool calls")
        return self.compiler.matcher(turn.constraint, self.stop_ids)

    def advance(self, num_tokens: int, result: tuple[int, torch.Tensor] | TalkerRows | None) -> ThinkerStep | None:
        """`result` is the sampled token and the row for the talker (see ThinkerStep), maybe with talker rows."""
        self.num_computed += num_tokens
        self._skip_forgotten()
        if isinstance(result, TalkerRows):
            self.talker_context.store(result.positions, result.rows, result.is_audio)
            result = result.sample
        if result is None:
            return None
        token_id, hidden = result
        first = self.talker_context is not None and not self.num_generated
        prompt = self.talker_context.prompt(self.token_ids) if first else None
        self.token_ids.append(token_id)
        if self.talker_context is not None:
            self.talker_context.extend([token_id], len(self.token_ids) - 1)
        self.num_generated += 1
        if self.matcher is not None:
            self.matcher.accept(token_id)
        reason = self._finish_reason(token_id)
        if reason is not None:
            self.stop_generation()
        return ThinkerStep(token_id, hidden, reason, self.tag, prompt)

    def _finish_reason(self, token_id: int) -> str | None:
        assert self.sampling is not None
        if token_id in self.stop_ids and not self.sampling.ignore_eos:
            return "stop"
        if self.num_generated >= self.sampling.max_tokens or len(self.token_ids) >= self.max_position:
            return "length"
        return None

    def stop_generation(self) -> None:
        self.is_generating = False
        self.matcher = None

    def truncate(self, num_tokens: int) -> None:
        """Keep the first `num_tokens` positions of the context (e.g. what was heard)."""
        if not isinstance(num_tokens, int) or not 0 <= num_tokens <= len(self.token_ids):
            raise ValueError(f"cannot keep {num_tokens!r} tokens of a {len(self.token_ids)}-token context")
        self.token_ids.truncate(num_tokens)
        if self.talker_context is not None:
            self.talker_context.truncate(num_tokens)
        self.embed_spans = [
            (start, rows[: num_tokens - start]) for start, rows in self.embed_spans if start < num_tokens
        ]
        self.num_computed = min(self.num_computed, num_tokens)
        self.idle_until_known = min(self.idle_until_known, num_tokens)


def _outside(span: tuple[int, torch.Tensor], start: int, stop: int) -> tuple[int, torch.Tensor] | None:
    """What of an embedding span lies outside positions [start, stop) (a span from before `start` is kept
    whole: it holds positions kept before the forgotten ones); None: nothing."""
    span_start, rows = span
    span_stop = span_start + len(rows)
    if span_start < start or span_start >= stop:
        return span
    return (stop, rows[stop - span_start :]) if span_stop > stop else None
