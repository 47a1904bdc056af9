"""A reply begun at a pause in the user's speech, before anyone knows the pause ends their turn."""

from __future__ import annotations

import asyncio

from orchestrator.interaction.ids import new_id
from orchestrator.session.events import TurnRequest
from orchestrator.session.session import Session
from orchestrator.session.transcription import Transcription
from orchestrator.session.turn import Turn


class DraftReply:
    """The answer to the speech so far, generated while the user is silent and held back.

    Once a pass of the ASR stage has read all the speech sent before the pause (`heard.paused_text`),
    that text enters the session's context as user item `item_id` and a reply to it starts, with
    nothing reported: its events wait in the turn's queue. At the end of the turn `take()` hands over
    the user item's entry (its task) and the turn when the draft got that far and the final transcript
    is the draft's text (the pause ended the speech: none came after it); otherwise the caller answers
    the turn the usual way. `drop()` (speech resumed, the draft was not taken, or the conversation is
    about to change; idempotent) cancels the reply in every stage and takes both items back out of the context, KV
    included: nobody heard of them. Runs on the event loop.
    """

    def __init__(self, session: Session, heard: Transcription, item_id: str, request: TurnRequest) -> None:
        self.session, self.heard, self.item_id, self.request = session, heard, item_id, request
        self.text: str | None = None
        self.entry: asyncio.Task | None = None
        self.turn: Turn | None = None
        self._mark = session.context.mark()
        self._starting = asyncio.ensure_future(self._start())

    async def _start(self) -> None:
        text = await self.heard.paused_text()
        if text is None or self.session.active_turn is not None:
            return
        self.text = text
        self.entry = self.session.add_user_item(self.item_id, text=text)
        self.turn = self.session.start_turn(self.request, new_id("item"))

    def take(self) -> tuple[asyncio.Task, Turn] | None:
        """(the user item's entry, the reply) if the draft answers the turn that just ended (call after
        closing `heard`), else None: drop it."""
        if self.turn is not None and self.heard.final_text == self.text:
            return self.entry, self.turn
        return None

    def drop(self) -> None:
        self._starting.cancel()
        if self.turn is None:
            return
        self.turn.cancel()
        self.session.context.rollback(self._mark, (self.item_id, self.turn.item_id))
