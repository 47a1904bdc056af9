"""A turn's work at Qwen3-Omni's talker: codec frames from the conversation's rows and the reply's text."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from stages.config import SamplingParams
from stages.requests.base import StageRequest
from stages.requests.talker_context import TalkerPrompt

HEADER_PADS = 4  # tts_pad rows between the assistant header and tts_bos, as the reference lays them out
PREFIX_ROWS = 3 + HEADER_PADS + 2  # the header, the pads, tts_bos and the first text row


@dataclass(frozen=True)
class TalkerCodecIds:
    """The talker's codec ids (all from the model's config.json): the end of speech, and the special
    frames its reply prefix puts under the text rows."""

    eos: int
    nothink: int
    think_bos: int
    think_eos: int
    pad: int
    bos: int
    speaker: int

    @property
    def prefix(self) -> list[int]:
        """Codec ids under the prefix's rows 3..8 (rows 0..2, the assistant header, have none)."""
        return [self.nothink, self.think_bos, self.think_eos, self.speaker, self.pad, self.bos]


@dataclass(frozen=True)
class TalkerTurn:
    """A reply's start at a session's talker: the conversation's rows (see TalkerPrompt), how to draw it, and
    the tag its outputs carry (a reply's outputs that arrive after the next reply started are told apart)."""

    prompt: TalkerPrompt
    sampling: SamplingParams
    tag: str


@dataclass(frozen=True)
class TalkerFrame:
    """One codec frame of the reply `tag`: a code per codebook."""

    codes: list[int]
    tag: str


@dataclass(frozen=True)
class TalkerTurnEnd:
    """What the talker emits once the reply `tag` has all its frames (the request lives on for the next)."""

    tag: str


class Qwen3TalkerRequest(StageRequest):
    """A session's resident talker context. Between replies it holds the KV of the conversation's user rows
    (dormant: the KV tier may move it); each reply (a TalkerTurn, then the reply's text rows, then `close`)
    appends its new user rows and its prefix and generates, and `truncate` back to the user rows ends it.

    Positions [0, P) are the reply's prompt: every user row of the conversation (those held from earlier
    replies are not computed again), then the reply prefix (the assistant header, four tts_pad rows,
    tts_bos, and the reply's first text row, each over a codec id: see TalkerCodecIds), P = len(user rows)
    + 9; a reply with no text fed (one token) has nothing to say: it ends at once. Position P + k takes
    frame k (all its codebooks) plus trailing text entry k. Sampling at position P - 1 + k gives frame k's
    first code; the runner fills the others (the code predictor) unless it ends the reply.

    The thinker's rows arrive one per generated token; as in the reference, the last generated token is never
    fed back, so the text the talker reads is every row but the last (`fed`). Trailing entry k is fed row
    k + 1, then tts_eos once the text is closed, then tts_pad. Frames whose first code is `codec_ids.eos`, or
    the sampling's `max_tokens`-th, end the reply (emitting TalkerTurnEnd) and are not emitted. `code0s` (the
    reply's first codes) is what the repetition penalty reads. The request ends only when aborted.
    """

    def __init__(self, request_id: str, arrival_time: float, codec_ids: TalkerCodecIds) -> None:
        super().__init__(request_id, arrival_time)
        self.codec_ids = codec_ids
        self.prompt: TalkerPrompt | None = None
        self.tag = ""
        self.sampling = SamplingParams()
        self.generator = torch.Generator()
        self.rows: list[torch.Tensor] = []
        self.frames: list[list[int]] = []
        self.code0s: list[int] = []
        self.is_closed = False  # the reply's text is complete
        self.is_generating = False
        self.held_users = 0  # positions of user rows whose KV stays valid for the next reply

    @property
    def fed(self) -> list[torch.Tensor]:
        return self.rows[:-1]

    @property
    def prompt_length(self) -> int | None:
        """P, once the reply's first row is known to be fed."""
        if self.prompt is None or not self.fed:
            return None
        return len(self.prompt.user_rows) + PREFIX_ROWS

    @property
    def num_known(self) -> int:
        length = self.prompt_length
        if length is None or not self.is_generating:
            return self.num_computed
        steps = len(self.frames)
        while steps > 0 and not self.is_trailing_known(steps - 1):
            steps -= 1
        return length + steps

    def is_trailing_known(self, k: int) -> bool:
        return k + 1 < len(self.fed) or self.is_closed

    def trailing(self, k: int) -> torch.Tensor | str:
        """Trailing text entry k: a fed row, or "eos" / "pad" (the tts rows)."""
        if k + 1 < len(self.fed):
            return self.fed[k + 1]
        return "eos" if k + 1 == len(self.fed) else "pad"

    @property
    def is_finished(self) -> bool:
        return False

    @property
    def is_dormant(self) -> bool:
        return not self.is_generating and self.num_pending == 0

    def wants_sample(self, end: int) -> bool:
        length = self.prompt_length
        return self.is_generating and length is not None and end == length + len(self.frames)

    def needs_residuals(self, code0: int) -> bool:
        """Whether a sampled first code becomes a frame (the runner then predicts its other codebooks)."""
        return code0 != self.codec_ids.eos and len(self.code0s) + 1 < self.sampling.max_tokens

    def append(self, data: TalkerTurn | torch.Tensor | None, close: bool = False) -> None:
        if isinstance(data, TalkerTurn):
            self._start(data)
        elif data is not None:
            self.rows.extend(data.reshape(-1, data.shape[-1]))
        self.is_closed = self.is_closed or close
        if self.is_generating and self.is_closed and not self.fed:
            self.is_generating = False

    def _start(self, turn: TalkerTurn) -> None:
        if self.is_generating:
            raise ValueError("the talker is still voicing a reply; stop it before the next")
        self.prompt, self.sampling, self.tag = turn.prompt, turn.sampling, turn.tag
        self.generator = torch.Generator().manual_seed(turn.sampling.seed)
        self.rows, self.frames, self.code0s = [], [], []
        self.is_closed, self.is_generating = False, True
        self.num_computed = min(self.num_computed, self.held_users)
        self.idle_until_known = -1
        self.held_users = len(turn.prompt.user_rows)

    def advance(self, num_tokens: int, result: tuple[int, list[int] | None] | None):
        """`result`: the sampled first code, and the whole frame if it became one. Returns the TalkerFrame, or
        TalkerTurnEnd once the reply ends."""
        self.num_computed += num_tokens
        if result is None:
            return None
        code0, frame = result
        self.code0s.append(code0)
        if frame is None:
            self.is_generating = False
            return TalkerTurnEnd(self.tag)
        self.frames.append(frame)
        return TalkerFrame(frame, self.tag)

    def stop_generation(self) -> None:
        self.is_generating = False

    def truncate(self, num_tokens: int) -> None:
        """Keep the first `num_tokens` positions (the user rows, at most: a reply's end)."""
        if not isinstance(num_tokens, int) or not 0 <= num_tokens <= self.held_users:
            raise ValueError(f"a talker context keeps at most its {self.held_users} user rows, not {num_tokens!r}")
        self.is_generating = False
        self.num_computed = min(self.num_computed, num_tokens)
        self.held_users = num_tokens
