"""A user item entering a session's thinker context: its audio encoded, or transcribed, first."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import numpy as np
import torch

from orchestrator.datapath.request_id import RequestId
from orchestrator.session.context import ContextSegment, SessionContext
from orchestrator.session.transcription import Transcription
from stages.commands import AddRequest, AppendInput
from stages.kinds import StageKind
from stages.plan import StageOutput
from stages.requests import TurnInput

if TYPE_CHECKING:
    from orchestrator.pipeline import Pipeline


class UserInput:
    """Encodes a user item's audio (if any; refused by a pipeline whose hearing has no encoder), then
    appends the item to the thinker context; or, given the item's `speech` at the ASR stage (a pipeline
    that transcribes), appends what was said, before the item's `text` if it has both. With an edit
    queued behind it (the turn that answers it), the thinker holds the item's tokens for that edit's
    input, so that the two are prefilled in one step.

    `run` resolves to the segment's token count once the item is in the context (0 if the item was
    deleted on its way in: it then never enters), or to an exception saying why it could not be added.
    """

    def __init__(self, pipeline: Pipeline, session: SessionContext, item_id: str, audio: np.ndarray | None, text: str,
                 speech: Transcription | None = None):
        self.pipeline, self.bus = pipeline, pipeline.bus
        self.session, self.item_id, self.audio, self.text, self.speech = session, item_id, audio, text, speech
        self.encoder_id = RequestId(session.session_id, StageKind.ENCODER, item_id)
        self._encoded: asyncio.Future[torch.Tensor | None] = asyncio.get_running_loop().create_future()
        self._embeddings: list[torch.Tensor] = []
        self._previous_edit, self._done = session.reserve_edit()
        session.expect(item_id)

    async def run(self) -> int:
        """Encode (concurrently with earlier edits), then append in order. The edit's completion carries
        why the item failed (None: it is in the context), so that the turn answering it is not answered."""
        failure = "the input was abandoned"
        try:
            if self.speech is not None:
                said = await self.speech.text()
                self.text = " ".join(part for part in (said, self.text) if part)
            embeddings = await self._encode() if self.audio is not None and len(self.audio) else None
            if self._previous_edit is not None:
                await asyncio.shield(self._previous_edit)
            num_tokens = self._append(embeddings) if self.session.may_enter(self.item_id) else 0
            failure = None
            return num_tokens
        except Exception as exc:
            failure = str(exc)
            raise
        finally:
            self.session.arrived(self.item_id)
            self.bus.disown(self.encoder_id)
            if self.speech is not None:
                self.speech.abort()
            self._done.set_result(failure)

    async def _encode(self) -> torch.Tensor:
        request = self.pipeline.geometry.hearing.encoder_request(self.encoder_id, self.bus.clock())
        self.bus.own(self.encoder_id, self)
        self.bus.submit(StageKind.ENCODER, AddRequest(request))
        audio = torch.from_numpy(self.audio.astype(np.float32))
        self.bus.submit(StageKind.ENCODER, AppendInput(self.encoder_id, audio, close=True))
        return await self._encoded

    def on_output(self, kind: str, output: StageOutput) -> None:
        if self._encoded.done():
            return
        if output.error is not None:
            self._encoded.set_exception(RuntimeError(f"encoder stage: {output.error}"))
            return
        if output.payload is not None:
            self._embeddings.append(output.payload)
        if output.is_finished:
            self._encoded.set_result(torch.cat(self._embeddings))

    def _append(self, embeddings: torch.Tensor | None) -> int:
        session = self.session
        num_audio = 0 if embeddings is None else len(embeddings)
        ids, offset = self.pipeline.template.user(self.text, num_audio, not session.segments, session.needs_close)
        embeds = [] if embeddings is None else [(offset, embeddings)]
        session.revive()
        session.append_segment(ContextSegment(self.item_id, ids, embeds))
        held = session.is_followed(self._done)  # the turn answering it (or another item) is queued behind it
        session.submit(AppendInput(session.thinker_id, TurnInput(ids, embeds, hold=held)))
        return len(ids)
