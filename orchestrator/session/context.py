"""One session's thinker context: segments, one per conversation item, resident in one thinker request."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import torch

from orchestrator.datapath.request_id import RequestId
from orchestrator.interaction.events import ContextFull
from stages.commands import (
    AbortRequest,
    AddRequest,
    AppendInput,
    Command,
    KVProtectHint,
    StopGeneration,
    TurnEndingHint,
)
from stages.kinds import StageKind
from stages.plan import StageOutput
from stages.requests import ThinkerRequest, TurnInput

if TYPE_CHECKING:
    from orchestrator.pipeline import Pipeline
    from orchestrator.session.reply.base import Voice

SYSTEM_ITEM = "system"


class ActiveTurn(Protocol):
    """What the context needs of the turn generating into it (a Turn)."""

    @property
    def is_generating(self) -> bool: ...

    def cancel(self, heard_ms: float | None = None) -> None: ...

    def on_output(self, kind: str, output: StageOutput) -> None: ...

    def publish_playback(self) -> None: ...


@dataclass
class ContextSegment:
    """The thinker positions one conversation item occupies, with its embedding overrides."""

    item_id: str
    token_ids: list[int]
    embeds: list[tuple[int, torch.Tensor]] = field(default_factory=list)
    is_closed: bool = True  # ends with <|im_end|>
    spoken: list[int] = field(default_factory=list)  # indices of tokens that became audio, in order
    voice: Voice | None = None  # how its audio maps back to its spoken tokens (None: it was not spoken)

    def keep_for_heard(self, heard_tokens: int) -> int:
        """Tokens of this segment to keep when only `heard_tokens` spoken tokens were heard."""
        if heard_tokens >= len(self.spoken):
            return len(self.token_ids)
        return self.spoken[heard_tokens]

    def cut(self, keep: int) -> None:
        """Keep the first `keep` tokens; the segment is then open (no <|im_end|>)."""
        del self.token_ids[keep:]
        self.spoken = [i for i in self.spoken if i < keep]
        self.is_closed = False


@dataclass(frozen=True)
class ContextMark:
    """Where a context's tail stood (see SessionContext.rollback): its segments, whether the last was closed,
    and the turns started."""

    num_segments: int
    last_closed: bool
    num_turns: int


class SessionContext:
    """Owns a session's resident thinker request and the segments that make up its context.

    Context edits run in the order they were requested: each reserves its place
    with `reserve_edit` when it is created, waits for the edit before it, and
    releases its own place when done, with why it failed (None: it did not). A user item enters the context only between
    generations; a turn holds its place until its thinker generation ends. Edits at
    the tail truncate the resident KV in place; edits further back rebuild the
    context (a new thinker request recomputes it), which is refused while a reply
    is being generated. A context the thinker stage lost (its request failed: the
    stage died) is rebuilt the next time it is used (`revive`).

    Segments are the model's side of the conversation, keyed by the item ids the client sees; the
    client's side (items announced before they are in here, or that never enter) is the protocol
    layer's (liveserve.realtime.conversation says why the two stay).
    """

    def __init__(self, session_id: str, pipeline: Pipeline) -> None:
        self.session_id = session_id
        self.pipeline = pipeline
        self.thinker_id = RequestId(session_id, StageKind.THINKER, 0)
        self.num_rebuilds = 0
        self.segments: list[ContextSegment] = []
        self.active_turn: ActiveTurn | None = None
        self.num_turns = 0
        self.num_turns_taken_back = 0  # turns whose replies left the context unseen (rollback)
        self.is_lost = False
        self._last_edit: asyncio.Future | None = None
        self._arriving: dict[str, bool] = {}  # user items on their way in, by id: whether they may still enter
        self.talker_id: RequestId | None = None  # the resident talker request, once a reply shape added one

    def reserve_edit(self) -> tuple[asyncio.Future | None, asyncio.Future]:
        """(the previous edit's completion, this edit's completion to resolve when done)."""
        previous, mine = self._last_edit, asyncio.get_running_loop().create_future()
        self._last_edit = mine
        return previous, mine

    def is_followed(self, edit: asyncio.Future) -> bool:
        """Another edit was reserved after `edit` (this edit's completion, from `reserve_edit`)."""
        return self._last_edit is not edit

    @property
    def request_ids(self) -> dict[StageKind, RequestId]:
        """The session's requests in the stages that the context owns, by kind: its thinker request, and the
        talker request that reads the conversation where the reply shape keeps one."""
        talker = {StageKind.TALKER: self.talker_id} if self.talker_id is not None else {}
        return {StageKind.THINKER: self.thinker_id, **talker}

    def hint(self, kind: type[KVProtectHint] | type[TurnEndingHint], lead_s: float) -> None:
        """Tell every resident request of the session (their KV) that its next turn comes in `lead_s`."""
        for stage, request_id in self.request_ids.items():
            self.pipeline.bus.submit(stage, kind(request_id, lead_s))

    def resident_talker(self) -> tuple[RequestId, bool]:
        """The id of the session's resident talker request (it lives as long as this context's thinker
        request), and whether it is still to be added to the talker stage (the caller adds it)."""
        is_new = self.talker_id is None
        if is_new:
            self.talker_id = RequestId(self.session_id, StageKind.TALKER, f"context{self.num_rebuilds}")
        return self.talker_id, is_new

    def submit(self, command: Command) -> None:
        """Hand `command` (about the thinker request) to the thinker stage."""
        self.pipeline.bus.submit(StageKind.THINKER, command)

    @property
    def num_tokens(self) -> int:
        return sum(len(s.token_ids) for s in self.segments)

    @property
    def needs_close(self) -> bool:
        return bool(self.segments) and not self.segments[-1].is_closed

    def segment(self, item_id: str) -> ContextSegment | None:
        return next((s for s in self.segments if s.item_id == item_id), None)

    def append_segment(self, segment: ContextSegment) -> None:
        """Add a segment after the others (closing the one before); ContextFull if it does not fit."""
        total, limit = self.num_tokens + len(segment.token_ids), self.pipeline.geometry.max_position
        if total >= limit:
            raise ContextFull(f"the context would reach {total} tokens, the model's maximum is {limit}")
        if self.segments:
            self.segments[-1].is_closed = True
        self.segments.append(segment)

    def start(self, instructions: str = "") -> None:
        """A new resident thinker request holding the session's segments (first the system message, if any;
        ContextFull, nothing changed, if it does not fit)."""
        system = self._system(instructions)
        if system is not None:
            self.segments.insert(0, system)
        tokenizer, bus = self.pipeline.tokenizer, self.pipeline.bus
        geometry = self.pipeline.geometry
        rule = geometry.voice.talker_rule if geometry.voice is not None else None
        request = ThinkerRequest(self.thinker_id, bus.clock(), tokenizer.stop_ids, geometry.max_position, rule)
        bus.own(self.thinker_id, self)
        self.submit(AddRequest(request))
        if self.segments:
            ids, embeds = [], []
            for segment in self.segments:
                embeds += [(len(ids) + offset, rows) for offset, rows in segment.embeds]
                ids += segment.token_ids
            self.submit(AppendInput(self.thinker_id, TurnInput(ids, embeds)))

    def set_instructions(self, instructions: str, tools: str = "") -> None:
        """Replace the system message, of `instructions` and `tools` (what it says of the tools) (the context is
        rebuilt; ContextFull, nothing changed, if it does not fit)."""
        self._check_editable()
        system = self._system(instructions, tools)
        others = [s for s in self.segments if s.item_id != SYSTEM_ITEM]
        self.segments = ([system] if system else []) + others
        self._restart()

    def _system(self, instructions: str, tools: str = "") -> ContextSegment | None:
        ids, limit = self.pipeline.template.system(instructions, tools), self.pipeline.geometry.max_position
        if not ids:
            return None
        if len(ids) >= limit:
            raise ContextFull(f"the instructions take {len(ids)} tokens, the model's context {limit}")
        return ContextSegment(SYSTEM_ITEM, ids)

    def delete(self, item_id: str) -> bool:
        """Remove an item's segment, or withdraw an item still on its way in (see `expect`), so that it
        never enters; whether the item was either."""
        if item_id in self._arriving:
            self._arriving[item_id] = False
            return True
        segment = self.segment(item_id)
        if segment is None:
            return False
        self._check_editable()
        self.segments.remove(segment)
        self._restart()
        return True

    def expect(self, item_id: str) -> None:
        """User item `item_id` is on its way in (being encoded or transcribed); `arrived` ends that."""
        self._arriving[item_id] = True

    def may_enter(self, item_id: str) -> bool:
        """False once an expected item was deleted on its way in."""
        return self._arriving.get(item_id, True)

    def arrived(self, item_id: str) -> None:
        """The expected item `item_id` entered the context, or never will."""
        self._arriving.pop(item_id, None)

    def mark(self) -> ContextMark:
        return ContextMark(len(self.segments), bool(self.segments) and self.segments[-1].is_closed, self.num_turns)

    @property
    def num_seeded_turns(self) -> int:
        """Turns started and not taken back: sampling seeds count these, so a reply taken back changes no
        later reply (turn and request ids count every turn started)."""
        return self.num_turns - self.num_turns_taken_back

    def rollback(self, mark: ContextMark, item_ids: tuple[str, ...]) -> None:
        """Take items `item_ids`, the only ones added since `mark`, back out: those still on their way in never
        enter, those in leave with their KV (truncated in place: they are the context's tail)."""
        self.num_turns_taken_back += self.num_turns - mark.num_turns
        for item_id in item_ids:
            if item_id in self._arriving:
                self._arriving[item_id] = False
        if len(self.segments) > mark.num_segments:
            del self.segments[mark.num_segments:]
            if self.segments:
                self.segments[-1].is_closed = mark.last_closed
            self.submit(StopGeneration(self.thinker_id, self.num_tokens))

    def truncate(self, item_id: str, keep_tokens: int) -> None:
        """Cut an item's segment to its first `keep_tokens` tokens (never lengthens it)."""
        segment = self._segment(item_id)
        if keep_tokens < len(segment.token_ids):
            if segment is not self.segments[-1]:
                self._check_editable()  # before anything changes
            segment.cut(keep_tokens)
            self.edited(segment)

    def truncate_heard(self, item_id: str, heard_ms: float) -> None:
        """Cut an assistant item to the tokens heard by `heard_ms` of its audio (see its `voice`; an item
        that was not spoken keeps them all)."""
        segment = self._segment(item_id)
        if segment.voice is not None:
            self.truncate(item_id, segment.keep_for_heard(segment.voice.heard_tokens(len(segment.spoken), heard_ms)))

    def edited(self, segment: ContextSegment) -> None:
        """Bring the thinker's resident context in line with an edited segment."""
        if segment is self.segments[-1]:
            self.submit(StopGeneration(self.thinker_id, self.num_tokens))
        else:
            self._check_editable()
            self._restart()

    def close(self) -> None:
        """Cancel the active turn and free the context in every stage."""
        if self.active_turn is not None:
            self.active_turn.cancel()
        self.pipeline.bus.disown(self.thinker_id)
        self.submit(AbortRequest(self.thinker_id))
        self._drop_talker()

    def _drop_talker(self) -> None:
        if self.talker_id is not None:
            self.pipeline.bus.disown(self.talker_id)
            self.pipeline.bus.submit(StageKind.TALKER, AbortRequest(self.talker_id))
            self.talker_id = None

    def _segment(self, item_id: str) -> ContextSegment:
        segment = self.segment(item_id)
        if segment is None:
            raise KeyError(f"item {item_id!r} is not in the context")
        return segment

    def _check_editable(self) -> None:
        if self.active_turn is not None and self.active_turn.is_generating:
            raise ValueError("the conversation cannot be edited while a response is being generated")

    def _restart(self) -> None:
        self.pipeline.bus.disown(self.thinker_id)
        self.submit(AbortRequest(self.thinker_id))
        self._drop_talker()  # its user rows were the old context's
        self.num_rebuilds += 1
        self.thinker_id = RequestId(self.session_id, StageKind.THINKER, self.num_rebuilds)
        self.start()

    def revive(self) -> None:
        """Rebuild the context in a new thinker request if the stage lost it (call before appending to it)."""
        if self.is_lost:
            self.is_lost = False
            self._restart()

    def on_output(self, kind: str, output: StageOutput) -> None:
        if output.error is not None and output.request_id == self.thinker_id:
            self.is_lost = True
        if self.active_turn is not None:
            self.active_turn.on_output(kind, output)

    def turn_started(self, turn: ActiveTurn) -> None:
        self.active_turn = turn
        self.num_turns += 1

    def turn_ended(self, turn: ActiveTurn) -> None:
        if self.active_turn is turn:
            self.active_turn = None
