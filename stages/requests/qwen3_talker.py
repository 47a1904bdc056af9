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


class Qwen3TalkerRequest(StageRequest):
    """Positions [0, P) are the prompt: the user rows, then the reply prefix (the assistant header, four
    tts_pad rows, tts_bos, and the reply's first text row, each over a codec id: see TalkerCodecIds), P =
    len(user rows) + 9; a reply with no text fed (one token) has nothing to say: it ends at once. Position
    P + k takes frame k (all its codebooks) plus trailing text entry k. Sampling at position P - 1 + k
    gives frame k's first code; the runner fills the others (the code predictor) unless it ends the reply.

    The thinker's rows arrive one per generated token (`append`: a TalkerPrompt first, then [n, hidden]
    rows); as in the reference, the last generated token is never fed back, so the text the talker reads
    is every row but the last (`fed`). Trailing entry k is fed row k + 1, then tts_eos once the text is
    closed, then tts_pad. Frames whose first code is `codec_ids.eos`, or the `max_tokens`-th, end the
    reply and are not emitted. `code0s` (every sampled first code) is what the repetition penalty reads.
    """

    def __init__(self, request_id: str, arrival_time: float, sampling: SamplingParams,
                 codec_ids: TalkerCodecIds) -> None:
        super().__init__(request_id, arrival_time)
        self.sampling = sampling
        self.generator = torch.Generator().manual_seed(sampling.seed)
        self.codec_ids = codec_ids
        self.prompt: TalkerPrompt | None = None
        self.rows: list[torch.Tensor] = []
        self.frames: list[list[int]] = []
        self.code0s: list[int] = []
        self.is_closed = False
        self.is_done = False

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
        if length is None or self.is_done:
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
        return self.is_done or (self.is_closed and not self.fed)

    def wants_sample(self, end: int) -> bool:
        length = self.prompt_length
        return length is not None and end == length + len(self.frames) and not self.is_done

    def needs_residuals(self, code0: int) -> bool:
        """Whether a sampled first code becomes a frame (the runner then predicts its other codebooks)."""
        return code0 != self.codec_ids.eos and len(self.code0s) + 1 < self.sampling.max_tokens

    def append(self, data: TalkerPrompt | torch.Tensor | None, close: bool = False) -> None:
        if isinstance(data, TalkerPrompt):
            self.prompt = data
        elif data is not None:
            self.rows.extend(data.reshape(-1, data.shape[-1]))
        self.is_closed = self.is_closed or close

    def advance(self, num_tokens: int, result: tuple[int, list[int] | None] | None) -> list[int] | None:
        """`result`: the sampled first code, and the whole frame if it became one."""
        self.num_computed += num_tokens
        if result is None:
            return None
        code0, frame = result
        self.code0s.append(code0)
        if frame is None:
            self.is_done = True
            return None
        self.frames.append(frame)
        return frame
