"""A Qwen3-Omni folder served in-process (its stages on threads) from the shipped config, turn by turn, with what
the reference needs to compare: the prompt the thinker saw, the reply's ids and codec frames, its audio."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from liveserve.config.document import override_argument
from liveserve.config.loader import load_config
from liveserve.runtime import configure_torch, make_placement
from orchestrator.orchestrator import Orchestrator
from orchestrator.session.events import AudioDelta, TurnDone, TurnRequest
from stages.requests.qwen3_talker import Qwen3TalkerRequest, TalkerFrame


@dataclass
class ServedReply:
    prompt_ids: list[int]  # the thinker's context when the reply started, its generation prompt included
    text_token_ids: list[int]
    codes: torch.Tensor  # [num_code_groups, frames]
    wav: np.ndarray
    status: str


class ServedOmni:
    """One session on `folder` with greedy replies of at most `thinker_max` text tokens and `talker_max` first
    codes (the reference's thinker_max_new_tokens and talker_max_new_tokens). Frames are recorded as the
    talker's requests take them (`monkeypatch`); the talker's request is the session's, so a reply's frames
    are read before the session's next turn."""

    def __init__(self, folder: Path, thinker_max: int, talker_max: int, monkeypatch: pytest.MonkeyPatch) -> None:
        sets = [f"model.folder={folder}", "runtime.placement=threads",
                f"stages.thinker.sampling.max_tokens={thinker_max}", f"stages.talker.sampling.max_tokens={talker_max}"]
        self.config = load_config("qwen3-omni-tiny-cpu", [override_argument(s) for s in sets])
        self.frames: dict[str, list[list[int]]] = {}  # each talker's latest reply's frames
        advance = Qwen3TalkerRequest.advance

        def recording(request, num_tokens, result):
            frame = advance(request, num_tokens, result)
            if isinstance(frame, TalkerFrame):
                self.frames[request.request_id] = list(request.frames)
            return frame

        monkeypatch.setattr(Qwen3TalkerRequest, "advance", recording)

    async def __aenter__(self) -> ServedOmni:
        configure_torch(self.config.runtime)
        self.orchestrator = Orchestrator(self.config.pipeline, placement=make_placement(self.config))
        await self.orchestrator.start()
        self.sessions, self.num_items = {}, 0
        return self

    async def __aexit__(self, *exc) -> None:
        await self.orchestrator.stop()

    async def turn(self, text: str = "", audio: np.ndarray | None = None, cancel_at_ms: float | None = None,
                   session: str = "parity") -> ServedReply:
        """A user item (text, or 16 kHz audio), then a reply, in `session` (opened at its first turn); with
        `cancel_at_ms`, the user barges in once that much of the reply's audio (and more) has arrived, having
        heard `cancel_at_ms` of it."""
        if session not in self.sessions:
            self.sessions[session] = self.orchestrator.open_session(session)
        self.num_items += 1
        await self.sessions[session].add_user_item(f"user{self.num_items}", audio, text)
        before = self.context_ids(session)
        turn = self.sessions[session].start_turn(TurnRequest())
        pcm, rate, prompt = [], self.orchestrator.geometry.voice.sample_rate, None
        while True:
            event = await turn.events.get()
            if prompt is None:  # the reply's segment is its generation prompt and what was generated so far
                prompt = before + turn.segment.token_ids[: len(turn.segment.token_ids) - len(turn.generated)]
            if isinstance(event, AudioDelta):
                pcm.append(event.pcm)
                if cancel_at_ms is not None and 1000 * sum(map(len, pcm)) / rate > 2 * cancel_at_ms:
                    turn.cancel(cancel_at_ms)
            elif isinstance(event, TurnDone):
                break
        codes = torch.tensor(self.frames.get(turn.reply.ids["talker"], [])).T
        wav = np.concatenate(pcm) if pcm else np.zeros(0)
        return ServedReply(prompt, list(event.token_ids), codes, wav, event.status)

    def context_ids(self, session: str) -> list[int]:
        """The session's context now (what the thinker holds)."""
        return [t for segment in self.sessions[session].context.segments for t in segment.token_ids]
