"""One session's work in the pipeline: its context, its turns, its duplex stream, what the stages know of it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import numpy as np

from orchestrator.duplex.hub import DuplexHub
from orchestrator.duplex.stream import DuplexEvent, DuplexStream
from orchestrator.interaction.events import UserTranscript
from orchestrator.interaction.interaction_state import InteractionState
from orchestrator.interaction.next_use import NextUseEstimator
from orchestrator.pipeline import Pipeline
from orchestrator.session.context import SYSTEM_ITEM, SessionContext
from orchestrator.session.events import TurnRequest
from orchestrator.session.transcription import Transcription
from orchestrator.session.turn import Turn
from orchestrator.session.user_input import UserInput
from stages.commands import KVProtectHint, TurnEndingHint


class Session:
    """A session's mechanisms, without judgement: what to do when is the InteractionController's.

    All methods run on the event loop. `context` is the session's thinker context; at most one
    turn is active at a time. `interaction` owns what the stages are told of the interaction (the
    reply's playback, when the context is needed next); speech hints for KV preload go from here.
    """

    def __init__(self, session_id: str, pipeline: Pipeline, next_use: NextUseEstimator, duplex: DuplexHub,
                 on_close: Callable[[], None] = lambda: None) -> None:
        self.session_id = session_id
        self.pipeline = pipeline
        self.context = SessionContext(session_id, pipeline)
        self.interaction = InteractionState(next_use, pipeline.bus.board, pipeline.clock,
                                            lambda: self.context.thinker_id, self._publish_reply_playback)
        self._duplex = duplex
        self._on_close = on_close

    @property
    def active_turn(self) -> Turn | None:
        return self.context.active_turn

    def start(self, instructions: str = "") -> None:
        self.context.start(instructions)

    def add_user_item(self, item_id: str, audio: np.ndarray | None = None, text: str = "",
                      speech: Transcription | None = None,
                      on_transcript: Callable[[UserTranscript], None] = lambda transcript: None) -> asyncio.Task:
        """Append a user message (16 kHz audio and/or text); the task resolves once it is in context.

        In a pipeline that transcribes, the item's speech is what the ASR stage hears: `speech`, its
        request already fed (while the user spoke), or else `audio`, transcribed now; every
        transcript of it goes to `on_transcript`."""
        self.interaction.on_user_input()
        if speech is None and audio is not None and len(audio) and self.pipeline.geometry.hearing.transcribes:
            speech = self.transcribe(item_id, on_transcript)
            speech.append(audio, close=True)
        if speech is not None:
            audio = None
        return asyncio.ensure_future(UserInput(self.pipeline, self.context, item_id, audio, text, speech).run())

    def transcribe(self, item_id: str, on_text: Callable[[UserTranscript], None],
                   partials: bool = False) -> Transcription:
        """A new ASR request for user item `item_id`'s speech (with `partials`, partial transcripts as
        often as the ASR stage's `partial_every_s` says); ValueError if the pipeline has no ASR stage."""
        return self.pipeline.geometry.hearing.transcription(self.pipeline.bus, self.session_id, item_id, on_text,
                                                            partials)

    def start_turn(self, request: TurnRequest, item_id: str | None = None) -> Turn:
        """Generate a reply after every earlier item has entered the context."""
        context = self.context
        if context.active_turn is not None:
            raise ValueError(f"session {self.session_id!r} already has an active turn")
        turn_id = f"{self.session_id}/turn{context.num_turns}"
        turn = Turn(turn_id, item_id or turn_id, context, request, self.pipeline, self.interaction)
        context.turn_started(turn)
        self.interaction.on_turn_started()
        asyncio.ensure_future(turn.run())
        return turn

    def cancel_turn(self, heard_ms: float | None = None) -> bool:
        """Stop the active reply, keeping in context what was heard (everything routed if None)."""
        turn = self.context.active_turn
        if turn is not None:
            turn.cancel(heard_ms)
        return turn is not None

    def _publish_reply_playback(self) -> None:
        if self.context.active_turn is not None:
            self.context.active_turn.publish_playback()

    def speech_started(self) -> None:
        """The user started speaking: their next turn needs the context soon (protect and preload its KV)."""
        self.interaction.on_speech_started()
        self.context.hint(KVProtectHint, self.interaction.lead_s)

    def speech_paused(self, lead_s: float) -> None:
        """The user went quiet: unless they go on, the turn ends in `lead_s` (the KV may come back now)."""
        self.context.hint(TurnEndingHint, lead_s)

    def open_duplex(self, listener: Callable[[DuplexEvent], None]) -> DuplexStream:
        """Start the session's full-duplex stream; its context starts with the system message, if any."""
        self.pipeline.geometry.hearing.check_duplex()
        prefix = [t for s in self.context.segments if s.item_id == SYSTEM_ITEM for t in s.token_ids]
        return self._duplex.open(self.session_id, prefix, listener)

    def close_duplex(self) -> None:
        self._duplex.close(self.session_id)

    def close(self) -> None:
        """Stop everything of the session and free it in every stage."""
        self.close_duplex()
        self.context.close()
        self._on_close()
