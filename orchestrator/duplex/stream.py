"""A full-duplex session's audio, frame by frame, through the encoder into its thinker request."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import torch

from orchestrator.datapath.request_id import RequestId
from stages.commands import AbortRequest, AddRequest, AppendInput
from stages.kinds import StageKind
from stages.models.tokenizer import IncrementalDetokenizer
from stages.plan import StageOutput
from stages.requests import DuplexFrame, DuplexRequest, EncoderRequest, ThinkerStep

if TYPE_CHECKING:
    from orchestrator.pipeline import Pipeline


@dataclass(frozen=True)
class FrameAnswered:
    """Frame `index` went through the thinker: its tokens, their text, and the time from its tick."""

    index: int
    token_ids: list[int]
    text: str
    latency_s: float
    context_tokens: int


@dataclass(frozen=True)
class StreamFailed:
    """The stream ended: `code` is context_length_exceeded (unbounded context full) or stage_error."""

    code: str
    message: str


DuplexEvent = FrameAnswered | StreamFailed


class DuplexStream:
    """Owns a duplex session's encoder request and resident thinker request.

    `push` buffers the client's 16 kHz audio; `tick(now)`, called at every frame
    boundary, makes each whole frame that has arrived due and sends it to the encoder
    (an encoder chunk is one frame). Encoded frames join the thinker context in order;
    each frame's answer (up to `tokens_per_frame` tokens) becomes a FrameAnswered to
    `listener`. Without a thinker window the context stops before the model's maximum:
    the stream fails with StreamFailed("context_length_exceeded") and sends nothing
    more. `close` aborts both requests; nothing is delivered after it.
    """

    def __init__(self, pipeline: Pipeline, session_id: str, listener: Callable[[DuplexEvent], None],
                 prefix: list[int]) -> None:
        self.pipeline, self.bus, self.listener = pipeline, pipeline.bus, listener
        geometry = pipeline.geometry
        duplex = geometry.duplex
        self.tokens_per_frame = duplex.tokens_per_frame
        self.encoder_id = RequestId(session_id, "duplex-encoder")
        self.thinker_id = RequestId(session_id, "duplex-thinker")
        encoder = geometry.hearing.encoder_request(self.encoder_id, self.bus.clock(), duplex.encoder_frames)
        self.frame_samples = encoder.chunk_frames * encoder.samples_per_frame
        self.max_position = math.inf if geometry.is_windowed else geometry.max_position
        self.num_frames = 0  # frames made due
        self.context_tokens = len(prefix)  # upper bound once every due frame is answered
        self.is_open = True
        self._audio = np.zeros(0, dtype=np.float32)
        self._due: deque[float] = deque()  # tick times of frames sent to the encoder, not yet in the thinker
        self._answering: dict[int, tuple[float, list[int]]] = {}  # frame index -> (tick time, tokens so far)
        self._detok = IncrementalDetokenizer(pipeline.tokenizer)
        self._encoder_frames = duplex.encoder_frames
        self._start(prefix, encoder)

    def _start(self, prefix: list[int], encoder: EncoderRequest) -> None:
        """Add the thinker request and `encoder` (the stream's encoder request), arriving together."""
        tok, geometry, now = self.pipeline.tokenizer, self.pipeline.geometry, encoder.arrival_time
        sampling = replace(geometry.thinker_sampling, max_tokens=self.tokens_per_frame, ignore_eos=False)
        thinker = DuplexRequest(self.thinker_id, now, tok.stop_ids, self.max_position, sampling, prefix)
        for kind, request in ((StageKind.THINKER, thinker), (StageKind.ENCODER, encoder)):
            self.bus.own(request.request_id, self)
            self.bus.submit(kind, AddRequest(request))

    def push(self, audio_16k: np.ndarray) -> None:
        if self.is_open:
            self._audio = np.concatenate([self._audio, audio_16k.astype(np.float32, copy=False)])

    def tick(self, now: float) -> None:
        """Send every whole frame that has arrived to the encoder, due at `now`."""
        whole = len(self._audio) // self.frame_samples
        if not self.is_open or not whole:
            return
        per_frame = self._encoder_frames + self.tokens_per_frame
        if self.context_tokens + whole * per_frame > self.max_position:
            self._fail("context_length_exceeded", f"the stream's context would pass the model's maximum of "
                       f"{self.max_position} tokens; a thinker window (stages.thinker.window) bounds it")
            return
        cut = whole * self.frame_samples
        audio, self._audio = self._audio[:cut], self._audio[cut:]
        self._due.extend([now] * whole)
        self.num_frames += whole
        self.context_tokens += whole * per_frame
        self.bus.submit(StageKind.ENCODER, AppendInput(self.encoder_id, torch.from_numpy(audio)))

    def on_output(self, kind: str, output: StageOutput) -> None:
        if not self.is_open:
            return
        if output.error is not None:
            self._fail("stage_error", f"{kind} stage: {output.error}")
        elif kind == StageKind.ENCODER and output.payload is not None:
            self._to_thinker(output.payload)
        elif kind == StageKind.THINKER and output.payload is not None:
            self._on_step(output.payload)

    def _to_thinker(self, embeddings: torch.Tensor) -> None:
        pad = self.pipeline.tokenizer.audio_pad_id
        for rows in embeddings.split(self._encoder_frames):
            index = self.num_frames - len(self._due)
            self._answering[index] = (self._due.popleft(), [])
            frame = DuplexFrame(index, [pad] * len(rows), rows)
            self.bus.submit(StageKind.THINKER, AppendInput(self.thinker_id, frame))

    def _on_step(self, step: ThinkerStep) -> None:
        tick, tokens = self._answering[step.tag]
        tokens.append(step.token_id)
        if step.finish_reason is None:
            return
        del self._answering[step.tag]
        text = "".join(self._detok.push(t) for t in tokens)
        latency = self.bus.clock() - tick
        self.listener(FrameAnswered(step.tag, tokens, text, latency, self.context_tokens))

    def _fail(self, code: str, message: str) -> None:
        self.close()
        self.listener(StreamFailed(code, message))

    def close(self) -> None:
        if not self.is_open:
            return
        self.is_open = False
        for kind, request_id in ((StageKind.ENCODER, self.encoder_id), (StageKind.THINKER, self.thinker_id)):
            self.bus.disown(request_id)
            self.bus.submit(kind, AbortRequest(request_id))
